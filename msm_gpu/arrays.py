"""Array helpers shared by every module: CuPy detection, host copies, the namespace.

One home for these so that no module grows its own ``_host``/``_is_cupy`` again.
"""

from __future__ import annotations

import math
import sys
import threading
from dataclasses import dataclass

import numpy as np

#: Byte alignment of the host arrays the CPU sweep reads and writes in vectors: one
#: AVX-512 register, one cache line.  NumPy aligns to 16 bytes; a 64-byte vector load
#: from there spans two cache lines, which slows the tiled sweep (docs/development.md,
#: "Input preparation").
HOST_ALIGN = 64


def aligned_empty(shape, dtype, align: int = HOST_ALIGN, order="C") -> np.ndarray:
    """An uninitialised C-ordered (``order="F"``: column-major) host array whose first
    entry sits at a multiple of ``align`` bytes (a view into a slightly larger byte
    buffer)."""
    dtype = np.dtype(dtype)
    shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(d) for d in shape)
    nbytes = math.prod(shape) * dtype.itemsize  # (plain ints: NumPy's prod costs us)
    return _carved(np.empty(nbytes + align, dtype=np.uint8), shape, dtype, align, order)


def _carved(raw, shape, dtype, align, order):
    """The array of ``shape`` and ``dtype`` at the first ``align``-byte boundary of the
    byte buffer ``raw`` (its base: every view keeps raw alive)."""
    start = -raw.ctypes.data % align
    flat = raw[start : start + math.prod(shape) * dtype.itemsize].view(dtype)
    return flat.reshape(shape[::-1]).T if order == "F" else flat.reshape(shape)


#: Largest scratch buffer a thread keeps between calls (:func:`retained_empty`).  Larger
#: arrays are allocated afresh: their page faults are small beside the work they serve.
RETAIN_MAX_BYTES = 32 * 2**20

_retained = threading.local()  # .raw: this thread's kept byte buffer (or absent)


def retained_empty(shape, dtype, order="C", align: int = HOST_ALIGN) -> np.ndarray:
    """An uninitialised host array like :func:`aligned_empty` (``order="F"``: its columns
    contiguous), carved from a byte buffer this thread keeps from one call to the next.

    A fresh multi-megabyte array costs a page fault per 4 KB on first touch wherever the
    allocator has given the memory back to the system in between, which any other large
    allocation and release (the user's own, a peer library's) makes it do; the kept
    buffer's pages stay mapped (docs/development.md, "Input preparation").  The buffer is
    handed out only while no array made from it is alive (its reference count, which
    every view holds through its base): a second array wanted while the first is in use,
    from a nested call or one kept by the caller, is allocated afresh, so no two live
    arrays ever share memory.  Arrays over :data:`RETAIN_MAX_BYTES` are
    always fresh; :func:`release_retained` drops the calling thread's buffer."""
    dtype = np.dtype(dtype)
    shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(d) for d in shape)
    need = math.prod(shape) * dtype.itemsize + align
    if need > RETAIN_MAX_BYTES:
        return _carved(np.empty(need, dtype=np.uint8), shape, dtype, align, order)
    # (no local name for the kept buffer before the test: it would count as a user)
    kept = hasattr(_retained, "raw")
    free = kept and _references(_retained) <= _FREE_REFERENCES
    if free and _retained.raw.size >= need:
        return _carved(_retained.raw, shape, dtype, align, order)
    fresh = np.empty(max(need, 2**16), dtype=np.uint8)
    if free or not kept:
        _retained.raw = fresh  # grown (or the first); a buffer in use stays its user's
    return _carved(fresh, shape, dtype, align, order)


def _references(holder) -> int:
    """sys.getrefcount of ``holder.raw``, taken the same way for the calibration below."""
    return sys.getrefcount(holder.raw)


def _free_references() -> int:
    """What :func:`_references` counts for a buffer nothing else holds (Python versions
    count a call's argument references differently)."""
    holder = threading.local()
    holder.raw = np.empty(1, dtype=np.uint8)
    return _references(holder)


#: :func:`_references` of a kept buffer that no array uses.
_FREE_REFERENCES = _free_references()


def release_retained() -> None:
    """Drop the calling thread's kept scratch buffer (:func:`retained_empty`): its memory
    returns to the allocator once no array made from it is alive."""
    _retained.__dict__.pop("raw", None)


def aligned_copy(x, dtype) -> np.ndarray:
    """A C-ordered copy of the host array ``x`` in ``dtype``, aligned as :func:`aligned_empty`."""
    x = np.asarray(x)
    out = aligned_empty(x.shape, dtype)
    np.copyto(out, x, casting="unsafe")
    return out


def is_cupy(x) -> bool:
    """True for a CuPy array (or any object from the ``cupy`` package, e.g. sparse)."""
    return type(x).__module__.split(".")[0] in ("cupy", "cupyx")


def to_host(x):
    """A NumPy array with the values of ``x`` (CuPy -> ``.get()``, else ``np.asarray``)."""
    if is_cupy(x):
        return x.get()
    return np.asarray(x)


def namespace(*arrays):
    """The array_api_compat namespace of the arrays (NumPy or CuPy); None entries skipped."""
    global _NUMPY_NAMESPACE
    present = [a for a in arrays if a is not None]
    if present and all(type(a) is np.ndarray for a in present):
        # the host case without array_namespace's inspection (a small NNLS call makes
        # about ten; docs/development.md, "Input preparation")
        if _NUMPY_NAMESPACE is None:
            from array_api_compat import numpy as numpy_namespace

            _NUMPY_NAMESPACE = numpy_namespace
        return _NUMPY_NAMESPACE
    from array_api_compat import array_namespace

    return array_namespace(*present)


_NUMPY_NAMESPACE = None  # array_api_compat.numpy, imported at first use


def module_of(x):
    """The plain array module (``numpy`` or ``cupy``) that owns ``x``."""
    if is_cupy(x):
        import cupy

        return cupy
    return np


def is_sparse(x) -> bool:
    """True for a SciPy sparse matrix/array or a CuPy (``cupyx.scipy.sparse``) one."""
    module = type(x).__module__
    if module.startswith("cupyx.scipy.sparse"):
        return True
    if module.startswith("scipy.sparse"):
        import scipy.sparse

        return scipy.sparse.issparse(x)
    return False


@dataclass(frozen=True)
class ArrayKind:
    """What the solver asks of an input array, found once and then read, not asked again.

    Attributes
    ----------
    xp : module
        ``numpy`` or ``cupy``: the module that owns the array (its data, when sparse).
    sparse : bool
        A SciPy or cupyx sparse matrix.
    on_device : bool
        The array lives on a GPU (CuPy).
    dtype : numpy dtype
    shape : tuple of int
    """

    xp: object
    sparse: bool
    on_device: bool
    dtype: np.dtype
    shape: tuple

    @classmethod
    def of(cls, x) -> ArrayKind:
        """The kind of the array (or sparse matrix) ``x``."""
        on_device = is_cupy(x)
        return cls(
            xp=module_of(x),
            sparse=is_sparse(x),
            on_device=on_device,
            dtype=np.dtype(x.dtype),
            shape=tuple(int(k) for k in x.shape),
        )

    @property
    def n_cols(self) -> int:
        """Columns of a 2-D array; 1 for a vector (one right-hand side)."""
        return self.shape[1] if len(self.shape) == 2 else 1
