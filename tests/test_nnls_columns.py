"""The per-column active set (msm_gpu/solvers/nnls_columns.py) against SciPy, brute force and
Lawson & Hanson's monotonicity."""

import itertools

import numpy as np
import pytest
import scipy.optimize
from hypothesis import given, settings
from hypothesis import strategies as st

import msm_gpu as mg
from msm_gpu.solvers import nnls_columns
from msm_gpu.solvers.nnls_columns import nnls_active_set


def objective(g, p, x):
    """1/2 x'Gx - p'x per column."""
    return 0.5 * np.sum(x * (g @ x), axis=0) - np.sum(p * x, axis=0)


def scipy_columns(c, d):
    cols = [scipy.optimize.nnls(c, d[:, j], maxiter=50 * c.shape[1])[0] for j in range(d.shape[1])]
    return np.stack(cols, 1)


@pytest.mark.parametrize(
    ("m", "n", "r"),
    [(30, 1, 5), (40, 7, 50), (200, 20, 300), (80, 60, 40), (50, 100, 20), (300, 128, 10)],
)
def test_matches_scipy(rng, m, n, r):
    # m < n (rank-deficient C'C) included; signs mixed, so many variables end at 0
    c = rng.normal(size=(m, n))
    d = rng.normal(size=(m, r))
    g, p = c.T @ c, c.T @ d
    x, ok, iterations = nnls_active_set(g, p)
    ref = scipy_columns(c, d)
    assert ok.all() and (x >= 0).all()
    f, f_ref = objective(g, p, x), objective(g, p, ref)
    assert np.all(f <= f_ref + 1e-10 * np.abs(f_ref).max())
    if m >= n:  # a unique minimiser
        np.testing.assert_allclose(x, ref, atol=1e-8 * max(1.0, np.abs(ref).max()))
    assert iterations.max() <= 3 * n + 30


def test_brute_force_over_every_face(rng):
    n = 6
    c = rng.normal(size=(10, n))
    d = rng.normal(size=(10, 8))
    g, p = c.T @ c, c.T @ d
    x, ok, _ = nnls_active_set(g, p)
    best = np.full(8, np.inf)
    for mask in itertools.product([False, True], repeat=n):
        f_idx = np.flatnonzero(mask)
        z = np.zeros((n, 8))
        if f_idx.size:
            z[f_idx] = np.linalg.solve(g[np.ix_(f_idx, f_idx)], p[f_idx])
        feasible = (z >= 0).all(axis=0)
        best = np.where(feasible, np.minimum(best, objective(g, p, z)), best)
    assert ok.all()
    np.testing.assert_allclose(objective(g, p, x), best, rtol=1e-12, atol=1e-12)


def test_warm_start_and_threads_give_the_same_answer(rng):
    c = np.abs(rng.normal(size=(100, 40)))
    d = np.abs(rng.normal(size=(100, 200)))
    g, p = c.T @ c, c.T @ d
    cold, ok_cold, _ = nnls_active_set(g, p)
    one, ok_one, _ = nnls_active_set(g, p, threads=1)
    x0 = rng.uniform(size=(40, 200)) * (rng.uniform(size=(40, 200)) < 0.5)
    warm, ok_warm, _ = nnls_active_set(g, p, x0)
    assert ok_cold.all() and ok_one.all() and ok_warm.all()
    np.testing.assert_array_equal(cold, one)  # columns are independent of the threads
    np.testing.assert_allclose(warm, cold, atol=1e-10)


def test_columns_with_zero_solution_and_empty_input(rng):
    g = np.eye(3) * 2.0
    p = np.array([[-1.0, 0.0, 2.0]] * 3)  # x = max(p, 0) / 2
    x, ok, _ = nnls_active_set(g, p)
    np.testing.assert_allclose(x, np.maximum(p, 0) / 2, rtol=1e-15)
    assert ok.all()
    x, ok, it = nnls_active_set(g, np.zeros((3, 0)))
    assert x.shape == (3, 0) and ok.shape == (0,) and it.shape == (0,)


