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
#: ... and where C itself is small (at most this many entries: it stays in cache whatever
#: the block), blocks of this many entries, so that C x - D and its squares are formed
#: and summed in cache rather than streamed through memory three times (unmixing,
#: C 200 x 20 and 1e5 columns, side by side: the whole nnls call 0.238 -> 0.217 s).
CACHE_BLOCK_ENTRIES = 1 << 16


def _block_columns(m, n):
    """Columns of D whose residual is formed at a time, for C (m, n)."""
    entries = CACHE_BLOCK_ENTRIES if m * n <= CACHE_BLOCK_ENTRIES else BLOCK_ENTRIES
    return max(1, entries // max(m, 1))


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
        ||c_j||^2 of the rescaled C, where the input checks' pass over C (or a CSC C's
        scaled copy) found them.
    d_squares : (r,) float64 ndarray or None
        ||d_j||^2 of every column of D in internal units (D 2^-d_exp), where the input
        checks' pass over D found them: F at x = 0 without a pass over D.
    """

    c: object
    d: object
    d_exp: int = 0
    cols: object = None
    c_norms: object = None
    d_squares: object = None

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
        res_sq = xp.empty((k,), dtype=xp.float64)
        d_sq = xp.empty((k,), dtype=xp.float64)
        c64 = self._c64
        step = _block_columns(*self.c.shape)
        zero = not bool(xp.any(x64 != 0))
        cols = self._own_columns(cols)
        for start in range(0, k, step):
            stop = min(start + step, k)
            cx = None if zero else c64 @ x64[:, start:stop]
            res_sq[start:stop], d_sq[start:stop] = self._squares(xp, cx, start, stop, cols)
        return self._with_penalty(xp, penalty, x, x64, 0.5 * res_sq, d_sq)

    def objective_at_zero(self, penalty, cols=None):
        """:meth:`objective` of x = 0 (a cold start): 1/2 ||d||^2 + h(0) per column, with no
        product of C; from the column norms the input checks found, where they did."""
        xp = module_of(self.d) if not self.d_kind.sparse else np
        cols = self._own_columns(cols)
        k = self._n_columns(cols)
        x = xp.zeros((self.c.shape[1], 1), dtype=xp.float64)
        if self.d_squares is not None:
            d_sq = self.d_squares if cols is None else self.d_squares[cols]
            d_sq = xp.asarray(d_sq, dtype=xp.float64)
        else:
            d_sq = xp.empty((k,), dtype=xp.float64)
            step = _block_columns(*self.c.shape)
            for start in range(0, k, step):
                stop = min(start + step, k)
                d_sq[start:stop] = self._squares(xp, None, start, stop, cols)[1]
        f, allowance = self._with_penalty(xp, penalty, x, x, 0.5 * d_sq, d_sq)
        return xp.broadcast_to(f, (k,)), xp.broadcast_to(allowance, (k,))

    def _own_columns(self, cols):
        """``cols`` (relative to this design) as columns of the whole D, or self.cols."""
        if cols is None:
            return self.cols
        cols = np.asarray(to_host(cols))
        return cols if self.cols is None else self.cols[cols]

    def _n_columns(self, cols):
        if cols is not None:
            return len(cols)
        return self.d.shape[1] if len(self.d.shape) == 2 else 1

    def _squares(self, xp, cx, start, stop, cols):
        """||C x - d||^2 (||d||^2 where ``cx`` is None: x = 0) and ||d||^2 of the columns
        start..stop, in internal units; ``cx`` = C x of those columns (float64)."""
        d = self.d
        host = isinstance(d, np.ndarray) and isinstance(cx, (np.ndarray, type(None)))
        if not host:  # sparse or device D: the float64 block (a copy either way)
            db = self.d_columns(xp, start, stop, cols)
            d_sq = xp.sum(db * db, axis=0)
            if cx is None:
                return d_sq, d_sq
            res = cx - db
            return xp.sum(res * res, axis=0), d_sq
        # a host dense D is read where it lies (a view; no float64 copy): the residual is
        # formed in D's units, C x times 2^d_exp (a power of two: exact), in place
        block = self._d_view(start, stop, cols)
        unit = 2.0 ** (-2 * self.d_exp)  # a squared norm of D in internal units
        if self.d_squares is not None:
            d_sq = self.d_squares[start:stop] if cols is None else self.d_squares[cols[start:stop]]
        else:
            d_sq = np.einsum("ij,ij->j", block, block, dtype=np.float64) * unit
        if cx is None:
            return d_sq, d_sq
        if self.d_exp:
            cx *= 2.0**self.d_exp
        np.subtract(cx, block, out=cx)
        return np.einsum("ij,ij->j", cx, cx) * unit, d_sq

    def _d_view(self, start, stop, cols):
        """Columns start..stop of a host dense D (of D[:, cols]) as they are stored."""
        d = self.d if self.d.ndim == 2 else self.d.reshape(-1, 1)
        return d[:, start:stop] if cols is None else d[:, cols[start:stop]]

    @staticmethod
    def _with_penalty(xp, penalty, x, x64, half_res_sq, d_sq):
        """F = 1/2 ||C x - d||^2 + h(x) and its rounding allowance, per column."""
        h = _penalty_value(xp, penalty, x, x64)
        eps = np.finfo(np.float64).eps
        size = xp.sqrt(d_sq) * xp.sqrt(2 * half_res_sq) + xp.sum(xp.abs(h), axis=0)
        allowance = 4 * eps * (half_res_sq + size)
        return half_res_sq + xp.sum(h, axis=0), allowance

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
