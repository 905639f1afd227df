"""Every check of user input, in one place, with messages that name the argument."""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np

from ..arrays import is_cupy, is_sparse, module_of, to_host
from ..penalties import Penalty
from .stats import all_finite, column_stats, psd_test_matrix, symmetry_stats


def working_dtype(*arrays):
    """float32 if every array is float32 (or smaller float), else float64.

    Integer and boolean inputs become float64; complex and object inputs are refused
    by :func:`check_array` before this is called.
    """
    kinds = [np.dtype(a.dtype) for a in arrays if a is not None]
    if kinds and all(k.kind == "f" and k.itemsize <= 4 for k in kinds):
        return np.dtype(np.float32)
    return np.dtype(np.float64)


def check_array(x, name, *, ndims=(1, 2), check_finite=True):
    """Refuse non-numeric, empty, wrongly shaped or non-finite arrays (the last test
    skipped with ``check_finite=False``: the caller did it).

    Accepts what NumPy accepts (lists, tuples, memoryviews, ``np.matrix``, objects with
    ``__array__``), CuPy arrays and SciPy / CuPy sparse matrices.  Returns a NumPy array
    for array-likes, the input itself for NumPy and CuPy arrays and a CSR matrix for
    sparse input (never a modified input: conversion to the working dtype happens
    later, into a fresh array).
    Masked arrays are refused (converting them would silently drop the mask).
    """
    if x is None:
        raise TypeError(f"{name} must be an array, got None")
    if isinstance(x, np.ma.MaskedArray):
        raise TypeError(
            f"{name} is a masked array; fill the masked entries first (e.g. {name}.filled())"
        )
    if is_sparse(x):
        return _check_sparse(x, name, ndims)
    if not is_cupy(x):
        try:
            x = np.asarray(x)
        except Exception as exc:  # ragged lists etc.
            raise TypeError(
                f"{name} must be an array of real numbers (got {type(x).__name__} "
                f"that NumPy cannot convert: {exc})"
            ) from exc
    kind = np.dtype(x.dtype).kind
    if kind not in "biuf":
        raise TypeError(f"{name} must hold real numbers, got dtype {x.dtype}")
    _check_shape(x.shape, name, ndims)
    if kind == "f" and check_finite:
        check_finite_values(x, name)
    return x


def check_finite_values(x, name, finite=None):
    """Refuse NaN/Inf in the float array ``x``; ``finite``: the answer if already known."""
    if finite is None:
        finite = all_finite(x)  # NumPy float arrays: one compiled pass
    if finite is None:
        finite = bool(np.isfinite(x).all()) if not is_cupy(x) else bool(_cupy_finite(x))
    if not finite:
        raise ValueError(f"{name} contains NaN or Inf")


def _check_shape(shape, name, ndims):
    if len(shape) not in ndims:
        allowed = " or ".join(f"{d}-D" for d in ndims)
        raise ValueError(f"{name} must be {allowed}, got an array of shape {tuple(shape)}")
    if math.prod(shape) == 0:
        raise ValueError(f"{name} must not be empty (shape {tuple(shape)})")


def _check_sparse(x, name, ndims):
    """A SciPy/CuPy sparse matrix: real dtype, allowed shape, finite stored values."""
    kind = np.dtype(x.dtype).kind
    if kind not in "biuf":
        raise TypeError(f"{name} must hold real numbers, got sparse dtype {x.dtype}")
    if len(x.shape) == 1:  # 1-D sparse arrays (SciPy >= 1.13): as dense as R itself
        return check_array(x.toarray(), name, ndims=ndims)
    _check_shape(x.shape, name, ndims)
    # compressed rows or columns from here on (COO, DOK, LIL... become CSR); a CSC matrix
    # stays CSC: the design form reads C by columns, and the round trip costs two copies
    if getattr(x, "format", None) not in ("csr", "csc"):
        x = x.tocsr()
    if kind == "f" and x.data.size:
        finite = all_finite(x.data)  # host: one compiled pass, no boolean temporary
        if finite is None:
            finite = bool(module_of(x.data).isfinite(x.data).all())
        if not finite:
            raise ValueError(f"{name} contains NaN or Inf")
    return x


