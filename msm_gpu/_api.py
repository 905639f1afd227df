"""The front doors: :func:`solve`, :func:`least_squares` and :func:`nnls`.

Each checks nothing itself: an in-memory call goes to :mod:`msm_gpu.run` (validation,
rescaling, the method, the result), a Dask right-hand side to :mod:`msm_gpu.dask.solve`
(one in-memory call per column block).  The signatures and docstrings users read live
here; the defaults come from :class:`~msm_gpu.options.SolveOptions`.
"""

from __future__ import annotations

from . import run
from ._input.foreign import accepts_foreign_arrays
from ._input.validation import check_real
from .dask import solve as dask_solve
from .dask.solve import any_dask
from .finish.small_pwl import try_small
from .finish.working_set import try_working_set
from .options import SolveOptions
from .penalties import NonNeg
from .result import SolveResult

_DEFAULTS = SolveOptions()
_OPTION_NAMES = frozenset(SolveOptions.names())


@accepts_foreign_arrays("A", "R", "x0")
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
    verbose=_DEFAULTS.verbose,
    finish=_DEFAULTS.finish,
    threads=_DEFAULTS.threads,
    max_memory=_DEFAULTS.max_memory,
    _known_psd=False,
) -> SolveResult:
    """Minimise F(X) = 1/2 tr(X'AX) + tr(X'R) + sum_ij h(X_ij) by the Matrix Splitting Method.

    Each column of X is an independent problem; all columns are swept together.

    Parameters
    ----------
    A : (n, n) array_like or sparse matrix
        Symmetric positive semidefinite.  NumPy or CuPy arrays, anything NumPy converts
        (lists, tuples, memoryviews, ``np.matrix``; integers become float64), or a
        SciPy/CuPy sparse matrix.  A SciPy sparse A with n > 4096 stays sparse on the
        CPU: the paper's plain MSM swept over its CSR rows, O(nnz(A)) per column and
        sweep, no exact finish (``info["representation"] == "sparse"``; callbacks,
        ``verbose``, ``finish="exact"`` and the baselines are not available there).
        Smaller or CuPy sparse A are made dense (refused above
        ``problem.DENSE_LIMIT_BYTES``).  For n <= 1000 A is tested up front (Cholesky of
        A + eps I after diagonal scaling) and an indefinite A is a ValueError; for larger
        n, or with ``check_convergence=False``, a run whose iterate or objective stops
        being finite (what an indefinite A does: F -> -inf) stops with
        ``converged=False`` and a message saying so.
    R : (n,) or (n, r) array_like
        Linear term: one problem, or r problems (one per column).  Sparse R is made
        dense.
    penalty : Penalty, optional
        Separable h: ``Zero()`` (default; MSM is then Gauss-Seidel/SOR for AX = -R),
        ``NonNeg()``, ``Box(lb, ub)``, ``L1(lam)``, ``NonNegL1(lam)``, ``L0(lam, lb, ub)``
        or ``Lp(lam, p)``.
    omega : float in (0, 2)
        Relaxation parameter (paper, eq. (4)); 1 is Gauss-Seidel.
    theta : float >= 0
        Proximal term of B, **relative to the scale of A**: B = L + (D + theta_abs I) /
        omega with theta_abs = theta * mean(diag A) (``result.info["theta_abs"]``).  So
        (s A, s R) gives the iterates of (A, R) for every s > 0; for unit-diagonal A
        theta_abs = theta.  Needed (> 0) when A has zero diagonal entries.
    x0 : array like R, optional
        Starting point (zeros by default).  Never modified.
    tol : float >= 0
        A column c stops when ||x_{k+1} - x_k|| <= tol * max(||x_k||, ||r_c|| / tr(A))
        (``||x0_c||`` in place of the floor where r_c = 0), a relative rule: scaling A, R
        or x changes nothing.  The column is then no longer swept.  ``tol=0`` runs
        exactly ``max_iter`` iterations (of the paper's plain MSM unless
        ``finish="exact"``).
    max_iter : int >= 0
    time_limit : float, optional
        Stop after this many seconds (checked after every iteration).
    backend : {"auto", "cpu", "cuda"}
        "auto": CUDA for CuPy input, CPU otherwise.  NumPy in -> NumPy out, CuPy in ->
        CuPy out, whatever backend runs.  PyTorch tensors and JAX arrays (CPU or NVIDIA
        CUDA; all arrays of one call from one library) are computed as NumPy/CuPy by
        DLPack and ``res.x`` comes back as a tensor on their device
        (``msm_gpu/_input/foreign.py``).
    record_objective : bool
        Keep F after every iteration in ``result.objective`` (costs O(n r) per
        iteration, no extra product with A).
    callback : callable, optional
        ``callback(info)`` after each iteration with an :class:`IterationInfo`
        (x, fun, n_iter, n_active); returning True or raising StopIteration stops.
    panel : int, optional
        Rows per panel of the BLAS-blocked sweep (default chosen from n).  Changes only
        the rounding of the result, not the iterates.  Not used where the CPU sweeps in
        register tiles (AVX-512 hosts, 32 <= n <= 512: panels of 8 rows).
    check_convergence : bool
        Refuse (omega, theta) for which the paper's theorem does not guarantee
        convergence (delta <= 0, see ``splitting.convergence_delta``), and an A that
        fails the positive-semidefiniteness test (n <= 1000).
    method : {"msm", "pgm", "pgm_ls", "apg", "apg_ls"}
        "msm" (default) or one of the paper's comparators (``msm_gpu.solvers``):
        proximal gradient with constant step 1/L or backtracking line search, and
        FISTA with constant step or backtracking.  omega, theta, panel and
        check_convergence only apply to MSM.  FISTA ("apg", "apg_ls") is not monotone
        and has no convergence guarantee for the nonconvex L0/Lp; it is kept as the
        paper's comparator.
    verbose : bool
        Show a tqdm progress bar (iterations, objective, active columns).
    finish : {"auto", "exact", None}
        Solve exactly on the face the MSM sweeps found (``msm_gpu/finish/run.py``): on the CPU
        with n <= 1024 an active set per column (no sweeps first where x = 0 is a vertex
        of h); above, or on a GPU, factorised faces, or under "auto" conjugate gradients
        for n > 1024 (n > 128 on a GPU).  "auto" is skipped for ``tol=0`` (a fixed number
        of plain MSM iterations), "exact" is not; None is the paper's plain MSM.  With a
        finish and a convex penalty, ``converged`` means a relative KKT residual <=
        ``tol`` in every column (``info["kkt_residual"]``); a column the finish cannot
        settle gets plain MSM's answer where it is better, so the default is never worse
        than None.  For L0/Lp the finish is a support polish, kept per column only where
        it does not increase F.  MSM only (ignored by the baselines).
    threads : int >= 1, optional
        Most CPU threads an MSM sweep may use.  Default: chosen from the work (one thread
        for small problems), at most the CPUs available, ``NUMBA_NUM_THREADS`` and
        ``OMP_NUM_THREADS``.  Ignored by the CUDA backend.
    max_memory : int, optional
        Bytes of workspace a batch may use beyond its answer.  The columns of R are
        solved in blocks of as many columns as fit (the same answer: columns are
        independent problems); a block that still runs out of memory is split and
        retried.  Default: a quarter of the memory the host (or the GPU) has free, so
        that a batch which fits comfortably is one block; 1 GiB where the free memory
        cannot be read.  A default split keeps blocks at least 512 columns wide.
        ``info["n_blocks"]`` and ``info["block_columns"]`` report the blocks.  A callback
        sees one block's columns at a time; a time limit counts for the whole batch.
    _known_psd : bool
        Internal (proximal Newton's model Hessians X' diag(w) X): A is symmetric PSD by
        construction, so the symmetry and PSD tests are skipped.  Not for users: a wrong
        claim gives wrong answers.

    Returns
    -------
    SolveResult
        ``converged`` is never True with a non-finite ``x`` or ``fun``.

    Notes
    -----
    The data are rescaled by powers of two (exact) before the sweeps, so that A, R and
    x are of order one inside (``msm_gpu/_input/scaling.py``): data from 1e-150 to 1e150 give
    the same x (and F scaled accordingly).  A solution or objective whose scale is
    outside the dtype's range is a ValueError naming the scale.

    Examples
    --------
    >>> import numpy as np, msm_gpu as mg
    >>> A = np.array([[2.0, 1.0], [1.0, 2.0]]); R = np.array([-1.0, 1.0])
    >>> res = mg.solve(A, R, mg.NonNeg())
    >>> np.round(res.x, 6)
    array([0.5, 0. ])
    """
    options = {name: value for name, value in locals().items() if name in _OPTION_NAMES}
    if any_dask(A, R, x0):  # a dask R: solved block by block (msm_gpu/dask/solve.py)
        return dask_solve.solve(A, R, penalty, x0=x0, backend=backend, **options)
    return run.solve(A, R, penalty, x0=x0, backend=backend, known_psd=_known_psd, **options)