def test_duplicate_columns_singular_gram(rng):
    # C with a repeated and a zero column: G singular on most faces
    base = np.abs(rng.normal(size=(30, 5)))
    c = np.column_stack([base, base[:, 1], np.zeros(30)])
    d = np.abs(rng.normal(size=(30, 12)))
    g, p = c.T @ c, c.T @ d
    x, ok, _ = nnls_active_set(g, p)
    ref = scipy_columns(c, d)
    f, f_ref = objective(g, p, x), objective(g, p, ref)
    assert (x >= 0).all()
    np.testing.assert_allclose(f[ok], f_ref[ok], rtol=1e-10, atol=1e-10)
    assert ok.mean() > 0.5


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 25))
def test_every_iteration_decreases_f(seed, n):
    # Lawson & Hanson: F never increases; the iterate after k iterations is feasible
    rng = np.random.default_rng(seed)
    c = rng.normal(size=(n + 5, n))
    d = rng.normal(size=(n + 5, 4))
    g, p = c.T @ c, c.T @ d
    x0 = np.abs(rng.normal(size=(n, 4))) * (rng.uniform(size=(n, 4)) < 0.5)
    previous = objective(g, p, x0)
    for k in range(1, 3 * n + 31):
        x, ok, _ = nnls_active_set(g, p, x0, max_iter=k)
        f = objective(g, p, x)
        assert (x >= 0).all()
        assert np.all(f <= previous + 1e-9 * (1 + np.abs(previous)))
        previous = f
        if ok.all():
            break
    assert ok.all()


def test_delete_row_is_the_factor_of_the_smaller_matrix(rng):
    n = 9
    b = rng.normal(size=(n, n))
    m = b @ b.T + n * np.eye(n)
    full = np.linalg.cholesky(m)
    for a in range(n):
        low = full.copy()
        nnls_columns._delete_row(low, a, n, np.empty(n))
        keep = [i for i in range(n) if i != a]
        want = np.linalg.cholesky(m[np.ix_(keep, keep)])
        np.testing.assert_allclose(np.tril(low[: n - 1, : n - 1]), want, atol=1e-12)


def test_inputs_untouched_and_bad_shapes(rng):
    g = np.eye(4)
    p = rng.normal(size=(4, 3))
    x0 = np.ones((4, 3))
    copies = (g.copy(), p.copy(), x0.copy())
    nnls_active_set(g, p, x0)
    for orig, kept in zip((g, p, x0), copies, strict=True):
        np.testing.assert_array_equal(orig, kept)
    with pytest.raises(ValueError, match="G"):
        nnls_active_set(np.eye(3), p)
    with pytest.raises(ValueError, match="X0"):
        nnls_active_set(g, p, np.ones((4, 2)))


def gaussian_peaks(m, n):
    """Columns of Gaussian peaks: cond(C'C) ~ 1e6 after equilibration (bench_nnls's spectra)."""
    t = np.linspace(0, 1, m)[:, None]
    return np.exp(-0.5 * ((t - np.linspace(0.02, 0.98, n)) / 0.02) ** 2)


@pytest.mark.parametrize("path", ["schur", "schur_refined", "factor_only"])
@pytest.mark.parametrize("data", ["normal", "peaks"])
def test_every_face_solver_path_matches_scipy(rng, monkeypatch, path, data):
    # the Schur phase (G^{-1}, with or without refinement) and the factor loop alone
    if path == "factor_only":
        monkeypatch.setattr(nnls_columns, "SCHUR_MAX_COND", 0.0)
    if path == "schur_refined":
        monkeypatch.setattr(nnls_columns, "REFINE_COND", 1.0)
    n = 30 if data == "normal" else 60  # 60 peaks: cond(G) ~ 1e6, refined
    c = rng.normal(size=(80, n)) if data == "normal" else gaussian_peaks(300, n)
    x_true = np.abs(rng.normal(size=(n, 60))) * (rng.uniform(size=(n, 60)) < 0.8)
    d = c @ x_true + 0.01 * rng.normal(size=(c.shape[0], 60))
    g, p = c.T @ c, c.T @ d
    h, refine, _ = _schur_of(g)
    assert (h.shape[0] == n) == (path != "factor_only")
    if path == "schur":
        assert refine == (data == "peaks") == (np.linalg.cond(g) > nnls_columns.REFINE_COND)
    x, ok, _ = nnls_active_set(g, p)
    ref = scipy_columns(c, d)
    assert ok.all()
    np.testing.assert_allclose(x, ref, atol=1e-9 * np.abs(ref).max())