def _cupy_finite(x):
    import cupy

    return cupy.isfinite(x).all().item()


def check_square_symmetric(a, name="A"):
    """A must be square, symmetric (to rounding) and have a nonnegative diagonal.

    Returns the array as :func:`check_array` does (array-likes become NumPy arrays;
    sparse matrices stay sparse).
    """
    a = check_array(a, name, ndims=(2,), check_finite=False)
    n, m = a.shape
    dense_float = np.dtype(a.dtype).kind == "f" and not is_sparse(a)
    if n != m:
        if dense_float:
            check_finite_values(a, name)  # the first complaint, as for any other array
        raise ValueError(f"{name} must be square, got shape {tuple(a.shape)}")
    stats = symmetry_stats(a)  # one pass for a NumPy float array
    if stats is not None:
        finite, scale, asym, low, where = stats
        check_finite_values(a, name, finite)
        _check_symmetric_diagonal(name, n, a.dtype, scale, asym, low, where)
        return a
    if dense_float:
        check_finite_values(a, name)
    af = a.astype(np.float64) if np.dtype(a.dtype).kind != "f" else a
    if is_sparse(a):
        scale = float(abs(af).max()) if af.nnz else 0.0
        diff = af - af.T
        asym = float(abs(diff).max()) if diff.nnz else 0.0
        diag = module_of(af.data).asarray(af.diagonal())
    else:
        xp_mod = module_of(a)
        scale = float(xp_mod.abs(af).max())
        asym = float(xp_mod.abs(af - af.T).max())
        diag = xp_mod.diagonal(af)
    j = int(module_of(diag).argmin(diag))
    _check_symmetric_diagonal(name, n, a.dtype, scale, asym, float(diag[j]), j)
    return a


def _check_symmetric_diagonal(name, n, dtype, scale, asym, low, where):
    """Raise unless max |A - A'| = ``asym`` is rounding for max |A| = ``scale`` and the
    smallest diagonal entry ``low`` (at ``where``) is >= 0."""
    eps = np.finfo(np.float32 if np.dtype(dtype) == np.float32 else np.float64).eps
    if asym > 100 * eps * max(scale, 1e-300) * max(1.0, math.sqrt(n)):
        raise ValueError(
            f"{name} must be symmetric: max |{name} - {name}.T| = {asym:.3g} "
            f"(max |{name}| = {scale:.3g})"
        )
    if low < 0:
        raise ValueError(
            f"{name} must be positive semidefinite, but {name}[{where}, {where}] = {low:g} < 0"
        )


def check_psd(a, name="A", *, input_dtype=np.float64, scale_exponent=0):
    """Refuse a symmetric ``a`` (NumPy/CuPy, dense) that is not positive semidefinite.

    Cholesky, in float64 on the array's own device, of the unit-diagonal matrix
    H = S^-1 a S^-1 + eps I (S = sqrt(diag a), 1 where the diagonal is 0) with
    ``eps = 10 n u`` (u: unit roundoff of ``input_dtype``): it fails when H has an
    eigenvalue below about -eps, i.e. when A is indefinite beyond the rounding of its
    entries.  A zero diagonal entry with a nonzero row also fails (the 2 x 2 minor
    [0, b; b, d] is indefinite).  Costs n^3/3 flops: the caller decides when to run it.
    ``scale_exponent`` (a = A / 2^scale_exponent) only makes the message quote A's
    own eigenvalues.
    """
    mod = module_of(a)
    n = a.shape[0]
    u = np.finfo(np.float32 if np.dtype(input_dtype) == np.float32 else np.float64).eps / 2
    eps = 10.0 * n * u
    h = psd_test_matrix(a, eps)  # NumPy: one pass, the lower triangle (all dpotrf reads)
    if h is None:
        # Fortran order: LAPACK's dpotrf factors it in place, without a copy of its own
        h = mod.array(a, dtype=mod.float64, order="F", copy=True)
        d = mod.diagonal(h)
        inv_s = 1.0 / mod.sqrt(mod.where(d > 0, d, mod.ones_like(d)))
        h *= inv_s[:, None]
        h *= inv_s[None, :]
        h[mod.arange(n), mod.arange(n)] += eps
    if _cholesky_succeeds(mod, h):
        return
    evals = to_host(mod.linalg.eigvalsh(mod.asarray(a, dtype=mod.float64)))
    low, high = (float(np.ldexp(e, scale_exponent)) for e in (evals[0], evals[-1]))
    raise ValueError(
        f"{name} is not positive semidefinite: its smallest eigenvalue is {low:.6g} "
        f"(largest {high:.6g}), so the objective is not convex and may be unbounded below; "
        "MSM needs a symmetric positive semidefinite A (pass check_convergence=False to "
        "skip this test and run anyway)"
    )


