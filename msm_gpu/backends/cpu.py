"""CPU backend: NumPy arrays, the Numba sweep over contiguous column chunks."""

from __future__ import annotations

import numpy as np

from .base import N_STATS, Backend, SweepState, check_penalty_code, fold_matrix
from .threads import serial_numba_blas

#: Columns per chunk (one Numba thread sweeps one chunk, calling 1-thread BLAS).
CHUNK_COLUMNS = 256
#: Narrowest chunk worth splitting for (below this, one chunk per column group).
MIN_CHUNK_COLUMNS = 16


def chunk_width(n_cols: int, n_threads: int) -> int:
    """Columns per chunk: at most CHUNK_COLUMNS, and enough chunks to feed every thread."""
    n_chunks = max(-(-n_cols // CHUNK_COLUMNS), 1)
    if n_chunks < n_threads:
        n_chunks = max(1, min(n_threads, n_cols // MIN_CHUNK_COLUMNS))
    return max(1, -(-n_cols // n_chunks))


def _numba_threads() -> int:
    import numba

    return numba.get_num_threads()


class CpuSweepState(SweepState):
    """Iterate stored as K contiguous (n, c) chunks of the active columns."""

    def __init__(self, afold, b_diag, code, table, r, x0, panel):
        self._afold = afold
        self._b_diag = b_diag
        self._code = int(code)
        self._table = table
        self._panel = int(panel)
        self._r_full = r
        self._x = x0.copy()  # columns are written back here when they retire
        self.active = np.arange(r.shape[1])
        self._serial_blas = None
        self._pack()

    def _pack(self):
        """(Re)build the chunks from the active columns of the current iterate."""
        n = self._x.shape[0]
        cols = self.active
        width = chunk_width(len(cols), _numba_threads())
        n_chunks = max(-(-len(cols) // width), 1)
        dtype = self._x.dtype
        self._y = np.zeros((n_chunks, n, width), dtype=dtype)
        self._rc = np.zeros((n_chunks, n, width), dtype=dtype)
        self._ncols = np.zeros(n_chunks, dtype=np.int64)
        for k in range(n_chunks):
            sel = cols[k * width : (k + 1) * width]
            self._ncols[k] = len(sel)
            self._y[k, :, : len(sel)] = self._x[:, sel]
            self._rc[k, :, : len(sel)] = self._r_full[:, sel]
        self._stats = np.zeros((n_chunks, N_STATS, width), dtype=np.float64)
        # positions of the real columns in the flattened (chunk, column) statistics
        self._real = (
            np.flatnonzero(np.arange(n_chunks * width) % width < np.repeat(self._ncols, width))
            if n_chunks * width != len(cols)
            else None
        )

    def _unpack_into(self, x):
        width = self._y.shape[2]
        for k in range(self._y.shape[0]):
            sel = self.active[k * width : (k + 1) * width]
            x[:, sel] = self._y[k, :, : len(sel)]

    def sweep(self):
        from .cpu_kernels import sweep_chunks_parallel, sweep_chunks_serial

        kernel = sweep_chunks_parallel if self._y.shape[0] > 1 else sweep_chunks_serial
        # Each Numba thread calls BLAS on its own chunk: BLAS itself must stay serial,
        # or the two thread pools fight (docs/design.md, "CPU sweep").  The setting is kept
        # until close(): changing OpenBLAS's thread count costs milliseconds.
        if self._serial_blas is None:
            self._serial_blas = serial_numba_blas().__enter__()
        kernel(
            self._afold,
            self._b_diag,
            self._code,
            self._table,
            self._rc,
            self._y,
            self._ncols,
            self._panel,
            self._stats,
        )
        stats = np.transpose(self._stats, (1, 0, 2)).reshape(N_STATS, -1)
        if self._real is not None:  # drop the padding of the last chunk
            return stats[:, self._real]
        return stats

    def retire(self, keep):
        keep = np.asarray(keep, dtype=bool)
        if keep.all():
            return
        self._unpack_into(self._x)
        self.active = self.active[keep]
        self._pack()

    def close(self):
        if self._serial_blas is not None:
            self._serial_blas.__exit__(None, None, None)
            self._serial_blas = None

    def current_x(self):
        x = self._x.copy()
        self._unpack_into(x)
        return x


class CpuBackend(Backend):
    """NumPy + Numba.  Always available."""

    name = "cpu"
    on_host = True

    def limit_host_blas(self):
        from .threads import blas_controller

        return blas_controller().limit(limits=1, user_api="blas")

    @property
    def xp(self):
        from array_api_compat import numpy as xp_numpy

        return xp_numpy

    def asarray(self, x, dtype):
        if hasattr(x, "__cuda_array_interface__") and hasattr(x, "get"):
            x = x.get()
        return np.array(x, dtype=dtype, copy=True)

    def to_user(self, x, like):
        if hasattr(like, "__cuda_array_interface__"):
            import cupy

            return cupy.asarray(x)
        return x

    def start(self, a, r, x0, splitting, table, code, panel):
        check_penalty_code(code)
        afold = np.ascontiguousarray(fold_matrix(a, splitting.c_diag, panel))
        b_diag = np.asarray(splitting.b_diag, dtype=a.dtype)
        table = np.ascontiguousarray(table, dtype=a.dtype)
        return CpuSweepState(afold, b_diag, code, table, r, x0, panel)
