"""Threads on the CPU: the sweep's own pool, and BLAS (OpenBLAS/MKL via threadpoolctl).

One home for every thread setting the library makes, so that no module starts its own
``ThreadpoolController`` (each costs milliseconds) or changes BLAS threads behind
another's back.

The sweep runs column ranges on a pool of plain Python threads (the kernels release the
GIL), not on Numba's ``prange``: Numba's OpenMP layer spin-waits at every barrier, and on a
2-core machine shared with another busy process a spinning thread keeps the CPU that the
thread it waits for needs (measured: the README example 0.2 s on one thread, 2-14 s on two
next to a busy neighbour; ``OMP_WAIT_POLICY=passive`` 0.1 s).  Here idle threads sleep on
a queue, each pinned to its own CPU (:func:`_pool`), the caller waits, and the column
ranges are handed out one at a time (:func:`run_ranges`), so a thread that is not
scheduled delays the sweep by at most the range it holds.  Small work runs on the calling
thread alone (:func:`sweep_threads`).
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
_POOL_SIZE = 1  # threads of _POOL, one per CPU
_POOL_LOCK = threading.Lock()
_PREFIX = "msm-gpu-sweep"


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


def _pinned_worker(cpus):
    """Thread-pool initializer: the k-th worker started runs on CPU cpus[k] only."""
    lock = threading.Lock()
    taken = iter(cpus)

    def init():
        with lock:
            cpu = next(taken)
        try:
            os.sched_setaffinity(0, {cpu})  # 0: the calling thread
        except OSError:  # pragma: no cover - a CPU taken away since
            pass

    return init


def _pool():
    """The sweep's pool: one thread per CPU of the process's affinity set, each pinned to
    its CPU.

    Pinned, because unpinned workers woken by the caller were measured to share one CPU
    for stretches of many sweeps on a 2-vCPU VM (the scheduler's wake-up placement):
    a 200 x 1000 sweep took 1.05 ms or 2.0 ms at random, 1.1 ms every time pinned."""
    global _POOL, _POOL_SIZE
    with _POOL_LOCK:
        if _POOL is None:
            from concurrent.futures import ThreadPoolExecutor

            _POOL_SIZE = available_cpus()
            initializer = None
            if _POOL_SIZE > 1 and hasattr(os, "sched_setaffinity"):
                initializer = _pinned_worker(sorted(os.sched_getaffinity(0)))
            _POOL = ThreadPoolExecutor(
                _POOL_SIZE, thread_name_prefix=_PREFIX, initializer=initializer
            )
        return _POOL


def _forget_pool():  # a forked child has none of the parent's threads
    global _POOL, _POOL_LOCK
    _POOL = None
    _POOL_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def run_ranges(fn, n_items: int, n_threads: int) -> None:
    """Call ``fn(i)`` for i in range(n_items) on ``n_threads`` threads of the pool (at
    most one per CPU; the caller waits); items are handed out one at a time.  Returns
    when every call has returned; the first exception raised by a call is re-raised.
    One thread: the calls run on the caller's thread, as do the calls from a pool thread
    (a nested call must not wait for the pool it occupies)."""
    if n_threads <= 1 or n_items <= 1 or threading.current_thread().name.startswith(_PREFIX):
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

    pool = _pool()
    n_workers = min(n_threads, n_items, _POOL_SIZE)  # never two threads on one CPU
    futures = [pool.submit(drain) for _ in range(n_workers)]
    for f in futures:  # wait for every range in flight before the buffers are reused
        f.exception()
    if failed:
        raise failed[0]
