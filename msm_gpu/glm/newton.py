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

* ``"exact"``: per problem H_c = X' diag(s l''(z_c)) X, one ``solve`` per column; on the
  CPU the whole iteration is compiled instead (``newton_host.py``: H_c read through the
  columns of X, or formed by one GEMM where that is cheaper for dense X);
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

from .._input import validation as v
from .._input.foreign import accepts_foreign_arrays
from ..arrays import is_cupy, to_host
from ..backends import get_backend
from ..penalties import Zero
from ..penalties.rows import RowPenalty
from ..result import SolveResult
from ..run import solve
from ..solvers.loop import IterativeMethod, LoopSettings, StepReport, run_iterations
from .losses import GLMLoss, Quadratic
from .newton_host import HostNewtonMethod, forcing_tolerance

HESSIANS = ("auto", "exact", "bound")

SIGMA = 1e-4  # Armijo constant
FORCING = 0.1
WS_MIN = 32  # violators admitted to the working set at least (when there are so many)
WS_GROWTH = 2  # ... and at most this many times the support size otherwise
INNER_OMEGA = 1.0  # relaxation of the inner MSM for convex h (nonconvex: 1, the theorem's)
INNER_THETA_CONVEX = 1e-8  # proximal term of the inner MSM, relative to mean(diag(H))
INNER_THETA_NONCONVEX = 1e-3
MAX_HALVINGS_CONVEX = 30
MAX_HALVINGS_NONCONVEX = 4
MAX_DOUBLINGS = 60
#: Exact Hessians on NumPy data run on the compiled road (newton_host.py); False runs the
#: NumPy loop below instead (the tests compare the two).
HOST_KERNELS = True
ROUNDING_ULPS = 100  # a decrease of F below this many ulps of F is lost in rounding


@accepts_foreign_arrays("x0", holders=("loss",))
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
        Show a tqdm progress bar (objective, problems still running), as ``solve`` does.
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

    Examples
    --------
    Without a penalty, the logistic fit of labels that no threshold separates (so the
    maximum-likelihood fit is finite) has a gradient of zero at the answer:

    >>> import numpy as np, msm_gpu as mg
    >>> X = np.array([[0.0], [1.0], [2.0], [3.0]]); y = np.array([0.0, 1.0, 0.0, 1.0])
    >>> res = mg.minimize(mg.Logistic(X, y), tol=1e-10)
    >>> bool(res.converged), res.x.shape  # slope and intercept
    (True, (2,))
    >>> z = X[:, 0] * res.x[0] + res.x[1]
    >>> bool(abs(np.mean((1 / (1 + np.exp(-z)) - y) * X[:, 0])) < 1e-8)
    True
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
    if be.on_host:
        xp = np
    else:
        import cupy as xp
    dtype = v.working_dtype(loss.X, loss.Y, x0)
    rounding = ROUNDING_ULPS * float(np.finfo(dtype).eps)
    free = [n_coef - 1] if loss.fit_intercept else []
    pen = RowPenalty(penalty, n_coef, free=free)

    if x0 is None:
        w = xp.zeros((n_coef, r), dtype=dtype)
    else:
        host = to_host(x0) if xp is np else x0
        w = xp.array(host, dtype=dtype, copy=True).reshape(n_coef, r)

    def to_user(x):
        out = x[:, 0] if one_problem else x
        return be.to_user(out, loss.Y if not is_cupy(loss.X) else _like_cupy(loss))

    host_road = xp is np and hessian == "exact" and HOST_KERNELS
    # CPU, NumPy road: one BLAS thread.  The MSM sweeps are Numba-parallel; OpenBLAS
    # threads spinning after a product fight over the cores (far slower GEMVs under
    # load; docs/development.md).  One ``with`` for building and iterating: threadpoolctl
    # applies the limit when the limiter is made, and a second entry would not apply it
    # again.
    limits = _single_thread_blas() if xp is np and not host_road else contextlib.nullcontext()
    with limits:
        if host_road:
            # every outer iteration one compiled call, the model Hessian read through X
            # (newton_host.py); the same iteration as NewtonMethod's below
            settings = {
                "tol": tol,
                "forcing": FORCING,
                "inner_max_iter": inner_max_iter,
                "working_set": bool(working_set),
                "free_row": free[0] if free else -1,
                "rounding": rounding,
                "theta": INNER_THETA_CONVEX if pen.is_convex else INNER_THETA_NONCONVEX,
                "omega": INNER_OMEGA if pen.is_convex else 1.0,
                "sigma": SIGMA,
                "ws_min": WS_MIN,
                "ws_growth": WS_GROWTH,
                "max_halvings": MAX_HALVINGS_CONVEX if pen.is_convex else MAX_HALVINGS_NONCONVEX,
                "max_doublings": MAX_DOUBLINGS,
            }
            method = HostNewtonMethod(loss, pen, w, dtype, settings)
        else:
            method = NewtonMethod(
                xp,
                be,
                loss.prepare(xp, dtype),
                pen,
                w,
                hessian=hessian,
                inner_max_iter=inner_max_iter,
                working_set=working_set,
                free=free,
                rounding=rounding,
                tol=tol,
            )
        settings = LoopSettings(
            tol=tol,
            max_iter=max_iter,
            time_limit=time_limit,
            record_objective=True,
            start_time=started,
            callback=callback,
            to_user=to_user,
            verbose=verbose,
        )
        out = run_iterations(method, n_cols=r, settings=settings)
    info = dict(out.info)
    info["fun_columns"] = to_host(out.fun_columns).astype(np.float64)
    return SolveResult(
        x=to_user(out.x),
        fun=out.fun,
        n_iter=out.n_iter,
        converged=bool(out.converged_columns.all()),
        message=out.message,
        objective=out.objective,
        backend=be.name,
        time=time.perf_counter() - started,
        method="newton-msm",
        converged_columns=out.converged_columns,
        n_iter_columns=out.n_iter_columns,
        timings=out.timings,
        info=info,
    )


