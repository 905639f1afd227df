"""The MSM loop: sweeps, stopping rules, objective history, active-column freezing.

Written once against the array API: ``xp`` is NumPy or CuPy (through array_api_compat)
and the backend's :class:`~msm_gpu.backends.base.SweepState` does the sweeping.

Objective bookkeeping costs no extra matrix product.  With the 1-D objectives
phi_j(t) = 1/2 B_jj t^2 + w_j t + h(t) of the sweep, the algebra of the paper's
nonconvex theorem holds with equality:

    F(Z) = F(X) + sum_j [phi_j(Z_j) - phi_j(X_j)] + 1/2 (Z - X)' T (Z - X),
    T = diag(C) = D - (D + theta I) / omega,

so every sweep returns, per column, the terms of this identity (``STAT_QUAD`` and
``STAT_HZ``) and the driver updates F column by column.  F(X_0) and the final F are
computed directly (one product with A each).
"""

from __future__ import annotations

import time

import numpy as np

from .backends.base import STAT_DIFF2, STAT_HZ, STAT_QUAD, STAT_XNORM2
from .result import IterationInfo


def column_objectives(xp, a, r, x, penalty):
    """Per column: F_c = 1/2 x_c' A x_c + x_c' r_c + sum_j h(x_jc), and sum_j h(x_jc).

    Returns float64 arrays of length r in namespace ``xp``.
    """
    ax = xp.matmul(a, x)
    quad = xp.sum(xp.astype(x * (0.5 * ax + r), xp.float64), axis=0)
    hsum = xp.sum(xp.astype(penalty.value(x), xp.float64), axis=0)
    return quad + hsum, hsum


def run_msm(
    backend,
    a,
    r,
    x0,
    penalty,
    splitting,
    *,
    tol,
    max_iter,
    time_limit,
    record_objective,
    callback,
    panel,
    to_user,
    start_time,
):
    """Iterate X <- T(X) (paper, Algorithm 1) on 2-D backend arrays.

    Returns a dict with x, fun, n_iter, converged_columns, n_iter_columns, message,
    objective (host float64 array) and timings.
    """
    xp = backend.xp
    n_cols = r.shape[1]
    state = backend.start(a, r, x0, splitting, penalty.table(a.shape[0]), penalty.code, panel)
    setup_done = time.perf_counter()
    try:
        converged = xp.zeros(n_cols, dtype=xp.bool)
        n_iter_cols = xp.zeros(n_cols, dtype=xp.int64)
        history = []
        if record_objective:
            f_cols, h_cols = column_objectives(xp, a, r, x0, penalty)
            anchored = bool(xp.all(xp.isfinite(f_cols)))
            history.append(float(xp.sum(f_cols)))

        message = f"reached max_iter = {max_iter}"
        n_iter = 0
        active = xp.asarray(state.active)  # changes only when columns retire
        while n_iter < max_iter:
            stats = state.sweep()
            n_iter += 1
            n_iter_cols[active] += 1

            if record_objective:
                if anchored:
                    f_cols[active] += stats[STAT_QUAD] + stats[STAT_HZ] - h_cols[active]
                    h_cols[active] = stats[STAT_HZ]
                else:
                    # X_0 was outside dom h (F = inf): anchor on the new, feasible iterate
                    f_cols, h_cols = column_objectives(xp, a, r, state.current_x(), penalty)
                    anchored = bool(xp.all(xp.isfinite(f_cols)))
                history.append(float(xp.sum(f_cols)))

            if tol > 0:
                step = xp.sqrt(stats[STAT_DIFF2])
                scale = xp.maximum(xp.sqrt(stats[STAT_XNORM2]), xp.ones_like(step))
                done = step <= tol * scale
            else:
                done = xp.zeros(len(state.active), dtype=xp.bool)

            if callback is not None:
                info = IterationInfo(
                    x=to_user(state.current_x()),
                    fun=history[-1] if record_objective else float("nan"),
                    n_iter=n_iter,
                    n_active=len(state.active),
                )
                if _callback_stops(callback, info):
                    message = "stopped by callback"
                    break

            if bool(xp.any(done)):
                converged[active[done]] = True
                state.retire(_to_numpy(~done))
                active = xp.asarray(state.active)
                if len(state.active) == 0:
                    message = f"converged: every column met tol = {tol:g}"
                    break
            if time_limit is not None and time.perf_counter() - start_time >= time_limit:
                message = f"reached time_limit = {time_limit:g} s"
                break

        x = state.current_x()
        iterations_done = time.perf_counter()
        fun_cols, _ = column_objectives(xp, a, r, x, penalty)
        return {
            "x": x,
            "fun": float(xp.sum(fun_cols)),
            "n_iter": n_iter,
            "converged_columns": _to_numpy(converged),
            "n_iter_columns": _to_numpy(n_iter_cols),
            "message": message,
            "objective": np.asarray(history, dtype=np.float64),
            "timings": {
                "setup": setup_done - start_time,
                "iterations": iterations_done - setup_done,
            },
        }

    finally:
        state.close()


def _callback_stops(callback, info) -> bool:
    try:
        return bool(callback(info))
    except StopIteration:
        return True


def _to_numpy(x):
    if hasattr(x, "get"):
        return x.get()
    return np.asarray(x)
