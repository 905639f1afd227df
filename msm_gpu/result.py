"""The result object returned by every solver, in the spirit of scipy's OptimizeResult."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class SolveResult:
    """Outcome of :func:`msm_gpu.solve` (and ``nnls``, ``least_squares``).

    Attributes
    ----------
    x : array
        The solution, same array type (NumPy/CuPy) and shape as the user's R.
    fun : float
        Objective at ``x`` (for ``nnls``/``least_squares`` the least-squares objective
        ``1/2 ||C x - D||^2 + h(x)``, constant included), computed exactly at the end.
    n_iter : int
        Iterations performed (sweeps over all still-active columns).
    converged : bool
        True when every column met the stopping rule.
    message : str
        Why the run stopped.
    objective : ndarray
        Objective after 0, 1, ..., n_iter iterations (float64, on the host); empty when
        ``record_objective=False``.
    backend : str
        "cpu" or "cuda".
    time : float
        Wall-clock seconds of the whole call (validation and transfers included).
    method : str
        "msm" or the baseline used.
    converged_columns : ndarray of bool
        Per column (problem): whether it met the stopping rule.
    n_iter_columns : ndarray of int
        Per column: iterations it was swept for.
    timings : dict
        Seconds spent in "setup" (validation, transfers, splitting) and "iterations".
    info : dict
        Method details: omega, theta, delta (MSM) or the Lipschitz constant L (baselines).
    """

    x: object
    fun: float
    n_iter: int
    converged: bool
    message: str
    objective: np.ndarray
    backend: str
    time: float
    method: str = "msm"
    converged_columns: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    n_iter_columns: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    timings: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)

    @property
    def nit(self) -> int:
        """Alias of ``n_iter`` (scipy's name)."""
        return self.n_iter

    @property
    def success(self) -> bool:
        """Alias of ``converged`` (scipy's name)."""
        return self.converged

    @classmethod
    def from_blocks(cls, blocks, x, *, converged_columns, n_iter_columns, started, method):
        """One result from the results of independent column blocks of one batch.

        ``fun`` is the sum of the blocks' objectives (columns are separable), ``n_iter`` the
        largest block count, ``objective[t]`` the sum over blocks of each block's objective
        after ``min(t, its n_iter)`` iterations (what one run records, done columns being
        frozen), ``timings`` the blocks' seconds summed, ``info`` the first block's plus
        ``n_blocks``; ``time`` counts from ``started`` (a ``time.perf_counter()`` value).
        """
        import time

        messages = list(dict.fromkeys(b.message for b in blocks))
        timings: dict = {}
        for b in blocks:
            for key, val in b.timings.items():
                timings[key] = timings.get(key, 0.0) + float(val)
        converged_columns = np.asarray(converged_columns, dtype=bool)
        return cls(
            x=x,
            fun=float(sum(b.fun for b in blocks)),
            n_iter=max(b.n_iter for b in blocks),
            converged=bool(converged_columns.all()),
            message=messages[0] if len(messages) == 1 else "; ".join(messages),
            objective=combined_objective(blocks),
            backend=",".join(dict.fromkeys(b.backend for b in blocks)),
            time=time.perf_counter() - started,
            method=method,
            converged_columns=converged_columns,
            n_iter_columns=np.asarray(n_iter_columns),
            timings=timings,
            info={**blocks[0].info, "n_blocks": len(blocks)},
        )

    def __repr__(self):
        shape = getattr(self.x, "shape", None)
        return (
            f"SolveResult(method={self.method!r}, backend={self.backend!r}, fun={self.fun:.10g}, "
            f"n_iter={self.n_iter}, converged={self.converged}, x.shape={shape}, "
            f"time={self.time:.3g}s, message={self.message!r})"
        )


def combined_objective(blocks):
    """sum_b obj_b[min(t, n_iter_b)] for t = 0..max n_iter; empty if not recorded."""
    if any(len(b.objective) == 0 for b in blocks):
        return np.zeros(0)
    length = max(len(b.objective) for b in blocks)
    total = np.zeros(length)
    for b in blocks:
        obj = np.asarray(b.objective, dtype=np.float64)
        total += np.concatenate([obj, np.full(length - len(obj), obj[-1])])
    return total


@dataclass
class IterationInfo:
    """What a callback receives after each iteration.

    ``x`` is the whole current iterate (user's array type and shape); ``fun`` the
    objective tracked by the driver (NaN when ``record_objective=False``).
    """

    x: object
    fun: float
    n_iter: int
    n_active: int
