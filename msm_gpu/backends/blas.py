"""GEMM on row-major strided views, callable from Numba.

``np.dot`` inside Numba copies a non-contiguous operand first; the CPU sweep works on
column ranges of the n x m iterate in place, so it calls ``?gemm`` directly with the row
stride as the leading dimension, through the same entry point Numba's own ``np.dot`` and
``np.linalg`` use (``numba_xxgemm``, which calls SciPy's ``cython_blas``; unlike a ctypes
pointer it keeps the kernels cacheable).  A row-major ``C = A @ B`` is the column-major
``C' = B' A'``, so the operands are passed swapped and nothing is transposed in memory.

BLAS threads: these calls go to SciPy's OpenBLAS, which ``threads.serial_numba_blas``
keeps on one thread while the sweep's own threads run.
"""

from __future__ import annotations

import numpy as np
from numba import types
from numba.extending import overload
from numba.np.linalg import _BLAS

from .jit import njit

_N, _T = ord("N"), ord("T")


def _gemm(trans_b, a, b, c, beta):  # pragma: no cover - replaced by the overload
    raise NotImplementedError


@overload(_gemm, inline="always")
def _gemm_overload(trans_b, a, b, c, beta):
    if c.dtype == types.float64:
        kind, np_dtype = ord("d"), np.float64
    elif c.dtype == types.float32:
        kind, np_dtype = ord("s"), np.float32
    else:  # pragma: no cover
        return None
    xxgemm = _BLAS().numba_xxgemm(c.dtype)

    def impl(trans_b, a, b, c, beta):
        # row-major c (m x nc) = op(a) (m x k) @ b (k x nc) + beta c, where op(a) = a, or
        # a.T when trans_b = ord("T") (a stored k x m).  Column-major: c' = b' op(a)'.
        m, nc = c.shape
        k = b.shape[0]
        if m == 0 or nc == 0:
            return
        if k == 0:
            if beta == 0.0:
                c[:, :] = 0.0
            return
        item = c.itemsize
        scal = np.empty(2, dtype=np_dtype)
        scal[0] = 1.0
        scal[1] = beta
        xxgemm(
            kind,
            _N,
            trans_b,
            nc,
            m,
            k,
            scal[0:].ctypes,
            b.ctypes,
            max(b.strides[0] // item, nc),
            a.ctypes,
            max(a.strides[0] // item, a.shape[1]),
            scal[1:].ctypes,
            c.ctypes,
            max(c.strides[0] // item, nc),
        )

    return impl


@njit(inline="always", nogil=True)
def gemm_rm(a, b, c, beta):
    """``c = a @ b + beta * c`` for row-major views with unit column stride."""
    _gemm(_N, a, b, c, beta)


@njit(inline="always", nogil=True)
def gemm_rm_at(at, b, c, beta):
    """``c = at.T @ b + beta * c``; ``at`` is a row-major (k, m) view (unit column stride)."""
    _gemm(_T, at, b, c, beta)
