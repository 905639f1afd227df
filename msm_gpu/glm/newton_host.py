"""Proximal Newton with exact Hessians on the CPU: every outer iteration one compiled call.

:class:`HostNewtonMethod` is :class:`msm_gpu.glm.newton.NewtonMethod` with ``hessian="exact"``
for NumPy data: the same working sets, forcing sequence, line search, safeguard and
stopping measure (``newton.py``), each outer iteration of every problem run by
:func:`msm_gpu.glm.kernels.step_columns`, the model Hessian read through the columns of
X instead of formed.  Measured in ``benchmarks/bench_logistic.py`` against the NumPy loop
(which stays the road of the bound Hessian and of CuPy).
"""

from __future__ import annotations

import contextlib

import numpy as np

from ..backends.cpu.threads import run_ranges, serial_numba_blas, sweep_threads, thread_cap
from ..solvers.loop import IterativeMethod, StepReport
from .kernels import LOSS_LOGISTIC, LOSS_POISSON, STEP_STUCK, measure_columns, step_columns
from .losses import Logistic

#: Rough flops of one outer iteration per nonzero of X (a few inner sweeps, the measure):
#: only used to decide whether a second thread pays.
FLOPS_PER_NONZERO = 40.0
#: Inner sweeps expected of a problem's first model (later: as many as its last one took),
#: for the choice between forming the model Hessian and reading it through X.
INITIAL_SWEEPS_GUESS = 10


class HostNewtonMethod(IterativeMethod):
    """Proximal Newton (exact Hessians) on NumPy/SciPy data, one problem per column.

    Parameters
    ----------
    loss : Logistic or Poisson
    pen : RowPenalty
        The penalty with the intercept row free.
    w0 : (n_coef, r) ndarray
        Start (copied).
    dtype : numpy dtype
        Working precision of X, W and the linear predictor.
    settings : dict
        ``inner_max_iter, working_set, free_row, rounding, tol, theta, omega, sigma,
        ws_min, ws_growth, max_halvings, max_doublings, forcing`` (``newton.py``).
    """

    def __init__(self, loss, pen, w0, dtype, settings):
        self._settings = settings
        self._kind = LOSS_LOGISTIC if isinstance(loss, Logistic) else LOSS_POISSON
        m = loss.X.shape[0]
        design = _design_by_columns(loss, dtype)
        self._design = design
        n_coef, r = w0.shape
        self._W = np.ascontiguousarray(w0.T, dtype=dtype)
        self._Z = np.ascontiguousarray((design["matrix"] @ w0).T, dtype=dtype)
        self._Y = np.ascontiguousarray(loss._y_host.reshape(m, -1).T, dtype=dtype)
        self._s = loss.sample_shares().astype(dtype)
        self._pen = (
            int(pen.code),
            np.ascontiguousarray(pen.lam, dtype=np.float64),
            np.ascontiguousarray(pen.lb, dtype=np.float64),
            np.ascontiguousarray(pen.ub, dtype=np.float64),
            float(pen.p or 0.0),
        )
        self._F = np.empty(r)
        # CURV (per sample), GRAD, HDIAG, DIAG, STEP (per coefficient): the measure at W
        self._measure = (np.empty((r, m)),) + tuple(np.empty((r, n_coef)) for _ in range(4))
        self._step_norm = np.empty(r)
        self._w_norm = np.empty(r)
        measure_columns(
            *design["args"], self._kind, self._Y, self._s, self._Z, self._W, self._F, 0, r,
            *self._pen, *self._measure, self._step_norm, self._w_norm,
        )  # fmt: skip
        if not np.all(np.isfinite(self._F)):
            raise ValueError("x0 must lie in the domain of the penalty (F(x0) is not finite)")
        self.active = np.arange(r)
        self._opt = np.full(r, np.inf)
        self._stats = {"inner_iterations": 0, "line_search_steps": 0, "fallback_steps": 0}
        self._ws = []
        self._threads = thread_cap()
        self._last_sweeps = np.full(r, INITIAL_SWEEPS_GUESS, dtype=np.int64)

    def start_objective(self, will_step=False):
        pass  # F(W_0) is known from the start

    def objective(self):
        return float(np.sum(self._F))

    def _optimality(self, act):
        return self._step_norm[act] / np.maximum(self._w_norm[act], 1.0)

    def step(self, record_objective):
        st = self._settings
        act = self.active
        n_act = len(act)
        inner_tols = forcing_tolerance(self._optimality(act), st["tol"], st["forcing"])
        stats = np.zeros((n_act, 5), dtype=np.int64)
        step_norm = np.empty(n_act)
        w_norm = np.empty(n_act)
        cols = np.ascontiguousarray(act, dtype=np.int64)

        def run(c0, c1):
            step_columns(
                *self._design["args"], self._kind, self._Y, self._s, self._Z, self._W,
                self._F, cols, c0, c1, *self._pen, *self._measure, st["free_row"],
                st["working_set"], st["ws_min"], st["ws_growth"], inner_tols,
                st["inner_max_iter"], st["theta"], st["omega"], st["rounding"], st["sigma"],
                st["max_halvings"], st["max_doublings"], self._last_sweeps, stats, step_norm,
                w_norm,
            )  # fmt: skip

        flops = FLOPS_PER_NONZERO * self._design["nnz"] * n_act
        n_threads = sweep_threads(flops, n_act, self._threads)
        # the model Hessians of dense X are GEMMs inside the kernel: BLAS on one thread
        # (the problems are what runs in parallel)
        with serial_numba_blas() if not self._design["args"][0] else contextlib.nullcontext():
            if n_threads <= 1:
                run(0, n_act)
            else:
                bounds = np.linspace(0, n_act, min(n_act, 4 * n_threads) + 1).astype(np.int64)
                run_ranges(lambda k: run(bounds[k], bounds[k + 1]), len(bounds) - 1, n_threads)
        self._stats["inner_iterations"] += int(stats[:, 0].sum())
        self._stats["line_search_steps"] += int(stats[:, 1].sum())
        self._stats["fallback_steps"] += int(stats[:, 2].sum())
        self._ws.extend(int(k) for k in stats[:, 3])
        self._step_norm[act], self._w_norm[act] = step_norm, w_norm
        return StepReport(step=step_norm, xnorm=w_norm, stopped=stats[:, 4] == STEP_STUCK)

    def retire(self, done):
        gone = self.active[done]
        self._opt[gone] = self._optimality(gone)
        self.active = self.active[~done]

    def current_x(self):
        return np.ascontiguousarray(self._W.T)

    def final_objective(self, x):
        return self._F.copy()

    def info(self):
        if len(self.active):  # the measure of the problems still running at the end
            self._opt[self.active] = self._optimality(self.active)
        return {
            "hessian": "exact",
            "optimality": self._opt.copy(),
            **self._stats,
            "working_set_size": list(self._ws),
        }


