"""Helpers that benchmark scripts can share: timing, peak memory, workers with a time limit, tables.

- :func:`best_of` times a call k times (fewer when the runs would pass a time budget) and
  keeps the fastest, with the peak memory each run added (:class:`PeakMemory`).
- :class:`PeakMemory` measures the peak resident memory of a block beyond what the process
  held when it began (Linux: ``VmHWM`` reset through ``/proc/self/clear_refs``), or, where
  that is not available, the peak of Python-tracked allocations (:mod:`tracemalloc`).
- :class:`Worker` keeps a Python subprocess that answers JSON jobs, one line each, and kills
  it when a job runs past its limit; :func:`run_with_timeout` runs one command with a limit.
- :func:`format_table` lays out rows as a text table (or a Markdown one).
"""

from __future__ import annotations

import ctypes
import json
import os
import queue
import subprocess
import sys
import threading
import time
import tracemalloc

#: Lines of the worker protocol start with this (anything else a library prints on stdout is
#: passed through to stderr).
PROTOCOL = "@@bench "


# --- peak memory ------------------------------------------------------------------------


def _status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def _can_reset_hwm():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        _status("VmHWM")
        return True
    except OSError:
        return False
    except KeyError:
        return False


def _trim_heap():
    """Give freed heap back to the system (glibc), so that RSS starts from what is in use."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def settle_allocator():
    """Time every peer in one allocator state: glibc's, as a long-running process has it.

    glibc serves a block above its mmap threshold (128 KiB at start) by a fresh mapping,
    faulted in page by page, and raises the threshold to the size of such a block once it
    is freed.  So a library whose temporaries are megabytes (scikit-learn's multiplicative
    updates: 2263 page faults an iteration on 400 x 600) runs up to 1.7x faster after
    anything has freed a larger block than in a fresh process.  Freeing one 30 MiB block
    here (under glibc's 32 MiB ceiling for the threshold) puts the process in the fast
    state before anything is timed, instead of leaving it to whichever call ran first.
    """
    import numpy as np

    block = np.empty(30 << 17)  # 30 MiB of float64, never touched
    del block


class PeakMemory:
    """Peak memory of a ``with`` block beyond what the process held when it began, in bytes.

    ``method`` is "rss" (Linux: resident memory, every allocation of every library counted,
    Numba's and Fortran's included) or "tracemalloc" (Python-tracked allocations only, NumPy
    arrays among them; the fallback elsewhere).  After the block, ``peak`` holds the bytes.
    """

    def __init__(self, method="auto"):
        if method == "auto":
            method = "rss" if sys.platform.startswith("linux") and _can_reset_hwm() else "tm"
        self.method = "rss" if method == "rss" else "tracemalloc"
        self.peak = None

    def __enter__(self):
        if self.method == "rss":
            _trim_heap()
            self._before = _status("VmRSS")
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # reset the high-water mark (VmHWM) to the current RSS
        else:
            tracemalloc.start()
            tracemalloc.reset_peak()
            self._before = tracemalloc.get_traced_memory()[0]
        return self

    def __exit__(self, *exc):
        if self.method == "rss":
            self.peak = max(0, _status("VmHWM") - self._before)
        else:
            self.peak = max(0, tracemalloc.get_traced_memory()[1] - self._before)
            tracemalloc.stop()
        return False


# --- timing -----------------------------------------------------------------------------


def best_of(fn, k=3, budget=None, memory=True, clock=time.perf_counter):
    """Run ``fn()`` up to k times; the fastest run's result.

    Stops early where one more run would take the total past ``budget`` seconds (the first run
    always happens).  Returns a dict: ``value`` (what the fastest run returned), ``seconds``
    (its time), ``times`` (every run), ``cpu_seconds`` (the fastest run's CPU time of this
    process, all threads: less disturbed by a busy machine than wall time), ``peak_bytes``
    (the largest peak of any run beyond the memory held before it, None with
    ``memory=False``), ``memory_method``.
    """
    times, best, value, peaks, method, cpu = [], None, None, [], None, None
    for _ in range(max(1, k)):
        if times and budget is not None and sum(times) + min(times) > budget:
            break
        meter = PeakMemory() if memory else None
        if meter is not None:
            meter.__enter__()
        t0, c0 = clock(), time.process_time()
        try:
            out = fn()
        finally:
            t, c = clock() - t0, time.process_time() - c0
            if meter is not None:
                meter.__exit__(None, None, None)
        times.append(t)
        if meter is not None:
            peaks.append(meter.peak)
            method = meter.method
        if best is None or t < best:
            best, value, cpu = t, out, c
    return {
        "value": value,
        "seconds": best,
        "times": times,
        "cpu_seconds": cpu,
        "peak_bytes": max(peaks) if peaks else None,
        "memory_method": method,
    }


# --- subprocesses with a time limit -----------------------------------------------------


def run_with_timeout(cmd, timeout, **kwargs):
    """Run ``cmd`` (a list); ``(returncode, stdout, stderr)``, returncode None when killed
    after ``timeout`` seconds (the whole process group: children of the command too)."""
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **kwargs,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate()
        return None, out, err


def _kill_group(proc):
    try:
        os.killpg(proc.pid, 9)  # its own session: only this process and its children
    except (ProcessLookupError, PermissionError):
        proc.kill()


class WorkerTimeout(Exception):
    """A job of a :class:`Worker` ran past its limit; the worker was killed."""


class WorkerDied(Exception):
    """A :class:`Worker`'s process ended without answering; ``stderr`` holds its last words."""

    def __init__(self, message, stderr=""):
        super().__init__(message)
        self.stderr = stderr


class Worker:
    """A Python subprocess that answers JSON jobs, one per line, started on first use.

    ``cmd`` runs :func:`serve` (or anything speaking its protocol).  :meth:`call` sends a job
    and waits for messages: ``{"event": "ready"}`` (set-up done: the clock of ``limit``
    starts) and a final ``{"event": "done", ...}``, which it returns.  Past ``setup_timeout``
    before "ready", or ``limit`` after it, the worker's process group is killed and
    :class:`WorkerTimeout` raised; the next call starts a fresh process.  Keeping one process
    across jobs keeps its imports and compiled code warm.
    """

    def __init__(self, cmd, env=None):
        self.cmd, self.env, self.proc = list(cmd), env, None

    def _start(self):
        self.proc = subprocess.Popen(
            self.cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
            start_new_session=True,
            env=self.env,
        )
        self.lines, self.errs = queue.Queue(), []

        def pump_out(stream):
            for line in stream:
                self.lines.put(line)
            self.lines.put(None)  # end of output: the process is gone

        def pump_err(stream):
            for line in stream:
                self.errs.append(line)
                del self.errs[:-200]

        threading.Thread(target=pump_out, args=(self.proc.stdout,), daemon=True).start()
        threading.Thread(target=pump_err, args=(self.proc.stderr,), daemon=True).start()

    def _next(self, deadline):
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerTimeout
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                raise WorkerTimeout from None
            if line is None:
                self.proc.wait()
                raise WorkerDied(f"worker exited ({self.proc.returncode})", "".join(self.errs))
            if line.startswith(PROTOCOL):
                return json.loads(line[len(PROTOCOL) :])
            sys.stderr.write(line)

    def call(self, job, limit, setup_timeout=600.0):
        """Send ``job`` (a JSON-able dict); the worker's "done" message (a dict)."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        try:
            msg = self._next(time.monotonic() + setup_timeout)
            if msg.get("event") == "ready":
                msg = self._next(time.monotonic() + limit)
            return msg
        except WorkerTimeout:
            self.close(kill=True)
            raise
        except WorkerDied:
            self.proc = None
            raise

    def close(self, kill=False):
        if self.proc is None:
            return
        if kill:
            _kill_group(self.proc)
        else:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except (subprocess.TimeoutExpired, OSError):
                _kill_group(self.proc)
        self.proc.wait()
        self.proc = None


def send(msg):
    """Worker side: send one protocol message (a dict) to the parent."""
    sys.__stdout__.write(PROTOCOL + json.dumps(msg) + "\n")
    sys.__stdout__.flush()


def serve(handle):
    """Worker side: answer jobs from stdin with ``handle(job)`` until stdin closes.

    ``handle`` calls :func:`send` with ``{"event": "ready"}`` when its set-up is done and
    returns the "done" message's fields; an exception becomes ``{"event": "done", "error":
    ...}``.  Whatever the libraries print on stdout goes to stderr."""
    import traceback

    sys.stdout = sys.stderr
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            out = handle(json.loads(line))
        except Exception as exc:  # reported to the parent, which goes on with the next job
            traceback.print_exc()
            out = {"error": f"{type(exc).__name__}: {exc}"[:400]}
        send({"event": "done", **out})


# --- tables -----------------------------------------------------------------------------


def format_table(header, rows, markdown=False, align=None):
    """Rows (lists of cells, str() applied) as a text table; a Markdown table with
    ``markdown=True``.  ``align``: one of "<" / ">" per column (default: first left, rest
    right)."""
    cells = [[str(c) for c in header]] + [[str(c) for c in row] for row in rows]
    ncol = len(header)
    align = align or ["<"] + [">"] * (ncol - 1)
    if markdown:
        lines = ["| " + " | ".join(cells[0]) + " |"]
        lines.append("|" + "|".join("---:" if a == ">" else "---" for a in align) + "|")
        lines += ["| " + " | ".join(row) + " |" for row in cells[1:]]
        return "\n".join(lines)
    width = [max(len(row[j]) for row in cells) for j in range(ncol)]

    def fmt(row):
        return "  ".join(f"{c:{a}{w}}" for c, a, w in zip(row, align, width, strict=True))

    rule = "  ".join("-" * w for w in width)
    return "\n".join([fmt(cells[0]), rule] + [fmt(r) for r in cells[1:]])
