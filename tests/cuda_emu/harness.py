"""Build and drive the CPU emulation of ``kernels/msm_sweep.cu`` (docs/design.md).

The kernel file is compiled unchanged by g++ together with ``cuda_emu.hpp`` into a shared
library (in a directory the caller chooses, never the repository), loaded with ctypes.
:class:`EmulatedKernels` is a *launcher* for ``msm_gpu.backends.cuda.PanelSweepState``:
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


def build_emulator(build_dir, kernel_file=None, name="libmsm_emu.so"):
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

    Returns
    -------
    EmulatedKernels
    """
    kernel_file = Path(kernel_file or KERNEL_DIR / "msm_sweep.cu").resolve()
    out = Path(build_dir) / name
    cmd = [
        CXX,
        *CXXFLAGS,
        "-Wall",
        "-Wextra",
        "-Wno-unused-parameter",
        f"-I{KERNEL_DIR}",
        f"-I{HERE}",
        f'-DMSM_SWEEP_SOURCE="{kernel_file}"',
        str(HERE / "emu_kernels.cpp"),
        "-o",
        str(out),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(
            f"building the CUDA emulator for {kernel_file} failed:\n{' '.join(cmd)}\n{proc.stderr}"
        )
    return EmulatedKernels(out, warnings=proc.stderr)


class EmulatedKernels:
    """ctypes view of the emulator library; call it as a launcher ``(geometry, args)``."""

    def __init__(self, path, warnings=""):
        self.path = Path(path)
        self.warnings = warnings
        self.lib = ctypes.CDLL(str(path))
        self.launches = []  # geometries launched, for tests that inspect them
        u, i = ctypes.c_uint, ctypes.c_int
        p = ctypes.c_void_p
        for name in ("msm_panel_sweep_f64", "msm_panel_sweep_f32"):
            fn = getattr(self.lib, "emu_" + name)
            fn.argtypes = [u, u, u, u, u, u, ctypes.c_size_t, p, p, p, p, p, p, p, i, i, i, i, i]
            fn.restype = i
        self.lib.emu_set_skew.argtypes = [i, u]
        self.lib.emu_set_skew.restype = None

    def set_skew(self, thread=-1, microseconds=0):
        """Make thread ``thread`` of every block sleep after each barrier (-1: off)."""
        self.lib.emu_set_skew(int(thread), int(microseconds))

    def __call__(self, geometry, args):
        dtype = np.float64 if geometry.kernel.endswith("f64") else np.float32
        n, ncols, rows = args.n, args.ncols, args.rows
        arrays = {
            "w": (args.w, dtype, (ncols, rows)),
            "y": (args.y, dtype, (ncols, n)),
            "r": (args.r, dtype, (ncols, n)),
            "afold": (args.afold, dtype, (n, n)),
            "b_diag": (args.b_diag, dtype, (n,)),
            "params": (args.params, dtype, (n, 4)),
            "stats": (args.stats, np.float64, (4, ncols)),
        }
        pointers = []
        for label, (arr, want, shape) in arrays.items():
            # the kernel indexes raw memory: layout mistakes must fail here, loudly
            if not isinstance(arr, np.ndarray) or arr.dtype != want:
                raise TypeError(f"{label}: need a NumPy {np.dtype(want)} array, got {type(arr)}")
            if arr.shape != shape or not arr.flags.c_contiguous:
                raise ValueError(f"{label}: need C-contiguous {shape}, got {arr.shape}")
            pointers.append(arr.ctypes.data)
        if not (0 <= args.p0 and args.p0 + rows <= n):
            raise ValueError(f"panel [{args.p0}, {args.p0 + rows}) outside n = {n}")
        fn = getattr(self.lib, "emu_" + geometry.kernel)
        status = fn(
            *geometry.grid,
            *geometry.block,
            geometry.shared_bytes,
            *pointers,
            int(args.code),
            n,
            ncols,
            int(args.p0),
            rows,
        )
        if status != 0:
            raise RuntimeError(
                f"emulated {geometry.kernel}: {_STATUS.get(status, status)} ({geometry})"
            )
        self.launches.append(geometry)
