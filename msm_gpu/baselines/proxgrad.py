"""Proximal-gradient baselines: PGM, PGM + line search, APG (FISTA), APG + line search.

Written once against the array API (``backend.xp``: NumPy or CuPy), with the same
contract as :func:`msm_gpu.driver.run_msm` (stopping rule, history, callback, time limit),
so they are drop-in comparators for MSM.  Every column of X is an independent problem.

One iteration costs one product with A for every method (plus one per rejected trial
of a line search): the gradient at the extrapolated point is obtained by linearity,
``A y_{k+1} = A x_k + beta (A x_k - A x_{k-1})``, and the objective F(x_k) from
``A x_k``, which is also the next gradient.

Step sizes
----------
``pgm``, ``apg``
    Constant step 1/L, L = lambda_max(A) (Lanczos on the backend, once per call; see
    :mod:`.lipschitz`), for convex and nonconvex penalties alike (as in the paper).
``pgm_ls``
    Backtracking per column (independent problems get their own local Lipschitz
    estimate) with Nesterov's adaptive rule: each iteration starts from
    L_{k-1} / eta and multiplies by eta until the sufficient-decrease test holds.
``apg_ls``
    FISTA with Beck and Teboulle's backtracking, per column: start from L_{k-1}
    (non-decreasing estimate, as their convergence proof requires), times eta until the
    test holds.

Both line searches start at L_0 = Rayleigh quotient of A along the first gradient
g_0 = A x_0 + r (per column; floor 1e-6 L, and L where g_0 = 0), eta = 2, and accept
x+ = prox_{h/L}(y - (A y + r)/L) when (Beck-Teboulle)

    F(x+) <= Q_L(x+, y) = q(y) + <grad q(y), x+ - y> + L/2 ||x+ - y||^2 + h(x+),

which for the quadratic q is exactly  d' A d <= L d'd  with d = x+ - y; A d is computed
by its own product, so the test is not hurt by cancellation.  If a column still fails
after ``MAX_BACKTRACKS`` trials (only conceivable with NaN/Inf) it takes x+ = y, which
passes the test trivially, and is counted in ``info["ls_failures"]``.

FISTA is not monotone: F(x_k) may increase from one iteration to the next, and for
nonconvex penalties (L0, Lp) it has no convergence guarantee at all.  It is kept because
it is the paper's comparator.  PGM (constant step 1/L with L >= lambda_max, or with the
line search) decreases F monotonically for every penalty, convex or not, because the
prox is an exact global minimiser of the model.

Converged columns (||x_{k+1} - x_k|| <= tol max(1, ||x_k||)) are removed from the
working arrays (compaction, as MSM does), so they cost nothing afterwards.
"""

from __future__ import annotations

import math
import time

import numpy as np

from ..result import IterationInfo
from .lipschitz import lipschitz_constant

METHODS = ("pgm", "pgm_ls", "apg", "apg_ls")

#: Multiplier of the line searches.
ETA = 2.0
#: Trials per column and iteration before a line search gives up (x+ = y).
MAX_BACKTRACKS = 64
#: Floor of the line-search start, relative to L = lambda_max(A).
L0_FLOOR = 1e-6


def _host(x):
    if hasattr(x, "get"):
        return x.get()
    return np.asarray(x)


def _callback_stops(callback, info) -> bool:
    try:
        return bool(callback(info))
    except StopIteration:
        return True


