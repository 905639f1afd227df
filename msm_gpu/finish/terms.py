"""The finish's per-column objective and KKT residual for host float64 arrays, in one
compiled pass.

:func:`msm_gpu.finish.objective.column_objective` and
:func:`msm_gpu.finish.objective.kkt_residual` are written
against the array API (NumPy and CuPy).  On the host each costs a dozen NumPy passes and
calls, a large part of a small ``mg.nnls`` call (docs/development.md, "Finish
thresholds"); here the product ``A X`` stays one BLAS call and everything else is one
loop over the entries, with the scalar formulas the sweeps use
(``backends/cpu/kernels.h_scalar`` / ``prox_scalar``, checked against the array-API ones
by ``tests/test_penalty_codes.py``).  ``tests/test_finish_terms.py`` checks these
results against the array-API code.
"""

from __future__ import annotations

import math

import numpy as np

from ..backends.cpu.jit import njit
from ..backends.cpu.kernels import all_zero, h_scalar, l1_box_prox, prox_scalar
from ..penalties import CODE_BOX, CODE_L1


def host_terms(a, r, x, penalty, *, kkt=True):
    """(F, size of F's terms, KKT residual or None) per column, or None where the arrays
    are not all 2-D host float64 (the caller then uses the array-API code).

    The quantities are those of :func:`msm_gpu.finish.objective.column_objective` and
    :func:`msm_gpu.finish.objective.kkt_residual` (same formulas, summed in another order).
    """
    if not all(type(v) is np.ndarray and v.dtype == np.float64 and v.ndim == 2 for v in (a, r, x)):
        return None
    # C order (a copy only for a strided view, e.g. some columns): the loop runs along rows
    a, r, x = (np.ascontiguousarray(v) for v in (a, r, x))
    n, c = x.shape
    params = penalty.table(n)
    # A 0 = 0 exactly: a cold start (x0 = 0) needs no product
    ax = x if all_zero(x) else np.matmul(a, x)
    f = np.empty(c)
    size = np.empty(c)
    res = np.empty(c) if kkt else f[:0]
    # two kernels: NNLS compiles only the box one (a shorter first call on an empty cache)
    kernel = _box_terms if penalty.code in (CODE_BOX, CODE_L1) else _prox_terms
    kernel(np.ascontiguousarray(np.diagonal(a)), ax, r, x, penalty.code, params, f, size, res, kkt)
    return f, size, (res if kkt else None)


def host_kkt(ax, r, diag, x, penalty):
    """The relative KKT residual per column from A x, r and diag(A) (the quantity of
    :func:`msm_gpu.finish.objective.kkt_residual_from`) in one compiled pass, or None
    where the arrays are not 2-D host float64 (and ``diag`` 1-D)."""
    if not (type(diag) is np.ndarray and diag.dtype == np.float64 and diag.ndim == 1):
        return None
    if not all(type(v) is np.ndarray and v.dtype == np.float64 and v.ndim == 2 for v in (ax, r, x)):
        return None
    ax, r, x, diag = (np.ascontiguousarray(v) for v in (ax, r, x, diag))
    n, c = x.shape
    f, size, res = np.empty(c), np.empty(c), np.empty(c)
    kernel = _box_terms if penalty.code in (CODE_BOX, CODE_L1) else _prox_terms
    kernel(diag, ax, r, x, penalty.code, penalty.table(n), f, size, res, True)
    return res


@njit(inline="always")
def _start(diag, c, f, size):
    """The residual's diagonal floor (zero columns of C); F and size zeroed; the zeroed
    sums of the residual's numerator and denominators."""
    d_max = 0.0
    for j in range(diag.shape[0]):
        d_max = max(d_max, abs(diag[j]))
    f[:] = 0.0
    size[:] = 0.0
    return 1e-300 + np.finfo(np.float64).eps * d_max, np.zeros(c), np.zeros(c), np.zeros(c)


@njit(inline="always")
def _finish(num, den_ax, den_r, kkt, with_kkt):
    """The relative residual of every column from its sums (``with_kkt``)."""
    if with_kkt:
        for col in range(num.shape[0]):
            den = math.sqrt(den_ax[col]) + math.sqrt(den_r[col])
            top = math.sqrt(num[col])
            kkt[col] = top / den if den > 0 else top


@njit(nogil=True)
def _box_terms(diag, ax, r, x, code, params, f, size, kkt, with_kkt):
    """Per column c: F_c = sum_j h(x_jc) + x_jc (1/2 (A x)_jc + r_jc), the sum of the
    terms' absolute values, and with ``with_kkt`` the relative KKT residual of
    :func:`msm_gpu.finish.objective.kkt_residual`:

        || w b (x - prox_{h/b}(x - g/b)) || / (|| w A x || + || w r ||),  g = A x + r,

    b = A_jj = ``diag[j]`` (a tiny floor where A_jj <= 0), w = 1 / sqrt(b), norms over the column.
    The box and l1 penalties (``code`` unused; a box has lam = 0): h and its prox written
    out as selects, so that the loop vectorises (:func:`_prox_terms` on them is several
    times slower)."""
    n, c = x.shape
    floor, num, den_ax, den_r = _start(diag, c, f, size)
    for j in range(n):
        lam, lb, ub = params[j, 0], params[j, 1], params[j, 2]
        b = diag[j] if diag[j] > 0 else floor
        w = 1.0 / math.sqrt(b)
        cut = lam / b
        xrow, axrow, rrow = x[j], ax[j], r[j]
        for col in range(c):
            xv, axv, rv = xrow[col], axrow[col], rrow[col]
            hv = lam * abs(xv) if (xv >= lb) & (xv <= ub) else np.inf
            quad = 0.5 * xv * axv
            lin = xv * rv
            f[col] += hv + (quad + lin)
            size[col] += hv + (abs(quad) + abs(lin))
            if with_kkt:
                move = w * b * (xv - l1_box_prox(axv + rv - b * xv, b, cut, lb, ub))
                num[col] += move * move
                den_ax[col] += (w * axv) * (w * axv)
                den_r[col] += (w * rv) * (w * rv)
    _finish(num, den_ax, den_r, kkt, with_kkt)


@njit(nogil=True)
def _prox_terms(diag, ax, r, x, code, params, f, size, kkt, with_kkt):
    """:func:`_box_terms` for any penalty ``code``, through the sweeps' scalar h and prox."""
    n, c = x.shape
    floor, num, den_ax, den_r = _start(diag, c, f, size)
    for j in range(n):
        lam, lb, ub, p = params[j, 0], params[j, 1], params[j, 2], params[j, 3]
        b = diag[j] if diag[j] > 0 else floor
        w = 1.0 / math.sqrt(b)
        xrow, axrow, rrow = x[j], ax[j], r[j]
        for col in range(c):
            xv, axv, rv = xrow[col], axrow[col], rrow[col]
            hv = h_scalar(code, xv, lam, lb, ub, p)
            quad = 0.5 * xv * axv
            lin = xv * rv
            f[col] += hv + (quad + lin)
            size[col] += abs(hv) + (abs(quad) + abs(lin))
            if with_kkt:
                t = prox_scalar(code, axv + rv - b * xv, b, lam, lb, ub, p)[0]
                move = w * b * (xv - t)
                num[col] += move * move
                den_ax[col] += (w * axv) * (w * axv)
                den_r[col] += (w * rv) * (w * rv)
    _finish(num, den_ax, den_r, kkt, with_kkt)
