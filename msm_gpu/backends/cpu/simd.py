"""SIMD vectors for Numba kernels: a register-sized vector type and its few operations.

LLVM does not keep a GEMM-style register tile (rows x columns of accumulators) in
registers when the kernel is written with arrays and loops (several times slower than
OpenBLAS: docs/development.md, "The CPU sweep's kernels").  With an explicit vector type
whose values are SSA registers, the same tile written out by hand compiles to the FMA
loop a BLAS micro-kernel has (``cpu/tiles.py``).

:class:`Vec` is one SIMD register of the array's dtype (``VEC_BYTES`` bytes: 8 float64 or
16 float32 lanes on AVX-512).  The operations are Numba intrinsics emitting single LLVM
instructions: unaligned loads/stores of ``VEC_LANES`` consecutive entries of a 2-D array
row, broadcast, fused multiply-add, + - * /, min, max, abs and lane-wise selects.
:func:`vload_wide` loads float64 lanes from a float64 or float32 array (converting
float32 entries exactly), for sums kept in float64 whatever the iterate's dtype.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, models, register_model


def _host_has_avx512() -> bool:
    """True when Numba compiles for this host and the host has AVX-512F."""
    try:
        from llvmlite import binding
        from numba.core import config

        if config.CPU_NAME not in (None, "host"):  # compiling for another CPU
            return False
        return bool(binding.get_host_cpu_features().get("avx512f", False))
    except Exception:  # pragma: no cover - no feature query on this platform
        return False


#: True where the tiled kernels pay (AVX-512: 32 vector registers hold the 8 x 2 tile).
HOST_AVX512 = _host_has_avx512()
#: Bytes of one vector: a whole AVX-512 register where there is one, else AVX2's.
VEC_BYTES = 64 if HOST_AVX512 else 32


class Vec(types.Type):
    """``VEC_BYTES`` bytes of ``dtype`` lanes, held in a register."""

    def __init__(self, dtype):
        self.dtype = dtype
        self.lanes = VEC_BYTES // (dtype.bitwidth // 8)
        super().__init__(name=f"Vec({dtype} x {self.lanes})")


@register_model(Vec)
class _VecModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        lane = dmm.lookup(fe_type.dtype).get_value_type()
        super().__init__(dmm, fe_type, ir.VectorType(lane, fe_type.lanes))


def _entry_pointer(context, builder, arrty, arr, i, j, ity, jty):
    """Pointer to ``arr[i, j]`` (no bounds check: callers keep inside the array)."""
    ary = context.make_array(arrty)(context, builder, arr)
    idx = [context.cast(builder, i, ity, types.intp), context.cast(builder, j, jty, types.intp)]
    shape = cgutils.unpack_tuple(builder, ary.shape)
    strides = cgutils.unpack_tuple(builder, ary.strides)
    return cgutils.get_item_pointer2(
        context, builder, ary.data, shape, strides, arrty.layout, idx, wraparound=False
    )


def _check_rows(arr):
    """Vectors read and write ``lanes`` neighbours in a row: C-ordered 2-D arrays only."""
    if not (isinstance(arr, types.Array) and arr.ndim == 2 and arr.layout == "C"):
        raise TypeError(f"vector loads and stores need a C-ordered 2-D array, got {arr}")


@intrinsic
def vload(typingctx, arr, i, j):
    """The vector ``arr[i, j : j + lanes]`` (C-ordered 2-D array; no bounds check)."""
    _check_rows(arr)
    vec = Vec(arr.dtype)

    def codegen(context, builder, sig, args):
        ptr = _entry_pointer(context, builder, sig.args[0], args[0], args[1], args[2], i, j)
        vptr = builder.bitcast(ptr, context.get_value_type(vec).as_pointer())
        return builder.load(vptr, align=1)

    return vec(arr, i, j), codegen


@intrinsic
def vload_wide(typingctx, arr, i, j):
    """The float64 vector of ``arr[i, j : j + VEC_BYTES // 8]`` (C-ordered 2-D float64
    or float32 array; float32 entries converted to float64, exactly; no bounds check).

    On a float64 array it is :func:`vload`; on a float32 one it reads half a float32
    vector and widens it in the load (one ``vcvtps2pd`` from memory on AVX-512)."""
    _check_rows(arr)
    if arr.dtype not in (types.float64, types.float32):
        raise TypeError(f"vload_wide reads float64 or float32 arrays, got {arr}")
    vec = Vec(types.float64)

    def codegen(context, builder, sig, args):
        ptr = _entry_pointer(context, builder, sig.args[0], args[0], args[1], args[2], i, j)
        lane = context.get_value_type(sig.args[0].dtype)
        vptr = builder.bitcast(ptr, ir.VectorType(lane, vec.lanes).as_pointer())
        loaded = builder.load(vptr, align=1)
        if sig.args[0].dtype == types.float64:
            return loaded
        return builder.fpext(loaded, context.get_value_type(vec))

    return vec(arr, i, j), codegen


@intrinsic
def vstore(typingctx, arr, i, j, v):
    """``arr[i, j : j + lanes] = v`` (C-ordered 2-D array; no bounds check)."""
    _check_rows(arr)

    def codegen(context, builder, sig, args):
        ptr = _entry_pointer(context, builder, sig.args[0], args[0], args[1], args[2], i, j)
        builder.store(args[3], builder.bitcast(ptr, args[3].type.as_pointer()), align=1)
        return context.get_dummy_value()

    return types.none(arr, i, j, v), codegen


@intrinsic
def vsplat(typingctx, like, x):
    """A vector of ``like``'s dtype (an array or a vector) with every lane ``x``."""
    vec = Vec(like.dtype)

    def codegen(context, builder, sig, args):
        lane = context.cast(builder, args[1], sig.args[1], vec.dtype)
        vty = context.get_value_type(vec)
        one = builder.insert_element(ir.Constant(vty, ir.Undefined), lane, ir.IntType(32)(0))
        mask = ir.Constant(ir.VectorType(ir.IntType(32), vec.lanes), [0] * vec.lanes)
        return builder.shuffle_vector(one, ir.Constant(vty, ir.Undefined), mask)

    return vec(like, x), codegen


