"""mg.minimize: proximal Newton with MSM inner solves, against independent solvers.

Truths used: scikit-learn's liblinear (l1-logistic without intercept, same objective up to
the factor C m), skglm's ProxNewton (l1-logistic with an unpenalised intercept),
scikit-learn's PoissonRegressor(alpha=0), closed forms (intercept-only models), a
proximal-gradient method with backtracking written here (the l0 comparison), and the
invariances of the problem (row duplication = integer weights, label coding, sparse =
dense, r columns = r separate problems).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import msm_gpu as mg


def logistic_objective(x, y, w, b, alpha, penalty="l1", sw=None):
    """Weighted mean logistic loss + alpha h(w), y in {-1, +1} (float64, direct)."""
    z = x @ w + b
    s = np.ones(x.shape[0]) if sw is None else np.asarray(sw, dtype=np.float64)
    loss = np.sum(s * np.logaddexp(0.0, -y * z)) / s.sum()
    if penalty == "l1":
        return loss + alpha * np.abs(w).sum()
    if penalty == "l0":
        return loss + alpha * np.count_nonzero(w)
    return loss


@pytest.fixture(scope="module")
def cancer():
    from sklearn.datasets import load_breast_cancer
    from sklearn.preprocessing import StandardScaler

    x, y = load_breast_cancer(return_X_y=True)
    return StandardScaler().fit_transform(x), 2.0 * y - 1.0


def small_problem(seed, m=200, n=15):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, n))
    w = np.zeros(n)
    w[:4] = rng.standard_normal(4) * 2
    y = np.where(rng.random(m) < 1 / (1 + np.exp(-(x @ w + 0.5))), 1.0, -1.0)
    return x, y


# -- agreement with scikit-learn and skglm ------------------------------------------------


@pytest.mark.parametrize("alpha", [0.002, 0.02])
def test_l1_logistic_matches_liblinear_without_intercept(cancer, alpha):
    from sklearn.linear_model import LogisticRegression

    x, y = cancer
    m = x.shape[0]
    res = mg.minimize(mg.Logistic(x, y, fit_intercept=False), mg.L1(alpha), tol=1e-10)
    assert res.converged
    # liblinear: ||w||_1 + C sum_i loss_i  ==  C m (mean loss + ||w||_1 / (C m))
    est = LogisticRegression(
        penalty="l1",
        solver="liblinear",
        C=1.0 / (alpha * m),
        fit_intercept=False,
        tol=1e-12,
        max_iter=100000,
    ).fit(x, y)
    f_ours = logistic_objective(x, y, res.x, 0.0, alpha)
    f_lib = logistic_objective(x, y, est.coef_.ravel(), 0.0, alpha)
    assert res.fun == pytest.approx(f_ours, rel=1e-12)
    assert f_ours <= f_lib + 1e-12
    assert f_ours == pytest.approx(f_lib, rel=1e-8)
    # the l1 solution is unique here (full column rank); same support
    assert set(np.flatnonzero(np.abs(res.x) > 1e-6)) == set(
        np.flatnonzero(np.abs(est.coef_.ravel()) > 1e-6)
    )


@pytest.mark.parametrize("seed", [0, 1])
def test_l1_logistic_with_intercept_matches_skglm(seed):
    from skglm import GeneralizedLinearEstimator
    from skglm.datafits import Logistic
    from skglm.penalties import L1
    from skglm.solvers import ProxNewton

    x, y = small_problem(seed)
    alpha = 0.01
    res = mg.minimize(mg.Logistic(x, y), mg.L1(alpha), tol=1e-10)
    assert res.converged and res.x.shape == (x.shape[1] + 1,)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = GeneralizedLinearEstimator(
            Logistic(), L1(alpha), ProxNewton(fit_intercept=True, tol=1e-12)
        ).fit(x, y)
    f_ours = logistic_objective(x, y, res.x[:-1], res.x[-1], alpha)
    f_skglm = logistic_objective(x, y, est.coef_.ravel(), est.intercept_, alpha)
    assert f_ours <= f_skglm + 1e-12
    assert f_ours == pytest.approx(f_skglm, rel=1e-9)
    np.testing.assert_allclose(res.x[:-1], est.coef_.ravel(), atol=1e-5)
    assert res.x[-1] == pytest.approx(float(est.intercept_), abs=1e-5)


def test_poisson_matches_sklearn_poisson_regressor():
    from sklearn.linear_model import PoissonRegressor

    rng = np.random.default_rng(3)
    x = rng.standard_normal((300, 6)) * 0.5
    counts = rng.poisson(np.exp(x @ rng.standard_normal(6) * 0.5 + 0.3)).astype(float)
    sw = rng.uniform(0.5, 2.0, size=300)
    res = mg.minimize(mg.Poisson(x, counts, sample_weight=sw), tol=1e-10)
    assert res.converged
    est = PoissonRegressor(alpha=0.0, tol=1e-12, max_iter=1000, solver="newton-cholesky")
    est.fit(x, counts, sample_weight=sw)
    np.testing.assert_allclose(res.x[:-1], est.coef_, atol=1e-7)
    assert res.x[-1] == pytest.approx(est.intercept_, abs=1e-7)


# -- closed forms and invariances -------------------------------------------------------------


def test_intercept_is_not_penalised_closed_form():
    """A penalty large enough to zero every coefficient leaves the intercept at
    logit of the weighted share of positives (logistic) / log of the weighted mean (Poisson)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((150, 5))
    y = (rng.random(150) < 0.3).astype(float)
    sw = rng.uniform(0.5, 1.5, 150)
    res = mg.minimize(mg.Logistic(x, y, sample_weight=sw), mg.L1(10.0), tol=1e-12)
    share = np.sum(sw * y) / sw.sum()
    assert np.all(res.x[:-1] == 0)
    assert res.x[-1] == pytest.approx(np.log(share / (1 - share)), rel=1e-9)
    counts = rng.poisson(3.0, 150).astype(float)
    res = mg.minimize(mg.Poisson(x, counts, sample_weight=sw), mg.L1(100.0), tol=1e-12)
    assert np.all(res.x[:-1] == 0)
    assert res.x[-1] == pytest.approx(np.log(np.sum(sw * counts) / sw.sum()), rel=1e-9)