def _design_by_columns(loss, dtype):
    """X (with the intercept's column of ones) as the kernels read it: dense in Fortran
    order, or sparse as CSC arrays; ``args`` are the kernels' first five arguments."""
    import scipy.sparse as sp

    X = loss.X
    m, n = X.shape
    n_coef = n + int(loss.fit_intercept)
    none_i = np.zeros(1, dtype=np.uint64)
    if sp.issparse(X):
        csc = sp.csc_matrix(X, dtype=dtype)
        if loss.fit_intercept:
            csc = sp.hstack([csc, np.ones((m, 1), dtype=dtype)], format="csc")
        csc.sort_indices()
        # unsigned indices: Numba then skips the negative-index wraparound test of every
        # gather and scatter (about half the time of a sparse sweep; docs/development.md)
        args = (
            True,
            np.zeros((1, 1), dtype=dtype),
            csc.indptr.astype(np.uint64),
            csc.indices.astype(np.uint64),
            csc.data,
        )
        return {"args": args, "matrix": csc, "nnz": csc.nnz}
    dense = np.empty((m, n_coef), dtype=dtype, order="F")
    dense[:, :n] = X
    if loss.fit_intercept:
        dense[:, n] = 1.0
    args = (False, dense, none_i, none_i, np.zeros(1, dtype=dtype))
    return {"args": args, "matrix": dense, "nnz": m * n_coef}


def forcing_tolerance(opt, tol, forcing):
    """Inner MSM tolerance per problem: ``forcing opt min(1, sqrt(opt))`` within
    [tol / 1000, 0.1] (``opt``: the problems' optimality measures)."""
    eta = forcing * opt * np.minimum(1.0, np.sqrt(opt))
    return np.clip(eta, 1e-3 * tol, 0.1)
