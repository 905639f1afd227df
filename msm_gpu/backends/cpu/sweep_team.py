"""A state's sweeps on a team of threads that spin between sweeps instead of sleeping.

Through :func:`threads.run_ranges` every parallel sweep wakes a sleeping pool thread.  On
a virtual machine that wake-up is an interrupt between virtual CPUs, a noticeable part of
a short sweep, every sweep (docs/development.md, "The CPU sweep's threads").  A team's
pool threads wait for the next sweep in compiled code, without the GIL, reading a shared
word (:func:`help_sweeps`), for at most :data:`SPIN_SECONDS` after their last item:
during a solve the next sweep comes well within that, so no thread sleeps between
sweeps, and after the solve the spinning stops on its own (or at once, :meth:`close`).

The protocol, all in ``ctl`` (int64):

* ``ctl[WORD]`` packs (generation, items, next item) of the current sweep.  The caller
  writes the items' column ranges (``ctl[BOUNDS:]``), zeroes ``ctl[DONE]``, stores the
  word with a new generation (a fenced store, :func:`publish`), and only then posts the
  pool threads that left their loop (``running`` 0; a leaving thread looks at the word
  once more after marking itself gone, so no sweep is missed by both).  Every thread,
  the caller included, takes
  items by compare-and-swap on the word (:func:`_take_items`), so an item is swept once,
  and a thread that comes late (descheduled, or still spinning up) takes none: the caller
  never waits for a thread that has not started.  A thread holding an older generation
  cannot take an item of a newer sweep (the generation is part of the word it swaps).
* ``ctl[DONE]`` counts finished items; the caller returns when it reaches the count.
* ``ctl[STOP]`` ends every helper's loop (:meth:`SweepTeam.close`).
* ``running[k]`` is 1 while pool thread k is in (or queued for) the team's loop.  A
  spinning pool thread takes items of every sweep published, whatever ``threads`` the
  caller asked for (the states ask for a team only with two threads or more).

The caller waits for the last items by spinning for at most :data:`WAIT_SECONDS`, then in
Python with short sleeps (a helper that lost its CPU to another process does not keep
the caller's CPU busy).  A sweep the team made slow (:meth:`SweepTeam.sweep`: a pool
thread sharing its CPU with a busy process is time-sliced with it, where a sleeping one
would be run at once when woken) sends the next sweeps to the sleeping pool for a while
(:class:`Backoff`).  x86-64 only (:data:`atomics.SPIN_SUPPORTED`); elsewhere, and for
work that one thread sweeps, the states use :func:`threads.run_ranges`.
"""

from __future__ import annotations

import math
import time

import numpy as np

from ...penalties import CODE_BOX, CODE_L0, CODE_L1, CODE_LP
from .atomics import SPIN_SUPPORTED, aadd, acas, aload, astore, astore_fenced, pause
from .jit import njit
from .kernels import SWEEPS
from .threads import _current_cpu, _pool
from .tiles import sweep_tiles

__all__ = ["SPIN_SUPPORTED", "SweepTeam"]

