"""Stopping rules, active-column freezing, result object, and every bad input."""

from __future__ import annotations

import time

import numpy as np
import pytest
from conftest import random_psd

import msm_gpu as mg


@pytest.fixture
def problem(rng):
    a = random_psd(rng, 12)
    r = rng.normal(size=(12, 5))
    return a, r


def test_tol_zero_runs_exactly_max_iter(problem):
    a, r = problem
    res = mg.solve(a, r, mg.NonNeg(), tol=0, max_iter=37, finish=None)
    assert res.n_iter == 37
    assert len(res.objective) == 38
    assert not res.converged
    assert "max_iter" in res.message
    np.testing.assert_array_equal(res.n_iter_columns, 37)


def test_max_iter_zero_returns_x0(problem):
    a, r = problem
    x0 = np.abs(np.ones_like(r))
    res = mg.solve(a, r, mg.NonNeg(), x0=x0, max_iter=0, finish=None)
    np.testing.assert_array_equal(res.x, x0)
    assert res.n_iter == 0


@pytest.mark.parametrize("scale", [1.0, 1e-3])
def test_stopping_rule_per_column(problem, scale):
    a, r = problem
    r = r * scale  # ||x|| well below 1 too: the rule is relative, not max(1, ||x||)
    tol = 1e-6
    xs = []
    res = mg.solve(
        a, r, mg.NonNeg(), tol=tol, max_iter=5000, callback=lambda i: xs.append(i.x), finish=None
    )
    assert res.converged and "converged" in res.message
    # each column stopped at the first iteration k with
    # ||x_k - x_{k-1}|| <= tol max(||x_{k-1}||, ||r_c|| / tr(A))
    x_all = [np.zeros_like(r)] + xs
    for col in range(r.shape[1]):
        k_stop = res.n_iter_columns[col]
        floor = np.linalg.norm(r[:, col]) / np.trace(a)
        steps = [
            np.linalg.norm(x_all[k][:, col] - x_all[k - 1][:, col])
            <= tol * max(floor, np.linalg.norm(x_all[k - 1][:, col]))
            for k in range(1, k_stop + 1)
        ]
        assert steps[-1] and not any(steps[:-1])


def test_done_columns_are_frozen(rng):
    # column 0 is already optimal (R = 0, x = 0); column 1 needs many iterations
    a = random_psd(rng, 10)
    r = np.zeros((10, 2))
    r[:, 1] = rng.normal(size=10)
    xs = []
    res = mg.solve(
        a, r, mg.Zero(), tol=1e-10, max_iter=10000, callback=lambda i: xs.append(i.x), finish=None
    )
    assert res.n_iter_columns[0] == 1
    assert res.n_iter_columns[1] == res.n_iter > 5
    for x in xs:
        np.testing.assert_array_equal(x[:, 0], 0.0)


def test_time_limit_stops(rng):
    a = random_psd(rng, 30)
    r = rng.normal(size=(30, 4))
    res = mg.solve(a, r, mg.NonNeg(), tol=0, max_iter=10**9, time_limit=0.2, finish=None)
    assert "time_limit" in res.message
    assert 0 < res.n_iter < 10**9
    assert res.time < 5.0


def test_record_objective_false(problem):
    a, r = problem
    res = mg.solve(a, r, mg.NonNeg(), record_objective=False, tol=0, max_iter=5)
    assert res.objective.size == 0
    assert np.isfinite(res.fun)


def test_callback_can_stop(problem):
    a, r = problem
    seen = []

    def stop_at_three(info):
        seen.append((info.n_iter, info.fun, info.n_active))
        return info.n_iter == 3

    res = mg.solve(a, r, mg.NonNeg(), tol=0, max_iter=100, callback=stop_at_three)
    assert res.n_iter == 3 and res.message == "stopped by callback"
    assert [s[0] for s in seen] == [1, 2, 3]

    def raise_stop(info):
        raise StopIteration

    assert mg.solve(a, r, mg.NonNeg(), tol=0, max_iter=100, callback=raise_stop).n_iter == 1


