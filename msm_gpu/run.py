"""One in-memory solve: the user's arrays -> a prepared problem -> the method -> the result.

:func:`solve` and :func:`least_squares` are the bodies of the front doors
(:mod:`msm_gpu._api`) for in-memory arrays; the Dask layer calls them once per column block.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from . import column_blocks
from ._input import validation as v
from ._input.memory import check_max_memory
from ._input.problem import gram_problem, prepare_design, prepare_solve, user_outcome
from ._input.stats import column_stats
from .arrays import aligned_empty, is_cupy, is_sparse, to_host
from .finish.design_form import (
    check_representation,
    choose_representation,
    design_applies,
    exact_road,
    solve_design,
)
from .finish.objective import kkt_residual_from
from .finish.run import FinishRoad, run_active_set, run_msm_finished, starts_at_active_set
from .options import SolveOptions
from .penalties import Zero
from .result import SolveResult
from .solvers import sparse_msm
from .solvers.loop import LoopSettings, run_iterations
from .solvers.msm import MsmMethod
from .solvers.proxgrad import ProxGradMethod
from .solvers.splitting import relative_splitting


def solve(A, R, penalty=None, *, x0=None, backend="auto", known_psd=False, **options):
    """:func:`msm_gpu.solve` on in-memory arrays (keywords: :class:`SolveOptions`).

    ``known_psd``: A is symmetric PSD by construction (proximal Newton's model Hessians):
    its symmetry and PSD tests are skipped.  The columns of R are solved in blocks whose
    workspace fits ``max_memory`` (:mod:`msm_gpu.column_blocks`)."""
    started = time.perf_counter()
    penalty = Zero() if penalty is None else v.check_penalty(penalty)
    options = SolveOptions.from_keywords(**options)
    if sparse_msm.applies(A, backend):
        return _solve_sparse_a(A, R, penalty, x0, options, started)
    blocks = column_blocks.plan(
        R,
        n=_rows(A),
        m=0,
        max_memory=check_max_memory(options.max_memory),
        on_device=_on_device(backend, A, R),
    )

    def solve_block(r_cols, x0_cols, time_limit):
        block_options = replace(options, time_limit=time_limit)
        return _solve_whole(A, r_cols, penalty, x0_cols, backend, known_psd, block_options)

    if blocks is None:
        return _solve_whole(A, R, penalty, x0, backend, known_psd, options, started)
    return column_blocks.solve_in_blocks(
        solve_block,
        R,
        _as_columns(x0),
        blocks,
        options=_block_options(options),
        method=options.method,
    )


def _solve_sparse_a(A, R, penalty, x0, options, started):
    """A large SciPy sparse A: the paper's MSM swept over its CSR rows, never densified."""
    opts = options.checked(A.shape[0])
    unsupported = {
        "method": opts.method != "msm",
        "callback": opts.callback is not None,
        "verbose": opts.verbose,
        "finish": opts.finish == "exact",
    }
    named = [name for name, bad in unsupported.items() if bad]
    if named:
        raise ValueError(
            f"a sparse A with n > {sparse_msm.DENSE_MAX_N} is solved by plain MSM sweeps over "
            f"its rows; {', '.join(named)} {'is' if len(named) == 1 else 'are'} not "
            "available there (pass A dense, or leave the option at its default)"
        )
    res = sparse_msm.solve_sparse(
        A,
        R,
        penalty,
        x0,
        omega=opts.omega,
        theta=opts.theta,
        tol=opts.tol,
        max_iter=opts.max_iter,
        time_limit=opts.time_limit,
        record_objective=opts.record_objective,
        check_convergence=opts.check_convergence,
        started=started,
    )
    # plain MSM stops on its step size; say how far from KKT each column is, as the
    # finished roads do (one product with the sparse A)
    x = np.asarray(res.x, dtype=np.float64).reshape(A.shape[0], -1)
    r = np.asarray(R, dtype=np.float64).reshape(A.shape[0], -1)
    diag = np.asarray(A.diagonal(), dtype=np.float64)
    res.info["kkt_residual"] = kkt_residual_from(np, A @ x, r, diag, x, penalty)
    return res


def _solve_whole(A, R, penalty, x0, backend, known_psd, options, started=None):
    """One in-memory solve of all the columns of R at once."""
    started = time.perf_counter() if started is None else started
    problem = prepare_solve(
        A,
        R,
        penalty,
        x0,
        backend,
        check_psd=bool(options.check_convergence),
        any_size=options.finish is not None and options.method == "msm" and penalty.is_convex,
        known_psd=known_psd,
    )
    return solve_prepared(problem, started, options)


def _rows(a) -> int:
    shape = getattr(a, "shape", None)
    return int(shape[0]) if shape else 1


def _on_device(backend, *arrays) -> bool:
    """Whether the solve runs on the GPU (``backends.get_backend``'s rule, read only)."""
    if backend == "cuda":
        return True
    return backend == "auto" and any(is_cupy(a) for a in arrays)


def _as_columns(x0):
    """x0 sliceable by columns (array-likes become NumPy arrays)."""
    if x0 is None or hasattr(x0, "shape"):
        return x0
    return np.asarray(x0)


def _block_options(options):
    return {"time_limit": options.time_limit, "verbose": options.verbose}


def solve_prepared(problem, started, options):
    """Run the chosen method on a prepared (rescaled) problem through the loop."""
    be, a, r, penalty = problem.backend, problem.a, problem.r, problem.penalty
    opts = options.checked(a.shape[0])
    if problem.x0 is not None:
        x_init = problem.x0
    elif be.on_host:  # aligned for the sweep's vector loads (arrays.HOST_ALIGN)
        x_init = aligned_empty(r.shape, r.dtype)
        x_init[...] = 0
    else:
        x_init = be.xp.zeros_like(r)

    settings = LoopSettings(
        tol=opts.tol,
        max_iter=opts.max_iter,
        time_limit=opts.time_limit,
        record_objective=opts.record_objective,
        start_time=started,
        callback=opts.callback,
        to_user=problem.to_user,
        x_floor=problem.x_floor,
        verbose=opts.verbose,
        objective_to_user=problem.scaling.fun_to_user,
    )
    n_cols = r.shape[1]
    if opts.method != "msm":
        stepper = ProxGradMethod(opts.method, be, a, r, x_init, penalty)
        out = run_iterations(stepper, n_cols=n_cols, settings=settings)
    else:
        diag_a = np.asarray(to_host(be.xp.diagonal(a)), dtype=np.float64)
        splitting = relative_splitting(
            diag_a, opts.omega, opts.theta, penalty.is_convex, check=opts.check_convergence
        )
        if not opts.finishes:  # the paper's plain MSM
            # x_init is a fresh array (scaled x0 or zeros) that nothing reads afterwards
            stepper = MsmMethod(
                be,
                a,
                r,
                x_init,
                penalty,
                splitting,
                opts.panel,
                threads=opts.threads,
                x0_owned=True,
            )
            out = run_iterations(stepper, n_cols=n_cols, settings=settings)
        else:
            road = FinishRoad(
                finish=opts.finish,
                panel=opts.panel,
                settings=settings,
                psd_known=problem.psd_known,
                threads=opts.threads,
                fine=problem.fine,
                design=problem.design,
            )
            run_road = run_msm_finished  # sweeps find the face, an exact solve finishes
            if problem.psd_known and starts_at_active_set(
                opts.finish, a.shape[0], be.on_host, penalty, settings
            ):  # NNLS, l1 on the host: the active set from x_init, no sweep (finish/run.py)
                run_road = run_active_set
            out = run_road(be, a, r, x_init, penalty, splitting, road)
    user = user_outcome(problem, out)
    if opts.method == "msm":
        user["info"]["theta"] = opts.theta
        user["info"]["theta_abs"] = problem.scaling.curvature_to_user(splitting.theta)
    return SolveResult(
        x=user["x"],
        fun=user["fun"],
        n_iter=out.n_iter,
        converged=bool(user["converged_columns"].all()),
        message=user["message"],
        objective=user["objective"],
        backend=be.name,
        time=time.perf_counter() - started,
        method=opts.method,
        converged_columns=user["converged_columns"],
        n_iter_columns=out.n_iter_columns,
        timings=out.timings,
        info=user["info"],
    )


def least_squares(
    C, D, penalty=None, *, x0=None, backend="auto", representation="auto", c_stats=None, **options
):
    """:func:`msm_gpu.least_squares` on in-memory arrays (keywords: :class:`SolveOptions`).

    The representation (Gram or design form) is chosen once for the whole batch; its
    columns are then solved in blocks whose workspace fits ``max_memory``.  ``c_stats``:
    :func:`msm_gpu._input.stats.column_stats` of C where the caller has it (each block
    takes it: no pass over C for them)."""
    started = time.perf_counter()
    penalty = Zero() if penalty is None else v.check_penalty(penalty)
    user_options = options
    options = SolveOptions.from_keywords(**options)
    check_representation(representation)
    on_device = _on_device(backend, C, D)
    blocks = column_blocks.plan(
        D,
        n=_columns(C),
        m=_rows(C),
        max_memory=check_max_memory(options.max_memory),
        on_device=on_device,
    )
    if blocks is None or blocks.n_blocks == 1:
        res = _least_squares_whole(
            C, D, penalty, x0, backend, representation, options, user_options, started, c_stats
        )
        if blocks is not None:
            res.info.update(n_blocks=1, block_columns=blocks.n_cols)
        return res
    if representation == "auto":  # one choice for the batch: blocks do not change it
        why_not = design_applies(options, penalty, not on_device)
        shape = (_rows(C), _columns(C))
        representation = choose_representation(
            "auto", shape, is_sparse(C), blocks.n_cols, why_not, exact_road(options, penalty)
        )
    rhs = D.tocsc() if is_sparse(D) and getattr(D, "format", "csc") not in ("csc", "csr") else D
    if c_stats is None:  # one pass over C for every block (None where C is not a plain array)
        c_stats = column_stats(C)

    def solve_block(d_cols, x0_cols, time_limit):
        block_options = replace(options, time_limit=time_limit)
        block_user = {**user_options, "time_limit": time_limit}
        return _least_squares_whole(
            C,
            d_cols,
            penalty,
            x0_cols,
            backend,
            representation,
            block_options,
            block_user,
            c_stats=c_stats,
        )

    return column_blocks.solve_in_blocks(
        solve_block,
        rhs,
        _as_columns(x0),
        blocks,
        options=_block_options(options),
        method=options.method,
    )


def _columns(c) -> int:
    shape = getattr(c, "shape", None)
    return int(shape[1]) if shape is not None and len(shape) == 2 else 1


def _least_squares_whole(
    C, D, penalty, x0, backend, representation, options, user_options, started=None, c_stats=None
):
    """One in-memory least-squares solve of all the columns of D at once."""
    started = time.perf_counter() if started is None else started
    # the choice by shape alone, before C is checked: a hint for the layout of C's copy
    # (a wrong guess costs a slower copy, never an answer; the choice below may refuse)
    expected = choose_representation(
        representation,
        (_rows(C), _columns(C)),
        is_sparse(C),
        _columns(D),
        None,
        exact_road(options, penalty),
    )
    c_order = "F" if expected == "design" else None
    base = prepare_design(C, D, penalty, x0, backend, c_order=c_order, c_stats=c_stats)
    c_kind = base.design.c_kind
    why_not = design_applies(options, penalty, base.backend.on_host)
    form = choose_representation(
        representation,
        c_kind.shape,
        c_kind.sparse,
        base.design.d_kind.n_cols,
        why_not,
        exact_road(options, penalty),
    )

    def solve_gram():  # the prepared problem in the Gram form (C'C formed once)
        problem = gram_problem(base, penalty, fine_gram=options.finishes)
        result = solve_prepared(problem, started, options)
        result.info["representation"] = "gram"
        return result

    if form == "design":

        def gram_fallback(cols, x0_cols):
            d_cols = D if len(D.shape) == 1 else D[:, cols]
            return least_squares(
                C,
                d_cols,
                penalty,
                x0=x0_cols,
                backend=backend,
                representation="gram",
                **user_options,
            )

        auto = representation == "auto"
        return solve_design(
            base, options, started, gram_fallback, gram_from=solve_gram if auto else None
        )
    return solve_gram()