class VerifiedMatrix:
    """The last host A that passed the symmetry and PSD tests, kept as a copy: a later
    call whose A has the same dtype, shape and entries (compared exactly) skips them.

    Solving many batches with one A is common (a fixed dictionary, a stream of right-hand
    sides); the tests cost a pass over A plus a Cholesky factorisation (n^3/3 flops),
    the comparison a read of 2 n^2 numbers.  The symmetry verdict depends on A alone, the
    PSD verdict also on the working dtype (its eps and A's rounding to it): the entry
    keeps the working dtypes it passed for.  One entry, replaced whole (safe from several
    threads); only NumPy float arrays of at most ``max_n`` rows.

    The entry also keeps what callers derived from that A (:meth:`keep_derived`, e.g.
    ``prepare_solve``'s rescaled copy per backend and dtype), dropped with the entry
    (an entry is a tuple never changed but for that dict).
    """

    def __init__(self, max_n):
        self.max_n = int(max_n)
        # (copy of A, frozenset of working dtypes it passed for, {key: derived value})
        self._entry = None

    def _eligible(self, a):
        return (
            isinstance(a, np.ndarray)
            and a.dtype.kind == "f"
            and a.ndim == 2
            and 0 < a.shape[0] == a.shape[1] <= self.max_n
        )

    def passed(self, a) -> frozenset:
        """The working dtypes for which a matrix equal to ``a`` (dtype, shape, entries)
        passed both tests; empty when ``a`` is not the matrix remembered."""
        return self.match(a)[0]

    def match(self, a):
        """(:meth:`passed`, the entry ``a`` matched or None): the entry is the handle of
        :meth:`derived` and :meth:`keep_derived`, so that a value derived from ``a``
        never lands on an entry another thread has put in its place meanwhile."""
        entry = self._entry
        if entry is None or not self._eligible(a):
            return frozenset(), None
        kept, dtypes, _ = entry
        if kept.dtype != a.dtype or kept.shape != a.shape or not np.array_equal(kept, a):
            return frozenset(), None
        return dtypes, entry

    def remember(self, a, working, passed=frozenset(), entry=None):
        """Keep a copy of ``a``, which has just passed both tests for the ``working``
        dtype (``passed``: the dtypes it was already known to pass for; ``entry``: the
        entry it matched, whose derived values then stay).  Returns the new entry, or
        None where ``a`` is not kept (only NumPy float arrays of at most ``max_n`` rows
        are)."""
        if not self._eligible(a):
            return None
        # a matched entry's copy equals a: kept, with the values derived from it
        kept, derived = (entry[0], entry[2]) if entry is not None else (np.array(a), {})
        new = (kept, frozenset(passed) | {np.dtype(working)}, derived)
        self._entry = new
        return new

    @staticmethod
    def derived(entry, key):
        """The value kept under ``key`` with ``entry`` (from :meth:`match` or
        :meth:`remember`; None: none), or None."""
        return None if entry is None else entry[2].get(key)

    @staticmethod
    def keep_derived(entry, key, value) -> None:
        """Keep ``value``, derived from ``entry``'s matrix (treat it as read-only), with
        that entry, under ``key``: gone when the entry is replaced."""
        if entry is not None:
            entry[2][key] = value

    def forget(self) -> None:
        self._entry = None


