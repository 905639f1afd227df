"""Beta-divergence NMF (issue 49): losses, the Newton half-steps, the multiplicative
updates and regularisation, each against scikit-learn or an independent solver."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.optimize
import scipy.sparse as sp
from sklearn.decomposition import NMF as SkNMF
from sklearn.decomposition._nmf import _beta_divergence, _initialize_nmf
from sklearn.exceptions import ConvergenceWarning

import msm_gpu as mg
from msm_gpu.factorization import beta_loop as bl
from msm_gpu.factorization.regularization import Regularization

LOSSES = {"kullback-leibler": 1.0, "itakura-saito": 0.0}


@pytest.fixture(autouse=True)
def _quiet_max_iter():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        yield


def counts(m=40, d=50, k=4, seed=0):
    """Poisson counts of a rank-k intensity, about half of them zero."""
    rng = np.random.default_rng(seed)
    return rng.poisson(rng.gamma(1.0, 1.0, (m, k)) @ rng.gamma(0.3, 1.0, (k, d))).astype(float)


def positive(m=40, d=50, k=4, seed=0):
    """A positive matrix with multiplicative (exponential) noise: Itakura-Saito's model."""
    rng = np.random.default_rng(seed)
    return (rng.random((m, k)) @ rng.random((k, d)) + 0.05) * rng.exponential(1.0, (m, d))


# -- the loss ------------------------------------------------------------------------------


@pytest.mark.parametrize("beta", [1.0, 0.0, 0.5, 1.5, 3.0])
def test_divergence_is_scikit_learns(beta):
    Y = positive() if beta <= 0 else counts()
    rng = np.random.default_rng(1)
    W, H = rng.random((40, 3)) + 0.1, rng.random((3, 50)) + 0.1
    data = bl.BetaData(Y, 0, beta)
    got = bl.divergence(data, np.ascontiguousarray(W), np.ascontiguousarray(H.T))
    assert got == pytest.approx(_beta_divergence(Y, W, H, beta), rel=1e-10)


def test_reconstruction_err_is_scikit_learns_square_root():
    Y = counts()
    for loss in ("kullback-leibler", 1.5):
        model = mg.NMF(4, beta_loss=loss, random_state=0, max_iter=30)
        W = model.fit_transform(Y)
        want = _beta_divergence(Y, W, model.components_, loss, square_root=True)
        assert model.reconstruction_err_ == pytest.approx(want, rel=1e-10)


# -- the Newton half-step --------------------------------------------------------------


@pytest.mark.parametrize("beta", [1.0, 1.5])
def test_newton_half_step_solves_the_convex_column_problems(beta):
    # KL and beta = 1.5 are convex in H for fixed W: the exact half-step is each column's
    # minimiser.  Checked by its KKT conditions (gradient W'phi'(WH) zero where H > 0,
    # nonnegative where H = 0) and against L-BFGS-B (bounds x >= 0), which it must match
    # or beat (L-BFGS-B stops at x = 0 for some beta = 1.5 columns, where phi' is -inf)
    Y = counts(30, 8, seed=2)
    rng = np.random.default_rng(3)
    W = rng.random((30, 3)) + 0.2
    data = bl.BetaData(Y, 0, beta)
    Ht = np.full((8, 3), 0.5)
    bl.newton_half_step(data, "H", W, Ht, 0.0, 0.0, omega=1.0, theta=0.0, newton=100,
                        sweeps=200, sweep_tol=1e-10, step_tol=1e-12)  # fmt: skip
    Z = W @ Ht.T
    grad = W.T @ (Z ** (beta - 1) - Y * Z ** (beta - 2))  # k x d
    scale = W.T @ (Z ** (beta - 1) + Y * Z ** (beta - 2))
    kkt = np.where(Ht.T > 0, np.abs(grad), np.maximum(-grad, 0.0)) / scale
    assert kkt.max() < 1e-8, kkt.max()
    for j in range(8):

        def f(x, j=j):
            return _beta_divergence(Y[:, [j]], W, x[:, None], beta)

        ref = scipy.optimize.minimize(
            f, np.full(3, 0.5), method="L-BFGS-B", bounds=[(0, None)] * 3,
            options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 10000},
        )  # fmt: skip
        assert f(Ht[j]) <= ref.fun + 1e-9 * abs(ref.fun)


