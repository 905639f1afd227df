"""The spinning team of the CPU sweep (msm_gpu.backends.cpu.sweep_team): every column range
swept exactly once per sweep, by whichever thread takes it; pool threads that stop
spinning on their own, on close, or never come; the state's use of it."""

import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import msm_gpu as mg
from msm_gpu.backends.base import default_panel
from msm_gpu.backends.cpu import backend as cpu_backend
from msm_gpu.backends.cpu import kernels as cpu_kernels
from msm_gpu.backends.cpu import sweep_team
from msm_gpu.backends.cpu import tiles as cpu_tiles
from msm_gpu.backends.cpu.backend import CpuBackend
from msm_gpu.backends.cpu.threads import _pool
from msm_gpu.solvers.splitting import make_splitting

pytestmark = pytest.mark.skipif(
    not sweep_team.SPIN_SUPPORTED, reason="the spinning team is x86-64 only"
)


def _problem(n, m, dtype, seed=0):
    rng = np.random.default_rng(seed)
    c = rng.uniform(size=(n + 10, n))
    a = (c.T @ c).astype(dtype)
    r = (-c.T @ rng.uniform(size=(n + 10, m))).astype(dtype)
    x = np.abs(rng.normal(size=(n, m))).astype(dtype)
    return a, r, x


def _state(a, r, x, penalty, tiles=None):
    n = a.shape[0]
    split = make_splitting(np.diag(a).astype(np.float64), 1.0, 0.01, True)
    return CpuBackend().start(
        a, r, x, split, penalty.table(n), penalty.code, default_panel(n), tiles=tiles
    )


def _kernel_args(state):
    return state._team_args()


def _serial_sweep(state, bounds, with_f0=False):
    """The reference: the same column ranges swept one after the other on this thread."""
    tiles, panel, afold, b_diag, code, table, r, y, stats, f0 = _kernel_args(state)
    for c0, c1 in bounds:
        if tiles:
            cpu_tiles.sweep_tiles(afold, b_diag, code, table, r, y, c0, c1, stats, f0, with_f0)
        elif with_f0:
            cpu_kernels.sweep_columns_with_objective(
                afold, b_diag, code, table, r, y, c0, c1, panel, stats, f0
            )
        else:
            cpu_kernels.sweep_columns(afold, b_diag, code, table, r, y, c0, c1, panel, stats)
    return stats.copy()


@pytest.fixture(autouse=True)
def _no_backoff(monkeypatch):
    """A slow sweep (a noisy machine) must not send the next ones to the sleeping pool
    (tests of the backoff set their own)."""
    monkeypatch.setattr(sweep_team, "_BACKOFF", sweep_team.Backoff(first=0.0, most=0.0, calm=1))