def test_schur_solves_are_refined_to_the_accuracy_of_qr(rng):
    # cond(G) ~ 1e6: solves through G^{-1} carry cond(G) eps; one refinement step removes
    # it (about 9e-10 relative without it here, 6e-11 with it; QR on C_F is the reference)
    c = gaussian_peaks(300, 60)
    x_true = np.abs(rng.normal(size=(60, 200))) * (rng.uniform(size=(60, 200)) < 0.8)
    d = c @ x_true + 0.01 * rng.normal(size=(300, 200))
    g = c.T @ c
    assert _schur_of(g)[1]  # refined
    x, ok, _ = nnls_active_set(c.T @ c, c.T @ d)
    assert ok.all()
    for j in range(d.shape[1]):
        free = x[:, j] > 0
        ref = np.zeros(60)
        ref[free] = np.linalg.lstsq(c[:, free], d[:, j], rcond=None)[0]
        assert np.abs(x[:, j] - ref).max() <= 2e-10 * np.abs(ref).max()


def _schur_of(g):
    """The Schur settings nnls_active_set derives from G (inverse, refine, most at 0)."""
    h, cond = nnls_columns._inverse_and_condition(g, nnls_columns._full_factor(g))
    return nnls_columns._schur_settings(g.shape[0], h, cond)


@pytest.mark.parametrize("keep", [0.2, 0.02, 1.0, 0.0])
def test_starts_with_most_variables_at_zero_match_scipy(rng, keep):
    # a start with more variables at 0 than the Schur phase takes (the design form's
    # iterate handed to the Gram form) first frees the variables whose gradient points
    # into the orthant; the answer is SciPy's from any start
    n = 150  # above LAPACK_MIN_N: the factor and the inverse from LAPACK
    c = np.abs(rng.normal(size=(200, n)))
    x_true = np.abs(rng.normal(size=(n, 3))) * (rng.uniform(size=(n, 3)) < 0.9)
    d = c @ x_true + 1e-3 * rng.normal(size=(200, 3))
    ref = scipy_columns(c, d)
    x0 = ref * (rng.uniform(size=ref.shape) < keep)
    x, ok, _ = nnls_active_set(c.T @ c, c.T @ d, x0)
    assert ok.all()
    np.testing.assert_allclose(x, ref, atol=1e-9 * np.abs(ref).max())


def test_join_violators_of_start_frees_exactly_the_descent_directions(rng):
    n = 40
    c = rng.normal(size=(60, n))
    g, p = c.T @ c, c.T @ rng.normal(size=60)
    x = np.zeros(n)
    x[:5] = 1.0
    free = x > 0
    grad = g @ x - p
    want = free | (-grad > 1e-12 * (np.abs(g).max() + np.abs(p).max()))
    got = free.copy()
    nnls_columns._join_violators_of_start(
        g, p, x.copy(), got, 1e-12, np.abs(g).max(), np.abs(p).max(), 10
    )
    np.testing.assert_array_equal(got, want)
    assert want.sum() > 5  # some joined
    for max_k, start in ((n - 5, x), (10, np.zeros(n))):  # few enough at 0; all at 0
        kept = start > 0
        nnls_columns._join_violators_of_start(g, p, start, kept, 1e-12, 1.0, 1.0, max_k)
        np.testing.assert_array_equal(kept, start > 0)


