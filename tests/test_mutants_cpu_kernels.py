"""msm_gpu.backends.cpu.kernels against a plain NumPy sweep written from the paper, at the
edges the other tests do not reach (written for the mutants that survived them; see
benchmarks/mutation/SURVIVORS.md).

The reference is Algorithm 1 of the paper one row at a time: with B = L + (D + theta I) /
omega and C = A - B,

    w_j = r_j + sum_{i<j} A_ji z_i + sum_{i>j} A_ji x_i + C_jj x_j,
    z_j = argmin_t 1/2 B_jj t^2 + w_j t + h_j(t),

with each 1-D argmin written out here (clip, soft/hard threshold) or, for Lp, found by
brute force on a grid refined around its best point.  Nothing of the library is used for
the expected values.
"""

from __future__ import annotations

import numpy as np
import pytest

import msm_gpu as mg
from msm_gpu.backends.cpu.backend import CpuBackend
from msm_gpu.backends.cpu.kernels import (
    BLOCK_MAX_ROWS,
    BLOCK_MIN_COLUMNS,
    SUB_PANEL,
    all_zero,
    column_block,
    objective_columns,
    sweep_columns,
    sweep_for,
)
from msm_gpu.solvers.splitting import make_splitting


def _h(pen, t, lb, ub):
    if not lb <= t <= ub:
        return np.inf
    if isinstance(pen, mg.L1):
        return pen.lam * abs(t)
    if isinstance(pen, mg.L0):
        return pen.lam * (t != 0.0)
    if isinstance(pen, mg.Lp):
        return pen.lam * abs(t) ** pen.p
    return 0.0


def _prox(pen, w, b, lb, ub):
    """argmin_t 1/2 b t^2 + w t + h(t) on [lb, ub], written out per penalty."""
    a = -w / b
    if isinstance(pen, mg.L1):
        t = np.sign(a) * max(abs(a) - pen.lam / b, 0.0)
        return min(max(t, lb), ub)
    if isinstance(pen, mg.L0):
        c = min(max(a, lb), ub)
        if lb <= 0.0 <= ub and 0.5 * b * c * c + w * c + pen.lam >= 0.0:
            return 0.0  # tie -> 0
        return c
    if isinstance(pen, mg.Lp):  # brute force: grid, then a finer grid around the best
        f = lambda t: 0.5 * b * t * t + w * t + pen.lam * np.abs(t) ** pen.p  # noqa: E731
        t = np.linspace(-2 * abs(a) - 1, 2 * abs(a) + 1, 4001)
        for _ in range(4):
            k = int(np.argmin(f(t)))
            step = t[1] - t[0]
            t = np.linspace(t[k] - 2 * step, t[k] + 2 * step, 401)
        best = t[int(np.argmin(f(t)))]
        return 0.0 if f(0.0) <= f(best) else best
    return min(max(a, lb), ub)


def _reference_sweep(pen, a, r, x, omega, theta, lb, ub):
    """One MSM iteration, row by row; returns z and the four statistics per column."""
    n, m = x.shape
    d = np.diag(a)
    bd = (d + theta) / omega
    cd = d - bd
    z = x.copy()
    stats = np.zeros((4, m))
    for col in range(m):
        for j in range(n):
            w = r[j, col] + a[j, :j] @ z[:j, col] + a[j, j + 1 :] @ x[j + 1 :, col]
            w += cd[j] * x[j, col]
            zj = _prox(pen, w, bd[j], lb[j], ub[j])
            dj = zj - x[j, col]
            stats[0, col] += 0.5 * bd[j] * (zj * zj - x[j, col] ** 2) + w * dj
            stats[0, col] += 0.5 * cd[j] * dj * dj
            stats[1, col] += _h(pen, zj, lb[j], ub[j])
            stats[2, col] += dj * dj
            stats[3, col] += x[j, col] ** 2
            z[j, col] = zj
    return z, stats


def _problem(n, m, seed):
    rng = np.random.default_rng(seed)
    c = rng.normal(size=(n + 3, n))
    a = c.T @ c / n
    r = rng.normal(size=(n, m))
    x = rng.normal(size=(n, m)) * 0.5
    return a, r, x


def _bounds(pen, n):
    table = pen.table(n)
    return table[:, 1], table[:, 2]


PENALTIES = [
    mg.Zero(),
    mg.Box(np.linspace(-1.0, -0.1, 19), np.linspace(0.1, 2.0, 19)),
    mg.L1(0.2),
    mg.NonNegL1(0.1),
    mg.L0(0.1),
    mg.L0(0.05, lb=0.0),
    mg.L0(0.3, lb=-2.0, ub=-0.25),  # zero infeasible: every z_j in [-2, -0.25]
    mg.L0(0.3, lb=0.2, ub=1.5),  # zero infeasible, above it
    mg.L0(0.2, lb=-1.0, ub=0.0),  # zero on the upper bound
    mg.Lp(0.1, 0.5),
    mg.Lp(0.1, 2 / 3),
]


