"""F and the relative KKT residual per column, in float64, and the no-increase test.

The array-API forms run on NumPy and CuPy; :mod:`.terms` computes the same quantities in
one compiled pass for host arrays.  :func:`no_increase` is the finish's acceptance test:
a finished column replaces the MSM iterate only where F does not increase beyond the
rounding error of F (computed from the residual C x - d where the design is at hand).
"""

from __future__ import annotations

import math

import numpy as np

from ..arrays import namespace, to_host
from .terms import host_kkt, host_terms

# -- objective and KKT residual (float64) -------------------------------------------------


def column_objective(xp, a, r, x, penalty):
    """F per column, and the magnitude of its terms (for rounding-aware comparisons)."""
    host = host_terms(a, r, x, penalty, kkt=False)  # host float64: one compiled pass
    if host is not None:
        return host[0], host[1]
    return array_api_column_objective(xp, a, r, x, penalty)


def array_api_column_objective(xp, a, r, x, penalty):
    """:func:`column_objective` in array-API calls (any backend and float dtype)."""
    h = penalty.value(x)
    f = xp.sum(h, axis=0)
    size = xp.sum(xp.abs(h), axis=0)
    if not bool(xp.any(x != 0)):  # x = 0 (a cold start): no quadratic or linear part
        return f, size
    ax = xp.matmul(a, x)
    quad = 0.5 * x * ax
    lin = x * r
    return f + xp.sum(quad + lin, axis=0), size + xp.sum(xp.abs(quad) + xp.abs(lin), axis=0)


def kkt_residual(a, r, x, penalty):
    """Relative, scale-invariant KKT residual of every column of x (float64, host).

    Per entry, the move of an exact coordinate minimisation, in gradient units:

        rho_j = A_jj (x_j - prox_{h / A_jj}(x_j - g_j / A_jj)),       g = A x + r,

    zero for every j exactly when x satisfies the KKT conditions (convex h; a coordinate-wise
    minimum for L0/Lp).  Measured after the Jacobi equilibration y = x sqrt(A_jj) (which
    divides rho_j, (A x)_j and r_j by sqrt(A_jj)), the residual of a column is

        || rho / sqrt(diag A) ||_2 / ( || A x / sqrt(diag A) ||_2 + || r / sqrt(diag A) ||_2 ),

    unchanged when A, r and h are scaled together, when x, r and the bounds are, and when
    the variables are rescaled one by one (the columns of C in least squares).
    """
    xp = namespace(a, r, x)
    a = xp.astype(a, xp.float64, copy=False)
    r = xp.astype(r, xp.float64, copy=False)
    x = xp.astype(x, xp.float64, copy=False)
    host = host_terms(a, r, x, penalty)  # host arrays: one compiled pass
    if host is not None:
        return host[2]
    return array_api_kkt_residual(xp, a, r, x, penalty)


def array_api_kkt_residual(xp, a, r, x, penalty):
    """:func:`kkt_residual` of float64 arrays in array-API calls (any backend)."""
    return array_kkt_residual_from(xp, xp.matmul(a, x), r, xp.diagonal(a), x, penalty)


def kkt_residual_from(xp, ax, r, d, x, penalty):
    """:func:`kkt_residual` from A x, r and diag(A) (float64): the design form computes
    them from C without A.  Host arrays: one compiled pass (:func:`host_kkt`)."""
    host = host_kkt(ax, r, d, x, penalty)
    if host is not None:
        return host
    return array_kkt_residual_from(xp, ax, r, d, x, penalty)


def array_kkt_residual_from(xp, ax, r, d, x, penalty):
    """:func:`kkt_residual_from` in array-API calls (any backend)."""
    g = ax + r
    floor = 1e-300 + np.finfo(np.float64).eps * float(xp.max(xp.abs(d)))
    b = xp.where(d > 0, d, floor * xp.ones_like(d))[:, None]  # floor: zero columns of C
    w = 1.0 / xp.sqrt(b)
    move = x - penalty.prox(g - b * x, b)
    num = xp.linalg.vector_norm(w * b * move, axis=0)
    den = xp.linalg.vector_norm(w * ax, axis=0) + xp.linalg.vector_norm(w * r, axis=0)
    rel = xp.where(den > 0, num / xp.where(den > 0, den, xp.ones_like(den)), num)
    return np.asarray(to_host(rel), dtype=np.float64)


def no_increase(xp, a, r, x_old, x_new, penalty, design=None):
    """Columns where F(x_new) is not above F(x_old) beyond rounding, and F(x_new) per column.

    With the ``design`` (least squares), F comes from the residual (:class:`Design`),
    accurate to its own rounding, and x_new is kept where F(x_new) <= F(x_old) + that
    rounding.  Without it, F comes from the Gram form, whose rounding grows with
    (sum_j |x_j| sqrt(A_jj))^2 (:func:`objective_with_error`): x_new is kept only if
    F(x_new) + its error <= F(x_old) + its error, so that a huge x_new on a singular face
    (where the Gram form is noise) cannot pass for a decrease.
    """
    if design is not None:
        # F once per point, and a cold start's F (x = 0: 1/2 ||d||^2 + h(0)) from D's norms
        cold = not bool(xp.any(x_old != 0))
        f_old, allowance = (
            design.objective_at_zero(penalty) if cold else design.objective(x_old, penalty)
        )
        f_new, _ = design.objective(x_new, penalty)
        return f_new <= f_old + allowance, f_new
    f_old, err_old = objective_with_error(xp, a, r, x_old, penalty)
    f_new, err_new = objective_with_error(xp, a, r, x_new, penalty)
    return f_new + err_new <= f_old + err_old, f_new


def objective_with_error(xp, a, r, x, penalty):
    """F per column in the Gram form and a bound on its rounding error.

    (A x)_j is off by at most n eps sum_k |A_jk| |x_k| <= n eps sqrt(A_jj) S with
    S = sum_k sqrt(A_kk) |x_k| (A PSD: |A_jk| <= sqrt(A_jj A_kk)); the bound taken is
    sqrt(n) eps S^2 (the typical, not the worst, accumulation) plus 4 eps times the size
    of the other terms.
    """
    f, size = column_objective(xp, a, r, x, penalty)
    n = a.shape[0]
    root = xp.sqrt(xp.clip(xp.astype(xp.diagonal(a), xp.float64), 0.0, None))
    big = xp.sum(root[:, None] * xp.abs(xp.astype(x, xp.float64)), axis=0)
    eps = np.finfo(np.float64).eps
    return f, 4 * eps * size + math.sqrt(n) * eps * big * big
