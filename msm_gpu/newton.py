"""Proximal Newton with MSM inside: the paper's "When q is not quadratic" (section 4).

For F(W) = q(W) + h(W) with q smooth (``losses.py``) and h separable, every outer
iteration builds the second-order model of q at W_k (paper, section 4; Tseng & Yun 2009)

    Q(Y) = q(W_k) + <G, Y - W_k> + 1/2 (Y - W_k)' H (Y - W_k) + h(Y),

minimises it inexactly by MSM sweeps (:func:`msm_gpu.solve`, warm-started at W_k) to get
Wbar_k, and steps W_{k+1} = W_k + beta (Wbar_k - W_k) with beta from Armijo backtracking
(Tseng & Yun's rule with gamma = 0):

    F(W_k + beta d) <= F(W_k) + sigma beta Delta,   Delta = <G, d> + h(Wbar_k) - h(W_k).

Every column of W is an independent problem and has its own beta, working set and
stopping state.

Hessian (``hessian=``):

* ``"exact"``: per problem H_c = X' diag(s l''(z_c)) X, one ``solve`` per column;
* ``"bound"``: a curvature bound shared by all columns, H = c X' diag(s) X (Bohning's
  c = 1/4 for the logistic loss), formed once; one batched ``solve`` per iteration for
  all columns.  The model then majorises q, so beta = 1 is accepted whenever the inner
  solve decreased the model;
* ``"auto"``: ``"exact"``.  Measured in ``benchmarks/bench_logistic.py``: the bound needs
  many more iterations (its curvature 1/4 is far above sigma (1 - sigma) wherever the data
  are well fitted, and separable classes make it arbitrarily loose), which the cheaper
  iterations did not repay on any data set there, the 10-class digits included.

Working set: the model is minimised only over the rows where W_k is nonzero and the
largest violators, rows where the diagonal prox-gradient step below is nonzero (at most
max(WS_MIN, WS_GROWTH * nnz) of them; plus the intercept); the other rows stay fixed.
This is Tseng & Yun's coordinate-block rule (Gauss-Southwell-r), so the convergence
theory is kept, and for sparse solutions H is formed on a few rows only.

Stopping: with D = diag of the Hessian the models use (floored: the exact Hessian at W_k,
or the shared bound with ``hessian="bound"``, whose fixed points threshold l0/lp with that
diagonal), the diagonal prox-gradient
point P = argmin_Y <G, Y - W> + 1/2 ||Y - W||_D^2 + h(Y) is W itself exactly at the
stationary points of F (for l0/lp: fixed points of the prox-gradient map); a column stops
when ``||P - W|| <= tol * max(1, ||W||)``.

Inner accuracy (forcing sequence): the MSM solve of iteration k stops at
``tol_k = clip(FORCING * opt_k * min(1, sqrt(opt_k)), 1e-3 tol, 0.1)`` with opt_k the
largest optimality measure of the active columns, so the Newton steps become exact as the
iterates converge.

If backtracking fails (rounding near the optimum, or a nonconvex h for which the segment
x + beta d changes the support), a diagonal prox-gradient step with a doubling metric
tau D is taken instead; it decreases F once tau D bounds the curvature.  So F decreases
monotonically, except where the predicted decrease Delta is below the rounding of F (100
ulps of F, at the optimum to machine precision): there a step that raises F by at most
that rounding is accepted, so that the optimality measure can still reach a tight tol.
"""

from __future__ import annotations

import contextlib
import time

import numpy as np

from . import validation as v
from .api import solve
from .arrays import is_cupy, to_host
from .backends import get_backend
from .losses import GLMLoss, Quadratic
from .penalties import Zero
from .penalty_rows import RowPenalty
from .result import IterationInfo, SolveResult

HESSIANS = ("auto", "exact", "bound")

SIGMA = 1e-4  # Armijo constant
FORCING = 0.1
WS_MIN = 32  # violators admitted to the working set at least (when there are so many)
WS_GROWTH = 2  # ... and at most this many times the support size otherwise
INNER_OMEGA = 1.0  # relaxation of the inner MSM for convex h (nonconvex: 1, the theorem's)
MAX_HALVINGS_CONVEX = 30
MAX_HALVINGS_NONCONVEX = 4
MAX_DOUBLINGS = 60
ROUNDING_ULPS = 100  # a decrease of F below this many ulps of F is lost in rounding


