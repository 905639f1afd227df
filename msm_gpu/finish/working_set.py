"""One dense l1 least-squares problem whose answer is sparse, by working sets.

``mg.least_squares(C, d, mg.L1(lam))`` on a dense C of hundreds of columns, where only
tens of them carry the answer, spends most of a millisecond around a few microseconds of
sweeps: the transposing, scaled copy of all of C the design form reads, its statistics,
the sweeps' and the finish's set-up.  The answer needs none of it.  Here, as the working
set solvers of the l1 literature (Johnson & Guestrin's Blitz, celer, skglm) do, with the
exact active set in place of their inner coordinate descent:

1. the gradient of every column, g = C'(d - C x), by one product with C as it is stored;
2. the columns that break the KKT conditions at x (for x_j = 0: |g_j| > lam, or
   g_j > lam with x >= 0), scored by how far per unit of ||c_j|| (the KKT residual's
   own weighting), join the working set W: the columns W uses and the best candidates
   (the worst violators, then the columns nearest to breaking them), twice as many as W
   uses (celer's growth; columns W holds at zero leave it);
3. ``min 1/2 ||C_W x_W - d||^2 + h(x_W)`` solved exactly (Lawson & Hanson's active set
   on the equilibrated C_W'C_W, :func:`msm_gpu.solvers.pwl_active_set.pwl_active_set`,
   started from the last x_W; C_W and C_W'C_W kept and extended as W grows) and back to
   1, until the KKT residual over all columns is within the tolerance: the general
   road's answer, with the same residual and ``converged`` rule.

F falls at every round (x stays feasible for the next W, which adds a violator), so no
set comes back.  An answer that looks dense (:func:`_looks_dense`) on a tall C of at
most :data:`MAX_ALL` columns, most of them breaking the conditions, is solved with all
its columns at once (the Gram form's exact active set, from x).  A wide C (fewer than
:data:`MIN_ROWS_PER_COLUMN` rows per column), any other answer that looks dense, a set
with no room left under :data:`MAX_SET` columns, or a round with no violator left while
the residual is above the tolerance returns None: the general road takes the call,
having lost a few products with C (about a tenth of its time where the answer is
dense; benchmarks/bench_working_set.py).
"""

from __future__ import annotations

import time

import numpy as np

from .._input.scaling import equilibration
from .._input.stats import column_stats, host_float_stats
from ..penalties import L1, NonNegL1
from ..solvers.pwl_active_set import pwl_active_set
from .faces import Faces
from .small_nnls import SCALE_LIMITS, small_result

#: Most columns in the working set: beyond, the answer is dense and the general road's
#: sweeps reach it sooner than doubling Gram matrices.
MAX_SET = 256
#: Most columns (and bytes) of a C whose dense-looking answer is solved with all of them
#: at once (their copy is as large as C); at least MAX_SET.
MAX_ALL = 512
MAX_ALL_BYTES = 1 << 28
#: The first working set's size (celer's p0).
FIRST_SET = 16
#: Fewest rows of C per column: on a wide C the answer fills up to m columns and the
#: general road's design form reaches it sooner (docs/benchmarks/shapes.md).
MIN_ROWS_PER_COLUMN = 0.75
#: :func:`_looks_dense`'s share of W in use and share of the last round's violators.
SATURATED = 0.9
STILL_BREAKING = 0.9
#: Most rounds (a column that joins leaves only at zero; the sets rarely need ten).
MAX_ROUNDS = 32


def try_working_set(C, d, penalty, tol):
    """(the result of ``least_squares(C, d, penalty)`` at default options but ``tol`` (the
    default or the one given) for an L1 or NonNegL1 penalty, or None where the general
    road must take the call (see the module docstring); the column statistics of C found
    on the way, :func:`msm_gpu._input.stats.column_stats`'s, or None): the general road
    takes them and makes no second pass over C.  The user's arrays are only read."""
    if type(penalty) not in (L1, NonNegL1):
        return None, None
    lam = float(penalty.lam)
    if not SCALE_LIMITS[0] <= lam <= SCALE_LIMITS[1]:
        return None, None  # lam = 0 is least squares (a dense answer); extremes are rescaled
    started = time.perf_counter()
    c_stats, squares, d1 = _plain_stats(C, d)
    if squares is None:
        return None, c_stats
    column = d.ndim == 2  # D given as one column: x is one column too
    return _solve(C, d1, squares, penalty, tol, column, started), c_stats


