"""Least squares without the Gram matrix: the design form's exact solve, and the choice of form.

``least_squares(C, D)`` can be solved in two representations of the same quadratic:

- **Gram form**: A = C'C (n x n) and R = -C'D, formed once; every sweep and face solve
  reads A.  Right when n is small next to m and many right-hand sides share A.
- **Design form**: C (dense or sparse) and the residual C x - d per column; an entry of A
  is a dot product of two columns of C, a gradient one column
  (:func:`msm_gpu.solvers.pwl_active_set.pwl_active_set_design`).  Nothing n x n is formed, so a
  wide or sparse C with many columns costs O(nnz(C)) per pass, not O(n^2).

:func:`choose_representation` picks one from the shape, the sparsity and the number of
right-hand sides (``representation=`` forces one); :func:`solve_design` runs the design
form on the host for the convex penalties (the exact finish's active set from x0, no MSM
sweeps).
"""

from __future__ import annotations

import time

import numpy as np

from .._input.scaling import equilibration, row_scaled_penalty
from ..arrays import is_sparse, to_host
from ..backends.cpu.threads import blas_controller
from ..result import SolveResult
from ..solvers.pwl_active_set import pwl_active_set_design
from .columns import PWL_MAX_N
from .faces import Faces
from .objective import kkt_residual_from

#: Accepted values of ``representation``.
REPRESENTATIONS = ("auto", "gram", "design")

#: Face solves a column of the design form typically takes (the cost model's constant:
#: each costs about one pass over C).
DESIGN_PASSES = 16

#: A sparse C with more columns than this is solved in the design form: its Gram matrix
#: would be a dense n x n array (32 MB at n = 2048).
SPARSE_GRAM_MAX_N = 2048


def check_representation(representation):
    """Validate ``representation``: "auto", "gram" or "design"."""
    if isinstance(representation, str) and representation in REPRESENTATIONS:
        return representation
    raise ValueError(
        f"representation must be one of {', '.join(map(repr, REPRESENTATIONS))}, "
        f"got {representation!r}"
    )


def design_applies(options, penalty, on_host):
    """Why the design form cannot run these options (a message), or None where it can.

    It is the exact finish's active set from x0: a convex penalty, ``method="msm"`` with
    a finish, no MSM sweeps asked for (callback, verbose, ``tol=0``), on the host."""
    if not on_host:
        return "the design form runs on the CPU backend only"
    if not penalty.is_convex:
        return f"the design form needs a convex penalty, got {penalty!r}"
    if not options.finishes:
        return "the design form is the exact finish: it needs method='msm', a finish and tol > 0"
    if options.callback is not None or options.verbose:
        return "the design form runs no MSM sweeps for a callback or a progress bar to watch"
    return None


def choose_representation(requested, shape, sparse, n_rhs, why_not):
    """ "gram" or "design" for C of ``shape`` (m, n) and ``n_rhs`` right-hand sides.

    "auto": the design form where it applies (``why_not`` is None) and forming the Gram
    matrix costs more than it saves: a wide C (n > m: A has rank <= m, and the n x n
    matrix alone is larger than C), a sparse C with many columns, or so few right-hand
    sides that the design form's passes over C (``DESIGN_PASSES`` a column) cost less than
    forming C'C (m n^2).
    """
    requested = check_representation(requested)
    if requested == "design":
        if why_not is not None:
            raise ValueError(f"representation='design': {why_not}")
        return "design"
    if requested == "gram" or why_not is not None:
        return "gram"
    m, n = shape
    if n > m or (sparse and n > SPARSE_GRAM_MAX_N) or n_rhs * DESIGN_PASSES < n:
        return "design"
    return "gram"


def solve_design(problem, options, started, gram_fallback):
    """Solve a prepared least-squares problem (:class:`msm_gpu._input.problem.DesignProblem`) in
    the design form.

    Columns the active set leaves unfinished (``max_iter`` face solves, or F unbounded
    along a direction of zero curvature: rounding) are handed to ``gram_fallback(cols,
    x0_user)``, which solves those columns in the Gram form (n <= PWL_MAX_N)."""
    # every product here is thin (a column or a few): BLAS threads cost more than they
    # save, and the active set runs its columns on the sweep's threads
    with blas_controller().limit(limits=1, user_api="blas"):
        return _solve_design(problem, options, started, gram_fallback)