def test_label_codings_weights_sparse_and_columns_agree():
    x, y = small_problem(5, m=120, n=8)
    pen = mg.L1(0.01)
    ref = mg.minimize(mg.Logistic(x, y), pen, tol=1e-11).x
    # {0, 1} coding
    np.testing.assert_allclose(
        mg.minimize(mg.Logistic(x, (y > 0) * 1.0), pen, tol=1e-11).x, ref, atol=1e-9
    )
    # sparse X
    np.testing.assert_allclose(
        mg.minimize(mg.Logistic(sp.csr_matrix(x), y), pen, tol=1e-11).x, ref, atol=1e-9
    )
    # integer sample weights == duplicated rows
    counts = np.random.default_rng(1).integers(1, 4, size=x.shape[0])
    dup = mg.minimize(mg.Logistic(np.repeat(x, counts, 0), np.repeat(y, counts)), pen, tol=1e-11)
    wtd = mg.minimize(mg.Logistic(x, y, sample_weight=counts), pen, tol=1e-11)
    np.testing.assert_allclose(wtd.x, dup.x, atol=1e-9)
    # r columns at once == r separate problems, for both Hessians
    noisy = np.where(x[:, 0] + np.random.default_rng(2).standard_normal(len(y)) > 0, 1.0, -1.0)
    y2 = np.stack([y, -y, noisy], axis=1)
    for hessian in ("exact", "bound"):
        both = mg.minimize(mg.Logistic(x, y2), pen, tol=1e-11, max_iter=2000, hessian=hessian)
        assert both.converged and both.x.shape == (9, 3)
        for c in range(3):
            one = mg.minimize(mg.Logistic(x, y2[:, c]), pen, tol=1e-11)
            np.testing.assert_allclose(both.x[:, c], one.x, atol=1e-8)
        assert both.fun == pytest.approx(both.info["fun_columns"].sum())


