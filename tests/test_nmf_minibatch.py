"""MiniBatchNMF (issue 49): scikit-learn's estimator with exact batch solves."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.optimize
import scipy.sparse as sp
from sklearn.decomposition import MiniBatchNMF as SkMiniBatchNMF
from sklearn.decomposition._nmf import _initialize_nmf
from sklearn.exceptions import ConvergenceWarning

import msm_gpu as mg


@pytest.fixture(autouse=True)
def _quiet_max_iter():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        yield


def digits(n=400):
    from sklearn.datasets import load_digits

    return load_digits().data[:n]


def counts(m=120, d=40, k=4, seed=0):
    rng = np.random.default_rng(seed)
    return rng.poisson(rng.gamma(1.0, 1.0, (m, k)) @ rng.gamma(0.3, 1.0, (k, d))).astype(float)


def test_parameters_and_attributes_are_scikit_learns():
    ours, theirs = mg.MiniBatchNMF().get_params(), SkMiniBatchNMF().get_params()
    assert ours == theirs
    X = digits()
    model = mg.MiniBatchNMF(5, batch_size=100, max_iter=3, random_state=0).fit(X)
    assert model.components_.shape == (5, 64) and model.n_components_ == 5
    assert model.n_steps_ == 12 and model.n_iter_ == 3  # 4 batches a pass, 3 passes
    assert model.n_features_in_ == 64
    np.testing.assert_array_equal(
        model.get_feature_names_out()[:2], ["minibatchnmf0", "minibatchnmf1"]
    )


@pytest.mark.parametrize(("loss", "passes"), [("frobenius", 60), ("kullback-leibler", 20)])
def test_reaches_scikit_learns_objective_in_fewer_passes(loss, passes):
    # the same passes or more for scikit-learn (Frobenius: 3x as many) from the same init
    X = digits()
    kw = {"batch_size": 100, "random_state": 0, "beta_loss": loss}
    sk = SkMiniBatchNMF(6, max_iter=passes, **kw).fit(X)
    ours = mg.MiniBatchNMF(6, max_iter=20, **kw).fit(X)
    assert ours.reconstruction_err_ <= sk.reconstruction_err_, (
        ours.reconstruction_err_,
        sk.reconstruction_err_,
    )


def test_frobenius_h_is_the_exact_minimiser_of_the_accumulated_surrogate():
    # first partial_fit: W_b is the NNLS solution for the start H0, then H the NNLS
    # solution of min ||X - W_b H|| (the accumulated statistics of one batch)
    X = digits(80)
    model = mg.MiniBatchNMF(4, init="nndsvda", random_state=0).partial_fit(X)
    # the start: scikit-learn's init of X / 16 (max(X) = 16), scaled back by sqrt(16)
    assert X.max() == 16.0
    _, H0 = _initialize_nmf(X / 16.0, 4, init="nndsvda", random_state=0)
    H0 = 4.0 * H0
    W_b = np.array([scipy.optimize.nnls(H0.T, x)[0] for x in X])
    H1 = np.column_stack([scipy.optimize.nnls(W_b, X[:, j])[0] for j in range(X.shape[1])])
    np.testing.assert_allclose(model.components_, H1, rtol=1e-7, atol=1e-8)
    assert model.n_steps_ == 1
    # the second batch's statistics join the first's, weighted by rho
    X2 = digits(160)[80:]
    model.partial_fit(X2)
    W2 = np.array([scipy.optimize.nnls(H1.T, x)[0] for x in X2])
    rho = 0.7 ** (80 / 80)
    S = rho * W_b.T @ W_b + W2.T @ W2
    T = rho * W_b.T @ X + W2.T @ X2
    H2 = np.column_stack(
        [
            scipy.optimize.nnls(
                np.linalg.cholesky(S).T, np.linalg.solve(np.linalg.cholesky(S), T[:, j])
            )[0]
            for j in range(64)
        ]
    )
    np.testing.assert_allclose(model.components_, H2, rtol=1e-6, atol=1e-7)


def test_fit_transform_is_transform_and_float32_is_kept():
    X = digits().astype(np.float32)
    model = mg.MiniBatchNMF(5, batch_size=128, max_iter=5, random_state=0)
    W = model.fit_transform(X)
    assert W.dtype == model.components_.dtype == model.transform(X).dtype == np.float32
    np.testing.assert_allclose(model.transform(X), W, rtol=1e-5, atol=1e-6)


def test_kl_sparse_input_gives_the_dense_fit():
    X = counts()
    kw = {"batch_size": 40, "max_iter": 4, "random_state": 0, "beta_loss": "kullback-leibler"}
    dense = mg.MiniBatchNMF(4, **kw).fit(X)
    sparse = mg.MiniBatchNMF(4, **kw).fit(sp.csr_matrix(X))
    np.testing.assert_allclose(sparse.components_, dense.components_, rtol=1e-8, atol=1e-10)


def test_partial_fit_over_chunks_learns_the_data():
    X = digits()
    model = mg.MiniBatchNMF(6, random_state=0)
    for _ in range(5):
        for start in range(0, 400, 100):
            model.partial_fit(X[start : start + 100])
    full = mg.MiniBatchNMF(6, batch_size=100, max_iter=5, random_state=0).fit(X)
    err = np.linalg.norm(X - model.transform(X) @ model.components_)
    assert err <= 1.05 * full.reconstruction_err_
    assert model.n_steps_ == 20


def test_stopping_rules_as_scikit_learn():
    X = digits()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        mg.MiniBatchNMF(5, batch_size=100, max_iter=2, random_state=0, tol=1e-4).fit(X)
    assert any("Maximum number of iterations 2" in str(w.message) for w in caught)
    # tol on ||H - H_prev|| / ||H||: a loose one stops after the second batch
    model = mg.MiniBatchNMF(5, batch_size=50, max_iter=100, random_state=0, tol=10.0).fit(X)
    assert model.n_steps_ == 2
    # max_no_improvement: the smoothed cost must improve
    model = mg.MiniBatchNMF(5, batch_size=50, max_iter=100, random_state=0, tol=0.0,
                            max_no_improvement=1).fit(X)  # fmt: skip
    assert model.n_steps_ < 800


def test_dask_input_is_read_chunk_by_chunk():
    da = pytest.importorskip("dask.array")
    X = digits()
    _, H0 = _initialize_nmf(X, 5, init="nndsvda", random_state=0)
    kw = {"batch_size": 50, "max_iter": 3, "init": "custom", "fresh_restarts": True}
    ref = mg.MiniBatchNMF(5, **kw).fit(X, W=np.ones((400, 5)), H=H0)
    model = mg.MiniBatchNMF(5, **kw)
    W = model.fit_transform(da.from_array(X, chunks=(100, 64)), H=H0)
    np.testing.assert_allclose(model.components_, ref.components_, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(W.compute(), ref.transform(X), rtol=1e-8, atol=1e-10)
    assert model.reconstruction_err_ == pytest.approx(ref.reconstruction_err_, rel=1e-8)
    assert model.n_steps_ == ref.n_steps_ == 24


def test_bad_input_is_refused_clearly():
    X = digits(50)
    with pytest.raises(ValueError, match="Negative values"):
        mg.MiniBatchNMF(2).fit(-X - 1)
    with pytest.raises(ValueError, match="beta_loss <= 0"):
        mg.MiniBatchNMF(2, beta_loss="itakura-saito").fit(X)  # digits have zeros
    model = mg.MiniBatchNMF(2, random_state=0).partial_fit(X)
    with pytest.raises(ValueError, match="features"):
        model.partial_fit(X[:, :10])
    da = pytest.importorskip("dask.array")
    with pytest.raises(TypeError, match="partial_fit takes one batch in memory"):
        model.partial_fit(da.from_array(X, chunks=(25, 64)))