@pytest.mark.parametrize("n", [60, 300])
def test_full_factor_and_inverse_from_numba_and_lapack(rng, n):
    # up to LAPACK_MIN_N from Numba, above from LAPACK: the same factor, inverse and
    # 1-norm condition number (NumPy's as the reference); a singular G has no factor
    c = rng.normal(size=(n + 40, n))
    g = c.T @ c
    factor = nnls_columns._full_factor(g)
    assert factor.flags.c_contiguous and not np.any(np.triu(factor, 1))
    np.testing.assert_allclose(factor, np.linalg.cholesky(g), rtol=1e-10, atol=1e-12)
    h, cond = nnls_columns._inverse_and_condition(g, factor)
    assert h.flags.c_contiguous
    np.testing.assert_allclose(h, np.linalg.inv(g), rtol=1e-9, atol=1e-12 * np.abs(h).max())
    assert cond == pytest.approx(np.linalg.cond(g, 1), rel=1e-8)
    singular = np.hstack([c[:, :-1], c[:, :1]])
    assert nnls_columns._full_factor(singular.T @ singular).shape == (0, 0)


@pytest.mark.parametrize("c", [1, 3, 7, 8, 12])
@pytest.mark.parametrize("data", ["normal", "peaks"])
def test_few_columns_skip_the_schur_phase_with_the_same_answers(rng, monkeypatch, c, data):
    # below SCHUR_MIN_COLUMNS the factor phase alone (no G^{-1}); the same answers
    n = 30 if data == "normal" else 60
    cm = rng.normal(size=(80, n)) if data == "normal" else gaussian_peaks(300, n)
    d = cm @ (np.abs(rng.normal(size=(n, c))) * (rng.uniform(size=(n, c)) < 0.5))
    d += 0.01 * rng.normal(size=d.shape)
    g, p = cm.T @ cm, cm.T @ d
    seen = []
    real = nnls_columns._inverse_and_condition
    monkeypatch.setattr(
        nnls_columns, "_inverse_and_condition", lambda *a: seen.append(1) or real(*a)
    )
    x, ok, _ = nnls_active_set(g, p)
    assert bool(seen) == (c >= nnls_columns.SCHUR_MIN_COLUMNS)
    ref = scipy_columns(cm, d)
    assert ok.all()
    np.testing.assert_allclose(x, ref, atol=1e-9 * np.abs(ref).max())


@pytest.mark.parametrize("kind", ["normal", "scaled", "peaks"])
def test_the_condition_estimate_of_few_columns_bounds_the_exact_one(rng, kind):
    # LAPACK's estimate times CONDITION_MARGIN: at least the exact ||G||_1 ||G^-1||_1
    # (so that the polish above a condition is taken no later), at most the margin above
    n = 40
    c = {
        "normal": lambda: rng.normal(size=(120, n)),
        "scaled": lambda: rng.normal(size=(120, n)) * np.logspace(0, 5, n),
        "peaks": lambda: gaussian_peaks(300, n),
    }[kind]()
    g = c.T @ c
    exact = nnls_columns._inverse_and_condition(g, nnls_columns._full_factor(g))[1]
    stats = {}
    nnls_active_set(g, c.T @ np.abs(rng.normal(size=(c.shape[0], 1))), stats=stats)
    assert exact <= stats["cond"] <= nnls_columns.CONDITION_MARGIN * exact * (1 + 1e-12)
    singular = np.ones((5, 5))  # not positive definite: no factor, infinite condition
    stats = {}
    nnls_active_set(singular, np.ones((5, 1)), stats=stats)
    assert stats["cond"] == np.inf


def test_one_ill_conditioned_column_is_still_polished():
    # one column (no G^{-1} formed): the condition estimate still sends it to the polish
    # (40 peaks of width 0.05: G passes the factor's pivot test, cond(G) ~ 1.8e16)
    t = np.linspace(0, 1, 300)[:, None]
    c = np.exp(-0.5 * ((t - np.linspace(0.02, 0.98, 40)) / 0.05) ** 2)
    g = c.T @ c
    assert nnls_columns._full_factor(g).shape[0] == 40
    rng = np.random.default_rng(3)
    d = c @ (np.abs(rng.normal(size=40)) * (rng.uniform(size=40) < 0.3))
    d += 1e-3 * rng.normal(size=300)
    res = mg.nnls(c, d)
    assert res.info["finish_polished"]
    ref = scipy.optimize.nnls(c, d)[0]
    f, f_ref = 0.5 * np.sum((c @ res.x - d) ** 2), 0.5 * np.sum((c @ ref - d) ** 2)
    assert f <= f_ref * (1 + 1e-12)
