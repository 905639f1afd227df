"""How many right-hand sides one block may hold: the workspace a batch is solved in.

Columns are independent problems, so a batch larger than memory allows is solved as a
sequence of column blocks (:mod:`msm_gpu.column_blocks`).  A block's size comes from the
workspace one column costs on the road that solves it and from a budget: ``max_memory``
when the user sets it, else a share (:data:`FREE_SHARE`) of the memory the host or the
device has free: a batch whose whole workspace fits there comfortably is one block (a
split costs GEMM efficiency and per-block work, and buys nothing when memory is at
hand).  Where the free memory cannot be read, :data:`DEFAULT_WORKSPACE_BYTES` (host) or
:data:`DEFAULT_DEVICE_WORKSPACE_BYTES` (GPU).  A default split keeps blocks at least
:data:`MIN_BLOCK_COLUMNS` wide, so that each block's products stay GEMMs, not GEMVs.
"""

from __future__ import annotations

import os

from . import validation as v

#: Workspace of one block where the free memory is unknown (host): large enough that
#: per-block costs are noise (tens of thousands of columns at n = 20).
DEFAULT_WORKSPACE_BYTES = 2**30
#: The same on a GPU whose free memory cannot be read.
DEFAULT_DEVICE_WORKSPACE_BYTES = 2**30
#: Share of the free memory one block may take by default: the rest is left to the
#: answer (as large as the batch), the user's own arrays and other processes.
FREE_SHARE = 0.25
#: Narrowest block of a default split: below a few hundred columns the sweeps' and the
#: finish's products turn from GEMMs into memory-bound thin products, and per-block costs
#: (the start objective, the result) stop being noise.
MIN_BLOCK_COLUMNS = 512
#: Workspace per column, in units of n and m working words: the rescaled R, the iterate,
#: the finish's per-column arrays and its copies of x (about 11 n words measured with
#: tracemalloc on the CPU roads), and for least squares the column of D and its rescaled
#: copy (2 m words).
WORDS_PER_N = 12
WORDS_PER_M = 2
#: A batch whose whole workspace is below this is one block without asking the OS or the
#: device for free memory (a quarter of it is never this small where the solvers run):
#: small calls do not pay the query (tens of microseconds, a /proc read or a CUDA call).
SMALL_BATCH_BYTES = 16 * 2**20


def check_max_memory(max_memory):
    """``max_memory``: None or a positive number of bytes (ValueError/TypeError naming it)."""
    if max_memory is None:
        return None
    if isinstance(max_memory, bool):
        raise TypeError("max_memory must be a number of bytes or None, got a bool")
    return int(v.check_real(max_memory, "max_memory", low=0.0, low_open=True))


def free_host_bytes() -> int | None:
    """Memory the host can still give (Linux ``MemAvailable``), or None when unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def free_device_bytes() -> int | None:
    """Free memory of the current CUDA device plus what CuPy's pool holds unused."""
    try:
        import cupy

        free, _total = cupy.cuda.runtime.memGetInfo()
        pool = cupy.get_default_memory_pool()
        return int(free + pool.free_bytes())
    except Exception:  # no CuPy or no device: the default budget stands
        return None


def workspace_budget(max_memory, on_device: bool) -> int:
    """Bytes one block may use: ``max_memory``, else :data:`FREE_SHARE` of the free memory
    (the fixed default where it cannot be read)."""
    if max_memory is not None:
        return int(max_memory)
    free = free_device_bytes() if on_device else free_host_bytes()
    if free is None:
        return DEFAULT_DEVICE_WORKSPACE_BYTES if on_device else DEFAULT_WORKSPACE_BYTES
    return max(1, int(FREE_SHARE * free))


def column_bytes(n: int, m: int, itemsize: int) -> int:
    """Workspace of one column: n unknowns, m data rows (0 for ``solve``)."""
    word = max(int(itemsize), 8)  # float32 runs keep float64 statistics and fine copies
    return word * (WORDS_PER_N * max(int(n), 1) + WORDS_PER_M * max(int(m), 0))


def fits_without_asking(n_cols: int, per_column: int) -> bool:
    """Whether the whole batch is small enough to be one block whatever memory is free."""
    return int(n_cols) * int(per_column) <= SMALL_BATCH_BYTES


def block_columns(n_cols: int, per_column: int, budget: int, min_width: int = 1) -> int:
    """Columns per block: as many as the budget holds, at least ``min_width`` (and one),
    at most all."""
    width = max(int(min_width), 1, budget // max(int(per_column), 1))
    return int(min(int(n_cols), width))