#: Indices into ``ctl`` (``ctl[MODE]`` = 1: the sweep also writes F(X) of the iterate
#: before it into ``f0``, as the first sweep of a solve does).
WORD, DONE, STOP, MODE = 0, 1, 2, 3
#: ``ctl[BOUNDS + 2 i]``, ``ctl[BOUNDS + 2 i + 1]``: item i's columns c0, c1.
BOUNDS = 4
#: The word: generation << GEN_SHIFT | items << ITEMS_SHIFT | next item.
GEN_SHIFT, ITEMS_SHIFT = 40, 20
FIELD_MASK = (1 << 20) - 1
GEN_MASK = (1 << 23) - 1
#: Seconds a pool thread keeps spinning for the next sweep after its last item.
SPIN_SECONDS = 300e-6
#: While the last sweep's items still run on other threads, a pool thread spins up to this
#: many times its budget (it stops counting its own budget: the next sweep comes after).
IN_FLIGHT_FACTOR = 20
#: Seconds the caller spins for the pool threads' last items before sleeping on them.
WAIT_SECONDS = 500e-6
#: The caller's sleep between looks at ``ctl[DONE]`` once it stopped spinning.
SLEEP_SECONDS = 20e-6
#: A team sweep was slow (:meth:`SweepTeam.sweep`) when it took more than this fraction of
#: the time the caller alone would have taken, and the caller waited for the others more
#: than STALL_MIN_SECONDS.
SLOW_FRACTION = 0.8
STALL_MIN_SECONDS = 50e-6
#: After a slow team sweep the sweeps go to the sleeping pool for POOL_FIRST_SECONDS,
#: doubled by every further slow one up to POOL_MOST_SECONDS (:class:`Backoff`).
POOL_FIRST_SECONDS = 5e-3
POOL_MOST_SECONDS = 1.0
#: Team sweeps in a row, none slow, that halve the span again.
CALM_SWEEPS = 50


#: Which kernel a team runs: a constant in each compiled entry point, with the penalty
#: code, so that Numba compiles only that kernel into it (a branch on an argument
#: compiled both, several times the cold-cache compilation: docs/development.md).
KIND_TILES, KIND_PANELS = 1, 2
_SWEEP_BOX, _SWEEP_L1, _SWEEP_L0, _SWEEP_LP = (
    SWEEPS[c] for c in (CODE_BOX, CODE_L1, CODE_L0, CODE_LP)
)


@njit(inline="always")
def _sweep_item(kind, panel, code, arrays, with_f0, c0, c1):
    afold, b_diag, params, r, y, stats, f0 = arrays
    if kind == KIND_TILES:
        sweep_tiles(afold, b_diag, code, params, r, y, c0, c1, stats, f0, with_f0)
    elif code == CODE_BOX:
        _SWEEP_BOX(afold, b_diag, params, r, y, c0, c1, panel, stats, f0, with_f0)
    elif code == CODE_L1:
        _SWEEP_L1(afold, b_diag, params, r, y, c0, c1, panel, stats, f0, with_f0)
    elif code == CODE_L0:
        _SWEEP_L0(afold, b_diag, params, r, y, c0, c1, panel, stats, f0, with_f0)
    else:
        _SWEEP_LP(afold, b_diag, params, r, y, c0, c1, panel, stats, f0, with_f0)


@njit(inline="always")
def _take_items(kind, panel, code, arrays, ctl, gen):
    """Take and sweep items of generation ``gen`` until none is left; returns the number
    of columns swept."""
    with_f0 = ctl[MODE] != 0  # written before the generation was published
    swept = 0
    while True:
        word = aload(ctl, WORD)
        if (word >> GEN_SHIFT) != gen:
            return swept
        count = (word >> ITEMS_SHIFT) & FIELD_MASK
        item = word & FIELD_MASK
        if item >= count:
            return swept
        if acas(ctl, WORD, word, word + 1):
            c0, c1 = ctl[BOUNDS + 2 * item], ctl[BOUNDS + 2 * item + 1]
            _sweep_item(kind, panel, code, arrays, with_f0, c0, c1)
            swept += c1 - c0
            aadd(ctl, DONE, 1)