@pytest.mark.parametrize("panel", [1, 3, SUB_PANEL, SUB_PANEL + 3, 64])
@pytest.mark.parametrize("pen", PENALTIES, ids=repr)
def test_sweep_and_statistics_match_the_row_by_row_reference(pen, panel):
    n, m = 19, 3
    a, r, x = _problem(n, m, seed=panel)
    omega, theta = (1.2, 0.05) if pen.is_convex else (0.8, 0.05)
    split = make_splitting(np.diag(a), omega, theta, pen.is_convex)
    lb, ub = _bounds(pen, n)
    z_ref, stats_ref = _reference_sweep(pen, a, r, x, omega, theta, lb, ub)
    state = CpuBackend().start(a, r, x, split, pen.table(n), pen.code, panel)
    stats = state.sweep()
    z = state.current_x()
    state.close()
    tol = 1e-6 if isinstance(pen, mg.Lp) else 1e-12  # Lp reference: grid search
    np.testing.assert_allclose(z, z_ref, rtol=tol, atol=tol)
    assert np.all((z >= lb[:, None]) & (z <= ub[:, None]))
    np.testing.assert_allclose(stats[2:], stats_ref[2:], rtol=max(tol, 1e-12), atol=1e-12)
    np.testing.assert_allclose(stats[1], stats_ref[1], rtol=tol, atol=tol)
    np.testing.assert_allclose(stats[0], stats_ref[0], rtol=max(tol, 1e-10), atol=1e-10)


@pytest.mark.parametrize("pen", [mg.L0(0.3, lb=-2.0, ub=-0.25), mg.L0(0.3, lb=0.2, ub=1.5)])
def test_l0_with_zero_outside_the_bounds_solves_in_the_bounds(pen):
    n = 12
    a, r, _ = _problem(n, 2, seed=4)
    res = mg.solve(a, r, pen, finish=None, max_iter=50)
    lb, ub = _bounds(pen, n)
    assert np.all((res.x >= lb[:, None]) & (res.x <= ub[:, None]))
    # h is the constant lam on the whole (zero-free) domain
    f = 0.5 * np.sum(res.x * (a @ res.x)) + np.sum(res.x * r) + pen.lam * res.x.size
    assert res.fun == pytest.approx(f, rel=1e-10)


