"""Launch geometry of the CUDA sweep kernels (``kernels/msm_sweep.cu``), pure arithmetic.

Both layouts map one thread to one column (problem) and one block to a tile of ``tw``
consecutive active columns (``blockDim = (tw, 1, 1)``).  Shared memory per block:

* ``fused``  (one kernel per iteration): the tile's columns ``np x tw``, the row table
  ``8 x np`` and, if ``a_in_smem``, the matrix ``np x np`` (``np`` = n rounded up to
  :data:`ROW_BLOCK`);
* ``panel``  (cuBLAS GEMM + in-panel kernel): the panel's triangle ``mp x mp``, its row
  table ``8 x mp`` and the panel's z for the tile ``mp x tw``.

The kernels check on the device that they got at least this much shared memory.

The kernels take ``int ncols``: more than :data:`MAX_LAUNCH_COLS` active columns are
split into several launches (:func:`launches`), each with ``gridDim.x < 2**31``; column
positions and leading dimensions are 64-bit.

The CuPy launcher (``backends/cuda/backend.py``) and the emulator harness (``tests/cuda_emu``) both
use these functions; which layout runs is decided by ``model.choose_layout``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...penalties import PENALTY_CODES

WARP = 32
#: Rows solved together in registers (MSM_ROW_BLOCK in the kernel; 8 was slower:
#: docs/development.md, "The GPU layout model").
ROW_BLOCK = 4
#: Entries per row of the device row table (MSM_ROWTAB).
ROWTAB = 8
#: __launch_bounds__ of the kernels (MSM_MAX_THREADS): the widest tile.
MAX_THREADS = 256
#: Tile widths tried, widest first (whole warps).
TILE_WIDTHS = (256, 128, 64, 32)
#: Dynamic shared memory a kernel may use without opting in.
DEFAULT_SHARED_LIMIT = 48 * 1024
#: Shared memory per block the layouts are sized for: 2 blocks per SM on an H100
#: (228 KiB per SM) and below sm_80's 163 KiB per-block maximum.
DEFAULT_SMEM_BUDGET = 96 * 1024
MAX_GRID_X = 2**31 - 1
#: Most columns of one launch (the kernels' ``int ncols``).
MAX_LAUNCH_COLS = 2**31 - 1
#: The tests' sentinel for "no static shared memory": the kernels use dynamic only.
STATIC_SHARED_BYTES = 0

LAYOUTS = ("fused", "panel")
DTYPE_SUFFIX = {8: "f64", 4: "f32"}


def _round_up(value: int, multiple: int) -> int:
    return -(-int(value) // multiple) * multiple


def padded(n: int) -> int:
    """Rows of the padded device matrix and row table: n rounded up to ROW_BLOCK."""
    return _round_up(n, ROW_BLOCK)


def fused_shared_bytes(n: int, tw: int, itemsize: int, a_in_smem: bool) -> int:
    """Dynamic shared memory of one fused block (kernel's ``need``)."""
    np_ = padded(n)
    return ((np_ * np_ if a_in_smem else 0) + ROWTAB * np_ + np_ * tw) * itemsize


def panel_shared_bytes(m: int, tw: int, itemsize: int) -> int:
    """Dynamic shared memory of one panel block for a panel of m rows."""
    mp = padded(m)
    return (mp * mp + ROWTAB * mp + mp * tw) * itemsize


def max_panel_rows(itemsize: int, tw: int = 64, budget: int = DEFAULT_SMEM_BUDGET) -> int:
    """Most rows per panel (a multiple of ROW_BLOCK) whose block fits ``budget``."""
    m = ROW_BLOCK
    while panel_shared_bytes(m + ROW_BLOCK, tw, itemsize) <= budget:
        m += ROW_BLOCK
    return m


def effective_panel(n: int, panel: int, itemsize: int = 8, tw: int = 64) -> int:
    """Rows per panel on the GPU: ``panel`` clipped to [1, n] and to the shared memory."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if panel < 1:
        raise ValueError(f"panel must be >= 1, got {panel}")
    return min(int(panel), int(n), max_panel_rows(itemsize, tw))


def kernel_name(layout: str, code: int, itemsize: int) -> str:
    """``extern "C"`` name of the kernel, e.g. ``msm_fused_l1_f64``.

    Raises
    ------
    ValueError
        For an unknown layout, penalty code (``penalties.PENALTY_CODES``) or itemsize.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    names = {c: k.lower() for k, c in PENALTY_CODES.items()}
    if isinstance(code, bool) or int(code) != code or int(code) not in names:
        raise ValueError(f"unknown penalty code {code!r}: known codes are {PENALTY_CODES}")
    if itemsize not in DTYPE_SUFFIX:
        raise ValueError(f"itemsize must be 4 or 8 (float32/float64), got {itemsize}")
    return f"msm_{layout}_{names[int(code)]}_{DTYPE_SUFFIX[itemsize]}"


@dataclass(frozen=True)
class Geometry:
    """One kernel launch.

    Attributes
    ----------
    kernel : str
        ``extern "C"`` name of the kernel.
    grid, block : tuple of 3 ints
        CUDA grid and block dimensions (``block[0]`` = tile width).
    shared_bytes : int
        Dynamic shared memory per block.
    col_offset, ncols : int
        The launch covers active columns ``[col_offset, col_offset + ncols)``.
    """

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    col_offset: int
    ncols: int

    @property
    def threads_per_block(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def needs_shared_opt_in(self) -> bool:
        """True if the launch needs ``max_dynamic_shared_size_bytes`` raised."""
        return self.shared_bytes > DEFAULT_SHARED_LIMIT


def launches(kernel, ncols, tw, shared_bytes, *, max_cols=MAX_LAUNCH_COLS):
    """The launches covering ``ncols`` active columns with tiles of ``tw`` columns.

    Parameters
    ----------
    kernel : str
        Kernel name (:func:`kernel_name`).
    ncols : int
        Active columns, >= 1 (may exceed 2**31).
    tw : int
        Tile width = threads per block, a multiple of 32 in [32, MAX_THREADS].
    shared_bytes : int
        Dynamic shared memory per block.
    max_cols : int
        Most columns per launch (the kernel's 32-bit ``ncols``); a parameter for tests.

    Returns
    -------
    list of Geometry
        In column order; together they cover every column exactly once.
    """
    ncols, tw = int(ncols), int(tw)
    if ncols < 1:
        raise ValueError(f"ncols must be >= 1, got {ncols}")
    if tw % WARP or not WARP <= tw <= MAX_THREADS:
        raise ValueError(f"tile width must be a multiple of 32 in [32, {MAX_THREADS}], got {tw}")
    if not 1 <= max_cols <= MAX_LAUNCH_COLS:
        raise ValueError(f"max_cols must be in [1, {MAX_LAUNCH_COLS}], got {max_cols}")
    per_launch = max_cols // tw * tw or max_cols  # whole tiles per launch if possible
    out = []
    for offset in range(0, ncols, per_launch):
        count = min(per_launch, ncols - offset)
        grid_x = -(-count // tw)
        if grid_x > MAX_GRID_X:  # cannot happen with per_launch <= 2**31 - 1
            raise ValueError(f"{count} columns need {grid_x} blocks, more than CUDA allows")
        out.append(
            Geometry(
                kernel=kernel,
                grid=(grid_x, 1, 1),
                block=(tw, 1, 1),
                shared_bytes=int(shared_bytes),
                col_offset=offset,
                ncols=count,
            )
        )
    return out
