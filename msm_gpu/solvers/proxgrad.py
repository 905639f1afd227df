"""Proximal-gradient baselines: PGM, PGM + line search, APG (FISTA), APG + line search.

Written once against the array API (``backend.xp``: NumPy or CuPy) as
:class:`~msm_gpu.solvers.loop.IterativeMethod` steps: the stopping rule, history, callback, time
limit and column retirement are MSM's own (:func:`msm_gpu.solvers.loop.run_iterations`), so they
are drop-in comparators for MSM.  Every column of X is an independent problem.

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

Converged columns (the stopping rule of :func:`msm_gpu.solvers.loop.run_iterations`) are
removed from the working arrays (compaction, as MSM does), so they cost nothing afterwards.
"""

from __future__ import annotations

import math

import numpy as np

from ..arrays import to_host
from .lipschitz import lipschitz_constant
from .loop import IterativeMethod, StepReport, run_iterations

#: The paper's comparators: proximal gradient and FISTA, constant step 1/L or backtracking.
METHODS = ("pgm", "pgm_ls", "apg", "apg_ls")

#: Multiplier of the line searches.
ETA = 2.0
#: Trials per column and iteration before a line search gives up (x+ = y).
MAX_BACKTRACKS = 64
#: Floor of the line-search start, relative to L = lambda_max(A).
L0_FLOOR = 1e-6


