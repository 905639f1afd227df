"""Build and drive the CPU emulation of ``kernels/nnls_small.cu`` (docs/design.md).

The kernel file is compiled unchanged by g++ with ``cuda_emu.hpp`` and ``cuda_emu_warp.hpp``
into a shared library (in a directory the caller chooses), loaded with ctypes.
:class:`EmulatedNnlsModule` has CuPy's ``RawModule.get_function`` interface, so the real
launcher ``msm_gpu.backends.cuda.nnls_small.launch`` runs it on NumPy arrays: the argument
marshalling, the geometry and the shared-memory sizes are those a GPU gets.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from .harness import HERE, KERNEL_DIR, compile_library

_STATUS = {1: "bad launch configuration", 2: "dynamic shared memory overrun"}


def build_nnls_emulator(build_dir, kernel_file=None, name="libnnls_small_emu.so"):
    """Compile ``kernel_file`` (default: the repository's nnls_small.cu) for the emulator.

    Its ``#include "prox.cuh"`` is found in the repository's kernels/ directory; the
    prelude is ``nnls_small.prelude()``, what NVRTC gets.
    """
    from msm_gpu.backends.cuda.nnls_small import prelude

    kernel_file = Path(kernel_file or KERNEL_DIR / "nnls_small.cu").resolve()
    out = Path(build_dir) / name
    stderr = compile_library(
        out,
        kernel_file,
        prelude(),
        "NNLS_SMALL_SOURCE",
        HERE / "emu_nnls_small.cpp",
        extra_flags=("-Wno-unknown-pragmas",),  # #pragma unroll
    )
    return EmulatedNnlsModule(out, warnings=stderr)


class EmulatedKernel:
    """Stands in for ``cupy.RawKernel``: checks the call CuPy would get, runs the emulator."""

    def __init__(self, module, name):
        self.module, self.name = module, name
        self.max_dynamic_shared_size_bytes = 48 * 1024
        self.fn = getattr(module.lib, "emu_" + name)  # AttributeError: no such kernel
        p, i, ll, d = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong, ctypes.c_double
        u, sz = ctypes.c_uint, ctypes.c_size_t
        self.fn.argtypes = [u, u, sz, p, i, p, ll, ll, p, ll, ll, i, p, ll, ll, p, p, ll, d, i]
        self.fn.restype = ctypes.c_int

    def __call__(self, grid, block, args, shared_mem=0):
        assert len(grid) == 3 and len(block) == 3 and grid[1:] == (1, 1) and block[1:] == (1, 1)
        assert len(args) == len(self.fn.argtypes) - 3, "argument count differs from the kernel's"
        if shared_mem > self.max_dynamic_shared_size_bytes:
            raise RuntimeError(
                f"{shared_mem} bytes of dynamic shared memory without opting in "
                f"(limit {self.max_dynamic_shared_size_bytes})"
            )
        values = []
        for arg, ctype in zip(args, self.fn.argtypes[3:], strict=True):
            if isinstance(arg, np.ndarray):
                assert ctype is ctypes.c_void_p, f"an array where the kernel takes {ctype}"
                values.append(arg.ctypes.data)
            else:
                expected = {
                    ctypes.c_int: np.int32,
                    ctypes.c_longlong: np.int64,
                    ctypes.c_double: np.float64,
                }[ctype]
                assert type(arg) is expected, f"{type(arg)} where the kernel takes {ctype}"
                values.append(arg.item())
        status = self.fn(grid[0], block[0], shared_mem, *values)
        if status != 0:
            raise RuntimeError(f"emulated {self.name}: {_STATUS.get(status, status)}")
        self.module.launches.append((self.name, grid, block, shared_mem))


class EmulatedNnlsModule:
    """ctypes view of the emulator library with ``cupy.RawModule``'s ``get_function``."""

    def __init__(self, path, warnings=""):
        self.path = Path(path)
        self.warnings = warnings
        self.lib = ctypes.CDLL(str(path))
        self.lib.emu_set_skew.argtypes = [ctypes.c_int, ctypes.c_uint]
        self.lib.emu_set_skew.restype = None
        self.launches = []

    def get_function(self, name):
        return EmulatedKernel(self, name)

    def set_skew(self, thread=-1, microseconds=0):
        """Make thread ``thread`` of every block sleep after each barrier (-1: off)."""
        self.lib.emu_set_skew(int(thread), int(microseconds))
