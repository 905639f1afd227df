"""Exact finish of an MSM run: MSM sweeps find the face, a direct solve on it ends the job.

MSM is a first-order method: its sweeps find quickly WHICH entries of X sit at a bound (or
at zero, for l1), then crawl on an ill-conditioned face.  :func:`run_msm_finished` runs the
sweeps (a short warm-up), then the finish of :mod:`.columns`: the problem restricted to the
face solved exactly, batched over columns, the KKT conditions checked and the violators
exchanged (:mod:`.pivoting`), every finished column kept only where F does not increase,
and the columns the finish cannot settle resumed by plain MSM.

NNLS and the other piecewise-linear penalties on the host (n <= ACTIVE_SET_MAX_N) take a
shorter road: no sweeps, an active set per column from x0 (:mod:`msm_gpu.solvers`).
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np

from ..arrays import to_host
from ..solvers.loop import LoopOutcome
from .columns import (
    WARMUP_CHUNK,
    WARMUP_MAX,
    WARMUP_SETTLED,
    face_method,
    finish_columns,
    zero_inside_a_box,
)
from .faces import Faces
from .objective import column_objective, kkt_residual

#: Accepted values of ``finish``.
FINISH_MODES = ("auto", "exact")


# -- MSM + finish: what msm_gpu.solve runs when finish is not None ---------------------------


def check_finish(finish):
    """Validate the ``finish`` option: "auto", "exact" or None."""
    if finish is None or (isinstance(finish, str) and finish in FINISH_MODES):
        return finish
    raise ValueError(f"finish must be 'auto', 'exact' or None, got {finish!r}")


#: Why a solve with finish did not finish (A not shown PSD: check_convergence=False).
FINISH_SKIPPED = "A was not shown positive semidefinite (check_convergence=False): plain MSM"


def run_msm_finished(
    backend,
    a,
    r,
    x0,
    penalty,
    splitting,
    *,
    finish,
    panel,
    psd_known=True,
    threads=None,
    fine=None,
    design=None,
    **loop,
):
    """MSM sweeps through :func:`msm_gpu.solvers.loop.run_iterations`, then the exact finish.

    Convex h: MSM runs in chunks of :data:`WARMUP_CHUNK` sweeps until the face (the
    entries at a bound / at zero) stops changing (fewer than :data:`WARMUP_SETTLED` of the
    entries move between chunks) or ``min(max_iter, WARMUP_MAX)`` sweeps are done; then
    :func:`finish_columns` (which goes back to MSM sweeps for columns it cannot finish).  A
    column is converged when its relative KKT residual (:func:`kkt_residual`) is <= ``tol``.
    Nonconvex h (L0, Lp): the plain MSM run to its own stopping rule, then the polish;
    ``converged`` keeps MSM's meaning (the step rule).

    ``psd_known``: A was shown positive semidefinite (C'C, or the PSD test passed); the
    face solves of a convex finish need it, so without it the plain MSM run (to its own
    stopping rule) is returned, with ``info["finish_skipped"]`` saying why.
    ``fine``: a and r in float64 for a float32 problem (``Problem.fine``): the finish
    and the reported KKT residual use them.  ``design``: C and D of a least-squares
    problem (``Problem.design``): the finish compares F from the residual, and hands it
    on in ``info["_f_design"]`` (float64 runs) for the result.  ``x0`` is handed over:
    the sweeps may overwrite it.
    ``loop`` holds the keywords of ``run_iterations`` (tol, max_iter, time_limit,
    record_objective, callback, to_user, start_time, ...).  Returns its
    :class:`~msm_gpu.solvers.loop.LoopOutcome`, with ``info`` extended by the finish details
    (``kkt_residual`` per column, ``finish``, ``finish_method``) and ``timings["finish"]``.
    """
    from ..solvers.loop import run_iterations
    from ..solvers.msm import MsmMethod

    xp = backend.xp
    n, c = r.shape
    tol, max_iter = loop["tol"], loop["max_iter"]
    record_objective = loop["record_objective"]

    def msm_run(x_start, rr, x0_owned=False, **overrides):
        options = {**loop, **overrides}
        method = MsmMethod(
            backend, a, rr, x_start, penalty, splitting, panel, threads=threads, x0_owned=x0_owned
        )
        return run_iterations(method, n_cols=rr.shape[1], **options)

    def settle(x_cols, cols):
        quiet = {"time_limit": None, "record_objective": False, "callback": None}
        quiet.update({"verbose": False, "to_user": lambda v: v, "x_floor": None})
        return msm_run(x_cols, r[:, cols], start_time=time.perf_counter(), **quiet).x

    def sweep(x_cols, cols, k):
        quiet = {"tol": 0.0, "max_iter": k, "time_limit": None, "record_objective": False}
        quiet.update({"callback": None, "verbose": False, "to_user": lambda v: v})
        quiet["x_floor"] = None
        return msm_run(x_cols, r[:, cols], start_time=time.perf_counter(), **quiet).x

    if penalty.is_convex and not psd_known:
        # the face solves need A PSD and nothing showed it: the plain MSM run, as is
        out = msm_run(x0, r)
        info = dict(out.info)
        info.update({"finish": None, "finish_skipped": FINISH_SKIPPED})
        return replace(out, info=info)
    method = face_method(finish, n, backend.on_host, penalty)
    # sweeps asked for: a callback or progress bar watches them, or tol = 0 (exactly
    # max_iter iterations, then the finish)
    sweeps_wanted = loop["callback"] is not None or loop.get("verbose") or tol == 0
    if method == "active_set" and not sweeps_wanted and not zero_inside_a_box(penalty):
        # the host's active set from x0 needs no sweeps where x = 0 is a vertex of h
        # (NNLS, l1): they find faces it then has to undo (benchmarks/bench_nnls.py)
        out = _start_outcome(xp, a, r, x0, penalty, record_objective, splitting)
    elif penalty.is_convex:
        # warm-up: MSM until the face settles (checked every WARMUP_CHUNK sweeps)
        faces = Faces(xp, penalty, n)
        seen = {"q": faces.states(x0)}

        def face_settled(method, k):
            if k % WARMUP_CHUNK:
                return False
            q = faces.states(method.current_x())
            moved = float(xp.mean(xp.astype(q != seen["q"], xp.float64, copy=False)))
            seen["q"] = q
            return moved < WARMUP_SETTLED

        out = msm_run(
            x0, r, x0_owned=True, max_iter=min(max_iter, WARMUP_MAX), phase_done=face_settled
        )
    else:
        out = msm_run(x0, r, x0_owned=True)
    history = list(out.objective)
    n_iter, n_iter_cols = out.n_iter, out.n_iter_columns
    timings = dict(out.timings)
    x = out.x
    stopped = out.diverged or out.message.startswith(("stopped", "reached time_limit"))
    started = time.perf_counter()
    info = dict(out.info)
    info.update({"finish": finish, "finish_method": method})
    known = (None, None)  # F and KKT per column of x, when the finish has them
    if not stopped:
        with _blas_threads(backend, n, c):
            x64, details = finish_columns(
                a,
                r,
                x,
                penalty,
                method=method,
                tol=tol,
                sweep=sweep,
                settle=settle,
                threads=threads,
                fine=fine,
                design=design,
            )
        if a.dtype == xp.float64:
            known = details.get("_f_columns"), details.get("_kkt_residual")
            if "_f_design" in details:
                info["_f_design"] = details["_f_design"]
        details.pop("_f_columns", None)
        details.pop("_kkt_residual", None)
        details.pop("_f_design", None)
        info.update(details)
        x = xp.astype(x64, a.dtype)
    f_cols, kkt = known
    if kkt is None:
        kkt = kkt_residual(*(fine if fine is not None else (a, r)), x, penalty)
    info["kkt_residual"] = kkt
    if design is not None:
        f_cols = None  # the result takes F from the residual (problem.user_outcome)
    elif f_cols is None and a.dtype == xp.float64:
        f_cols, _ = column_objective(xp, a, r, x, penalty)
    elif f_cols is None:
        # as the plain run reports it: the bounds compared in x's dtype (a float32 x at a
        # bound is the bound rounded to float32, outside the float64 box by an ulp)
        from ..solvers.msm import column_objectives

        f_cols = column_objectives(xp, a, r, x, penalty)[0]
    fun = math.nan if f_cols is None else float(xp.sum(f_cols))
    if record_objective:
        history.append(fun)
    if penalty.is_convex:
        converged = to_host(kkt <= tol)
        if stopped:
            message = out.message
        elif converged.all():
            message = f"converged: KKT residual <= tol = {tol:g} in every column (finish)"
        else:
            message = (
                f"finish: {int((~converged).sum())} of {c} columns have a KKT "
                f"residual above tol = {tol:g}"
            )
    else:
        converged = out.converged_columns
        message = out.message + " (then the support polish)"
    timings["finish"] = time.perf_counter() - started
    return LoopOutcome(
        x=x,
        fun_columns=f_cols,
        fun=fun,
        n_iter=n_iter,
        converged_columns=np.asarray(converged, dtype=bool),
        n_iter_columns=n_iter_cols,
        message=message,
        objective=np.asarray(history, dtype=np.float64),
        timings=timings,
        info=info,
        diverged=out.diverged,
    )


def _start_outcome(xp, a, r, x0, penalty, record_objective, splitting):
    """The outcome of zero MSM iterations from x0 (what the finish starts from); its info
    holds the splitting's parameters, as a run's does."""
    c = r.shape[1]
    history = []
    if record_objective:
        history.append(float(xp.sum(column_objective(xp, a, r, x0, penalty)[0])))
    return LoopOutcome(
        x=x0,
        fun_columns=None,
        fun=math.nan,
        n_iter=0,
        converged_columns=np.zeros(c, dtype=bool),
        n_iter_columns=np.zeros(c, dtype=np.int64),
        message="no MSM iterations (active set from x0)",
        objective=np.asarray(history, dtype=np.float64),
        timings={"setup": 0.0, "iterations": 0.0},
        info={"omega": splitting.omega, "theta": splitting.theta, "delta": splitting.delta},
        diverged=False,
    )


#: Up to this n the finish's GEMMs ((n x n) @ (n x c)) are thin and memory-bound: BLAS runs
#: them on one thread (threads cost more than they save there, above all on a busy machine).
SERIAL_BLAS_N = 128


def _blas_threads(backend, n, c):
    """Host BLAS on one thread for a finish with n <= SERIAL_BLAS_N (else no change)."""
    from contextlib import nullcontext

    if backend.on_host and n <= SERIAL_BLAS_N and n * n * c > 1e6:
        return backend.limit_host_blas()
    return nullcontext()