class NewtonMethod(IterativeMethod):
    """Proximal Newton iterations (module docstring) as a step of the one loop
    (:func:`msm_gpu.solvers.loop.run_iterations`): every step is one outer iteration on the active
    problems, and reports the optimality measure ``||P - W||`` at the new point with
    ``||W||`` as its scale, so the loop's rule ``||P - W|| <= tol max(||W||, 1)`` is the
    stopping rule of the module docstring.  Problems whose line search and safeguard both
    find no decrease are reported ``stopped``.
    """

    def __init__(
        self, xp, be, data, pen, w, *, hessian, inner_max_iter, working_set, free, rounding, tol
    ):
        self._xp, self._be, self._data, self._pen, self._w = xp, be, data, pen, w
        self._hessian = hessian
        self._inner_max_iter = inner_max_iter
        self._working_set = working_set
        self._free = free
        self._rounding = rounding
        self._tol = tol
        self._z = data.matvec(w)
        self._f = data.values(self._z) + self._h_cols(w)
        if not bool(xp.all(xp.isfinite(self._f))):
            raise ValueError("x0 must lie in the domain of the penalty (F(x0) is not finite)")
        r = w.shape[1]
        self.active = np.arange(r)
        self._bound_h = data.bound_hessian() if hessian == "bound" else None
        # the optimality measure's metric: the diagonal of the Hessian the models use (with
        # the bound, its diagonal): a fixed point of the bound's model with an l0/lp
        # penalty thresholds with that diagonal, and a smaller metric would call it
        # non-optimal for ever (found on the bound + L0 test, CPU and GPU alike)
        self._bound_diag = (
            None if self._bound_h is None else _floor(xp, xp.diagonal(self._bound_h)[:, None])
        )
        self._opt = np.full(r, np.inf)
        self._stats = {"inner_iterations": 0, "line_search_steps": 0, "fallback_steps": 0}
        self._ws = []
        self._measure = self._measure_at(self.active)

    def _h_cols(self, x):
        return self._xp.sum(self._pen.value(x).astype(np.float64), axis=0)

    def _measure_at(self, act):
        """Gradient, curvatures, metric and prox-gradient step at W for the columns act."""
        xp, data = self._xp, self._data
        ia = xp.asarray(act)
        wa, za = self._w[:, ia], self._z[:, ia]
        grad = data.gradient(za, ia)
        curv = data.hessian_weights(za, ia)
        if self._bound_diag is None:
            diag = _floor(xp, data.hessian_diagonal(curv))
        else:
            diag = xp.broadcast_to(self._bound_diag, wa.shape)
        step = self._pen.prox(grad - diag * wa, diag) - wa
        return {"grad": grad, "curv": curv, "diag": diag, "step": step}

    def start_objective(self, will_step=False):
        pass  # F(W_0) is known from the start

    def objective(self):
        return self._xp.sum(self._f)

    def step(self, record_objective):
        xp, data, pen = self._xp, self._data, self._pen
        act = self.active
        ia = xp.asarray(act)
        m = self._measure
        wa, za = self._w[:, ia], self._z[:, ia]
        grad, curv, diag, step = m["grad"], m["curv"], m["diag"], m["step"]
        opt_a = to_host(_col_norm(xp, step) / xp.maximum(_col_norm(xp, wa), 1.0))
        # forcing sequence, per problem (the bound's batched solve uses the largest)
        inner_tols = forcing_tolerance(opt_a, self._tol, FORCING)
        inner_tol = float(inner_tols.max())

        # -- model minimisation by MSM on the working set(s) --------------------------------
        rows_mask = _working_set(xp, wa, step, diag)
        if self._free:
            rows_mask[self._free[0], :] = True
        if not self._working_set:
            rows_mask[:] = True
        direction = xp.zeros_like(wa)
        if self._hessian == "bound":
            rows = xp.flatnonzero(xp.any(rows_mask, axis=1))
            self._ws.append(int(rows.shape[0]))
            if rows.shape[0]:  # no row to move: W is optimal, it stays
                wbar = _inner(
                    self._bound_h[rows][:, rows],
                    grad[rows],
                    wa[rows],
                    pen.subset(to_host(rows)),
                    inner_tol,
                    self._inner_max_iter,
                    self._be,
                    self._stats,
                )
                direction[rows] = wbar - wa[rows]
        else:
            for j in range(len(act)):
                rows = xp.flatnonzero(rows_mask[:, j])
                self._ws.append(int(rows.shape[0]))
                if rows.shape[0] == 0:  # no row to move: W_j is optimal, it stays
                    continue
                wbar = _inner(
                    data.hessian(curv[:, j], rows),
                    grad[rows, j : j + 1],
                    wa[rows, j : j + 1],
                    pen.subset(to_host(rows)),
                    float(inner_tols[j]),
                    self._inner_max_iter,
                    self._be,
                    self._stats,
                )
                direction[rows, j : j + 1] = wbar - wa[rows, j : j + 1]

        new_w, new_z, new_f, stuck = self._line_search(ia, wa, za, grad, diag, direction)
        self._w[:, ia], self._z[:, ia], self._f[ia] = new_w, new_z, new_f
        self._measure = self._measure_at(act)
        step_new = self._measure["step"]
        return StepReport(
            step=_col_norm(xp, step_new),
            xnorm=_col_norm(xp, new_w),
            stopped=stuck,
        )

    def _line_search(self, ia, wa, za, grad, diag, direction):
        """Armijo backtracking along W + beta (Wbar - W) per problem; the safeguard where
        it fails.  Returns the new W, Z, F and the host mask of problems with no decrease."""
        xp, data, pen, rounding = self._xp, self._data, self._pen, self._rounding
        fa = self._f[ia]
        h_now = self._h_cols(wa)
        delta = xp.sum(grad * direction, axis=0) + self._h_cols(wa + direction) - h_now
        xd = _matvec_on_rows(xp, data, direction)
        n_act = wa.shape[1]
        beta = xp.ones(n_act, dtype=wa.dtype)
        accepted = xp.zeros(n_act, dtype=bool)
        new_w, new_z, new_f = wa.copy(), za.copy(), fa.copy()
        halvings = MAX_HALVINGS_CONVEX if pen.is_convex else MAX_HALVINGS_NONCONVEX
        for _ in range(halvings + 1):
            w_try = wa + beta * direction
            z_try = za + beta * xd
            f_try = data.values(z_try, ia) + self._h_cols(w_try)
            # Armijo; where the predicted decrease is below the rounding of F (at the
            # optimum to machine precision) a step that does not increase F is taken
            flat = (-delta <= rounding * xp.abs(fa)) & (f_try <= fa + rounding * xp.abs(fa))
            ok = (~accepted) & (((f_try <= fa + SIGMA * beta * delta) & (delta < 0)) | flat)
            self._stats["line_search_steps"] += 1
            if bool(xp.any(ok)):
                new_w[:, ok], new_z[:, ok], new_f[ok] = w_try[:, ok], z_try[:, ok], f_try[ok]
                accepted |= ok
            if bool(xp.all(accepted)):
                break
            beta = xp.where(accepted, beta, 0.5 * beta)
        stuck = np.zeros(n_act, dtype=bool)
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
                fp = data.values(zp, ia[fi]) + self._h_cols(p)
                decrease = 0.5 * tau * xp.sum((fdiag * dp * dp).astype(np.float64), axis=0)
                ok = pending & (fp <= ff - SIGMA * decrease) & (decrease > 0)
                self._stats["fallback_steps"] += 1
                if bool(xp.any(ok)):
                    cols = fi[ok]
                    new_w[:, cols], new_z[:, cols], new_f[cols] = p[:, ok], zp[:, ok], fp[ok]
                    pending &= ~ok
                if not bool(xp.any(pending)):
                    break
                tau *= 2.0
            # no decrease representable in floating point: these problems stop
            if bool(xp.any(pending)):
                stuck[to_host(fi[pending])] = True
        return new_w, new_z, new_f, stuck

    def retire(self, done):
        keep = np.flatnonzero(~done)
        ia = self._xp.asarray(keep)
        self._opt[self.active] = to_host(
            _col_norm(self._xp, self._measure["step"])
            / self._xp.maximum(_col_norm(self._xp, self._w[:, self._xp.asarray(self.active)]), 1.0)
        )
        self._measure = {k: v[:, ia] for k, v in self._measure.items()}
        self.active = self.active[keep]

    def current_x(self):
        return self._w.copy()

    def final_x(self):
        return self._w

    def final_objective(self, x):
        return self._f.astype(np.float64, copy=True)

    def info(self):
        if len(self.active):  # the measure of the problems still running at the end
            xp = self._xp
            self._opt[self.active] = to_host(
                _col_norm(xp, self._measure["step"])
                / xp.maximum(_col_norm(xp, self._w[:, xp.asarray(self.active)]), 1.0)
            )
        return {
            "hessian": self._hessian,
            "optimality": self._opt.copy(),
            **self._stats,
            "working_set_size": list(self._ws),
        }