def test_sweep_touches_only_its_column_range():
    n, m = 10, 6
    a, r, x = _problem(n, m, seed=8)
    pen = mg.L1(0.1)
    split = make_splitting(np.diag(a), 1.0, 0.01, True)
    state = CpuBackend().start(a, r, x, split, pen.table(n), pen.code, 4)
    afold, b_diag, table = state._afold, state._b_diag, state._table
    y = x.copy()
    stats = np.full((4, m), 7.0)
    sweep_columns(afold, b_diag, pen.code, table, r, y, 2, 5, 4, stats)
    lb, ub = _bounds(pen, n)
    z_ref, stats_ref = _reference_sweep(pen, a, r[:, 2:5], x[:, 2:5], 1.0, 0.01, lb, ub)
    np.testing.assert_allclose(y[:, 2:5], z_ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(y[:, :2], x[:, :2])
    np.testing.assert_array_equal(y[:, 5:], x[:, 5:])
    np.testing.assert_allclose(stats[:, 2:5], stats_ref, rtol=1e-10, atol=1e-12)
    assert np.all(stats[:, :2] == 7.0) and np.all(stats[:, 5:] == 7.0)
    # an empty range writes nothing
    sweep_columns(afold, b_diag, pen.code, table, r, y, 3, 3, 4, stats)
    np.testing.assert_allclose(y[:, 2:5], z_ref, rtol=1e-12, atol=1e-12)
    state.close()


@pytest.mark.parametrize("pen", [mg.NonNeg(), mg.L1(0.2), mg.L0(0.1)], ids=repr)
def test_sweep_over_several_column_blocks(pen):
    # more columns than one block (c0, c1 off the block edges): every column as the
    # row-by-row reference, and F(X) of the first sweep as a sweep of each column alone
    n = 12
    block = column_block(n, n, 8, 10**9)
    assert BLOCK_MIN_COLUMNS <= block < 10**9
    m = 2 * block + 300
    a, r, x = _problem(n, m, seed=11)
    split = make_splitting(np.diag(a), 1.0, 0.05, pen.is_convex)
    state = CpuBackend().start(a, r, x, split, pen.table(n), pen.code, n)
    afold, b_diag, table = state._afold, state._b_diag, state._table
    sweep = sweep_for(pen.code)  # the production kernel (the F(X) pass: with_f0)
    c0, c1 = 3, m - 2
    y, stats, f0 = x.copy(), np.zeros((4, m)), np.zeros((2, m))
    sweep(afold, b_diag, table, r, y, c0, c1, n, stats, f0, True)
    lb, ub = _bounds(pen, n)
    z_ref, stats_ref = _reference_sweep(pen, a, r[:, c0:c1], x[:, c0:c1], 1.0, 0.05, lb, ub)
    np.testing.assert_allclose(y[:, c0:c1], z_ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(y[:, :c0], x[:, :c0])
    np.testing.assert_array_equal(y[:, c1:], x[:, c1:])
    np.testing.assert_allclose(stats[2, c0:c1], stats_ref[2], rtol=1e-12, atol=1e-12)
    alone, stats1, f1 = x.copy(), np.zeros((4, m)), np.zeros((2, m))
    for j in (c0, block - 1, block, block + 1, c1 - 1):
        sweep(afold, b_diag, table, r, alone, j, j + 1, n, stats1, f1, True)
        np.testing.assert_allclose(f0[:, j], f1[:, j], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(alone[:, j], y[:, j], rtol=1e-12, atol=1e-12)
    state.close()
    # above BLOCK_MAX_ROWS one block; never more columns than there are
    assert column_block(BLOCK_MAX_ROWS + 1, 64, 8, 5000) == 5000
    assert column_block(8, 8, 8, 100) == 100


@pytest.mark.parametrize("pen", PENALTIES, ids=repr)
def test_objective_columns_closed_form(pen):
    n, m = 19, 4
    a, r, x = _problem(n, m, seed=2)
    lb, ub = _bounds(pen, n)
    x[:, 1] = np.clip(x[:, 1], lb, ub)  # column 1 feasible, the others may not be
    x[:, 3] = 0.0
    fun = np.full(m, 5.0)
    hsum = np.full(m, 5.0)
    objective_columns(a, pen.code, pen.table(n), r, x, 1, m, fun, hsum)
    assert fun[0] == 5.0 and hsum[0] == 5.0  # outside the range: untouched
    for col in range(1, m):
        h = sum(_h(pen, x[j, col], lb[j], ub[j]) for j in range(n))
        f = 0.5 * x[:, col] @ a @ x[:, col] + x[:, col] @ r[:, col] + h
        if np.isinf(h):
            assert np.isinf(fun[col]) and np.isinf(hsum[col])
        else:
            assert fun[col] == pytest.approx(f, rel=1e-12, abs=1e-12)
            assert hsum[col] == pytest.approx(h, rel=1e-12, abs=1e-12)


def test_objective_columns_in_blocks_of_rows():
    # more rows than one block of the objective's GEMM
    n, m = 300, 2
    a, r, x = _problem(n, m, seed=6)
    pen = mg.L1(0.3)
    fun = np.zeros(m)
    hsum = np.zeros(m)
    objective_columns(a, pen.code, pen.table(n), r, x, 0, m, fun, hsum)
    f = 0.5 * np.sum(x * (a @ x), axis=0) + np.sum(x * r, axis=0) + 0.3 * np.abs(x).sum(0)
    np.testing.assert_allclose(fun, f, rtol=1e-12)


def test_all_zero():
    assert all_zero(np.zeros((3, 4)))
    assert all_zero(np.zeros((0, 2)))
    for i in range(12):
        x = np.zeros((3, 4))
        x.flat[i] = 1e-300
        assert not all_zero(x)
    assert not all_zero(np.array([[0.0, -0.5]]))


@pytest.mark.parametrize("p", [0.5, 2 / 3])
def test_lp_with_lam_zero_is_exactly_the_unpenalised_step(p):
    # h = 0: the 1-D argmin is -w / b exactly, and the sweep is the plain SOR sweep
    from msm_gpu.backends.cpu.kernels import prox_scalar

    for w, b in ((-3.0, 0.7), (2.5, 1.0), (1e-9, 3.0), (0.0, 2.0), (-40.0, 0.1)):
        t, h = prox_scalar(mg.Lp(0.0, p).code, w, b, 0.0, -np.inf, np.inf, p)
        assert t == -w / b and h == 0.0
    a, r, x = _problem(9, 3, seed=12)
    lp = mg.solve(a, r, mg.Lp(0.0, p), x0=x, finish=None, max_iter=5, tol=0, omega=0.9)
    plain = mg.solve(a, r, mg.Zero(), x0=x, finish=None, max_iter=5, tol=0, omega=0.9)
    np.testing.assert_array_equal(lp.x, plain.x)
