"""NMF: scikit-learn's inits and names, extrapolation, relative theta, the fix on digits."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.decomposition._nmf import _initialize_nmf

from msm_gpu.apps import NMF, nmf
from msm_gpu.factorization import solvers as ns
from msm_gpu.factorization.extrapolation import Extrapolation
from msm_gpu.factorization.init import initialize, resolve_init


def objective(Y, W, H):
    Y = Y.toarray() if sp.issparse(Y) else Y
    return 0.5 * float(np.sum((Y - W @ H) ** 2))


# -- inits: the same factors as scikit-learn's own _initialize_nmf ---------------------


@pytest.mark.parametrize("init", ["random", "nndsvd", "nndsvda", "nndsvdar"])
@pytest.mark.parametrize("sparse", [False, True])
def test_inits_equal_sklearn(init, sparse):
    rng = np.random.default_rng(0)
    Y = rng.random((40, 30))
    Y[Y < 0.3] = 0.0
    if sparse:
        Y = sp.csr_matrix(Y)
    W, H = initialize(Y, 6, init, random_state=3)
    Ws, Hs = _initialize_nmf(Y, 6, init=init, random_state=3)
    np.testing.assert_allclose(W, Ws, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(H, Hs, rtol=1e-10, atol=1e-12)
    assert W.min() >= 0 and H.min() >= 0


def test_estimator_starts_from_sklearns_factors():
    rng = np.random.default_rng(1)
    Y = rng.random((30, 20))
    for init in ("random", "nndsvd", "nndsvda", "nndsvdar"):
        model = NMF(5, init=init, random_state=7, max_iter=1, tol=0).fit(Y)
        Ws, Hs = _initialize_nmf(Y, 5, init=init, random_state=7)
        assert np.isclose(model.history_[0, 1], objective(Y, Ws, Hs), rtol=1e-12)


def test_default_init_rule_matches_sklearn():
    from sklearn.decomposition import NMF as SkNMF

    assert SkNMF().init is None and NMF().init is None
    assert resolve_init(None, 5, (30, 20)) == "nndsvda"
    assert resolve_init(None, 25, (30, 20)) == "random"
    Y = np.random.default_rng(2).random((30, 20))
    for k in (5, 20):  # k <= min(m, d): nndsvda, deterministic
        Ws, Hs = _initialize_nmf(Y, k, init=None, random_state=0)
        model = NMF(k, max_iter=1, tol=0, random_state=0).fit(Y)
        assert np.isclose(model.history_[0, 1], objective(Y, Ws, Hs), rtol=1e-12)
    with pytest.raises(ValueError, match="n_components <= min"):
        initialize(Y, 25, "nndsvd")


def test_init_float32_and_generator():
    Y = np.random.default_rng(3).random((20, 10)).astype(np.float32)
    W, H = initialize(Y, 3, "random", random_state=0)
    Ws, Hs = _initialize_nmf(Y, 3, init="random", random_state=0)
    assert W.dtype == np.float32 and H.dtype == np.float32
    np.testing.assert_allclose(W, Ws, rtol=1e-6)
    W1, _ = initialize(Y, 3, "nndsvdar", random_state=np.random.default_rng(5))
    W2, _ = initialize(Y, 3, "nndsvdar", random_state=np.random.default_rng(5))
    np.testing.assert_array_equal(W1, W2)


def test_bad_init_and_beta_loss_are_refused():
    Y = np.random.default_rng(4).random((10, 8))
    with pytest.raises(ValueError, match="init must be one of"):
        NMF(2, init="svd").fit(Y)
    with pytest.raises(ValueError, match="solver='hals' minimises the Frobenius loss only"):
        NMF(2, beta_loss="kullback-leibler", solver="hals").fit(Y)
    with pytest.raises(ValueError, match="beta_loss"):
        NMF(2, beta_loss="poisson").fit(Y)
    with pytest.raises(ValueError, match="extrapolation"):
        NMF(2, extrapolation="yes").fit(Y)
    with pytest.raises(TypeError, match="random_state"):
        NMF(2, random_state="seed").fit(Y)
    for loss in ("frobenius", 2, 2.0):
        assert NMF(2, beta_loss=loss, max_iter=2).fit(Y).n_iter_ == 2


# -- extrapolation ---------------------------------------------------------------------


def test_extrapolation_weight_follows_ang_gillis():
    ex = Extrapolation()
    assert ex.update(1.0, 2.0)  # decrease: beta = min(beta_bar, 1.01 beta)
    assert np.isclose(ex.beta, 0.505) and np.isclose(ex.beta_bar, 1.0)
    assert not ex.update(3.0, 1.0)  # increase: restart
    assert np.isclose(ex.beta_bar, 0.505) and np.isclose(ex.beta, 0.505 / 1.5)
    assert ex.restarts == 1
    new, old = np.array([1.0, 0.1]), np.array([0.0, 1.0])
    point = ex.point(new, old)
    np.testing.assert_allclose(point, np.maximum(new + ex.beta * (new - old), 0))
    # a new array; the inputs are not modified
    assert not np.shares_memory(point, new) and not np.shares_memory(point, old)
    np.testing.assert_array_equal(new, [1.0, 0.1])
    np.testing.assert_array_equal(old, [0.0, 1.0])


def test_extrapolated_run_returns_its_best_pair():
    rng = np.random.default_rng(5)
    Y = rng.random((50, 35))
    W, H, info = nmf(Y, 6, max_iter=40, tol=0, random_state=1)
    assert info["extrapolation"]
    hist = info["history"][:, 1]
    f = objective(Y, W, H)
    # the best pair's H, with W solved exactly for it: at most the loop's best value
    assert np.isclose(info["objective_loop"], hist.min(), rtol=1e-12)
    assert np.isclose(f, info["objective"], rtol=1e-9) and f <= hist.min() * (1 + 1e-12)
    assert W.min() >= 0 and H.min() >= 0
    # every recorded value is the objective of a feasible pair, so none is below the
    # exact (bpp) run's eventual value by much; and it is not worse than plain MSM's
    _, _, plain = nmf(Y, 6, max_iter=40, tol=0, random_state=1, extrapolation=False)
    assert info["objective"] <= plain["history"][-1, 1] * (1 + 1e-9)


def test_tol_rule_does_not_stop_at_a_restart():
    rng = np.random.default_rng(6)
    Y = rng.random((40, 30))
    model = NMF(5, tol=1e-6, max_iter=2000, random_state=0).fit(Y)
    hist = model.history_[:, 1]
    assert model.converged_
    # the stopping step was a decrease (a restart is an increase and never stops the run)
    assert hist[-1] <= hist[-2]


# -- theta relative to the scale of the Gram matrix -------------------------------------


def test_theta_is_relative_to_the_scale_of_the_data():
    rng = np.random.default_rng(7)
    Y = rng.random((30, 25))
    W0, H0 = rng.random((30, 4)), rng.random((4, 25))
    kw = {"init": "custom", "max_iter": 10, "tol": 0, "theta": 0.5, "extrapolation": False}
    _, _, a = nmf(Y, 4, W=W0, H=H0, **kw)
    c = 1e-6  # Y -> c Y, factors -> sqrt(c) factors: objective -> c^2 objective
    _, _, b = nmf(c * Y, 4, W=np.sqrt(c) * W0, H=np.sqrt(c) * H0, **kw)
    np.testing.assert_allclose(b["history"][:, 1], c * c * a["history"][:, 1], rtol=1e-8)


def test_default_theta_is_the_documented_relative_one():
    from msm_gpu.apps.nmf import DEFAULT_THETA

    assert NMF().get_params()["theta"] == DEFAULT_THETA == 1e-3
    # the default reaches the model's half-steps: a default run is the theta = 1e-3 run
    rng = np.random.default_rng(4)
    Y = rng.random((30, 20))
    kw = {"max_iter": 5, "tol": 0, "random_state": 0, "extrapolation": False}
    W1, H1, _ = nmf(Y, 3, **kw)
    W2, H2, _ = nmf(Y, 3, theta=1e-3, **kw)
    W3, H3, _ = nmf(Y, 3, theta=1e-2, **kw)
    np.testing.assert_array_equal(W1, W2)
    assert not np.allclose(W1, W3)


def test_relative_theta_is_the_absolute_one_times_mean_diagonal():
    rng = np.random.default_rng(8)
    from msm_gpu.backends import get_backend

    B = rng.random((50, 6))
    G, P = B.T @ B, B.T @ rng.random((50, 9))
    X0 = rng.random((6, 9))
    be = get_backend("cpu", G)
    x_rel, _ = ns.half_step("msm", be, G, P, X0, max_inner=1, inner_tol=0, theta=0.2)
    # reference: one sweep of MSM with B_jj = G_jj + theta * mean(diag G) (omega = 1)
    t = 0.2 * np.mean(np.diag(G))
    X = X0.copy()
    for j in range(6):
        w = G[j] @ X - G[j, j] * X[j] - P[j] - t * X[j]
        X[j] = np.maximum(-w / (G[j, j] + t), 0.0)
    np.testing.assert_allclose(x_rel, X, rtol=1e-10, atol=1e-12)


# -- the fix: MSM-NMF reaches exact ANLS's stationary value -----------------------------


def test_msm_reaches_bpp_objective_on_a_planted_problem():
    rng = np.random.default_rng(9)
    m, d, k = 60, 45, 5
    Y = rng.random((m, k)) @ rng.random((k, d)) + 0.05 * rng.random((m, d))
    W0, H0 = _initialize_nmf(Y, k, init="random", random_state=0)
    kw = {"init": "custom", "W": W0, "H": H0, "tol": 0}
    _, _, exact = nmf(Y, k, solver="bpp", max_iter=3000, **kw)
    _, _, msm = nmf(Y, k, solver="msm", max_iter=3000, **kw)
    f_bpp, f_msm = exact["history"][-1, 1], msm["objective"]
    # the same stationary value (MSM's iterations are cheap, it needs more of them)
    assert abs(f_msm - f_bpp) <= 1e-5 * f_bpp, (f_msm, f_bpp)


def test_digits_msm_no_longer_settles_above_bpp():
    """Issue 11's case (digits, k = 20, scikit-learn's random init, seed 0): the old
    schedule (13 H-sweeps, 2 W-sweeps, no extrapolation) settled at 176278 after 500
    iterations, bpp at 169396 and scikit-learn cd at 171402 after 1000."""
    from sklearn.datasets import load_digits

    Y = load_digits().data.astype(np.float64)
    W0, H0 = _initialize_nmf(Y, 20, init="random", random_state=0)
    _, _, info = nmf(Y, 20, init="custom", W=W0, H=H0, max_iter=250, tol=0)
    assert info["objective"] < 171402.0, info["objective"]