def _inner(a, grad, w, penalty, tol, max_iter, be, stats):
    """Minimise <G, Y - W> + 1/2 (Y - W)' A (Y - W) + h(Y) by MSM from Y = W."""
    r = grad - a @ w
    # theta (relative to mean(diag(A)), as solve takes it): a small proximal term keeps
    # B_jj > 0 for zero-curvature rows and is needed by the nonconvex theorem
    # (delta = theta / omega > 0 at omega = 1)
    theta = INNER_THETA_NONCONVEX if not penalty.is_convex else INNER_THETA_CONVEX
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
        # plain MSM sweeps, also for convex h: an inexact inner solve is what proximal
        # Newton needs, and the exact finish's set-up cost more than it saved on every
        # data set of benchmarks/bench_logistic.py (docs/development.md)
        finish=None,
        # the model Hessian is X' diag(w) X (or Bohning's bound), PSD by construction:
        # no symmetry test and no Cholesky test per inner solve (O(n^2) + O(n^3))
        known_psd=True,
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


def _floor(xp, d):
    """Curvatures floored at 1e-12 of their largest value (and a tiny absolute)."""
    top = xp.max(d, axis=0, keepdims=True)
    return xp.maximum(d, xp.maximum(1e-12 * top, 1e-300))


def _col_norm(xp, x):
    return xp.sqrt(xp.sum((x * x).astype(np.float64), axis=0))


def _like_cupy(loss):
    import cupy

    return cupy.empty(0)
