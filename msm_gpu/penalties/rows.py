"""A penalty with per-row parameters: unpenalised rows (intercepts) and row subsets.

The sweeps read a per-row table ``[lam, lb, ub, p]`` (``penalties.py``), so a row with
``lam = 0`` and infinite bounds is a free variable for every penalty code: the 1-D step
of every code reduces to ``t = -w/b`` there.  :class:`RowPenalty` builds such a table
from a user's penalty (for the intercept row of :func:`msm_gpu.minimize`) and restricts
it to a subset of rows (the working set of the Newton loop).
"""

from __future__ import annotations

import numpy as np

from . import Penalty


class RowPenalty(Penalty):
    """``base`` on every row except the rows in ``free`` (no penalty, no bounds).

    Parameters
    ----------
    base : Penalty
    n : int
        Rows of the problem (after appending free rows).
    free : sequence of int
        Rows that are unpenalised and unbounded.
    n_base : int, optional
        Rows that ``base``'s per-row bounds describe (default ``n - len(free)``); its
        bounds are laid out on the non-free rows in order.
    """

    def __init__(self, base: Penalty, n: int, free=(), n_base=None):
        self.base = base
        self.code = base.code
        self.is_convex = base.is_convex
        self.p = base.p
        free = np.asarray(free, dtype=np.int64)
        is_penalised = np.ones(n, dtype=bool)
        is_penalised[free] = False
        penalised = np.flatnonzero(is_penalised)
        if n_base is not None and n_base != penalised.size:
            raise ValueError(f"n_base={n_base} does not match {penalised.size} penalised rows")
        lam = np.zeros(n)
        lb = np.full(n, -np.inf)
        ub = np.full(n, np.inf)
        for target, value, name in (
            (lam, base.lam, "lam"),
            (lb, base.lb, "lb"),
            (ub, base.ub, "ub"),
        ):
            value = np.asarray(value, dtype=np.float64)
            if value.ndim == 1 and value.shape[0] != penalised.size:
                raise ValueError(
                    f"penalty {name} has {value.shape[0]} entries but the problem has "
                    f"{penalised.size} penalised rows"
                )
            target[penalised] = value
        self.lam, self.lb, self.ub = lam, lb, ub
        self._free = free

    def subset(self, rows) -> RowPenalty:
        """The same penalty on ``rows`` only (a new object)."""
        out = RowPenalty.__new__(RowPenalty)
        out.base = self.base
        out.code, out.is_convex, out.p = self.code, self.is_convex, self.p
        out.lam, out.lb, out.ub = self.lam[rows], self.lb[rows], self.ub[rows]
        out._free = None
        return out

    def __repr__(self):
        return f"RowPenalty({self.base!r}, n={self.lam.shape[0]})"

    def __eq__(self, other):
        return self is other

    def __hash__(self):
        return id(self)