def minimize(
    loss,
    penalty=None,
    *,
    x0=None,
    tol=1e-6,
    max_iter=100,
    time_limit=None,
    backend="auto",
    callback=None,
    verbose=False,
    hessian="auto",
    inner_max_iter=100,
    working_set=True,
) -> SolveResult:
    """Minimise F(W) = q(W) + sum_ij h(W_ij) by proximal Newton with MSM inner solves.

    Parameters
    ----------
    loss : Quadratic, Logistic or Poisson
        The smooth part q.  ``Quadratic(A, R)`` is solved by :func:`msm_gpu.solve`
        directly (it is its own second-order model).
    penalty : Penalty, optional
        Separable h (default ``Zero()``); never applied to the intercept row.
    x0 : array, optional
        Start, shape ``(n_coef,)`` or ``(n_coef, r)`` (``n_coef`` = features, plus one
        for the intercept, which is the last row).  Default zeros.  Never modified.
    tol : float >= 0
        A problem stops when its diagonal prox-gradient step (module docstring) is at
        most ``tol * max(1, ||W||)``.  ``tol=0`` runs ``max_iter`` iterations.
    max_iter : int >= 0
        Outer (Newton) iterations.
    time_limit : float, optional
        Seconds, checked after every outer iteration.
    backend : {"auto", "cpu", "cuda"}
        "auto": CUDA when X, Y or x0 is a CuPy array (or CuPy sparse), else the CPU.
    callback : callable, optional
        ``callback(info)`` after every outer iteration with an :class:`IterationInfo`;
        returning True (or raising StopIteration) stops.
    verbose : bool
        Print one line per outer iteration.
    hessian : {"auto", "exact", "bound"}
        Per-problem exact Hessians or one shared curvature bound (logistic only).
    inner_max_iter : int >= 1
        MSM sweeps per inner solve at most.
    working_set : bool
        Solve the model on the working set only (module docstring).

    Returns
    -------
    SolveResult
        ``x`` (n_coef,) or (n_coef, r) with the intercepts in the last row; ``fun`` the
        sum of F over the problems; ``objective`` F after every outer iteration (it never
        increases); ``n_iter`` outer iterations; ``info`` has ``fun_columns``,
        ``optimality`` (final measure per problem), ``hessian``, ``inner_iterations``,
        ``line_search_steps``, ``fallback_steps``, ``working_set_size``.
    """
    started = time.perf_counter()
    penalty = Zero() if penalty is None else v.check_penalty(penalty)
    if isinstance(loss, Quadratic):
        res = solve(
            loss.A,
            loss.R,
            penalty,
            x0=x0,
            tol=tol,
            max_iter=max_iter,
            time_limit=time_limit,
            backend=backend,
            callback=callback,
        )
        if verbose:
            print(res)
        return res
    if not isinstance(loss, GLMLoss):
        raise TypeError(
            "loss must be msm_gpu.Quadratic, msm_gpu.Logistic or msm_gpu.Poisson, "
            f"got {type(loss).__name__}"
        )
    tol = v.check_real(tol, "tol", low=0.0)
    max_iter = v.check_int(max_iter, "max_iter", low=0)
    time_limit = v.check_time_limit(time_limit)
    callback = v.check_callback(callback)
    inner_max_iter = v.check_int(inner_max_iter, "inner_max_iter", low=1)
    if hessian not in HESSIANS:
        raise ValueError(
            f"hessian must be one of {', '.join(map(repr, HESSIANS))}, got {hessian!r}"
        )
    if hessian == "bound" and loss.curvature_bound is None:
        raise ValueError(
            f"hessian='bound' needs a loss with a curvature bound; {loss.name} has none"
        )
    if hessian == "auto":
        hessian = "exact"  # measured faster on every data set of bench_logistic.py

    one_problem = loss.Y.ndim == 1
    n_coef, r = loss.n_coef, loss.n_problems
    shape = (n_coef,) if one_problem else (n_coef, r)
    if x0 is not None:
        v.check_array(x0, "x0")
        if tuple(x0.shape) != shape:
            raise ValueError(
                f"x0 must have shape {shape} (coefficients, intercept last), got {tuple(x0.shape)}"
            )
    if isinstance(backend, str) and backend.lower() == "auto":
        backend = (
            "cuda" if any(is_cupy(a) for a in (loss.X, loss.Y, x0) if a is not None) else "cpu"
        )
    be = get_backend(backend)
    if be.name == "cuda":
        import cupy as xp
    else:
        xp = np
    dtype = v.working_dtype(loss.X, loss.Y, x0)
    data = loss.prepare(xp, dtype)
    rounding = ROUNDING_ULPS * float(np.finfo(dtype).eps)
    free = [n_coef - 1] if loss.fit_intercept else []
    pen = RowPenalty(penalty, n_coef, free=free)

    if x0 is None:
        w = xp.zeros((n_coef, r), dtype=dtype)
    else:
        host = to_host(x0) if xp is np else x0
        w = xp.array(host, dtype=dtype, copy=True).reshape(n_coef, r)

    def h_cols(x):
        return xp.sum(pen.value(x).astype(np.float64), axis=0)

    def to_user(x):
        out = x[:, 0] if one_problem else x
        return be.to_user(out, loss.Y if not is_cupy(loss.X) else _like_cupy(loss))

    # One BLAS thread on the CPU, as in NMF: Numba sweeps and OpenBLAS threads spinning
    # after a product fight over the cores (measured 100x slower GEMVs under load).
    limits = _single_thread_blas() if xp is np else contextlib.nullcontext()
    with limits:
        z = data.matvec(w)
        f = data.values(z) + h_cols(w)
        if not bool(xp.all(xp.isfinite(f))):
            raise ValueError("x0 must lie in the domain of the penalty (F(x0) is not finite)")
        history = [float(xp.sum(f))]
        bound_h = data.bound_hessian() if hessian == "bound" else None
        # the optimality measure's metric: the diagonal of the Hessian the models use (with
        # the bound, its diagonal): a fixed point of the bound's model with an l0/lp
        # penalty thresholds with that diagonal, and a smaller metric would call it
        # non-optimal for ever (found on the bound + L0 test, CPU and GPU alike)
        bound_diag = None if bound_h is None else _floor(xp, xp.diagonal(bound_h)[:, None])
        active = np.ones(r, dtype=bool)
        converged = np.zeros(r, dtype=bool)
        stalled = np.zeros(r, dtype=bool)
        n_iter_cols = np.zeros(r, dtype=np.int64)
        opt = np.full(r, np.inf)
        stats = {"inner_iterations": 0, "line_search_steps": 0, "fallback_steps": 0, "ws": []}
        setup_done = time.perf_counter()
        n_iter = 0
        message = f"reached max_iter = {max_iter}"
        while True:
            act = np.flatnonzero(active)
            ia = xp.asarray(act)
            wa, za = w[:, ia], z[:, ia]
            grad = data.gradient(za, ia)
            curv = data.hessian_weights(za, ia)
            if bound_diag is None:
                diag = _floor(xp, data.hessian_diagonal(curv))
            else:
                diag = xp.broadcast_to(bound_diag, wa.shape)
            prox_point = pen.prox(grad - diag * wa, diag)
            step = prox_point - wa
            opt_a = to_host(_col_norm(xp, step) / xp.maximum(_col_norm(xp, wa), 1.0))
            opt[act] = opt_a
            done = opt_a <= tol
            converged[act[done]] = True
            active[act[done]] = False
            if not active.any():
                message = f"converged: every problem met tol = {tol:g}"
                break
            if n_iter >= max_iter:
                break
            if time_limit is not None and time.perf_counter() - started >= time_limit:
                message = f"reached time_limit = {time_limit:g} s"
                break
            keep = ~done
            act = act[keep]
            ia = xp.asarray(act)
            wa, za, grad, curv, diag, step = (
                a[:, xp.asarray(np.flatnonzero(keep))] for a in (wa, za, grad, curv, diag, step)
            )
            # forcing sequence, per problem (the bound's batched solve uses the largest)
            inner_tols = _forcing(opt_a[keep], tol)
            inner_tol = float(inner_tols.max())

            # -- model minimisation by MSM on the working set(s) --------------------------------
            rows_mask = _working_set(xp, wa, step, diag)
            if free:
                rows_mask[free[0], :] = True
            if not working_set:
                rows_mask[:] = True
            direction = xp.zeros_like(wa)
            if hessian == "bound":
                rows = xp.flatnonzero(xp.any(rows_mask, axis=1))
                a_ws = bound_h[rows][:, rows]
                stats["ws"].append(int(rows.shape[0]))
                wbar = _inner(
                    a_ws,
                    grad[rows],
                    wa[rows],
                    pen.subset(to_host(rows)),
                    inner_tol,
                    inner_max_iter,
                    be,
                    stats,
                )
                direction[rows] = wbar - wa[rows]
            else:
                for j in range(len(act)):
                    rows = xp.flatnonzero(rows_mask[:, j])
                    a_ws = data.hessian(curv[:, j], rows)
                    stats["ws"].append(int(rows.shape[0]))
                    wbar = _inner(
                        a_ws,
                        grad[rows, j : j + 1],
                        wa[rows, j : j + 1],
                        pen.subset(to_host(rows)),
                        float(inner_tols[j]),
                        inner_max_iter,
                        be,
                        stats,
                    )
                    direction[rows, j : j + 1] = wbar - wa[rows, j : j + 1]

            # -- Armijo backtracking along W + beta (Wbar - W), per problem ----------------------
            fa = f[ia]
            h_now = h_cols(wa)
            delta = xp.sum(grad * direction, axis=0) + h_cols(wa + direction) - h_now
            xd = _matvec_on_rows(xp, data, direction)
            beta = xp.ones(len(act), dtype=dtype)
            accepted = xp.zeros(len(act), dtype=bool)
            new_w, new_z, new_f = wa.copy(), za.copy(), fa.copy()
            halvings = MAX_HALVINGS_CONVEX if pen.is_convex else MAX_HALVINGS_NONCONVEX
            for _ in range(halvings + 1):
                w_try = wa + beta * direction
                z_try = za + beta * xd
                f_try = data.values(z_try, ia) + h_cols(w_try)
                # Armijo; where the predicted decrease is below the rounding of F (at the
                # optimum to machine precision) a step that does not increase F is taken
                flat = (-delta <= rounding * xp.abs(fa)) & (f_try <= fa + rounding * xp.abs(fa))
                ok = (~accepted) & (((f_try <= fa + SIGMA * beta * delta) & (delta < 0)) | flat)
                stats["line_search_steps"] += 1
                if bool(xp.any(ok)):
                    new_w[:, ok], new_z[:, ok], new_f[ok] = w_try[:, ok], z_try[:, ok], f_try[ok]
                    accepted |= ok
                if bool(xp.all(accepted)):
                    break
                beta = xp.where(accepted, beta, 0.5 * beta)
            failed = ~accepted
            if bool(xp.any(failed)):
                # -- safeguard: diagonal prox-gradient steps with a doubling metric ----------------
                fi = xp.flatnonzero(failed)
                fw, fz, ff, fg, fdiag = wa[:, fi], za[:, fi], fa[fi], grad[:, fi], diag[:, fi]
                tau = 1.0
                pending = xp.ones(fi.shape[0], dtype=bool)
                for _ in range(MAX_DOUBLINGS):
                    p = pen.prox(fg - tau * fdiag * fw, tau * fdiag)
                    dp = p - fw
                    zp = fz + data.matvec(dp)
                    fp = data.values(zp, ia[fi]) + h_cols(p)
                    decrease = 0.5 * tau * xp.sum((fdiag * dp * dp).astype(np.float64), axis=0)
                    ok = pending & (fp <= ff - SIGMA * decrease) & (decrease > 0)
                    stats["fallback_steps"] += 1
                    if bool(xp.any(ok)):
                        cols = fi[ok]
                        new_w[:, cols], new_z[:, cols], new_f[cols] = p[:, ok], zp[:, ok], fp[ok]
                        pending &= ~ok
                    if not bool(xp.any(pending)):
                        break
                    tau *= 2.0
                # no decrease representable in floating point: stop these problems
                stuck = (
                    act[to_host(fi[pending])] if bool(xp.any(pending)) else np.zeros(0, np.int64)
                )
                stalled[stuck] = True
                active[stuck] = False

            w[:, ia], z[:, ia], f[ia] = new_w, new_z, new_f
            n_iter += 1
            n_iter_cols[act] += 1
            history.append(float(xp.sum(f)))
            if verbose:
                print(
                    f"iter {n_iter:4d}  F = {history[-1]:.12g}  max opt = {opt_a.max():.3g}  "
                    f"active = {len(act)}  ws = {stats['ws'][-1]}  inner tol = {inner_tol:.2g}"
                )
            if callback is not None:
                info = IterationInfo(
                    x=to_user(w.copy()), fun=history[-1], n_iter=n_iter, n_active=len(act)
                )
                if _callback_stops(callback, info):
                    message = "stopped by callback"
                    break
            if not active.any():
                message = (
                    "stopped: no further decrease in floating point for every remaining problem"
                )
                break

    done_at = time.perf_counter()
    if stalled.any() and not message.startswith("stopped by"):
        message += f" ({int(stalled.sum())} problem(s) stopped without decrease before tol)"
    return SolveResult(
        x=to_user(w),
        fun=float(xp.sum(f)),
        n_iter=n_iter,
        converged=bool(converged.all()),
        message=message,
        objective=np.asarray(history, dtype=np.float64),
        backend=be.name,
        time=time.perf_counter() - started,
        method="newton-msm",
        converged_columns=converged,
        n_iter_columns=n_iter_cols,
        timings={"setup": setup_done - started, "iterations": done_at - setup_done},
        info={
            "hessian": hessian,
            "fun_columns": to_host(f).astype(np.float64),
            "optimality": opt,
            "inner_iterations": stats["inner_iterations"],
            "line_search_steps": stats["line_search_steps"],
            "fallback_steps": stats["fallback_steps"],
            "working_set_size": stats["ws"],
        },
    )