def test_infeasible_start_is_reanchored(problem):
    a, r = problem
    x0 = -np.ones_like(r)  # outside dom h of NonNeg: F(x0) = inf
    res = mg.solve(a, r, mg.NonNeg(), x0=x0, tol=0, max_iter=4)
    assert res.objective[0] == np.inf
    assert np.all(np.isfinite(res.objective[1:]))
    assert np.all(np.diff(res.objective[1:]) <= 1e-12)


def test_result_fields(problem):
    a, r = problem
    res = mg.solve(a, r, mg.L1(0.1), max_iter=50)
    assert res.backend == "cpu" and res.method == "msm"
    assert res.nit == res.n_iter and res.success == res.converged
    assert res.info["omega"] == 1.0 and res.info["theta"] == 0.01 and res.info["delta"] > 0
    assert set(res.timings) == {"setup", "iterations", "finish"}  # finish="auto" (default)
    assert res.info["kkt_residual"].shape == (res.x.shape[1],)
    assert "SolveResult" in repr(res)


def test_inputs_are_never_modified(problem, rng):
    a, r = problem
    x0 = rng.normal(size=r.shape)
    copies = [a.copy(), r.copy(), x0.copy()]
    for pen in (mg.NonNeg(), mg.L0(0.1), mg.Zero()):
        mg.solve(a, r, pen, x0=x0, max_iter=20)
    c = rng.normal(size=(20, 12))
    d = rng.normal(size=(20, 5))
    cd = [c.copy(), d.copy()]
    mg.nnls(c, d, x0=np.abs(x0), max_iter=20)
    for before, after in zip(copies + cd, [a, r, x0, c, d], strict=True):
        np.testing.assert_array_equal(before, after)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("tol", [0.0, 1e-6])
@pytest.mark.parametrize("penalty", [mg.NonNeg(), mg.Box(-1.0, 10.0)])
def test_x0_is_never_swept_in_place(problem, rng, dtype, tol, penalty):
    # the solver sweeps its own scaled copy of x0 in place (x0_owned): never the user's,
    # also where the scaling is the identity (max |R| / max |A| a power of two near 1).
    # NonNeg with tol > 0 goes straight to the active set (no sweep); a box around 0
    # sweeps before its finish (the warm-up pass that hands x0 over)
    a, r = problem
    r = r * (np.abs(a).max() / np.abs(r).max())  # max |R| = max |A|: X is not rescaled
    a, r = a.astype(dtype), r.astype(dtype)
    for scale in (1.0, 2.0**-3):
        x0 = (scale * np.abs(rng.normal(size=r.shape))).astype(dtype)
        before = x0.copy()
        res = mg.solve(a, r, penalty, x0=x0, tol=tol, max_iter=5)
        np.testing.assert_array_equal(x0, before)
        assert not np.shares_memory(res.x, x0)
        if type(penalty) is mg.Box and penalty.lb < 0:  # (NonNeg is a Box too)
            assert res.n_iter > 0  # the sweeps ran


def test_zero_iterations_return_x0_and_its_objective(problem, rng):
    # max_iter = 0: no sweep may run, not even the first one that carries F(X_0)
    a, r = problem
    x0 = np.abs(rng.normal(size=r.shape))
    res = mg.solve(a, r, mg.L1(0.1), x0=x0, tol=0, max_iter=0)
    np.testing.assert_array_equal(res.x, x0)
    direct = 0.5 * np.sum(x0 * (a @ x0)) + np.sum(x0 * r) + 0.1 * np.abs(x0).sum()
    assert res.objective.shape == (1,)
    assert res.objective[0] == pytest.approx(direct, rel=1e-12)


def test_penalty_default_is_zero(problem):
    a, r = problem
    res = mg.solve(a, r, tol=1e-12, max_iter=100000)
    np.testing.assert_allclose(res.x, np.linalg.solve(a, -r), rtol=1e-7, atol=1e-8)


