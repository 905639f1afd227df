"""Least squares without the Gram matrix: the design form's exact solve, and the choice of form.

``least_squares(C, D)`` can be solved in two representations of the same quadratic:

- **Gram form**: A = C'C (n x n) and R = -C'D, formed once; every sweep and face solve
  reads A.  Right when n is small next to m and many right-hand sides share A.
- **Design form**: C (dense or sparse) and the residual C x - d per column; an entry of A
  is a dot product of two columns of C, a gradient one column
  (:mod:`msm_gpu.solvers.design_msm`,
  :func:`msm_gpu.solvers.pwl_active_set.pwl_active_set_design`).  Nothing n x n is
  formed, so a wide or sparse C with many columns costs O(nnz(C)) per pass, not O(n^2).

:func:`choose_representation` picks one from the shape, the sparsity and the number of
right-hand sides (``representation=`` forces one); :func:`solve_design` runs the design
form on the host for the convex penalties: MSM sweeps through the columns of C, then the
exact finish's active set on the support they found.
"""

from __future__ import annotations

import time

import numpy as np

from .._input.scaling import equilibration, row_scaled_penalty
from ..arrays import is_sparse, to_host
from ..backends.cpu.jit import njit
from ..backends.cpu.threads import serial_blas
from ..penalties import L1
from ..result import SolveResult
from ..solvers.design_msm import design_sweeps, free_counts
from ..solvers.projected_newton import projected_newton_on_source
from ..solvers.pwl_active_set import DesignSource, active_set_on_source, column_norms_squared
from ..solvers.splitting import b_diagonal, relative_splitting, relative_theta
from .columns import ACTIVE_SET_MAX_N, PWL_MAX_N
from .faces import Faces
from .objective import kkt_residual_from

#: Accepted values of ``representation``.
REPRESENTATIONS = ("auto", "gram", "design")

#: Face solves a column of the design form typically takes (the cost model's constant:
#: each costs about one pass over C).
DESIGN_PASSES = 16

#: Free variables at the sweeps' end from which a face goes to the projected Newton-CG
#: rather than the active set: the active set's dense factor, built one row at a time,
#: costs seconds beyond this size (measurements: docs/benchmarks/shapes.md, issue 51).
NEWTON_MIN_FREE = 1000

#: The design form's active set on a dense C with m >= n rows and n <= ACTIVE_SET_MAX_N
#: gets at most max(48, n / this) face solves; a column it leaves goes to the Gram form
#: (C'C formed once by BLAS, then its active set from that point): a face that keeps
#: growing one variable at a time costs more than forming C'C.
GRAM_AFTER = 16

#: On the same road the design form's factor grows by at most
#: max(GRAM_FACTOR_MIN_GROWTH, n / this) rows past the sweeps' free variables before the
#: Gram form takes the column: that factor is built from column products one row at a
#: time, C'C by BLAS at once.  Counted from the start, so a start with many free
#: variables keeps them; below the floor the factor costs less than the Gram form's set-up.
GRAM_FACTOR_SHARE = 4
GRAM_FACTOR_MIN_GROWTH = 256

#: A dense C with at least this many times as many rows as columns takes the Gram form
#: under "auto", however few its right-hand sides: C'C is m/n times smaller than C, one
#: BLAS product forms it, and the design form's passes over C and its factor from column
#: products cost more (docs/benchmarks/shapes.md, "Tall designs with few right-hand
#: sides").
GRAM_TALL_ROWS = 8
#: ... and from this ratio with two right-hand sides or more (with one, nearer square,
#: the two forms trade places from one draw to the next).
GRAM_TALL_ROWS_BATCH = 4