def _solve_design(problem, options, started, gram_fallback):
    opts = options.checked(problem.design.c.shape[1])
    design = problem.design
    c = design.c
    if is_sparse(c):
        c = c.tocsc().astype(np.float64)
    else:
        c = np.asarray(to_host(c), dtype=np.float64)
    m, n = c.shape
    d = design.d_columns(np, 0, _n_cols(design.d))  # (m, r) float64, internal units
    norms = _column_norms_squared(c)
    s = equilibration(norms)
    pen_s = row_scaled_penalty(problem.penalty, s)
    faces = Faces(np, pen_s, n)
    x0 = problem.x0_internal()
    set_up = time.perf_counter()
    y, status, iterations = pwl_active_set_design(
        c, d, faces, x0 / s[:, None], scale=s, threads=opts.threads
    )
    x = y * s[:, None]
    finished = time.perf_counter()
    kkt = _kkt_design(c, d, norms, x, problem.penalty)
    converged = (status == 1) & (kkt <= opts.tol)
    info = {
        "representation": "design",
        "finish": opts.finish,
        "finish_method": "active_set",
        "finish_active_set_iterations": int(iterations.max(initial=0)),
        "kkt_residual": kkt,
    }
    f_cols, _ = design.objective(x, problem.penalty)
    todo = np.flatnonzero(~converged)
    if todo.size and n <= PWL_MAX_N:
        fallback = gram_fallback(todo, problem.to_user(x[:, todo]))
        x_fb = np.ldexp(np.asarray(to_host(fallback.x), dtype=np.float64), -problem.scaling.x_exp)
        x_fb = x_fb.reshape(n, -1)
        f_fb, _ = design.objective(x_fb, problem.penalty, todo)
        better = f_fb <= f_cols[todo]
        x[:, todo[better]] = x_fb[:, better]
        f_cols[todo[better]] = f_fb[better]
        kkt[todo] = np.where(better, fallback.info["kkt_residual"], kkt[todo])
        converged[todo] = np.where(better, fallback.converged_columns, converged[todo])
        info["gram_fallback_columns"] = int(todo.size)
    if np.dtype(problem.dtype) != np.float64:  # F at the answer as returned (rounded)
        x = x.astype(problem.dtype)
        f_cols, _ = design.objective(x, problem.penalty)
    fun = float(np.ldexp(np.sum(f_cols), problem.scaling.f_exp))
    objective = np.empty(0)
    if opts.record_objective:
        f0, _ = design.objective(x0, problem.penalty)
        objective = np.ldexp(np.array([np.sum(f0), np.sum(f_cols)]), problem.scaling.f_exp)
    n_bad = int((~converged).sum())
    message = (
        f"converged: KKT residual <= tol = {opts.tol:g} in every column (design form)"
        if n_bad == 0
        else f"design form: {n_bad} of {converged.size} columns have a KKT residual above "
        f"tol = {opts.tol:g}"
    )
    x_user = problem.to_user(x)
    return SolveResult(
        x=x_user,
        fun=fun,
        n_iter=0,
        converged=n_bad == 0,
        message=message,
        objective=objective,
        backend=problem.backend.name,
        time=time.perf_counter() - started,
        method="msm",
        converged_columns=converged,
        n_iter_columns=np.zeros(converged.size, dtype=np.int64),
        timings={"setup": set_up - started, "finish": finished - set_up},
        info=info,
    )


def _n_cols(d):
    return d.shape[1] if len(d.shape) == 2 else 1


def _column_norms_squared(c):
    """||c_j||^2 per column, float64 (dense or sparse C)."""
    if is_sparse(c):
        return np.asarray(c.multiply(c).sum(axis=0), dtype=np.float64).ravel()
    return np.einsum("ij,ij->j", c, c)


def _kkt_design(c, d, norms, x, penalty):
    """The relative KKT residual of :func:`msm_gpu.finish.objective.kkt_residual` from C: A x =
    C'(C x), r = -C'd, diag A = ||c_j||^2 (no n x n product)."""
    from ..arrays import namespace

    ax = np.asarray(c.T @ (c @ x))
    r = -np.asarray(c.T @ d)
    return kkt_residual_from(namespace(x), ax, r, norms, x, penalty)
