"""MSM as an :class:`~msm_gpu.solvers.loop.IterativeMethod`: one sweep per step, exact objective.

Written once against the array API: ``xp`` is NumPy or CuPy (through array_api_compat)
and the backend's :class:`~msm_gpu.backends.base.SweepState` does the sweeping; the
stopping rule, history, callback and retirement are :func:`msm_gpu.solvers.loop.run_iterations`.

Objective bookkeeping costs no extra matrix product.  With the 1-D objectives
phi_j(t) = 1/2 B_jj t^2 + w_j t + h(t) of the sweep, the algebra of the paper's
nonconvex theorem holds with equality:

    F(Z) = F(X) + sum_j [phi_j(Z_j) - phi_j(X_j)] + 1/2 (Z - X)' T (Z - X),
    T = diag(C) = D - (D + theta I) / omega,

so every sweep returns, per column, the terms of this identity (``STAT_QUAD`` and
``STAT_HZ``) and the driver updates F column by column.  F(X_0) is computed directly (one
product with A; none for X_0 = 0 where 0 is feasible: F(0) = 0), and the final F is the
tracked one; a direct product is used only when F was not tracked (objective not
recorded, or X_0 outside dom h).  ``tests/test_cpu_runtime.py`` checks the
tracked F against the direct one.
"""

from __future__ import annotations

from ..backends.base import STAT_DIFF2, STAT_HZ, STAT_QUAD, STAT_XNORM2
from .loop import IterativeMethod, StepReport


def column_objectives(xp, a, r, x, penalty):
    """Per column: F_c = 1/2 x_c' A x_c + x_c' r_c + sum_j h(x_jc), and sum_j h(x_jc).

    Returns float64 arrays of length r in namespace ``xp``.
    """
    ax = xp.matmul(a, x)
    quad = xp.sum(xp.astype(x * (0.5 * ax + r), xp.float64), axis=0)
    hsum = xp.sum(xp.astype(penalty.value(x), xp.float64), axis=0)
    return quad + hsum, hsum


class MsmMethod(IterativeMethod):
    """MSM iterations X <- T(X) (paper, Algorithm 1) through a backend's sweep state.

    The backend owns the iterate in its own layout; each sweep returns per-column
    statistics from which the step norms and the exact objective update follow.
    """

    def __init__(
        self, backend, a, r, x0, penalty, splitting, panel, *, threads=None, x0_owned=False
    ):
        self._xp = backend.xp
        self._a, self._r, self._penalty = a, r, penalty
        self._splitting = splitting
        self._panel = panel
        self._state = backend.start(
            a, r, x0, splitting, penalty.table(a.shape[0]), penalty.code, panel, x0_owned=x0_owned
        )
        self._state.max_threads = threads
        self._f = self._h = None
        self._anchored = False
        self._first_stats = None  # a sweep done by start_objective, reported by step
        self._active_dev = self._xp.asarray(self._state.active)

    @property
    def active(self):
        return self._state.active

    def start_objective(self, will_step=False):
        if will_step:
            # the backend may take F(X_0) from the first sweep's own products
            fused = self._state.sweep_with_objective()
            if fused is not None:
                terms, self._first_stats = fused
                self._set_terms(terms)
                return
        self._objective_at(None)

    def step(self, record_objective):
        xp = self._xp
        if self._first_stats is not None:
            stats, self._first_stats = self._first_stats, None
        else:
            stats = self._state.sweep()
        if record_objective:
            if self._anchored and len(self.active) == self._f.shape[0]:  # all columns
                self._f += stats[STAT_QUAD] + stats[STAT_HZ] - self._h
                self._h = stats[STAT_HZ]
            elif self._anchored:
                act = self._active_dev
                self._f[act] += stats[STAT_QUAD] + stats[STAT_HZ] - self._h[act]
                self._h[act] = stats[STAT_HZ]
            else:
                # X_0 was outside dom h (F = inf): anchor on the new, feasible iterate
                self._objective_at(None)
        return StepReport(step=xp.sqrt(stats[STAT_DIFF2]), xnorm=xp.sqrt(stats[STAT_XNORM2]))

    def _objective_at(self, x):
        """F and sum h per column at ``x`` (None: the state's current iterate)."""
        terms = self._state.objective_terms() if x is None else None
        if terms is None:
            x = self._state.current_x() if x is None else x
            terms = column_objectives(self._xp, self._a, self._r, x, self._penalty)
        self._set_terms(terms)

    def _set_terms(self, terms):
        self._f, self._h = terms
        self._anchored = bool(self._xp.all(self._xp.isfinite(self._f)))

    def objective(self):
        return self._xp.sum(self._f)  # 0-d backend array, read by the loop with its flags

    def retire(self, done):
        self._state.retire(~done)
        self._active_dev = self._xp.asarray(self._state.active)

    def current_x(self):
        return self._state.current_x()

    def final_x(self):
        return self._state.take_x()

    def final_objective(self, x):
        if self._anchored:  # tracked through every sweep: exact up to rounding
            return self._xp.asarray(self._f, copy=True)
        terms = self._state.objective_terms(x)
        if terms is None:
            terms = column_objectives(self._xp, self._a, self._r, x, self._penalty)
        return terms[0]

    def info(self):
        return {
            "omega": self._splitting.omega,
            "theta": self._splitting.theta,
            "delta": self._splitting.delta,
            "panel": self._panel,
        }

    def close(self):
        self._state.close()