def test_zero_diagonal_needs_theta():
    a = np.array([[0.0, 0.0], [0.0, 1.0]])
    r = np.array([0.0, -1.0])
    with pytest.raises(ValueError, match=r"A\[0, 0\].*theta"):
        mg.solve(a, r, mg.NonNeg(), theta=0.0)
    res = mg.solve(a, r, mg.NonNeg(), theta=0.01, tol=1e-12)
    np.testing.assert_allclose(res.x, [0.0, 1.0], atol=1e-9)


def test_convergence_condition_is_enforced_with_opt_out(problem):
    a, r = problem
    # nonconvex theorem: delta = min(theta/omega + (1-omega)/omega A_jj) <= 0 for omega=1.5
    with pytest.raises(ValueError, match="delta") as info:
        mg.solve(a, r, mg.L0(0.1), omega=1.5, theta=0.0)
    assert "check_convergence=False" in str(info.value)
    res = mg.solve(a, r, mg.L0(0.1), omega=1.5, theta=0.0, check_convergence=False, max_iter=5)
    assert res.n_iter >= 1
    # the convex condition allows the same setting
    mg.solve(a, r, mg.NonNeg(), omega=1.5, theta=0.0, max_iter=5)


def test_per_row_box_bounds(rng):
    a = random_psd(rng, 6)
    r = rng.normal(size=(6, 3)) * 10
    lb = np.array([0.0, -1.0, -np.inf, 0.5, -2.0, 0.0])
    ub = np.array([1.0, 1.0, 0.0, np.inf, 2.0, 0.0])
    res = mg.solve(a, r, mg.Box(lb, ub), max_iter=2000)
    assert np.all(res.x >= lb[:, None]) and np.all(res.x <= ub[:, None])
    with pytest.raises(ValueError, match="n = 6"):
        mg.solve(a, r, mg.Box(np.zeros(5), 1.0))


@pytest.mark.parametrize(
    ("make", "exc", "match"),
    [
        (lambda a, r: mg.solve(a[:, :5], r), ValueError, "A must be square"),
        (lambda a, r: mg.solve(a + np.triu(np.ones_like(a), 1), r), ValueError, "symmetric"),
        (lambda a, r: mg.solve(a, r[:5]), ValueError, "R must have 12 rows"),
        (lambda a, r: mg.solve(a, r, x0=np.zeros((12, 4))), ValueError, "x0 must have the shape"),
        (lambda a, r: mg.solve(np.where(a > 0.3, np.nan, a), r), ValueError, "A contains NaN"),
        (lambda a, r: mg.solve(a, np.full_like(r, np.inf)), ValueError, "R contains NaN or Inf"),
        (lambda a, r: mg.solve(a, r, x0=np.full_like(r, np.nan)), ValueError, "x0 contains"),
        (lambda a, r: mg.solve(np.zeros((0, 0)), np.zeros(0)), ValueError, "A must not be empty"),
        (lambda a, r: mg.solve(a, np.zeros((12, 0))), ValueError, "R must not be empty"),
        (lambda a, r: mg.solve(a, r, omega=2.0), ValueError, "omega must be in"),
        (lambda a, r: mg.solve(a, r, omega=0.0), ValueError, "omega must be in"),
        (lambda a, r: mg.solve(a, r, theta=-1e-3), ValueError, "theta must be in"),
        (lambda a, r: mg.solve(a, r, theta=np.inf), ValueError, "theta must be finite"),
        (lambda a, r: mg.solve(a, r, tol=-1.0), ValueError, "tol must be in"),
        (lambda a, r: mg.solve(a, r, max_iter=-1), ValueError, "max_iter must be >= 0"),
        (lambda a, r: mg.solve(a, r, max_iter=2.5), TypeError, "max_iter must be an integer"),
        (lambda a, r: mg.solve(a, r, time_limit=0), ValueError, "time_limit must be in"),
        (lambda a, r: mg.solve(a, r, panel=0), ValueError, "panel must be >= 1"),
        (lambda a, r: mg.solve(a, r, backend="tpu"), ValueError, "backend must be one of"),
        (lambda a, r: mg.solve(a, r, penalty="l1"), TypeError, "penalty must be"),
        (lambda a, r: mg.solve(a, r, penalty=mg.L1), TypeError, "not the class"),
        (lambda a, r: mg.solve(a, r, callback=3), TypeError, "callback must be callable"),
        (lambda a, r: mg.solve(a, r, method="newton"), ValueError, "method must be one of"),
        (lambda a, r: mg.solve(a.astype(complex), r), TypeError, "A must hold real numbers"),
        (lambda a, r: mg.solve(a, r[:, :, None]), ValueError, "R must be 1-D or 2-D"),
        (lambda a, r: mg.solve(-a, r), ValueError, "positive semidefinite"),
        (lambda a, r: mg.nnls(a, r[:5]), ValueError, "D must have 12 rows"),
        (lambda a, r: mg.nnls(a[0], r), ValueError, "C must be 2-D"),
        (lambda a, r: mg.nnls(a, r, x0=np.zeros(3)), ValueError, "x0 must have the shape"),
        (lambda a, r: mg.nnls(a, r, omega=3.0), ValueError, "omega must be in"),
        (lambda a, r: mg.nnls(a, r, bogus=1), TypeError, "bogus"),
    ],
)
def test_bad_input_is_refused_with_a_clear_error(problem, make, exc, match):
    a, r = problem
    with pytest.raises(exc, match=match):
        make(a, r)


