"""One small least-squares problem with a convex piecewise-linear penalty, at default options.

``mg.least_squares(C, d, mg.L1(lam))`` on a small dense C spends about half a millisecond
in the layers a batch needs (validation objects, rescaling, the design form's set-up and
sweeps, the result's bookkeeping) around an exact solve of tens of microseconds: more than
scikit-learn's ``Lasso`` takes for the same problem.  :mod:`.small_nnls` removed those
layers for NNLS; :func:`try_small` does the same for every penalty the active set solves
exactly (Zero, Box, NonNeg, L1, NonNegL1, scalar or per-row parameters): where nothing
calls for the batch's layers (NumPy float64 input, finite, of moderate scale, one
right-hand side, no option but ``tol``), Lawson & Hanson's active set on the equilibrated C'C
(:func:`msm_gpu.solvers.pwl_active_set.pwl_active_set`, the Gram form's finish) solves it,
and the result is the general road's: the same ``x`` to rounding, F, the same relative KKT
residual and ``converged`` rule.  NNLS keeps its own road (:mod:`.small_nnls`: its QR
polish where C'C is ill-conditioned).  Anything else, and a solve that does not meet the
KKT conditions, returns None: the general road takes the call.
"""

from __future__ import annotations

import time

import numpy as np

from .._input.scaling import equilibration
from ..penalties import CODE_BOX, CODE_L1, NonNeg, Penalty, Zero
from ..solvers.pwl_active_set import pwl_active_set
from .faces import Faces
from .small_nnls import SCALE_LIMITS, fits_small, small_result, try_small_nnls


def try_small(C, d, penalty, tol):
    """The result of ``least_squares(C, d, penalty)`` at default options but ``tol`` (the
    default or the one given), or None where the general road must take the call (see
    the module docstring).  The user's arrays are only read."""
    if penalty is None:
        penalty = Zero()
    if type(penalty) is NonNeg:
        return try_small_nnls(C, d, tol)
    if not isinstance(penalty, Penalty) or penalty.code not in (CODE_BOX, CODE_L1):
        return None
    if not fits_small(C, d) or not _fits_penalty(penalty, C.shape[1]):
        return None
    return _solve(C, d, penalty, tol)


def _fits_penalty(penalty, n) -> bool:
    """Per-row parameters of length n, and an l1 weight of moderate scale (the general
    road rescales the others, or names what is wrong with them)."""
    for bound in (penalty.lb, penalty.ub):
        if isinstance(bound, np.ndarray) and bound.shape != (n,):
            return False
    if penalty.code == CODE_L1:
        lam = float(penalty.lam)
        return lam == 0.0 or SCALE_LIMITS[0] <= lam <= SCALE_LIMITS[1]
    return True


def _solve(C, d, penalty, tol):
    started = time.perf_counter()
    m, n = C.shape
    column = d.ndim == 2  # D given as one column: x is one column too
    d = np.ascontiguousarray(d.reshape(m))
    c = np.asfortranarray(C)  # a copy unless C is Fortran-ordered: columns read often
    squares = np.einsum("ij,ij->j", c, c)
    if not np.all(squares > 0.0):
        return None  # an empty column: the general road's care of zero curvature
    # the Jacobi equilibration in powers of two (exact), as the general road's design form:
    # S C'C S has a diagonal in [0.5, 2), y = x / s
    s = equilibration(squares)
    gram = (c.T @ c) * s[:, None] * s[None, :]
    ctd = c.T @ d
    faces = Faces(np, penalty, n, row_scale=s)
    y, status, _ = pwl_active_set(gram, (-ctd * s)[:, None], faces, np.zeros((n, 1)), threads=1)
    if status[0] != 1:
        return None
    x = y[:, 0] * s
    set_up = time.perf_counter()
    info = {
        "representation": "gram",
        "finish": "auto",
        "finish_method": "active_set",
        "small_problem": True,
    }
    return small_result(c, d, x, squares, ctd, penalty, tol, column, (started, set_up), info)
