"""Input preparation: the user's arrays -> one scaled problem on a backend, and back.

``solve(A, R)`` and ``least_squares(C, D)`` both end here: the input is checked
(:mod:`msm_gpu._input.validation`; array-likes and SciPy/CuPy sparse matrices accepted), moved to
the backend in the working dtype, rescaled by powers of two so that the sweeps see data of
order one (:mod:`msm_gpu._input.scaling`), and, for a user-given A small enough, tested for
positive semidefiniteness.  :func:`user_outcome` maps the loop's outcome back to the user's
units and refuses to call a non-finite answer converged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..arrays import ArrayKind, is_sparse, module_of, to_host
from ..backends import get_backend
from . import validation as v
from .design import Design
from .scaling import (
    Scaling,
    exponent_of,
    ldexp,
    ldexp_float,
    max_abs,
    scaled_dense_copy,
    scaled_penalty,
    scaled_sparse_copy,
)
from .stats import all_finite, column_stats, host_float_stats

#: A sparse A or C'C is made dense only up to this many bytes (MSM sweeps a dense A).
DENSE_LIMIT_BYTES = 4 * 2**30
#: Largest n for which ``solve`` tests A for positive semidefiniteness up front
#: (Cholesky, n^3/3 flops: 0.3 GFlop at n = 1000, a few hundred sweeps of one column).
PSD_CHECK_MAX_N = 1000
#: The last user A that passed the symmetry and PSD tests (n <= PSD_CHECK_MAX_N): an
#: equal A skips them (``validation.VerifiedMatrix``): they dominate a short call's set-up,
#: and a new A pays only the comparison and the copy on top.  The copy holds at most
#: 8 MB.  The entry also keeps A's rescaled symmetric copy per backend and working dtype
#: (read-only, host only, up to 8 MB more each), so an equal A is not rescaled again
#: (docs/development.md, "Input preparation").
VERIFIED_A = v.VerifiedMatrix(PSD_CHECK_MAX_N)
#: Info entries measured in A's units (converted back from the rescaled problem).
_CURVATURE_KEYS = ("delta", "L", "L_columns")


@dataclass
class Problem:
    """A prepared problem: 1/2 tr(X'AX) + tr(X'R) + constant + h(X) on the backend, rescaled.

    Attributes
    ----------
    backend : Backend
    a : (n, n) backend array
        Symmetric, rescaled (entries of order one).
    r : (n, r) backend array
    x0 : (n, r) backend array or None
    penalty : Penalty
        The rescaled penalty h' (:func:`msm_gpu._input.scaling.scaled_penalty`).
    scaling : Scaling
        X = 2^x_exp X', F = 2^f_exp (F' + constant).
    user_like : object
        An array of the user's kind (NumPy or CuPy) for the output, or None.
    one_problem : bool
        The user's R (D) was 1-D.
    x_floor : (r,) float64 ndarray
        Floor of the stopping rule's scale per column (internal units): ||r_c|| / tr(A),
        or ||x0_c|| where r_c = 0.
    psd_known : bool
        A is known to be positive semidefinite: formed as C'C, or the PSD test passed
        (the exact finish's face solves rely on it).
    fine : (a, r) of float64 backend arrays, or None
        Least squares in float32: C'C and -C'D formed in float64 from the same (rescaled)
        C and D, for the exact finish (the float32 products are off by ~ 6e-8 relative,
        which the finish would then solve exactly).  None otherwise.
    design : Design or None
        Least squares: the rescaled C and D, from which the objective is evaluated
        accurately (:mod:`msm_gpu._input.design`).  None for ``solve``.
    """

    backend: object
    a: object
    r: object
    x0: object
    penalty: object
    scaling: Scaling
    user_like: object
    one_problem: bool
    x_floor: np.ndarray
    psd_known: bool = False
    fine: object = None
    design: object = None

    def to_user(self, x, in_place=False):
        """The user's X (array kind, shape, units) from an internal (n, r) iterate
        (``in_place``: x itself may be rescaled, see ``Scaling.x_to_user``)."""
        x = self.scaling.x_to_user(x, in_place=in_place)
        return self.backend.to_user(x[:, 0] if self.one_problem else x, self.user_like)


def prepare_solve(
    A, R, penalty, x0, backend, *, check_psd=True, any_size=False, known_psd=False
) -> Problem:
    """Check and prepare ``solve(A, R, penalty, x0=x0, backend=backend)``.

    ``check_psd``: run the Cholesky test of :func:`msm_gpu._input.validation.check_psd` when
    n <= PSD_CHECK_MAX_N, or at any n with ``any_size`` (the exact finish needs it).
    ``known_psd``: A is symmetric PSD by construction (a library caller's X' diag(w) X):
    the symmetry and PSD tests (O(n^2) and O(n^3)) are skipped and A counts as shown PSD.
    """
    passed, entry = (frozenset(), None) if known_psd else VERIFIED_A.match(A)
    if known_psd:
        A = v.check_array(A, "A", ndims=(2,))
    elif passed:  # equal to an A already shown finite, symmetric and PSD
        A = v.check_array(A, "A", ndims=(2,), check_finite=False)
    else:
        A = v.check_square_symmetric(A, "A")
    n = A.shape[0]
    R, r_stats = v.check_rhs_with_stats(R, n, "R")
    x0 = v.check_x0(x0, R.shape)
    be = get_backend(backend, A, R, x0)
    dtype = v.working_dtype(A, R, x0)
    key = ("internal A", be.name, np.dtype(dtype))
    prepared = VERIFIED_A.derived(entry, key)
    if prepared is None:
        e_a = exponent_of(max_abs(A))
        # 0.5 (A + A') / 2^e_a, exact: makes A exactly symmetric for the folded sweep
        a = ldexp(_dense_on(be, A, dtype, "A"), -e_a - 1)
        a = a + a.T
    else:  # the same A as a previous call: its rescaled copy, read-only
        e_a, a = prepared
    r_max = max_abs(R) if r_stats is None else r_stats[0]
    e_r = exponent_of(r_max) if r_max > 0 else e_a
    scaling = Scaling(x_exp=e_r - e_a, f_exp=2 * e_r - e_a)
    _check_range(scaling, dtype, "max |R|^2 / max |A|", "max |R| / max |A|")
    psd_known = known_psd
    if not known_psd and check_psd and (n <= PSD_CHECK_MAX_N or any_size):
        if dtype not in passed:
            v.check_psd(a, "A", input_dtype=dtype, scale_exponent=e_a)  # serial LAPACK
            entry = VERIFIED_A.remember(A, dtype, passed, entry)
        psd_known = True
    if prepared is None and entry is not None and isinstance(a, np.ndarray):
        a.flags.writeable = False  # shared by the later calls with this A
        VERIFIED_A.keep_derived(entry, key, (e_a, a))
    r = _scaled_dense_on(be, R, dtype, "R", -e_r)
    r_norms = _scaled_norms(r_stats, -e_r)
    return _finish(be, a, r, x0, dtype, penalty, scaling, _user_like(R), psd_known, r_norms)


#: max |R| between which R's column sums of squares in float64 neither under- nor
#: overflow (else the norms are taken from the rescaled r).
SQUARES_SAFE = (2.0**-480, 2.0**480)


def _scaled_norms(stats, e):
    """The column norms of R 2^e from ``stats`` = (max |R|, column sums of squares of R),
    or None where there are no stats or the squares may have under/overflowed."""
    squares = _scaled_squares(stats, e)
    return None if squares is None else np.sqrt(squares)


def _scaled_squares(stats, e):
    """The column sums of squares of X 2^e from ``stats`` = (max |X|, those of X), exact
    (powers of two), or None where there are no stats or the squares may have under- or
    overflowed."""
    if stats is None:
        return None
    biggest, squares = stats
    if biggest != 0 and not SQUARES_SAFE[0] <= biggest <= SQUARES_SAFE[1]:
        return None
    return np.ldexp(squares, 2 * e)


#: |exponent| of max |D| up to which C'D and ||D||^2 are formed from D as given (products
#: and sums stay within 2^±(SAFE_EXPONENT + 40) even for float32 with 2^40 terms).
SAFE_EXPONENT = 40


def prepare_least_squares(C, D, penalty, x0, backend, *, fine_gram=False) -> Problem:
    """Check and prepare ``least_squares(C, D, penalty, x0=x0, backend=backend)``:
    A = C'C and R = -C'D (sparse-aware), constant 1/2 ||D||^2.

    ``fine_gram``: for a working dtype below float64, form A and R in float64
    (``Problem.fine``, for the exact finish) and round those for the sweeps."""
    return gram_problem(prepare_design(C, D, penalty, x0, backend), penalty, fine_gram=fine_gram)


def gram_problem(base, penalty, *, fine_gram=False) -> Problem:
    """The Gram form of a prepared least-squares problem (:func:`prepare_design`; the
    user's ``penalty``): A = C'C and R = -C'D, see :func:`prepare_least_squares`."""
    be, design, dtype = base.backend, base.design, base.dtype
    c, d, d_exp = design.c, design.d, design.d_exp
    n = c.shape[1]
    if design.c_kind.sparse:
        _check_dense_size(n, dtype, "C", "A = C'C")
    fine = None
    if fine_gram and np.dtype(dtype) != np.float64:
        # the finish solves the problem of these float32 numbers: A and R in float64;
        # the sweeps get them rounded to float32 (closer than float32 products)
        fine = _gram_in_float64(be, c, d, d_exp)
        a = be.xp.astype(fine[0], dtype)
        r = be.xp.astype(fine[1], dtype)
        if len(d.shape) == 1:
            r = r[:, 0]
    else:
        a = (c.T @ c).toarray() if design.c_kind.sparse else be.xp.matmul(c.T, c)
        if design.d_kind.sparse:
            r = -((d.T @ c).T)  # sparse @ (dense or sparse)
            r = r.toarray() if is_sparse(r) else r
        else:
            r = -(c.T @ d)
        if d_exp:
            r = ldexp(r, -d_exp)
    x0 = base.user_x0
    problem = _finish(be, a, r, x0, dtype, penalty, base.scaling, base.user_like, psd_known=True)
    return replace(problem, fine=fine, design=design)


@dataclass
class DesignProblem:
    """A least-squares problem checked and rescaled, before any Gram matrix is formed.

    Attributes
    ----------
    backend : Backend
    design : Design
        The rescaled C (working dtype, sparse kept sparse) and D.
    dtype : numpy dtype
        The working dtype.
    scaling : Scaling
        X = 2^x_exp X', F = 2^f_exp (F' + 1/2 ||D'||^2).
    penalty : Penalty
        The rescaled penalty.
    user_x0 : array or None
        The user's x0, checked (not yet rescaled).
    user_like, one_problem
        As in :class:`Problem`.
    """

    backend: object
    design: Design
    dtype: object
    scaling: Scaling
    penalty: object
    user_x0: object
    user_like: object
    one_problem: bool

    def x0_internal(self):
        """x0 in internal units, (n, r) float64 on the host (zeros when none was given)."""
        n = self.design.c.shape[1]
        d = self.design.d
        shape = (n, d.shape[1] if len(d.shape) == 2 else 1)
        if self.user_x0 is None:
            return np.zeros(shape)
        x0 = to_host(_densify(self.user_x0)).astype(np.float64)
        return np.ldexp(x0, -self.scaling.x_exp).reshape(shape)

    def to_user(self, x):
        """The user's X (array kind, shape, units) from an internal (n, r) host float64 x."""
        x = self.backend.asarray(np.ldexp(x.astype(np.float64), self.scaling.x_exp), self.dtype)
        return self.backend.to_user(x[:, 0] if self.one_problem else x, self.user_like)


def prepare_design(C, D, penalty, x0, backend, *, c_order=None, c_stats=None) -> DesignProblem:
    """Check ``least_squares(C, D, penalty, x0=x0, backend=backend)`` and rescale C and D
    by powers of two; no product of C is formed here.  ``c_order="F"``: the rescaled copy
    of a host dense C is column-major (the design form is expected; a wide C always is).
    ``c_stats``: :func:`column_stats` of this C where the caller has it."""
    given = C
    C = v.check_array(C, "C", ndims=(2,), check_finite=False)
    D = v.check_array(D, "D", check_finite=False)
    c_kind, d_kind = ArrayKind.of(C), ArrayKind.of(D)  # the inputs' kinds, found once
    # one pass over a dense C (or a sparse C's entries): finite and max |C|, and for a
    # C-ordered C its columns' sums of squares (the design form's ||c_j||^2)
    if c_stats is None or C is not given:
        c_stats = column_stats(C) if not c_kind.sparse else None
    if c_stats is None:
        c_stats = host_float_stats(C.data if c_kind.sparse and not c_kind.on_device else C)
    if c_kind.dtype.kind == "f" and not c_kind.sparse:  # sparse: checked above
        v.check_finite_values(C, "C", finite=None if c_stats is None else c_stats[0])
    # one pass over a dense D: finite, max |D| and its columns' sums of squares (F at a cold
    # start, with no pass over D later), or ||D||^2 alone where D is not C-ordered
    d_stats = column_stats(D) if not d_kind.sparse else None
    stats = host_float_stats(D) if d_stats is None else (*d_stats[:2], float(d_stats[2].sum()))
    if d_kind.dtype.kind == "f" and not d_kind.sparse:  # sparse: checked above
        v.check_finite_values(D, "D", finite=None if stats is None else stats[0])
    if D.shape[0] != C.shape[0]:
        raise ValueError(
            f"D must have {C.shape[0]} rows to match C {tuple(C.shape)}, got shape {tuple(D.shape)}"
        )
    n = C.shape[1]
    x0 = v.check_x0(x0, (n,) + tuple(D.shape[1:]))
    be = get_backend(backend, C, D, x0)
    dtype = v.working_dtype(C, D, x0)
    e_c = exponent_of(max_abs(C) if c_stats is None else c_stats[1])
    d_max = max_abs(D) if stats is None else stats[1]
    e_d = exponent_of(d_max) if d_max > 0 else e_c
    c_squares = None
    if be.on_host and not c_kind.sparse and not c_kind.on_device:
        # one scaled copy; F-ordered where the design form will read its columns in place
        # (a wide C, or the caller's hint), else in C's layout (a straight copy: several
        # times faster than a transposing one, and the Gram form's products take either)
        wide = C.shape[1] > C.shape[0]
        order = "F" if wide or c_order == "F" else None
        c = scaled_dense_copy(be, C, dtype, -e_c, order=order, retained=True)
    elif be.on_host and c_kind.sparse and not c_kind.on_device:
        # a CSC C's column sums of squares from the same pass (the design form's ||c_j||^2)
        c, c_squares = scaled_sparse_copy(C, dtype, -e_c, column_squares=True)
    else:
        c = ldexp(_on_backend(be, C, dtype, c_kind), -e_c)
    if be.on_host and isinstance(D, np.ndarray) and D.dtype == dtype:
        d = D  # only read from here on: no copy of the largest input
    else:
        d = _on_backend(be, D, dtype, d_kind)
    if abs(e_d) <= SAFE_EXPONENT:
        # D on a moderate scale: C'D and ||D||^2 cannot overflow, so they are formed from
        # D as given and scaled afterwards (a power of two commutes with every product and
        # sum: the same values as from a scaled D, where no entry is subnormal) -- no
        # scaled copy of D (m x r)
        half_sq = _half_squared_norm(d) if stats is None else 0.5 * stats[2]
        constant = ldexp_float(half_sq, -2 * e_d)
        d_exp = e_d
    else:
        d = ldexp(d, -e_d)
        constant = _half_squared_norm(d)
        d_exp = 0
    scaling = Scaling(x_exp=e_d - e_c, f_exp=2 * e_d, constant=constant)
    if not math.isfinite(ldexp_float(constant, scaling.f_exp)):
        raise ValueError(
            f"D: the objective 1/2 ||C X - D||^2 overflows float64 at this scale "
            f"(1/2 ||D||^2 ~ 2^{scaling.f_exp + exponent_of(constant)}, max |D| = {d_max:.3g}); "
            "divide C and D by a common factor (the solution X does not change)"
        )
    _check_range(scaling, dtype, "max |D|^2", "max |D| / max |C|")
    return DesignProblem(
        backend=be,
        design=Design(
            c,
            d,
            d_exp,
            c_norms=_column_squares(c_stats, e_c) if c_squares is None else c_squares,
            d_squares=_column_squares(d_stats, e_d),
        ),
        dtype=dtype,
        scaling=scaling,
        penalty=scaled_penalty(penalty, scaling.x_exp, scaling.f_exp),
        user_x0=x0,
        user_like=_user_like(D, d_kind),
        one_problem=len(d_kind.shape) == 1,
    )


def _column_squares(c_stats, e_c):
    """||c_j||^2 of C 2^-e_c where the checks' pass found C's column sums of squares."""
    if c_stats is None or np.ndim(c_stats[2]) != 1:
        return None
    return _scaled_squares(c_stats[1:], -e_c)


#: Columns of D converted to float64 at a time by :func:`_gram_in_float64` (memory bound).
FINE_BLOCK_ENTRIES = 1 << 22


def _gram_in_float64(be, c, d, d_exp):
    """C'C and -C'D / 2^d_exp in float64 from the rescaled float32 C and D (the conversion
    is exact), D converted a block of columns at a time; on the backend, shaped (n, r)."""
    xp = be.xp
    c64 = c.astype(np.float64)
    a = (c64.T @ c64).toarray() if is_sparse(c64) else xp.matmul(c64.T, c64)
    one = len(d.shape) == 1
    if one:
        d = d.reshape(-1, 1) if is_sparse(d) else xp.reshape(d, (-1, 1))
    m, r_cols = d.shape
    r = xp.empty((c.shape[1], r_cols), dtype=xp.float64)
    step = max(1, FINE_BLOCK_ENTRIES // max(m, 1))
    for start in range(0, r_cols, step):
        block = d[:, start : start + step].astype(np.float64)
        prod = (block.T @ c64).T if is_sparse(block) else c64.T @ block
        r[:, start : start + step] = -(prod.toarray() if is_sparse(prod) else prod)
    if d_exp:
        r = ldexp(r, -d_exp)
    return a, r


def _finish(be, a, r, x0, dtype, penalty, scaling, user_like, psd_known, r_norms=None) -> Problem:
    """2-D R and x0 (internal units), the rescaled penalty and the stopping floor
    (``r_norms``: r's column norms where the caller has them)."""
    xp = be.xp
    one_problem = r.ndim == 1
    if one_problem:
        r = r[:, None]
    if x0 is not None:
        x0 = xp.reshape(scaled_dense_copy(be, _densify(x0), dtype, -scaling.x_exp), r.shape)
    trace = float(xp.sum(xp.astype(xp.diagonal(a), xp.float64)))
    if r_norms is None:
        r_norms = _column_norms(xp, r)
    x_floor = r_norms / trace if trace > 0 else r_norms.copy()
    if x0 is not None and not r_norms.all():  # x0's norms only where a column of R is 0
        x0_norms = _column_norms(xp, x0)
        x_floor = np.where(r_norms > 0, x_floor, x0_norms)
    penalty = scaled_penalty(penalty, scaling.x_exp, scaling.f_exp)
    return Problem(be, a, r, x0, penalty, scaling, user_like, one_problem, x_floor, psd_known)


def _column_norms(xp, x):
    """Euclidean norm of every column of the 2-D ``x``, float64, on the host.

    NumPy: one pass with float64 accumulation and no n x r temporary (each fresh
    temporary costs page faults: at 200 x 1000 about as much as 0.5 GEMM)."""
    if isinstance(x, np.ndarray):
        if x.dtype == np.float32:
            # summed in float32 (the float64 cast is the slow part): a stopping scale
            # needs no more; float64 where a square overflows float32
            squares = np.einsum("ij,ij->j", x, x)
            if np.isfinite(squares).all():
                return np.sqrt(squares.astype(np.float64))
        return np.sqrt(np.einsum("ij,ij->j", x, x, dtype=np.float64))
    return to_host(xp.sqrt(xp.sum(xp.astype(x, xp.float64) ** 2, axis=0)))


def user_outcome(problem, out):
    """The loop's outcome in the user's units, non-finite answers never converged.

    Returns a dict with ``x``, ``fun``, ``objective``, ``converged_columns``, ``message``
    and ``info`` (curvatures such as delta and L in A's units).
    """
    scaling = problem.scaling
    info = dict(out.info)
    objective = scaling.fun_to_user(out.objective)
    f_design = info.pop("_f_design", None)
    if problem.design is not None:
        # least squares: F from the residual (msm_gpu._input.design), not from the Gram form
        if f_design is None:
            with np.errstate(all="ignore"):  # a non-finite x: reported below
                f_design = problem.design.objective(out.x, problem.penalty)[0]
        fun = ldexp_float(float(module_of(f_design).sum(f_design)), scaling.f_exp)
        if objective.size:  # the last entry is F at the returned x
            objective[-1] = fun
    else:
        fun = scaling.fun_to_user(out.fun)
    x_user = problem.to_user(out.x, in_place=True)  # the loop's x is not read again
    converged = out.converged_columns.copy()
    message = out.message
    x_finite = all_finite(x_user)  # NumPy: one compiled pass
    if x_finite is None:
        x_finite = bool(module_of(x_user).isfinite(x_user).all())
    if not (x_finite and math.isfinite(fun)):
        converged[:] = False
        if not out.diverged:
            what = "x" if not x_finite else "the objective"
            message = (
                f"{message}; but {what} is not finite in the input's dtype at this data "
                "scale: no solution is reported as converged"
            )
    for key in _CURVATURE_KEYS:
        if key in info:
            value = info[key]
            info[key] = (
                np.ldexp(np.asarray(value, dtype=np.float64), scaling.curvature_exp)
                if isinstance(value, np.ndarray)
                else scaling.curvature_to_user(value)
            )
    return {
        "x": x_user,
        "fun": fun,
        "objective": objective,
        "converged_columns": converged,
        "message": message,
        "info": info,
    }


# -- helpers ---------------------------------------------------------------------------


def _check_range(scaling, dtype, f_what, x_what):
    """The solution's and the objective's scales must be representable."""
    if abs(scaling.f_exp) > 1020:
        raise ValueError(
            f"the objective's scale ({f_what} ~ 2^{scaling.f_exp}) is outside the range of "
            "float64; rescale the data"
        )
    limit = np.finfo(dtype).maxexp - 4
    if abs(scaling.x_exp) > limit:
        raise ValueError(
            f"the solution's scale ({x_what} ~ 2^{scaling.x_exp}) is outside the range of "
            f"{np.dtype(dtype).name}; rescale the data"
        )


def _user_like(x, kind=None):
    """An array of the user's kind for ``Backend.to_user`` (CuPy for CuPy sparse);
    ``kind``: x's :class:`~msm_gpu.arrays.ArrayKind`, when known."""
    kind = ArrayKind.of(x) if kind is None else kind
    if kind.sparse:
        return kind.xp.empty(0) if kind.on_device else None
    return x


def _densify(x):
    return x.toarray() if is_sparse(x) else x


def _check_dense_size(n, dtype, name, what):
    size = n * n * np.dtype(dtype).itemsize
    if size > DENSE_LIMIT_BYTES:
        raise ValueError(
            f"{name}: {what} would be a dense {n} x {n} matrix ({size / 2**30:.1f} GiB, above "
            f"the limit of {DENSE_LIMIT_BYTES / 2**30:g} GiB); MSM sweeps a dense A, so this "
            "problem is too large for it"
        )


def _dense_on(be, x, dtype, name):
    """A dense copy of ``x`` on the backend (a sparse x is densified, size-checked)."""
    if is_sparse(x):
        if x.shape[0] == x.shape[1]:
            _check_dense_size(x.shape[0], dtype, name, name)
        return be.asarray(_densify(_on_backend(be, x, dtype)), dtype)
    return be.asarray(x, dtype)


def _scaled_dense_on(be, x, dtype, name, e):
    """:func:`_dense_on` times 2^e: one fresh array for dense x."""
    if is_sparse(x):
        return ldexp(_dense_on(be, x, dtype, name), e)
    return scaled_dense_copy(be, x, dtype, e)


def _on_backend(be, x, dtype, kind=None):
    """A copy of ``x`` on the backend in ``dtype``; sparse stays sparse (CSR).  ``kind``:
    x's :class:`~msm_gpu.arrays.ArrayKind`, when known."""
    kind = ArrayKind.of(x) if kind is None else kind
    if not kind.sparse:
        return be.asarray(x, dtype)
    if be.on_host:
        if kind.on_device:
            x = x.get()
        return x.astype(dtype)  # a new matrix
    import cupyx.scipy.sparse as cusparse

    if not kind.on_device:
        x = cusparse.csr_matrix(x)
    return x.astype(dtype)


def _half_squared_norm(d) -> float:
    """1/2 ||d||_F^2 in float64 (dense or sparse); a BLAS dot for float64 data."""
    data = d.data if is_sparse(d) else d
    mod = module_of(data)
    flat = mod.ravel(data)
    if data.dtype == mod.float64:
        return 0.5 * float(mod.dot(flat, flat))
    total = 0.0  # in float64, a slice at a time (no full-size float64 temporaries)
    for start in range(0, flat.size, FINE_BLOCK_ENTRIES):
        part = flat[start : start + FINE_BLOCK_ENTRIES].astype(mod.float64)
        total += float(mod.dot(part, part))
    return 0.5 * total