def _plain_stats(C, d):
    """(column_stats(C) or None, ||c_j||^2, d as a contiguous 1-D array) where C is a NumPy
    float64 matrix in C or Fortran order and d one float64 column, both finite and of
    moderate scale; the last two None for anything else."""
    nothing = None, None, None
    if type(C) is not np.ndarray or type(d) is not np.ndarray:
        return nothing
    if C.dtype != np.float64 or d.dtype != np.float64 or C.ndim != 2 or 0 in C.shape:
        return nothing
    m, n = C.shape
    if m < MIN_ROWS_PER_COLUMN * n:
        return nothing  # a wide C: see MIN_ROWS_PER_COLUMN
    if not (d.shape == (m,) or d.shape == (m, 1)):
        return nothing
    c_stats = None
    if C.flags.c_contiguous:
        c_stats = column_stats(C)  # one compiled pass over C
        finite, top, squares = c_stats
    elif C.flags.f_contiguous:
        finite, top, _ = host_float_stats(C)
        squares = np.einsum("ij,ij->j", C, C)
    else:
        return nothing
    d = np.ascontiguousarray(d.reshape(m))
    d_finite, d_top, _ = host_float_stats(d)
    low, high = SCALE_LIMITS
    if not (finite and d_finite and low <= top <= high and low <= d_top <= high):
        return c_stats, None, None
    return c_stats, squares, d


def _solve(C, d, squares, penalty, tol, column, started):
    m, n = C.shape
    lam = float(penalty.lam)
    nonneg = type(penalty) is NonNegL1
    ctd = C.T @ d
    g = ctd.copy()  # C'(d - C x): the negative gradient, at x = 0
    x = np.zeros(n)
    usable = squares > 0.0  # an empty column never moves
    inv_norms = np.divide(1.0, np.sqrt(squares), out=np.zeros(n), where=usable)
    empty = np.flatnonzero(~usable)
    work = _WorkingSet(C, ctd, squares, min(n, MAX_ALL))
    cx = np.zeros(m)
    r_term = float(np.linalg.norm(ctd * inv_norms))  # the KKT residual's r term
    last_breaking = np.inf  # violators in the last round
    for rounds in range(1, MAX_ROUNDS + 1):
        # how far each column outside W breaks the KKT conditions at x_j = 0, per unit of
        # ||c_j||: its term of the KKT residual (W itself was solved exactly)
        excess = (g if nonneg else np.abs(g)) - lam
        excess *= inv_norms
        excess[work.columns] = -np.inf
        excess[empty] = -np.inf
        breaking = excess[excess > 0.0]
        # the residual is at least the violators' part: the exact test (a pass, with F
        # and the result) only where that part is within the tolerance
        ax_term = float(np.linalg.norm((ctd - g) * inv_norms))
        if float(np.sqrt(breaking @ breaking)) <= tol * (ax_term + r_term):
            info = {
                "representation": "gram",
                "finish": "auto",
                "finish_method": "active_set",
                "working_set": work.size,
                "working_set_rounds": rounds,
            }
            times = (started, time.perf_counter())
            result = small_result(
                C, d, x, squares, ctd, penalty, tol, column, times, info, cx=cx, ax=ctd - g
            )
            if result is not None or breaking.size == 0:
                return result  # None: the residual is W's own, the general road finishes
        used = x[work.columns] != 0.0
        n_used = int(np.count_nonzero(used))
        if work.size and _looks_dense(used, breaking.size, last_breaking):
            outside = n - empty.size - work.size
            small = n - empty.size <= MAX_ALL and C.nbytes <= MAX_ALL_BYTES
            if not (m >= n and small and breaking.size >= outside / 2):
                return None
            # a tall C whose columns fit in one set, most of them breaking the
            # conditions: all of them join (the Gram form's exact active set, from x),
            # as the general road would solve it
            work.add(np.flatnonzero(np.isfinite(excess)))
        else:
            # W: the columns in use and the best candidates, as many again as in use
            # (celer's growth) or twice as many as break the conditions (fewer filler
            # columns once few do), at most MAX_SET in all
            wanted = min(max(FIRST_SET, n_used), max(FIRST_SET, 2 * breaking.size))
            take = min(wanted, MAX_SET - n_used, n - work.size - empty.size)
            if take <= 0:
                return None  # no room left: a dense answer
            joining = np.argpartition(excess, -take)[-take:]
            work.keep(used)
            work.add(joining)
        last_breaking = breaking.size
        solved = work.solve(penalty, x[work.columns])
        if solved is None:
            return None
        x[work.columns], cx = solved
        g = C.T @ (d - cx)
    return None


