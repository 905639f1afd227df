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
it was (``solvers.keep_free_components``), so the component is not lost.

With an l1 penalty the first iteration is not extrapolated (``warmup``): the move from
the initial pair is no direction of the trajectory, and pushed along it the next exact
half-step can put whole components into the penalty's zero, where the penalty keeps them
for good (docs/user_guide/nmf.md, "Penalties").
"""

from __future__ import annotations

from ..arrays import module_of


class Extrapolation:
    """The adaptive weight of Ang and Gillis (2019) and the extrapolated points."""

    def __init__(self, beta0=0.5, eta=1.5, gamma=1.01, gamma_bar=1.005, warmup=0):
        self.beta = float(beta0)
        self.warmup = int(warmup)  # points still to return plain (H and W count one each)
        self.beta_bar = 1.0
        self.eta = float(eta)
        self.gamma = float(gamma)
        self.gamma_bar = float(gamma_bar)
        self.restarts = 0

    def point(self, new, old):
        """``max(new + beta (new - old), 0)`` (a new array; the inputs are not modified);
        ``new`` itself (a copy) during the warm-up."""
        if self.in_warmup():
            return new.copy()
        mod = module_of(new)
        out = new - old  # then updated in place: one temporary, not three
        out *= self.beta
        out += new
        return mod.maximum(out, 0.0, out=out)

    def in_warmup(self):
        """Whether this point is one of the first ``warmup`` (each call counts one)."""
        if self.warmup > 0:
            self.warmup -= 1
            return True
        return False

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
