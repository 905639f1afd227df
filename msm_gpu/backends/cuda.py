"""CUDA backend: CuPy arrays, cuBLAS panel GEMMs and the sweep kernel of kernels/msm_sweep.cu.

One MSM iteration runs panel by panel (docs/design.md).  For the panel P = [p0, p1)

    W = Y' afold[P, :]'      (one cuBLAS GEMM, all active columns at once)

then the kernel ``msm_panel_sweep_{f32,f64}`` solves the rows of P in order with the
right-looking in-panel update, one thread block per column.

Layout: the iterate, R and W are stored *column-major* as the kernel wants them, i.e. as
C-ordered arrays of shape ``(n_active, n)`` (row k = problem k).  Hence the GEMM above
is ``W = Y_t @ afold[P, :].T`` with ``Y_t`` of shape (n_active, n).

The panel loop (:class:`PanelSweepState`) is written against an array module ``xp``
(``cupy`` in production, ``numpy`` in tests) and a *launcher* callable
``launcher(geometry, args)``: the CuPy launcher calls the compiled kernel, the tests'
launcher calls the same ``.cu`` file compiled for the CPU emulator (tests/cuda_emu).

CuPy is imported lazily: importing this module never needs a GPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..arrays import to_host
from .base import N_STATS, Backend, SweepState, fold_matrix
from .cuda_geometry import DEFAULT_TARGET_THREADS, effective_panel, launch_geometry

KERNEL_FILE = "msm_sweep.cu"
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$')


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

    Package data ``msm_gpu/kernels`` in an installed wheel; the repository's top-level
    ``kernels/`` directory in a source checkout.
    """
    from importlib.resources import files

    for package, sub in (("msm_gpu.kernels", ""), ("msm_gpu", "kernels")):
        try:
            packaged = Path(str(files(package))) / sub
        except (ModuleNotFoundError, TypeError, NotADirectoryError):
            continue
        if (packaged / KERNEL_FILE).is_file():
            return packaged
    repo = Path(__file__).resolve().parents[2] / "kernels"
    if (repo / KERNEL_FILE).is_file():
        return repo
    raise FileNotFoundError(
        f"CUDA kernel sources not found: looked for {KERNEL_FILE} in package data "
        f"msm_gpu/kernels and in {repo}"
    )


def kernel_source(path: Path | None = None) -> str:
    """The kernel file with its local ``#include "..."`` files pasted in.

    ``#line`` directives keep compiler messages pointing at the original files, and
    the pasted text makes CuPy's on-disk kernel cache (keyed by the source text) see
    changes to the headers too.
    """
    path = Path(path) if path is not None else kernel_dir() / KERNEL_FILE
    return _expand(path.resolve(), seen=set())


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


_MODULES: dict = {}


def load_module(cupy):
    """Compile (once per process and device) the sweep kernels as a ``cupy.RawModule``.

    Raises
    ------
    RuntimeError
        Naming the ``.cu`` file if NVRTC rejects it (its log gives file and line).
    """
    device = cupy.cuda.runtime.getDevice()
    if device in _MODULES:
        return _MODULES[device]
    path = kernel_dir() / KERNEL_FILE
    try:
        module = cupy.RawModule(code=kernel_source(path), options=("-std=c++17",))
        module.compile()
    except Exception as exc:
        raise RuntimeError(f"compiling the CUDA kernels in {path} failed:\n{exc}") from exc
    _MODULES[device] = module
    return module


# ------------------------------------------------------------------------------------
# launching
# ------------------------------------------------------------------------------------


@dataclass
class PanelArgs:
    """Arguments of one panel launch, in the kernel's order (see msm_sweep.cu).

    Arrays are C-contiguous: ``w`` (ncols, rows), ``y`` and ``r`` (ncols, n), ``afold``
    (n, n), ``b_diag`` (n,), ``params`` (n, 4), ``stats`` (4, ncols) float64.
    """

    w: object
    y: object
    r: object
    afold: object
    b_diag: object
    params: object
    stats: object
    code: int
    n: int
    ncols: int
    p0: int
    rows: int


