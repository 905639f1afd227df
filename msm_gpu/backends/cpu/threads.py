"""Threads on the CPU: the sweep's own pool, and BLAS (OpenBLAS/MKL via threadpoolctl).

One home for every thread setting the library makes, so that no module starts its own
``ThreadpoolController`` (each costs milliseconds) or changes BLAS threads behind
another's back.

The sweep runs column ranges on a pool of plain Python threads (the kernels release the
GIL), not on Numba's ``prange``: Numba's OpenMP layer spin-waits at every barrier, and on a
2-core machine shared with another busy process a spinning thread keeps the CPU that the
thread it waits for needs (many times slower than one thread: docs/development.md, "The
CPU sweep's threads").  Here idle threads sleep on a queue, each pinned to its own CPU
(:func:`_pool`); the caller sweeps too, and the column ranges are handed out one at a
time (:func:`run_ranges`), so a thread that is not scheduled delays the sweep by at most
the range it holds.  Small work runs on the calling thread alone (:func:`sweep_threads`).
The sweeps of a solve go to the same pool threads through
:mod:`msm_gpu.backends.cpu.sweep_team`, which keeps them spinning in compiled code,
without the GIL, for at most a few hundred microseconds between sweeps (bounded, unlike
OpenMP's barriers: no wake-up per sweep, and no CPU held once the solve ends).
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np

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


_HOST_BLAS = None


def _host_blas_controllers():
    """threadpoolctl controllers of the BLAS libraries of :func:`blas_controller` (those
    ``blas_controller().limit(user_api="blas")`` limits).  Found once."""
    global _HOST_BLAS
    if _HOST_BLAS is None:
        _HOST_BLAS = [c for c in blas_controller().lib_controllers if c.user_api == "blas"]
    return _HOST_BLAS


class _serial:
    """Context manager: the libraries of ``controllers()`` run on one thread inside, as
    before outside."""

    def __init__(self, controllers):
        self._controllers = controllers

    def __enter__(self):
        self._saved = [(c, c.num_threads) for c in self._controllers()]
        for c, threads in self._saved:
            if threads != 1:
                c.set_num_threads(1)
        return self

    def __exit__(self, *exc):
        for c, threads in self._saved:
            if threads != 1:
                c.set_num_threads(threads)
        return False


def serial_blas():
    """Context manager: the host BLAS (NumPy's) runs on one thread inside, as before
    outside: ``blas_controller().limit(limits=1, user_api="blas")`` without the limiter
    object and symbol look-ups it builds on every call (~10 us, a tenth of a small solve)."""
    return _serial(_host_blas_controllers)


def serial_numba_blas():
    """Context manager: Numba's BLAS runs on one thread inside, as before outside."""
    return _serial(_numba_blas_controllers)


# -- the sweep's thread pool --------------------------------------------------------------

#: Floating-point operations a thread must get per sweep before a second thread is used
#: (below it, handing work to another thread costs more than it saves).  The spinning
#: team (``sweep_team``) pays idle below it, but beside a busy neighbour process such
#: short sweeps ran slower than one thread, so it stays (docs/development.md, "The CPU
#: sweep's threads").
MIN_FLOPS_PER_THREAD = 24e6

_POOL = None  # {cpu: job queue of the worker pinned to it}
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


def column_ranges(c: int, n_threads: int):
    """(chunks, bounds): ``c`` columns cut into one range per thread call (eight per
    thread where there are several, for balance), range k = bounds[k]:bounds[k + 1]
    (int64).  One thread: one range, without NumPy's linspace (a small call pays it)."""
    if n_threads <= 1 or c <= 1:
        return 1, np.array([0, max(c, 0)], dtype=np.int64)
    chunks = min(c, 8 * n_threads)
    return chunks, np.linspace(0, c, chunks + 1).astype(np.int64)


_GETCPU = None  # libc's sched_getcpu, looked up on first use


def _current_cpu() -> int:
    """The CPU the calling thread runs on (-1 where that cannot be asked)."""
    global _GETCPU
    if _GETCPU is None:
        _GETCPU = lambda: -1  # noqa: E731
        try:
            import ctypes

            getcpu = ctypes.CDLL(None).sched_getcpu
            getcpu.restype = ctypes.c_int
            getcpu.argtypes = []
            _GETCPU = getcpu
        except (AttributeError, OSError):  # pragma: no cover - not glibc
            pass
    return _GETCPU()


class _Job:
    """Items ``fn(0..n-1)`` handed out one at a time to whichever thread asks next (the
    caller and the pool threads it woke); :meth:`wait` returns once every item taken
    has returned.  A thread that wakes after the items are gone takes none and touches
    nothing, so the caller never waits for a thread to wake."""

    __slots__ = ("fn", "n", "next", "busy", "lock", "done", "waiting", "error", "helped_at")

    def __init__(self, fn, n):
        self.fn, self.n, self.next, self.busy = fn, n, 0, 0
        self.lock = threading.Lock()
        self.done = threading.Lock()  # held until the last busy item returns
        self.done.acquire()
        self.waiting = False
        self.error = None
        self.helped_at = None  # when a pool thread first took an item (perf_counter)

    def _take(self, helper=False) -> int:
        with self.lock:
            if self.error is not None or self.next >= self.n:
                return -1
            if helper and self.helped_at is None:
                self.helped_at = time.perf_counter()
            self.next += 1
            self.busy += 1
            return self.next - 1

    def _finished(self):
        with self.lock:
            self.busy -= 1
            if self.busy == 0 and self.waiting:
                self.waiting = False
                self.done.release()

    def run(self, helper=False):
        """Take and call items until none are left (or one raised); ``helper``: called
        by a pool thread (the first item it takes is timed)."""
        while (i := self._take(helper)) >= 0:
            try:
                self.fn(i)
            except BaseException as exc:  # handed to the caller by wait()
                with self.lock:
                    if self.error is None:
                        self.error = exc
            finally:
                self._finished()

    def wait(self):
        """Block until no item is running; then re-raise the first exception of an item."""
        with self.lock:
            idle = self.busy == 0
            self.waiting = not idle
        if not idle:
            self.done.acquire()
        if self.error is not None:
            raise self.error


def _worker(jobs, cpu):
    """A pool thread: pinned to ``cpu`` (when given), runs the jobs put on its queue."""
    if cpu is not None:
        try:
            os.sched_setaffinity(0, {cpu})  # 0: the calling thread
        except OSError:  # pragma: no cover - a CPU taken away since
            pass
    while True:
        jobs.get().run(helper=True)


def _pool():
    """The sweep's pool: one daemon thread per CPU of the process's affinity set, pinned
    to it, each with its own job queue ({cpu: queue}).

    Pinned, because unpinned workers woken by the caller can share one CPU for
    stretches of many sweeps (the scheduler's wake-up placement), slowing sweeps at random
    (docs/development.md, "The CPU sweep's threads")."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            import queue

            cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
            pin = len(cpus) > 1 and hasattr(os, "sched_setaffinity")
            pool = {}
            for k in range(available_cpus()):
                cpu = cpus[k] if pin else None
                jobs = queue.SimpleQueue()
                name = f"{_PREFIX}-{k}"
                threading.Thread(target=_worker, args=(jobs, cpu), name=name, daemon=True).start()
                pool[cpu if pin else k] = jobs
            _POOL = pool
        return _POOL


def _forget_pool():  # a forked child has none of the parent's threads
    global _POOL, _POOL_LOCK
    _POOL = None
    _POOL_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def run_ranges(fn, n_items: int, n_threads: int) -> None:
    """Call ``fn(i)`` for i in range(n_items) on ``n_threads`` threads: the caller's and
    pool threads pinned to other CPUs (at most one thread per CPU; items handed out one
    at a time).  Returns when every call has returned; the first exception raised by a
    call is re-raised.  One thread: the calls run on the caller's thread, as do the calls
    from a pool thread (a nested call must not wait for the pool it occupies).

    The caller works too: waking a sleeping pool thread takes tens of microseconds, and
    the caller takes items while the woken thread starts, so the wake-up overlaps work.
    The pool threads woken are those pinned to CPUs other than the caller's, so the two
    do not share one CPU."""
    if n_threads <= 1 or n_items <= 1 or threading.current_thread().name.startswith(_PREFIX):
        for i in range(n_items):
            fn(i)
        return
    pool = _pool()
    job = _Job(fn, n_items)
    helpers = min(n_threads, n_items, len(pool)) - 1  # the caller is one of the threads
    here = _current_cpu()
    posted = time.perf_counter()
    for cpu, jobs in pool.items():
        if helpers <= 0:
            break
        if cpu != here:
            jobs.put(job)
            helpers -= 1
    job.run()
    job.wait()
    _note_start_delay((job.helped_at or time.perf_counter()) - posted)


#: How long a woken pool thread took to start on the last START_DELAY_SAMPLES jobs
#: (seconds; a job where no pool thread took an item counts its whole length).  Their
#: median is the estimate: wake-ups have rare outliers of milliseconds, which an average
#: would carry for many calls.
_START_DELAYS = []
START_DELAY_SAMPLES = 9


def _note_start_delay(seconds):
    _START_DELAYS.append(seconds)
    if len(_START_DELAYS) > START_DELAY_SAMPLES:
        del _START_DELAYS[0]


def start_delay() -> float:
    """The measured time a woken pool thread takes to start on a job, in seconds (the
    median of the last START_DELAY_SAMPLES parallel calls; 0 before any): the head
    start of the calling thread, which works on its first item from the moment it hands
    the job out."""
    samples = sorted(_START_DELAYS)
    return samples[len(samples) // 2] if samples else 0.0
