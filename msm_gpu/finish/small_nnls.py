"""One small NNLS problem at default options, without the batch machinery.

``mg.nnls(C, d)`` with a small dense C and one right-hand side spends about half a
millisecond in the layers a batch needs (validation objects, rescaling, the design form's
set-up, the result's bookkeeping) around a solve of tens of microseconds: ten to seventy
times SciPy's ``nnls`` on the same problem.  Where nothing calls for those layers (NumPy
float64 input, finite, of moderate scale, no option but ``tol``), :func:`try_small_nnls` solves
the problem by Lawson & Hanson's active set on C'C (:mod:`msm_gpu.solvers.nnls_columns`;
where C'C is ill-conditioned, its face solved again from C by QR, the polish of
:mod:`msm_gpu.finish.design_polish`) and returns the result the general road would: the
same ``x`` to rounding, F, the same relative KKT residual and ``converged`` rule.
Anything else (and a solve that does not meet the KKT conditions) returns None: the
general road takes the call.
"""

from __future__ import annotations

import time

import numpy as np

from ..penalties import NonNeg
from ..result import SolveResult
from ..solvers.nnls_columns import nnls_active_set
from .design_polish import MAX_FACE_SOLVES, POLISH_COND, _polish_range
from .objective import kkt_residual_from

#: Most entries of C taken here (beyond, the solve is most of the call's time anyway).
MAX_ENTRIES = 1 << 16
#: Most unknowns: the general road's sweeps pay off before the active set above this.
MAX_N = 128
#: The data's largest magnitudes must lie within these powers of ten: outside, the general
#: road's rescaling by powers of two keeps the products in range.
SCALE_LIMITS = (1e-100, 1e100)
_NONNEG = NonNeg()


def fits_small(C, d) -> bool:
    """Plain NumPy float64, C (m, n) small and d (m,) or (m, 1), finite and of moderate
    scale."""
    if type(C) is not np.ndarray or type(d) is not np.ndarray:
        return False
    if C.dtype != np.float64 or d.dtype != np.float64 or C.ndim != 2:
        return False
    if not (d.ndim == 1 or (d.ndim == 2 and d.shape[1] == 1)):
        return False
    m, n = C.shape
    if not (0 < n <= MAX_N and 0 < m and m * n <= MAX_ENTRIES and d.shape[0] == m):
        return False
    low, high = SCALE_LIMITS
    for a in (C, d):
        top = float(np.max(np.abs(a)))  # NaN makes every comparison below False
        if not low <= top <= high:
            return False
    return True


def try_small_nnls(C, d, tol):
    """The result of ``nnls(C, d)`` at default options but ``tol`` (the default or the one
    given), or None where the general road must take the call (see the module
    docstring).  The user's arrays are only read."""
    started = time.perf_counter()
    if not fits_small(C, d):
        return None
    m, n = C.shape
    column = d.ndim == 2  # D given as one column: x is one column too
    d = np.ascontiguousarray(d.reshape(m))
    c = np.asfortranarray(C)  # a copy unless C is Fortran-ordered: columns read often
    norms = np.sqrt(np.einsum("ij,ij->j", c, c))
    if not np.all(norms > 0.0):
        return None  # an empty column: the general road's care of zero curvature
    # Lawson & Hanson on G = C'C (the general road's small active set); where G is
    # ill-conditioned its face solved again from C by QR (the polish: usually one solve)
    stats = {}
    ctd = c.T @ d
    x, ok, _ = nnls_active_set(c.T @ c, ctd[:, None], threads=1, stats=stats)
    if not ok[0]:
        return None
    x = x[:, 0]
    set_up = time.perf_counter()
    if stats["cond"] > POLISH_COND:
        # the polish of the general road, kept where F drops; unfinished: the general road
        max_solves = MAX_FACE_SOLVES[0] * n + MAX_FACE_SOLVES[1]
        xf, flags = np.asfortranarray(x[:, None]), np.zeros((2, 1), dtype=np.bool_)
        _polish_range(c, norms, d[:, None], xf, 0, 1, max_solves, flags[0], flags[1])
        if flags[1, 0]:
            return None
        x = xf[:, 0]
    info = {
        "representation": "design",
        "finish": "auto",
        "finish_method": "active_set",
        "finish_polished": bool(stats["cond"] > POLISH_COND),
        "small_problem": True,
    }
    return small_result(c, d, x, norms**2, ctd, _NONNEG, tol, column, (started, set_up), info)


def small_result(c, d, x, diag, ctd, penalty, tol, column, times, info, cx=None, ax=None):
    """The SolveResult of a small road's answer ``x`` of min 1/2 ||C x - d||^2 + h(x)
    (``c`` in either order, ``diag`` = ||c_j||^2, ``ctd`` = C'd), as the general road reports
    it: F, its relative KKT residual from C (design form: A x = C'(C x), r = -C'd) and
    its ``converged`` rule; None where F is not finite or the KKT residual is above
    ``tol`` (the general road then takes the call).  ``column``: x as one column;
    ``times`` = (started, set up); ``info`` (the road's entries) gains the KKT
    residual.  ``cx`` = C x and ``ax`` = C'C x where the caller has them (else formed
    here)."""
    started, set_up = times
    cx = c @ x if cx is None else cx
    ax = c.T @ cx if ax is None else ax
    residual = cx - d
    fun = 0.5 * float(residual @ residual) + float(np.sum(penalty.value(x)))
    kkt = kkt_residual_from(np, ax[:, None], -ctd[:, None], diag, x[:, None], penalty)
    kkt = np.asarray(kkt, dtype=np.float64).reshape(1)
    if not (np.isfinite(fun) and kkt[0] <= tol):
        return None
    info = {**info, "kkt_residual": kkt}
    road = "working set" if "working_set" in info else "small problem"
    start_f = 0.5 * float(d @ d) + float(np.sum(penalty.value(np.zeros(x.shape[0]))))  # x = 0
    ended = time.perf_counter()
    return SolveResult(
        x=x[:, None] if column else x,
        fun=fun,
        n_iter=0,
        converged=True,
        message=f"converged: KKT residual <= tol = {tol:g} ({road})",
        objective=np.array([start_f, fun]),
        backend="cpu",
        time=ended - started,
        method="msm",
        converged_columns=np.ones(1, dtype=bool),
        n_iter_columns=np.zeros(1, dtype=np.int64),
        timings={"setup": set_up - started, "iterations": 0.0, "finish": ended - set_up},
        info=info,
    )