def test_quadratic_delegates_to_solve(rng):
    c = rng.standard_normal((30, 10))
    a, r = c.T @ c, -c.T @ rng.standard_normal((30, 3))
    got = mg.minimize(mg.Quadratic(a, r), mg.NonNeg(), tol=1e-10, max_iter=5000)
    want = mg.solve(a, r, mg.NonNeg(), tol=1e-10, max_iter=5000)
    np.testing.assert_array_equal(got.x, want.x)
    assert got.fun == want.fun


# -- monotone decrease, honesty of the stopping state -------------------------------------------


@pytest.mark.parametrize(
    "loss_name, penalty",
    [
        ("logistic", mg.L1(0.01)),
        ("logistic", mg.L0(0.01)),
        ("logistic", mg.Lp(0.01, 0.5)),
        ("logistic", mg.NonNeg()),
        ("poisson", mg.L1(0.01)),
        ("poisson", mg.L0(0.02)),
    ],
)
def test_objective_never_increases(loss_name, penalty):
    x, y = small_problem(7, m=150, n=12)
    if loss_name == "logistic":
        # (not separable: with l0 a separable column has no minimiser, |w| -> inf)
        noise = np.random.default_rng(3).standard_normal(len(y))
        loss = mg.Logistic(x, np.stack([y, np.where(x[:, 1] + noise > 0.3, 1.0, -1.0)], axis=1))
    else:
        counts = np.random.default_rng(2).poisson(np.exp(0.3 * x[:, :2].sum(axis=1)))
        loss = mg.Poisson(x, counts.astype(float))
    x0 = np.random.default_rng(1).standard_normal((loss.n_coef,) + loss.Y.shape[1:]) * 0.3
    if isinstance(penalty, mg.NonNeg):
        x0 = np.abs(x0)
    res = mg.minimize(loss, penalty, x0=x0, tol=1e-9, max_iter=200)
    hist = res.objective
    assert len(hist) == res.n_iter + 1
    assert np.all(np.diff(hist) <= 1e-12 * np.abs(hist[:-1]))
    assert hist[-1] < hist[0]
    assert res.converged, res.message


def test_converged_is_honest():
    x, y = small_problem(2)
    res = mg.minimize(mg.Logistic(x, y), mg.L1(0.001), tol=1e-12, max_iter=1)
    assert not res.converged and res.n_iter == 1 and "max_iter" in res.message
    res = mg.minimize(mg.Logistic(x, y), mg.L1(0.001), tol=0, max_iter=3)
    assert res.n_iter == 3 and not res.converged
    calls = []
    res = mg.minimize(
        mg.Logistic(x, y), mg.L1(0.001), callback=lambda info: calls.append(info.n_iter) or True
    )
    assert calls == [1] and res.message == "stopped by callback" and not res.converged


# -- l0: never worse than proximal gradient with backtracking from the same start -----------


def prox_grad_l0(x, y, lam, w0, max_iter=20000, tol=1e-12):
    """Proximal gradient with backtracking (Beck & Teboulle's rule) on mean logistic + l0,
    intercept unpenalised (last entry); monotone, stops on a tiny relative step."""

    def loss_grad(w):
        z = x @ w[:-1] + w[-1]
        sig = 1.0 / (1.0 + np.exp(y * z))  # sigma(-y z)
        g = -(y * sig) / len(y)
        return np.mean(np.logaddexp(0.0, -y * z)), np.append(x.T @ g, g.sum())

    def F(w):
        return loss_grad(w)[0] + lam * np.count_nonzero(w[:-1])

    w, step = w0.copy(), 1.0
    for _ in range(max_iter):
        f, g = loss_grad(w)
        while True:
            v = w - step * g
            cand = v.copy()
            kill = v[:-1] ** 2 <= 2 * step * lam  # hard threshold (tie -> 0)
            cand[:-1][kill] = 0.0
            d = cand - w
            if loss_grad(cand)[0] <= f + g @ d + d @ d / (2 * step):
                break
            step *= 0.5
        moved = np.linalg.norm(d) <= tol * max(1.0, np.linalg.norm(w))
        w = cand
        step *= 2.0
        if moved:
            break
    return w, F(w)


