"""The faces of a convex separable h: per row, the points and the linear pieces between.

Every convex h of the library (Zero, NonNeg, Box, L1, NonNegL1) is, per row j, linear with
slope s on each of at most three pieces between the points lb_j (if finite), 0 (l1 with
lb < 0 < ub) and ub_j (if finite).  A variable is either *fixed* at one of these points or
*free* on one piece; :class:`Faces` holds these tables for the finish and the active sets.
"""

from __future__ import annotations

import math
from functools import cached_property, lru_cache

import numpy as np

from ..penalties import CODE_BOX, CODE_L1

# -- the faces of a convex separable h --------------------------------------------------


def _times_rows(table, factor):
    """``table * factor[:, None]``, but ``table`` itself where it is one row of 0 and +-inf
    only (which any positive factor leaves as they are): alike in every row, one row."""
    # one row of at most three entries: read in Python (NumPy's calls cost more here)
    if table.shape[0] == 1 and not any(v != 0.0 and math.isfinite(v) for v in table.flat):
        return table
    return table * factor[:, None]


#: The per-state tables of :class:`Faces`, in the order of :attr:`Faces.stacked`.
TABLE_NAMES = ("lo", "hi", "value", "sigma", "left", "right")


def _row_tables(lb, ub, lam):
    """(pts (n, 4), slope (n, 3), stacked (6, n, 5), free (n, 5)) of :class:`Faces` for
    the bounds and l1 weights of n rows (1-D float64 arrays)."""
    inf = math.inf
    n = lb.shape[0]
    split = (lam > 0) & (lb < 0) & (ub > 0)
    pts = np.full((n, 4), inf)  # points 0..2, padded with +inf
    pts[:, 0] = lb
    pts[:, 1] = np.where(split, 0.0, ub)
    pts[:, 2] = np.where(split, ub, inf)
    n_pts = np.where(split, 3, 2)
    # slope of piece i (between points i and i + 1)
    one_piece = np.where(lb >= 0, lam, np.where(ub <= 0, -lam, 0.0))
    slope = np.zeros((n, 3))
    slope[:, 0] = np.where(split, -lam, one_piece)
    slope[:, 1] = np.where(split, lam, 0.0)
    # per state q = 0..4: i = q // 2; the six tables are views of one array, which the
    # host's active set takes as it is (no stacking copy: 24 MB at n = 1e5)
    stacked = np.zeros((len(TABLE_NAMES), n, 5))
    tab = dict(zip(TABLE_NAMES, stacked, strict=True))
    free = np.zeros((n, 5), dtype=bool)
    for q in range(5):
        i = q // 2
        if q % 2:  # free on piece i
            free[:, q] = True
            tab["lo"][:, q] = pts[:, i]
            tab["hi"][:, q] = pts[:, i + 1]
            tab["sigma"][:, q] = slope[:, i]
        else:  # fixed at point i; +-inf slopes where no (or an empty) piece is there
            tab["lo"][:, q] = tab["hi"][:, q] = tab["value"][:, q] = pts[:, i]
            tab["left"][:, q] = slope[:, i - 1] if i >= 1 else -inf
            has_right = (i + 1 < n_pts) & (pts[:, i + 1] > pts[:, i])
            tab["right"][:, q] = np.where(has_right, slope[:, min(i, 2)], inf)
    tab["value"][~np.isfinite(tab["value"])] = 0.0
    return pts, slope, stacked, free


@lru_cache(maxsize=64)
def _one_row_tables(lb, ub, lam):
    """:func:`_row_tables` of one row (scalar bounds and weight: every row alike), kept:
    their dozens of small NumPy calls were a tenth of a small design-form solve.  The
    caller copies them, so that a Faces' arrays are its own."""
    return _row_tables(np.array([lb]), np.array([ub]), np.array([lam]))