class ProxGradMethod(IterativeMethod):
    """PGM / PGM+LS / APG / APG+LS on 2-D backend arrays as an :class:`IterativeMethod`.

    Parameters
    ----------
    method : {"pgm", "pgm_ls", "apg", "apg_ls"}
    backend : Backend
        Only ``backend.xp`` is used.
    a, r, x0 : backend arrays
        A symmetric (n, n); R and X_0 of shape (n, r).  x0 is not modified.
    penalty : Penalty
    trace : callable, optional
        Line-search methods only: ``trace(event)`` after every trial, with ``event`` a
        dict: ``iteration`` (1-based), ``columns`` (host int array: the columns of R
        tried), ``y``, ``x_plus`` (backend arrays n x len(columns)), ``L`` (host
        float64 array) and ``accepted`` (host bool array).  For checks and plots.
    """

    def __init__(self, method, backend, a, r, x0, penalty, *, trace=None):
        if method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
        xp = self._xp = backend.xp
        self._a, self._r, self._penalty, self._trace = a, r, penalty, trace
        n_cols = r.shape[1]
        self._method = method
        self._accelerated = method.startswith("apg")
        self._line_search = method.endswith("_ls")

        self._lip, self._lanczos = lipschitz_constant(backend, a)
        self._l_step = self._lip if self._lip > 0.0 else 1.0  # A = 0: any step works, take 1

        # working state of the active (not yet converged) columns
        self.active = np.arange(n_cols)
        self._x = xp.asarray(x0, copy=True)
        self._ax = self._matmul(self._x)
        self._rr = r
        self._matvec_cols = n_cols
        self._x_full = xp.asarray(x0, copy=True)  # retired columns are written back here
        self._x_prev = self._ax_prev = None
        self._t_k, self._beta = 1.0, 0.0
        self._n_iter = 0

        if self._line_search:
            g0 = self._ax + r
            ag0 = self._matmul(g0)
            self._matvec_cols += n_cols
            gg = xp.sum(g0 * g0, axis=0)
            safe = xp.where(gg > 0, gg, xp.ones_like(gg))
            rq = xp.where(gg > 0, xp.sum(g0 * ag0, axis=0) / safe, xp.full_like(gg, self._l_step))
            self._l_cols = xp.maximum(rq, xp.full_like(rq, L0_FLOOR * self._l_step))
        self._n_backtracks = self._n_failures = 0
        self._l_final = np.full(n_cols, np.nan)  # last accepted L per column (line searches)
        self._f_all = xp.zeros(n_cols, dtype=xp.float64)

    def _matmul(self, x):
        return self._xp.matmul(self._a, x)

    def start_objective(self, will_step=False):
        self._f_all = _column_objectives(self._xp, self._x, self._ax, self._rr, self._penalty)

    def objective(self):
        return self._xp.sum(self._f_all)  # 0-d backend array, read by the loop with its flags

    def step(self, record_objective):
        xp = self._xp
        self._n_iter += 1
        x, ax = self._x, self._ax
        if self._accelerated and self._beta != 0.0:
            y = x + self._beta * (x - self._x_prev)
            ay = ax + self._beta * (ax - self._ax_prev)
        else:
            y, ay = x, ax
        grad = ay + self._rr

        if not self._line_search:
            x_new = self._penalty.prox(grad - self._l_step * y, self._l_step)
            ax_new = self._matmul(x_new)
            self._matvec_cols += len(self.active)
        else:
            start = self._l_cols / ETA if self._method == "pgm_ls" else self._l_cols
            x_new, ax_new, self._l_cols, stats = _backtrack(
                xp,
                self._a,
                self._penalty,
                y,
                ay,
                grad,
                start,
                self._n_iter,
                self.active,
                self._trace,
            )
            self._matvec_cols += stats["matvec_columns"]
            self._n_backtracks += stats["backtracks"]
            self._n_failures += stats["failures"]

        diff = x_new - x
        step = xp.sqrt(xp.sum(xp.astype(diff * diff, xp.float64), axis=0))
        xnorm = xp.sqrt(xp.sum(xp.astype(x * x, xp.float64), axis=0))
        if self._accelerated:
            self._x_prev, self._ax_prev = x, ax
            t_next = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * self._t_k * self._t_k))
            self._beta = (self._t_k - 1.0) / t_next
            self._t_k = t_next
        self._x, self._ax = x_new, ax_new

        if record_objective:
            self._f_all[_like(self._f_all, self.active)] = _column_objectives(
                xp, x_new, ax_new, self._rr, self._penalty
            )
        return StepReport(step=step, xnorm=xnorm)

    def retire(self, done):
        xp = self._xp
        x = self._x
        if self._line_search:
            self._l_final[self.active[done]] = to_host(self._l_cols)[done]
        self._x_full[:, _like(x, self.active[done])] = x[:, _like(x, np.flatnonzero(done))]
        keep = _like(x, np.flatnonzero(~done))
        self.active = self.active[~done]
        if len(self.active) == 0:
            return
        self._x = xp.take(x, keep, axis=1)
        self._ax = xp.take(self._ax, keep, axis=1)
        self._rr = xp.take(self._r, _like(self._r, self.active), axis=1)
        if self._accelerated:
            self._x_prev = xp.take(self._x_prev, keep, axis=1)
            self._ax_prev = xp.take(self._ax_prev, keep, axis=1)
        if self._line_search:
            self._l_cols = xp.take(self._l_cols, keep, axis=0)

    def current_x(self):
        if len(self.active) == 0:
            return self._x_full
        return _merged(self._x_full, self._x, self.active)

    def final_objective(self, x):
        return _column_objectives(self._xp, x, self._matmul(x), self._r, self._penalty)

    def info(self):
        """``L`` (lambda_max(A) estimate), ``lanczos_matvecs``, ``matvec_columns`` (products
        with A counted per column, setup included) and, for line searches,
        ``ls_backtracks`` (rejected trials), ``ls_failures``, ``eta`` and ``L_columns``
        (last accepted L of each column)."""
        info = {
            "L": self._lip,
            "lanczos_matvecs": self._lanczos["matvecs"],
            "matvec_columns": int(self._matvec_cols),
        }
        if self._line_search:
            if len(self.active):
                self._l_final[self.active] = to_host(self._l_cols)
            info.update(
                {
                    "eta": ETA,
                    "ls_backtracks": int(self._n_backtracks),
                    "ls_failures": int(self._n_failures),
                    "L_columns": self._l_final,
                }
            )
        return info


def run_baseline(method, backend, a, r, x0, penalty, settings, *, trace=None):
    """Run a proximal-gradient baseline through :func:`msm_gpu.solvers.loop.run_iterations`.

    ``settings``: its :class:`~msm_gpu.solvers.loop.LoopSettings`.  Returns its
    :class:`~msm_gpu.solvers.loop.LoopOutcome`, whose ``info`` is :meth:`ProxGradMethod.info`.
    """
    stepper = ProxGradMethod(method, backend, a, r, x0, penalty, trace=trace)
    return run_iterations(stepper, n_cols=r.shape[1], settings=settings)


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
        ok_h = to_host(ok)
        if trace is not None:
            trace(
                {
                    "iteration": iteration,
                    "columns": np.asarray(active)[pending],
                    "y": ys,
                    "x_plus": xs,
                    "L": to_host(xp.astype(ls, xp.float64)),
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