def _inner(a, grad, w, penalty, tol, max_iter, be, stats):
    """Minimise <G, Y - W> + 1/2 (Y - W)' A (Y - W) + h(Y) by MSM from Y = W."""
    r = grad - a @ w
    # theta (relative to mean(diag(A)), as solve takes it): a small proximal term keeps
    # B_jj > 0 for zero-curvature rows and is needed by the nonconvex theorem
    # (delta = theta / omega > 0 at omega = 1)
    theta = 1e-3 if not penalty.is_convex else 1e-8
    res = solve(
        a,
        r,
        penalty,
        x0=w,
        tol=tol,
        max_iter=max_iter,
        theta=theta,
        omega=INNER_OMEGA if penalty.is_convex else 1.0,
        backend=be.name,
        record_objective=False,
        # convex h: the exact finish solves the model on the face MSM found (issue 9);
        # L0/Lp: plain inexact MSM sweeps, as the outer line search expects
        finish="auto" if penalty.is_convex else None,
    )
    stats["inner_iterations"] += res.n_iter
    return res.x


def _matvec_on_rows(xp, data, direction):
    """design @ direction, reading only the columns of the design where it is nonzero."""
    rows = xp.flatnonzero(xp.any(direction != 0, axis=0 if direction.ndim == 1 else 1))
    if 2 * rows.shape[0] >= direction.shape[0] or data.sparse:
        return data.matvec(direction)
    return data.design[:, rows] @ direction[rows]