def _looks_dense(used, n_breaking, last_breaking) -> bool:
    """Whether the answer looks too dense for working sets after a solve on W (the
    general road reaches such answers sooner than sets that double; rules chosen on
    random problems of every density of answer, docs/benchmarks/shapes.md):

    - slow progress: nearly as many columns breaking the KKT conditions as before W
      grew (and more than a first set), while W is (nearly) all in use or cannot take
      them all;
    - a set that cannot hold the answer: W no longer small, and the columns in use and
      those breaking the conditions more than :data:`MAX_SET`.
    """
    n_used = int(np.count_nonzero(used))
    room = MAX_SET - n_used
    saturated = n_used >= SATURATED * used.size
    slow = n_breaking >= max(FIRST_SET, STILL_BREAKING * last_breaking)
    slow = slow and (saturated or n_breaking > room)
    return slow or (used.size >= MAX_SET // 4 and n_breaking > room)


class _WorkingSet:
    """The columns W, a copy of C_W S and S C_W'C_W S, with S the Jacobi equilibration in
    powers of two (exact; as the small road's, S C'C S has a diagonal in [0.5, 2)): each
    column copied and each product formed once, as W grows."""

    def __init__(self, C, ctd, squares, limit):
        self.C, self.ctd = C, ctd
        self.scale = equilibration(squares)
        self.limit = limit  # most columns W may hold
        self.columns = np.zeros(0, dtype=np.intp)
        self.cw = np.empty((0, C.shape[0])).T  # Fortran order: columns contiguous
        self.gram = np.empty((0, 0))

    @property
    def size(self) -> int:
        return self.columns.size

    def _make_room(self, size):
        """Buffers for ``size`` columns: grown by doubling, so that memory follows W."""
        held = self.gram.shape[0]
        if size <= held:
            return
        room = min(self.limit, max(size, 2 * held, 2 * FIRST_SET))
        w = self.size
        cw, gram = np.empty((room, self.C.shape[0])).T, np.empty((room, room))
        cw[:, :w], gram[:w, :w] = self.cw[:, :w], self.gram[:w, :w]
        self.cw, self.gram = cw, gram

    def keep(self, mask):
        """W keeps the columns where ``mask`` holds, in order."""
        if mask.all():
            return
        idx = np.flatnonzero(mask)
        k = idx.size
        self.cw[:, :k] = self.cw[:, idx]
        self.gram[:k, :k] = self.gram[np.ix_(idx, idx)]
        self.columns = self.columns[idx]

    def add(self, new):
        """W gains the columns ``new``."""
        w, k = self.size, new.size
        self._make_room(w + k)
        np.multiply(self.C[:, new], self.scale[new], out=self.cw[:, w : w + k])
        cw = self.cw[:, : w + k]
        block = cw.T @ self.cw[:, w : w + k]  # C_W'C_new, the new columns' own included
        self.gram[: w + k, w : w + k] = block
        self.gram[w : w + k, :w] = block[:w].T
        self.columns = np.concatenate((self.columns, new))

    def solve(self, penalty, x0):
        """(x_W, C_W x_W) of min 1/2 ||C_W x_W - d||^2 + h(x_W), exact, from x0; None
        where the active set did not finish."""
        w, cols = self.size, self.columns
        s = self.scale[cols]
        faces = Faces(np, penalty, w, row_scale=s)  # y = x / s
        r = (-self.ctd[cols] * s)[:, None]
        y, status, _ = pwl_active_set(self.gram[:w, :w], r, faces, (x0 / s)[:, None], threads=1)
        if status[0] != 1:
            return None
        return y[:, 0] * s, self.cw[:, :w] @ y[:, 0]
