"""Exact power-of-two rescaling of a problem, so that the sweeps run on data of order one.

With ``A = 2^a A'``, ``R = 2^r R'`` and ``X = 2^(r - a) X'`` (``solve``), or ``C = 2^c C'``,
``D = 2^d D'`` and ``X = 2^(d - c) X'`` (``least_squares``), the objective factors as

    F(X) = 2^f [ 1/2 tr(X''A'X') + tr(X''R') + constant + sum_ij h'(X'_ij) ],
    h'(t) = h(2^x t) / 2^f,

with ``x = r - a, f = 2r - a`` (solve) or ``x = d - c, f = 2d`` and
``A' = C''C', R' = -C''D', constant = 1/2 ||D'||^2`` (least squares).  So X' solves
the same kind of problem with the penalty :func:`scaled_penalty`, and X = 2^x X'.
Multiplying by a power of two is exact in floating point (away from under/overflow), so
``(s C, s D)`` for s a power of two gives bit-identical iterates, and data at 1e-150 or
1e150 never under/overflows inside the sweep, the Gram product C'C or the objective.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np

from ..arrays import aligned_empty, is_sparse, module_of, retained_empty
from ..backends.cpu.jit import njit
from ..penalties import CODE_BOX, CODE_L0, CODE_L1, CODE_LP

#: Side of the square blocks of :func:`_transposed_scaled_copy` (entries): 64 x 64
#: float64 blocks (32 KB read, 32 KB written) stay in L1/L2 while they turn.
TRANSPOSE_BLOCK = 64


def exponent_of(value) -> int:
    """e with ``value = m 2^e``, 0.5 <= m < 1 (0 for value 0): ``2^-e value`` is in [0.5, 1)."""
    value = float(value)
    if value == 0.0 or not math.isfinite(value):
        return 0
    return math.frexp(value)[1]


def max_abs(x) -> float:
    """max |x| of a dense (NumPy/CuPy) or sparse array, as a Python float."""
    if is_sparse(x):
        return float(abs(x.data).max()) if x.nnz else 0.0
    if x.size == 0:
        return 0.0
    if np.dtype(x.dtype).kind == "f":  # two reductions, no |x| temporary (half the time)
        return max(float(x.max()), -float(x.min()))
    return float(module_of(x).abs(x).max())


def ldexp(x, e: int):
    """``x * 2^e`` for a dense or sparse array (a new array; dtype kept, exact)."""
    if is_sparse(x):
        out = x.copy()
        out.data = _times_power_of_two(out.data, e)
        return out
    return _times_power_of_two(x, e)


def scaled_dense_copy(be, x, dtype, e: int, order=None, retained=False):
    """``x * 2^e`` as a new dense array of backend ``be`` in ``dtype`` (x dense; never x
    itself); ``order="F"``: column-contiguous on the host (a C whose columns the design
    form reads in place: one copy serves it and the products).  ``retained``: a host copy
    is made in this thread's kept scratch buffer (:func:`~msm_gpu.arrays.retained_empty`:
    no fresh pages to fault in), for a copy that does not outlive the call.

    A NumPy x on the CPU backend is converted and scaled in one pass into one fresh array:
    a copy and then a scaled copy write two, each paying its page faults
    (docs/development.md, "Input preparation").  The values are those of
    ``ldexp(be.asarray(x, dtype), e)``: x is cast to ``dtype`` first, then multiplied by the
    power of two (exact)."""
    factor = _power_of_two(dtype, e)
    if be.on_host and isinstance(x, np.ndarray) and factor is not None:
        empty = retained_empty if retained else aligned_empty
        if order == "F":
            out = empty(x.shape, dtype, order="F")
            if _turns_in_blocks(x, dtype):
                _transposed_scaled_copy(x, factor, out.T)
                return out
        else:  # x's layout kept; a C-ordered one aligned for the sweep's vectors
            out = empty(x.shape, dtype) if x.flags.c_contiguous else None
        return np.multiply(x, factor, dtype=dtype, out=out)
    return _times_power_of_two(be.asarray(x, dtype), e, in_place=True)


def _turns_in_blocks(x, dtype) -> bool:
    """Whether :func:`_transposed_scaled_copy` makes the F-ordered copy of ``x``: a
    C-ordered 2-D float32/float64 host array (NumPy's strided copy into the other layout
    runs 1.5-2x as long: docs/development.md, "Input preparation")."""
    floats = (np.dtype(np.float32), np.dtype(np.float64))
    return (
        x.ndim == 2
        and x.flags.c_contiguous
        and not x.flags.f_contiguous  # one row or column: a straight copy
        and x.dtype in floats
        and np.dtype(dtype) in floats
    )


@njit(nogil=True)
def _transposed_scaled_copy(x, factor, out_t):
    """``out_t[j, i] = x[i, j] * factor`` (``out_t`` the C-ordered transpose of the
    F-ordered result), in square blocks; each entry cast to out's dtype before the
    product, as ``np.multiply(x, factor, dtype=...)`` does (a power of two: exact)."""
    m, n = x.shape
    b = TRANSPOSE_BLOCK
    for i0 in range(0, m, b):
        i1 = min(i0 + b, m)
        for j0 in range(0, n, b):
            j1 = min(j0 + b, n)
            for j in range(j0, j1):
                row = out_t[j]
                for i in range(i0, i1):
                    row[i] = x[i, j]  # the cast
                    row[i] *= factor


def scaled_sparse_copy(x, dtype, e: int, column_squares=False):
    """``x * 2^e`` for a host SciPy CSR/CSC matrix ``x``, as a new matrix of its format in
    ``dtype``: the entries converted and scaled in one pass into one fresh array (not a
    converted copy and then a scaled one), the index arrays copied (an in-place sort of
    the result never reaches the user's).

    ``column_squares``: returns (copy, squares), ``squares`` the sums of squares of the
    copy's columns in float64 (the design form's ||c_j||^2), found in the same pass where
    ``x`` is CSC with float32/float64 entries (None otherwise)."""
    factor = _power_of_two(dtype, e)
    squares = None
    if column_squares and factor is not None and _csc_floats(x, dtype):
        data = np.empty(x.data.shape, dtype=dtype)
        squares = np.empty(x.shape[1])
        _scaled_csc_squares(x.indptr, x.data, factor, data, squares)
    elif factor is not None:
        data = np.multiply(x.data, factor, dtype=dtype)
    else:
        data = _times_power_of_two(x.data.astype(dtype), e, in_place=True)
    out = type(x)((data, x.indices.copy(), x.indptr.copy()), shape=x.shape)
    # SciPy's own flag, found once per matrix and kept on it: the copy's indices are in
    # the same order, and a later sort_indices() need not check them again (an O(nnz) pass)
    out.has_sorted_indices = x.has_sorted_indices
    return (out, squares) if column_squares else out


def _csc_floats(x, dtype) -> bool:
    floats = (np.dtype(np.float32), np.dtype(np.float64))
    return x.format == "csc" and x.data.dtype in floats and np.dtype(dtype) in floats


@njit(nogil=True)
def _scaled_csc_squares(indptr, data, factor, out, squares):
    """``out = data * factor`` (each entry cast to out's dtype first, as in
    :func:`scaled_sparse_copy`) and ``squares[j]`` the float64 sum of squares of column
    j of the result, in one pass (a separate pass for the squares cost as much again)."""
    for j in range(squares.shape[0]):
        acc = 0.0
        for p in range(indptr[j], indptr[j + 1]):
            out[p] = data[p]  # the cast
            out[p] *= factor
            v = np.float64(out[p])
            acc += v * v
        squares[j] = acc


def _power_of_two(dtype, e: int):
    """2^e as a number of the float ``dtype`` (subnormal included), or None where it is not."""
    dtype = np.dtype(dtype)
    if dtype.kind != "f":
        return None
    info = np.finfo(dtype)
    if info.minexp - info.nmant <= e < info.maxexp:
        return dtype.type(2.0**e)
    return None


def _times_power_of_two(x, e: int, in_place=False):
    """``x * 2^e``: a product with the power of two when 2^e is a number of x's dtype (a
    power of two times a float is exact unless the result under/overflows, as for ldexp),
    which is several times faster than NumPy's ``ldexp`` ufunc; ``ldexp`` otherwise.
    ``in_place``: the product is written into ``x`` (the ldexp fallback is not)."""
    factor = _power_of_two(x.dtype, e)
    if factor is None:
        return module_of(x).ldexp(x, e)
    if in_place:
        x *= factor
        return x
    return x * factor


def ldexp_float(value, e: int) -> float:
    """``value * 2^e`` as a Python float, +-inf on overflow (never OverflowError)."""
    value = float(value)
    try:
        return math.ldexp(value, int(e))  # far cheaper than NumPy's scalar ldexp + errstate
    except OverflowError:
        return math.copysign(math.inf, value)


@dataclass(frozen=True)
class Scaling:
    """X = 2^x_exp X' and F = 2^f_exp (F' + constant), F' the internal objective.

    Attributes
    ----------
    x_exp, f_exp : int
    constant : float
        Added to the internal objective before scaling (1/2 ||D'||^2 for least squares).
    """

    x_exp: int = 0
    f_exp: int = 0
    constant: float = 0.0

    @property
    def curvature_exp(self) -> int:
        """Exponent of A's unit: a curvature (theta, delta) c' inside is 2^this c outside."""
        return self.f_exp - 2 * self.x_exp

    def x_to_user(self, x, in_place=False):
        """The user's X from the internal X' (backend array, dtype kept; inf on overflow).

        ``in_place``: scale ``x`` itself (an internal array nobody reads afterwards: no
        new n x r array) where the power of two is a number of x's dtype."""
        if self.x_exp == 0:
            return x
        with np.errstate(over="ignore"):
            return _times_power_of_two(x, self.x_exp, in_place=in_place)

    def fun_to_user(self, fun):
        """User's objective from the internal one (float or float64 array; inf on overflow)."""
        if isinstance(fun, np.ndarray):
            with np.errstate(over="ignore", invalid="ignore"):
                return np.ldexp(fun + self.constant, self.f_exp)
        return ldexp_float(fun + self.constant, self.f_exp)

    def curvature_to_user(self, value) -> float:
        return ldexp_float(value, self.curvature_exp)


def scaled_penalty(penalty, x_exp: int, f_exp: int):
    """The penalty h'(t) = h(2^x_exp t) / 2^f_exp (a new object; ``penalty`` untouched).

    Per code: bounds become ``lb / 2^x, ub / 2^x``; lam becomes ``lam 2^(x - f)`` (L1),
    ``lam 2^-f`` (L0) or ``lam 2^(p x - f)`` (Lp).

    Raises
    ------
    ValueError
        If the rescaled lam or a bound is not representable (the penalty's weight is
        out of all proportion to the data's scale).
    """
    if x_exp == 0 and f_exp == 0:
        return penalty
    if penalty.code != CODE_LP and not any(
        isinstance(getattr(penalty, name), np.ndarray) for name in ("lam", "lb", "ub")
    ):
        return _scaled_scalar_penalty(penalty, x_exp, f_exp)
    out = copy.copy(penalty)
    lam0 = np.asarray(penalty.lam, dtype=np.float64)  # a scalar, or one per row
    if np.any(lam0):
        with np.errstate(over="ignore", under="ignore"):
            lam = lam0 * np.exp2(_lam_exponent(penalty, x_exp, f_exp))
        if np.any((lam0 > 0) & ~(np.isfinite(lam) & (lam > 0))):
            raise _lam_out_of_range(np.max(lam0), np.max(lam))
        if lam.ndim == 0:
            out.lam = float(lam)
        else:
            lam.setflags(write=False)
            out.lam = lam
    for name in ("lb", "ub"):
        bound = getattr(penalty, name)
        with np.errstate(over="ignore", under="ignore"):
            new = np.ldexp(np.asarray(bound, dtype=np.float64), -x_exp)
        if np.any(np.isfinite(bound) != np.isfinite(new)):
            raise _bound_out_of_range(name)
        if isinstance(bound, np.ndarray):
            new.setflags(write=False)
            setattr(out, name, new)
        else:
            setattr(out, name, float(new))
    return out


def _scaled_scalar_penalty(penalty, x_exp: int, f_exp: int):
    """:func:`scaled_penalty` for scalar lam and bounds and an integer power of lam's
    factor (not Lp), in Python floats: the same values (a product by an exact power of
    two, one ``ldexp`` per bound) and errors, without NumPy's per-call costs (tens of
    microseconds a solve)."""
    out = copy.copy(penalty)
    lam0 = float(penalty.lam)
    if lam0:
        # 2^k for an integer k: exact, 0 or inf, as np.exp2
        lam = lam0 * ldexp_float(1.0, _lam_exponent(penalty, x_exp, f_exp))
        if lam0 > 0 and not (math.isfinite(lam) and lam > 0):
            raise _lam_out_of_range(lam0, lam)
        out.lam = lam
    for name in ("lb", "ub"):
        bound = float(getattr(penalty, name))
        new = ldexp_float(bound, -x_exp)
        if math.isfinite(bound) != math.isfinite(new):
            raise _bound_out_of_range(name)
        setattr(out, name, new)
    return out


def _lam_exponent(penalty, x_exp, f_exp):
    """k in lam' = lam 2^k (see :func:`scaled_penalty`); an int except for Lp."""
    power = {CODE_BOX: 0, CODE_L1: x_exp, CODE_L0: 0, CODE_LP: penalty.p * x_exp}
    return power[penalty.code] - f_exp


def _lam_out_of_range(lam, scaled):
    return ValueError(
        f"penalty lam = {lam:g} is out of range for data of this scale "
        f"(it would be {scaled:g} relative to the data); rescale the data or lam"
    )


def _bound_out_of_range(name):
    return ValueError(
        f"penalty bound {name} is out of range for data of this scale (it overflows "
        "relative to the solution's scale); rescale the data or the bounds"
    )


def equilibration(diag_a) -> np.ndarray:
    """Powers of two ``s_j ~ 1 / sqrt(A_jj)`` (1 where A_jj <= 0 or is not finite).

    ``S A S`` (S = diag(s)) has a diagonal in [0.5, 2): the Jacobi equilibration, done in
    powers of two so that it is exact.  Columns of C on wildly different scales (SciPy's
    gh-20302 NNLS case: cond(C'C) = 1e27, cond(S C'C S) = 65) then stop ruining the face
    solves and the KKT tests of the finish.
    """
    d = np.asarray(diag_a, dtype=np.float64).reshape(-1)
    ok = np.isfinite(d) & (d > 0)
    # A_jj = m 2^k, m in [0.5, 1): s_j = 2^-floor(k / 2) puts s_j^2 A_jj in [0.5, 2)
    half = np.where(ok, np.frexp(d)[1] >> 1, 0).astype(np.int64)  # >> 1: floor(k / 2)
    # 2^-half from its bits (a normal number: |half| <= 537), not NumPy's slower ldexp
    return ((1023 - half) << 52).view(np.float64)


def row_scaled_penalty(penalty, s):
    """The penalty of y = x / s per row, h'_j(t) = h_j(s_j t), for a convex Box/L1 penalty.

    Bounds become ``lb / s, ub / s`` and an l1 weight ``lam s`` (per row).  ``s`` holds
    positive powers of two, so the change is exact.
    """
    s = np.asarray(s, dtype=np.float64)
    if penalty.code not in (CODE_BOX, CODE_L1):
        raise ValueError(f"row_scaled_penalty needs a convex Box/L1 penalty, got {penalty!r}")
    if np.all(s == 1.0):
        return penalty
    out = copy.copy(penalty)
    if penalty.code == CODE_L1:
        lam = np.asarray(penalty.lam, dtype=np.float64) * s
        lam.setflags(write=False)
        out.lam = lam
    for name in ("lb", "ub"):
        bound = np.asarray(getattr(penalty, name), dtype=np.float64) / s
        bound.setflags(write=False)
        setattr(out, name, bound)
    return out