@pytest.mark.parametrize("penalty", [mg.L0(0.01), mg.Lp(0.01, 0.5), mg.L1(0.01)])
def test_bound_hessian_reaches_a_tight_tol(penalty):
    # With hessian="bound" the stopping measure uses the bound's diagonal: measured with
    # the exact diagonal, two of these l0 problems sat at a fixed point of the bound's
    # model with optimality 0.23 for ever (500 iterations, converged=False).
    rng = np.random.default_rng(0)
    x = rng.standard_normal((400, 30))
    w = np.zeros((30, 3))
    w[:5] = rng.standard_normal((5, 3))
    y = np.where(rng.random((400, 3)) < 1 / (1 + np.exp(-x @ w)), 1.0, 0.0)
    res = mg.minimize(mg.Logistic(x, y), penalty, tol=1e-9, hessian="bound", max_iter=500)
    assert res.converged and res.n_iter < 500
    assert np.all(res.info["optimality"] <= 1e-9)
    exact = mg.minimize(mg.Logistic(x, y), penalty, tol=1e-9, hessian="exact")
    if penalty.is_convex:  # the same minimiser
        np.testing.assert_allclose(res.x, exact.x, atol=1e-6)
    else:  # stationary points, not necessarily the same: the same neighbourhood of F
        assert res.fun == pytest.approx(exact.fun, rel=1e-2)


def test_l0_not_worse_than_proximal_gradient_from_the_same_start():
    """l0 is nonconvex: both methods stop at stationary points, and no theorem orders them.
    Measured over 40 problems (seeds 0-19 x two lam): Newton-MSM lower on 14, equal on 24,
    higher on 2 (by at most 0.34%).  Asserted here on 20 of them: never higher by more than
    0.5%, lower-or-equal on at least 90%, and lower on average."""
    gaps = []
    for seed in range(10):
        for lam in (0.005, 0.02):
            x, y = small_problem(seed, m=150, n=20)
            w0 = np.zeros(21)
            res = mg.minimize(mg.Logistic(x, y), mg.L0(lam), x0=w0, tol=1e-10, max_iter=500)
            assert res.converged
            f_ours = logistic_objective(x, y, res.x[:-1], res.x[-1], lam, "l0")
            assert res.fun == pytest.approx(f_ours, rel=1e-12)
            _, f_pg = prox_grad_l0(x, y, lam, w0)
            gaps.append((f_ours - f_pg) / f_pg)
    gaps = np.array(gaps)
    assert gaps.max() <= 5e-3
    assert np.mean(gaps <= 1e-10) >= 0.9
    assert gaps.mean() < 0


# -- bad input ------------------------------------------------------------------------------------