@njit(inline="always")
def _team(kind, panel, code, arrays, ctl, running, slot, seen, budget, lead):
    """``arrays`` = (afold, b_diag, params, r, y, stats, f0).  ``lead``: the caller's
    part, the items of the published generation ``seen`` (the number of columns it
    swept).  Else a pool thread's loop: take items of every new generation (``seen``: the
    last one it must not take), until ``budget`` spin-wait hints pass without one once the
    last sweep is done (while its items run on other threads, up to IN_FLIGHT_FACTOR times
    as many), or ``ctl[STOP]``."""
    if lead:
        return _take_items(kind, panel, code, arrays, ctl, seen)
    idle = 0
    in_flight = 0
    while aload(ctl, STOP) == 0:
        word = aload(ctl, WORD)
        gen = word >> GEN_SHIFT
        if gen != seen:
            _take_items(kind, panel, code, arrays, ctl, gen)
            seen = gen
            idle = in_flight = 0
            continue
        if aload(ctl, DONE) < ((word >> ITEMS_SHIFT) & FIELD_MASK):
            in_flight += 1  # the sweep is not over: the next one comes after it
            if in_flight >= IN_FLIGHT_FACTOR * budget:
                break
        else:
            idle += 1
            if idle >= budget:
                break
        pause()
    # leaving: seen by a caller that publishes after this store (it then posts this
    # thread again), or the sweep published before it is taken here (Dekker: the caller
    # publishes with a fenced store, then reads ``running``)
    astore_fenced(running, slot, 0)
    gen = aload(ctl, WORD) >> GEN_SHIFT
    if gen != seen and aload(ctl, STOP) == 0:
        _take_items(kind, panel, code, arrays, ctl, gen)
    return 0


def _make_team(kind, code):
    """The team's compiled entry point for one kernel ``kind`` and penalty ``code``, both
    constants of the function (closure variables), so that Numba compiles that sweep
    alone into it: :func:`_team` with ``(panel, arrays, ctl, running, slot, seen, budget,
    lead)``."""

    @njit(nogil=True)
    def team(panel, arrays, ctl, running, slot, seen, budget, lead):
        return _team(kind, panel, code, arrays, ctl, running, slot, seen, budget, lead)

    return team


#: The entry point of each (kind, penalty code), compiled on first use.
TEAMS = {
    (kind, code): _make_team(kind, code)
    for kind in (KIND_TILES, KIND_PANELS)
    for code in (CODE_BOX, CODE_L1, CODE_L0, CODE_LP)
}


def _entry(kernel_args):
    """(compiled entry point, panel, arrays) of ``kernel_args`` = (tiles, panel, afold,
    b_diag, code, params, r, y, stats, f0)."""
    tiles, panel, afold, b_diag, code, params, r, y, stats, f0 = kernel_args
    arrays = (afold, b_diag, params, r, y, stats, f0)
    return TEAMS[(KIND_TILES if tiles else KIND_PANELS, int(code))], panel, arrays


def help_sweeps(*args):
    """A pool thread's loop (:func:`_team`); ``args`` = the team's kernel args (tiles,
    panel, afold, b_diag, code, params, r, y, stats, f0), then ctl, running, slot, seen,
    budget."""
    team, panel, arrays = _entry(args[:10])
    team(panel, arrays, *args[10:], False)


#: ``running`` for the caller's part (:func:`_team` with ``lead``: never read).
_NO_RUNNING = np.zeros(1, dtype=np.int64)


@njit(nogil=True)
def publish(ctl, bounds, gen, with_f0):
    """The caller: publish the sweep ``gen`` of the column ranges ``bounds`` (k, 2) (with
    ``with_f0``: F(X) into ``f0`` too); fenced, so that the caller's next look at
    ``running`` comes after it."""
    count = bounds.shape[0]
    for i in range(count):
        ctl[BOUNDS + 2 * i] = bounds[i, 0]
        ctl[BOUNDS + 2 * i + 1] = bounds[i, 1]
    ctl[MODE] = 1 if with_f0 else 0
    astore(ctl, DONE, 0)
    astore_fenced(ctl, WORD, (gen << GEN_SHIFT) | (count << ITEMS_SHIFT))


@njit(nogil=True)
def wait_items(ctl, count, budget):
    """Spin until ``count`` items are done, for at most ``budget`` hints; True if they are."""
    spins = 0
    while aload(ctl, DONE) < count:
        if spins >= budget:
            return False
        spins += 1
        pause()
    return True