_CONTROLLER = None


def _single_thread_blas():
    """threadpoolctl limiter to one BLAS thread; the library scan (tens of ms) done once."""
    global _CONTROLLER
    if _CONTROLLER is None:
        import scipy.linalg.cython_blas  # noqa: F401  (SciPy's BLAS loaded before the scan)
        from threadpoolctl import ThreadpoolController

        _CONTROLLER = ThreadpoolController()
    return _CONTROLLER.limit(limits=1, user_api="blas")


def _working_set(xp, w, step, diag):
    """Rows of the model per problem: the nonzeros of W and the largest violators.

    A violator is a zero row whose diagonal prox-gradient step is nonzero; at most
    max(WS_MIN, WS_GROWTH * nnz) of them enter, ranked by their share sqrt(D) |step| of
    the optimality measure (Tseng & Yun's Gauss-Southwell-r rule is met with the
    fraction they carry; the stopping test still reads every row).
    """
    support = w != 0
    score = xp.where(support, 0.0, xp.sqrt(diag) * xp.abs(step))
    n_viol = xp.sum(score > 0, axis=0)
    cap = xp.maximum(WS_MIN, WS_GROWTH * xp.sum(support, axis=0))
    if not bool(xp.any(n_viol > cap)):
        return support | (score > 0)
    # per problem: keep the violators scoring at least the cap-th largest score
    order = xp.sort(score, axis=0)[::-1]
    k = xp.minimum(cap, score.shape[0]) - 1
    kth = xp.take_along_axis(order, k[None, :], axis=0)
    return support | ((score > 0) & (score >= kth))


def _forcing(opt, tol):
    """Inner MSM tolerance per problem: FORCING opt min(1, sqrt(opt)), within [tol/1000, 0.1]."""
    eta = FORCING * opt * np.minimum(1.0, np.sqrt(opt))
    return np.clip(eta, 1e-3 * tol, 0.1)


def _floor(xp, d):
    """Curvatures floored at 1e-12 of their largest value (and a tiny absolute)."""
    top = xp.max(d, axis=0, keepdims=True)
    return xp.maximum(d, xp.maximum(1e-12 * top, 1e-300))


def _col_norm(xp, x):
    return xp.sqrt(xp.sum((x * x).astype(np.float64), axis=0))


def _like_cupy(loss):
    import cupy

    return cupy.empty(0)


def _callback_stops(callback, info) -> bool:
    try:
        return bool(callback(info))
    except StopIteration:
        return True
