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

    def __repr__(self):
        shape = getattr(self.x, "shape", None)
        return (
            f"SolveResult(method={self.method!r}, backend={self.backend!r}, fun={self.fun:.10g}, "
            f"n_iter={self.n_iter}, converged={self.converged}, x.shape={shape}, "
            f"time={self.time:.3g}s, message={self.message!r})"
        )


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