def _record_teams(monkeypatch):
    """The list of every SweepTeam made from now on."""
    made = []
    real = sweep_team.SweepTeam

    def recording(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(sweep_team, "SweepTeam", recording)
    return made


def _long_spinning_team(n, m):
    """An NNLS state (n x m) and a team whose pool thread spins for minutes between sweeps."""
    if len(_pool()) < 2:
        pytest.skip("one CPU: no pool thread")
    a, r, x = _problem(n, m, np.float64)
    state = _state(a, r, x, mg.NonNeg())
    return state, sweep_team.SweepTeam(_kernel_args(state), spin_seconds=600.0)


def _wait_until(condition, seconds=5.0):
    deadline = time.perf_counter() + seconds
    while not condition():
        if time.perf_counter() > deadline:
            return False
        time.sleep(1e-3)
    return True


@pytest.mark.parametrize("tiles", [True, False])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("penalty", [mg.NonNeg(), mg.L1(0.5), mg.L0(0.05)], ids=str)
def test_team_sweeps_equal_the_same_ranges_swept_in_turn(tiles, dtype, penalty):
    if tiles and not cpu_tiles.HOST_AVX512:
        pytest.skip("the tiled sweep needs AVX-512")
    a, r, x = _problem(64, 900, dtype)
    state, twin = _state(a, r, x, penalty, tiles), _state(a, r, x, penalty, tiles)
    team = sweep_team.SweepTeam(_kernel_args(state))
    bounds = np.array([(c, min(c + 96, 900)) for c in range(0, 900, 96)], dtype=np.int64)
    try:
        for k in range(6):
            with_f0 = k in (0, 3)  # F(X) of the iterate before the sweep too
            team.sweep(bounds, 2, with_f0)
            got_stats, got_x = state._stats.copy(), state._y.copy()  # as it returned
            got_terms = state._terms.copy()
            np.testing.assert_array_equal(got_stats, _serial_sweep(twin, bounds, with_f0))
            np.testing.assert_array_equal(got_x, twin._y)
            if with_f0:
                np.testing.assert_array_equal(got_terms, twin._terms)
                assert np.all(got_terms[0] != 0.0)
        np.testing.assert_array_equal(state.current_x(), twin.current_x())
        assert not np.array_equal(state.current_x(), x)  # the sweeps did move x
    finally:
        team.close()
        state.close()
        twin.close()


def test_helpers_that_stop_spinning_are_put_back_to_work():
    """With no spinning left after an item, every sweep posts its pool thread again, and
    each range is still swept once."""
    a, r, x = _problem(48, 640, np.float64)
    state, twin = _state(a, r, x, mg.NonNeg()), _state(a, r, x, mg.NonNeg())
    team = sweep_team.SweepTeam(_kernel_args(state), spin_seconds=0.0)
    bounds = np.array([(c, c + 64) for c in range(0, 640, 64)], dtype=np.int64)
    try:
        for _ in range(5):
            team.sweep(bounds, 2)
            assert _wait_until(lambda: team.helpers_spinning() == 0)
            np.testing.assert_array_equal(state._stats, _serial_sweep(twin, bounds))
        assert team.posted == 5 or len(_pool()) < 2
        np.testing.assert_array_equal(state.current_x(), twin.current_x())
    finally:
        team.close()
        state.close()
        twin.close()


def test_helpers_spin_a_bounded_time_and_close_stops_them_at_once():
    a, r, x = _problem(48, 256, np.float64)
    state = _state(a, r, x, mg.NonNeg())
    bounds = np.array([(0, 128), (128, 256)], dtype=np.int64)
    if len(_pool()) < 2:
        pytest.skip("one CPU: no pool thread to spin")
    short = sweep_team.SweepTeam(_kernel_args(state), spin_seconds=0.05)
    short.sweep(bounds, 2)
    assert short.helpers_spinning() == 1  # posted, spinning
    assert _wait_until(lambda: short.helpers_spinning() == 0, seconds=5.0)
    short.close()
    long = sweep_team.SweepTeam(_kernel_args(state), spin_seconds=600.0)
    try:
        long.sweep(bounds, 2)
        time.sleep(0.05)
        assert long.helpers_spinning() == 1  # still spinning, well inside its budget
    finally:
        long.close()
    assert _wait_until(lambda: long.helpers_spinning() == 0, seconds=2.0)
    state.close()


class _Blocker:
    """A pool job that holds its thread until released."""

    def __init__(self):
        self.started = threading.Event()
        self.release = threading.Event()

    def run(self, helper=False):
        self.started.set()
        self.release.wait(30)


def test_caller_sweeps_alone_when_no_pool_thread_comes():
    pool = _pool()
    blockers = {cpu: _Blocker() for cpu in pool}
    for cpu, jobs in pool.items():
        jobs.put(blockers[cpu])
    a, r, x = _problem(48, 640, np.float32)
    state, twin = _state(a, r, x, mg.L1(0.2)), _state(a, r, x, mg.L1(0.2))
    team = sweep_team.SweepTeam(_kernel_args(state))
    bounds = np.array([(c, c + 64) for c in range(0, 640, 64)], dtype=np.int64)
    try:
        assert all(b.started.wait(5) for b in blockers.values())
        for _ in range(3):
            team.sweep(bounds, len(pool))
            np.testing.assert_array_equal(state._stats, _serial_sweep(twin, bounds))
        np.testing.assert_array_equal(state.current_x(), twin.current_x())
    finally:
        team.close()
        for b in blockers.values():
            b.release.set()
        state.close()
        twin.close()
    # the queued loops start after the blockers, see STOP and leave
    assert _wait_until(lambda: team.helpers_spinning() == 0)


def test_a_thread_of_an_old_generation_or_a_late_one_takes_no_item():
    a, r, x = _problem(48, 256, np.float64)
    state = _state(a, r, x, mg.NonNeg())
    args = _kernel_args(state)
    team = sweep_team.SweepTeam(args)
    bounds = np.array([(0, 128), (128, 256)], dtype=np.int64)
    try:
        team.sweep(bounds, 1)  # the caller alone: every item done
        assert team.ctl[sweep_team.DONE] == 2
        x1, gen = state.current_x(), team._gen
        running = np.ones(1, dtype=np.int64)
        # late: it has not seen this generation, but its items are gone
        sweep_team.help_sweeps(*args, team.ctl, running, 0, gen - 1, 0)
        # old: it has seen it; with no spinning budget it leaves at once
        sweep_team.help_sweeps(*args, team.ctl, running, 0, gen, 0)
        assert team.ctl[sweep_team.DONE] == 2
        assert running[0] == 0
        np.testing.assert_array_equal(state.current_x(), x1)
    finally:
        team.close()
        state.close()


def test_generation_wraps_and_many_ranges_grow_the_control_array():
    a, r, x = _problem(32, 4096, np.float64)
    state, twin = _state(a, r, x, mg.NonNeg()), _state(a, r, x, mg.NonNeg())
    team = sweep_team.SweepTeam(_kernel_args(state))
    team._gen = sweep_team.GEN_MASK - 1
    bounds = np.array([(c, c + 32) for c in range(0, 4096, 32)], dtype=np.int64)  # 128
    try:
        for _ in range(3):
            team.sweep(bounds, 2)
            np.testing.assert_array_equal(state._stats, _serial_sweep(twin, bounds))
        assert team._gen == 1
        assert team.ctl.shape[0] >= sweep_team.BOUNDS + 2 * 128
        np.testing.assert_array_equal(state.current_x(), twin.current_x())
    finally:
        team.close()
        state.close()
        twin.close()


def test_state_sweeps_on_its_team_and_closes_it(monkeypatch):
    """The state's parallel sweeps go to one team per iterate: a new one after columns
    retire (the arrays change), every one closed; the iterates equal those of the
    sleeping pool's sweeps."""
    made = _record_teams(monkeypatch)
    a, r, x = _problem(200, 1200, np.float64)  # 96e6 flops a sweep, 64e6 after: two threads
    results = []
    for use_team in (True, False):
        monkeypatch.setattr(cpu_backend, "USE_TEAM", use_team)
        state = _state(a, r, x, mg.NonNeg())
        state.max_threads = 2
        stats = [state.sweep() for _ in range(3)]
        keep = np.arange(1200) % 3 != 0
        state.retire(keep)
        stats += [state.sweep() for _ in range(3)]
        results.append((state.current_x(), stats))
        state.close()
    assert len(made) == (2 if len(_pool()) > 1 else 0)
    assert all(team.ctl[sweep_team.STOP] == 1 for team in made)
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-12, atol=1e-12)
    for got, want in zip(results[0][1], results[1][1], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_solve_closes_its_teams_and_matches_the_sleeping_pool(monkeypatch):
    made = _record_teams(monkeypatch)
    a, r, _ = _problem(200, 800, np.float32)
    res = mg.solve(a, r, mg.NonNeg(), tol=1e-5, max_iter=60)
    assert all(team.ctl[sweep_team.STOP] == 1 for team in made)
    assert _wait_until(lambda: all(team.helpers_spinning() == 0 for team in made))
    monkeypatch.setattr(cpu_backend, "USE_TEAM", False)
    ref = mg.solve(a, r, mg.NonNeg(), tol=1e-5, max_iter=60)
    np.testing.assert_allclose(res.x, ref.x, rtol=1e-5, atol=1e-6)
    assert res.n_iter == ref.n_iter


@pytest.mark.parametrize("value, on", [("0", False), ("1", True)])
def test_environment_variable_turns_the_team_off(value, on):
    code = "from msm_gpu.backends.cpu import backend as cpu; print(cpu.USE_TEAM)"
    env = {"MSM_GPU_SPIN": value, "PATH": ""}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == str(on)


@pytest.mark.parametrize("tiles", [True, False])
def test_first_sweep_objective_on_the_team_is_f_of_the_start(tiles, monkeypatch):
    """The first sweep of a solve (F(X_0) from its own products) on the team: F and sum h
    equal the direct objective of X_0, and its iterate that of the sleeping pool's."""
    if tiles and not cpu_tiles.HOST_AVX512:
        pytest.skip("the tiled sweep needs AVX-512")
    a, r, x = _problem(200, 1200, np.float64, seed=3)
    penalty = mg.L1(0.3)
    got = []
    for use_team in (True, False):
        monkeypatch.setattr(cpu_backend, "USE_TEAM", use_team)
        state = _state(a, r, x, penalty, tiles)
        state.max_threads = 2
        direct = state.objective_terms()
        (fun, hsum), stats = state.sweep_with_objective()
        assert (state._team is not None) == (use_team and len(_pool()) > 1)
        np.testing.assert_allclose(fun, direct[0], rtol=1e-11)
        np.testing.assert_allclose(hsum, direct[1], rtol=1e-12)
        got.append((state.current_x(), stats, fun))
        state.close()
    np.testing.assert_allclose(got[0][0], got[1][0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got[0][2], got[1][2], rtol=1e-12)


def test_backoff_after_slow_sweeps_doubles_and_halves_its_span():
    now = [0.0]
    backoff = sweep_team.Backoff(first=1.0, most=4.0, calm=2, clock=lambda: now[0])
    assert not backoff.use_pool()
    backoff.record(False)  # not slow: nothing changes
    assert not backoff.use_pool() and backoff.span == 1.0
    backoff.record(True)  # the pool for 1 s
    assert backoff.use_pool()
    now[0] = 0.99
    assert backoff.use_pool()
    now[0] = 1.0
    assert not backoff.use_pool()
    spans = []
    for _ in range(4):  # slow after slow: 2, 4, 4, 4 s
        backoff.record(True)
        spans.append(backoff.until - now[0])
    assert spans == [2.0, 4.0, 4.0, 4.0]
    backoff.record(False)
    assert backoff.span == 4.0  # one calm sweep: not yet
    backoff.record(False)
    assert backoff.span == 2.0  # two in a row: halved
    backoff.record(False)
    backoff.record(True)  # a slow one breaks the run: doubled, the count starts over
    assert backoff.span == 4.0
    backoff.record(False)
    assert backoff.span == 4.0
    for _ in range(6):
        backoff.record(False)
    assert backoff.span == 1.0  # halved back, never below the first span


def test_after_a_slow_team_sweep_the_state_sweeps_on_the_sleeping_pool(monkeypatch):
    """A slow sweep reported by the team sends the next sweeps (every state's: the backoff
    is the process's) to ``threads.run_ranges`` until the span ends; same iterates."""
    now = [0.0]
    monkeypatch.setattr(
        sweep_team,
        "_BACKOFF",
        sweep_team.Backoff(first=3.0, most=3.0, calm=1, clock=lambda: now[0]),
    )
    outcomes, team_calls, pool_calls = [True] + [False] * 7, [], []

    class Scripted(sweep_team.SweepTeam):
        def sweep(self, bounds, threads, with_f0=False):
            super().sweep(bounds, threads, with_f0)
            team_calls.append(1)
            return outcomes.pop(0)

    real_run_ranges = cpu_backend.run_ranges

    def counting_run_ranges(fn, n_items, n_threads):
        pool_calls.append(1)
        real_run_ranges(fn, n_items, n_threads)

    monkeypatch.setattr(sweep_team, "SweepTeam", Scripted)
    monkeypatch.setattr(cpu_backend, "run_ranges", counting_run_ranges)
    a, r, x = _problem(200, 700, np.float64)
    state = _state(a, r, x, mg.NonNeg())
    state.max_threads = 2
    where = []
    for k in range(8):
        now[0] = float(k)  # one second a sweep: the slow one at 0 sends 1 and 2 to the pool
        before = (len(team_calls), len(pool_calls))
        state.sweep()
        where.append("team" if len(team_calls) > before[0] else "pool")
        assert len(pool_calls) - before[1] == (where[-1] == "pool")
    state.close()
    if len(_pool()) < 2:
        return  # one CPU: one thread, neither
    assert where == ["team", "pool", "pool", "team", "team", "team", "team", "team"]
    twin = _state(a, r, x, mg.NonNeg())
    twin.max_threads = 1
    for _ in range(len(where)):
        twin.sweep()
    np.testing.assert_array_equal(state.current_x(), twin.current_x())
    twin.close()


def test_team_sweep_reports_slow_when_the_caller_waits_on_a_lopsided_split():
    """The caller takes an eighth of the columns, the pool thread the rest, and the
    caller waits for it: 7/8 of the time the caller alone would take, over 0.8 of it.

    The pool thread leaves its loop after every sweep (no spinning), so each sweep posts
    it anew and the caller, already in its part when the thread wakes, takes the first
    item (a spinning thread raced the caller for it, and the caller then often took the
    big item: once no slow sweep in 20 s)."""
    if len(_pool()) < 2:
        pytest.skip("one CPU: no pool thread")
    a, r, x = _problem(128, 4096, np.float64)
    state = _state(a, r, x, mg.NonNeg())
    team = sweep_team.SweepTeam(_kernel_args(state), spin_seconds=0.0)
    lopsided = np.array([(0, 512), (512, 4096)], dtype=np.int64)
    try:
        deadline = time.perf_counter() + 20.0
        while not team.sweep(lopsided, 2):
            assert time.perf_counter() < deadline, "no slow sweep in 20 s of lopsided sweeps"
            time.sleep(2e-3)  # the pool thread back in its queue
    finally:
        team.close()
        state.close()


def test_ranges_of_much_work_go_to_the_sleeping_pool(monkeypatch):
    """Where a range is a few ms of work, a wake-up is small beside it: no team."""
    made = _record_teams(monkeypatch)
    a, r, x = _problem(200, 1200, np.float64)  # 96e6 flops: two threads, ranges of 48e6
    for limit, teams in ((1e9, 1), (1e7, 0)):
        monkeypatch.setattr(cpu_backend, "TEAM_MAX_ITEM_FLOPS", limit)
        made.clear()
        state = _state(a, r, x, mg.NonNeg())
        state.max_threads = 2
        state.sweep()
        state.close()
        assert len(made) == (teams if len(_pool()) > 1 else 0)


def test_a_team_nobody_closed_stops_its_pool_thread_when_collected():
    state, team = _long_spinning_team(48, 256)
    team.sweep(np.array([(0, 128), (128, 256)], dtype=np.int64), 2)
    running = team.running
    assert running.sum() == 1
    del team
    assert _wait_until(lambda: running.sum() == 0, seconds=2.0)
    state.close()


@pytest.mark.parametrize("width", [32, 1])
def test_many_tiny_ranges_each_swept_once_under_contention_for_the_word(width):
    """Ranges of a few microseconds (32 columns) or ~1.5 us (one column): the threads
    race for the shared word all the time.  A range taken twice would be swept twice in
    one sweep (x changes) and counted twice in ``ctl[DONE]``.  (With a plain store in
    place of the compare-and-swap, one-column ranges were taken twice ~30 times in 40
    sweeps; 32-column ones not once.)"""
    if len(_pool()) < 2:
        pytest.skip("one CPU: no pool thread")
    m = 8192 if width > 1 else 4096
    a, r, x = _problem(16, m, np.float64)
    state, twin = _state(a, r, x, mg.L1(0.1)), _state(a, r, x, mg.L1(0.1))
    team = sweep_team.SweepTeam(_kernel_args(state), spin_seconds=1.0)
    bounds = np.array([(c, c + width) for c in range(0, m, width)], dtype=np.int64)
    try:
        for _ in range(40):
            team.sweep(bounds, 2)
            _serial_sweep(twin, bounds)  # meanwhile a range taken twice would end too
            assert team.ctl[sweep_team.DONE] == len(bounds)
        np.testing.assert_array_equal(state.current_x(), twin.current_x())
        np.testing.assert_array_equal(state._stats, twin._stats)
    finally:
        team.close()
        state.close()
        twin.close()
