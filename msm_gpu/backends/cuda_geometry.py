"""Launch geometry of the CUDA panel sweep (``kernels/msm_sweep.cu``).

One pure function, :func:`launch_geometry`, decides grid, block and shared memory for a
panel of ``rows`` rows and ``n_cols`` independent columns.  The CuPy launcher
(``backends/cuda.py``) and the CPU emulator harness (``tests/cuda_emu``) both call it,
so the emulated tests exercise exactly the geometry that runs on a GPU.

Kernel mapping (one thread block per column, threads own rows):

* ``blockDim.x`` = rows rounded up to a warp (thread ``tx`` owns panel row ``tx``),
* ``blockDim.y`` = columns per block: small panels pack several columns in one block
  so a block has about ``target_threads`` threads,
* ``gridDim.x`` = ceil(n_cols / blockDim.y),
* dynamic shared memory = one z slot per row and column of the block,
  ``blockDim.y * rows * itemsize`` bytes, plus a fixed 1 KiB of static shared memory
  for the per-warp statistics.
"""

from __future__ import annotations

from dataclasses import dataclass

WARP = 32
#: Most threads in a block, hence most rows in a panel (one thread per row).
MAX_THREADS = 1024
MAX_PANEL = MAX_THREADS
#: Threads per block aimed at when several columns share a block.
DEFAULT_TARGET_THREADS = 256
#: Static shared memory of the kernel: ``double partial[4][32]``.
STATIC_SHARED_BYTES = 4 * 32 * 8
#: Dynamic shared memory a kernel may use without opting in (cudaFuncAttribute...).
DEFAULT_SHARED_LIMIT = 48 * 1024
MAX_GRID_X = 2**31 - 1

KERNEL_NAMES = {8: "msm_panel_sweep_f64", 4: "msm_panel_sweep_f32"}


@dataclass(frozen=True)
class Geometry:
    """How one panel launch of the sweep kernel is laid out.

    Attributes
    ----------
    kernel : str
        ``extern "C"`` name of the kernel for the dtype.
    grid, block : tuple of 3 ints
        CUDA grid and block dimensions.
    shared_bytes : int
        Dynamic shared memory per block (bytes).
    rows : int
        Rows in the panel (``m``).
    cols_per_block : int
        Columns (problems) handled by one block (``blockDim.y``).
    """

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    rows: int
    cols_per_block: int

    @property
    def threads_per_block(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def needs_shared_opt_in(self) -> bool:
        """True if the launch needs ``max_dynamic_shared_size_bytes`` raised."""
        return self.shared_bytes > DEFAULT_SHARED_LIMIT


def effective_panel(n: int, panel: int) -> int:
    """Rows per panel actually used on the GPU: ``panel`` clipped to [1, min(n, 1024)].

    The kernel has one thread per panel row, so a panel holds at most
    :data:`MAX_PANEL` rows; any n works because the rows are split into panels.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if panel < 1:
        raise ValueError(f"panel must be >= 1, got {panel}")
    return min(int(panel), int(n), MAX_PANEL)


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def launch_geometry(rows, n_cols, itemsize, *, target_threads=DEFAULT_TARGET_THREADS):
    """Grid, block and shared memory of one panel launch.

    Parameters
    ----------
    rows : int
        Rows in the panel, 1 <= rows <= 1024.
    n_cols : int
        Active columns (independent problems), >= 1.
    itemsize : int
        4 (float32) or 8 (float64).
    target_threads : int
        Block size aimed at when a panel has fewer rows; a multiple of 32 in [32, 1024].

    Returns
    -------
    Geometry
    """
    rows, n_cols, itemsize = int(rows), int(n_cols), int(itemsize)
    if not 1 <= rows <= MAX_PANEL:
        raise ValueError(f"rows per panel must be in [1, {MAX_PANEL}], got {rows}")
    if n_cols < 1:
        raise ValueError(f"n_cols must be >= 1, got {n_cols}")
    if itemsize not in KERNEL_NAMES:
        raise ValueError(f"itemsize must be 4 or 8 (float32/float64), got {itemsize}")
    if target_threads % WARP or not WARP <= target_threads <= MAX_THREADS:
        raise ValueError(
            f"target_threads must be a multiple of 32 in [32, 1024], got {target_threads}"
        )
    bdx = _round_up(rows, WARP)  # whole warps: the stats reduction needs it
    cols_per_block = max(1, min(n_cols, target_threads // bdx))
    grid_x = -(-n_cols // cols_per_block)
    if grid_x > MAX_GRID_X:
        raise ValueError(f"{n_cols} columns need {grid_x} blocks, more than CUDA allows")
    return Geometry(
        kernel=KERNEL_NAMES[itemsize],
        grid=(grid_x, 1, 1),
        block=(bdx, cols_per_block, 1),
        shared_bytes=cols_per_block * rows * itemsize,
        rows=rows,
        cols_per_block=cols_per_block,
    )
