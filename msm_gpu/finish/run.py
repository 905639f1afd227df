"""Exact finish of an MSM run: MSM sweeps find the face, a direct solve on it ends the job.

MSM is a first-order method: its sweeps find quickly WHICH entries of X sit at a bound (or
at zero, for l1), then crawl on an ill-conditioned face.  :func:`run_msm_finished` runs the
sweeps (a short warm-up), then the finish of :mod:`.columns`: the problem restricted to the
face solved exactly, batched over columns, the KKT conditions checked and the violators
exchanged (:mod:`.pivoting`), every finished column kept only where F does not increase,
and the columns the finish cannot settle resumed by plain MSM.

NNLS and l1 on the host (n <= ACTIVE_SET_MAX_N) take a shorter road,
:func:`run_active_set`: no sweeps, an active set per column from x0 (:mod:`msm_gpu.solvers`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

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


class _MsmRuns:
    """Plain MSM runs on (a, r) with one splitting: the sweeps before a finish and those the
    finish asks for on the columns it cannot settle alone."""

    def __init__(self, backend, a, r, penalty, splitting, road):
        self.backend, self.a, self.r, self.penalty = backend, a, r, penalty
        self.splitting, self.road, self.settings = splitting, road, road.settings

    def run(self, x_start, rr, settings, x0_owned=False, phase_done=None):
        from ..solvers.loop import run_iterations
        from ..solvers.msm import MsmMethod

        method = MsmMethod(
            self.backend,
            self.a,
            rr,
            x_start,
            self.penalty,
            self.splitting,
            self.road.panel,
            threads=self.road.threads,
            x0_owned=x0_owned,
        )
        return run_iterations(method, n_cols=rr.shape[1], settings=settings, phase_done=phase_done)

    def settle(self, x_cols, cols):
        """x after plain MSM to its own stopping rule on the columns ``cols``."""
        return self.run(x_cols, self.r[:, cols], self.settings.quiet()).x

    def sweep(self, x_cols, cols, k):
        """x after exactly k MSM sweeps on the columns ``cols``."""
        return self.run(x_cols, self.r[:, cols], self.settings.quiet(tol=0.0, max_iter=k)).x


def starts_at_active_set(finish, n, on_host, penalty, settings) -> bool:
    """Whether the exact finish starts from x0 with no MSM sweep: the host's active set
    where x = 0 is a vertex of h (NNLS, l1), unless sweeps are asked for (a callback or a
    progress bar watches them, or tol = 0: exactly max_iter of them, then the finish)."""
    sweeps_wanted = settings.callback is not None or settings.verbose or settings.tol == 0
    return (
        face_method(finish, n, on_host, penalty) == "active_set"
        and not sweeps_wanted
        and not zero_inside_a_box(penalty)
    )


@dataclass(frozen=True)
class FinishRoad:
    """What both roads of an exact finish are told besides the problem.

    Attributes
    ----------
    finish : {"auto", "exact"}
    panel : int or None
        The sweep's panel (``SolveOptions.panel``).
    settings : msm_gpu.solvers.loop.LoopSettings
        The sweeps' stopping rule and reporting.
    psd_known : bool
        A was shown positive semidefinite (C'C, or the PSD test passed).
    threads : int, optional
    fine : tuple, optional
        a and r in float64 for a float32 problem (``Problem.fine``).
    design : Design, optional
        C and D of a least-squares problem (``Problem.design``).
    """

    finish: str
    panel: object
    settings: object
    psd_known: bool = True
    threads: object = None
    fine: object = None
    design: object = None


def run_active_set(backend, a, r, x0, penalty, splitting, road):
    """The host's active set per column from x0, no MSM sweep before it (NNLS, l1).

    The sweeps would find faces the active set then has to undo (benchmarks/bench_nnls.py);
    see :func:`starts_at_active_set` for when this road is taken.  Arguments and the
    returned :class:`~msm_gpu.solvers.loop.LoopOutcome` as :func:`run_msm_finished`'s
    (``n_iter`` 0; the splitting's parameters in ``info``, for the columns the finish
    hands to MSM).  ``road.psd_known`` must be True: the face solves need A PSD."""
    if not road.psd_known:
        raise ValueError("the active set needs A shown positive semidefinite")
    runs = _MsmRuns(backend, a, r, penalty, splitting, road)
    return _finish(runs, x0, None, method="active_set")


def run_msm_finished(backend, a, r, x0, penalty, splitting, road):
    """MSM sweeps through :func:`msm_gpu.solvers.loop.run_iterations`, then the exact finish.

    Convex h: MSM runs in chunks of :data:`WARMUP_CHUNK` sweeps until the face (the
    entries at a bound / at zero) stops changing (fewer than :data:`WARMUP_SETTLED` of the
    entries move between chunks) or ``min(max_iter, WARMUP_MAX)`` sweeps are done; then
    :func:`finish_columns` (which goes back to MSM sweeps for columns it cannot finish).  A
    column is converged when its relative KKT residual (:func:`kkt_residual`) is <= ``tol``.
    Nonconvex h (L0, Lp): the plain MSM run to its own stopping rule, then the polish;
    ``converged`` keeps MSM's meaning (the step rule).

    ``road`` (:class:`FinishRoad`): without ``psd_known`` (A shown positive semidefinite:
    C'C, or the PSD test passed), which the face solves of a convex finish need, the plain
    MSM run (to its own stopping rule) is returned, with ``info["finish_skipped"]`` saying
    why.  ``fine``: a and r in float64 for a float32 problem: the finish and the reported
    KKT residual use them.  ``design``: C and D of a least-squares problem: the finish
    compares F from the residual, and hands it on in ``info["_f_design"]`` (float64 runs)
    for the result.  ``x0`` is handed over: the sweeps may overwrite it.  Returns their
    :class:`~msm_gpu.solvers.loop.LoopOutcome`, with ``info`` extended by the finish details
    (``kkt_residual`` per column, ``finish``, ``finish_method``) and ``timings["finish"]``.
    """
    xp = backend.xp
    n = r.shape[0]
    settings = road.settings
    runs = _MsmRuns(backend, a, r, penalty, splitting, road)
    if penalty.is_convex and not road.psd_known:
        # the face solves need A PSD and nothing showed it: the plain MSM run, as is
        out = runs.run(x0, r, settings)
        info = dict(out.info)
        info.update({"finish": None, "finish_skipped": FINISH_SKIPPED})
        return replace(out, info=info)
    method = face_method(road.finish, n, backend.on_host, penalty)
    if penalty.is_convex:
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

        warmup = replace(settings, max_iter=min(settings.max_iter, WARMUP_MAX))
        out = runs.run(x0, r, warmup, x0_owned=True, phase_done=face_settled)
    else:
        out = runs.run(x0, r, settings, x0_owned=True)
    return _finish(runs, out.x, out, method=method)


def _finish(runs, x, sweeps, *, method):
    """The exact finish from ``x``, after the MSM run ``sweeps`` (a LoopOutcome, or None
    where no sweep ran): F, KKT, message and timings of the whole run."""
    backend, a, r, penalty = runs.backend, runs.a, runs.r, runs.penalty
    settings, tol = runs.settings, runs.settings.tol
    finish, fine, design = runs.road.finish, runs.road.fine, runs.road.design
    xp = backend.xp
    n, c = r.shape
    if sweeps is None:
        history = []
        if settings.record_objective:
            history.append(float(xp.sum(column_objective(xp, a, r, x, penalty)[0])))
        n_iter, n_iter_cols = 0, np.zeros(c, dtype=np.int64)
        timings = {"setup": 0.0, "iterations": 0.0}
        split = runs.splitting
        info = {"omega": split.omega, "theta": split.theta, "delta": split.delta}
        stopped = diverged = False
    else:
        history = list(sweeps.objective)
        n_iter, n_iter_cols = sweeps.n_iter, sweeps.n_iter_columns
        timings, info = dict(sweeps.timings), dict(sweeps.info)
        diverged = sweeps.diverged
        stopped = diverged or sweeps.message.startswith(("stopped", "reached time_limit"))
    started = time.perf_counter()
    info.update({"finish": finish, "finish_method": method})
    known = (None, None)  # F and KKT per column of x, when the finish has them
    unfinished = None  # columns the finish could not prove optimal whatever their KKT
    if not stopped:
        with _blas_threads(backend, n, c):
            x64, details = finish_columns(
                a,
                r,
                x,
                penalty,
                method=method,
                tol=tol,
                sweep=runs.sweep,
                settle=runs.settle,
                threads=runs.road.threads,
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
        unfinished = details.pop("_unconverged", None)
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
    if settings.record_objective:
        history.append(fun)
    if penalty.is_convex:
        converged = to_host(kkt <= tol)
        if unfinished is not None:  # the polish on C did not finish: not known exact
            converged = converged & ~unfinished
        if stopped:
            message = sweeps.message
        elif converged.all():
            message = f"converged: KKT residual <= tol = {tol:g} in every column (finish)"
        else:
            message = (
                f"finish: {int((~converged).sum())} of {c} columns have a KKT "
                f"residual above tol = {tol:g}"
                + ("" if unfinished is None else " or a polish on C that did not finish")
            )
    else:
        converged = sweeps.converged_columns
        message = sweeps.message + " (then the support polish)"
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
        diverged=diverged,
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
