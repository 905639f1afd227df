"""Extrapolation between the outer iterations of alternating NMF (Ang and Gillis 2019).

A. M. S. Ang and N. Gillis, "Accelerating nonnegative matrix factorization algorithms using
extrapolation", Neural Computation 31(2), 2019.  After each half-step the new factor is
pushed along its last move,

    H_hat = max(H_new + beta (H_new - H_old), 0),

and the next half-step starts from (and is computed for) the extrapolated point.  The
weight beta adapts to the objective f of the pair just computed:

* f went up (restart): the extrapolated points are dropped (the next half-step starts from
  the plain iterates), ``beta_bar <- beta``, ``beta <- beta / eta``;
* f went down: ``beta <- min(beta_bar, gamma beta)``, ``beta_bar <- min(1, gamma_bar
  beta_bar)``.

The paper's parameters: beta_0 = 0.5, eta = 1.5, gamma = 1.01, gamma_bar = 1.005.  The
projection onto the nonnegative orthant keeps every iterate feasible, so every objective
value the loop records is that of a feasible pair.  The projection can zero a whole
component of the factor; the next half-step then keeps the other factor's component where
it was (``solvers.keep_free_components``), and without a penalty the zeroed component
comes back at its next half-step (its gradient there, -(Y H_t')_i, is negative).  An l1
penalty adds its weight to that gradient and can hold the component at zero for good
(digits, k = 10, alpha_W = 0.01, l1_ratio = 1: 6 of 10 components lost), so with an l1
penalty the projection keeps the new value of every component it would zero
(``keep_components``, :func:`revive`).
"""

from __future__ import annotations

from ..arrays import module_of


class Extrapolation:
    """The adaptive weight of Ang and Gillis (2019) and the extrapolated points."""

    def __init__(self, beta0=0.5, eta=1.5, gamma=1.01, gamma_bar=1.005, keep_components=False):
        self.beta = float(beta0)
        self.keep_components = bool(keep_components)
        self.beta_bar = 1.0
        self.eta = float(eta)
        self.gamma = float(gamma)
        self.gamma_bar = float(gamma_bar)
        self.restarts = 0

    def point(self, new, old):
        """``max(new + beta (new - old), 0)`` (a new array; the inputs are not modified);
        with ``keep_components``, a component (row) it zeroes while ``new`` has it nonzero
        is taken from ``new``."""
        mod = module_of(new)
        out = new - old  # then updated in place: one temporary, not three
        out *= self.beta
        out += new
        out = mod.maximum(out, 0.0, out=out)
        return revive(out, new) if self.keep_components else out

    def update(self, f_new, f_old):
        """Adapt beta to the objective change; True if f decreased (keep extrapolating)."""
        if f_new > f_old:
            self.beta_bar = self.beta
            self.beta = self.beta / self.eta
            self.restarts += 1
            return False
        self.beta = min(self.beta_bar, self.gamma * self.beta)
        self.beta_bar = min(1.0, self.gamma_bar * self.beta_bar)
        return True


def revive(point, new):
    """``point`` (k x c) with its all-zero rows that are nonzero in ``new`` taken from
    ``new``; NumPy and CuPy arrays are changed in place, a Dask array is returned anew."""
    zero = point.max(axis=1) <= 0
    if hasattr(zero, "dask"):
        import dask.array as da

        return da.where((zero & (new.max(axis=1) > 0))[:, None], new, point)
    if bool(zero.any()):  # rare: only then is ``new`` read
        dead = zero & (new.max(axis=1) > 0)
        point[dead] = new[dead]
    return point