def test_bad_input_names_the_argument():
    x, y = small_problem(0, m=20, n=5)
    with pytest.raises(ValueError, match="Y must hold labels"):
        mg.Logistic(x, np.arange(20.0))
    with pytest.raises(ValueError, match="Y must have 20 rows"):
        mg.Logistic(x, y[:10])
    with pytest.raises(ValueError, match="X contains NaN"):
        mg.Logistic(np.where(x > 1, np.nan, x), y)
    with pytest.raises(ValueError, match="X must be 2-D"):
        mg.Logistic(x[:, 0], y)
    with pytest.raises(ValueError, match="sample_weight must be >= 0"):
        mg.Logistic(x, y, sample_weight=-np.ones(20))
    with pytest.raises(ValueError, match="sample_weight must have 20"):
        mg.Logistic(x, y, sample_weight=np.ones(3))
    with pytest.raises(ValueError, match="Y must be nonnegative"):
        mg.Poisson(x, -np.ones(20))
    with pytest.raises(TypeError, match="fit_intercept"):
        mg.Logistic(x, y, fit_intercept="yes")
    loss = mg.Logistic(x, y)
    with pytest.raises(ValueError, match="x0 must have shape"):
        mg.minimize(loss, x0=np.zeros(5))
    with pytest.raises(ValueError, match="hessian must be one of"):
        mg.minimize(loss, hessian="newton")
    with pytest.raises(ValueError, match="hessian='bound'"):
        mg.minimize(mg.Poisson(x, np.ones(20)), hessian="bound")
    with pytest.raises(ValueError, match="tol"):
        mg.minimize(loss, tol=-1.0)
    with pytest.raises(TypeError, match="max_iter"):
        mg.minimize(loss, max_iter=1.5)
    with pytest.raises(TypeError, match="loss must be"):
        mg.minimize(x)
    with pytest.raises(TypeError, match="penalty"):
        mg.minimize(loss, "l1")
    with pytest.raises(ValueError, match="x0 must lie in the domain"):
        mg.minimize(loss, mg.NonNeg(), x0=-np.ones(6))


def test_inputs_are_not_modified():
    x, y = small_problem(1, m=50, n=4)
    xs, ys, x0 = x.copy(), y.copy(), np.full(5, 0.1)
    sw = np.ones(50)
    mg.minimize(mg.Logistic(x, y, sample_weight=sw), mg.L1(0.01), x0=x0)
    np.testing.assert_array_equal(x, xs)
    np.testing.assert_array_equal(y, ys)
    np.testing.assert_array_equal(x0, np.full(5, 0.1))
    np.testing.assert_array_equal(sw, np.ones(50))


def test_float32_stays_float32():
    x, y = small_problem(4, m=80, n=5)
    res = mg.minimize(
        mg.Logistic(x.astype(np.float32), y.astype(np.float32)), mg.L1(0.01), tol=1e-4
    )
    assert res.x.dtype == np.float32 and res.converged


def test_inner_solves_skip_the_psd_tests_without_changing_the_answer(monkeypatch):
    # the model Hessians are PSD by construction: minimize's inner solves skip the symmetry
    # and Cholesky tests (solve(..., _known_psd=True)) and get the same answer
    from msm_gpu._input import validation
    from msm_gpu.glm import newton

    calls, inner = [], []
    real = validation.check_psd
    monkeypatch.setattr(validation, "check_psd", lambda *a, **k: calls.append(1) or real(*a, **k))
    real_solve = newton.solve
    monkeypatch.setattr(newton, "solve", lambda *a, **k: inner.append(1) or real_solve(*a, **k))
    monkeypatch.setattr(newton, "HOST_KERNELS", False)  # the NumPy loop: inner solve() calls
    x, y = small_problem(3)
    res = mg.minimize(mg.Logistic(x, y), mg.L1(0.001), tol=1e-10)
    assert res.converged and inner and not calls
    rng = np.random.default_rng(5)
    c = rng.normal(size=(40, 12))
    a, r = c.T @ c, rng.normal(size=(12, 3))
    plain = mg.solve(a, r, mg.NonNeg())
    trusted = mg.solve(a, r, mg.NonNeg(), _known_psd=True)
    assert calls  # the public call tests A
    np.testing.assert_array_equal(trusted.x, plain.x)


def test_numpy_road_iterates_on_one_blas_thread():
    # the NumPy loop (hessian="bound") runs its iterations with one BLAS thread (BLAS
    # threads spinning after a product fight the Numba sweep); seen from the callback
    from threadpoolctl import threadpool_info

    def blas_threads():
        return max(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")

    x, y = small_problem(3)
    seen = []
    mg.minimize(
        mg.Logistic(x, y),
        mg.L1(0.001),
        hessian="bound",
        max_iter=3,
        tol=0,
        callback=lambda info: seen.append(blas_threads()),
    )
    assert seen and set(seen) == {1}