#: A dense C with at least GRAM_PROBE_ROWS times as many rows as columns, an l1 penalty,
#: a cold start and the Gram form allowed ("auto"): where GRAM_PROBE_SHARE of the
#: variables violate the optimality conditions at 0 and one plain sweep leaves that
#: share free (on average over the columns), the Gram form takes the call
#: (:func:`_gram_probe`).  With most variables free the design form's sweeps and its
#: factor from column products cost more than the Gram form's one BLAS product C'C and
#: its active set, and one sweep from 0 frees about as many variables as the answer
#: holds where it holds most of them (docs/benchmarks/shapes.md, "Design or Gram form").
GRAM_PROBE_ROWS = 2
GRAM_PROBE_SHARE = 0.6
#: ... with at least this many columns: below, the two forms differ by under a
#: millisecond, and the test itself (a product C'D) would cost the design form's answers
#: of a few nonzeros several percent.
GRAM_PROBE_MIN_N = 200

#: A sparse C with more columns than this is solved in the design form: its Gram matrix
#: would be a dense n x n array (32 MB at n = 2048).
SPARSE_GRAM_MAX_N = 2048

#: C x of a dense C reads only the columns where x has a nonzero row when fewer than
#: one in SPARSE_X_SHARE rows of x has one (the design form's answers are sparse).
SPARSE_X_SHARE = 4


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

    It runs MSM (``method="msm"``) on the host: for a convex penalty with a finish, the
    sweeps then the exact active set; otherwise the paper's plain MSM (then, for L0/Lp,
    the support polish).  A callback or a progress bar watches the Gram form's loop, and
    plain MSM's ``time_limit`` is checked there between sweeps (the exact road checks it
    once its sweeps end, and then runs no finish, as the Gram form does)."""
    if not on_host:
        return "the design form runs on the CPU backend only"
    if options.method != "msm":
        return f"the design form runs MSM, not method={options.method!r}"
    if options.callback is not None or options.verbose:
        return "a callback or a progress bar watches the Gram form's iterations"
    if options.time_limit is not None and not exact_road(options, penalty):
        return "time_limit is checked between the Gram form's sweeps"
    return None


def exact_road(options, penalty):
    """The design form's exact road (sweeps, then the active set) applies: a convex
    penalty and a finish."""
    return options.finishes and penalty.is_convex


def choose_representation(requested, shape, sparse, n_rhs, why_not, exact=True):
    """ "gram" or "design" for C of ``shape`` (m, n) and ``n_rhs`` right-hand sides.

    "auto": the design form where it applies (``why_not`` is None) and forming the Gram
    matrix costs more than it saves: a wide C (n > m: A has rank <= m, and the n x n
    matrix alone is larger than C), a sparse C with many columns, or, on the ``exact``
    road, so few right-hand sides that the design form's passes over C (``DESIGN_PASSES``
    a column) cost less than forming C'C (m n^2), unless C is dense and tall
    (``GRAM_TALL_ROWS``, ``GRAM_TALL_ROWS_BATCH``).  Plain MSM sweeps until ``tol``
    (often hundreds of passes), and a sweep over a tall C costs m / n times one over its
    Gram matrix: there only the shape and the sparsity choose.
    """
    requested = check_representation(requested)
    if requested == "design":
        if why_not is not None:
            raise ValueError(f"representation='design': {why_not}")
        return "design"
    if requested == "gram" or why_not is not None:
        return "gram"
    m, n = shape
    if n > m or (sparse and n > SPARSE_GRAM_MAX_N):
        return "design"
    tall = not sparse and m >= (GRAM_TALL_ROWS if n_rhs == 1 else GRAM_TALL_ROWS_BATCH) * n
    return "design" if exact and n_rhs * DESIGN_PASSES < n and not tall else "gram"


def solve_design(problem, options, started, gram_fallback, *, gram_from=None):
    """Solve a prepared least-squares problem (:class:`msm_gpu._input.problem.DesignProblem`) in
    the design form.

    Convex penalty with a finish: MSM sweeps, then the active set.  Columns it leaves
    unfinished (``max_iter`` face solves, or F unbounded along a direction of zero
    curvature: rounding) are handed to ``gram_fallback(cols, x0_user)``, which solves
    those columns in the Gram form (n <= PWL_MAX_N).  ``gram_from()``, where given (the
    form was chosen by "auto"), solves the whole prepared problem in the Gram form: a
    tall dense C whose first sweep frees most variables goes there (``GRAM_PROBE_ROWS``).
    Otherwise: plain MSM sweeps (and the support polish for L0/Lp with a finish)."""
    # every product here is thin (a column or a few): BLAS threads cost more than they
    # save, and the sweeps and the active set run their columns on the sweep's threads
    with serial_blas():
        if not exact_road(options, problem.penalty):
            return _solve_plain(problem, options, started)
        out = _solve_exact(problem, options, started, gram_fallback, gram_from is not None)
    if isinstance(out, SolveResult):
        return out
    res = gram_from()  # the probe handed the call over (C'C formed by threaded BLAS)
    res.info["design_probe"] = out
    return res


def _probes(problem, shape):
    """The Gram form may take this call after a probing sweep (``GRAM_PROBE_ROWS``): a
    tall dense C, an l1 penalty, a cold start."""
    m, n = shape
    return (
        not problem.design.c_kind.sparse
        and m >= GRAM_PROBE_ROWS * n
        and GRAM_PROBE_MIN_N <= n <= ACTIVE_SET_MAX_N
        and isinstance(problem.penalty, L1)
        and problem.user_x0 is None
    )


def _gram_probe(source, c, d, y, s, diag, b_diag, penalty, threads):
    """Why the Gram form should take this call (a note), or None: most variables violate
    the optimality conditions at 0, and one sweep from 0 (y, updated) leaves
    GRAM_PROBE_SHARE of them free.  The Gram form then starts from 0 (the probe runs on
    cold starts only): from the sweep's iterate its active set took up to twice as long
    (its block join frees variables the answer does not hold, removed one a step)."""
    n = c.shape[1]
    if _violators_at_zero(c, d, s, penalty) < GRAM_PROBE_SHARE * n:
        return None
    design_sweeps(source, d, y, diag, b_diag, penalty, 0.0, warm=1, cap=1, threads=threads)
    free = float(free_counts(y, penalty).mean())
    if free < GRAM_PROBE_SHARE * n:
        return None
    return f"{free:.0f} of {n} variables free after one design-form sweep: solved in the Gram form"


def _violators_at_zero(c, d, s, penalty):
    """The mean count per column of the l1 penalty's variables that violate the optimality
    conditions at y = 0 (|g_j| above lam_j in a direction the bounds allow): one product
    C'D.  A sweep from 0 frees few more, so fewer than GRAM_PROBE_SHARE of n spares the
    probing sweep (an answer of ten nonzeros pays this product only)."""
    grad = -(c.T @ d) * s[:, None]
    params = penalty.table(c.shape[1])
    lam, lb, ub = params[:, 0:1], params[:, 1:2], params[:, 2:3]
    moves = ((grad < -lam) & (ub > 0.0)) | ((grad > lam) & (lb < 0.0))
    return float(np.count_nonzero(moves) / max(grad.shape[1], 1))


def _host_design(problem):
    """C on the host in float64 (CSC when sparse), D's columns (m, r) in internal units,
    and ||c_j||^2."""
    c = problem.design.c
    if problem.design.c_kind.sparse:
        c = c.tocsc().astype(np.float64, copy=False)
    else:
        c = np.asarray(to_host(c), dtype=np.float64)
    d = problem.design.d_columns(np, 0, problem.design.d_kind.n_cols)
    norms = problem.design.c_norms  # found by the input checks' pass over C, if any
    return c, d, (_column_norms_squared(c) if norms is None else norms)


def _solve_exact(problem, options, started, gram_fallback, probe=False):
    """The exact road; where ``probe`` and a probing sweep frees most variables of a tall
    C (:func:`_probes`): a note saying so instead, for the Gram form to take the call."""
    opts = options.checked(problem.design.c.shape[1])
    design = problem.design
    c, d, norms = _host_design(problem)
    n = c.shape[1]
    s = equilibration(norms)
    pen_s = row_scaled_penalty(problem.penalty, s)  # the sweeps' (n, 4) parameters
    faces = Faces(np, problem.penalty, n, row_scale=s)  # y's faces: no n x 30 tables
    x0 = problem.x0_internal()
    source = DesignSource(c, s)
    set_up = time.perf_counter()
    # MSM sweeps first (eq. (9) through the columns of C): they find the support at
    # O(nnz(C)) a sweep; the active set then factorises only its free variables
    y = np.ascontiguousarray(faces.project(x0 / s[:, None]), dtype=np.float64)
    diag_s = norms * s * s
    # the splitting's B (a warm start: no convergence check, and a zero column of C with
    # theta = 0 is skipped by the sweep rather than refused)
    b_diag = b_diagonal(diag_s, opts.omega, relative_theta(diag_s, opts.theta))
    if probe and _probes(problem, c.shape):
        note = _gram_probe(source, c, d, y, s, diag_s, b_diag, pen_s, opts.threads)
        if note is not None:
            return note
    sweeps = design_sweeps(
        source, d, y, diag_s, b_diag, pen_s, opts.tol, working_set=True, threads=opts.threads
    )
    swept_at = time.perf_counter()
    # the KKT residual decides the columns the sweeps finished alone; the others go to
    # a finish in any case (and are measured after it)
    info = {}
    kkt = np.full(y.shape[1], np.inf)
    alone = np.flatnonzero(~sweeps.to_finish)
    if alone.size:
        kkt[alone] = _kkt_design(c, d[:, alone], norms, y[:, alone] * s[:, None], problem.penalty)
    status = np.ones(y.shape[1], dtype=np.int8)
    iterations = np.zeros(y.shape[1], dtype=np.int64)
    rest = np.flatnonzero(kkt > opts.tol)  # measured below, after the finish if it runs
    # time_limit bounds the sweeps; as in the Gram form, no finish after a time-limit stop
    timed_out = opts.time_limit is not None and swept_at - started > opts.time_limit
    finish = rest[:0] if timed_out else rest
    if timed_out:
        status[rest] = 0
    large = sweeps.large_face[finish]
    large[large] = free_counts(y[:, finish[large]], pen_s) >= NEWTON_MIN_FREE
    newton = finish[large]
    if newton.size:
        # faces too large to factorise: the projected Newton-CG, every round moving any
        # number of variables; what it leaves unfinished goes on to the active set
        y[:, newton], pn_status, rounds, cg_iters = projected_newton_on_source(
            source, d[:, newton], faces, y[:, newton], threads=opts.threads
        )
        status[newton] = pn_status
        info["newton_columns"] = int(newton.size)
        info["newton_rounds"] = int(rounds.max(initial=0))
        info["newton_cg_iterations"] = int(cg_iters.max(initial=0))
        finish = np.setdiff1d(finish, newton[pn_status == 1])
    cap = grow = None  # (a dense C with few columns: past the caps, the Gram form below)
    if not design.c_kind.sparse and c.shape[0] >= n and n <= ACTIVE_SET_MAX_N:
        cap = max(48, n // GRAM_AFTER)
        grow = max(GRAM_FACTOR_MIN_GROWTH, n // GRAM_FACTOR_SHARE)
    if finish.size:
        y[:, finish], status[finish], iterations[finish] = active_set_on_source(
            source,
            d[:, finish],
            faces,
            y[:, finish],
            max_iter=cap,
            grow=grow,
            diag_max=float(diag_s.max(initial=0.0)),
            grad_max=sweeps.grad_max[finish],
            threads=opts.threads,
        )
    x = y * s[:, None]
    finished = time.perf_counter()
    f_cols, kkt_rest = _objective_and_kkt(c, d, norms, x, problem.penalty, rest)
    kkt[rest] = kkt_rest
    converged = (status == 1) & (kkt <= opts.tol)
    info = {
        "representation": "design",
        "finish": opts.finish,
        "finish_method": "active_set",
        "finish_active_set_iterations": int(iterations.max(initial=0)),
        "finish_columns": int(rest.size if not timed_out else 0),
        "kkt_residual": kkt,
        **info,
    }
    todo = np.flatnonzero(~converged)
    if todo.size and n <= PWL_MAX_N and not timed_out:
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
    n_bad = int((~converged).sum())
    message = (
        f"converged: KKT residual <= tol = {opts.tol:g} in every column (design form)"
        if n_bad == 0
        else f"design form: {n_bad} of {converged.size} columns have a KKT residual above "
        f"tol = {opts.tol:g}"
    )
    if timed_out:
        message = (
            f"reached time_limit = {opts.time_limit:g} s in the sweeps (no finish); " + message
        )
    history = None
    if opts.record_objective:
        if np.any(x0):
            f0, _ = design.objective(x0, problem.penalty)
        else:  # a cold start: C 0 = 0, F = 1/2 ||d||^2 + h(0), from the d at hand
            f0 = 0.5 * np.sum(d * d, axis=0) + np.sum(problem.penalty.value(x0), axis=0)
        history = [float(np.sum(f0))]
    timings = {"setup": set_up - started, "iterations": swept_at - set_up}
    timings["finish"] = finished - swept_at
    return _result(
        problem, opts, started, x, f_cols, history, sweeps.n_iter, converged, message, timings, info
    )


def _solve_plain(problem, options, started):
    """The paper's plain MSM in the design form (``finish=None``, ``tol=0``, L0/Lp); for
    L0/Lp with a finish, then the support polish (:func:`_polish_supports`)."""
    opts = options.checked(problem.design.c.shape[1])
    design, penalty = problem.design, problem.penalty
    c, d, norms = _host_design(problem)
    n = c.shape[1]
    params = penalty.table(n)
    # a start outside [lb, ub] is projected onto it: F there is +inf, and the history
    # adds each row's change of F to a finite start
    y = np.clip(problem.x0_internal(), params[:, 1:2], params[:, 2:3])
    y = np.ascontiguousarray(y, dtype=np.float64)
    source = DesignSource(c)
    splitting = relative_splitting(
        norms, opts.omega, opts.theta, penalty.is_convex, check=opts.check_convergence
    )
    # the stopping floor of the Gram form: ||C'd|| / tr(C'C) where x is 0
    floor = np.linalg.norm(np.asarray(c.T @ d), axis=0) / (float(norms.sum()) or 1.0)
    floor = np.where(floor > 0, floor, np.linalg.norm(y, axis=0))
    f0, _ = design.objective(y, penalty)
    set_up = time.perf_counter()
    max_iter = int(opts.max_iter)
    sweeps = design_sweeps(
        source,
        d,
        y,
        norms,
        splitting.b_diag,
        penalty,
        opts.tol,
        fun=f0,
        floor=floor,
        warm=max_iter,
        cap=max_iter,
        threads=opts.threads,
    )
    swept_at = time.perf_counter()
    converged = sweeps.met_tol & np.isfinite(sweeps.fun)
    n_iter = int(sweeps.n_iter.max(initial=0))
    message = (
        f"converged: every column met tol = {opts.tol:g}"
        if converged.all()
        else f"max_iter = {max_iter} reached before every column converged"
    )
    info = {
        "representation": "design",
        "finish": None,
        "omega": float(opts.omega),
        "theta": float(opts.theta),
        "delta": float(splitting.delta),
    }
    f_cols, _ = design.objective(y, penalty)
    timings = {"setup": set_up - started, "iterations": swept_at - set_up}
    if opts.finishes:  # L0 / Lp: least squares on each support, kept where F decreases
        kept = _polish_supports(source, design, c, d, y, f_cols, norms, splitting.b_diag, penalty)
        info.update(finish=opts.finish, finish_method="support_polish", polished_columns=int(kept))
        message += " (then the support polish)"
        timings["finish"] = time.perf_counter() - swept_at
    history = list(sweeps.history[: n_iter + 1]) if opts.record_objective else None
    return _result(
        problem, opts, started, y, f_cols, history, sweeps.n_iter, converged, message, timings, info
    )


def _polish_supports(source, design, c, d, y, f_cols, norms, b_diag, penalty):
    """For each column: least squares on its support (the nonzeros of y, at most m of
    them), then one MSM sweep from there (monotone, Theorem 1's nonconvex form); kept,
    in place of y and f_cols, where F ends below the swept iterate's.  Returns how many
    columns were kept."""
    m = c.shape[0]
    params = penalty.table(y.shape[0])
    kept = 0
    for col in range(y.shape[1]):
        support = np.flatnonzero(y[:, col])
        if support.size == 0 or support.size > m:
            continue
        cs = c[:, support]
        cs = cs.toarray() if is_sparse(cs) else cs
        z = np.linalg.lstsq(cs, d[:, col], rcond=None)[0]
        lb, ub = params[support, 1], params[support, 2]
        if not np.all(np.isfinite(z)) or np.any(z < lb) or np.any(z > ub):
            continue
        cand = np.zeros((y.shape[0], 1))
        cand[support, 0] = z
        design_sweeps(
            source, d[:, col : col + 1], cand, norms, b_diag, penalty, 0.0, warm=1, cap=1, threads=1
        )
        f_new = design.objective(cand, penalty, np.array([col]))[0][0]
        if f_new < f_cols[col]:
            y[:, col] = cand[:, 0]
            f_cols[col] = f_new
            kept += 1
    return kept


def _result(
    problem, opts, started, x, f_cols, history, n_iter_cols, converged, message, timings, info
):
    """The SolveResult in the user's units and dtype (F of the answer as returned).
    ``history``: F before the sweeps, after each (plain MSM) or only before (the exact
    road)."""
    finished_after = "finish_method" in info
    if np.dtype(problem.dtype) != np.float64:  # F at the answer as returned (rounded)
        x = x.astype(problem.dtype)
        f_cols, _ = problem.design.objective(x, problem.penalty)
    fun = float(np.ldexp(np.sum(f_cols), problem.scaling.f_exp))
    objective = np.empty(0)
    if history is not None:
        # F of the answer ends the history: after the sweeps' own entries (their sum of
        # changes, off by rounding) it replaces the last; after a finish it is appended
        history = list(history)
        if finished_after:
            history.append(float(np.sum(f_cols)))
        else:
            history[-1] = float(np.sum(f_cols))
        objective = np.ldexp(np.asarray(history, dtype=np.float64), problem.scaling.f_exp)
    return SolveResult(
        x=problem.to_user(x),
        fun=fun,
        n_iter=int(n_iter_cols.max(initial=0)),
        converged=bool(converged.all()),
        message=message,
        objective=objective,
        backend=problem.backend.name,
        time=time.perf_counter() - started,
        method="msm",
        converged_columns=converged,
        n_iter_columns=n_iter_cols,
        timings=timings,
        info=info,
    )


def _column_norms_squared(c):
    """||c_j||^2 per column, float64 (dense, or sparse in CSC: no squared copy of C)."""
    if is_sparse(c):
        return column_norms_squared(c.indptr, c.data)
    return np.einsum("ij,ij->j", c, c)


def _objective_and_kkt(c, d, norms, x, penalty, cols):
    """F per column (as :meth:`Design.objective` computes it: 1/2 ||C x - d||^2 + h(x))
    and the KKT residual of :func:`_kkt_design` for the columns ``cols``, from one
    product C x for both."""
    cx = _times(c, x)
    res = cx - d
    f = 0.5 * np.sum(res * res, axis=0) + np.sum(penalty.value(x), axis=0)
    if not cols.size:
        return f, np.empty(0)
    return f, _kkt_from_cx(c, cx[:, cols], d[:, cols], norms, x[:, cols], penalty)


def _kkt_design(c, d, norms, x, penalty):
    """The relative KKT residual of :func:`msm_gpu.finish.objective.kkt_residual` from C: A x =
    C'(C x), r = -C'd, diag A = ||c_j||^2 (no n x n product)."""
    return _kkt_from_cx(c, _times(c, x), d, norms, x, penalty)


def _times(c, x):
    """C x (host, float64); for a sparse C only the columns where x has a nonzero row (the
    design form's x is sparse too)."""
    if not is_sparse(c):
        rows = np.flatnonzero(np.any(x != 0, axis=1))
        if SPARSE_X_SHARE * rows.size < x.shape[0]:  # the columns of C x reads, alone
            return np.asarray(c[:, rows] @ x[rows])
        return np.asarray(c @ x)
    cx = np.zeros((c.shape[0], x.shape[1]))
    _csc_times(c.indptr, c.indices, c.data, np.ascontiguousarray(x), cx)
    return cx


def _kkt_from_cx(c, cx, d, norms, x, penalty):
    """The KKT residual per column from C x: A x = C'(C x) and r = -C'd."""
    if is_sparse(c):  # C'(C x) and C'd in one pass over C
        ax, ctd = np.empty(x.shape), np.empty(x.shape)
        u, v = (np.ascontiguousarray(w, dtype=np.float64) for w in (cx, d))
        _csc_dots(c.indptr, c.indices, c.data, u, v, ax, ctd)
    elif x.shape[1] == 1 and c.flags.f_contiguous and c.dtype == np.float64:
        # one right-hand side: C'(C x) and C'd in one pass over C (two GEMVs read it twice)
        ax, ctd = np.empty(x.shape), np.empty(x.shape)
        u, v = (np.ascontiguousarray(w[:, 0], dtype=np.float64) for w in (cx, d))
        _dense_dots(c.T, u, v, ax[:, 0], ctd[:, 0])
    else:
        # two thin products, not one with 2k columns: BLAS packs a GEMM's operands (a
        # GEMV per column is several times faster for k = 1)
        ax, ctd = np.asarray(c.T @ cx), np.asarray(c.T @ d)
    return kkt_residual_from(np, ax, -ctd, norms, x, penalty)


@njit(nogil=True)
def _csc_times(indptr, indices, data, x, out):
    """out += C x for a CSC C, reading only the columns j where row j of x is nonzero."""
    n, k = x.shape
    for j in range(n):
        nonzero = False
        for col in range(k):
            nonzero = nonzero or x[j, col] != 0.0
        if nonzero:
            for p in range(indptr[j], indptr[j + 1]):
                i, v = indices[p], data[p]
                for col in range(k):
                    out[i, col] += v * x[j, col]


@njit(nogil=True, fastmath={"reassoc"})  # reassociation: vectorised sums
def _dense_dots(ct, u, v, out_u, out_v):
    """out_u[j] = c_j'u and out_v[j] = c_j'v for every row c_j of ``ct`` (C', C-ordered:
    C's columns contiguous), reading each once."""
    n, m = ct.shape
    for j in range(n):
        row = ct[j]
        su = 0.0
        sv = 0.0
        for i in range(m):
            su += row[i] * u[i]
            sv += row[i] * v[i]
        out_u[j] = su
        out_v[j] = sv


@njit(nogil=True)
def _csc_dots(indptr, indices, data, u, v, out_u, out_v):
    """out_u[j] = c_j'u and out_v[j] = c_j'v for every column c_j of a CSC C (one pass;
    a column's entries are read again for each right-hand side, from the cache)."""
    n, k = out_u.shape
    for j in range(n):
        start, stop = indptr[j], indptr[j + 1]
        for col in range(k):
            su = 0.0
            sv = 0.0
            for p in range(start, stop):
                i, w = indices[p], data[p]
                su += w * u[i, col]
                sv += w * v[i, col]
            out_u[j, col] = su
            out_v[j, col] = sv