@accepts_foreign_arrays("C", "D", "x0")
def least_squares(
    C, D, penalty=None, *, x0=None, backend="auto", representation="auto", **options
) -> SolveResult:
    """Minimise 1/2 ||C X - D||_F^2 + sum_ij h(X_ij) by MSM (A = C'C, R = -C'D).

    Parameters
    ----------
    C : (m, n) array_like or sparse matrix
        Sparse C stays sparse: A = C'C is formed by a sparse product and made dense
        (refused when n x n is above ``problem.DENSE_LIMIT_BYTES``).
    D : (m,) or (m, r) array_like or sparse matrix
        One right-hand side or r of them (one problem per column).
    penalty : Penalty, optional
        Default ``Zero()`` (plain least squares).
    x0, backend, **options
        As in :func:`solve`.
    representation : {"auto", "gram", "design"}
        How the quadratic is held (``msm_gpu/finish/design_form.py``): "gram" forms A = C'C and
        R = -C'D (n x n) once; "design" keeps C (dense or sparse) and each column's
        residual C x - d, forming nothing n x n (the exact finish's active set from x0,
        on the CPU, convex penalties, no callback or progress bar).  "auto" (default):
        the design form for a wide C (n > m), a sparse C with n > 2048 columns, or few
        right-hand sides (16 r < n), where it applies, except a tall dense C with an l1
        penalty whose first sweep frees most variables (``res.info["design_probe"]``).
        Reported in ``res.info["representation"]``.  One small problem (a float64 NumPy
        C with at most 128 columns and 65 536 entries, a 1-D ``D``, a Zero, Box, NonNeg,
        L1 or NonNegL1 penalty and no keyword but ``tol``) is solved by the exact active set on
        C'C without the batch's layers (``info["small_problem"]``): the general road's
        answer in a fraction of the call time.  One larger such problem with an L1 or
        NonNegL1 penalty and a C that is not wide (m >= 0.75 n) is first tried by working
        sets (``msm_gpu/finish/working_set.py``: the exact active set on at most 256
        columns, all of a tall C's up to 512 where its answer looks dense;
        ``info["working_set"]`` their number), which reach a sparse answer without copying
        C; any other answer that looks dense goes on to the general road.

    Returns
    -------
    SolveResult
        ``fun`` and ``objective`` are the least-squares objective, the constant
        1/2 ||D||^2 included.  (s C, s D) gives the x of (C, D) for every s > 0 (with
        lam scaled by s^2 for L1/L0/Lp); where 1/2 ||D||^2 overflows float64 a ValueError
        names D.

    Examples
    --------
    An l1-regularised fit whose solution is known in closed form (orthonormal columns:
    soft thresholding of C'd at lam):

    >>> import numpy as np, msm_gpu as mg
    >>> C = np.eye(3); d = np.array([2.0, -0.3, -1.0])
    >>> np.round(mg.least_squares(C, d, mg.L1(0.5)).x, 6)
    array([ 1.5,  0. , -0.5])
    >>> mg.least_squares(C, d, mg.L0(0.4)).x  # hard thresholding at sqrt(2 lam) = 0.89
    array([ 2.,  0., -1.])
    """
    if any_dask(C, D, x0):  # a dask D: solved block by block (msm_gpu/dask/solve.py)
        if representation != "auto":
            options["representation"] = representation
        return dask_solve.least_squares(C, D, penalty, x0=x0, backend=backend, **options)
    c_stats = None
    if x0 is None and backend == "auto" and representation == "auto" and set(options) <= {"tol"}:
        # one small dense problem without the batch's layers (finish/small_pwl.py), or one
        # dense l1 problem with a sparse answer (working_set.py): exact, to the same tol
        tol = check_real(options["tol"], "tol", low=0.0) if options else _DEFAULTS.tol
        small = try_small(C, D, penalty, tol)
        if small is None:
            small, c_stats = try_working_set(C, D, penalty, tol)
        if small is not None:
            return small
    return run.least_squares(  # c_stats: no second pass over C after the working sets'
        C,
        D,
        penalty,
        x0=x0,
        backend=backend,
        representation=representation,
        c_stats=c_stats,
        **options,
    )


