"""Array helpers shared by every module: CuPy detection, host copies, the namespace.

One home for these so that no module grows its own ``_host``/``_is_cupy`` again.
"""

from __future__ import annotations

import numpy as np


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
    from array_api_compat import array_namespace

    return array_namespace(*[a for a in arrays if a is not None])


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
