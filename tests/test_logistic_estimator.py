"""mg.SparseLogisticRegression: scikit-learn conventions and agreement with minimize."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone

import msm_gpu as mg


@pytest.fixture(scope="module")
def digits():
    from sklearn.datasets import load_digits
    from sklearn.preprocessing import StandardScaler

    x, y = load_digits(return_X_y=True)
    x, y = x[:600], y[:600]
    return StandardScaler().fit_transform(x), y


def test_binary_fit_matches_minimize_and_string_labels():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((120, 6))
    labels = np.where(x[:, 0] - x[:, 1] + 0.5 * rng.standard_normal(120) > 0, "spam", "ham")
    model = mg.SparseLogisticRegression(alpha=0.01, tol=1e-10).fit(x, labels)
    assert list(model.classes_) == ["ham", "spam"]
    assert model.coef_.shape == (1, 6) and model.intercept_.shape == (1,)
    res = mg.minimize(mg.Logistic(x, (labels == "spam") * 1.0), mg.L1(0.01), tol=1e-10)
    np.testing.assert_allclose(model.coef_[0], res.x[:-1], atol=1e-12)
    assert model.intercept_[0] == pytest.approx(res.x[-1], abs=1e-12)
    scores = model.decision_function(x)
    assert scores.shape == (120,)
    np.testing.assert_allclose(scores, x @ res.x[:-1] + res.x[-1], rtol=1e-12, atol=1e-12)
    proba = model.predict_proba(x)
    np.testing.assert_allclose(proba[:, 1], 1 / (1 + np.exp(-scores)), rtol=1e-12)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_array_equal(model.predict(x), np.where(scores > 0, "spam", "ham"))
    assert model.n_iter_.shape == (1,) and model.n_iter_[0] == res.n_iter


def test_multiclass_one_vs_rest_equals_binary_fits(digits):
    x, y = digits
    model = mg.SparseLogisticRegression(alpha=0.005, tol=1e-9).fit(x, y)
    assert model.coef_.shape == (10, 64) and model.intercept_.shape == (10,)
    assert model.result_.converged and model.n_iter_.shape == (10,)
    for k in (0, 3, 9):
        one = mg.SparseLogisticRegression(alpha=0.005, tol=1e-9).fit(x, (y == k) * 1)
        np.testing.assert_allclose(model.coef_[k], one.coef_[0], atol=1e-7)
    proba = model.predict_proba(x)
    assert proba.shape == (600, 10)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_array_equal(model.predict(x), np.argmax(model.decision_function(x), 1))
    assert model.score(x, y) > 0.95  # ClassifierMixin.score on the training data
    # the l1 penalty makes the coefficients sparse
    assert np.mean(model.coef_ == 0) > 0.2


def test_sparse_input_and_penalties(digits):
    x, y = digits
    dense = mg.SparseLogisticRegression(penalty="l0", alpha=0.002, tol=1e-8).fit(x, y == 1)
    sparse = mg.SparseLogisticRegression(penalty="l0", alpha=0.002, tol=1e-8).fit(
        sp.csr_matrix(x), y == 1
    )
    np.testing.assert_allclose(sparse.coef_, dense.coef_, atol=1e-7)
    assert np.count_nonzero(dense.coef_) < 64
    lp = mg.SparseLogisticRegression(penalty="lp", p=0.5, alpha=0.002).fit(x, y == 1)
    assert lp.result_.converged
    # unpenalised: scikit-learn's LogisticRegression with C = inf (lbfgs, tight tol)
    from sklearn.linear_model import LogisticRegression

    none = mg.SparseLogisticRegression(penalty="none", tol=1e-10).fit(x[:, 18:23], y == 1)
    ref = LogisticRegression(C=np.inf, tol=1e-12, max_iter=10000).fit(x[:, 18:23], y == 1)
    np.testing.assert_allclose(none.coef_, ref.coef_, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(none.intercept_, ref.intercept_, rtol=1e-4, atol=1e-5)


def test_sklearn_protocol():
    model = mg.SparseLogisticRegression(penalty="l0", alpha=0.3, fit_intercept=False)
    params = model.get_params()
    assert params["penalty"] == "l0" and params["alpha"] == 0.3
    copy = clone(model)
    assert copy.get_params() == params
    x = np.random.default_rng(1).standard_normal((40, 3))
    y = (x[:, 0] > 0) * 1
    with pytest.raises(Exception, match="not fitted"):
        model.predict(x)
    model.fit(x, y)
    assert np.all(model.intercept_ == 0)


def test_estimator_bad_input():
    x = np.random.default_rng(1).standard_normal((30, 3))
    y = (x[:, 0] > 0) * 1
    with pytest.raises(ValueError, match="penalty must be one of"):
        mg.SparseLogisticRegression(penalty="l2").fit(x, y)
    with pytest.raises(ValueError, match="alpha"):
        mg.SparseLogisticRegression(alpha=-1.0).fit(x, y)
    with pytest.raises(ValueError, match="at least two classes"):
        mg.SparseLogisticRegression().fit(x, np.ones(30))
    with pytest.raises(ValueError, match="y must be 1-D"):
        mg.SparseLogisticRegression().fit(x, np.ones((30, 2)))
    with pytest.raises(ValueError, match="y must have one label per row of X"):
        mg.SparseLogisticRegression().fit(x, y[:10])
    model = mg.SparseLogisticRegression().fit(x, y)
    with pytest.raises(ValueError, match="features"):
        model.predict(x[:, :2])