def run_baseline(
    method,
    backend,
    a,
    r,
    x0,
    penalty,
    *,
    tol,
    max_iter,
    time_limit,
    record_objective,
    callback,
    to_user,
    start_time,
    trace=None,
):
    """Run a proximal-gradient baseline on 2-D backend arrays ``a`` (n x n), ``r``, ``x0``.

    Parameters
    ----------
    method : {"pgm", "pgm_ls", "apg", "apg_ls"}
    backend : Backend
        Only ``backend.xp`` and ``backend.asarray`` are used.
    a, r, x0 : backend arrays
        A symmetric (n, n); R and X_0 of shape (n, r).  x0 is not modified.
    penalty : Penalty
    tol, max_iter, time_limit, record_objective, callback, to_user, start_time
        As in :func:`msm_gpu.driver.run_msm`.
    trace : callable, optional
        Line-search methods only: ``trace(event)`` after every trial, with ``event`` a
        dict: ``iteration`` (1-based), ``columns`` (host int array: the columns of R
        tried), ``y``, ``x_plus`` (backend arrays n x len(columns)), ``L`` (host
        float64 array) and ``accepted`` (host bool array).  For checks and plots.

    Returns
    -------
    dict
        The keys of ``run_msm`` (x, fun, n_iter, converged_columns, n_iter_columns,
        message, objective, timings) plus ``info``: ``L`` (lambda_max(A) estimate),
        ``lanczos_matvecs``, ``matvec_columns`` (products with A, counted per column,
        setup included) and, for line searches, ``ls_backtracks`` (rejected trials),
        ``ls_failures``, ``eta`` and ``L_columns`` (last accepted L of each column).
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    xp = backend.xp
    n, n_cols = r.shape
    accelerated = method.startswith("apg")
    line_search = method.endswith("_ls")

    lip, lanczos = lipschitz_constant(backend, a)
    l_step = lip if lip > 0.0 else 1.0  # A = 0: any step works, take 1

    def matmul(x):
        return xp.matmul(a, x)

    # working state of the active (not yet converged) columns
    active = np.arange(n_cols)
    x = xp.asarray(x0, copy=True)
    ax = matmul(x)
    rr = r
    matvec_cols = n_cols
    x_full = xp.asarray(x0, copy=True)  # columns are written back here when they retire
    x_prev = ax_prev = None
    t_k, beta = 1.0, 0.0

    if line_search:
        g0 = ax + rr
        ag0 = matmul(g0)
        matvec_cols += n_cols
        gg = xp.sum(g0 * g0, axis=0)
        safe = xp.where(gg > 0, gg, xp.ones_like(gg))
        rq = xp.where(gg > 0, xp.sum(g0 * ag0, axis=0) / safe, xp.full_like(gg, l_step))
        l_cols = xp.maximum(rq, xp.full_like(rq, L0_FLOOR * l_step))
        del g0, ag0
    n_backtracks = n_failures = 0
    l_final = np.full(n_cols, np.nan)  # last accepted L per column (line searches)

    f_all = xp.zeros(n_cols, dtype=xp.float64)
    history = []
    if record_objective:
        f_all = _column_objectives(xp, x, ax, rr, penalty)
        history.append(float(xp.sum(f_all)))
    converged = np.zeros(n_cols, dtype=bool)
    n_iter_cols = np.zeros(n_cols, dtype=np.int64)
    setup_done = time.perf_counter()

    message = f"reached max_iter = {max_iter}"
    n_iter = 0
    while n_iter < max_iter:
        n_iter += 1
        if accelerated and beta != 0.0:
            y = x + beta * (x - x_prev)
            ay = ax + beta * (ax - ax_prev)
        else:
            y, ay = x, ax
        grad = ay + rr

        if not line_search:
            x_new = penalty.prox(grad - l_step * y, l_step)
            ax_new = matmul(x_new)
            matvec_cols += len(active)
        else:
            start = l_cols / ETA if method == "pgm_ls" else l_cols
            x_new, ax_new, l_cols, stats = _backtrack(
                xp, a, penalty, y, ay, grad, start, n_iter, active, trace
            )
            matvec_cols += stats["matvec_columns"]
            n_backtracks += stats["backtracks"]
            n_failures += stats["failures"]

        diff = x_new - x
        step = xp.sqrt(xp.sum(xp.astype(diff * diff, xp.float64), axis=0))
        xnorm = xp.sqrt(xp.sum(xp.astype(x * x, xp.float64), axis=0))
        if accelerated:
            x_prev, ax_prev = x, ax
            t_next = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * t_k * t_k))
            beta = (t_k - 1.0) / t_next
            t_k = t_next
        x, ax = x_new, ax_new
        n_iter_cols[active] += 1

        if record_objective:
            f_all[_like(f_all, active)] = _column_objectives(xp, x, ax, rr, penalty)
            history.append(float(xp.sum(f_all)))

        if tol > 0:
            done = _host(step <= tol * xp.maximum(xnorm, xp.ones_like(xnorm)))
        else:
            done = np.zeros(len(active), dtype=bool)

        if callback is not None:
            info = IterationInfo(
                x=to_user(_merged(x_full, x, active)),
                fun=history[-1] if record_objective else float("nan"),
                n_iter=n_iter,
                n_active=len(active),
            )
            if _callback_stops(callback, info):
                message = "stopped by callback"
                break

        if done.any():
            converged[active[done]] = True
            if line_search:
                l_final[active[done]] = _host(l_cols)[done]
            x_full[:, _like(x, active[done])] = x[:, _like(x, np.flatnonzero(done))]
            keep = _like(x, np.flatnonzero(~done))
            active = active[~done]
            if len(active) == 0:
                message = f"converged: every column met tol = {tol:g}"
                break
            x = xp.take(x, keep, axis=1)
            ax = xp.take(ax, keep, axis=1)
            rr = xp.take(r, _like(r, active), axis=1)
            if accelerated:
                x_prev = xp.take(x_prev, keep, axis=1)
                ax_prev = xp.take(ax_prev, keep, axis=1)
            if line_search:
                l_cols = xp.take(l_cols, keep, axis=0)
        if time_limit is not None and time.perf_counter() - start_time >= time_limit:
            message = f"reached time_limit = {time_limit:g} s"
            break

    x_out = _merged(x_full, x, active) if len(active) else x_full
    iterations_done = time.perf_counter()
    fun_cols = _column_objectives(xp, x_out, matmul(x_out), r, penalty)
    info = {
        "L": lip,
        "lanczos_matvecs": lanczos["matvecs"],
        "matvec_columns": int(matvec_cols),
    }
    if line_search:
        if len(active):
            l_final[active] = _host(l_cols)
        info.update(
            {
                "eta": ETA,
                "ls_backtracks": int(n_backtracks),
                "ls_failures": int(n_failures),
                "L_columns": l_final,
            }
        )
    return {
        "x": x_out,
        "fun": float(xp.sum(fun_cols)),
        "n_iter": n_iter,
        "converged_columns": converged,
        "n_iter_columns": n_iter_cols,
        "message": message,
        "objective": np.asarray(history, dtype=np.float64),
        "timings": {
            "setup": setup_done - start_time,
            "iterations": iterations_done - setup_done,
        },
        "info": info,
    }


def _column_objectives(xp, x, ax, r, penalty):
    """F per column from x and A x (float64, backend namespace)."""
    quad = xp.sum(xp.astype(x * (0.5 * ax + r), xp.float64), axis=0)
    return quad + xp.sum(xp.astype(penalty.value(x), xp.float64), axis=0)


def _merged(x_full, x, active):
    """The whole iterate: retired columns from x_full, active ones from x."""
    if len(active) == x_full.shape[1]:
        return x.copy()
    out = x_full.copy()
    if len(active):
        out[:, _like(x_full, active)] = x
    return out


def _like(ref, idx):
    """Host index array ``idx`` moved next to ``ref`` (CuPy indexing wants device arrays)."""
    if hasattr(ref, "get"):
        import cupy

        return cupy.asarray(idx)
    return idx


def _backtrack(xp, a, penalty, y, ay, grad, start, iteration, active, trace):
    """Per-column backtracking from ``start``; returns x+, A x+, accepted L, counters.

    Only the columns that failed the test are recomputed in the next trial.
    """
    n_act = y.shape[1]
    l_try = xp.asarray(start, copy=True)
    l_acc = xp.asarray(start, copy=True)
    x_new = xp.asarray(y, copy=True)
    ad_all = xp.zeros_like(y)
    pending = np.arange(n_act)
    stats = {"matvec_columns": 0, "backtracks": 0, "failures": 0}
    for _ in range(MAX_BACKTRACKS):
        idx = _like(y, pending)
        whole = len(pending) == n_act
        ys = y if whole else xp.take(y, idx, axis=1)
        gs = grad if whole else xp.take(grad, idx, axis=1)
        ls = l_try if whole else xp.take(l_try, idx, axis=0)
        xs = penalty.prox(gs - ls[None, :] * ys, ls[None, :])
        d = xs - ys
        ad = xp.matmul(a, d)
        stats["matvec_columns"] += len(pending)
        ok = xp.sum(d * ad, axis=0) <= ls * xp.sum(d * d, axis=0)
        ok_h = _host(ok)
        if trace is not None:
            trace(
                {
                    "iteration": iteration,
                    "columns": np.asarray(active)[pending],
                    "y": ys,
                    "x_plus": xs,
                    "L": _host(xp.astype(ls, xp.float64)),
                    "accepted": ok_h,
                }
            )
        if ok_h.any():
            sel = _like(y, np.flatnonzero(ok_h))
            dst = _like(y, pending[ok_h])
            x_new[:, dst] = xs[:, sel]
            ad_all[:, dst] = ad[:, sel]
            l_acc[dst] = ls[sel]
        stats["backtracks"] += int((~ok_h).sum())
        pending = pending[~ok_h]
        if len(pending) == 0:
            break
        l_try[_like(y, pending)] *= ETA
    else:
        stats["failures"] += len(pending)
        stats["backtracks"] -= len(pending)  # the last rejections are failures
    return x_new, ay + ad_all, l_acc, stats
