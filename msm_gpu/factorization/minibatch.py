"""Online (mini-batch) NMF: the state one batch at a time updates, in Y / 2^e's units.

For each batch X_b (b x d) with H fixed, W_b is solved exactly (the batched NNLS of the
Frobenius loss, :func:`~msm_gpu.factorization.loop.exact_nnls`, or the Newton half-step
to convergence for other beta-divergences); then H is updated from what the batches have
shown so far, older batches weighted down by rho = forget_factor^(batch_size / n_samples)
per batch (scikit-learn's ``MiniBatchNMF`` rule):

* Frobenius: H minimises the accumulated surrogate sum_b rho^age (1/2 ||X_b - W_b H||^2 +
  H's penalty) exactly.  It depends on the batches through two sums only,

      S = rho S + W_b'W_b (k x k),      T = rho T + W_b'X_b (k x d)

  (and the penalties' weights, summed alike), so the H-step is one batched NNLS with
  Gram S, the shape MSM is built for (Mairal et al. 2010's online scheme for NMF);
* other beta: scikit-learn's online multiplicative update (Lefevre et al. 2011), its
  numerators and denominators accumulated in A and B.

The penalties are scikit-learn's with the batch's own shape (``_compute_regularization``
of the batch), as its ``MiniBatchNMF`` does.
"""

from __future__ import annotations

import numpy as np

from ..backends import get_backend
from ..backends.cpu.threads import serial_blas
from . import beta_loop as bl
from .loop import Data, exact_nnls, stable_objective
from .regularization import Regularization


class OnlineState:
    """H (k x d), the accumulated statistics and the step of one batch.

    Parameters
    ----------
    H : (k, d) array
        The starting H in the units of Y / 2^exponent (float64 on the host).
    beta : float
    exponent : int
        Every batch is divided by 2^exponent (the first data's :func:`scale_exponent`).
    rho : float
        The weight of the past per batch.
    params : dict
        The estimator's parameters (alpha_W, alpha_H, l1_ratio, ...).
    """

    def __init__(self, H, beta, exponent, rho, params):
        self.H = np.array(H, dtype=np.float64, order="C", copy=True)
        self.beta = float(beta)
        self.exponent = int(exponent)
        self.rho = float(rho)
        self.params = params
        self.backend = get_backend("cpu")
        k, d = self.H.shape
        if self.beta == 2.0:
            self.S = np.zeros((k, k))
            self.T = np.zeros((k, d))
            self.l1 = self.l2 = 0.0
        else:  # scikit-learn's starting numerators and denominators
            self.A = self.H.T.copy()
            self.B = np.ones((d, k))

    def regularization(self, shape):
        """The penalties of a batch of this shape, in the scaled units."""
        return Regularization.from_params(self.params, shape).rescaled(self.exponent, self.beta)

    def batch_data(self, X):
        """The batch's data object (Y / 2^e for the loss), to keep between passes."""
        if self.beta == 2.0:
            return Data(X, self.backend, np.float64, self.exponent)
        return bl.BetaData(X, self.exponent, self.beta)

    def solve_w(self, X, start=None, max_newton=None, data=None, warm_step=False):
        """W (b x k, scaled units, float64) for the current H, exactly, and the batch's
        data object (``data``: made before by :meth:`batch_data`).  ``warm_step`` (losses
        other than Frobenius, with ``start``): one Newton half-step from ``start``, as
        the batch fit's half-steps (scikit-learn takes one multiplicative step there)."""
        reg = self.regularization(X.shape)
        data = self.batch_data(X) if data is None else data
        if self.beta == 2.0:
            H = self.H
            g, p = reg.gram_form(H @ H.T, np.asarray(data.h_yt(H)), "W")
            x0 = np.zeros_like(p) if start is None else np.asarray(start, np.float64).T
            return np.ascontiguousarray(exact_nnls(self.backend, g, p, x0).T), data
        Ht = np.ascontiguousarray(self.H.T)
        if start is not None and warm_step:  # the rows' last W: one Newton half-step
            W = np.array(start, dtype=np.float64, order="C", copy=True)
            opts = {"newton": bl.FIT_NEWTON, "sweeps": bl.FIT_SWEEPS, "sweep_tol": bl.FIT_SWEEP_TOL}
            # (one BLAS thread: the half-step's GEMMs run on the sweep threads)
            with serial_blas():
                bl.newton_half_step(
                    data, "W", Ht, W, reg.l1_w, reg.l2_w, omega=1.0, theta=0.0, **opts
                )
            return W, data
        W, _ = bl.solve_w(data, Ht, reg, self.params, start, max_newton, value=False)
        return W, data

    def step(self, X, start=None, max_newton=None, data=None):
        """One batch: W_b (exact for Frobenius; for other losses from ``start``, the
        rows' last W, one Newton half-step), the batch's cost (scikit-learn's
        ``batch_cost``, in the scaled units), then H.  Returns (W_b, cost)."""
        warm = start is not None
        b = X.shape[0]
        reg = self.regularization(X.shape)
        W, data = self.solve_w(X, start, max_newton, data, warm_step=warm)
        H = self.H
        if self.beta == 2.0:
            wt = W.T
            g_h, p_w = H @ H.T, np.asarray(data.h_yt(H))
            loss = stable_objective(data, wt, H, g_h, p_w)
        else:
            loss = bl.divergence(data, W, np.ascontiguousarray(H.T))
        cost = loss + reg.l1_w * W.sum() + reg.l1_h * H.sum()
        cost += reg.l2_w * float(np.vdot(W, W)) + reg.l2_h * float(np.vdot(H, H))
        if self.beta == 2.0:
            rho = self.rho
            self.S *= rho
            self.S += W.T @ W
            self.T *= rho
            self.T += np.asarray(data.wt_y(W))
            self.l1 = rho * self.l1 + reg.l1_h
            self.l2 = rho * self.l2 + reg.l2_h
            g = self.S + self.l2 * np.eye(len(self.S))
            self.H = np.ascontiguousarray(exact_nnls(self.backend, g, self.T - self.l1, H))
        else:
            Ht = np.ascontiguousarray(H.T)
            bl.mu_online_h(data, W, Ht, reg.l1_h, reg.l2_h, self.A, self.B, self.rho)
            self.H = np.ascontiguousarray(Ht.T)
        return W, cost / b
