"""Thread pools on the CPU: BLAS (OpenBLAS/MKL through threadpoolctl) next to Numba's.

One home for every thread setting the library makes, so that no module starts its own
``ThreadpoolController`` (each costs milliseconds) or changes BLAS threads behind
another's back.
"""

from __future__ import annotations

_CONTROLLER = None


def blas_controller():
    """A cached ``ThreadpoolController`` (``threadpool_limits()`` costs ~ms per call)."""
    global _CONTROLLER
    if _CONTROLLER is None:
        from threadpoolctl import ThreadpoolController

        _CONTROLLER = ThreadpoolController()
    return _CONTROLLER


_NUMBA_BLAS = None


def _numba_blas_controllers():
    """threadpoolctl controllers of the BLAS that Numba's np.dot calls (SciPy's).

    Numba calls BLAS through ``scipy.linalg.cython_blas``; NumPy may ship its own
    copy.  Only SciPy's copy is made serial during a sweep, so NumPy's threaded GEMM
    (used by the user and by the driver's objective) keeps its threads.  Found once.
    """
    global _NUMBA_BLAS
    if _NUMBA_BLAS is None:
        import os

        import scipy
        import scipy.linalg.cython_blas  # noqa: F401  (loads the library)
        from threadpoolctl import ThreadpoolController

        # a fresh controller: the cached one may predate the loading of SciPy's BLAS
        blas = [c for c in ThreadpoolController().lib_controllers if c.user_api == "blas"]
        scipy_root = os.path.dirname(os.path.dirname(scipy.__file__))
        # SciPy's wheel keeps its library in site-packages/scipy.libs (NumPy's copy in
        # numpy.libs is also named libscipy_openblas*): match the folder, not the name
        own = [
            c
            for c in blas
            if os.path.relpath(c.filepath, scipy_root).split(os.sep)[0].startswith("scipy")
        ]
        _NUMBA_BLAS = own or blas
    return _NUMBA_BLAS


class serial_numba_blas:
    """Context manager: Numba's BLAS runs on one thread inside, as before outside."""

    def __enter__(self):
        self._saved = [(c, c.num_threads) for c in _numba_blas_controllers()]
        for c, threads in self._saved:
            if threads != 1:
                c.set_num_threads(1)
        return self

    def __exit__(self, *exc):
        for c, threads in self._saved:
            if threads != 1:
                c.set_num_threads(threads)
        return False