def nnls(C, D, **kwargs) -> SolveResult:
    """Nonnegative least squares min_{X >= 0} 1/2 ||C X - D||_F^2, every column at once.

    Same as ``least_squares(C, D, NonNeg(), **kwargs)``.  By default the answer is exact
    (the one SciPy's ``nnls`` gives per column): on the CPU an active set per column, on
    the GPU MSM sweeps followed by the exact finish.  One small problem (a float64 NumPy
    C with at most 128 columns and 65 536 entries, a 1-D ``D``, no keyword but ``tol``) is
    solved without the batch's layers (``info["small_problem"]``): the same answer in a
    fraction of the call time.

    Parameters
    ----------
    C : (m, n) array_like or sparse matrix
        The design (NumPy, CuPy, SciPy/cupyx sparse or Dask).
    D : (m,) or (m, r) array_like
        One right-hand side, or r of them as columns (r independent problems).
    **kwargs
        Any keyword of :func:`least_squares` (``x0``, ``backend``, ``representation``)
        and of :func:`solve` (``tol``, ``max_iter``, ``finish``, ``callback``, ...).

    Returns
    -------
    SolveResult
        ``x`` of shape (n,) or (n, r), in D's array type; see :func:`solve`.

    Examples
    --------
    >>> import numpy as np, msm_gpu as mg
    >>> C = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]); d = np.array([1.0, -1.0, 0.0])
    >>> np.round(mg.nnls(C, d).x, 6)
    array([0.5, 0. ])
    """
    return least_squares(C, D, NonNeg(), **kwargs)
