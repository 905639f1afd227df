"""SparseLogisticRegression on data a user has (issue 50): columns in other units, scores
far from every class, max_iter reached, scalar and class weights.  Each answer is compared
with scikit-learn's liblinear (or SciPy's special functions) on the same input."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.special import log_expit, logsumexp
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression

import msm_gpu as mg

ALPHA = 0.01


def objective(x, y, coef, intercept, alpha, weights=None):
    """The estimator's problem: weighted mean logistic loss + alpha ||coef||_1."""
    sign = np.where(y == 1, 1.0, -1.0)
    loss = np.logaddexp(0.0, -sign * (x @ coef + intercept))
    s = np.ones(len(y)) if weights is None else weights
    return float(s @ loss / s.sum() + alpha * np.abs(coef).sum())


def liblinear(x, y, alpha, *, sample_weight=None, weight_sum=None, **kw):
    """scikit-learn's liblinear on the same problem, tight tolerance.  Its C multiplies
    the *sum* of the weighted losses: C = 1 / (alpha sum(weights))."""
    kw.setdefault("fit_intercept", False)
    c = 1.0 / (alpha * (len(y) if weight_sum is None else weight_sum))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # l1_ratio / penalty spelling across versions
        est = LogisticRegression(
            l1_ratio=1.0, C=c, solver="liblinear", tol=1e-12, max_iter=100000, **kw
        )
        return est.fit(x, y, sample_weight=sample_weight)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((300, 5))
    y = (x[:, 0] - x[:, 1] + 0.3 * rng.standard_normal(300) > 0).astype(int)
    return x, y


@pytest.mark.parametrize("factor", [1e6, 1e-4])
def test_one_column_in_other_units_reaches_liblinear(data, factor):
    """The stopping rule used to be absolute in the coefficients' units: a column scaled
    by 1e6 ended after max_iter at 0.77 accuracy (liblinear 0.93)."""
    x, y = data
    xu = x.copy()
    xu[:, 0] *= factor
    ours = mg.SparseLogisticRegression(alpha=ALPHA, fit_intercept=False).fit(xu, y)
    ref = liblinear(xu, y, ALPHA)
    assert ours.converged_
    assert ours.score(xu, y) == ref.score(xu, y)
    f_ours = objective(xu, y, ours.coef_[0], 0.0, ALPHA)
    f_ref = objective(xu, y, ref.coef_[0], 0.0, ALPHA)
    assert abs(f_ours - f_ref) <= 1e-6 * f_ref


def test_timestamp_column_with_intercept_reaches_liblinear(data):
    """Unix timestamps beside standardised columns: the fit said converged after one
    iteration at 0.53 accuracy.  liblinear solves the same problem on the centred column
    (the unpenalised intercept absorbs the offset; liblinear's intercept penalty made
    negligible by intercept_scaling)."""
    x, y = data
    xt = x.copy()
    xt[:, 0] = 1.7e9 + 1e6 * x[:, 0]
    ours = mg.SparseLogisticRegression(alpha=ALPHA).fit(xt, y)
    centred = xt.copy()
    centred[:, 0] -= 1.7e9
    ref = liblinear(centred, y, ALPHA, fit_intercept=True, intercept_scaling=1e4)
    assert ours.converged_
    assert ours.score(xt, y) == ref.score(centred, y) >= 0.9
    f_ours = objective(xt, y, ours.coef_[0], ours.intercept_[0], ALPHA)
    f_ref = objective(centred, y, ref.coef_[0], ref.intercept_[0], ALPHA)
    assert abs(f_ours - f_ref) <= 1e-6 * f_ref


def test_same_problem_in_other_units_gives_the_same_objective(data):
    """X * 1e10 with alpha * 1e10 is the same problem (w / 1e10): it ended at F 0.347
    instead of 0.2145."""
    x, y = data
    one = mg.SparseLogisticRegression(alpha=ALPHA).fit(x, y)
    big = mg.SparseLogisticRegression(alpha=ALPHA * 1e10).fit(x * 1e10, y)
    f_one = objective(x, y, one.coef_[0], one.intercept_[0], ALPHA)
    f_big = objective(x * 1e10, y, big.coef_[0], big.intercept_[0], ALPHA * 1e10)
    assert f_big == pytest.approx(f_one, rel=1e-9)
    np.testing.assert_allclose(big.coef_ * 1e10, one.coef_, rtol=1e-6, atol=1e-8)


def test_default_alpha_is_logistic_regression_c_one(data):
    """alpha=None is scikit-learn's C = 1: the same objective as liblinear at C = 1."""
    x, y = data
    ours = mg.SparseLogisticRegression(fit_intercept=False).fit(x, y)
    assert ours.alpha_ == 1.0 / len(y)
    ref = liblinear(x, y, 1.0 / len(y))
    f_ours = objective(x, y, ours.coef_[0], 0.0, ours.alpha_)
    f_ref = objective(x, y, ref.coef_[0], 0.0, ours.alpha_)
    assert abs(f_ours - f_ref) <= 1e-6 * f_ref


