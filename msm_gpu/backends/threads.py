"""Threads on the CPU: the sweep's own pool, and BLAS (OpenBLAS/MKL via threadpoolctl).

One home for every thread setting the library makes, so that no module starts its own
``ThreadpoolController`` (each costs milliseconds) or changes BLAS threads behind
another's back.

The sweep runs column ranges on a pool of plain Python threads (the kernels release the
GIL), not on Numba's ``prange``: Numba's OpenMP layer spin-waits at every barrier, and on a
2-core machine shared with another busy process a spinning thread keeps the CPU that the
thread it waits for needs (measured: the README example 0.2 s on one thread, 2-14 s on two
next to a busy neighbour; ``OMP_WAIT_POLICY=passive`` 0.1 s).  Here idle threads sleep on
a queue, the calling thread works too, and the column ranges are handed out one at a time
(:func:`run_ranges`), so a thread that is not scheduled delays the sweep by at most the
range it holds.  Small work runs on the calling thread alone (:func:`sweep_threads`).
"""

from __future__ import annotations

import os
import threading

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


# -- the sweep's thread pool --------------------------------------------------------------

#: Floating-point operations a thread must get per sweep before a second thread is used
#: (below it, handing work to another thread costs more than it saves; see
#: benchmarks/bench_contention.py).
MIN_FLOPS_PER_THREAD = 24e6

_POOL = None
_POOL_LOCK = threading.Lock()


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def thread_cap(threads=None) -> int:
    """Most threads a sweep may use: ``threads`` if given, else the CPUs available, capped
    by the environment's ``NUMBA_NUM_THREADS`` and ``OMP_NUM_THREADS`` when they are set."""
    if threads is not None:
        return max(1, int(threads))
    cap = available_cpus()
    for name in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS"):
        value = os.environ.get(name, "").split(",")[0].strip()
        if value.isdigit() and int(value) > 0:
            cap = min(cap, int(value))
    return cap


def sweep_threads(flops: float, n_ranges: int, cap: int) -> int:
    """Threads for one parallel call: 1 for small work, never more than ranges or ``cap``."""
    by_work = int(flops // MIN_FLOPS_PER_THREAD)
    return max(1, min(cap, n_ranges, by_work))


def _pool(n_workers: int):
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL._max_workers < n_workers:
            from concurrent.futures import ThreadPoolExecutor

            old, _POOL = _POOL, ThreadPoolExecutor(n_workers, thread_name_prefix="msm-gpu")
            if old is not None:
                old.shutdown(wait=False)
        return _POOL


def _forget_pool():  # a forked child has none of the parent's threads
    global _POOL, _POOL_LOCK
    _POOL = None
    _POOL_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def run_ranges(fn, n_items: int, n_threads: int) -> None:
    """Call ``fn(i)`` for i in range(n_items) on ``n_threads`` threads (the caller's
    included); items are handed out one at a time.  Returns when every call has returned;
    the first exception raised by a call is re-raised."""
    if n_threads <= 1 or n_items <= 1:
        for i in range(n_items):
            fn(i)
        return
    items = iter(range(n_items))
    lock = threading.Lock()
    failed = []

    def drain():
        while not failed:
            with lock:
                i = next(items, None)
            if i is None:
                return
            try:
                fn(i)
            except BaseException as exc:
                failed.append(exc)
                raise

    futures = [_pool(n_threads - 1).submit(drain) for _ in range(min(n_threads, n_items) - 1)]
    try:
        drain()
    finally:
        for f in futures:  # wait for every range in flight before the buffers are reused
            f.exception()
    if failed:
        raise failed[0]
