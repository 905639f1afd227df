"""The tiled CPU sweep (msm_gpu.backends.cpu.tiles) and its SIMD vectors (simd.py).

The sweep is checked against the row-by-row reference of the paper's Algorithm 1
(``test_mutants_cpu_kernels._reference_sweep``, NumPy only) and against closed forms;
shapes are chosen so that every path runs: whole 8-row panels and a last short one,
whole column tiles and a tail of columns past them.  The tiled sweep is forced on
(``tiles=True``), so it is tested on hosts where it is not the default too.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize
from numba import njit
from test_mutants_cpu_kernels import PENALTIES, _bounds, _h, _problem, _reference_sweep

import msm_gpu as mg
from msm_gpu.backends.cpu import backend as cpu
from msm_gpu.backends.cpu import simd
from msm_gpu.backends.cpu import tiles as cpu_tiles
from msm_gpu.backends.cpu.backend import CpuBackend
from msm_gpu.solvers.splitting import make_splitting

N_ROWS = 2 * cpu_tiles.TILE_ROWS + 3  # two whole panels and a short one


def _columns(dtype):
    """Two whole tiles and a tail of 5 columns."""
    return 2 * cpu_tiles.tile_columns(np.dtype(dtype).itemsize) + 5


def _start(pen, a, r, x, omega=1.2, theta=0.05, tiles=True):
    split = make_splitting(np.diag(a).astype(np.float64), omega, theta, pen.is_convex)
    return CpuBackend().start(a, r, x, split, pen.table(a.shape[0]), pen.code, 64, tiles=tiles)


@pytest.mark.parametrize("pen", PENALTIES, ids=repr)
def test_tiled_sweep_matches_the_row_by_row_reference(pen):
    n, m = N_ROWS, _columns(np.float64)
    a, r, x = _problem(n, m, seed=3)
    omega, theta = (1.2, 0.05) if pen.is_convex else (0.8, 0.05)
    lb, ub = _bounds(pen, n)
    z_ref, stats_ref = _reference_sweep(pen, a, r, x, omega, theta, lb, ub)
    state = _start(pen, a, r, x, omega, theta)
    assert state._tiles and state._panel == cpu_tiles.TILE_ROWS
    stats = state.sweep()
    z = state.current_x()
    state.close()
    tol = 1e-6 if isinstance(pen, mg.Lp) else 1e-12  # Lp reference: grid search
    np.testing.assert_allclose(z, z_ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(stats[2:], stats_ref[2:], rtol=max(tol, 1e-12), atol=1e-12)
    np.testing.assert_allclose(stats[1], stats_ref[1], rtol=tol, atol=tol)
    np.testing.assert_allclose(stats[0], stats_ref[0], rtol=max(tol, 1e-10), atol=1e-10)


@pytest.mark.parametrize("n_tiles", [2, 5])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("pen", [mg.NonNeg(), mg.Box(-0.3, 0.4)], ids=repr)
def test_box_tiles_swept_in_pairs_match_the_reference_and_single_tiles(pen, dtype, n_tiles):
    # n a multiple of TILE_ROWS: box tiles go in pairs, one's product overlapping the
    # other's solve (cpu_tiles._sweep_tile_pair_box); an odd tile and the tail alone
    n = 3 * cpu_tiles.TILE_ROWS
    width = cpu_tiles.tile_columns(np.dtype(dtype).itemsize)
    m = n_tiles * width + 3
    a, r, x = _problem(n, m, seed=11)
    a, r, x = (v.astype(dtype) for v in (a, r, x))
    lb, ub = _bounds(pen, n)
    z_ref, stats_ref = _reference_sweep(pen, a, r, x, 1.2, 0.05, lb, ub)
    state = _start(pen, a, r, x)
    stats = state.sweep()
    z = state.current_x()
    state.close()
    tol = 1e-12 if dtype == np.float64 else 2e-5
    np.testing.assert_allclose(z, z_ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(stats[2:], stats_ref[2:], rtol=tol, atol=tol)
    atol0 = 1e-10 if dtype == np.float64 else 1e-4  # F's change: a sum over the column
    np.testing.assert_allclose(stats[0], stats_ref[0], rtol=max(tol, 1e-10), atol=atol0)
    # the same iterate and statistics as each tile swept on its own (no pairing)
    split = make_splitting(np.diag(a).astype(np.float64), 1.2, 0.05, True)
    afold = np.ascontiguousarray(cpu.fold_matrix(a, split.c_diag, cpu_tiles.TILE_ROWS))
    b_diag = np.asarray(split.b_diag, dtype=dtype)
    table = np.ascontiguousarray(pen.table(n), dtype=dtype)
    y = np.ascontiguousarray(x.copy())
    one = np.zeros((4, m))
    bounds = list(range(0, n_tiles * width + 1, width)) + [m]
    for c0, c1 in zip(bounds[:-1], bounds[1:], strict=True):
        cpu_tiles.sweep_tiles(afold, b_diag, pen.code, table, r, y, c0, c1, one, one, False)
    np.testing.assert_array_equal(z, y)
    np.testing.assert_array_equal(stats, one)


@pytest.mark.parametrize("pen", [mg.NonNeg(), mg.L1(0.2), mg.Box(-0.3, 0.4)], ids=repr)
def test_float32_tiled_sweep_matches_the_reference_to_float32_rounding(pen):
    n, m = N_ROWS, _columns(np.float32)
    a, r, x = _problem(n, m, seed=5)
    lb, ub = _bounds(pen, n)
    z_ref, stats_ref = _reference_sweep(pen, a, r, x, 1.2, 0.05, lb, ub)
    a32, r32, x32 = (v.astype(np.float32) for v in (a, r, x))
    state = _start(pen, a32, r32, x32)
    stats = state.sweep()
    z = state.current_x()
    state.close()
    assert z.dtype == np.float32
    np.testing.assert_allclose(z, z_ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(stats, stats_ref, rtol=1e-4, atol=1e-4)


def _exact_problem(pen, n, m, dtype, seed):
    """A, R, X0 whose F(X0) float32 computes exactly where float64 does: A integer, X0 in
    quarters inside [lb, ub] (lb, ub as the kernels see them, in ``dtype``), R float32
    values (so x (v + r) needs ~40 bits: float32 sums of the terms would round).  The
    panel products of X0 are exact in float32 (multiples of 1/4 below 2^13)."""
    rng = np.random.default_rng(seed)
    c = rng.integers(-3, 4, size=(n + 3, n)).astype(np.float64)
    a = c.T @ c
    r = rng.normal(size=(n, m)).astype(np.float32).astype(np.float64)
    table = pen.table(n).astype(dtype).astype(np.float64)
    quarters = np.arange(-8, 9) / 4.0
    x = np.empty((n, m))
    for j in range(n):
        inside = quarters[(quarters >= table[j, 1]) & (quarters <= table[j, 2])]
        x[j] = rng.choice(inside, size=m)
    return a, r, x, table


def _start_objective(pen, table, a, r, x):
    """F(X) and sum_j h(x_j) per column in float64 with NumPy: 1/2 x'Ax + r'x + h(x), h
    from the penalty table as the kernels read it (inf outside [lb, ub])."""
    lam, lb, ub, p = (table[:, k : k + 1] for k in range(4))
    if isinstance(pen, mg.L1):
        h = lam * np.abs(x)
    elif isinstance(pen, mg.L0):
        h = np.where(x != 0.0, lam, 0.0)
    elif isinstance(pen, mg.Lp):
        h = lam * np.abs(x) ** p
    else:
        h = np.zeros_like(x)
    h = np.where((x >= lb) & (x <= ub), h, np.inf)
    hsum = h.sum(axis=0)
    return 0.5 * np.sum(x * (a @ x), axis=0) + np.sum(r * x, axis=0) + hsum, hsum


@pytest.mark.parametrize("tail", [0, 5], ids=["whole-tiles", "padded-tail"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("pen", PENALTIES, ids=repr)
def test_first_sweep_objective_is_f_of_the_start(pen, dtype, tail):
    # sweep_with_objective: F(X0) per column from the sweep's own products (float64 sums
    # of float64 terms, float32 entries widened), then the same sweep as sweep()
    n, m = N_ROWS, 2 * cpu_tiles.tile_columns(np.dtype(dtype).itemsize) + tail
    a, r, x, table = _exact_problem(pen, n, m, dtype, seed=6)
    outside = [1, m - 1]  # one entry outside [lb, ub] in a whole tile and in the last column
    for col in outside:
        lb, ub = table[3, 1], table[3, 2]
        if np.isfinite(lb) or np.isfinite(ub):
            x[3, col] = (
                np.floor(4 * lb) / 4 - 0.25 if np.isfinite(lb) else np.ceil(4 * ub) / 4 + 0.25
            )
    want_f, want_h = _start_objective(pen, table, a, r, x)
    assert np.all(np.isinf(want_f[outside])) == bool(np.isfinite(table[3, 1:3]).any())
    # omega = 1, theta = 1: B_jj = A_jj + 1 and C_jj = -1, exact in float32
    state = _start(pen, *(v.astype(dtype) for v in (a, r, x)), omega=1.0, theta=1.0)
    (fun, hsum), stats = state.sweep_with_objective()
    z = state.current_x()
    state.close()
    np.testing.assert_allclose(hsum, want_h, rtol=1e-12, atol=0)
    np.testing.assert_allclose(fun, want_f, rtol=1e-12, atol=1e-12)
    plain = _start(pen, *(v.astype(dtype) for v in (a, r, x)), omega=1.0, theta=1.0)
    stats_plain = plain.sweep()
    z_plain = plain.current_x()
    plain.close()
    tol = 1e-12 if dtype == np.float64 else 1e-5  # the products summed in another order
    np.testing.assert_allclose(z, z_plain, rtol=tol, atol=tol)
    np.testing.assert_allclose(stats, stats_plain, rtol=tol, atol=tol)
    if dtype == np.float64:
        z_ref, stats_ref = _reference_sweep(pen, a, r, x, 1.0, 1.0, table[:, 1], table[:, 2])
        tol = 1e-6 if isinstance(pen, mg.Lp) else 1e-10  # Lp reference: grid search
        np.testing.assert_allclose(z, z_ref, rtol=tol, atol=tol)
        np.testing.assert_allclose(stats, stats_ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("pen", PENALTIES, ids=repr)
def test_iterate_narrower_than_a_tile_is_swept_as_a_padded_tile(pen):
    # 3 columns: no whole tile, only the zero-padded one (whose padding columns, at 0,
    # are outside dom h for an L0 with 0 infeasible: they must not leak into the outputs)
    n, m = N_ROWS, 3
    a, r, x = _problem(n, m, seed=11)
    x = np.abs(x)  # inside every domain but the L0 boxes below 0
    omega, theta = (1.2, 0.05) if pen.is_convex else (0.8, 0.05)
    lb, ub = _bounds(pen, n)
    x = np.clip(x, lb[:, None], ub[:, None])
    z_ref, stats_ref = _reference_sweep(pen, a, r, x, omega, theta, lb, ub)
    state = _start(pen, a, r, x, omega, theta)
    (fun, _), stats = state.sweep_with_objective()
    z = state.current_x()
    state.close()
    tol = 1e-6 if isinstance(pen, mg.Lp) else 1e-10
    np.testing.assert_allclose(z, z_ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(stats, stats_ref, rtol=tol, atol=tol)
    want_h = [sum(_h(pen, x[j, c], lb[j], ub[j]) for j in range(n)) for c in range(m)]
    want_f = 0.5 * np.sum(x * (a @ x), axis=0) + np.sum(r * x, axis=0) + want_h
    np.testing.assert_allclose(fun, want_f, rtol=1e-10, atol=1e-10)


def test_tiled_sweep_touches_only_its_column_range():
    n, m = N_ROWS, 3 * cpu_tiles.tile_columns(8)
    a, r, x = _problem(n, m, seed=8)
    pen = mg.L1(0.1)
    state = _start(pen, a, r, x, 1.0, 0.01)
    afold, b_diag, table = state._afold, state._b_diag, state._table
    c0, c1 = 3, m - 4  # neither on a tile boundary
    y = x.copy()
    stats = np.full((4, m), 7.0)
    cpu_tiles.sweep_tiles(afold, b_diag, pen.code, table, r, y, c0, c1, stats, stats, False)
    lb, ub = _bounds(pen, n)
    z_ref, stats_ref = _reference_sweep(pen, a, r[:, c0:c1], x[:, c0:c1], 1.0, 0.01, lb, ub)
    np.testing.assert_allclose(y[:, c0:c1], z_ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(y[:, :c0], x[:, :c0])
    np.testing.assert_array_equal(y[:, c1:], x[:, c1:])
    np.testing.assert_allclose(stats[:, c0:c1], stats_ref, rtol=1e-10, atol=1e-12)
    assert np.all(stats[:, :c0] == 7.0) and np.all(stats[:, c1:] == 7.0)
    state.close()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("tiles", [True, False])
def test_solve_reaches_scipy_nnls_with_and_without_tiles(tiles, dtype, monkeypatch):
    monkeypatch.setattr(cpu_tiles, "use_tiles", lambda n: tiles)
    rng = np.random.default_rng(1)
    c = rng.normal(size=(60, 40))
    b = rng.normal(size=(60, 70))
    a, r = c.T @ c, -c.T @ b
    res = mg.solve(a.astype(dtype), r.astype(dtype), mg.NonNeg())
    want = np.stack([scipy.optimize.nnls(c, b[:, k])[0] for k in range(b.shape[1])], axis=1)
    assert res.converged
    tol = 1e-8 if dtype == np.float64 else 1e-4
    np.testing.assert_allclose(res.x, want, atol=tol * np.abs(want).max())


def test_use_tiles_where_measured(monkeypatch):
    monkeypatch.setattr(cpu_tiles, "HOST_AVX512", True)
    assert not cpu_tiles.use_tiles(cpu_tiles.TILE_MIN_ROWS - 1)
    assert cpu_tiles.use_tiles(cpu_tiles.TILE_MIN_ROWS)
    assert cpu_tiles.use_tiles(cpu_tiles.TILE_MAX_ROWS)
    assert not cpu_tiles.use_tiles(cpu_tiles.TILE_MAX_ROWS + 1)
    monkeypatch.setattr(cpu_tiles, "HOST_AVX512", False)
    assert not cpu_tiles.use_tiles(200)


def test_state_sweeps_tiles_by_default_where_they_pay(monkeypatch):
    a, r, x = _problem(40, 20, seed=2)
    for host in (True, False):
        monkeypatch.setattr(cpu_tiles, "HOST_AVX512", host)
        state = _start(mg.NonNeg(), a, r, x, tiles=None)
        assert state._tiles is host
        assert state._panel == (cpu_tiles.TILE_ROWS if host else 64)
        state.close()


@pytest.mark.parametrize("n_cols", [1, 31, 32, 100, 1000, 1001])
@pytest.mark.parametrize("align", [1, 16, 32])
def test_aligned_ranges_cover_every_column_on_tile_boundaries(n_cols, align):
    ranges = cpu.column_ranges(n_cols, 2, 200, 8, align)
    assert ranges[0][0] == 0 and ranges[-1][1] == n_cols
    assert all(c1 > c0 for c0, c1 in ranges)
    assert all(prev[1] == nxt[0] for prev, nxt in zip(ranges, ranges[1:], strict=False))
    assert all(c0 % align == 0 for c0, _ in ranges)


@njit
def _vector_ops(a, b, c, out):
    va, vb, vc = simd.vload(a, 0, 0), simd.vload(b, 0, 0), simd.vload(c, 0, 0)
    simd.vstore(out, 0, 0, simd.vfma(va, vb, vc))
    simd.vstore(out, 1, 0, simd.vadd(va, vb))
    simd.vstore(out, 2, 0, simd.vsub(va, vb))
    simd.vstore(out, 3, 0, simd.vmul(va, vb))
    simd.vstore(out, 4, 0, simd.vdiv(va, vb))
    simd.vstore(out, 5, 0, simd.vmax(va, vb))
    simd.vstore(out, 6, 0, simd.vmin(va, vb))
    simd.vstore(out, 7, 0, simd.vabs(va))
    simd.vstore(out, 8, 0, simd.vselect_lt(va, vb, vc, simd.vzero(a)))
    simd.vstore(out, 9, 0, simd.vsplat(a, a[1, 2]))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_simd_vectors_compute_what_numpy_does(dtype):
    lanes = simd.VEC_BYTES // np.dtype(dtype).itemsize
    rng = np.random.default_rng(0)
    a, b, c = (rng.normal(size=(2, lanes + 3)).astype(dtype) for _ in range(3))
    out = np.full((10, lanes + 3), 99.0, dtype=dtype)
    _vector_ops(a, b, c, out)
    va, vb, vc = a[0, :lanes], b[0, :lanes], c[0, :lanes]
    rtol = 1e-15 if dtype == np.float64 else 1e-6
    np.testing.assert_allclose(out[0, :lanes], va * vb + vc, rtol=rtol, atol=rtol)
    np.testing.assert_array_equal(out[1:4, :lanes], [va + vb, va - vb, va * vb])
    np.testing.assert_array_equal(out[4, :lanes], va / vb)
    np.testing.assert_array_equal(out[5, :lanes], np.maximum(va, vb))
    np.testing.assert_array_equal(out[6, :lanes], np.minimum(va, vb))
    np.testing.assert_array_equal(out[7, :lanes], abs(va))
    np.testing.assert_array_equal(out[8, :lanes], np.where(va < vb, vc, 0))
    np.testing.assert_array_equal(out[9, :lanes], np.full(lanes, a[1, 2]))
    assert np.all(out[:, lanes:] == 99.0)  # a vector writes its lanes only


@njit
def _wide_and_inside(a, low, up, out64, out):
    simd.vstore(out64, 0, 0, simd.vload_wide(a, 0, 1))
    va, vlow, vup = simd.vload(a, 1, 0), simd.vload(low, 0, 0), simd.vload(up, 0, 0)
    simd.vstore(out, 0, 0, simd.vselect_inside(va, vlow, vup, va, simd.vsplat(a, -7.0)))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_simd_widening_load_and_inside_select(dtype):
    lanes, lanes64 = simd.VEC_BYTES // np.dtype(dtype).itemsize, simd.VEC_BYTES // 8
    rng = np.random.default_rng(1)
    a = rng.normal(size=(2, lanes + 3)).astype(dtype)
    a[0, 1] = np.float32(1 / 3)  # not a float64 value rounded: the widening is exact
    a[1, :4] = [np.nan, np.inf, 0.0, 0.0]  # NaN, above, and 0 between NaN bounds: outside
    low = np.full((1, lanes), -0.5, dtype=dtype)
    up = np.full((1, lanes), 0.5, dtype=dtype)
    low[0, 2], up[0, 3] = np.nan, np.nan
    out64 = np.full((1, lanes64 + 2), 99.0)
    out = np.full((1, lanes + 2), 99.0, dtype=dtype)
    _wide_and_inside(a, low, up, out64, out)
    np.testing.assert_array_equal(out64[0, :lanes64], a[0, 1 : 1 + lanes64].astype(np.float64))
    assert np.all(out64[0, lanes64:] == 99.0)
    va = a[1, :lanes]
    with np.errstate(invalid="ignore"):
        inside = (va >= low[0]) & (va <= up[0])
    np.testing.assert_array_equal(out[0, :lanes], np.where(inside, va, -7.0))
    assert np.all(out[0, :4] == -7.0)
    assert np.all(out[0, lanes:] == 99.0)


def test_simd_vectors_refuse_arrays_whose_rows_are_not_contiguous():
    import numba

    @njit
    def load(a):
        return simd.vload(a, 0, 0)

    with pytest.raises((TypeError, numba.core.errors.TypingError), match="C-ordered 2-D"):
        load(np.zeros((4, 32))[:, ::2])
    with pytest.raises((TypeError, numba.core.errors.TypingError), match="C-ordered 2-D"):
        load(np.asfortranarray(np.zeros((4, 32))))
