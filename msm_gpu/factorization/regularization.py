"""NMF's regularisation terms, with scikit-learn's meaning and scaling.

scikit-learn's ``NMF(alpha_W, alpha_H, l1_ratio)`` minimises

    loss(Y, WH) + l1_W sum(W) + l2_W / 2 ||W||_F^2 + l1_H sum(H) + l2_H / 2 ||H||_F^2

(W, H >= 0, so sum = the l1 norm) with the weights scaled by the data's shape
(``sklearn.decomposition._nmf._BaseNMF._compute_regularization``):

    l1_W = d alpha_W l1_ratio        l2_W = d alpha_W (1 - l1_ratio)
    l1_H = m alpha_H l1_ratio        l2_H = m alpha_H (1 - l1_ratio)

for Y of shape m x d, ``alpha_H="same"`` meaning alpha_W.  In a half-step with the
Gram form ``min_{X >= 0} 1/2 tr(X'GX) - tr(X'P)`` the l2 part adds ``l2 I`` to G (a
diagonal: free in MSM's splitting) and the l1 part, linear on X >= 0, subtracts ``l1``
from P (the ``NonNegL1`` penalty reduced to its linear part).
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Real

from .._input import validation as v
from ..arrays import module_of


def check_alphas(alpha_w, alpha_h, l1_ratio):
    """Refuse a negative or non-finite alpha, or an l1_ratio outside [0, 1]."""
    v.check_real(alpha_w, "alpha_W", low=0.0)
    if not (isinstance(alpha_h, str) and alpha_h == "same"):
        if isinstance(alpha_h, str) or not isinstance(alpha_h, Real):
            raise ValueError(f"alpha_H must be 'same' or a float >= 0, got {alpha_h!r}")
        v.check_real(alpha_h, "alpha_H", low=0.0)
    v.check_real(l1_ratio, "l1_ratio", low=0.0, high=1.0)


@dataclass(frozen=True)
class Regularization:
    """The four weights of the penalty on W (m x k) and H (k x d)."""

    l1_w: float = 0.0
    l2_w: float = 0.0
    l1_h: float = 0.0
    l2_h: float = 0.0

    @classmethod
    def from_params(cls, p, shape):
        """scikit-learn's scaled weights for data of ``shape`` (m, d)."""
        m, d = shape
        alpha_w = float(p.get("alpha_W", 0.0))
        alpha_h = p.get("alpha_H", "same")
        alpha_h = alpha_w if isinstance(alpha_h, str) else float(alpha_h)
        l1_ratio = float(p.get("l1_ratio", 0.0))
        return cls(
            l1_w=d * alpha_w * l1_ratio,
            l2_w=d * alpha_w * (1.0 - l1_ratio),
            l1_h=m * alpha_h * l1_ratio,
            l2_h=m * alpha_h * (1.0 - l1_ratio),
        )

    @property
    def active(self):
        return any((self.l1_w, self.l2_w, self.l1_h, self.l2_h))

    def rescaled(self, exponent, beta):
        """The weights for the data Y / 2^e and factors W / 2^(e/2), H / 2^(e/2).

        The loss scales by 2^(beta e), sum(W) by 2^(e/2), ||W||^2 by 2^e, so the problem
        in the scaled units has l1 * 2^(e/2 - beta e) and l2 * 2^(e - beta e)."""
        if not exponent or not self.active:
            return self
        f1 = 2.0 ** (0.5 * exponent - beta * exponent)
        f2 = 2.0 ** (exponent - beta * exponent)
        return Regularization(self.l1_w * f1, self.l2_w * f2, self.l1_h * f1, self.l2_h * f2)

    def value(self, wt, h):
        """The penalty at W' (k x m) and H (k x d), a float."""
        if not self.active:
            return 0.0
        return self.factor_value(wt, "W") + self.factor_value(h, "H")

    def factor_value(self, x, side):
        """One factor's penalty, l1 sum(x) + l2/2 ||x||^2 (``side`` "W" or "H"; x in
        any orientation)."""
        l1, l2 = (self.l1_w, self.l2_w) if side == "W" else (self.l1_h, self.l2_h)
        total = 0.0
        if l1:
            total += l1 * float(x.sum(dtype="float64"))
        if l2:
            total += 0.5 * l2 * float((x.astype("float64") ** 2).sum())
        return total

    def weights(self, factor):
        """(l1, l2) of ``factor`` ("W" or "H")."""
        return (self.l1_w, self.l2_w) if factor == "W" else (self.l1_h, self.l2_h)

    def gram_form(self, g, p, factor):
        """(G + l2 I, P - l1): the half-step of ``factor`` with its penalty (new arrays
        where a weight is nonzero; the inputs are not modified)."""
        l1, l2 = self.weights(factor)
        if l2:
            g = g + l2 * module_of(g).eye(g.shape[0], dtype=g.dtype)
        if l1:
            p = p - l1
        return g, p
