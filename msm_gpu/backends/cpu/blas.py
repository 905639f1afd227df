"""GEMM on row-major strided views, callable from Numba.

``np.dot`` inside Numba copies a non-contiguous operand first; the CPU sweep works on
column ranges of the n x m iterate in place, so it calls ``?gemm`` directly with the row
stride as the leading dimension, through the same entry point Numba's own ``np.dot`` and
``np.linalg`` use (``numba_xxgemm``, which calls SciPy's ``cython_blas``; unlike a ctypes
pointer it keeps the kernels cacheable).  A row-major ``C = A @ B`` is the column-major
``C' = B' A'``, so the operands are passed swapped and nothing is transposed in memory.

The call itself is one intrinsic (:func:`_xxgemm`), as Numba's own ``np.dot`` emits it:
every GEMM of a kernel is inlined, and written with ``numba_xxgemm`` as a typed external
function, its scalars in a NumPy array and its pointers from ``.ctypes``, each one made
the kernel's compilation much slower (docs/first_call.md).

BLAS threads: these calls go to SciPy's OpenBLAS, which ``threads.serial_numba_blas``
keeps on one thread while the sweep's own threads run.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .jit import njit

_N, _T = ord("N"), ord("T")


@intrinsic
def _xxgemm(typingctx, trans_b, m, n, k, a, lda, b, ldb, beta, c, ldc):
    """``numba_xxgemm(kind, 'N', trans_b, m, n, k, 1, a, lda, b, ldb, beta, c, ldc)``:
    column-major ``c = a @ op(b) + beta c`` on the data of the arrays ``a``, ``b``, ``c``
    (one float dtype; the dimensions and leading dimensions as given, in elements)."""
    arrays = (a, b, c)
    if not all(isinstance(x, types.Array) for x in arrays) or len({x.dtype for x in arrays}) != 1:
        raise TypeError("_xxgemm: a, b and c must be arrays of one dtype")
    dtype = c.dtype
    if dtype not in (types.float32, types.float64):
        raise TypeError(f"_xxgemm: float32 or float64 arrays, got {dtype}")
    kind = ord("s" if dtype == types.float32 else "d")

    def codegen(context, builder, sig, args):
        from numba.np.linalg import _BLAS

        _BLAS()  # SciPy's BLAS loaded (numba_xxgemm calls it)
        char, intp, void_p = ir.IntType(8), cgutils.intp_t, cgutils.voidptr_t
        fnty = ir.FunctionType(
            ir.IntType(32),
            [char, char, char, intp, intp, intp, void_p, void_p, intp]
            + [void_p, intp, void_p, void_p, intp],
        )
        fn = cgutils.get_or_insert_function(builder.module, fnty, "numba_xxgemm")
        tb, mv, nv, kv, av, ldav, bv, ldbv, betav, cv, ldcv = args
        sty = sig.args

        def integer(value, ty):
            return context.cast(builder, value, ty, types.intp)

        def data(value, ty):
            return builder.bitcast(context.make_array(ty)(context, builder, value).data, void_p)

        one = context.get_constant(dtype, 1.0)
        alpha = cgutils.alloca_once_value(builder, one)
        beta_slot = cgutils.alloca_once_value(builder, context.cast(builder, betav, sty[8], dtype))
        builder.call(
            fn,
            (
                ir.Constant(char, kind),
                ir.Constant(char, _N),
                builder.trunc(integer(tb, sty[0]), char),
                integer(mv, sty[1]),
                integer(nv, sty[2]),
                integer(kv, sty[3]),
                builder.bitcast(alpha, void_p),
                data(av, sty[4]),
                integer(ldav, sty[5]),
                data(bv, sty[6]),
                integer(ldbv, sty[7]),
                builder.bitcast(beta_slot, void_p),
                data(cv, sty[9]),
                integer(ldcv, sty[10]),
            ),
        )
        return context.get_dummy_value()

    return types.void(trans_b, m, n, k, a, lda, b, ldb, beta, c, ldc), codegen


@njit(inline="always", nogil=True)
def _gemm(trans_b, a, b, c, beta):
    # row-major c (m x nc) = op(a) (m x k) @ b (k x nc) + beta c, where op(a) = a, or
    # a.T when trans_b = ord("T") (a stored k x m).  Column-major: c' = b' op(a)'.
    m, nc = c.shape
    k = b.shape[0]
    if m == 0 or nc == 0:
        return
    if k == 0:
        if beta == 0.0:
            for i in range(m):
                for j in range(nc):
                    c[i, j] = 0.0
        return
    item = c.itemsize
    _xxgemm(
        trans_b,
        nc,
        m,
        k,
        b,
        max(b.strides[0] // item, nc),
        a,
        max(a.strides[0] // item, a.shape[1]),
        beta,
        c,
        max(c.strides[0] // item, nc),
    )


@njit(inline="always", nogil=True)
def gemm_rm(a, b, c, beta):
    """``c = a @ b + beta * c`` for row-major views with unit column stride."""
    _gemm(_N, a, b, c, beta)


@njit(inline="always", nogil=True)
def gemm_rm_at(at, b, c, beta):
    """``c = at.T @ b + beta * c``; ``at`` is a row-major (k, m) view (unit column stride)."""
    _gemm(_T, at, b, c, beta)
