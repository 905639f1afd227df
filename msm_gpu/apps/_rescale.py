"""A separable penalty rewritten for rescaled variables.

The estimators solve their problems in better units than the user's: the logistic
regression standardises the columns of X, the sparse coder normalises the atoms of a
fixed dictionary.  Writing the unknowns as ``y_j = s_j x_j`` (``s_j > 0``) changes the
problem only through its penalty, and for every penalty of the package exactly:

* l1 ``lam |x|``: ``(lam / s_j) |y|``;
* l0 ``lam [x != 0]``: unchanged (counting is scale-free);
* lp ``lam |x|^p``: ``(lam / s_j^p) |y|^p``;
* bounds ``lb <= x <= ub``: ``s_j lb <= y <= s_j ub``.

So the answer of the rescaled problem, mapped back by ``x_j = y_j / s_j``, is the answer
of the user's problem, and the objectives are equal at corresponding points.
"""

from __future__ import annotations

import numpy as np

from ..penalties import CODE_L1, CODE_LP, Penalty

__all__ = ["RescaledPenalty"]


class RescaledPenalty(Penalty):
    """``base`` applied to ``x = y / scale`` (one scale per row), as a penalty on ``y``.

    Parameters
    ----------
    base : Penalty
        The user's penalty on x (scalar or per-row parameters).
    scale : (n,) array of positive floats
        ``y_j = scale_j x_j``.
    """

    def __init__(self, base: Penalty, scale):
        s = np.asarray(scale, dtype=np.float64)
        if s.ndim != 1 or not np.all(s > 0) or not np.all(np.isfinite(s)):
            raise ValueError("scale must be a 1-D array of finite positive numbers")
        self.base = base
        self.code = base.code
        self.is_convex = base.is_convex
        self.p = base.p
        if base.code == CODE_L1:
            power = 1.0
        elif base.code == CODE_LP:
            power = float(base.p)
        else:  # l0 and box: no weight (box has lam 0)
            power = 0.0
        self.lam = np.asarray(base.lam, dtype=np.float64) * s**-power
        # 0 * inf is NaN: an infinite bound stays infinite, a finite one scales
        self.lb = _scaled_bound(base.lb, s)
        self.ub = _scaled_bound(base.ub, s)

    def __repr__(self):
        return f"RescaledPenalty({self.base!r}, n={self.lam.shape[0]})"

    def __eq__(self, other):
        return self is other

    def __hash__(self):
        return id(self)


def _scaled_bound(bound, s):
    b = np.broadcast_to(np.asarray(bound, dtype=np.float64), s.shape)
    return np.where(np.isfinite(b), b * s, b)
