"""Public entry points: validate -> pick backend -> driver -> result."""

from __future__ import annotations

import time

import numpy as np

from . import validation as v
from .arrays import to_host
from .backends import get_backend
from .baselines import ProxGradMethod
from .driver import MsmMethod
from .loop import run_iterations
from .options import SolveOptions
from .penalties import NonNeg, Zero
from .result import SolveResult
from .splitting import make_splitting

_DEFAULTS = SolveOptions()


def solve(
    A,
    R,
    penalty=None,
    *,
    omega=_DEFAULTS.omega,
    theta=_DEFAULTS.theta,
    x0=None,
    tol=_DEFAULTS.tol,
    max_iter=_DEFAULTS.max_iter,
    time_limit=_DEFAULTS.time_limit,
    backend="auto",
    record_objective=_DEFAULTS.record_objective,
    callback=_DEFAULTS.callback,
    panel=_DEFAULTS.panel,
    check_convergence=_DEFAULTS.check_convergence,
    method=_DEFAULTS.method,
    threads=_DEFAULTS.threads,
) -> SolveResult:
    """Minimise F(X) = 1/2 tr(X'AX) + tr(X'R) + sum_ij h(X_ij) by the Matrix Splitting Method.

    Each column of X is an independent problem; all columns are swept together.

    Parameters
    ----------
    A : (n, n) array
        Symmetric positive semidefinite (NumPy or CuPy; integers become float64).
    R : (n,) or (n, r) array
        Linear term: one problem, or r problems (one per column).
    penalty : Penalty, optional
        Separable h: ``Zero()`` (default; MSM is then Gauss-Seidel/SOR for AX = -R),
        ``NonNeg()``, ``Box(lb, ub)``, ``L1(lam)``, ``NonNegL1(lam)``, ``L0(lam, lb, ub)``
        or ``Lp(lam, p)``.
    omega : float in (0, 2)
        Relaxation parameter (paper, eq. (4)); 1 is Gauss-Seidel.
    theta : float >= 0
        Proximal term added to the diagonal of B; needed when A has zero diagonal entries.
    x0 : array like R, optional
        Starting point (zeros by default).  Never modified.
    tol : float >= 0
        A column stops when ||x_{k+1} - x_k|| <= tol * max(1, ||x_k||); it is then no
        longer swept.  ``tol=0`` runs exactly ``max_iter`` iterations.
    max_iter : int >= 0
    time_limit : float, optional
        Stop after this many seconds (checked after every iteration).
    backend : {"auto", "cpu", "cuda"}
        "auto": CUDA for CuPy input, CPU otherwise.  NumPy in -> NumPy out, CuPy in ->
        CuPy out, whatever backend runs.
    record_objective : bool
        Keep F after every iteration in ``result.objective`` (costs O(n r) per
        iteration, no extra product with A).
    callback : callable, optional
        ``callback(info)`` after each iteration with an :class:`IterationInfo`
        (x, fun, n_iter, n_active); returning True or raising StopIteration stops.
    panel : int, optional
        Rows per panel of the blocked sweep (default chosen from n).  Changes only the
        rounding of the result, not the iterates.
    check_convergence : bool
        Refuse (omega, theta) for which the paper's theorem does not guarantee
        convergence (delta <= 0, see ``splitting.convergence_delta``).
    method : {"msm", "pgm", "pgm_ls", "apg", "apg_ls"}
        "msm" (default) or one of the paper's comparators (``msm_gpu.baselines``):
        proximal gradient with constant step 1/L or backtracking line search, and
        FISTA with constant step or backtracking.  omega, theta, panel and
        check_convergence only apply to MSM.  FISTA ("apg", "apg_ls") is not monotone
        and has no convergence guarantee for the nonconvex L0/Lp; it is kept as the
        paper's comparator.
    threads : int >= 1, optional
        Most CPU threads an MSM sweep may use.  Default: chosen from the work (one thread
        for small problems), at most the CPUs available, ``NUMBA_NUM_THREADS`` and
        ``OMP_NUM_THREADS``.  Ignored by the CUDA backend.

    Returns
    -------
    SolveResult

    Examples
    --------
    >>> import numpy as np, msm_gpu as mg
    >>> A = np.array([[2.0, 1.0], [1.0, 2.0]]); R = np.array([-1.0, 1.0])
    >>> res = mg.solve(A, R, mg.NonNeg())
    >>> np.round(res.x, 6)
    array([0.5, 0. ])
    """
    started = time.perf_counter()
    penalty = Zero() if penalty is None else v.check_penalty(penalty)
    v.check_square_symmetric(A, "A")
    v.check_rhs(R, A.shape[0], "R")
    v.check_x0(x0, R.shape)
    be = get_backend(backend, A, R, x0)
    dtype = v.working_dtype(A, R, x0)
    a = be.asarray(A, dtype)
    a = 0.5 * (a + a.T)  # exact symmetry for the folded sweep (A was checked symmetric)
    options = SolveOptions(
        omega=omega,
        theta=theta,
        tol=tol,
        max_iter=max_iter,
        time_limit=time_limit,
        record_objective=record_objective,
        callback=callback,
        panel=panel,
        check_convergence=check_convergence,
        method=method,
        threads=threads,
    )
    r = be.asarray_readonly(R, dtype)  # read only: no copy needed
    return _solve_on_backend(be, a, r, x0, R, penalty, started, options)