@intrinsic
def vzero(typingctx, like):
    """A vector of zeros of ``like``'s dtype (an array or a vector)."""
    vec = Vec(like.dtype)

    def codegen(context, builder, sig, args):
        return ir.Constant(context.get_value_type(vec), None)

    return vec(like), codegen


def _check_vectors(*args):
    if not all(isinstance(a, Vec) for a in args) or len({a.dtype for a in args}) != 1:
        raise TypeError("vector operations take vectors of one dtype")


def _call_llvm(builder, name, args):
    """Call the LLVM vector intrinsic ``llvm.<name>.v<lanes>f<bits>`` on ``args``."""
    vty = args[0].type
    suffix = f"v{vty.count}{'f64' if vty.element == ir.DoubleType() else 'f32'}"
    fnty = ir.FunctionType(vty, [vty] * len(args))
    return builder.call(
        cgutils.get_or_insert_function(builder.module, fnty, f"llvm.{name}.{suffix}"), args
    )


@intrinsic
def vfma(typingctx, a, b, c):
    """``a * b + c``, one rounding (llvm.fma)."""
    _check_vectors(a, b, c)

    def codegen(context, builder, sig, args):
        return _call_llvm(builder, "fma", args)

    return a(a, b, c), codegen


def _binary(name):
    def typer(typingctx, a, b):
        _check_vectors(a, b)

        def codegen(context, builder, sig, args):
            return getattr(builder, name)(args[0], args[1])

        return a(a, b), codegen

    return intrinsic(typer)


vadd = _binary("fadd")
vsub = _binary("fsub")
vmul = _binary("fmul")
vdiv = _binary("fdiv")


@intrinsic
def vselect_lt(typingctx, a, b, x, y):
    """Lane-wise ``x if a < b else y`` (False where either is NaN)."""
    _check_vectors(a, b, x, y)

    def codegen(context, builder, sig, args):
        return builder.select(builder.fcmp_ordered("<", args[0], args[1]), args[2], args[3])

    return x(a, b, x, y), codegen


@intrinsic
def vselect_inside(typingctx, a, low, up, x, y):
    """Lane-wise ``x if (a >= low) & (a <= up) else y`` (``y`` where any is NaN)."""
    _check_vectors(a, low, up, x, y)

    def codegen(context, builder, sig, args):
        above = builder.fcmp_ordered(">=", args[0], args[1])
        below = builder.fcmp_ordered("<=", args[0], args[2])
        return builder.select(builder.and_(above, below), args[3], args[4])

    return x(a, low, up, x, y), codegen


def _pick(op, doc):
    """Lane-wise ``b if b <op> a else a``: Python's ``max`` (op ">") or ``min`` (op "<")."""

    def typer(typingctx, a, b):
        _check_vectors(a, b)

        def codegen(context, builder, sig, args):
            return builder.select(builder.fcmp_ordered(op, args[1], args[0]), args[1], args[0])

        return a(a, b), codegen

    typer.__doc__ = doc
    return intrinsic(typer)


vmax = _pick(">", "Lane-wise ``max(a, b)`` as Python's: ``b`` where ``b > a``, else ``a``.")
vmin = _pick("<", "Lane-wise ``min(a, b)`` as Python's: ``b`` where ``b < a``, else ``a``.")


@intrinsic
def vabs(typingctx, a):
    """Lane-wise ``abs(a)`` (llvm.fabs)."""
    _check_vectors(a)

    def codegen(context, builder, sig, args):
        return _call_llvm(builder, "fabs", args)

    return a(a), codegen