# -- per-column flags that disagree, and the time limit from below ---------------------------


@pytest.mark.parametrize("method", ["msm", "pgm", "pgm_ls", "apg", "apg_ls"])
def test_mixed_column_convergence_is_reported_per_column(rng, method):
    # column 0 starts at its solution (it converges at once), columns 1 and 2 start far
    # away and get 3 iterations: the flags must differ, and converged is their "all"
    from msm_gpu.demo.study import solve_with

    a = random_psd(rng, 12)
    x_star = np.abs(rng.normal(size=(12, 3)))
    r = -a @ x_star  # unconstrained minimisers x_star >= 0: also the NNLS solutions
    x0 = x_star.copy()
    x0[:, 1:] = 0.0
    res = solve_with(method, a, r, mg.NonNeg(), x0=x0, tol=1e-9, max_iter=3)
    assert res.converged_columns.tolist() == [True, False, False]
    assert res.converged is False and "max_iter" in res.message
    assert res.n_iter == 3 and res.n_iter_columns.tolist() == [1, 3, 3]
    # and all True when every column converges
    res = solve_with(method, a, r[:, :1], mg.NonNeg(), x0=x0[:, :1], tol=1e-9, max_iter=3)
    assert res.converged is True and res.converged_columns.tolist() == [True]


def test_mixed_kkt_convergence_with_the_finish(rng):
    # with the finish, converged means the KKT residual of every column is <= tol: a
    # callback stop (no finish) leaves column 0 at its solution and column 1 far away
    a = random_psd(rng, 12)
    x_star = np.abs(rng.normal(size=(12, 2)))
    r = -a @ x_star
    x0 = x_star.copy()
    x0[:, 1] = 0.0
    res = mg.solve(a, r, mg.NonNeg(), x0=x0, callback=lambda info: True)
    assert res.converged_columns.tolist() == [True, False]
    assert res.converged is False


@pytest.mark.parametrize("method", ["msm", "pgm", "apg_ls"])
def test_time_limit_is_reached_not_undercut(rng, method):
    # the run must go on until time_limit has passed (not stop after one sweep), and then stop
    from msm_gpu.demo.study import solve_with

    a = random_psd(rng, 30)
    r = rng.normal(size=(30, 4))
    limit = 0.25
    started = time.perf_counter()
    res = solve_with(method, a, r, mg.NonNeg(), tol=0, max_iter=10**9, time_limit=limit)
    elapsed = time.perf_counter() - started
    assert "time_limit" in res.message
    assert res.time >= limit and elapsed >= limit
    assert res.n_iter > 10  # thousands of iterations fit in 0.25 s at this size
    assert res.time < limit + 5.0
