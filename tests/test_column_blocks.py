"""Batches solved in column blocks: bounded workspace, answers independent of the batch.

Every column of X is its own problem, so the answer for column j must not depend on the
other columns, on how the batch is cut into blocks, on the thread that runs it or on
the process.  Truth: the same call on column j alone, and SciPy's ``nnls``.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import threading
import tracemalloc

import numpy as np
import pytest
from scipy.optimize import nnls as scipy_nnls

import msm_gpu as mg
from msm_gpu import column_blocks, run
from msm_gpu._input import memory

PENALTIES = [
    mg.NonNeg(),
    mg.Zero(),
    mg.L1(2.0),
    mg.NonNegL1(1.0),
    mg.Box(-0.2, 0.3),
    mg.L0(0.5),
    mg.Lp(0.5, 0.5),
]


def _data(m=40, n=8, r=300, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    C = rng.uniform(size=(m, n)).astype(dtype)
    D = (C @ rng.standard_normal((n, r)) + 0.3 * rng.standard_normal((m, r))).astype(dtype)
    return C, D


# -- the plan ---------------------------------------------------------------------------


def test_block_width_follows_the_budget():
    per_column = memory.column_bytes(20, 200, 8)
    assert per_column == 8 * (memory.WORDS_PER_N * 20 + memory.WORDS_PER_M * 200)
    assert memory.block_columns(10**6, per_column, 100 * per_column) == 100
    assert memory.block_columns(50, per_column, 100 * per_column) == 50  # never above r
    assert memory.block_columns(50, per_column, 1) == 1  # never below one


def test_default_budget_is_a_share_of_free_memory(monkeypatch):
    monkeypatch.setattr(memory, "free_host_bytes", lambda: 40 * 2**20)
    assert memory.workspace_budget(None, on_device=False) == 10 * 2**20
    monkeypatch.setattr(memory, "free_host_bytes", lambda: 64 * 2**30)
    assert memory.workspace_budget(None, on_device=False) == 16 * 2**30  # no fixed cap
    monkeypatch.setattr(memory, "free_host_bytes", lambda: None)
    assert memory.workspace_budget(None, on_device=False) == memory.DEFAULT_WORKSPACE_BYTES
    assert memory.workspace_budget(12345, on_device=False) == 12345


def test_a_problem_that_fits_comfortably_is_one_block(monkeypatch):
    # the unmixing shape of the README's table: C 200 x 20, 100 000 right-hand sides, about
    # 100 MB of workspace, on a machine with 8 GiB free: one block (it was five)
    monkeypatch.setattr(memory, "free_host_bytes", lambda: 8 * 2**30)
    p = column_blocks.plan(np.empty((200, 100_000)), n=20, m=200, max_memory=None, on_device=False)
    assert p.n_blocks == 1


def test_a_default_split_keeps_gemm_wide_blocks(monkeypatch):
    # little memory free: the default still cuts blocks of MIN_BLOCK_COLUMNS or more, while
    # a budget the user sets is obeyed to the column
    monkeypatch.setattr(memory, "free_host_bytes", lambda: 2**20)
    rhs = np.empty((200, 10_000))
    p = column_blocks.plan(rhs, n=20, m=200, max_memory=None, on_device=False)
    assert p.width == memory.MIN_BLOCK_COLUMNS and p.n_blocks > 1
    per_column = memory.column_bytes(20, 200, 8)
    p = column_blocks.plan(rhs, n=20, m=200, max_memory=10 * per_column, on_device=False)
    assert p.width == 10


def test_free_host_memory_is_read():
    free = memory.free_host_bytes()
    assert free is None or free > 0


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (-1, ValueError),
        (0, ValueError),
        (True, TypeError),
        ("1GB", TypeError),
        (np.nan, ValueError),
    ],
)
def test_bad_max_memory_is_refused_by_name(value, error):
    C, D = _data(r=5)
    with pytest.raises(error, match="max_memory"):
        mg.nnls(C, D, max_memory=value)


# -- answers independent of the batch ----------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("penalty", PENALTIES, ids=repr)
def test_block_size_does_not_change_the_answer(penalty, dtype):
    """Bitwise on the CPU: a block runs the same operations on each column.

    Except float32 Lp: single-precision GEMM rounds differently for different batch
    widths (an ulp), and the nonconvex Lp sweeps carry that to the float32 stopping
    tolerance (the same happens between D[:, :37] and D without any blocks)."""
    C, D = _data(dtype=dtype)
    whole = mg.least_squares(C, D, penalty)
    cut = mg.least_squares(C, D, penalty, max_memory=memory.column_bytes(8, 40, 8) * 37)
    assert whole.info["n_blocks"] == 1 and cut.info["n_blocks"] == 9
    assert cut.info["block_columns"] == 37
    if dtype == np.float32 and isinstance(penalty, mg.Lp):
        np.testing.assert_allclose(cut.x, whole.x, rtol=1e-4, atol=1e-4)
        return
    np.testing.assert_array_equal(cut.x, whole.x)
    np.testing.assert_array_equal(cut.converged_columns, whole.converged_columns)
    assert cut.fun == pytest.approx(whole.fun, rel=1e-12)
    assert cut.x.dtype == whole.x.dtype == dtype


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("penalty", PENALTIES, ids=repr)
def test_column_equals_the_column_solved_alone(penalty, dtype):
    C, D = _data(dtype=dtype, r=60)
    batch = mg.least_squares(C, D, penalty, max_memory=memory.column_bytes(8, 40, 8) * 16)
    tol = 1e-12 if dtype == np.float64 else 1e-4 if isinstance(penalty, mg.Lp) else 1e-5
    for j in (0, 17, 59):
        alone = mg.least_squares(C, D[:, [j]], penalty)
        scale = max(1.0, float(np.abs(alone.x).max()))
        np.testing.assert_allclose(batch.x[:, [j]], alone.x, rtol=tol, atol=tol * scale)


def test_blocked_nnls_matches_scipy_per_column():
    C, D = _data(r=120)
    res = mg.nnls(C, D, max_memory=memory.column_bytes(8, 40, 8) * 25)
    assert res.info["n_blocks"] == 5 and res.converged
    for j in range(0, 120, 7):
        ref, _ = scipy_nnls(C, D[:, j])
        np.testing.assert_allclose(res.x[:, j], ref, rtol=1e-10, atol=1e-12)


def test_solve_in_blocks_equals_one_block_for_plain_msm():
    C, D = _data()
    A, R = C.T @ C, -(C.T @ D)
    whole = mg.solve(A, R, mg.NonNeg(), finish=None)
    cut = mg.solve(A, R, mg.NonNeg(), finish=None, max_memory=memory.column_bytes(8, 0, 8) * 50)
    assert cut.info["n_blocks"] == 6
    np.testing.assert_array_equal(cut.x, whole.x)
    assert cut.n_iter == whole.n_iter
    np.testing.assert_array_equal(cut.n_iter_columns, whole.n_iter_columns)
    # the history is the sum over blocks, each frozen after its own last iteration
    np.testing.assert_allclose(cut.objective, whole.objective, rtol=1e-12)


def test_per_column_info_is_whole_and_counters_add_up():
    C, D = _data(r=100)
    res = mg.nnls(C, D, max_memory=memory.column_bytes(8, 40, 8) * 30)
    assert res.info["n_blocks"] == 4
    assert res.info["kkt_residual"].shape == (100,)
    assert res.info["finish_accepted"].shape == (100,)
    assert res.converged_columns.shape == (100,) and res.n_iter_columns.shape == (100,)


def test_inputs_are_not_modified():
    C, D = _data(r=90)
    x0 = np.abs(np.random.default_rng(1).standard_normal((8, 90)))
    copies = C.copy(), D.copy(), x0.copy()
    mg.nnls(C, D, x0=x0, max_memory=memory.column_bytes(8, 40, 8) * 20)
    for before, after in zip(copies, (C, D, x0), strict=True):
        np.testing.assert_array_equal(before, after)


def test_sparse_right_hand_sides_in_blocks():
    sparse = pytest.importorskip("scipy.sparse")
    C, D = _data(r=80)
    D[np.abs(D) < 1.0] = 0.0
    whole = mg.nnls(C, D)
    for fmt in ("csc", "csr", "coo"):
        cut = mg.nnls(C, sparse.coo_matrix(D).asformat(fmt), max_memory=20 * 1024)
        assert cut.info["n_blocks"] > 1
        np.testing.assert_allclose(cut.x, whole.x, rtol=1e-12, atol=1e-14)


# -- bounded memory ------------------------------------------------------------------------


def _peak_extra(call):
    tracemalloc.start()
    try:
        res = call()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return res, peak - res.x.nbytes


def test_peak_memory_is_bounded_by_the_budget():
    """Beyond the answer, a blocked call uses about its budget; one block uses ~10x x."""
    rng = np.random.default_rng(0)
    C = rng.uniform(size=(60, 20))
    D = C @ rng.uniform(size=(20, 20000)) + 0.05 * rng.standard_normal((60, 20000))
    mg.nnls(C, D[:, :50])  # compiled before measuring
    budget = 2 * 2**20
    one, extra_one = _peak_extra(lambda: mg.nnls(C, D, max_memory=2**34))
    cut, extra_cut = _peak_extra(lambda: mg.nnls(C, D, max_memory=budget))
    assert one.info["n_blocks"] == 1 and cut.info["n_blocks"] > 1
    np.testing.assert_array_equal(cut.x, one.x)
    x_bytes = cut.x.nbytes  # 3.2 MB
    assert extra_one > 3 * x_bytes  # without blocks the workspace grows with r ...
    assert extra_cut <= 0.2 * x_bytes + 2 * budget  # ... with them it stays at the budget


# -- running out of memory, time, patience ------------------------------------------------


def test_a_block_that_runs_out_of_memory_is_split(monkeypatch):
    C, D = _data(r=64)
    whole = mg.nnls(C, D)
    real = run._least_squares_whole
    widths = []

    def small_memory(C, D, *args, **kwargs):
        widths.append(D.shape[1])
        if D.shape[1] > 10:
            raise MemoryError("simulated out of memory")
        return real(C, D, *args, **kwargs)

    monkeypatch.setattr(run, "_least_squares_whole", small_memory)
    res = mg.nnls(C, D, max_memory=memory.column_bytes(8, 40, 8) * 32)
    assert widths[:3] == [32, 16, 8]  # 32 fails, 16 fails, then blocks of 8
    np.testing.assert_array_equal(res.x, whole.x)
    assert res.info["n_blocks"] == 8


def test_a_column_that_never_fits_names_the_sizes(monkeypatch):
    C, D = _data(r=4)

    def no_memory(*args, **kwargs):
        raise MemoryError("simulated")

    monkeypatch.setattr(run, "_least_squares_whole", no_memory)
    with pytest.raises(MemoryError, match="bytes of workspace per column"):
        mg.nnls(C, D, max_memory=1)


def test_time_limit_counts_for_the_whole_batch(monkeypatch):
    C, D = _data(r=50)
    ticks = iter(range(10**6))
    monkeypatch.setattr(column_blocks.time, "perf_counter", lambda: float(next(ticks)))
    x0 = np.full((8, 50), 0.25)
    res = mg.nnls(C, D, x0=x0, time_limit=2.5, max_memory=memory.column_bytes(8, 40, 8) * 10)
    assert 1 <= res.info["n_blocks"] < 5
    done = res.info["n_blocks"] * 10
    assert "time limit" in res.message
    assert not res.converged and not res.converged_columns[done:].any()
    np.testing.assert_array_equal(res.x[:, done:], x0[:, done:])


def test_callback_stop_ends_the_batch():
    C, D = _data(r=50)
    seen = []

    def stop_at_once(info):
        seen.append(info.x.shape)
        return True

    res = mg.least_squares(
        C,
        D,
        mg.L0(0.5),
        callback=stop_at_once,
        max_memory=memory.column_bytes(8, 40, 8) * 10,
    )
    assert res.info["n_blocks"] == 1 and seen == [(8, 10)]  # a block's columns
    assert "stopped by callback" in res.message
    assert not res.converged_columns[10:].any()
    np.testing.assert_array_equal(res.x[:, 10:], 0.0)


def test_verbose_counts_columns_across_blocks(capsys):
    C, D = _data(r=30)
    mg.least_squares(C, D, mg.L0(0.5), verbose=True, max_memory=memory.column_bytes(8, 40, 8) * 10)
    out = capsys.readouterr()
    text = out.out + out.err
    assert "columns 10 of 30 done" in text and "columns 30 of 30 done" in text


# -- threads, processes, a busy neighbour ---------------------------------------------------


def _problem(seed):
    rng = np.random.default_rng(seed)
    C = rng.uniform(size=(30 + seed, 6 + seed % 4))
    D = rng.standard_normal((C.shape[0], 40))
    return C, D


def _nnls_x(seed):
    C, D = _problem(seed)
    return mg.nnls(C, D).x


def test_calls_from_many_threads_at_once():
    expected = [_nnls_x(s) for s in range(8)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        for _ in range(3):
            got = list(pool.map(_nnls_x, range(8)))
            for e, g in zip(expected, got, strict=True):
                np.testing.assert_array_equal(g, e)


def test_calls_beside_a_busy_blas_thread():
    stop = threading.Event()

    def busy():
        a = np.random.default_rng(0).standard_normal((300, 300))
        while not stop.is_set():
            a = np.tanh(a @ a.T / 300.0)

    expected = _nnls_x(3)
    worker = threading.Thread(target=busy)
    worker.start()
    try:
        for _ in range(3):
            np.testing.assert_array_equal(_nnls_x(3), expected)
    finally:
        stop.set()
        worker.join()


def test_calls_from_a_process_pool():
    expected = [_nnls_x(s) for s in range(3)]
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=2, mp_context=ctx) as pool:
        got = list(pool.map(_nnls_x, range(3)))
    for e, g in zip(expected, got, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-13, atol=1e-15)


def test_calls_from_joblib_workers():
    joblib = pytest.importorskip("joblib")
    expected = [_nnls_x(s) for s in range(3)]
    got = joblib.Parallel(n_jobs=2)(joblib.delayed(_nnls_x)(s) for s in range(3))
    for e, g in zip(expected, got, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-13, atol=1e-15)


def test_small_batches_do_not_ask_for_free_memory(monkeypatch):
    def asked():
        raise AssertionError("free memory queried for a small batch")

    monkeypatch.setattr(memory, "free_host_bytes", asked)
    C, D = _data(r=50)
    res = mg.nnls(C, D)
    assert res.info["n_blocks"] == 1 and res.info["block_columns"] == 50
    big = memory.SMALL_BATCH_BYTES // memory.column_bytes(8, 40, 8) + 1
    with pytest.raises(AssertionError, match="free memory queried"):
        column_blocks.plan(np.empty((40, big)), n=8, m=40, max_memory=None, on_device=False)