@njit(nogil=True)
def spin_hints(count):
    """``count`` spin-wait hints (timed once to turn seconds into hints)."""
    for _ in range(count):
        pause()


_HINTS_PER_SECOND = None


def hints_per_second() -> float:
    """Spin-wait hints per second on this CPU (PAUSE takes ~10 to ~150 cycles by model),
    measured once per process."""
    global _HINTS_PER_SECOND
    if _HINTS_PER_SECOND is None:
        spin_hints(10)  # compile / load
        count = 20000
        start = time.perf_counter()
        spin_hints(count)
        _HINTS_PER_SECOND = count / max(time.perf_counter() - start, 1e-6)
    return _HINTS_PER_SECOND


class Backoff:
    """When the sweeps go back to the sleeping pool (``threads.run_ranges``) after a slow
    team sweep: process-wide, as a busy neighbour process is the machine's state.

    Beside one busy single-threaded process, a spinning pool thread never sleeps, so the
    scheduler shares its CPU with the neighbour in time slices of milliseconds, and the
    sweep waits for it; a thread that slept is run at once when woken.  After a slow
    sweep the next ``first`` seconds go to the pool; each further slow one doubles that
    span up to ``most``, and ``calm`` team sweeps in a row that are not slow halve it
    again (down to ``first``): halved by every sweep that was not slow, the span stayed
    too short beside a busy process (docs/development.md, "The CPU sweep's threads")."""

    def __init__(
        self,
        first=POOL_FIRST_SECONDS,
        most=POOL_MOST_SECONDS,
        calm=CALM_SWEEPS,
        clock=time.perf_counter,
    ):
        self.first, self.most, self.calm, self.clock = first, most, calm, clock
        self.span = first
        self.until = -math.inf
        self._calm_run = 0

    def use_pool(self) -> bool:
        """True while sweeps should go to the sleeping pool."""
        return self.clock() < self.until

    def record(self, slow: bool) -> None:
        """What a team sweep reported (:meth:`SweepTeam.sweep`)."""
        if slow:
            self.until = self.clock() + self.span
            self.span = min(2.0 * self.span, self.most)
            self._calm_run = 0
            return
        self._calm_run += 1
        if self._calm_run >= self.calm:
            self.span = max(self.first, 0.5 * self.span)
            self._calm_run = 0


_BACKOFF = None


def backoff() -> Backoff:
    """The process's :class:`Backoff`."""
    global _BACKOFF
    if _BACKOFF is None:
        _BACKOFF = Backoff()
    return _BACKOFF


class _Spin:
    """The job a pool thread runs from its queue: the team's loop (:func:`help_sweeps`)."""

    __slots__ = ("args", "ctl", "running", "slot", "seen", "budget")

    def __init__(self, team, slot, seen):
        self.args, self.ctl, self.running = team.kernel_args, team.ctl, team.running
        self.slot, self.seen, self.budget = slot, seen, team.spin_budget

    def run(self, helper=False):
        try:
            help_sweeps(*self.args, self.ctl, self.running, self.slot, self.seen, self.budget)
        except BaseException:  # pragma: no cover - the kernels check their input first
            self.running[self.slot] = 0
            raise