def _solve_on_backend(be, a, r, x0, user_like, penalty, started, options, *, constant=0.0):
    """Run the chosen method on backend arrays ``a`` (n x n) and ``r`` through the loop."""
    opts = options.checked(a.shape[0])
    one_problem = r.ndim == 1
    if one_problem:
        r = r[:, None]
    if x0 is None:
        x_init = be.xp.zeros_like(r)
    else:
        x_init = be.xp.reshape(be.asarray_readonly(x0, r.dtype), r.shape)  # the method copies

    def to_user(x):
        return be.to_user(x[:, 0] if one_problem else x, user_like)

    if opts.method == "msm":
        splitting = make_splitting(
            np.asarray(to_host(be.xp.diagonal(a)), dtype=np.float64),
            opts.omega,
            opts.theta,
            penalty.is_convex,
            check=opts.check_convergence,
        )
        stepper = MsmMethod(be, a, r, x_init, penalty, splitting, opts.panel, threads=opts.threads)
    else:
        stepper = ProxGradMethod(opts.method, be, a, r, x_init, penalty)
    out = run_iterations(
        stepper,
        n_cols=r.shape[1],
        tol=opts.tol,
        max_iter=opts.max_iter,
        time_limit=opts.time_limit,
        record_objective=opts.record_objective,
        callback=opts.callback,
        to_user=to_user,
        start_time=started,
    )
    return SolveResult(
        x=to_user(out.x),
        fun=out.fun + constant,
        n_iter=out.n_iter,
        converged=bool(out.converged_columns.all()),
        message=out.message,
        objective=out.objective + constant,
        backend=be.name,
        time=time.perf_counter() - started,
        method=opts.method,
        converged_columns=out.converged_columns,
        n_iter_columns=out.n_iter_columns,
        timings=out.timings,
        info=out.info,
    )


def least_squares(C, D, penalty=None, *, x0=None, backend="auto", **options) -> SolveResult:
    """Minimise 1/2 ||C X - D||_F^2 + sum_ij h(X_ij) by MSM (A = C'C, R = -C'D).

    Parameters
    ----------
    C : (m, n) array
    D : (m,) or (m, r) array
        One right-hand side or r of them (one problem per column).
    penalty : Penalty, optional
        Default ``Zero()`` (plain least squares).
    x0, backend, **options
        As in :func:`solve`.

    Returns
    -------
    SolveResult
        ``fun`` and ``objective`` are the least-squares objective, the constant
        1/2 ||D||^2 included.
    """
    started = time.perf_counter()
    penalty = Zero() if penalty is None else v.check_penalty(penalty)
    v.check_array(C, "C", ndims=(2,))
    v.check_array(D, "D")
    if D.shape[0] != C.shape[0]:
        raise ValueError(
            f"D must have {C.shape[0]} rows to match C {tuple(C.shape)}, got shape {D.shape}"
        )
    x0_shape = (C.shape[1],) + tuple(D.shape[1:])
    v.check_x0(x0, x0_shape)
    be = get_backend(backend, C, D, x0)
    dtype = v.working_dtype(C, D, x0)
    xp = be.xp
    c = be.asarray(C, dtype)
    d = be.asarray(D, dtype)
    constant = 0.5 * float(xp.sum(xp.astype(d, xp.float64) ** 2))
    return _solve_on_backend(
        be,
        xp.matmul(c.T, c),
        -xp.matmul(c.T, d),
        x0,
        D,
        penalty,
        started,
        SolveOptions.from_keywords(**options),
        constant=constant,
    )


def nnls(C, D, **kwargs) -> SolveResult:
    """Nonnegative least squares min_{X >= 0} 1/2 ||C X - D||_F^2 by MSM.

    Same as ``least_squares(C, D, NonNeg(), **kwargs)``; D may hold r right-hand sides
    as columns, solved together.  Keywords as in :func:`solve`.

    Examples
    --------
    >>> import numpy as np, msm_gpu as mg
    >>> C = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]); d = np.array([1.0, -1.0, 0.0])
    >>> np.round(mg.nnls(C, d).x, 6)
    array([0.5, 0. ])
    """
    return least_squares(C, D, NonNeg(), **kwargs)
