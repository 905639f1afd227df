"""CUDA backend: CuPy arrays and the sweep kernels of kernels/msm_sweep.cu.

Layout: the iterate and R stay in the user's own row-major ``(n, r)`` layout; a thread
owns one column, a block a tile of columns (``kernels/msm_sweep.cu``).  Which of the
layouts runs is decided once per state by :func:`model.choose_layout` (the same
rule ``benchmarks/gpu_model.py`` prints):

* ``fused`` / ``resident``: one kernel per iteration, each block keeps its columns in
  shared memory for the whole sweep; A in shared memory (fused) or through L1/L2;
* ``panel``: per panel P one cuBLAS GEMM ``W = afold[P, :] @ Y`` (float32 compute type
  pinned: never TF32) and the in-panel kernel.

Retiring columns copies nothing: the kernels read the active columns through an index
list.  When at most :data:`COMPACT_FRACTION` of the stored columns are still active
they are gathered into new contiguous arrays (geometric, so at most about one extra copy
of X and R per run) and the retired values are kept aside.

The sweep state (:class:`CudaSweepState`) is written against an array module ``xp``
(``cupy`` in production, ``numpy`` in tests) and a *launcher*: ``launcher(geometry,
args)`` runs one kernel launch and ``launcher.gemm(a_rows, y, out)`` the panel GEMM.  The
CuPy launcher calls the compiled kernels and cuBLAS; the tests' launcher runs the same
``.cu`` file in the CPU emulator (tests/cuda_emu).

Penalty codes come from ``penalties.PENALTY_CODES`` only: :func:`penalty_prelude`
defines them for the compiler, the host refuses unknown codes before any launch and
each kernel checks on the device that it was launched for its own code.

CuPy is imported lazily: importing this module never needs a GPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...arrays import is_cupy, to_host
from ...penalties import PENALTY_CODES
from ..base import N_STATS, Backend, SweepState, check_penalty_code, fold_matrix
from .geometry import (
    DEFAULT_SMEM_BUDGET,
    ROW_BLOCK,
    ROWTAB,
    effective_panel,
    fused_shared_bytes,
    kernel_name,
    launches,
    padded,
    panel_shared_bytes,
)
from .model import H100, candidates, choose_layout

KERNEL_FILE = "msm_sweep.cu"
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$')
#: Compact the stored columns when at most this fraction of them is still active.
COMPACT_FRACTION = 0.5
#: Sweeps between two reads of the device error flag (also read after the first sweep and
#: whenever the iterate is read).
ERROR_CHECK_EVERY = 32
#: Error bits of the kernels' device flag (MSM_ERR_* in msm_sweep.cu).
DEVICE_ERRORS = {
    1: "a kernel was launched for another penalty code than its own",
    2: "a kernel got less dynamic shared memory than its layout needs",
}


# ------------------------------------------------------------------------------------
# availability
# ------------------------------------------------------------------------------------


def cuda_unavailable_reason() -> str | None:
    """Why the CUDA backend cannot run here, or None if it can.

    Checks, in order: CuPy importable, a CUDA driver answering, at least one device.
    """
    try:
        import cupy
    except Exception as exc:  # ImportError, or a CuPy wheel built for another CUDA
        return (
            f"CuPy is not installed or failed to import ({type(exc).__name__}: {exc}); "
            "install the CuPy wheel matching your CUDA driver, e.g. "
            "`pip install cupy-cuda12x` or `pip install cupy-cuda13x`"
        )
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDARuntimeError: no driver, driver too old, ...
        return f"CuPy is installed but no usable CUDA driver was found ({exc})"
    if count < 1:
        return "CuPy is installed but no CUDA device is visible (check CUDA_VISIBLE_DEVICES)"
    return None


# ------------------------------------------------------------------------------------
# kernel sources
# ------------------------------------------------------------------------------------


def kernel_dir() -> Path:
    """Directory holding ``msm_sweep.cu`` and ``prox.cuh``.

    The ``kernels/`` directory beside this package in a source checkout (checked first:
    an editable install of another checkout must not hand out that checkout's kernels),
    else package data ``msm_gpu/kernels`` of an installed wheel.
    """
    from importlib.resources import files

    repo = Path(__file__).resolve().parents[2] / "kernels"
    if (repo / KERNEL_FILE).is_file():
        return repo
    for package, sub in (("msm_gpu.kernels", ""), ("msm_gpu", "kernels")):
        try:
            packaged = Path(str(files(package))) / sub
        except (ModuleNotFoundError, TypeError, NotADirectoryError):
            continue
        if (packaged / KERNEL_FILE).is_file():
            return packaged
    raise FileNotFoundError(
        f"CUDA kernel sources not found: looked for {KERNEL_FILE} in {repo} and in "
        "package data msm_gpu/kernels"
    )


def penalty_prelude(codes=None) -> str:
    """``#define`` lines of the penalty codes, from ``penalties.PENALTY_CODES``.

    Defines ``MSM_CODE_<NAME>`` for every entry and ``MSM_FOR_EACH_PENALTY(X)``, which
    expands to ``X(<name>, MSM_CODE_<NAME>)`` per entry (one kernel per code).  ``codes``
    replaces the dict (tests: a missing code must stop the compilation).
    """
    codes = PENALTY_CODES if codes is None else codes
    lines = ["// generated by msm_gpu.backends.cuda.backend.penalty_prelude from PENALTY_CODES"]
    lines.append(f"#define MSM_ROW_BLOCK {ROW_BLOCK}  // geometry.ROW_BLOCK")
    for key, code in codes.items():
        lines.append(f"#define MSM_CODE_{key} {int(code)}")
    each = " ".join(f"X({key.lower()}, MSM_CODE_{key})" for key in codes)
    lines.append(f"#define MSM_FOR_EACH_PENALTY(X) {each}")
    return "\n".join(lines) + "\n"


def kernel_source(path: Path | None = None, codes=None) -> str:
    """The text handed to NVRTC: :func:`penalty_prelude` + the kernel file with its local
    ``#include "..."`` files pasted in.

    ``#line`` directives keep compiler messages pointing at the original files, and
    the pasted text makes CuPy's on-disk kernel cache (keyed by the source text) see
    changes to the headers and to the codes too.
    """
    path = Path(path) if path is not None else kernel_dir() / KERNEL_FILE
    return penalty_prelude(codes) + _expand(path.resolve(), seen=set())


def _expand(path: Path, seen: set) -> str:
    if path in seen:  # headers use #pragma once; paste each file once
        return ""
    seen.add(path)
    out = [f'#line 1 "{path}"']
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        match = _INCLUDE.match(line)
        target = path.parent / match.group(1) if match else None
        if target is not None and target.is_file():
            out.append(_expand(target.resolve(), seen))
            out.append(f'#line {number + 1} "{path}"')
        elif line.strip() == "#pragma once":
            out.append("")
        else:
            out.append(line)
    return "\n".join(out) + "\n"


#: Compiled modules per (kernel file, device): each .cu is compiled once per process.
_MODULES: dict = {}


def compile_kernel_file(cupy, file_name, source=None):
    """Compile (once per process and device) ``kernels/<file_name>`` as a ``cupy.RawModule``;
    ``source(path)`` gives the text NVRTC gets (default :func:`kernel_source`).

    Raises
    ------
    RuntimeError
        Naming the ``.cu`` file if NVRTC rejects it (its log gives file and line).
    """
    key = (file_name, cupy.cuda.runtime.getDevice())
    if key in _MODULES:
        return _MODULES[key]
    path = kernel_dir() / file_name
    try:
        code = (source or kernel_source)(path)
        module = cupy.RawModule(code=code, options=("-std=c++17",))
        module.compile()
    except Exception as exc:
        raise RuntimeError(f"compiling the CUDA kernels in {path} failed:\n{exc}") from exc
    _MODULES[key] = module
    return module


def load_module(cupy):
    """The sweep kernels (``kernels/msm_sweep.cu``), compiled once per process and device."""
    return compile_kernel_file(cupy, KERNEL_FILE)


# ------------------------------------------------------------------------------------
# launching
# ------------------------------------------------------------------------------------


@dataclass
class FusedArgs:
    """Arguments of one fused launch, in the kernel's order (``MSM_FUSED_ARGS``).

    ``y``, ``r`` (n, ld) C order; ``cols`` int64 (ncols,) positions in [0, ld);
    ``amat`` (np, np); ``rowtab`` (np, 8); ``stats`` float64 view with row stride
    ``ld_stats`` and ``ncols`` columns; ``err`` int32 (1,).
    """

    y: object
    r: object
    ld: int
    cols: object
    ncols: int
    amat: object
    rowtab: object
    stats: object
    ld_stats: int
    err: object
    code: int
    n: int
    a_in_smem: int


@dataclass
class PanelArgs:
    """Arguments of one panel launch (``MSM_PANEL_ARGS``); ``w`` is (m, ld) C order."""

    w: object
    y: object
    r: object
    ld: int
    cols: object
    ncols: int
    amat: object
    rowtab: object
    stats: object
    ld_stats: int
    err: object
    code: int
    n: int
    p0: int
    m: int
    first_panel: int


# cuBLAS enums (cublas_api.h / library_types.h)
CUBLAS_OP_N = 0
CUDA_R_32F, CUDA_R_64F = 0, 1
CUBLAS_COMPUTE_32F_PEDANTIC = 69  # float32 products and sums, never TF32
CUBLAS_COMPUTE_64F_PEDANTIC = 71
CUBLAS_GEMM_DEFAULT = -1
_INT_MAX = 2**31 - 1


def gemm_call(m, n, ld, itemsize, a_ptr, y_ptr, w_ptr, alpha_ptr, beta_ptr):
    """Arguments of ``cublas.gemmEx`` (after the handle) for W = A_P @ Y, row-major.

    ``A_P`` (m, n), ``Y`` (n, ld), ``W`` (m, ld), all C order: in cuBLAS's column-major
    view that is ``W' (ld x m) = Y' (ld x n) @ A_P' (n x m)`` with no transposes.  The
    compute type is pinned to the PEDANTIC float32/float64 type: cuBLAS then never uses
    TF32, whatever ``CUPY_TF32`` or ``NVIDIA_TF32_OVERRIDE`` say (TF32 would break the
    sufficient-decrease guarantee of MSM).
    """
    if max(m, n, ld) > _INT_MAX:
        raise ValueError(f"the panel GEMM needs m, n, ld < 2**31, got {(m, n, ld)}")
    dtype = CUDA_R_32F if itemsize == 4 else CUDA_R_64F
    compute = CUBLAS_COMPUTE_32F_PEDANTIC if itemsize == 4 else CUBLAS_COMPUTE_64F_PEDANTIC
    return (
        CUBLAS_OP_N,
        CUBLAS_OP_N,
        ld,
        m,
        n,
        alpha_ptr,
        y_ptr,
        dtype,
        ld,
        a_ptr,
        dtype,
        n,
        beta_ptr,
        w_ptr,
        dtype,
        ld,
        compute,
        CUBLAS_GEMM_DEFAULT,
    )


class CublasGemm:
    """``gemm(a_rows, y, out)``: out = a_rows @ y by cuBLAS with the compute type pinned."""

    def __init__(self, cupy):
        self._cupy = cupy
        self._scalars = {
            np.dtype(t): (np.ones(1, dtype=t), np.zeros(1, dtype=t))
            for t in (np.float32, np.float64)
        }

    def __call__(self, a_rows, y, out):
        from cupy.cuda import cublas, device

        (m, n), ld = a_rows.shape, y.shape[1]
        for arr in (a_rows, y, out):
            if not arr.flags.c_contiguous:
                raise ValueError("the panel GEMM needs C-contiguous operands")
        one, zero = self._scalars[np.dtype(y.dtype)]
        args = gemm_call(
            m,
            n,
            ld,
            y.dtype.itemsize,
            a_rows.data.ptr,
            y.data.ptr,
            out.data.ptr,
            one.ctypes.data,
            zero.ctypes.data,
        )
        cublas.gemmEx(device.get_cublas_handle(), *args)


class CupyLauncher:
    """``launcher(geometry, args)`` runs a compiled kernel on the current device;
    ``launcher.gemm`` is the panel GEMM (:class:`CublasGemm` unless given)."""

    def __init__(self, module, gemm=None):
        self._module = module
        self._functions = {}
        self.gemm = gemm if gemm is not None else CublasGemm(_import_cupy())

    def _function(self, name):
        if name not in self._functions:
            self._functions[name] = self._module.get_function(name)
        return self._functions[name]

    def __call__(self, geometry, args):
        fn = self._function(geometry.kernel)
        if (
            geometry.needs_shared_opt_in
            and fn.max_dynamic_shared_size_bytes < geometry.shared_bytes
        ):
            fn.max_dynamic_shared_size_bytes = geometry.shared_bytes
        i32, i64 = np.int32, np.int64
        if isinstance(args, FusedArgs):
            values = (
                args.y,
                args.r,
                i64(args.ld),
                args.cols,
                i32(args.ncols),
                args.amat,
                args.rowtab,
                args.stats,
                i64(args.ld_stats),
                args.err,
                i32(args.code),
                i32(args.n),
                i32(args.a_in_smem),
            )
        else:
            values = (
                args.w,
                args.y,
                args.r,
                i64(args.ld),
                args.cols,
                i32(args.ncols),
                args.amat,
                args.rowtab,
                args.stats,
                i64(args.ld_stats),
                args.err,
                i32(args.code),
                i32(args.n),
                i32(args.p0),
                i32(args.m),
                i32(args.first_panel),
            )
        fn(geometry.grid, geometry.block, values, shared_mem=geometry.shared_bytes)


def _import_cupy():
    import cupy

    return cupy


# ------------------------------------------------------------------------------------
# the sweep state
# ------------------------------------------------------------------------------------


def row_table(b_diag, c_diag, table, dtype):
    """Per-row device table (np, 8): [B_jj, 1/B_jj, lam, lb, ub, p, C_jj, 0], zero padded."""
    b = np.asarray(to_host(b_diag), dtype=np.float64).reshape(-1)
    c = np.asarray(to_host(c_diag), dtype=np.float64).reshape(-1)
    params = np.asarray(to_host(table), dtype=np.float64)
    n = b.shape[0]
    if c.shape != (n,) or params.shape != (n, 4):
        raise ValueError("b_diag and c_diag must have shape (n,) and the penalty table (n, 4)")
    out = np.zeros((padded(n), ROWTAB), dtype=np.float64)
    out[:, 0] = out[:, 1] = 1.0
    out[:n, 0] = b
    out[:n, 1] = 1.0 / b
    out[:n, 2:6] = params
    out[:n, 6] = c
    return out.astype(dtype)


class CudaSweepState(SweepState):
    """MSM iterate in the user's (n, r) layout, swept by the kernels of msm_sweep.cu.

    Parameters
    ----------
    xp : module
        ``cupy`` or ``numpy``.
    launcher : callable
        ``launcher(geometry, FusedArgs | PanelArgs)``; ``launcher.gemm(a, y, out)``.
    a, r, x0 : arrays of ``xp``
        A (n, n), R and X0 (n, r); never modified.
    b_diag, c_diag : array-like (n,)
        Diagonals of B and C (``splitting.Splitting``).
    table : array-like (n, 4)
        Penalty parameters ``[lam, lb, ub, p]``; ``code`` the penalty code.
    panel : int
        Rows per panel of the panel layout (clipped by ``effective_panel``).
    layout : {"fused", "resident", "panel"}, optional
        Force a layout (tests, benchmarks); default: ``model.choose_layout``.
    tile_width : int, optional
        Force the columns per block (one of ``geometry.TILE_WIDTHS``; benchmarks).
    smem_budget : int
        Shared memory per block the layouts may use.
    device : model.Device
        Rates for the layout rule.

    Raises
    ------
    ValueError
        Unknown penalty code (before anything is launched), mismatched shapes, or a
        forced layout that does not fit.
    """

    def __init__(
        self,
        xp,
        launcher,
        a,
        r,
        x0,
        b_diag,
        c_diag,
        table,
        code,
        panel,
        *,
        layout=None,
        tile_width=None,
        smem_budget=DEFAULT_SMEM_BUDGET,
        device=H100,
    ):
        self._code = check_penalty_code(code)
        n = a.shape[0]
        if a.shape != (n, n) or r.ndim != 2 or r.shape[0] != n or x0.shape != r.shape:
            raise ValueError(f"shapes do not match: A {a.shape}, R {r.shape}, X0 {x0.shape}")
        dtype = np.dtype(np.result_type(a.dtype, r.dtype))
        if dtype not in (np.float32, np.float64):
            raise TypeError(f"the CUDA sweep runs in float32 or float64, not {dtype}")
        self._xp = xp
        self._launch = launcher
        self._n = n
        self._dtype = dtype
        ncols = r.shape[1]
        panel_rows = effective_panel(n, panel, dtype.itemsize)
        if layout is None and tile_width is None:
            self.choice = choose_layout(
                n, ncols, dtype.itemsize, self._code, panel_rows, device, smem_budget
            )
        else:
            options = [
                c
                for c in candidates(
                    n, max(ncols, 1), dtype.itemsize, self._code, panel_rows, device, smem_budget
                )
                if layout in (None, c.layout) and tile_width in (None, c.tw)
            ]
            if not options:
                raise ValueError(
                    f"layout {layout!r} with tile width {tile_width} does not fit n = {n} "
                    f"in {smem_budget} bytes"
                )
            self.choice = min(options, key=lambda c: (c.seconds, -c.tw))
        self.layout = self.choice.layout
        self.panel = self.choice.panel if self.layout == "panel" else n
        np_ = padded(n)
        self._rowtab = xp.asarray(row_table(b_diag, c_diag, table, dtype))
        c_host = np.asarray(to_host(c_diag), dtype=np.float64)
        a_host = np.asarray(to_host(a), dtype=np.float64)
        if self.layout == "panel":
            mat = fold_matrix(a_host, c_host, self.panel)
            self._afold = xp.asarray(np.ascontiguousarray(mat, dtype=dtype))
            kind = "panel"
        else:
            mat = a_host.copy()
            mat[np.diag_indices(n)] = c_host
            kind = "fused"
        amat = np.zeros((np_, np_), dtype=dtype)
        amat[:n, :n] = mat
        self._amat = xp.asarray(amat)
        self._kernel = kernel_name(kind, self._code, dtype.itemsize)
        # the iterate in the user's layout (a copy), R as given when it already fits
        self._y = xp.array(x0, dtype=dtype, order="C", copy=True)
        self._r = xp.ascontiguousarray(xp.asarray(r, dtype=dtype))
        self._r_full = self._r
        self._store = None  # all columns, kept aside at the first compaction
        self._ycols = np.arange(ncols)  # user column of each stored column
        self._pos = np.arange(ncols)  # stored position of each active column
        self._pos_dev = xp.asarray(self._pos, dtype=xp.int64)
        self.active = np.arange(ncols)
        self._err = xp.zeros(1, dtype=xp.int32)
        self._sweeps = 0
        self._w = None

    # -- sweeping ------------------------------------------------------------------------

    def sweep(self):
        """One MSM iteration on the active columns; returns stats (4, n_active) float64."""
        xp = self._xp
        k = len(self.active)
        if k == 0:
            return xp.zeros((N_STATS, 0), dtype=xp.float64)
        stats = xp.empty((N_STATS, k), dtype=xp.float64)
        if self.layout == "panel":
            self._sweep_panels(stats, k)
        else:
            self._sweep_fused(stats, k)
        # the flag costs a synchronisation: read after the first sweep (a launch error is
        # systematic), then every ERROR_CHECK_EVERY sweeps and whenever x is read
        self._sweeps += 1
        if self._sweeps == 1 or self._sweeps % ERROR_CHECK_EVERY == 0:
            self._check_device_errors()
        return stats

    def _sweep_fused(self, stats, k):
        tw, a_in_smem = self.choice.tw, self.choice.a_in_smem
        smem = fused_shared_bytes(self._n, tw, self._dtype.itemsize, a_in_smem)
        for g in launches(self._kernel, k, tw, smem):
            cut = slice(g.col_offset, g.col_offset + g.ncols)
            args = FusedArgs(
                y=self._y,
                r=self._r,
                ld=self._y.shape[1],
                cols=self._pos_dev[cut],
                ncols=g.ncols,
                amat=self._amat,
                rowtab=self._rowtab,
                stats=stats[:, g.col_offset :],
                ld_stats=k,
                err=self._err,
                code=self._code,
                n=self._n,
                a_in_smem=int(a_in_smem),
            )
            self._launch(g, args)

    def _sweep_panels(self, stats, k):
        n, ld, tw = self._n, self._y.shape[1], self.choice.tw
        if self._w is None or self._w.shape[1] != ld:
            self._w = self._xp.empty((self.panel, ld), dtype=self._dtype)
        for p0 in range(0, n, self.panel):
            m = min(self.panel, n - p0)
            w = self._w[:m]
            # W = afold[P, :] @ Y over every stored column (retired ones included until
            # the next compaction): rows before P are already new
            self._launch.gemm(self._afold[p0 : p0 + m], self._y, w)
            smem = panel_shared_bytes(m, tw, self._dtype.itemsize)
            for g in launches(self._kernel, k, tw, smem):
                cut = slice(g.col_offset, g.col_offset + g.ncols)
                args = PanelArgs(
                    w=w,
                    y=self._y,
                    r=self._r,
                    ld=ld,
                    cols=self._pos_dev[cut],
                    ncols=g.ncols,
                    amat=self._amat,
                    rowtab=self._rowtab,
                    stats=stats[:, g.col_offset :],
                    ld_stats=k,
                    err=self._err,
                    code=self._code,
                    n=n,
                    p0=p0,
                    m=m,
                    first_panel=int(p0 == 0),
                )
                self._launch(g, args)

    def _check_device_errors(self):
        flag = int(to_host(self._err)[0])
        if flag:
            self._err[...] = 0
            reasons = [text for bit, text in DEVICE_ERRORS.items() if flag & bit]
            raise RuntimeError(f"CUDA sweep failed on the device: {'; '.join(reasons)}")

    # -- retiring --------------------------------------------------------------------

    def retire(self, keep):
        """Stop sweeping active columns where ``keep`` is False; their values are kept.

        Only the index list changes, unless at most COMPACT_FRACTION of the stored
        columns remain active: then they are gathered into contiguous arrays.
        """
        keep = np.asarray(to_host(keep), dtype=bool).reshape(-1)
        if keep.shape != self.active.shape:
            raise ValueError(
                f"keep has {keep.size} entries, there are {self.active.size} active columns"
            )
        if keep.all():
            return
        self.active = self.active[keep]
        self._pos = self._pos[keep]
        if 0 < self.active.size <= COMPACT_FRACTION * self._y.shape[1]:
            self._compact()
        self._pos_dev = self._xp.asarray(self._pos, dtype=self._xp.int64)

    def _compact(self):
        xp = self._xp
        if self._store is None:  # the stored array holds every column: keep it aside
            self._store = self._y
        else:  # write every stored column back, retired ones included
            self._store[:, xp.asarray(self._ycols)] = self._y
        cols = xp.asarray(self.active)
        self._y = xp.ascontiguousarray(self._store[:, cols])
        self._r = xp.ascontiguousarray(self._r_full[:, cols])
        self._ycols = self.active.copy()
        self._pos = np.arange(self.active.size)
        self._w = None

    def current_x(self):
        """The whole iterate, a new C-ordered (n, r) array of ``xp``."""
        self._check_device_errors()
        xp = self._xp
        if self._store is None:
            return xp.array(self._y, order="C", copy=True)  # never a view of the state
        full = self._store.copy()
        full[:, xp.asarray(self._ycols)] = self._y
        return full


# ------------------------------------------------------------------------------------
# the backend
# ------------------------------------------------------------------------------------


class CudaBackend(Backend):
    """MSM on an NVIDIA GPU through CuPy (the kernels of msm_sweep.cu + cuBLAS).

    Raises
    ------
    RuntimeError
        At construction, saying why CUDA is unusable (see :func:`cuda_unavailable_reason`).
    """

    name = "cuda"
    on_host = False

    def __init__(self, smem_budget=DEFAULT_SMEM_BUDGET):
        reason = cuda_unavailable_reason()
        if reason is not None:
            raise RuntimeError(f"the CUDA backend is not usable here: {reason}")
        import cupy

        self._cupy = cupy
        self._smem_budget = smem_budget

    @property
    def xp(self):
        from array_api_compat import array_namespace

        return array_namespace(self._cupy.empty(0))

    def asarray(self, x, dtype):
        return self._cupy.array(x, dtype=dtype, copy=True)

    def to_user(self, x, like):
        if is_cupy(like):  # CuPy arrays and cupyx sparse matrices: the result stays here
            return x
        return self._cupy.asnumpy(x)

    def start(
        self,
        a,
        r,
        x0,
        splitting,
        table,
        code,
        panel,
        *,
        layout=None,
        tile_width=None,
        x0_owned=False,  # the state keeps its own layout: X0 is copied in any case
    ) -> CudaSweepState:
        check_penalty_code(code)  # before compiling or launching anything
        cupy = self._cupy
        launcher = CupyLauncher(load_module(cupy))
        return CudaSweepState(
            cupy,
            launcher,
            cupy.asarray(a),
            cupy.asarray(r),
            cupy.asarray(x0),
            splitting.b_diag,
            splitting.c_diag,
            table,
            code,
            panel,
            layout=layout,
            tile_width=tile_width,
            smem_budget=self._smem_budget,
        )