@pytest.mark.parametrize("beta", [0.0, 1.0])
def test_line_search_series_is_the_logarithm(beta):
    # the Armijo test's change of q without log1p calls (the atanh series) equals the
    # log1p form to rounding where every step ratio is in range, and defers (NaN) where not
    from msm_gpu.factorization import newton_kernels as nk

    rng = np.random.default_rng(21)
    n = 500
    vals, z = rng.gamma(2.0, 1.0, n), rng.gamma(2.0, 1.0, n)
    iz, zb = 1.0 / z, np.empty(n)
    kind = nk.kind_of(beta)
    for scale in (1e-6, 1e-2, 0.3):
        u = scale * z * rng.uniform(-1.0, 1.0, n)
        want = nk.change(kind, beta, vals, z, u, iz, zb, n, 1.0, 1e-300)
        got = nk.change_series(kind, vals, z, u, iz, n, 1.0, 1e-300)
        assert got == pytest.approx(want, rel=1e-11, abs=1e-14 * np.abs(vals).sum())
    u = 0.9 * z  # ratio 0.9: s = 0.31, outside the series' range
    assert np.isnan(nk.change_series(kind, vals, z, u, iz, n, 1.0, 1e-300))


def test_tracked_objective_is_the_true_one():
    # the loop follows q by the changes its line searches measure (log1p forms) and
    # evaluates it afresh every RESYNC iterations: both agree with a direct evaluation
    for Y, beta in ((counts(), 1.0), (positive(), 0.0), (counts(), 1.5)):
        data = bl.BetaData(Y, 0, beta)
        W0, H0 = _initialize_nmf(Y, 4, init="nndsvda", random_state=0)
        p = mg.NMF(4, beta_loss=beta, tol=0, max_iter=13).get_params()
        W, Ht = np.ascontiguousarray(W0), np.ascontiguousarray(H0.T)
        W, Ht, info = bl.alternate_beta(data, W, Ht, p, Regularization())
        f = info["history"][:, 1]
        assert np.all(np.diff(f) <= 1e-12 * f[0]), beta  # every half-step is a descent
        direct = _beta_divergence(Y, W, Ht.T, beta)
        assert f[-1] == pytest.approx(direct, rel=1e-9), beta


# -- the fit's half-step by GEMMs over blocks of columns (newton_rows) -------------------------


