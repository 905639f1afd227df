"""The beta-divergence of NMF, as scikit-learn defines it.

    d_beta(y | z) = (y^b + (b - 1) z^b - b y z^(b-1)) / (b (b - 1))     (b = beta)

with the limits b = 2: (y - z)^2 / 2 (half the squared Frobenius norm), b = 1: the
generalised Kullback-Leibler divergence y log(y / z) - y + z (0 log 0 = 0), b = 0: the
Itakura-Saito divergence y / z - log(y / z) - 1.  NMF minimises sum_ij d(Y_ij | (WH)_ij).
"""

from __future__ import annotations

from numbers import Real

#: scikit-learn's names of the three common losses.
LOSS_NAMES = {"frobenius": 2.0, "kullback-leibler": 1.0, "itakura-saito": 0.0}


def beta_value(beta_loss):
    """beta as a float for a loss name or a number (``sklearn ... _beta_loss_to_float``)."""
    if isinstance(beta_loss, str):
        if beta_loss not in LOSS_NAMES:
            names = ", ".join(repr(n) for n in LOSS_NAMES)
            raise ValueError(f"beta_loss must be one of {names} or a float, got {beta_loss!r}")
        return LOSS_NAMES[beta_loss]
    if isinstance(beta_loss, bool) or not isinstance(beta_loss, Real):
        raise TypeError(f"beta_loss must be a string or a float, got {type(beta_loss).__name__}")
    value = float(beta_loss)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"beta_loss must be finite, got {beta_loss!r}")
    return value
