"""Anderson extrapolation of MSM sweeps (Bertrand & Massias 2021, "Anderson acceleration
of coordinate descent"; skglm's and celer's working-set solvers use it).

Once the support settles, a sweep of eq. (9) is a fixed linear map on the nonzeros, and
its iterates converge linearly at a rate that an ill-conditioned face makes close to 1.
The combination sum_a c_a x_{a+1} of the last depth + 1 iterates that best cancels their
differences (sum_a c_a = 1) extrapolates to the fixed point; it is kept only where it
lowers F, so the sweeps' monotone decrease (Theorem 1) holds with it.
"""

from __future__ import annotations

import math

import numpy as np

from ..backends.cpu.jit import njit
from ..backends.cpu.kernels import h_scalar
from .nnls_columns import FAST
from .pwl_active_set import _move

#: Iterates combined by one extrapolation (skglm's default).
DEPTH = 5


@njit(nogil=True)
def solve_ones(gram):
    """c = G^-1 1 / (1' G^-1 1), the weights of the extrapolation, by Cholesky of
    G + 1e-10 tr(G)/d I (the differences of converging iterates are nearly dependent);
    None if G is 0 or the solve breaks down."""
    d = gram.shape[0]
    tr = 0.0
    for a in range(d):
        tr += gram[a, a]
    if not tr > 0.0:
        return None
    low = np.zeros((d, d))
    for a in range(d):
        for c in range(a + 1):
            acc = gram[a, c] + (1e-10 * tr / d if a == c else 0.0)
            for q in range(c):
                acc -= low[a, q] * low[c, q]
            if a == c:
                if not acc > 0.0:
                    return None
                low[a, a] = math.sqrt(acc)
            else:
                low[a, c] = acc / low[c, c]
    z = np.ones(d)
    for a in range(d):  # L z = 1
        for q in range(a):
            z[a] -= low[a, q] * z[q]
        z[a] /= low[a, a]
    for a in range(d - 1, -1, -1):  # L' c = z
        for q in range(a + 1, d):
            z[a] -= low[q, a] * z[q]
        z[a] /= low[a, a]
    total = z.sum()
    if not (abs(total) > 0.0 and math.isfinite(total)):
        return None
    return z / total


@njit(nogil=True, fastmath=FAST)
def extrapolation_weights(xs, depth, n_cols):
    """The weights c (sum c = 1) of the combination sum_a c_a xs[a + 1] whose differences
    sum_a c_a (xs[a + 1] - xs[a]) are smallest, from the first ``n_cols`` entries of the
    ``depth`` + 1 recorded iterates (rows of ``xs``); None where they cannot be found."""
    gram = np.zeros((depth, depth))
    for a in range(depth):
        for c in range(a + 1):
            acc = 0.0
            for t in range(n_cols):
                acc += (xs[a + 1, t] - xs[a, t]) * (xs[c + 1, t] - xs[c, t])
            gram[a, c] = acc
            gram[c, a] = acc
    return solve_ones(gram)


@njit(nogil=True)
def design_history(n, m):
    """Workspace of :func:`record_and_extrapolate` for one column: (iterates on the rows,
    their residuals, the extrapolated point, its residual, what the projection moved
    each row by, count)."""
    return (
        np.empty((DEPTH + 1, n)),
        np.empty((DEPTH + 1, m)),
        np.empty(n),
        np.empty(m),
        np.empty(n),
        np.zeros(1, dtype=np.int64),
    )


# The work that does not read C is in functions of their own (compiled once, not once per
# form of C as the caller is), with loops in place of slice assignments (Numba compiles a
# shape-mismatch message for each: docs/first_call.md).


@njit(nogil=True)
def _record(res, x, rows, n_rows, history):
    """Store the iterate and its residual; returns whether DEPTH + 1 are stored."""
    xs, rs, _, _, _, count = history
    k = count[0]
    for a in range(n_rows):
        xs[k, a] = x[rows[a]]
    for s in range(res.shape[0]):
        rs[k, s] = res[s]
    count[0] = k + 1
    if k < DEPTH:
        return False
    count[0] = 0
    return True


@njit(nogil=True, fastmath=FAST)
def _combine(rows, n_rows, params, history):
    """x_ext = the extrapolation projected into each row's bounds, r_ext the same
    combination of the residuals, shift[t] = what the projection moved row t by.
    Returns False where the weights cannot be found."""
    xs, rs, x_ext, r_ext, shift, _ = history
    coef = extrapolation_weights(xs, DEPTH, n_rows)
    if coef is None:
        return False
    for s in range(r_ext.shape[0]):
        r_ext[s] = 0.0
    for a in range(DEPTH):
        ca = coef[a]
        for s in range(r_ext.shape[0]):
            r_ext[s] += ca * rs[a + 1, s]
    for t in range(n_rows):
        v = 0.0
        for a in range(DEPTH):
            v += coef[a] * xs[a + 1, t]
        j = rows[t]
        inside = min(max(v, params[j, 1]), params[j, 2])
        x_ext[t] = inside
        shift[t] = inside - v
    return True


@njit(nogil=True, fastmath=FAST)
def _keep_if_lower(res, x, rows, n_rows, code, params, history):
    """Move (x, res) to (x_ext, r_ext) where F falls; returns the change (<= 0)."""
    _, _, x_ext, r_ext, _, _ = history
    change = 0.0
    for t in range(n_rows):
        j = rows[t]
        lam, lb, ub, p = params[j, 0], params[j, 1], params[j, 2], params[j, 3]
        change += h_scalar(code, x_ext[t], lam, lb, ub, p) - h_scalar(code, x[j], lam, lb, ub, p)
    for s in range(res.shape[0]):
        change += 0.5 * (r_ext[s] - res[s]) * (r_ext[s] + res[s])
    if not change < 0.0:
        return 0.0
    for t in range(n_rows):
        x[rows[t]] = x_ext[t]
    for s in range(res.shape[0]):
        res[s] = r_ext[s]
    return change


@njit(nogil=True)
def record_and_extrapolate(src, res, x, rows, n_rows, code, params, history):
    """Record the sweep's x on rows[:n_rows] and its residual res = C x - d; after
    DEPTH + 1 of them, move (x, res) to the extrapolation (projected into each row's
    bounds) where that lowers F = 1/2 ||res||^2 + h(x).  The residual is linear in x, so
    the extrapolated one is the same combination of the recorded ones (no pass over C
    but for the rows the projection moved).  Returns the change of F (<= 0)."""
    if not _record(res, x, rows, n_rows, history):
        return 0.0
    if not _combine(rows, n_rows, params, history):
        return 0.0
    r_ext, shift = history[3], history[4]
    for t in range(n_rows):
        if shift[t] != 0.0:  # projected into the row's bounds: its residual follows
            _move(src, r_ext, rows[t], shift[t])
    return _keep_if_lower(res, x, rows, n_rows, code, params, history)


@njit(inline="always")
def forget(history):
    """Start the record over (the rows changed)."""
    history[5][0] = 0
