"""Build and drive the CPU emulation of ``kernels/msm_sweep.cu`` (docs/design.md).

The kernel file is compiled unchanged by g++ together with ``cuda_emu.hpp`` into a shared
library (in a directory the caller chooses, never the repository), loaded with ctypes.
:class:`EmulatedKernels` is a *launcher* for ``msm_gpu.backends.cuda.backend.CudaSweepState``:
called with the same ``(geometry, PanelArgs)`` as the CuPy launcher, on NumPy arrays.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
KERNEL_DIR = REPO / "kernels"
CXX = os.environ.get("CXX", "g++")
CXXFLAGS = ("-std=c++20", "-O2", "-shared", "-fPIC", "-pthread")

_STATUS = {1: "bad launch configuration", 2: "dynamic shared memory overrun"}


def compiler_unavailable_reason() -> str | None:
    """Why the emulator cannot be built here, or None."""
    if shutil.which(CXX) is None:
        return f"C++ compiler {CXX!r} not found (set CXX)"
    return None


def compile_library(out, kernel_file, prelude_text, source_define, driver, extra_flags=()):
    """Build the shared library ``out`` from ``driver`` (a C++ file that includes the
    kernel named by ``-D<source_define>``), the prelude NVRTC gets force-included; returns
    the compiler's warnings.  RuntimeError with the command and log if it fails."""
    prelude_file = Path(str(out) + ".prelude.h")
    prelude_file.write_text(prelude_text)
    cmd = [
        CXX,
        *CXXFLAGS,
        "-Wall",
        "-Wextra",
        "-Wno-unused-parameter",
        *extra_flags,
        f"-I{KERNEL_DIR}",
        f"-I{HERE}",
        "-include",
        str(prelude_file),
        f'-D{source_define}="{kernel_file}"',
        str(driver),
        "-o",
        str(out),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(
            f"building the CUDA emulator for {kernel_file} failed:\n{' '.join(cmd)}\n{proc.stderr}"
        )
    return proc.stderr


def build_emulator(build_dir, kernel_file=None, name="libmsm_emu.so", prelude=None):
    """Compile ``kernel_file`` (default: the repository's msm_sweep.cu) for the emulator.

    Parameters
    ----------
    build_dir : path
        Where the shared library goes (a temporary/cache directory).
    kernel_file : path, optional
        A kernel source to build instead (e.g. a deliberately broken copy); its
        ``#include "prox.cuh"`` is found in the repository's kernels/ directory.
    name : str
        File name of the library.
    prelude : str, optional
        The penalty-code prelude (default: ``cuda.penalty_prelude()``, what NVRTC gets).

    Returns
    -------
    EmulatedKernels
    """
    from msm_gpu.backends.cuda.backend import penalty_prelude

    kernel_file = Path(kernel_file or KERNEL_DIR / "msm_sweep.cu").resolve()
    out = Path(build_dir) / name
    prelude_text = penalty_prelude() if prelude is None else prelude
    stderr = compile_library(
        out, kernel_file, prelude_text, "MSM_SWEEP_SOURCE", HERE / "emu_kernels.cpp"
    )
    return EmulatedKernels(out, warnings=stderr)


def _pointer(label, arr, dtype, rows, cols, row_stride):
    """Address of a NumPy array the kernel will index as rows x cols with ``row_stride``."""
    if not isinstance(arr, np.ndarray) or arr.dtype != dtype:
        raise TypeError(f"{label}: need a NumPy {np.dtype(dtype)} array, got {type(arr)}")
    item = arr.dtype.itemsize
    if arr.ndim == 1:
        ok = arr.shape[0] >= rows * cols and arr.strides[0] == item
    else:
        ok = (
            arr.ndim == 2
            and arr.shape[0] >= rows
            and arr.shape[1] >= cols
            and arr.strides == (row_stride * item, item)
        )
    if not ok:
        raise ValueError(
            f"{label}: need {rows} x {cols} with row stride {row_stride}, "
            f"got shape {arr.shape} strides {arr.strides}"
        )
    return arr.ctypes.data


class EmulatedKernels:
    """ctypes view of the emulator library; a launcher ``(geometry, args)`` with ``gemm``."""

    def __init__(self, path, warnings=""):
        self.path = Path(path)
        self.warnings = warnings
        self.lib = ctypes.CDLL(str(path))
        self.launches = []  # geometries launched, for tests that inspect them
        self.gemms = 0
        self._fns = {}
        p, i, u = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint
        ll, sz = ctypes.c_longlong, ctypes.c_size_t
        self._argtypes = {
            "fused": [u, u, sz, p, p, ll, p, i, p, p, p, ll, p, i, i, i],
            "panel": [u, u, sz, p, p, p, ll, p, i, p, p, p, ll, p, i, i, i, i, i],
        }
        for suffix in ("f64", "f32"):
            fn = getattr(self.lib, "emu_prox_" + suffix)
            fn.argtypes = [i, ctypes.c_long, p, p, p, p, p]
            fn.restype = i
        self.lib.emu_set_skew.argtypes = [i, u]
        self.lib.emu_set_skew.restype = None

    def set_skew(self, thread=-1, microseconds=0):
        """Make thread ``thread`` of every block sleep after each barrier (-1: off)."""
        self.lib.emu_set_skew(int(thread), int(microseconds))

    def gemm(self, a_rows, y, out):
        """The panel GEMM (NumPy's; cuBLAS on a GPU)."""
        np.matmul(a_rows, y, out=out)
        self.gemms += 1

    def function(self, kernel):
        if kernel not in self._fns:
            fn = getattr(self.lib, "emu_" + kernel)  # AttributeError: no such kernel
            fn.argtypes = self._argtypes[kernel.split("_")[1]]
            fn.restype = ctypes.c_int
            self._fns[kernel] = fn
        return self._fns[kernel]

    def prox(self, code, w, b, params):
        """The device prox elementwise (msm_prox<code>): returns (z, h(z))."""
        w = np.ascontiguousarray(w)
        dtype = w.dtype
        b = np.ascontiguousarray(b, dtype=dtype)
        params = np.ascontiguousarray(params, dtype=dtype)
        z, hz = np.empty_like(w), np.empty_like(w)
        fn = getattr(self.lib, "emu_prox_" + ("f64" if dtype == np.float64 else "f32"))
        ptrs = [x.ctypes.data for x in (w, b, params, z, hz)]
        if fn(int(code), w.size, *ptrs) != 0:
            raise ValueError(f"emulated msm_prox: unknown penalty code {code}")
        return z, hz

    def __call__(self, geometry, args):
        from msm_gpu.backends.cuda.backend import FusedArgs
        from msm_gpu.backends.cuda.geometry import ROW_BLOCK

        dtype = np.float64 if geometry.kernel.endswith("f64") else np.float32
        n, ld, k = args.n, args.ld, args.ncols
        np_ = -(-n // ROW_BLOCK) * ROW_BLOCK  # the kernels' padded row count
        common = [
            _pointer("y", args.y, dtype, n, ld, ld),
            _pointer("r", args.r, dtype, n, ld, ld),
            ld,
            _pointer("cols", args.cols, np.int64, 1, k, k),
            k,
            _pointer("amat", args.amat, dtype, np_, np_, np_),
            _pointer("rowtab", args.rowtab, dtype, np_, 8, 8),
            _pointer("stats", args.stats, np.float64, 4, k, args.ld_stats),
            args.ld_stats,
            _pointer("err", args.err, np.int32, 1, 1, 1),
            int(args.code),
            n,
        ]
        if not np.all((args.cols >= 0) & (args.cols < ld)):
            raise ValueError("cols: a position outside [0, ld)")
        if isinstance(args, FusedArgs):
            tail = [int(args.a_in_smem)]
        else:
            if not (0 <= args.p0 and args.p0 + args.m <= n):
                raise ValueError(f"panel [{args.p0}, {args.p0 + args.m}) outside n = {n}")
            common.insert(0, _pointer("w", args.w, dtype, args.m, ld, ld))
            tail = [int(args.p0), int(args.m), int(args.first_panel)]
        fn = self.function(geometry.kernel)
        status = fn(geometry.grid[0], geometry.block[0], geometry.shared_bytes, *common, *tail)
        if status != 0:
            raise RuntimeError(
                f"emulated {geometry.kernel}: {_STATUS.get(status, status)} ({geometry})"
            )
        self.launches.append(geometry)
