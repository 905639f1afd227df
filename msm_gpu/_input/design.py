"""The least-squares objective evaluated from the design: 1/2 ||C x - d||^2 + h(x).

A least-squares problem is swept in its Gram form (A = C'C, R = -C'D), where
F = 1/2 x'Ax + r'x + 1/2 ||d||^2 + h(x).  That identity cancels catastrophically when F is
small next to ||d||^2 (a close fit) or when x is large along a near-null direction of A (a
singular face): its rounding is eps ||d||^2, or eps x'Ax, not eps F.  Where C is at hand
the objective is therefore taken from the residual C x - d, accurate to the rounding of F
itself and never negative for a sum of squares: the exact finish decides with it whether a
finished column replaces the MSM iterate, and the result reports it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from ..arrays import ArrayKind, module_of, to_host

#: Entries (m x columns) of the residual formed at a time: bounds the extra memory.
BLOCK_ENTRIES = 1 << 22


@dataclass(frozen=True)
class Design:
    """C and D of a least-squares problem in the solver's internal units.

    Attributes
    ----------
    c : (m, n) backend array or sparse matrix
        The rescaled C (working dtype).
    d : (m,) or (m, r) backend array or sparse matrix
        D, to be multiplied by ``2^-d_exp`` (D is kept as given where that is exact).
    d_exp : int
    cols : (k,) int ndarray or None
        The columns of D this design stands for (:meth:`columns`); None: all of them.
    c_norms : (n,) float64 ndarray or None
        ||c_j||^2 of the rescaled C, where the input checks' pass over C found them.
    """

    c: object
    d: object
    d_exp: int = 0
    cols: object = None
    c_norms: object = None

    @cached_property
    def c_kind(self) -> ArrayKind:
        """C's kind (sparse or dense, host or device), found once."""
        return ArrayKind.of(self.c)

    @cached_property
    def d_kind(self) -> ArrayKind:
        """D's kind, found once."""
        return ArrayKind.of(self.d)

    def columns(self, cols):
        """The design of the columns ``cols`` of D (of this design's columns)."""
        cols = np.asarray(to_host(cols))
        if self.cols is not None:
            cols = self.cols[cols]
        return replace(self, cols=cols)

    def objective(self, x, penalty, cols=None):
        """Per column, F = 1/2 ||C x - D||^2 + sum_j h(x_j) and its rounding allowance.

        Parameters
        ----------
        x : (n, k) backend array
            Internal units; column i belongs to column ``cols[i]`` of D (all of D when
            ``cols`` is None).
        penalty : Penalty
            In internal units.
        cols : (k,) integer array, optional
            Relative to this design's own columns (:meth:`columns`).

        Returns
        -------
        f, allowance : (k,) float64 backend arrays
            ``allowance`` = 4 eps (F + ||d|| ||C x - d|| + sum |h|): two values of F differ
            beyond their rounding when they differ by more than the larger allowance.
        """
        xp = module_of(x)
        x64 = xp.astype(x, xp.float64, copy=False)
        k = x.shape[1]
        f = xp.empty((k,), dtype=xp.float64)
        d_norm = xp.empty((k,), dtype=xp.float64)
        c64 = self._c64
        m = self.c.shape[0]
        step = max(1, BLOCK_ENTRIES // max(m, 1))
        zero = not bool(xp.any(x64 != 0))
        if cols is not None:
            cols = np.asarray(to_host(cols))
            cols = cols if self.cols is None else self.cols[cols]
        else:
            cols = self.cols
        for start in range(0, k, step):
            stop = min(start + step, k)
            db = self.d_columns(xp, start, stop, cols)
            d_norm[start:stop] = xp.linalg.vector_norm(db, axis=0)
            res = -db if zero else c64 @ x64[:, start:stop] - db
            f[start:stop] = 0.5 * xp.sum(res * res, axis=0)
        h = _penalty_value(xp, penalty, x, x64)
        h_cols = xp.sum(h, axis=0)
        eps = np.finfo(np.float64).eps
        allowance = 4 * eps * (f + d_norm * xp.sqrt(2 * f) + xp.sum(xp.abs(h), axis=0))
        return f + h_cols, allowance

    @cached_property
    def _c64(self):
        """C in float64 (exact: a float32 C converts without rounding)."""
        return self.c if self.c.dtype == np.float64 else self.c.astype(np.float64)

    def d_columns(self, xp, start, stop, cols=None):
        """Columns start..stop of D (or of D[:, cols]) in float64, internal units, dense
        (m, stop - start)."""
        d, sparse = self.d, self.d_kind.sparse
        if len(d.shape) == 1:
            d = d.reshape(-1, 1) if sparse else xp.reshape(d, (-1, 1))
        pick = slice(start, stop) if cols is None else cols[start:stop]
        if cols is not None and not sparse:
            pick = xp.asarray(pick)  # a device index for a CuPy D
        block = d[:, pick]
        if sparse:
            block = block.toarray()
        block = xp.astype(xp.asarray(block), xp.float64)
        if self.d_exp:
            block = block * 2.0**-self.d_exp
        return block


def _penalty_value(xp, penalty, x, x64):
    """h(x) in float64, with the bounds tested in x's own dtype: a float32 x at a bound is
    the bound rounded to float32, outside the float64 box by an ulp."""
    if x.dtype == xp.float64:
        return penalty.value(x64)
    inside = xp.isfinite(penalty.value(x))
    lb, ub = (_column(xp, v, x64) for v in (penalty.lb, penalty.ub))
    h = penalty.value(xp.clip(x64, lb, ub))
    return xp.where(inside, h, xp.inf)


def _column(xp, v, x):
    """A bound as a scalar or a column matching x's rows."""
    if isinstance(v, np.ndarray):
        return xp.reshape(xp.asarray(v, dtype=x.dtype), (-1, 1))
    return v