def test_scalar_and_class_weights_as_scikit_learn_takes_them(data):
    x, y = data
    # a number: the same weight for every sample (it was refused)
    ours = mg.SparseLogisticRegression(fit_intercept=False).fit(x, y, sample_weight=3.0)
    assert ours.alpha_ == 1.0 / (3.0 * len(y))
    ref = liblinear(x, y, ours.alpha_, sample_weight=np.full(len(y), 3.0), weight_sum=3 * len(y))
    f = [objective(x, y, m.coef_[0], 0.0, ours.alpha_) for m in (ours, ref)]
    assert abs(f[0] - f[1]) <= 1e-6 * f[1]
    # class_weight: "balanced" and a dict, against liblinear with the same class weights
    for cw in ("balanced", {0: 1.0, 1: 3.0}):
        ours = mg.SparseLogisticRegression(alpha=ALPHA, fit_intercept=False, class_weight=cw)
        ours.fit(x, y)
        per_class = cw if isinstance(cw, dict) else len(y) / (2 * np.bincount(y))
        w = np.asarray([per_class[label] for label in y], dtype=float)
        ref = liblinear(x, y, ALPHA, class_weight=cw, weight_sum=w.sum())
        f = [objective(x, y, m.coef_[0], 0.0, ALPHA, w) for m in (ours, ref)]
        assert abs(f[0] - f[1]) <= 1e-6 * f[1], cw
    with pytest.raises(ValueError, match="sample_weight must be >= 0"):
        mg.SparseLogisticRegression().fit(x, y, sample_weight=-np.ones(len(y)))
    with pytest.raises(ValueError, match=r"sample_weight must be a number or have shape \(300,\)"):
        mg.SparseLogisticRegression().fit(x, y, sample_weight=np.ones(7))


def test_probabilities_far_from_every_class_are_finite():
    """predict_proba was 0/0 (NaN rows) where every one-vs-rest score is below -745."""
    rng = np.random.default_rng(1)
    centres = np.array([[4.0, 0.0], [-4.0, 0.0], [0.0, 4.0]])
    y = np.repeat([0, 1, 2], 30)
    x = centres[y] + rng.standard_normal((90, 2))
    model = mg.SparseLogisticRegression(alpha=0.001).fit(x, y)
    # one-vs-rest scores of such points: move them all below -745 (exp underflows)
    model.intercept_ = model.intercept_ - 2000.0
    far = np.array([[0.0, -50.0], [3.0, 1.0], [-3.0, 2.0]])
    scores = model.decision_function(far)
    assert scores.max() < -745
    proba = model.predict_proba(far)
    assert np.all(np.isfinite(proba))
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-12)
    # SciPy's log_expit and logsumexp as the reference
    logs = log_expit(scores)
    expected = logs - logsumexp(logs, axis=1, keepdims=True)
    np.testing.assert_allclose(model.predict_log_proba(far), expected, rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(proba, np.exp(expected), rtol=1e-12)
    np.testing.assert_array_equal(model.predict(far), np.argmax(proba, axis=1))


def test_binary_log_proba_for_huge_scores(data):
    x, y = data
    model = mg.SparseLogisticRegression(alpha=ALPHA).fit(x, y)
    far = np.array([[1e4, -1e4, 0, 0, 0], [-1e4, 1e4, 0, 0, 0], [0.1, 0, 0, 0, 0]])
    s = model.decision_function(far)
    log_proba = model.predict_log_proba(far)
    np.testing.assert_allclose(log_proba[:, 1], log_expit(s), rtol=1e-12)
    np.testing.assert_allclose(log_proba[:, 0], log_expit(-s), rtol=1e-12)
    assert np.all(np.isfinite(log_proba))
    np.testing.assert_allclose(model.predict_proba(far).sum(axis=1), 1.0, rtol=1e-12)


def test_max_iter_reached_warns_and_says_so(data):
    x, y = data
    with pytest.warns(ConvergenceWarning, match="max_iter=1"):
        model = mg.SparseLogisticRegression(alpha=ALPHA, max_iter=1, tol=1e-12).fit(x, y)
    assert not model.converged_ and model.n_iter_[0] == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        assert mg.SparseLogisticRegression(alpha=ALPHA).fit(x, y).converged_


@pytest.mark.parametrize("sparse", [False, True])
def test_huge_and_tiny_units_standardise_without_overflow(data, sparse):
    """The column statistics divide by each column's largest entry before squaring: at
    1e160 the squares overflowed and the column was left unscaled."""
    import scipy.sparse as sps

    x, y = data
    xu = x.copy()
    xu[:, 1] *= 1e160
    xu[:, 2] *= 1e-160
    ours = mg.SparseLogisticRegression(alpha=ALPHA, fit_intercept=False)
    ours.fit(sps.csr_matrix(xu) if sparse else xu, y)
    # the same problem on the columns in their own units: the penalty on columns 1 and 2
    # scaled by 1e-160 and 1e160 (so column 1 free, column 2 held at 0), by liblinear
    # on x with column 1 scaled by 1e6 (penalty 1e-6: free to 1e-6) and column 2 dropped
    ref_x = x.copy()
    ref_x[:, 1] *= 1e6
    ref = liblinear(ref_x[:, [0, 1, 3, 4]], y, ALPHA)
    assert ours.converged_ and ours.coef_[0, 2] == 0.0
    f_ours = objective(xu, y, ours.coef_[0], 0.0, ALPHA)
    f_ref = objective(ref_x[:, [0, 1, 3, 4]], y, ref.coef_[0], 0.0, ALPHA)
    assert abs(f_ours - f_ref) <= 1e-5 * f_ref
