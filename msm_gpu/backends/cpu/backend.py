"""CPU backend: NumPy arrays, the Numba sweep over column ranges of the iterate in place."""

from __future__ import annotations

import os
import time

import numpy as np

from ...arrays import aligned_copy, is_cupy
from ..base import N_STATS, Backend, SweepState, check_penalty_code, fold_matrix
from . import kernels as _kernels
from . import sweep_team as _team
from . import tiles as _tiles
from .threads import run_ranges, serial_numba_blas, start_delay, sweep_threads, thread_cap

#: Most columns per range of a float64 iterate (one thread sweeps one range at a time,
#: calling 1-thread BLAS); a range's rows and its panel buffer stay in the core's cache.
#: The budgets are bytes: a float32 range may be twice as wide.
CHUNK_COLUMNS = 256
#: ... unless the rows are few: a range may hold up to CHUNK_ELEMENTS float64 entries
#: (512 KB).  Each range pays its GEMM calls and operand packing, which short rows do not
#: amortise (docs/development.md, "The CPU sweep's threads").
CHUNK_ELEMENTS = 65536
#: Environment variable: "0" turns the spinning team off (every parallel call then wakes
#: the sleeping pool threads, as :func:`threads.run_ranges` does).
SPIN_ENV = "MSM_GPU_SPIN"
#: Parallel sweeps (:meth:`CpuSweepState.sweep`) on a :class:`sweep_team.SweepTeam`, whose
#: pool threads spin between sweeps, where the CPU has the spin-wait hint; else (and for
#: the first sweep's objective and the direct objective) :func:`threads.run_ranges`.
USE_TEAM = _team.SPIN_SUPPORTED and os.environ.get(SPIN_ENV, "1").strip() != "0"
#: Ranges of more flops than this (a few ms on one thread) go to the sleeping pool even
#: where the team runs: a wake-up is small beside them, and a team thread that finished
#: its ranges would spin while the others end theirs (measured at 1000 x 4096:
#: docs/development.md).
TEAM_MAX_ITEM_FLOPS = 2e8
#: Narrowest range worth splitting for.
MIN_CHUNK_COLUMNS = 32