def _cholesky_succeeds(mod, h):
    """True when the Cholesky factorization of the symmetric float64 ``h`` (Fortran order,
    overwritten) succeeds.  NumPy: SciPy's LAPACK ``dpotrf`` in place (faster than NumPy's
    own ``cholesky``), on one thread.

    Threaded, OpenBLAS leaves its threads spinning after the call, on the CPUs the sweeps
    that follow need, and one thread factors as fast at these sizes.
    ``serial_numba_blas`` switches only SciPy's OpenBLAS, the one ``dpotrf`` runs on: far
    cheaper than a threadpoolctl limiter over every BLAS (docs/development.md, "Input
    preparation")."""
    if mod is np:
        from scipy.linalg import lapack

        from ..backends.cpu.threads import serial_numba_blas

        with serial_numba_blas():
            _, info = lapack.dpotrf(h, lower=1, clean=0, overwrite_a=1)
        return info == 0
    try:
        factor = mod.linalg.cholesky(h)
    except np.linalg.LinAlgError:
        return False
    return bool(mod.isfinite(factor).all())  # CuPy returns NaN instead of raising


def check_rhs(r, n, name="R"):
    """R (or x0) is (n,) for one problem or (n, r) for r problems."""
    r = check_array(r, name)
    _check_rows(r, n, name)
    return r


def check_rhs_with_stats(r, n, name="R"):
    """:func:`check_rhs`, and (max |R|, the sum of squares of every column in float64)
    from the finite test's own pass over a NumPy float R; None for any other R."""
    r = check_array(r, name, check_finite=False)
    stats = column_stats(r)
    if stats is not None:
        check_finite_values(r, name, stats[0])
    elif np.dtype(r.dtype).kind == "f" and not is_sparse(r):  # sparse: checked already
        check_finite_values(r, name)
    _check_rows(r, n, name)
    return r, (None if stats is None else stats[1:])


def _check_rows(r, n, name):
    if r.shape[0] != n:
        raise ValueError(
            f"{name} must have {n} rows to match A ({n} x {n}), got shape {tuple(r.shape)}"
        )


def check_x0(x0, r_shape):
    if x0 is None:
        return None
    x0 = check_array(x0, "x0")
    if tuple(x0.shape) != tuple(r_shape):
        raise ValueError(
            f"x0 must have the shape of the solution {tuple(r_shape)} (one row per unknown, "
            f"one column per right-hand side), got {tuple(x0.shape)}"
        )
    return x0


def check_penalty(penalty):
    if isinstance(penalty, type) and issubclass(penalty, Penalty):
        raise TypeError(
            f"penalty must be a Penalty instance, e.g. {penalty.__name__}(...), not the class"
        )
    if not isinstance(penalty, Penalty):
        raise TypeError(
            "penalty must be a msm_gpu Penalty (Zero, NonNeg, Box, L1, NonNegL1, L0, Lp), "
            f"got {type(penalty).__name__}"
        )
    return penalty


def check_real(value, name, *, low=None, high=None, low_open=False, high_open=False):
    """A finite real scalar within the given (open or closed) bounds."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    too_low = low is not None and (value <= low if low_open else value < low)
    too_high = high is not None and (value >= high if high_open else value > high)
    if too_low or too_high:
        lo = "" if low is None else ("(" if low_open else "[") + f"{low:g}"
        hi = "" if high is None else f"{high:g}" + (")" if high_open else "]")
        interval = f"{lo or '(-inf'}, {hi or 'inf)'}"
        raise ValueError(f"{name} must be in {interval}, got {value:g}")
    return value


def check_int(value, name, *, low=0):
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
    return int(value)


def check_time_limit(time_limit):
    if time_limit is None:
        return None
    return check_real(time_limit, "time_limit", low=0.0, low_open=True)


def check_callback(callback):
    if callback is not None and not callable(callback):
        raise TypeError("callback must be callable or None")
    return callback
