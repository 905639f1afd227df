"""CPU runtime: strided BLAS calls, the thread pool, the fast objective, the tracked final
objective, the threads= option, and where compiled kernels are cached."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import msm_gpu as mg
from msm_gpu.backends.cpu import backend as cpu
from msm_gpu.backends.cpu import jit, threads
from msm_gpu.backends.cpu.backend import CpuBackend
from msm_gpu.solvers.splitting import make_splitting

DTYPES = [np.float64, np.float32]
PENALTIES = [
    mg.Zero(),
    mg.NonNeg(),
    mg.Box(-0.2, 0.3),
    mg.L1(0.2),
    mg.NonNegL1(0.1),
    mg.L0(0.3),
    mg.L0(0.2, lb=0.0, ub=0.5),
    mg.Lp(0.1, 0.5),
    mg.Lp(0.1, 2.0 / 3.0),
]


def _problem(n, r, dtype, seed=0):
    rng = np.random.default_rng(seed)
    c = rng.uniform(size=(n + 5, n))
    a = (c.T @ c).astype(dtype)
    rhs = (-c.T @ rng.uniform(size=(n + 5, r))).astype(dtype)
    return a, rhs


# -- GEMM on strided views ---------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_gemm_on_strided_views_matches_numpy(dtype):
    from numba import njit

    from msm_gpu.backends.cpu.blas import gemm_rm, gemm_rm_at

    @njit
    def both(a, at, b, c1, c2, beta):
        gemm_rm(a, b, c1, beta)
        gemm_rm_at(at, b, c2, beta)

    rng = np.random.default_rng(1)
    big_a = rng.standard_normal((40, 50)).astype(dtype)
    big_b = rng.standard_normal((60, 70)).astype(dtype)
    rtol = 1e-12 if dtype == np.float64 else 1e-5
    for beta in (0.0, 1.0):
        c1 = rng.standard_normal((30, 80)).astype(dtype)
        c2 = rng.standard_normal((30, 80)).astype(dtype)
        keep1, keep2 = c1.copy(), c2.copy()
        a = big_a[3:15, 7:30]  # 12 x 23, row stride 50
        at = big_a[5:28, 20:32]  # 23 x 12: used transposed
        b = big_b[10:33, 40:57]  # 23 x 17, row stride 70
        both(a, at, b, c1[4:16, 9:26], c2[4:16, 9:26], beta)
        want1 = a.astype(np.float64) @ b + beta * keep1[4:16, 9:26]
        want2 = at.T.astype(np.float64) @ b + beta * keep2[4:16, 9:26]
        np.testing.assert_allclose(c1[4:16, 9:26], want1, rtol=rtol, atol=rtol * 10)
        np.testing.assert_allclose(c2[4:16, 9:26], want2, rtol=rtol, atol=rtol * 10)
        # nothing outside the target block was written
        for c, keep in ((c1, keep1), (c2, keep2)):
            mask = np.ones(c.shape, dtype=bool)
            mask[4:16, 9:26] = False
            np.testing.assert_array_equal(c[mask], keep[mask])


# -- thread pool ---------------------------------------------------------------------------


@pytest.mark.parametrize("n_threads", [1, 2, 3])
def test_run_ranges_calls_every_item_once(n_threads):
    seen = []
    lock = threading.Lock()

    def fn(i):
        with lock:
            seen.append(i)

    threads.run_ranges(fn, 37, n_threads)
    assert sorted(seen) == list(range(37))


def test_run_ranges_reraises_and_waits():
    def fn(i):
        if i == 5:
            raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        threads.run_ranges(fn, 20, 2)
    threads.run_ranges(lambda i: None, 4, 2)  # the pool still works


def test_pool_threads_are_pinned_to_cpus_other_than_the_callers():
    # threads.py: unpinned workers were measured sharing one CPU for stretches of sweeps;
    # the caller takes items too, beside a pool thread pinned to another CPU
    cpus = sorted(os.sched_getaffinity(0))
    n_threads = min(2, len(cpus))  # one CPU: the caller alone (never two on one CPU)
    seen = {}
    lock = threading.Lock()
    barrier = threading.Barrier(n_threads, timeout=10)
    caller = threading.get_ident()

    def fn(i):
        barrier.wait()  # the items held at once: as many threads
        with lock:
            seen[threading.get_ident()] = (os.sched_getaffinity(0), threads._current_cpu())

    threads.run_ranges(fn, n_threads, 2)
    assert len(seen) == n_threads and caller in seen
    helpers = [mask_cpu for ident, mask_cpu in seen.items() if ident != caller]
    if n_threads == 2:
        ((mask, cpu),) = helpers
        assert len(mask) == 1 and cpu in mask  # pinned, and running there
    assert os.sched_getaffinity(0) == set(cpus)  # the caller's own mask is untouched


def test_run_ranges_returns_after_every_item_taken_has_returned():
    # the caller takes items too; it must still wait for the items a pool thread holds
    # (the slow ones here), and no item may be called twice or left out
    caller = threading.get_ident()
    helped = 0
    for _ in range(20):
        done, who = [], set()

        def fn(i, done=done, who=who):
            me = threading.get_ident()
            who.add(me)
            time.sleep(0.001 if me == caller else 0.03)
            done.append(i)

        threads.run_ranges(fn, 6, 2)
        assert sorted(done) == list(range(6))
        helped += len(who) > 1
    if len(os.sched_getaffinity(0)) > 1:
        assert helped > 0  # a pool thread took items: the wait above was exercised


def test_run_ranges_from_two_callers_at_once():
    # callers in several user threads share the pool; each gets all its items done
    results = {}

    def caller(k):
        out = []
        lock = threading.Lock()

        def fn(i):
            with lock:
                out.append(i)

        for _ in range(20):
            threads.run_ranges(fn, 7, 2)
        results[k] = sorted(out)

    users = [threading.Thread(target=caller, args=(k,)) for k in range(3)]
    for t in users:
        t.start()
    for t in users:
        t.join(timeout=30)
    assert all(results[k] == sorted(list(range(7)) * 20) for k in range(3))


def test_nested_run_ranges_runs_on_the_pool_thread():
    # a call from a pool thread must not wait for the pool it occupies (no deadlock)
    inner = []

    def fn(i):
        threads.run_ranges(lambda k: inner.append((i, k)), 3, 2)

    threads.run_ranges(fn, 2, 2)
    assert sorted(inner) == [(i, k) for i in range(2) for k in range(3)]


@pytest.mark.parametrize("n_rows", [None, 8, 20, 200, 1000])
@pytest.mark.parametrize("n_cols", [1, 31, 70, 100, 600, 1000, 4096, 50000])
@pytest.mark.parametrize("n_threads", [1, 2, 3])
def test_column_ranges_cover_every_column_in_balanced_ranges(n_cols, n_threads, n_rows):
    bounds = cpu.column_ranges(n_cols, n_threads, n_rows)
    # contiguous, in order, every column once
    assert bounds[0][0] == 0 and bounds[-1][1] == n_cols
    assert all(a[1] == b[0] for a, b in zip(bounds[:-1], bounds[1:], strict=True))
    widths = [c1 - c0 for c0, c1 in bounds]
    widest = cpu.CHUNK_COLUMNS
    if n_rows is not None:
        widest = max(cpu.CHUNK_COLUMNS, cpu.CHUNK_ELEMENTS // n_rows)
    assert 1 <= min(widths) and max(widths) <= min(widest, n_cols)
    assert max(widths) - min(widths) <= 1  # no narrow last range
    if len(bounds) > 1:
        assert min(widths) >= cpu.MIN_CHUNK_COLUMNS
    if n_threads > 1 and n_cols >= n_threads * cpu.MIN_CHUNK_COLUMNS:
        assert len(bounds) >= n_threads
        # balanced: the thread with the most ranges sweeps about n_cols / n_threads
        # columns (the old rule gave 600 columns on 2 threads ranges of 256: 512 vs 300)
        makespan = -(-len(bounds) // n_threads) * max(widths)
        assert makespan <= 1.1 * n_cols / n_threads + 1


def test_ranges_of_short_rows_are_wider():
    # few rows: a range holds up to CHUNK_ELEMENTS entries (n = 20: 3276 columns, so the
    # 1797 columns of an NMF W-step on digits are one range on one thread)
    assert cpu.column_ranges(1797, 1, 20) == [(0, 1797)]
    assert cpu.range_count(50000, 1, 20) == -(-50000 // (cpu.CHUNK_ELEMENTS // 20))
    assert cpu.range_count(50000, 1, 1000) == -(-50000 // cpu.CHUNK_COLUMNS)
    bounds, threads = cpu.plan(1797, 1.0, 2, 20)
    assert (bounds, threads) == ([(0, 1797)], 1)


def test_float32_ranges_are_twice_as_wide():
    # the budgets are bytes: a float32 range holds twice the float64 columns
    for n_rows in (None, 20, 200, 1000):
        assert cpu.max_chunk_columns(n_rows, 4) == 2 * cpu.max_chunk_columns(n_rows, 8)
    assert cpu.column_ranges(1000, 2, 200, 8) == [(0, 250), (250, 500), (500, 750), (750, 1000)]
    assert cpu.column_ranges(1000, 2, 200, 4) == [(0, 500), (500, 1000)]
    assert cpu.range_count(50000, 1, 1000, 4) == -(-50000 // (2 * cpu.CHUNK_COLUMNS))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sweep_state_plans_ranges_for_its_dtype(dtype, monkeypatch):
    seen = []
    real_plan = cpu.plan

    def spy(*args):
        seen.append(args)
        return real_plan(*args)

    monkeypatch.setattr(cpu, "plan", spy)
    rng = np.random.default_rng(0)
    c = rng.uniform(size=(40, 30))
    a, r = (c.T @ c).astype(dtype), rng.normal(size=(30, 100)).astype(dtype)
    mg.solve(a, r, mg.NonNeg(), tol=0, max_iter=2)
    assert seen and all(args[4] == np.dtype(dtype).itemsize for args in seen)


def test_head_start_widens_the_callers_range_by_the_pool_start_delay(monkeypatch):
    monkeypatch.setattr(cpu, "start_delay", lambda: 30e-6)
    halves = [(0, 512), (512, 1000)]
    # 30 us at 1 us a column: 30 columns, in whole tiles of 32
    assert cpu.head_start(halves, 32, 1e-6) == [(0, 544), (544, 1000)]
    assert cpu.head_start(halves, 1, 1e-6) == [(0, 542), (542, 1000)]
    assert cpu.head_start(halves, 32, 3e-6) == halves  # 10 columns: no whole tile
    quarters = [(0, 256), (256, 512), (512, 752), (752, 1000)]
    assert cpu.head_start(quarters, 16, 1e-6) == [(0, 288), (288, 512), *quarters[2:]]
    # not measured yet, or one range: unchanged
    assert cpu.head_start(halves, 32, None) == halves
    assert cpu.head_start([(0, 1000)], 1, 1e-6) == [(0, 1000)]
    # a wake-up outlier moves at most half of the second range
    monkeypatch.setattr(cpu, "start_delay", lambda: 1.0)
    assert cpu.head_start(halves, 32, 1e-6) == [(0, 736), (736, 1000)]
    assert cpu.head_start(halves, 1, 1e-6) == [(0, 756), (756, 1000)]


def test_head_start_keeps_its_measurement_when_columns_retire(monkeypatch):
    # the measured time per column belongs to the kind of call, not to one plan: after a
    # retirement (a new width, a new plan) the next sweep still gets its head start
    monkeypatch.setattr(threads, "MIN_FLOPS_PER_THREAD", 1.0)  # two threads even when small
    # the sleeping pool's sweeps (the spinning team's helpers start at once: no head start)
    monkeypatch.setattr(cpu, "USE_TEAM", False)
    seen = []
    real = cpu.head_start
    monkeypatch.setattr(cpu, "head_start", lambda b, al, p: seen.append(p) or real(b, al, p))
    a, rhs = _problem(40, 300, np.float64)
    state = _state(a, rhs, np.zeros_like(rhs), mg.NonNeg())
    state.max_threads = 2
    state.sweep()
    state.sweep()
    keep = np.ones(300, dtype=bool)
    keep[::3] = False
    state.retire(keep)
    state.sweep()
    assert seen[0] is None  # nothing measured before the first sweep
    assert all(p is not None and p > 0 for p in seen[1:]) and len(seen) == 3


def test_start_delay_is_the_median_of_the_recent_jobs(monkeypatch):
    monkeypatch.setattr(threads, "_START_DELAYS", [])
    assert threads.start_delay() == 0.0
    for _ in range(threads.START_DELAY_SAMPLES - 1):
        threads._note_start_delay(20e-6)
    threads._note_start_delay(5e-3)  # a VM's rare late wake-up
    assert threads.start_delay() == 20e-6
    for _ in range(threads.START_DELAY_SAMPLES):
        threads._note_start_delay(40e-6)  # only the last samples count
    assert threads.start_delay() == 40e-6


def test_run_ranges_measures_how_late_the_pool_starts(monkeypatch):
    monkeypatch.setattr(threads, "_START_DELAYS", [])
    threads.run_ranges(lambda i: time.sleep(0.002), 4, 2)
    assert 0.0 < threads.start_delay() < 1.0
    threads.run_ranges(lambda i: None, 3, 1)  # one thread: no pool, nothing measured
    assert len(threads._START_DELAYS) == 1


def test_psd_test_factors_on_one_blas_thread_and_restores_it(monkeypatch):
    # a threaded dpotrf leaves OpenBLAS threads spinning beside the sweeps that follow
    from scipy.linalg import lapack

    from msm_gpu._input import validation

    controllers = threads._numba_blas_controllers()
    saved = [c.num_threads for c in controllers]
    seen = []
    real = lapack.dpotrf

    def spy(*args, **kwargs):
        seen.append([c.num_threads for c in controllers])
        return real(*args, **kwargs)

    monkeypatch.setattr(lapack, "dpotrf", spy)
    try:
        for ctl in controllers:
            ctl.set_num_threads(2)
        rng = np.random.default_rng(0)
        g = rng.uniform(size=(50, 40))
        validation.check_psd(g.T @ g)
        assert seen == [[1] * len(controllers)]
        assert [c.num_threads for c in controllers] == [2] * len(controllers)
    finally:
        for ctl, n in zip(controllers, saved, strict=True):
            ctl.set_num_threads(n)


def test_serial_blas_is_threadpoolctls_limit_and_restores_the_threads():
    # the host BLAS on one thread inside, its own count again after (also when the body
    # raises, and when nested), the libraries threadpoolctl's limit(user_api="blas") sets
    limited = [
        c.filepath for c in threads.blas_controller().lib_controllers if c.user_api == "blas"
    ]
    controllers = threads._host_blas_controllers()
    assert [c.filepath for c in controllers] == limited and controllers
    saved = [c.num_threads for c in controllers]
    try:
        for ctl in controllers:
            ctl.set_num_threads(2)
        with threads.serial_blas():
            assert [c.num_threads for c in controllers] == [1] * len(controllers)
            with threads.serial_blas():
                assert [c.num_threads for c in controllers] == [1] * len(controllers)
            assert [c.num_threads for c in controllers] == [1] * len(controllers)
        assert [c.num_threads for c in controllers] == [2] * len(controllers)
        with pytest.raises(RuntimeError), threads.serial_blas():
            raise RuntimeError("inside")
        assert [c.num_threads for c in controllers] == [2] * len(controllers)
    finally:
        for ctl, n in zip(controllers, saved, strict=True):
            ctl.set_num_threads(n)


def test_small_work_runs_on_one_thread():
    assert threads.sweep_threads(2.0 * 100 * 100 * 50, 2, 8) == 1  # README example
    assert threads.sweep_threads(2.0 * 1000 * 1000 * 4096, 16, 2) == 2
    assert threads.sweep_threads(2.0 * 1000 * 1000 * 4096, 16, 1) == 1  # the cap wins
    assert threads.sweep_threads(1e12, 3, 8) == 3  # never more threads than ranges


def test_thread_cap_honours_the_environment(monkeypatch):
    monkeypatch.delenv("NUMBA_NUM_THREADS", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert threads.thread_cap() == 1
    assert threads.thread_cap(3) == 3  # an explicit threads= wins
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert threads.thread_cap() == threads.available_cpus()


# -- objective -----------------------------------------------------------------------------


def _state(a, rhs, x0, penalty, panel=16):
    split = make_splitting(np.diag(a).astype(np.float64), 1.0, 0.01, penalty.is_convex)
    n = a.shape[0]
    return CpuBackend().start(a, rhs, x0, split, penalty.table(n, a.dtype), penalty.code, panel)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("penalty", PENALTIES, ids=repr)
def test_objective_terms_match_the_reference_formulas(penalty, dtype):
    a, rhs = _problem(37, 300, dtype)
    rng = np.random.default_rng(4)
    x = rng.uniform(-0.5, 0.5, size=rhs.shape)
    x[:, :150] = rng.uniform(0.0, 0.2, size=(37, 150))  # inside every penalty's domain
    x[rng.uniform(size=x.shape) < 0.3] = 0.0
    x = x.astype(dtype)
    with _state(a, rhs, x, penalty) as state:
        fun, hsum = state.objective_terms()
    x64, a64, r64 = (v.astype(np.float64) for v in (x, a, rhs))
    h_ref = penalty.value(x64).sum(axis=0)
    f_ref = 0.5 * np.einsum("ij,ij->j", x64, a64 @ x64) + np.einsum("ij,ij->j", x64, r64) + h_ref
    finite = np.isfinite(f_ref)
    np.testing.assert_array_equal(np.isfinite(fun), finite)  # inf outside dom h
    assert finite.any()
    scale = np.abs(f_ref[finite]).max()
    tol = (1e-12 if dtype == np.float64 else 1e-5) * scale
    np.testing.assert_allclose(fun[finite], f_ref[finite], atol=tol)
    np.testing.assert_allclose(hsum[finite], h_ref[finite], atol=tol)


def test_objective_at_zero_needs_no_product_and_is_exact():
    a, rhs = _problem(20, 10, np.float64)
    with _state(a, rhs, np.zeros_like(rhs), mg.NonNeg()) as state:
        state._a = None  # any product with A would now fail
        fun, hsum = state.objective_terms()
    assert np.array_equal(fun, np.zeros(10)) and np.array_equal(hsum, np.zeros(10))
    # 0 infeasible: F(0) = inf, computed, not assumed
    with _state(a, rhs, np.zeros_like(rhs), mg.Box(0.1, 1.0)) as state:
        fun, _ = state.objective_terms()
    assert np.all(np.isinf(fun))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("penalty", PENALTIES, ids=repr)
def test_tracked_final_objective_equals_the_direct_one(penalty, dtype):
    """result.fun is the objective tracked through the sweeps (no final product with A):
    it must equal F(result.x) computed directly, after many iterations and retirements."""
    a, rhs = _problem(45, 120, dtype, seed=3)
    x0 = np.random.default_rng(5).uniform(0, 0.2, size=rhs.shape).astype(dtype)
    res = mg.solve(a, rhs, penalty, x0=x0, tol=1e-5, max_iter=400, panel=16)
    x64 = res.x.astype(np.float64)
    a64, r64 = a.astype(np.float64), rhs.astype(np.float64)
    direct = (
        0.5 * np.einsum("ij,ij->j", x64, a64 @ x64)
        + np.einsum("ij,ij->j", x64, r64)
        + penalty.value(x64).sum(axis=0)
    )
    tol = (1e-10 if dtype == np.float64 else 2e-5) * max(1.0, np.abs(direct).sum())
    assert abs(res.fun - direct.sum()) <= tol
    assert res.objective[-1] == pytest.approx(res.fun, rel=0, abs=tol)
    assert res.x.flags.writeable and res.x.flags.owndata


# -- the threads= option and the user's arrays ----------------------------------------------


def test_threads_option_is_validated():
    a, rhs = _problem(10, 3, np.float64)
    with pytest.raises(ValueError, match="threads"):
        mg.solve(a, rhs, mg.NonNeg(), threads=0)
    with pytest.raises(TypeError, match="threads"):
        mg.solve(a, rhs, mg.NonNeg(), threads=1.5)
    with pytest.raises(TypeError, match="threads"):
        mg.nnls(np.eye(3), np.ones(3), threads="2")


@pytest.mark.parametrize("dtype", DTYPES)
def test_one_thread_and_several_threads_agree(dtype, monkeypatch):
    monkeypatch.setattr(threads, "MIN_FLOPS_PER_THREAD", 1.0)  # use the pool even when small
    a, rhs = _problem(70, 333, dtype)
    one = mg.solve(a, rhs, mg.L1(0.05), tol=0, max_iter=30, threads=1)
    many = mg.solve(a, rhs, mg.L1(0.05), tol=0, max_iter=30, threads=3)
    rtol = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(many.x, one.x, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(many.objective, one.objective, rtol=rtol)


def test_inputs_are_read_not_copied_and_never_written():
    a, rhs = _problem(30, 40, np.float64)
    x0 = np.full_like(rhs, 0.1)
    keep = [v.copy() for v in (a, rhs, x0)]
    res = mg.solve(a, rhs, mg.NonNeg(), x0=x0, tol=0, max_iter=5)
    for v, k in zip((a, rhs, x0), keep, strict=True):
        np.testing.assert_array_equal(v, k)
        assert v.flags.writeable  # the user's arrays keep their flags
        assert not np.shares_memory(res.x, v)
    be = CpuBackend()
    view = be.asarray_readonly(rhs, np.float64)
    assert np.shares_memory(view, rhs) and not view.flags.writeable
    with pytest.raises(ValueError):
        view[0, 0] = 1.0
    converted = be.asarray_readonly(rhs, np.float32)  # a conversion is a new array
    assert not np.shares_memory(converted, rhs)


# -- compiled-kernel cache -------------------------------------------------------------------


def test_kernels_are_cached_outside_the_package():
    import msm_gpu
    from msm_gpu.backends.cpu import kernels as cpu_kernels

    package = os.path.dirname(os.path.abspath(msm_gpu.__file__))
    for kernel in (cpu_kernels.sweep_columns, cpu_kernels.objective_columns):
        path = os.path.abspath(kernel._cache._cache_path)
        assert not path.startswith(package + os.sep), path
        assert path.startswith(os.path.abspath(jit.cache_dir()) + os.sep), path


def test_the_cache_folder_changes_with_any_source_file(tmp_path):
    # kernels inline helpers from other files, which Numba's per-file check does not see:
    # a folder per version of the sources cannot serve stale machine code
    for tree in ("a", "b"):
        (tmp_path / tree / "sub").mkdir(parents=True)
        (tmp_path / tree / "caller.py").write_text("def f(): return helper()\n")
        (tmp_path / tree / "sub" / "helper.py").write_text("def helper(): return 1\n")
    assert jit.tree_digest(tmp_path / "a") == jit.tree_digest(tmp_path / "b")
    (tmp_path / "b" / "sub" / "helper.py").write_text("def helper(): return 2\n")
    assert jit.tree_digest(tmp_path / "a") != jit.tree_digest(tmp_path / "b")
    assert jit.cache_dir().endswith(jit.source_digest())


def test_numba_cache_dir_of_the_user_is_respected(tmp_path):
    code = (
        "from msm_gpu.backends.cpu import kernels as cpu_kernels, jit; "
        "from numba.core import config; "
        "print(cpu_kernels.sweep_columns._cache._cache_path); print(repr(config.CACHE_DIR))"
    )
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "user"))
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[0].startswith(str(tmp_path / "user"))
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["MSM_GPU_CACHE_DIR"] = str(tmp_path / "ours")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[0].startswith(str(tmp_path / "ours"))
    assert out[1] == "''"  # Numba's global setting is restored for other libraries


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(("n", "panel"), [(10, p) for p in (1, 3, 4, 7, 10, 12)] + [(203, 8)])
def test_fold_matrix_matches_its_definition(n, panel, dtype, order):
    # base.fold_matrix: strictly lower part of every diagonal panel block zeroed, the
    # diagonal replaced by C (in A's dtype); everything else is A (brute force, entry by
    # entry); a C-ordered copy whatever A's layout
    from msm_gpu.backends.base import fold_matrix

    rng = np.random.default_rng(panel)
    a = rng.normal(size=(n, n))
    a = np.asarray(a + a.T, dtype=dtype, order=order)
    c_diag = rng.normal(size=n)
    before = a.copy()
    folded = fold_matrix(a, c_diag, panel)
    want = np.array(a, dtype=dtype)
    for i in range(n):
        for j in range(n):
            if i == j:
                want[i, j] = c_diag[i]
            elif i > j and i // panel == j // panel:
                want[i, j] = 0.0
    assert folded.dtype == dtype and folded.flags.c_contiguous
    np.testing.assert_array_equal(folded, want)
    np.testing.assert_array_equal(a, before)


# -- aligned host arrays (arrays.HOST_ALIGN) ------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", [(7,), (200, 1000), (3, 5), (0, 4)])
def test_aligned_arrays_start_on_a_vector_boundary(shape, dtype):
    from msm_gpu.arrays import HOST_ALIGN, aligned_copy, aligned_empty

    x = aligned_empty(shape, dtype)
    assert x.shape == shape and x.dtype == dtype and x.flags.c_contiguous and x.flags.writeable
    assert x.size == 0 or x.ctypes.data % HOST_ALIGN == 0
    source = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)
    y = aligned_copy(source[..., ::-1], dtype)  # any layout in, C-ordered out
    np.testing.assert_array_equal(y, source[..., ::-1].astype(dtype))
    assert y.flags.c_contiguous and (y.size == 0 or y.ctypes.data % HOST_ALIGN == 0)
    assert not np.shares_memory(y, source)


@pytest.mark.parametrize("order", ["C", "F"])
def test_retained_arrays_reuse_memory_only_when_nothing_holds_it(order):
    # the kept buffer is handed out again once every array made from it is gone; while
    # one is alive (a view of it included), the next array is fresh memory: no two live
    # arrays ever overlap
    from msm_gpu.arrays import (
        HOST_ALIGN,
        RETAIN_MAX_BYTES,
        release_retained,
        retained_empty,
    )

    release_retained()
    shape = (500, 600)
    x = retained_empty(shape, np.float64, order=order)
    assert x.shape == shape and x.ctypes.data % HOST_ALIGN == 0
    assert x.flags.f_contiguous if order == "F" else x.flags.c_contiguous
    address = x.ctypes.data
    y = retained_empty(shape, np.float64, order=order)
    assert not np.shares_memory(x, y)
    view = x[:, :3]
    del x
    z = retained_empty((20, 30), np.float32, order=order)  # a view of x still alive
    assert not np.shares_memory(z, view)
    del view, y, z
    again = retained_empty((20, 30), np.float32, order=order)
    assert again.ctypes.data == address  # the kept pages again
    bigger = retained_empty((700, 700), np.float64, order=order)  # again alive: fresh
    assert not np.shares_memory(bigger, again)
    del again, bigger
    huge = retained_empty(RETAIN_MAX_BYTES // 8, np.float64)
    assert retained_empty(10, np.float64).ctypes.data == address  # huge ones are never kept
    del huge
    release_retained()


def test_retained_buffer_is_per_thread():
    import threading

    from msm_gpu.arrays import release_retained, retained_empty

    release_retained()
    seen = {}
    both_alive = threading.Barrier(2)  # a finished thread's buffer is freed and reusable

    def grab(name, wait=True):
        x = retained_empty((100, 100), np.float64)
        seen[name] = x.ctypes.data
        del x
        x = retained_empty((100, 100), np.float64)
        seen[name + " again"] = x.ctypes.data
        if wait:
            both_alive.wait(timeout=60)

    threads = [threading.Thread(target=grab, args=(f"t{k}",)) for k in range(2)]
    grab("main", wait=False)
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name in ("main", "t0", "t1"):
        assert seen[name] == seen[name + " again"]
    assert len({seen["main"], seen["t0"], seen["t1"]}) == 3


def _misaligned(x):
    """A C-ordered copy of x starting 16 bytes past a 64-byte boundary."""
    raw = np.empty(x.nbytes + 128, dtype=np.uint8)
    start = -raw.ctypes.data % 64 + 16
    out = raw[start : start + x.nbytes].view(x.dtype).reshape(x.shape)
    out[...] = x
    return out


@pytest.mark.parametrize("x0_given", [True, False])
def test_solve_sweeps_an_aligned_iterate(x0_given, monkeypatch):
    from msm_gpu.arrays import HOST_ALIGN

    rng = np.random.default_rng(0)
    w = rng.standard_normal((60, 40))
    a, r = w.T @ w, _misaligned(-w.T @ rng.standard_normal((60, 50)))
    x0 = _misaligned(np.abs(rng.standard_normal((40, 50)))) if x0_given else None
    seen = []
    start = cpu.CpuBackend.start

    def spy(self, *args, **kwargs):
        state = start(self, *args, **kwargs)
        seen.append((state._x.ctypes.data % HOST_ALIGN, state._r_full.ctypes.data % HOST_ALIGN))
        return state

    monkeypatch.setattr(cpu.CpuBackend, "start", spy)
    out = mg.solve(a, r, mg.NonNeg(), x0=x0, tol=0, max_iter=3)
    assert seen and all(offsets == (0, 0) for offsets in seen)
    assert np.all(out.x >= 0) and np.isfinite(out.fun)


@pytest.mark.parametrize("c", [0, 1, 2, 7, 100, 1001])
@pytest.mark.parametrize("n_threads", [1, 2, 4])
def test_column_ranges_cut_every_column_once(c, n_threads):
    chunks, bounds = threads.column_ranges(c, n_threads)
    assert bounds.dtype == np.int64 and bounds.shape == (chunks + 1,)
    assert bounds[0] == 0 and bounds[-1] == c and np.all(np.diff(bounds) >= 0)
    expected = 1 if n_threads == 1 or c <= 1 else min(c, 8 * n_threads)
    assert chunks == expected
    if chunks > 1:  # balanced: no range more than one column longer than another
        assert np.ptp(np.diff(bounds)) <= 1
