"""Atomic loads, stores and compare-and-swap on int64 array entries, and the CPU's spin-wait
hint, for compiled code that waits on another thread without the GIL
(:mod:`msm_gpu.backends.cpu.sweep_team`).

Numba has no atomics of its own; these are LLVM's, emitted through ``numba.extending``
intrinsics: ``aload`` (acquire), ``astore`` (release), ``astore_fenced`` (sequentially
consistent), ``acas`` (acquire-release) and ``aadd`` (fetch-and-add).  ``pause`` is
x86's PAUSE (``llvm.x86.sse2.pause``: Numba's JIT takes no inline assembly), so the
kernels that call it run only where :data:`SPIN_SUPPORTED`.
"""

from __future__ import annotations

import platform

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

#: x86-64: the PAUSE hint exists (elsewhere the spinning team is not used).
SPIN_SUPPORTED = platform.machine().lower() in ("x86_64", "amd64")


def _entry(context, builder, array_type, array, index):
    ary = context.make_array(array_type)(context, builder, array)
    return cgutils.get_item_pointer(context, builder, array_type, ary, [index], wraparound=False)


@intrinsic
def aload(typingctx, array, index):
    """``array[index]`` (int64), an atomic load with acquire ordering."""
    sig = types.int64(array, index)

    def codegen(context, builder, sig, args):
        ptr = _entry(context, builder, sig.args[0], args[0], args[1])
        return builder.load_atomic(ptr, "acquire", 8)

    return sig, codegen


def _store(ordering, doc):
    """An intrinsic ``array[index] = value`` (int64), an atomic store with ``ordering``."""

    @intrinsic
    def store(typingctx, array, index, value):
        sig = types.void(array, index, types.int64)

        def codegen(context, builder, sig, args):
            ptr = _entry(context, builder, sig.args[0], args[0], args[1])
            builder.store_atomic(args[2], ptr, ordering, 8)
            return context.get_dummy_value()

        return sig, codegen

    store.__doc__ = doc
    return store


#: ``array[index] = value`` with release ordering: every write before it is seen by a
#: thread whose :func:`aload` sees this one.
astore = _store("release", "atomic store, release ordering")
#: ``array[index] = value``, sequentially consistent (an exchange on x86: no later load of
#: this thread is done before it is visible).
astore_fenced = _store("seq_cst", "atomic store, sequentially consistent")


@intrinsic
def acas(typingctx, array, index, expected, new):
    """Set ``array[index] = new`` if it equals ``expected``, atomically; True if it did."""
    sig = types.boolean(array, index, types.int64, types.int64)

    def codegen(context, builder, sig, args):
        ptr = _entry(context, builder, sig.args[0], args[0], args[1])
        result = builder.cmpxchg(ptr, args[2], args[3], "acq_rel", "acquire")
        return builder.extract_value(result, 1)

    return sig, codegen


@intrinsic
def aadd(typingctx, array, index, value):
    """``array[index] += value`` atomically; returns the value before."""
    sig = types.int64(array, index, types.int64)

    def codegen(context, builder, sig, args):
        ptr = _entry(context, builder, sig.args[0], args[0], args[1])
        return builder.atomic_rmw("add", ptr, args[2], "acq_rel")

    return sig, codegen


@intrinsic
def pause(typingctx):
    """The spin-wait hint (x86 PAUSE): a waiting loop yields the core's resources."""
    sig = types.void()

    def codegen(context, builder, sig, args):
        fnty = ir.FunctionType(ir.VoidType(), [])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.x86.sse2.pause")
        builder.call(fn, [])
        return context.get_dummy_value()

    return sig, codegen
