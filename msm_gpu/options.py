"""The options of :func:`msm_gpu.solve`, typed, with their defaults written once.

``solve``'s signature reads its defaults from :class:`SolveOptions` (class attributes
of a dataclass are its defaults), and ``least_squares``/``nnls`` forward their keywords
through :meth:`SolveOptions.from_keywords`, so a default lives in exactly one place.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from ._input import validation as v
from ._input.memory import check_max_memory
from .finish.run import check_finish
from .solvers.splitting import DEFAULT_OMEGA, DEFAULT_THETA

#: Every value ``method=`` accepts: MSM first, then the paper's comparators.
METHODS = ("msm", "pgm", "pgm_ls", "apg", "apg_ls")
#: The proximal-gradient comparators (``msm_gpu.solvers``).
BASELINE_METHODS = METHODS[1:]


@dataclass(frozen=True)
class SolveOptions:
    """Everything :func:`msm_gpu.solve` accepts besides the problem data.

    See :func:`msm_gpu.solve` for the meaning of each field.  ``panel=None`` means
    "chosen from n" (:func:`msm_gpu.backends.base.default_panel`).
    """

    omega: float = DEFAULT_OMEGA
    theta: float = DEFAULT_THETA
    tol: float = 1e-6
    max_iter: int = 1000
    time_limit: float | None = None
    record_objective: bool = True
    callback: object = None
    panel: int | None = None
    check_convergence: bool = True
    method: str = "msm"
    verbose: bool = False
    finish: str | None = "auto"
    threads: int | None = None
    max_memory: int | None = None

    @property
    def finishes(self) -> bool:
        """MSM followed by the exact finish.  Not with ``finish=None`` (the paper's plain
        MSM), nor for "auto" with ``tol=0``: that asks for exactly ``max_iter`` plain
        iterations (a KKT residual of 0 is no target for a finish; "exact" still
        finishes)."""
        if self.method != "msm" or self.finish is None:
            return False
        return not (self.finish == "auto" and self.tol == 0)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_keywords(cls, **keywords) -> SolveOptions:
        """Options from keyword arguments; unknown names are a TypeError naming them."""
        unknown = set(keywords) - set(cls.names())
        if unknown:
            raise TypeError(f"unexpected keyword argument(s): {', '.join(sorted(unknown))}")
        return cls(**keywords)

    def checked(self, n: int) -> SolveOptions:
        """A validated copy (ValueError/TypeError naming the option), panel resolved for n."""
        from .backends.base import default_panel

        if self.method not in METHODS:
            raise ValueError(
                f"method must be one of {', '.join(map(repr, METHODS))}, got {self.method!r}"
            )
        checked = {
            "omega": v.check_real(
                self.omega, "omega", low=0.0, high=2.0, low_open=True, high_open=True
            ),
            "theta": v.check_real(self.theta, "theta", low=0.0),
            "tol": v.check_real(self.tol, "tol", low=0.0),
            "max_iter": v.check_int(self.max_iter, "max_iter", low=0),
            "time_limit": v.check_time_limit(self.time_limit),
            "record_objective": bool(self.record_objective),
            "callback": v.check_callback(self.callback),
            "verbose": bool(self.verbose),
            "finish": check_finish(self.finish),
            "max_memory": check_max_memory(self.max_memory),
        }
        if self.threads is not None:
            checked["threads"] = v.check_int(self.threads, "threads", low=1)
        panel = default_panel(n) if self.panel is None else v.check_int(self.panel, "panel", low=1)
        return replace(
            self, **checked, panel=min(panel, n), check_convergence=bool(self.check_convergence)
        )
