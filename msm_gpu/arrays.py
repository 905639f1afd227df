"""Array helpers shared by every module: CuPy detection, host copies, the namespace.

One home for these so that no module grows its own ``_host``/``_is_cupy`` again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: Byte alignment of the host arrays the CPU sweep reads and writes in vectors: one
#: AVX-512 register, one cache line.  NumPy aligns to 16 bytes; a 64-byte vector load
#: from there spans two cache lines, which slows the tiled sweep (docs/development.md,
#: "Input preparation").
HOST_ALIGN = 64


def aligned_empty(shape, dtype, align: int = HOST_ALIGN) -> np.ndarray:
    """An uninitialised C-ordered host array whose first entry sits at a multiple of
    ``align`` bytes (a view into a slightly larger byte buffer)."""
    dtype = np.dtype(dtype)
    shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(d) for d in shape)
    nbytes = math.prod(shape) * dtype.itemsize  # (plain ints: NumPy's prod costs us)
    raw = np.empty(nbytes + align, dtype=np.uint8)
    start = -raw.ctypes.data % align
    return raw[start : start + nbytes].view(dtype).reshape(shape)


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
