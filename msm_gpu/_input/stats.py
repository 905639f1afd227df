"""One pass over a NumPy input array for the checks and scales of ``prepare_solve``.

Checked with NumPy, R took three passes (finite test, max |R|, column norms), A's
symmetry test three (finite, max |A|, max |A - A'| through a temporary) and the PSD
test's float64 copy four (copy, two scalings, the diagonal shift).  The kernels here do
each job in one pass with the values of the NumPy code they replace (the same roundings;
sums of squares in float64).  Every function returns None for what it does not handle
(CuPy, sparse, integer input); the caller then takes the NumPy path.
"""

from __future__ import annotations

import numpy as np

from ..backends.cpu.jit import njit

#: The dtypes the kernels here compile for (float16 and longdouble take the NumPy path).
KERNEL_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _host_float(x) -> bool:
    return isinstance(x, np.ndarray) and x.dtype in KERNEL_DTYPES and x.size > 0


#: Columns of the 2-D view through which :func:`host_float_stats` reads a flat array:
#: per-column sums vectorise, one scalar chain does not (docs/development.md).
STATS_COLUMNS = 256


def host_float_stats(x):
    """(all finite, max |x|, sum x^2 in float64) of a NumPy float32 or float64 array in one
    pass, or None for anything else (sparse, CuPy, integers, float16, longdouble)."""
    if not _host_float(x):
        return None
    flat = np.ravel(x, order="K")
    whole = flat.size - flat.size % STATS_COLUMNS
    finite, biggest, squares = True, 0.0, 0.0
    # the whole rows of a (-1, STATS_COLUMNS) view, then the rest as one row
    for part in (flat[:whole].reshape(-1, STATS_COLUMNS), flat[whole:].reshape(1, -1)):
        if part.size:
            sums = np.zeros(part.shape[1])
            part_finite, part_biggest = _column_stats(part, sums)
            finite = finite and bool(part_finite)
            biggest = max(biggest, float(part_biggest))
            squares += float(sums.sum())
    return finite, biggest, squares


def column_stats(x):
    """(all finite, max |x|, sum of squares of every column in float64) of a NumPy float
    array, 1-D (one column) or C-contiguous 2-D; None for anything else."""
    if not _host_float(x):
        return None
    if x.ndim == 1:
        finite, biggest, squares = host_float_stats(x)
        return finite, biggest, np.array([squares])
    if x.ndim != 2 or not x.flags.c_contiguous:
        return None
    squares = np.zeros(x.shape[1])
    finite, biggest = _column_stats(x, squares)
    return bool(finite), float(biggest), squares


@njit(nogil=True, fastmath={"reassoc"})
def _column_stats(x, squares):
    n, m = x.shape
    probe = np.zeros(m)  # sum of x * 0: NaN exactly where a column holds a NaN or an inf
    biggest = np.zeros(m)
    for i in range(n):
        row = x[i]
        for c in range(m):
            v = np.float64(row[c])
            squares[c] += v * v
            probe[c] += v * 0.0
            av = abs(v)
            biggest[c] = av if av > biggest[c] else biggest[c]
    finite = True
    top = 0.0
    for c in range(m):
        finite &= probe[c] == 0.0
        top = max(top, biggest[c])
    return finite, top


def all_finite(x):
    """True when every entry of a NumPy float array is finite, in one pass without the
    boolean temporary of ``np.isfinite(x).all()`` (faster: docs/development.md); None
    for anything else (and for a strided view)."""
    if not _host_float(x) or not (x.flags.c_contiguous or x.flags.f_contiguous):
        return None
    return bool(_all_finite(np.ravel(x, order="K")))


@njit(nogil=True, fastmath={"reassoc"})  # reassociation: a vectorised sum
def _all_finite(flat):
    zero = flat.dtype.type(0)
    probe = zero  # sum of x * 0 in x's dtype: NaN exactly where an entry is a NaN or an inf
    for i in range(flat.size):
        probe += flat[i] * zero
    return probe == zero


def finite_columns(x):
    """Per column of a C-ordered 2-D NumPy float array: True where every entry is finite
    (one pass, no n x r boolean temporary); None for anything else."""
    if not _host_float(x) or x.ndim != 2 or not x.flags.c_contiguous:
        return None
    out = np.empty(x.shape[1], dtype=np.bool_)
    _finite_columns(x, out)
    return out


@njit(nogil=True, fastmath={"reassoc"})
def _finite_columns(x, out):
    n, m = x.shape
    zero = x.dtype.type(0)
    probe = np.zeros(m, dtype=x.dtype)  # x * 0 summed down each column (see _all_finite)
    for i in range(n):
        row = x[i]
        for c in range(m):
            probe[c] += row[c] * zero
    for c in range(m):
        out[c] = probe[c] == zero


def symmetry_stats(a):
    """(all finite, max |a|, max |a - a'|, min of the diagonal, where it is) of a square
    NumPy float array, or None for anything else; ``max |a - a'|`` in a's dtype, as
    NumPy's ``abs(a - a.T).max()``."""
    if not _host_float(a) or a.ndim != 2 or a.shape[0] != a.shape[1]:
        return None
    finite, scale, asym, low, where = _symmetry_stats(a)
    return bool(finite), float(scale), float(asym), float(low), int(where)


@njit(nogil=True, fastmath={"reassoc"})  # reassociation: parallel max / sum chains
def _symmetry_stats(a):
    n = a.shape[0]
    probe = 0.0  # sum of a_ij * 0: NaN exactly where an entry is a NaN or an inf
    scale = 0.0
    asym = abs(a[0, 0] - a[0, 0])  # 0 in a's dtype
    low = a[0, 0]
    where = 0
    for i in range(n):
        d = a[i, i]
        probe += np.float64(d) * 0.0
        scale = max(scale, abs(np.float64(d)))
        if d < low:
            low, where = d, i
        for j in range(i + 1, n):
            u, w = a[i, j], a[j, i]
            probe += np.float64(u) * 0.0 + np.float64(w) * 0.0
            scale = max(scale, max(abs(np.float64(u)), abs(np.float64(w))))
            asym = max(asym, abs(u - w))
    return probe == 0.0, scale, asym, low, where


def psd_test_matrix(a, eps):
    """H = S^-1 a S^-1 + eps I in float64, Fortran order, lower triangle only (all that
    LAPACK's ``dpotrf(lower=1)`` reads), for a symmetric square NumPy float ``a``; S =
    sqrt(diag a), 1 where the diagonal is not positive.  The entries are those of
    ``validation.check_psd``'s NumPy code: ``(a_ij / s_i) / s_j``, each a product by
    ``1 / s``.  None for anything else."""
    if not _host_float(a) or a.ndim != 2 or a.shape[0] != a.shape[1]:
        return None
    return _psd_test_matrix(a, float(eps)).T  # C-order upper = Fortran-order lower


@njit(nogil=True)
def _psd_test_matrix(a, eps):
    n = a.shape[0]
    inv_s = np.empty(n)
    for i in range(n):
        d = np.float64(a[i, i])
        inv_s[i] = 1.0 / np.sqrt(d if d > 0 else 1.0)
    ht = np.empty((n, n))  # ht[j, i] = H[i, j] for i >= j
    for j in range(n):
        for i in range(j, n):
            ht[j, i] = np.float64(a[i, j]) * inv_s[i] * inv_s[j]
        ht[j, j] += eps
    return ht