@pytest.mark.parametrize(
    ("beta", "k", "shape"),
    # (1000 x 40: several sub-blocks a block, the last one partial, on both sides)
    [
        (0.0, 3, (1000, 40)),
        (0.0, 8, (110, 100)),
        (0.5, 8, (110, 100)),
        (3.0, 16, (110, 100)),
        (1.0, 6, (110, 100)),  # Kullback-Leibler on mostly nonzero data, against its
    ],  # pattern kernel
)
@pytest.mark.parametrize("side", ["H", "W"])
def test_rows_road_takes_the_column_kernels_step(monkeypatch, beta, k, shape, side):
    # the same Newton iteration as the one-column kernel (the products as GEMMs, the
    # sweeps and the line search the same functions): iterates equal to rounding
    from msm_gpu.factorization import newton_rows as nr

    m, d = shape
    Y = positive(m, d, k, seed=6)
    rng = np.random.default_rng(7)
    W, Ht = rng.random((m, k)) + 0.1, rng.random((d, k)) + 0.1
    F, X = (W, Ht) if side == "H" else (Ht, W)
    data = bl.BetaData(Y, 0, beta)
    fit = {"omega": 1.0, "theta": 1e-3, "newton": 1, "sweeps": 30, "sweep_tol": 0.1}
    assert nr.takes(data.kind, k, data.nnz)
    rows = np.array(X, order="C")
    df_rows, counts_rows = bl.newton_half_step(data, side, F, rows, 0.3, 0.2, **fit)
    monkeypatch.setattr(nr, "MIN_K", {})
    assert not nr.takes(data.kind, k, data.nnz)
    cols = np.array(X, order="C")
    df_cols, counts_cols = bl.newton_half_step(data, side, F, cols, 0.3, 0.2, **fit)
    assert not np.array_equal(cols, X)  # a step was taken
    np.testing.assert_allclose(rows, cols, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(df_rows, df_cols, rtol=1e-7, atol=1e-9 * np.abs(df_cols).max())
    assert (df_rows <= 0).all()
    np.testing.assert_array_equal(counts_rows[:, 0], counts_cols[:, 0])


def test_kl_takes_the_rows_road_by_density_not_storage():
    # mostly nonzero counts (dense or CSR: the same data) take the GEMM road; the same fit
    # either way.  Mostly zero counts keep to the nonzeros (no dense copy is made)
    from msm_gpu.factorization import newton_rows as nr

    rng = np.random.default_rng(9)
    Y = counts(120, 100, 5, seed=9) + rng.poisson(2.0, (120, 100))
    assert np.count_nonzero(Y) >= nr.KL_DENSE_SHARE * Y.size
    for stored in (Y, sp.csr_matrix(Y)):
        assert bl.BetaData(stored, 0, 1.0).dense_rows is not None
    fits = []
    for stored in (Y, sp.csr_matrix(Y)):
        model = mg.NMF(5, beta_loss="kullback-leibler", random_state=0, max_iter=40)
        fits.append((model.fit_transform(stored), model.components_))
    for dense, csr in zip(*fits, strict=True):
        np.testing.assert_allclose(csr, dense, rtol=1e-12, atol=1e-14)
    sparse_counts = Y * (rng.random(Y.shape) < 0.3)
    assert np.count_nonzero(sparse_counts) < nr.KL_DENSE_SHARE * sparse_counts.size
    assert bl.BetaData(sparse_counts, 0, 1.0).dense_rows is None


def test_rows_road_fit_tracks_the_true_objective():
    # Itakura-Saito (12 000 entries) takes the GEMM road: each iteration still a descent, and
    # the objective followed by the measured changes is the directly evaluated one
    from msm_gpu.factorization import newton_rows as nr

    Y = positive(120, 100, 8, seed=8)
    data = bl.BetaData(Y, 0, 0.0)
    assert nr.takes(data.kind, 8, data.nnz)
    W0, H0 = _initialize_nmf(Y, 8, init="nndsvda", random_state=0)
    p = mg.NMF(8, beta_loss=0.0, tol=0, max_iter=13).get_params()
    W, Ht = np.ascontiguousarray(W0), np.ascontiguousarray(H0.T)
    W, Ht, info = bl.alternate_beta(data, W, Ht, p, Regularization())
    f = info["history"][:, 1]
    assert np.all(np.diff(f) <= 1e-12 * f[0])
    assert f[-1] == pytest.approx(_beta_divergence(Y, W, Ht.T, 0.0), rel=1e-9)


def test_rows_blocks_cover_the_columns_in_bounded_memory():
    from msm_gpu.factorization import newton_rows as nr

    for c, n in ((1, 5), (31, 400), (600, 400), (1000, 10**5), (7, 10**7)):
        bounds = nr.block_bounds(c, n)
        assert bounds[0] == 0 and bounds[-1] == c and np.all(np.diff(bounds) >= 1)
        per = max(1, nr.BLOCK_BYTES // (6 * 8 * n))  # columns whose workspace fits
        assert int(np.diff(bounds).max()) <= per
        assert len(bounds) - 1 <= max(nr.MAX_BLOCKS, -(-c // per))  # no narrower than needed


# -- fits against scikit-learn --------------------------------------------------------------


@pytest.mark.parametrize("loss", ["kullback-leibler", "itakura-saito", 0.5, 1.5])
def test_fit_reaches_scikit_learns_multiplicative_updates(loss):
    beta = LOSSES.get(loss, loss)
    Y = positive(seed=4) if beta <= 0.5 else counts(seed=4)
    W0, H0 = _initialize_nmf(Y, 4, init="nndsvda", random_state=0)
    sk = SkNMF(4, init="custom", solver="mu", beta_loss=loss, max_iter=2000, tol=1e-8)
    W_sk = sk.fit_transform(Y, W=W0.copy(), H=H0.copy())
    f_sk = _beta_divergence(Y, W_sk, sk.components_, loss)
    model = mg.NMF(4, init="custom", beta_loss=loss, tol=1e-8, max_iter=2000)
    W = model.fit_transform(Y, W=W0, H=H0)
    f = _beta_divergence(Y, W, model.components_, loss)
    assert f <= f_sk * (1 + 1e-3), (f, f_sk)
    assert model.n_iter_ < sk.n_iter_
    assert W.min() >= 0 and model.components_.min() >= 0


def test_kl_sparse_and_dense_give_the_same_fit():
    Y = counts(seed=5)
    dense = mg.NMF(4, beta_loss="kullback-leibler", random_state=0, max_iter=50)
    sparse = mg.NMF(4, beta_loss="kullback-leibler", random_state=0, max_iter=50)
    W = dense.fit_transform(Y)
    Ws = sparse.fit_transform(sp.csr_matrix(Y))
    np.testing.assert_allclose(Ws, W, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(sparse.components_, dense.components_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(sparse.history_[:, 1], dense.history_[:, 1], rtol=1e-12)


@pytest.mark.parametrize("loss", sorted(LOSSES))
def test_fit_is_the_same_on_one_thread_and_on_two(monkeypatch, loss):
    """Every column of a half-step is its own problem: splitting the columns over the
    sweep's threads changes no bit of the fit (the thread counts are checked: both data
    sets are large enough for two)."""
    from msm_gpu.backends.cpu.threads import available_cpus

    if available_cpus() < 2:
        pytest.skip("one CPU: no second thread to compare with")
    if loss == "itakura-saito":  # the GEMM road (newton_rows)
        Y, k = positive(150, 200, 6, seed=3), 6
    else:  # the pattern kernel
        Y, k = counts(300, 400, 10, seed=3), 10
    used = []
    run_ranges = bl.run_ranges

    def counting(fn, n_items, n_threads):
        used.append(n_threads)
        return run_ranges(fn, n_items, n_threads)

    monkeypatch.setattr(bl, "run_ranges", counting)
    fits = []
    for threads in ("1", "2"):
        monkeypatch.setenv("OMP_NUM_THREADS", threads)
        used.clear()
        model = mg.NMF(k, beta_loss=loss, max_iter=15, random_state=0)
        fits.append((model.fit_transform(Y), model.components_, model.history_[:, 1]))
        assert max(used) == int(threads)
    for one, two in zip(*fits, strict=True):
        np.testing.assert_array_equal(one, two)


def test_general_beta_takes_sparse_input():
    Y = counts(seed=6)
    W0, H0 = _initialize_nmf(Y, 3, init="nndsvda", random_state=0)
    kw = {"beta_loss": 1.5, "init": "custom", "max_iter": 20}
    a = mg.NMF(3, **kw).fit(Y, W=W0, H=H0)
    b = mg.NMF(3, **kw).fit(sp.csc_matrix(Y), W=W0, H=H0)
    np.testing.assert_allclose(b.components_, a.components_, rtol=1e-9, atol=1e-12)


def test_zeros_with_beta_at_most_zero_are_refused_as_scikit_learn():
    Y = counts()
    with pytest.raises(ValueError, match="beta_loss <= 0"):
        SkNMF(3, beta_loss="itakura-saito", solver="mu").fit(Y)
    for loss in ("itakura-saito", -0.5):
        with pytest.raises(ValueError, match="beta_loss <= 0"):
            mg.NMF(3, beta_loss=loss).fit(Y)
        Z = positive()
        Z[0, 0] = 0.0
        with pytest.raises(ValueError, match="beta_loss <= 0"):
            mg.NMF(3, beta_loss=loss).fit(sp.csr_matrix(Z))  # one implicit zero
    mg.NMF(3, beta_loss="itakura-saito", max_iter=3).fit(sp.csr_matrix(positive()))  # none


def test_solvers_other_than_msm_and_mu_refuse_other_losses():
    Y = counts()
    for solver in ("hals", "bpp", "pg"):
        with pytest.raises(ValueError, match="Frobenius loss only"):
            mg.NMF(3, solver=solver, beta_loss="kullback-leibler").fit(Y)


@pytest.mark.parametrize("loss", ["kullback-leibler", 1.5])
def test_fit_transform_and_transform_agree(loss):
    Y = counts(seed=7)
    model = mg.NMF(4, beta_loss=loss, random_state=0)
    W = model.fit_transform(Y)
    W2 = model.transform(Y)
    assert np.linalg.norm(W - W2) <= 1e-6 * np.linalg.norm(W)


def test_float32_in_float32_out():
    Y = counts(seed=8).astype(np.float32)
    model = mg.NMF(3, beta_loss="kullback-leibler", random_state=0, max_iter=20)
    W = model.fit_transform(Y)
    assert W.dtype == model.components_.dtype == model.transform(Y).dtype == np.float32


# -- the multiplicative updates: scikit-learn's iterates ---------------------------------


@pytest.mark.parametrize("loss", ["frobenius", "kullback-leibler", "itakura-saito", 1.5, 3.0])
def test_mu_follows_scikit_learns_iterates(loss):
    beta = {"frobenius": 2.0, **LOSSES}.get(loss, loss)
    Y = positive(seed=9) if beta <= 0 else counts(seed=9) + 0.5
    W0, H0 = _initialize_nmf(Y, 3, init="nndsvda", random_state=0)
    kw = {"init": "custom", "solver": "mu", "beta_loss": loss, "max_iter": 7, "tol": 0}
    kw_reg = {"alpha_W": 0.01, "alpha_H": 0.02, "l1_ratio": 0.3}
    for extra in ({}, kw_reg):
        sk = SkNMF(3, **kw, **extra)
        sk.fit(Y, W=W0.copy(), H=H0.copy())
        model = mg.NMF(3, **kw, **extra).fit(Y, W=W0, H=H0)
        np.testing.assert_allclose(model.components_, sk.components_, rtol=1e-9, atol=1e-12)
        assert model.n_iter_ == 7


# -- regularisation -------------------------------------------------------------------------


def test_kl_regularised_transform_is_the_penalised_minimiser():
    # the W-step with scikit-learn's scaled penalties is convex: our exact transform
    # against L-BFGS-B on one row (l1_W = d alpha l1_ratio, l2_W = d alpha (1 - l1_ratio))
    Y = counts(seed=10)
    model = mg.NMF(4, beta_loss="kullback-leibler", alpha_W=0.01, l1_ratio=0.4, random_state=0)
    W = model.fit_transform(Y)
    H = model.components_
    d = Y.shape[1]
    l1, l2 = d * 0.01 * 0.4, d * 0.01 * 0.6

    def f(w):
        return _beta_divergence(Y[[0]], w[None, :], H, 1) + l1 * w.sum() + 0.5 * l2 * w @ w

    ref = scipy.optimize.minimize(
        f, np.full(4, 0.3), method="L-BFGS-B", bounds=[(0, None)] * 4,
        options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 10000},
    )  # fmt: skip
    assert f(W[0]) <= ref.fun + 1e-9 * abs(ref.fun)
    np.testing.assert_allclose(model.transform(Y)[0], W[0], rtol=1e-6, atol=1e-9)


def test_frobenius_regularised_transform_is_the_penalised_minimiser():
    Y = np.random.default_rng(11).random((30, 20))
    model = mg.NMF(4, alpha_W=0.02, alpha_H="same", l1_ratio=0.5, random_state=0)
    W = model.fit_transform(Y)
    H = model.components_
    d = Y.shape[1]
    l1, l2 = d * 0.02 * 0.5, d * 0.02 * 0.5

    def f(w):
        r = Y[3] - w @ H
        return 0.5 * r @ r + l1 * w.sum() + 0.5 * l2 * w @ w

    ref = scipy.optimize.minimize(
        f, np.full(4, 0.3), method="L-BFGS-B", bounds=[(0, None)] * 4,
        options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 10000},
    )  # fmt: skip
    assert f(W[3]) <= ref.fun + 1e-10 * abs(ref.fun)
    np.testing.assert_allclose(W[3], ref.x, atol=1e-6)
    np.testing.assert_allclose(model.transform(Y), W, rtol=1e-7, atol=1e-10)


@pytest.mark.parametrize("solver", ["msm", "hals", "bpp"])
def test_frobenius_penalties_as_scikit_learn(solver):
    # the objective with scikit-learn's scaling: 1/2 ||Y - WH||^2 + m alpha_H (l1 sum H
    # + ...) + d alpha_W (...); from scikit-learn cd's start we reach its objective
    Y = np.random.default_rng(12).random((40, 25))
    m, d = Y.shape
    W0, H0 = _initialize_nmf(Y, 5, init="nndsvda", random_state=0)
    kw = {"init": "custom", "alpha_W": 0.01, "alpha_H": 0.03, "l1_ratio": 0.7}

    def objective(W, H):
        value = 0.5 * np.sum((Y - W @ H) ** 2)
        value += d * 0.01 * (0.7 * W.sum() + 0.15 * np.sum(W**2))
        value += m * 0.03 * (0.7 * H.sum() + 0.15 * np.sum(H**2))
        return value

    model = mg.NMF(5, solver=solver, max_iter=3000, tol=1e-12, **kw)
    W = model.fit_transform(Y, W=W0, H=H0)
    H = model.components_
    assert model.info_["objective"] == pytest.approx(objective(W, H), rel=1e-9)
    # a stationary point of the penalised problem: KKT of both half-steps
    l1w, l2w, l1h, l2h = d * 0.01 * 0.7, d * 0.01 * 0.3, m * 0.03 * 0.7, m * 0.03 * 0.3
    grad_w = (W @ H - Y) @ H.T + l1w + l2w * W
    grad_h = W.T @ (W @ H - Y) + l1h + l2h * H
    for x, g in ((W, grad_w), (H, grad_h)):
        kkt = np.where(x > 0, np.abs(g), np.maximum(-g, 0.0)).max() / np.abs(Y).sum()
        assert kkt < 1e-6, (solver, kkt)
    # scikit-learn cd from the same start lands on a point of comparable value (the l1
    # part gives many stationary points; msm and hals stop 0.2 % above cd here)
    sk = SkNMF(5, solver="cd", max_iter=2000, tol=1e-10, **kw)
    W_sk = sk.fit_transform(Y, W=W0.copy(), H=H0.copy())
    assert objective(W, H) <= objective(W_sk, sk.components_) * 1.01
    # the l1 part makes H sparser than without penalties
    plain = mg.NMF(5, solver=solver, init="custom", max_iter=2000, tol=1e-10)
    plain.fit(Y, W=W0, H=H0)
    assert np.sum(model.components_ == 0) > np.sum(plain.components_ == 0)


def test_an_infinite_start_recovers():
    # a zero row of the custom W where Y's row is not: the divergence is +inf at the start
    # (beta <= 1); the W-step moves that row off zero and the fit goes on
    rng = np.random.default_rng(13)
    Y = counts(seed=13) + 1.0
    W0, H0 = rng.random((40, 4)), rng.random((4, 50))
    W0[7] = 0.0
    for loss in ("kullback-leibler", "itakura-saito"):
        model = mg.NMF(4, beta_loss=loss, init="custom", max_iter=300).fit(Y, W=W0, H=H0)
        hist = model.history_[:, 1]
        assert np.isinf(hist[0]) and np.isfinite(hist[1:]).all()
        assert np.all(np.diff(hist[1:]) <= 1e-9 * hist[1])
        assert model.converged_


def _is_rows(X, W, H):
    ratio = X / (W @ H)
    return (ratio - np.log(ratio) - 1.0).sum(axis=1)


def test_is_transform_settles_rows_that_crawl(monkeypatch):
    # Itakura-Saito rows can converge slowly: the exact W-step's 100 Newton iterations
    # left a row of digits 1.1% above its optimum (no warning).  Truth: the same step
    # with 5000 iterations for every row
    from sklearn.datasets import load_digits

    X = load_digits().data[:600] + 0.1
    model = mg.NMF(10, beta_loss="itakura-saito", solver="mu", random_state=0).fit(X)
    H = model.components_
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)  # settled: no warning either
        W = model.transform(X)
    monkeypatch.setattr(bl, "SOLVE_NEWTON", 5000)
    monkeypatch.setattr(bl, "EXTRA_NEWTON", 1)
    ref = _is_rows(X, model.transform(X), H)
    assert np.max((_is_rows(X, W, H) - ref) / ref) <= 1e-10


def test_a_w_step_cut_short_warns(monkeypatch):
    monkeypatch.setattr(bl, "SOLVE_NEWTON", 2)
    monkeypatch.setattr(bl, "EXTRA_NEWTON", 1)
    X = positive(seed=3)
    model = mg.NMF(4, beta_loss="itakura-saito", random_state=0, max_iter=50)
    with pytest.warns(ConvergenceWarning, match="had not settled"):
        model.fit(X)
    with pytest.warns(ConvergenceWarning, match="had not settled"):
        model.transform(X)
