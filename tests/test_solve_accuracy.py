"""MSM against independent solutions: SciPy, scikit-learn, numpy.linalg, brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.optimize
from conftest import objective, random_psd

import msm_gpu as mg


def test_nnls_matches_scipy(rng):
    c = rng.uniform(size=(60, 25))
    d = rng.uniform(size=(60, 6))
    res = mg.nnls(c, d, tol=1e-12, max_iter=20000)
    assert res.converged
    for k in range(d.shape[1]):
        x_ref, rnorm = scipy.optimize.nnls(c, d[:, k])
        np.testing.assert_allclose(res.x[:, k], x_ref, atol=1e-8)
    ref_obj = sum(0.5 * scipy.optimize.nnls(c, d[:, k])[1] ** 2 for k in range(d.shape[1]))
    assert res.fun == pytest.approx(ref_obj, rel=1e-10)


def test_nnls_single_rhs_is_one_dimensional(rng):
    c = rng.uniform(size=(30, 8))
    d = rng.uniform(size=30)
    res = mg.nnls(c, d, tol=1e-12, max_iter=20000)
    assert res.x.shape == (8,)
    np.testing.assert_allclose(res.x, scipy.optimize.nnls(c, d)[0], atol=1e-8)


def test_l1_matches_sklearn_lasso(rng):
    from sklearn.linear_model import Lasso

    m, n = 80, 30
    c = rng.normal(size=(m, n))
    d = c @ (rng.normal(size=n) * (rng.uniform(size=n) < 0.3)) + 0.1 * rng.normal(size=m)
    alpha = 0.1
    # sklearn minimises 1/(2m) ||d - C x||^2 + alpha ||x||_1, i.e. lam = alpha * m here
    lasso = Lasso(alpha=alpha, fit_intercept=False, tol=1e-12, max_iter=100000).fit(c, d)
    res = mg.least_squares(c, d, mg.L1(alpha * m), tol=1e-12, max_iter=20000)
    np.testing.assert_allclose(res.x, lasso.coef_, atol=1e-7)


def test_nonneg_l1_matches_sklearn_positive_lasso(rng):
    from sklearn.linear_model import Lasso

    m, n = 50, 20
    c = rng.normal(size=(m, n))
    d = rng.normal(size=m)
    alpha = 0.05
    lasso = Lasso(alpha=alpha, fit_intercept=False, positive=True, tol=1e-12, max_iter=100000)
    lasso.fit(c, d)
    res = mg.least_squares(c, d, mg.NonNegL1(alpha * m), tol=1e-12, max_iter=20000)
    np.testing.assert_allclose(res.x, lasso.coef_, atol=1e-7)


@pytest.mark.parametrize("omega", [1.0, 0.6, 1.5])
def test_zero_penalty_is_gauss_seidel_sor(rng, omega):
    a = random_psd(rng, 20)
    r = rng.normal(size=(20, 3))
    res = mg.solve(a, r, mg.Zero(), omega=omega, theta=0.0, tol=1e-13, max_iter=100000)
    np.testing.assert_allclose(res.x, np.linalg.solve(a, -r), rtol=1e-9, atol=1e-9)


def test_gauss_seidel_first_iterate_closed_form(rng):
    # one GS step from x0: (L + D) x1 = -R - L' x0  (paper, comment (1) after Thm 3)
    a = random_psd(rng, 7)
    r = rng.normal(size=7)
    x0 = rng.normal(size=7)
    res = mg.solve(a, r, mg.Zero(), theta=0.0, x0=x0, max_iter=1, tol=0, finish=None)
    lower = np.tril(a)
    expected = np.linalg.solve(lower, -r - np.triu(a, 1) @ x0)
    np.testing.assert_allclose(res.x, expected, rtol=1e-12)


def test_box_matches_scipy_lsq_linear(rng):
    c = rng.normal(size=(40, 12))
    d = rng.normal(size=40)
    lb = np.full(12, -0.2)
    ub = np.linspace(0.1, 1.0, 12)
    ref = scipy.optimize.lsq_linear(c, d, bounds=(lb, ub), tol=1e-14, method="bvls")
    res = mg.least_squares(c, d, mg.Box(lb, ub), tol=1e-13, max_iter=50000)
    np.testing.assert_allclose(res.x, ref.x, atol=1e-8)


def _brute_force_l0(a, r, lam):
    """Global minimiser of 1/2 x'Ax + r'x + lam ||x||_0 over all supports."""
    n = len(r)
    best, best_x = 0.0, np.zeros(n)
    for size in range(1, n + 1):
        for support in itertools.combinations(range(n), size):
            s = list(support)
            xs = np.linalg.solve(a[np.ix_(s, s)], -r[s])
            x = np.zeros(n)
            x[s] = xs
            f = 0.5 * x @ a @ x + r @ x + lam * size
            if f < best:
                best, best_x = f, x
    return best, best_x


@pytest.mark.parametrize("seed", range(5))
def test_l0_fixed_point_is_optimal_on_its_support(seed):
    rng = np.random.default_rng(seed)
    n = 7
    a = random_psd(rng, n)
    r = rng.normal(size=n)
    lam = 0.05
    res = mg.solve(a, r, mg.L0(lam), tol=1e-14, max_iter=20000)
    x = res.x
    support = np.flatnonzero(x)
    # on its support the smooth part is stationary: x_S = -A_SS^{-1} r_S
    if len(support):
        xs = np.linalg.solve(a[np.ix_(support, support)], -r[support])
        np.testing.assert_allclose(x[support], xs, atol=1e-9)
    # a fixed point: one more sweep leaves it (to rounding) where it is
    again = mg.solve(a, r, mg.L0(lam), x0=x, max_iter=1, tol=0)
    np.testing.assert_allclose(again.x, x, atol=1e-12)
    # never better than the global optimum found by brute force
    best, best_x = _brute_force_l0(a, r, lam)
    assert res.fun >= best - 1e-10
    # and the global optimum is itself a fixed point of MSM (omega = 1, theta > 0)
    at_best = mg.solve(a, r, mg.L0(lam), x0=best_x, max_iter=3, tol=0)
    np.testing.assert_allclose(at_best.x, best_x, atol=1e-9)


@pytest.mark.parametrize("p", [0.5, 2 / 3])
def test_lp_fixed_point_is_stationary(rng, p):
    n = 8
    a = random_psd(rng, n)
    r = rng.normal(size=n) * 2
    lam = 0.1
    res = mg.solve(a, r, mg.Lp(lam, p), tol=1e-14, max_iter=50000)
    x = res.x
    s = np.flatnonzero(x)
    assert len(s) > 0
    # first-order condition on the support: A x + r + lam p sign(x) |x|^(p-1) = 0
    grad = (a @ x + r)[s] + lam * p * np.sign(x[s]) * np.abs(x[s]) ** (p - 1)
    np.testing.assert_allclose(grad, 0.0, atol=1e-8)
    # off the support, every coordinate is at a global minimum of its 1-D problem
    for j in np.flatnonzero(x == 0):
        g = (a @ x + r)[j]
        t = np.linspace(-5, 5, 200_001)
        f = 0.5 * a[j, j] * t**2 + g * t + lam * np.abs(t) ** p
        assert f.min() >= -1e-9


def test_matrix_form_equals_column_by_column(rng):
    a = random_psd(rng, 15)
    r = rng.normal(size=(15, 9))
    pen = mg.L1(0.2)
    whole = mg.solve(a, r, pen, tol=0, max_iter=40)
    for k in range(r.shape[1]):
        col = mg.solve(a, r[:, k], pen, tol=0, max_iter=40)
        np.testing.assert_allclose(whole.x[:, k], col.x, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("pen", [mg.NonNeg(), mg.L0(0.02), mg.Lp(0.05, 0.5)], ids=repr)
def test_panel_size_changes_only_rounding(rng, pen):
    n = 70
    a = random_psd(rng, n)
    r = rng.normal(size=(n, 40))
    ref = mg.solve(a, r, pen, tol=0, max_iter=15, panel=n)
    for panel in (1, 7, 32, 64, 69, 500):
        got = mg.solve(a, r, pen, tol=0, max_iter=15, panel=panel)
        np.testing.assert_allclose(got.x, ref.x, rtol=1e-9, atol=1e-10)


def test_large_batch_uses_several_chunks(rng):
    # more columns than one chunk holds: chunking and padding must not change results
    n = 12
    a = random_psd(rng, n)
    r = rng.normal(size=(n, 600))
    res = mg.solve(a, r, mg.NonNeg(), tol=0, max_iter=30)
    for k in (0, 255, 256, 511, 599):
        col = mg.solve(a, r[:, k], mg.NonNeg(), tol=0, max_iter=30)
        np.testing.assert_allclose(res.x[:, k], col.x, rtol=1e-12, atol=1e-13)


def test_float32_path(rng):
    a = random_psd(rng, 30).astype(np.float32)
    r = rng.normal(size=(30, 5)).astype(np.float32)
    res32 = mg.solve(a, r, mg.NonNeg(), tol=1e-5, max_iter=5000)
    res64 = mg.solve(a.astype(np.float64), r.astype(np.float64), mg.NonNeg(), tol=1e-12)
    assert res32.x.dtype == np.float32
    np.testing.assert_allclose(res32.x, res64.x, atol=2e-3)
    assert res32.fun == pytest.approx(res64.fun, rel=1e-4)


def test_integer_input_becomes_float64():
    a = np.array([[2, 1], [1, 2]])
    r = np.array([-1, 1])
    res = mg.solve(a, r, mg.NonNeg(), tol=1e-14)
    assert res.x.dtype == np.float64
    np.testing.assert_allclose(res.x, [0.5, 0.0], atol=1e-12)


def test_objective_history_is_exact(rng):
    # the O(nr) objective recurrence of the driver equals F computed from scratch
    a = random_psd(rng, 25)
    r = rng.normal(size=(25, 4))
    pen = mg.L0(0.05, lb=0.0)
    xs = []
    res = mg.solve(
        a, r, pen, tol=0, max_iter=12, callback=lambda info: xs.append(info.x), finish=None
    )
    exact = [objective(a, r, x, pen) for x in xs]
    np.testing.assert_allclose(res.objective[1:], exact, rtol=1e-11)
    assert res.fun == pytest.approx(exact[-1], rel=1e-12)