class CupyLauncher:
    """``launcher(geometry, args)`` that runs the compiled kernel on the current device."""

    def __init__(self, module):
        self._module = module
        self._functions = {}

    def _function(self, name):
        if name not in self._functions:
            self._functions[name] = self._module.get_function(name)
        return self._functions[name]

    def __call__(self, geometry, args: PanelArgs):
        fn = self._function(geometry.kernel)
        if (
            geometry.needs_shared_opt_in
            and fn.max_dynamic_shared_size_bytes < geometry.shared_bytes
        ):
            fn.max_dynamic_shared_size_bytes = geometry.shared_bytes
        i32 = np.int32
        fn(
            geometry.grid,
            geometry.block,
            (
                args.w,
                args.y,
                args.r,
                args.afold,
                args.b_diag,
                args.params,
                args.stats,
                i32(args.code),
                i32(args.n),
                i32(args.ncols),
                i32(args.p0),
                i32(args.rows),
            ),
            shared_mem=geometry.shared_bytes,
        )


# ------------------------------------------------------------------------------------
# the sweep state
# ------------------------------------------------------------------------------------


class PanelSweepState(SweepState):
    """MSM iterate in the kernel's layout, swept panel by panel.

    Parameters
    ----------
    xp : module
        ``cupy`` or ``numpy`` (the real modules: ``matmul(out=)`` is used).
    launcher : callable
        ``launcher(geometry, PanelArgs)`` runs one panel of the sweep kernel.
    a, r, x0 : arrays of ``xp``
        A (n, n), R and X0 (n, r).
    b_diag, c_diag : array-like (n,)
        Diagonals of B and C (``splitting.Splitting``).
    table : array-like (n, 4)
        Penalty parameters ``[lam, lb, ub, p]``; ``code`` the penalty code.
    panel : int
        Rows per panel; clipped by :func:`cuda_geometry.effective_panel` (<= 1024).
    target_threads : int
        Passed to :func:`cuda_geometry.launch_geometry`.
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
        target_threads=DEFAULT_TARGET_THREADS,
    ):
        n = a.shape[0]
        if a.shape != (n, n) or r.ndim != 2 or r.shape[0] != n or x0.shape != r.shape:
            raise ValueError(f"shapes do not match: A {a.shape}, R {r.shape}, X0 {x0.shape}")
        dtype = np.result_type(a.dtype, r.dtype)
        if dtype not in (np.float32, np.float64):
            raise TypeError(f"the CUDA sweep runs in float32 or float64, not {dtype}")
        self._xp = xp
        self._launch = launcher
        self._n = n
        self._dtype = np.dtype(dtype)
        self._code = int(code)
        self._target_threads = int(target_threads)
        self.panel = effective_panel(n, panel)
        c_dev = xp.asarray(np.asarray(to_host(c_diag), dtype=np.float64))
        self._afold = xp.ascontiguousarray(fold_matrix(a, c_dev, self.panel), dtype=dtype)
        self._b = xp.ascontiguousarray(xp.asarray(to_host(b_diag), dtype=dtype))
        self._params = xp.ascontiguousarray(xp.asarray(to_host(table), dtype=dtype))
        if self._b.shape != (n,) or self._params.shape != (n, 4):
            raise ValueError("b_diag must have shape (n,) and the penalty table (n, 4)")
        # (n_active, n) C order == n x n_active column-major (module docstring)
        self._y = xp.array(x0.T, dtype=dtype, order="C", copy=True)
        self._r = xp.array(r.T, dtype=dtype, order="C", copy=True)
        self._y_all = None  # all columns, made at the first retire (saves memory)
        self.active = np.arange(r.shape[1])
        self._w = xp.empty(max(1, r.shape[1] * self.panel), dtype=dtype)
        # panels and the transposed GEMM operand afold[P, :].T (a view, no copy)
        self._panels = [
            (p0, min(p0 + self.panel, n), self._afold[p0 : min(p0 + self.panel, n)].T)
            for p0 in range(0, n, self.panel)
        ]
        self._geometries = {}

    def _geometry(self, rows, ncols):
        key = (rows, ncols)
        if key not in self._geometries:
            self._geometries[key] = launch_geometry(
                rows, ncols, self._dtype.itemsize, target_threads=self._target_threads
            )
        return self._geometries[key]

    def sweep(self):
        """One MSM iteration on the active columns; returns stats (4, n_active) float64."""
        xp = self._xp
        k = self._y.shape[0]
        stats = xp.zeros((N_STATS, k), dtype=xp.float64)
        if k == 0:
            return stats
        for p0, p1, a_panel_t in self._panels:
            rows = p1 - p0
            w = self._w[: k * rows].reshape(k, rows)
            xp.matmul(self._y, a_panel_t, out=w)  # W = (afold[P, :] @ Y)' in our layout
            args = PanelArgs(
                w=w,
                y=self._y,
                r=self._r,
                afold=self._afold,
                b_diag=self._b,
                params=self._params,
                stats=stats,
                code=self._code,
                n=self._n,
                ncols=k,
                p0=p0,
                rows=rows,
            )
            self._launch(self._geometry(rows, k), args)
        return stats

    def retire(self, keep):
        """Stop sweeping active columns where ``keep`` is False; their values are kept."""
        keep = np.asarray(to_host(keep), dtype=bool).reshape(-1)
        if keep.shape != self.active.shape:
            raise ValueError(
                f"keep has {keep.size} entries, there are {self.active.size} active columns"
            )
        if keep.all():
            return
        xp = self._xp
        gone = np.flatnonzero(~keep)
        kept = np.flatnonzero(keep)
        if self._y_all is None:  # first retire: every column is still active
            self._y_all = self._y.copy()
        self._y_all[xp.asarray(self.active[gone])] = self._y[xp.asarray(gone)]
        self._y = xp.ascontiguousarray(self._y[xp.asarray(kept)])
        self._r = xp.ascontiguousarray(self._r[xp.asarray(kept)])
        self.active = self.active[kept]

    def current_x(self):
        """The whole iterate, a new C-ordered (n, r) array of ``xp``."""
        xp = self._xp
        if self._y_all is None:  # nothing retired yet: the active set is everything
            return xp.array(self._y.T, order="C", copy=True)  # never a view of the state
        full = self._y_all.copy()
        if self.active.size:
            full[xp.asarray(self.active)] = self._y
        return xp.ascontiguousarray(full.T)


# ------------------------------------------------------------------------------------
# the backend
# ------------------------------------------------------------------------------------


class CudaBackend(Backend):
    """MSM on an NVIDIA GPU through CuPy (cuBLAS GEMMs + the sweep kernel).

    Raises
    ------
    RuntimeError
        At construction, saying why CUDA is unusable (see :func:`cuda_unavailable_reason`).
    """

    name = "cuda"
    on_host = False

    def __init__(self, target_threads=DEFAULT_TARGET_THREADS):
        reason = cuda_unavailable_reason()
        if reason is not None:
            raise RuntimeError(f"the CUDA backend is not usable here: {reason}")
        import cupy

        self._cupy = cupy
        self._target_threads = target_threads

    @property
    def xp(self):
        from array_api_compat import array_namespace

        return array_namespace(self._cupy.empty(0))

    def asarray(self, x, dtype):
        return self._cupy.array(x, dtype=dtype, copy=True)

    def to_user(self, x, like):
        if isinstance(like, self._cupy.ndarray):
            return x
        return self._cupy.asnumpy(x)

    def start(self, a, r, x0, splitting, table, code, panel) -> PanelSweepState:
        cupy = self._cupy
        launcher = CupyLauncher(load_module(cupy))
        return PanelSweepState(
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
            target_threads=self._target_threads,
        )