class Faces:
    """Per-row points and slopes of a convex piecewise-linear h (see the module docstring).

    A state q (int) is 2i for "fixed at point i" and 2i + 1 for "free on piece i" (points
    and pieces numbered from the left, at most 3 points).  Every quantity of a state is
    tabulated per row and state, (n, 5); when all rows are alike (scalar bounds) the
    tables are 1-D and a gather is one ``take``.

    Parameters
    ----------
    xp : array namespace
    penalty : Penalty
        Zero, NonNeg, Box, L1 or NonNegL1 (codes CODE_BOX and CODE_L1).
    n : int
        Rows.
    row_scale : (n,) array_like, optional
        Positive powers of two s: the faces of y = x / s, whose penalty is h_j(s_j y_j)
        (points divided by s_j, slopes times s_j).  The tables stay those of h
        (:attr:`stacked`, one row for scalar bounds) and :attr:`row_scale` carries s:
        no n x 30 table is formed for a scaled penalty that is alike in every row.
    """

    def __init__(self, xp, penalty, n, row_scale=None):
        if penalty.code not in (CODE_BOX, CODE_L1):
            raise ValueError(f"Faces needs a convex piecewise-linear penalty, got {penalty!r}")
        penalty.check_rows(n)  # a ValueError naming n
        n_rows = n
        lb, ub = (np.asarray(v, dtype=np.float64) for v in (penalty.lb, penalty.ub))
        # lam: a scalar or one per row (e.g. an unpenalised intercept)
        lam = np.asarray(penalty.lam if penalty.code == CODE_L1 else 0.0, dtype=np.float64)
        if lb.ndim == ub.ndim == lam.ndim == 0:
            # scalar bounds and weight: every row alike, the tables of one row (not n of
            # them), built once per (lb, ub, lam) and copied (small)
            n = 1
            tables = _one_row_tables(float(lb), float(ub), float(lam))
            pts, slope, stacked, free = (t.copy() for t in tables)
            lb, ub = np.array([float(lb)]), np.array([float(ub)])
        else:
            lb, ub, lam = (np.broadcast_to(v, (n,)) for v in (lb, ub, lam))
            pts, slope, stacked, free = _row_tables(lb, ub, lam)
        self.xp = xp
        unlike_slopes = False  # one row of h, rows of y whose slopes differ
        if row_scale is None:
            scale = np.ones((2, 1))
        else:
            s = np.asarray(row_scale, dtype=np.float64).reshape(n_rows)
            scale = np.empty((2, n_rows))
            np.divide(1.0, s, out=scale[0])  # exact: powers of two
            scale[1] = s
            inv = scale[0]
            if n == 1 and s.min() == s.max():
                s, inv = s[:1], inv[:1]  # every row scaled alike: one row still
            pts = _times_rows(pts[:, :3], inv)
            lb, ub = (_times_rows(v[:, None], inv)[:, 0] for v in (lb, ub))
            # the slopes' scale stays in row_scale (the kernels apply it); only whether
            # y's rows are alike is needed here (one row of three slopes: read in Python)
            if n > 1:
                slope = slope * s[:, None]
            elif s.shape[0] > 1 and any(v != 0.0 for v in slope.flat):
                unlike_slopes = True
        if n == 1:  # h alike in every row: so are y's, where one row was kept
            self.uniform = pts.shape[0] == 1 and not unlike_slopes
        else:
            self.uniform = bool(np.all(pts == pts[:1]) and np.all(slope == slope[:1]))
        rows = slice(0, 1) if self.uniform else slice(None)
        self.pts = xp.asarray(pts[rows, :3])
        self.lb = xp.asarray(lb[rows, None])
        self.ub = xp.asarray(ub[rows, None])
        #: The tables of :data:`TABLE_NAMES` of h as one (6, rows, 5) NumPy array (rows 1
        #: when every row of h is alike); with :attr:`row_scale`, those of y's penalty.
        keep_rows = scale.shape[1] > 1 or not self.uniform
        self.stacked = stacked if keep_rows else stacked[:, :1]
        #: (2, 1 or n): the point (1 / s) and slope (s) factors of each row of y.
        self.row_scale = scale
        self._free = free if keep_rows else free[:1]

    @cached_property
    def tables(self):
        """The tables of :data:`TABLE_NAMES` and "free", per row (one row when every row
        is alike) as arrays of ``xp``, the row scale applied."""
        xp, scale = self.xp, self.row_scale
        n_rows = max(self.stacked.shape[1], scale.shape[1])
        rows = slice(0, 1) if self.uniform else slice(None)
        out = {}
        for k, name in enumerate(TABLE_NAMES):
            table = self.stacked[k]
            if scale.shape[1] > 1:  # points times 1 / s, slopes times s
                table = table * scale[0 if k < 3 else 1][:, None]
            table = np.broadcast_to(table, (n_rows, 5))
            out[name] = xp.asarray(table[rows])
        out["free"] = xp.asarray(np.broadcast_to(self._free, (n_rows, 5))[rows])
        return out

    def project(self, x):
        """x clipped into dom h (the bounds): a feasible point to start from."""
        xp = self.xp
        return xp.clip(x, xp.astype(self.lb, x.dtype), xp.astype(self.ub, x.dtype))

    def states(self, x):
        """State of every entry of x: 2i = fixed at point i, 2i + 1 = free on piece i."""
        xp = self.xp
        count = xp.zeros(x.shape, dtype=xp.int64)
        equal = xp.zeros(x.shape, dtype=xp.bool)
        for i in range(3):
            p = xp.astype(self.pts[:, i : i + 1], x.dtype)
            count += xp.astype(x > p, xp.int64)
            equal |= x == p
        return 2 * count - 1 + xp.astype(equal, xp.int64)

    def get(self, name, q):
        """The tabulated quantity ``name`` of every entry's state."""
        xp = self.xp
        table = self.tables[name]
        if self.uniform:
            return xp.take(table[0], q)
        return xp.take_along_axis(table, q, axis=1)

    def decode(self, q):
        """free (bool), value (fixed value, 0 if free), sigma (slope, 0 if fixed)."""
        return self.get("free", q), self.get("value", q), self.get("sigma", q)

    def moves(self, q, x, g, eps):
        """-1 / +1 where a variable violates KKT and must move left / right, else 0."""
        xp = self.xp
        free = self.get("free", q)
        down = xp.where(free, x < self.get("lo", q), g + self.get("left", q) > eps)
        up = xp.where(free, x > self.get("hi", q), g + self.get("right", q) < -eps)
        return xp.astype(up, xp.int64) - xp.astype(down, xp.int64)

    def clip(self, q, x):
        """x with every free entry clipped into its piece and fixed entries set exactly."""
        return self.xp.clip(x, self.get("lo", q), self.get("hi", q))