def max_chunk_columns(n_rows=None, itemsize=8) -> int:
    """The widest range for an iterate of ``n_rows`` rows (None: CHUNK_COLUMNS) and
    ``itemsize`` bytes per entry (float32: twice the float64 width; fewer, wider ranges
    sweep faster: docs/development.md)."""
    scale = max(1, 8 // max(int(itemsize), 1))
    if n_rows is None:
        return CHUNK_COLUMNS * scale
    return scale * max(CHUNK_COLUMNS, CHUNK_ELEMENTS // max(int(n_rows), 1))


def range_count(n_cols: int, n_threads: int, n_rows=None, itemsize=8) -> int:
    """How many column ranges a call splits into: ranges as wide as allowed (at most
    :func:`max_chunk_columns`: each range costs a packing of its panel operands in every
    GEMM, so narrow ranges are slower), in a number that is a multiple of the threads so
    that they finish together (docs/development.md, "The CPU sweep's threads").  More
    ranges than threads keep a thread that is not scheduled from holding back more than
    one range; ranges stay at least MIN_CHUNK_COLUMNS wide."""
    count = -(-n_cols // max_chunk_columns(n_rows, itemsize))
    if n_threads > 1:
        count = -(-max(count, n_threads) // n_threads) * n_threads
        count = min(count, n_cols // MIN_CHUNK_COLUMNS)
    return max(1, min(count, n_cols))


def column_ranges(n_cols: int, n_threads: int, n_rows=None, itemsize=8, align=1):
    """:func:`range_count` ranges ``(c0, c1)`` covering 0..n_cols-1, widths differing by at
    most one (no narrow last range paying a whole range's calls); with ``align`` > 1,
    every inner boundary a multiple of ``align`` (the tiled sweep's whole tiles)."""
    count = range_count(n_cols, n_threads, n_rows, itemsize)
    bounds = [i * n_cols // count for i in range(count + 1)]
    if align > 1:
        bounds = [min(n_cols, -(-b // align) * align) for b in bounds[:-1]] + [n_cols]
    return [(c0, c1) for c0, c1 in zip(bounds[:-1], bounds[1:], strict=True) if c1 > c0]


def plan(n_cols: int, flops: float, cap: int, n_rows=None, itemsize=8, align=1):
    """(column ranges, threads) for a call of ``flops`` over ``n_cols`` columns of an
    iterate with ``n_rows`` rows (None: ranges of at most CHUNK_COLUMNS) and ``itemsize``
    bytes per entry; inner boundaries multiples of ``align``."""
    threads = sweep_threads(flops, -(-n_cols // MIN_CHUNK_COLUMNS), cap)
    return column_ranges(n_cols, threads, n_rows, itemsize, align), threads


def head_start(bounds, align, per_column):
    """``bounds`` with the first range (the calling thread's: it starts on it while the
    pool threads it woke are still waking) wider by the columns a thread sweeps in the
    pool's measured start delay (``threads.start_delay()``), and the second range
    narrower by as many, in whole multiples of ``align``, at most half the second range.
    ``per_column``: a thread's measured seconds per column (None: not measured yet, no
    change).

    With equal ranges the caller finishes its range early by about that delay, then
    waits for the pool thread and is woken late (docs/development.md, "The CPU sweep's
    threads")."""
    if per_column is None or per_column <= 0 or len(bounds) < 2:
        return bounds
    (c0, c1), (d0, d1) = bounds[0], bounds[1]
    shift = int(round(start_delay() / per_column / align)) * align
    shift = min(shift, (d1 - d0) // 2 // align * align)
    if shift <= 0:
        return bounds
    return [(c0, c1 + shift), (d0 + shift, d1), *bounds[2:]]


def _iterate(x0, dtype, owned: bool) -> np.ndarray:
    """The sweep's C-ordered iterate from x0: x0 itself where it is ``owned`` (the
    caller's to give) and already C-ordered in ``dtype``, else an aligned copy."""
    if owned and isinstance(x0, np.ndarray) and x0.dtype == dtype and x0.flags.c_contiguous:
        return x0
    return aligned_copy(x0, dtype)


class CpuSweepState(SweepState):
    """The iterate as one C-ordered (n, m) array, swept in place a column range at a time.

    While every column is active, ``m = r`` and the array is the solution being built (no
    packing, no unpacking).  When columns retire, the active ones are copied into a compact
    array (and the retired ones stay in the full iterate).

    ``max_threads`` (None: :func:`threads.thread_cap`) caps the threads of a sweep.
    ``x0_owned``: x0 is the caller's to give (see :meth:`Backend.start`).  ``tiles``: sweep
    with ``tiles.sweep_tiles`` (``afold`` folded for its panels), else with the BLAS
    panels of ``kernels``.
    """

    def __init__(self, a, afold, b_diag, code, table, r, x0, panel, *, x0_owned=False, tiles=False):
        self._a = np.ascontiguousarray(a, dtype=afold.dtype)
        self._afold = afold
        self._b_diag = b_diag
        self._code = int(code)
        self._table = table
        self._panel = int(panel)
        self._tiles = bool(tiles)
        # range boundaries of a sweep: whole tiles for the tiled sweep
        self._align = _tiles.tile_columns(afold.dtype.itemsize) if self._tiles else 1
        self._r_full = np.ascontiguousarray(r, dtype=afold.dtype)  # read only
        # a handed-over x0 is swept in place when its layout allows (a fresh n x r array
        # costs page faults: at 200 x 1000 about half a GEMM); a copy is aligned for the
        # vector loads (arrays.HOST_ALIGN)
        self._x = _iterate(x0, afold.dtype, x0_owned)
        self.active = np.arange(self._x.shape[1])
        self._serial_blas = None
        self._team = None
        self._plans = {}
        self._column_time = {}  # (flops per column, align) -> a thread's seconds per column
        self.max_threads = None
        self._use(self._x, self._r_full)

    @property
    def max_threads(self):
        return self._max_threads

    @max_threads.setter
    def max_threads(self, value):
        self._max_threads = value
        self._plans.clear()
        self._column_time.clear()

    def _use(self, y, rc):
        """Sweep ``y`` (n, m) with linear term ``rc`` from now on."""
        self._close_team()  # it holds the old arrays
        self._y, self._rc = y, rc
        self._stats = np.zeros((N_STATS, y.shape[1]), dtype=np.float64)
        self._terms = np.zeros((2, y.shape[1]), dtype=np.float64)  # F, sum h (first sweep)

    def _compact(self):
        return self._y is not self._x

    def _plan(self, m, flops, align):
        """(column ranges, threads, ranges as an (k, 2) int64 array) of a call."""
        if self._serial_blas is None:
            # The kernels call SciPy's BLAS from several threads: BLAS itself must stay
            # serial, or the two thread pools fight (docs/design.md, "CPU sweep").  Kept
            # until close(): changing OpenBLAS's thread count costs milliseconds.
            self._serial_blas = serial_numba_blas().__enter__()
        key = (m, flops, align)
        if key not in self._plans:
            afold = self._afold
            cap = thread_cap(self._max_threads)
            bounds, threads = plan(m, flops, cap, afold.shape[0], afold.dtype.itemsize, align)
            self._plans[key] = bounds, threads, np.array(bounds, dtype=np.int64).reshape(-1, 2)
        return self._plans[key]

    def _run(self, fn, m, flops, align=1):
        """``fn(c0, c1)`` over ranges of the columns 0..m-1, threads chosen from the work,
        inner range boundaries multiples of ``align``."""
        bounds, threads, _ = self._plan(m, flops, align)
        if len(bounds) == 1:
            fn(*bounds[0])
            return
        # per kind of call (its flops per column), not per plan: the plan changes with
        # every retirement of columns, a column's cost does not
        kind = (flops / m, align)
        bounds = head_start(bounds, align, self._column_time.get(kind))
        started = time.perf_counter()
        run_ranges(lambda i: fn(*bounds[i]), len(bounds), threads)
        # a thread's time per column (waits included), for the next call's head start
        per_column = (time.perf_counter() - started) * threads / m
        old = self._column_time.get(kind)
        self._column_time[kind] = per_column if old is None else 0.5 * (old + per_column)

    def _sweep_on_team(self, m, flops, with_f0=False):
        """One sweep on the state's :class:`sweep_team.SweepTeam` (``with_f0``: F(X) into
        ``_terms`` too); False (nothing done) where the work is one thread's, the team is
        not used, or backing off after a slow team sweep (``sweep_team.Backoff``)."""
        if not USE_TEAM:
            return False
        bounds, threads, ranges = self._plan(m, flops, self._align)
        if threads <= 1 or len(bounds) <= 1 or flops / len(bounds) > TEAM_MAX_ITEM_FLOPS:
            return False
        backoff = _team.backoff()
        if backoff.use_pool():  # a recent team sweep was slow: the sleeping pool's turn
            self._close_team()  # its thread, still spinning, would hold the pool's job
            return False
        if self._team is None:
            self._team = _team.SweepTeam(self._team_args())
        backoff.record(self._team.sweep(ranges, threads, with_f0))
        return True

    def _team_args(self):
        """The kernels' arguments a :class:`sweep_team.SweepTeam` sweeps with (tiles,
        panel, afold, b_diag, code, params, r, y, stats, f0): fixed until :meth:`_use`."""
        return (self._tiles, self._panel, self._afold, self._b_diag, self._code) + (
            self._table,
            self._rc,
            self._y,
            self._stats,
            self._terms,
        )

    def _close_team(self):
        if self._team is not None:
            self._team.close()
            self._team = None

    def sweep(self):
        afold, b_diag, code, table = self._afold, self._b_diag, self._code, self._table
        r, y, panel, stats = self._rc, self._y, self._panel, self._stats

        if self._tiles:

            def one(c0, c1):
                _tiles.sweep_tiles(afold, b_diag, code, table, r, y, c0, c1, stats, stats, False)

        else:
            sweep = _kernels.sweep_for(code)

            def one(c0, c1):
                sweep(afold, b_diag, table, r, y, c0, c1, panel, stats, stats, False)

        n, m = y.shape
        if not self._sweep_on_team(m, 2.0 * n * n * m):
            self._run(one, m, 2.0 * n * n * m, self._align)
        return stats.copy()

    def sweep_with_objective(self):
        """F and sum h at the whole iterate from the first sweep's own products
        (``kernels.sweep_columns_with_objective``), then that sweep's statistics."""
        y = self._y
        if self._compact():
            return None
        if self._zero_and_feasible(y):  # F(0) = 0: a plain sweep
            terms = np.zeros((2, y.shape[1]), dtype=np.float64)
            return (terms[0], terms[1]), self.sweep()
        terms = self._terms
        afold, b_diag, code, table = self._afold, self._b_diag, self._code, self._table
        r, panel, stats = self._rc, self._panel, self._stats

        if self._tiles:

            def one(c0, c1):
                _tiles.sweep_tiles(afold, b_diag, code, table, r, y, c0, c1, stats, terms, True)

        else:
            sweep = _kernels.sweep_for(code)

            def one(c0, c1):
                sweep(afold, b_diag, table, r, y, c0, c1, panel, stats, terms, True)

        n, m = y.shape
        if not self._sweep_on_team(m, 2.0 * n * n * m, with_f0=True):
            self._run(one, m, 2.0 * n * n * m, self._align)
        return (terms[0].copy(), terms[1].copy()), stats.copy()

    def _zero_and_feasible(self, x):
        """x = 0 and 0 in dom h: F(x) = 0 without a product."""
        table = self._table
        zero_feasible = bool(np.all(table[:, 1] <= 0.0) and np.all(table[:, 2] >= 0.0))
        return zero_feasible and _kernels.all_zero(x)

    def objective_terms(self, x=None):
        """Per column of ``x`` (None: the whole iterate): (F, sum_j h), float64 (one GEMM
        of flops).

        F(0) = 0 is known without a product when 0 is feasible (x0 = zeros by default).
        """
        if x is None:
            x = self.current_x() if self._compact() else self._x
        x = np.ascontiguousarray(x, dtype=self._afold.dtype)
        m = x.shape[1]
        fun = np.zeros(m, dtype=np.float64)
        hsum = np.zeros(m, dtype=np.float64)
        if self._zero_and_feasible(x):
            return fun, hsum
        a, table, r = self._a, self._table, self._r_full
        objective = _kernels.objective_for(self._code)

        def one(c0, c1):
            objective(a, table, r, x, c0, c1, fun, hsum)

        n = x.shape[0]
        self._run(one, m, 2.0 * n * n * m)
        return fun, hsum

    def retire(self, keep):
        keep = np.asarray(keep, dtype=bool)
        if keep.all():
            return
        if self._compact():
            self._x[:, self.active] = self._y
        self.active = self.active[keep]
        self._use(
            np.ascontiguousarray(self._x[:, self.active]),
            np.ascontiguousarray(self._r_full[:, self.active]),
        )

    def close(self):
        self._close_team()
        if self._serial_blas is not None:
            self._serial_blas.__exit__(None, None, None)
            self._serial_blas = None

    def current_x(self):
        x = self._x.copy()
        if self._compact():
            x[:, self.active] = self._y
        return x

    def take_x(self):
        """The whole iterate without a copy; the state must not sweep afterwards."""
        if self._compact():
            self._x[:, self.active] = self._y
            self._use(self._x[:, :0], self._r_full[:, :0])
        x, self._x = self._x, None
        return x


class CpuBackend(Backend):
    """NumPy + Numba.  Always available."""

    name = "cpu"
    on_host = True

    def limit_host_blas(self):
        from .threads import serial_blas

        return serial_blas()

    @property
    def xp(self):
        from array_api_compat import numpy as xp_numpy

        return xp_numpy

    def asarray(self, x, dtype):
        if hasattr(x, "__cuda_array_interface__") and hasattr(x, "get"):
            x = x.get()
        return np.array(x, dtype=dtype, copy=True)

    def asarray_readonly(self, x, dtype):
        if hasattr(x, "__cuda_array_interface__") and hasattr(x, "get"):
            return self.asarray(x, dtype)
        arr = np.asarray(x, dtype=dtype)
        if isinstance(x, np.ndarray) and np.may_share_memory(arr, x):
            # nothing had to change: a read-only view instead of a copy (a write into it
            # raises instead of changing the user's data)
            arr = arr.view()
            arr.flags.writeable = False
        return arr

    def to_user(self, x, like):
        if is_cupy(like):  # CuPy arrays and cupyx sparse matrices
            import cupy

            return cupy.asarray(x)
        return x

    def start(self, a, r, x0, splitting, table, code, panel, *, x0_owned=False, tiles=None):
        """The sweep state; ``panel`` is the BLAS sweep's, unused where the tiled sweep
        runs (``tiles``: None chooses by ``tiles.use_tiles``; True/False force it)."""
        check_penalty_code(code)
        if tiles is None:
            tiles = _tiles.use_tiles(a.shape[0])
        if tiles:
            panel = _tiles.TILE_ROWS
        afold = np.ascontiguousarray(fold_matrix(a, splitting.c_diag, panel))
        b_diag = np.asarray(splitting.b_diag, dtype=a.dtype)
        table = np.ascontiguousarray(table, dtype=a.dtype)
        return CpuSweepState(
            a, afold, b_diag, code, table, r, x0, panel, x0_owned=x0_owned, tiles=tiles
        )