class SweepTeam:
    """The threads that sweep one state's iterate: the caller and pool threads spinning
    between sweeps (see the module docstring).

    ``kernel_args`` = (tiles, panel, afold, b_diag, code, params, r, y, stats, f0): the
    sweep kernels' arrays (``f0`` (2, m) float64: F(X) and sum h, written by a sweep with
    ``with_f0``), fixed for the team's life (a state that changes them closes its team
    and starts another).  ``spin_seconds`` / ``wait_seconds``: the helpers' and the
    caller's spinning (tests shorten them).
    """

    def __init__(self, kernel_args, spin_seconds=SPIN_SECONDS, wait_seconds=WAIT_SECONDS):
        self.kernel_args = tuple(kernel_args)
        self._entry = _entry(self.kernel_args)  # the compiled entry point and its args
        rate = hints_per_second()
        self.spin_budget = int(spin_seconds * rate)
        self._wait_budget = int(wait_seconds * rate)
        pool = _pool()
        self._cpus = list(pool)
        self._queues = pool
        self._gen = 0
        self._new_arrays(64)
        # compile (or load) the helpers' loop for these types here: compiled on a pool
        # thread it could still be compiling when the interpreter exits (LLVM aborts)
        stopped = np.zeros(BOUNDS, dtype=np.int64)
        stopped[STOP] = 1
        help_sweeps(*self.kernel_args, stopped, np.zeros(1, dtype=np.int64), 0, 0, 0)
        self.posted = 0  # pool threads put to work from their queue (tests, statistics)

    def sweep(self, bounds, threads, with_f0=False) -> bool:
        """Sweep the column ranges ``bounds`` ((k, 2) int64 array) on ``threads`` threads
        (the caller and up to threads - 1 pool threads on other CPUs); ``with_f0``: F(X)
        of the iterate before the sweep into the team's ``f0`` too.

        Returns whether the sweep was slow: it took more than SLOW_FRACTION of the time
        the caller alone would have taken at its own pace, and the caller waited over
        STALL_MIN_SECONDS for the others (a pool thread that shares its CPU with another
        process; see :class:`Backoff`)."""
        count = bounds.shape[0]
        if count > FIELD_MASK:
            raise ValueError(f"bounds: at most {FIELD_MASK} ranges, got {count}")
        if BOUNDS + 2 * count > self.ctl.shape[0]:
            self.close()  # the running loops hold the old arrays
            self._new_arrays(count)
        previous = self._gen
        self._gen = gen = (previous + 1) & GEN_MASK
        ctl = self.ctl
        started = time.perf_counter()
        publish(ctl, bounds, gen, bool(with_f0))
        # after the publication: a pool thread still spinning takes it, one that left
        # (running 0) is posted again (see help_sweeps)
        helpers = min(threads, count, len(self._cpus)) - 1
        here = _current_cpu()
        for slot, cpu in enumerate(self._cpus):
            if helpers <= 0:
                break
            if cpu == here:
                continue
            helpers -= 1
            if self.running[slot] == 0:
                self.running[slot] = 1
                self._queues[cpu].put(_Spin(self, slot, previous))
                self.posted += 1
        # the caller's part: items of this generation until none is left (some may still
        # be running on other threads: wait_items)
        team, panel, arrays = self._entry
        own_columns = team(panel, arrays, ctl, _NO_RUNNING, 0, gen, 0, True)
        own = time.perf_counter()
        if not wait_items(ctl, count, self._wait_budget):
            while ctl[DONE] < count:
                time.sleep(SLEEP_SECONDS)
        ended = time.perf_counter()
        if own_columns <= 0 or ended - own <= STALL_MIN_SECONDS:
            return False
        # the caller's pace over all the columns: the sweep on this thread alone
        alone = (own - started) * (bounds[-1, 1] - bounds[0, 0]) / own_columns
        return ended - started > SLOW_FRACTION * alone

    def _new_arrays(self, max_items):
        self.ctl = np.zeros(BOUNDS + 2 * max_items, dtype=np.int64)
        self.ctl[WORD] = self._gen << GEN_SHIFT
        self.running = np.zeros(len(self._cpus), dtype=np.int64)

    def close(self):
        """Stop the pool threads' loops (they return to their queues)."""
        self.ctl[STOP] = 1

    def __del__(self):  # a team nobody closed must not keep a pool thread spinning
        ctl = getattr(self, "ctl", None)
        if ctl is not None:
            ctl[STOP] = 1

    def helpers_spinning(self) -> int:
        """Pool threads in (or queued for) this team's loop."""
        return int(self.running.sum())
