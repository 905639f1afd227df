"""scikit-learn's estimator contract for every estimator msm_gpu exports (issue 41).

scikit-learn's own checks (``parametrize_with_checks``) run on each estimator; a check
that fails by design is listed in ``EXPECTED_FAILED`` with the reason, and is strict: once
it passes, the test fails until the entry is removed.  Then what the checks do not cover:
``check_param_validation``, errors that name the parameter, feature names, ``Pipeline``,
``GridSearchCV``, ``clone`` and pickling of fitted estimators.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import scipy.sparse as sp
import sklearn
from sklearn.base import BaseEstimator, clone
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils._param_validation import InvalidParameterError
from sklearn.utils.fixes import parse_version

import msm_gpu as mg

if parse_version(sklearn.__version__) < parse_version("1.6"):
    pytest.skip(
        "the estimator tags API and parametrize_with_checks(expected_failed_checks=...) "
        "need scikit-learn >= 1.6",
        allow_module_level=True,
    )

from sklearn.utils.estimator_checks import (  # noqa: E402 (after the version gate)
    check_param_validation,
    parametrize_with_checks,
)

#: The instances scikit-learn's checks run on, one per exported estimator class, each at
#: its default construction (issue 50: the defaults work on any data a user has).
CHECKED = {
    "NMF": mg.NMF(),
    "MiniBatchNMF": mg.MiniBatchNMF(),
    "SparseLogisticRegression": mg.SparseLogisticRegression(),
    "L0DictionaryLearning": mg.L0DictionaryLearning(),
}

#: Checks that fail by design, per estimator, with the reason.
EXPECTED_FAILED = {}


def _exported_estimators():
    return {
        name: obj
        for name in mg.__all__
        if isinstance(obj := getattr(mg, name), type) and issubclass(obj, BaseEstimator)
    }


def _expected_failed(estimator):
    return EXPECTED_FAILED.get(type(estimator).__name__, {})


def test_every_exported_estimator_is_checked():
    exported = _exported_estimators()
    assert set(exported) == set(CHECKED), "add new estimators to CHECKED"
    for name, est in CHECKED.items():
        assert type(est) is exported[name]
    assert set(EXPECTED_FAILED) <= set(CHECKED)


@pytest.mark.parametrize("name", list(CHECKED))
def test_checked_at_default_construction(name):
    """The checks run on ``Est()``, no parameter set."""
    est = CHECKED[name]
    assert est.get_params() == type(est)().get_params()


@parametrize_with_checks(
    list(CHECKED.values()), expected_failed_checks=_expected_failed, xfail_strict=True
)
def test_sklearn_check(estimator, check):
    check(estimator)


@pytest.mark.parametrize("name", list(CHECKED))
def test_check_param_validation(name):
    """Every parameter has a constraint; a bad type or value fails in every fit method."""
    check_param_validation(name, CHECKED[name])


# -- data ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def data():
    """Two well separated classes with nonnegative features (NMF takes them too)."""
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1], 40)
    centers = np.array([[3.0, 0.5, 0.5, 2.0, 0.2, 1.0], [0.5, 3.0, 2.0, 0.5, 1.0, 0.2]])
    X = np.abs(centers[y] + 0.3 * rng.standard_normal((80, 6)))
    return X, y


def _fitted(name, X, y):
    """A small fitted instance of each estimator (fast settings)."""
    if name == "NMF":
        return mg.NMF(3, max_iter=50, random_state=0).fit(X)
    if name == "MiniBatchNMF":
        return mg.MiniBatchNMF(3, max_iter=5, random_state=0).fit(X)
    if name == "SparseLogisticRegression":
        return mg.SparseLogisticRegression(alpha=0.01).fit(X, y)
    return mg.L0DictionaryLearning(
        n_components=8, lam=0.05, n_iter=3, dict_init="random", random_state=0
    ).fit(X)


def _output(model, X):
    """What a fitted estimator computes from X: its predictions or its transform."""
    if hasattr(model, "predict_proba"):
        return model.predict_proba(X)
    return model.transform(X)


# -- parameter validation ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "params", "bad"),
    [
        (mg.NMF, {"omega": 2.5}, "omega"),
        (mg.NMF, {"max_iter": -1}, "max_iter"),
        (mg.NMF, {"tol": "small"}, "tol"),
        (mg.NMF, {"solver": "lbfgs"}, "solver"),
        (mg.NMF, {"alpha_W": -1.0}, "alpha_W"),
        (mg.NMF, {"l1_ratio": 1.5}, "l1_ratio"),
        (mg.NMF, {"n_components": 0}, "n_components"),
        (mg.NMF, {"backend": "gpu"}, "backend"),
        (mg.NMF, {"extrapolation": "yes"}, "extrapolation"),
        (mg.NMF, {"time_limit": 0}, "time_limit"),
        (mg.SparseLogisticRegression, {"alpha": -1.0}, "alpha"),
        (mg.SparseLogisticRegression, {"hessian": "lbfgs"}, "hessian"),
        (mg.SparseLogisticRegression, {"fit_intercept": "yes"}, "fit_intercept"),
        (mg.SparseLogisticRegression, {"p": 1.5}, "p"),
        (mg.L0DictionaryLearning, {"n_components": 0}, "n_components"),
        (mg.L0DictionaryLearning, {"lam": -1.0}, "lam"),
        (mg.L0DictionaryLearning, {"method": "ista"}, "method"),
        (mg.L0DictionaryLearning, {"dict_init": "pca"}, "dict_init"),
        (mg.L0DictionaryLearning, {"h_iter": 0}, "h_iter"),
    ],
)
def test_invalid_parameter_is_named(cls, params, bad, data):
    X, y = data
    with pytest.raises(InvalidParameterError, match=rf"The '{bad}' parameter of {cls.__name__}"):
        cls(**params).fit(X, y)


@pytest.mark.parametrize(
    ("cls", "params", "message"),
    [
        # Names the constraints pass (any string) and the solvers refuse with a message
        # listing the accepted ones.
        (mg.NMF, {"init": "svd"}, "init must be one of"),
        (mg.NMF, {"beta_loss": "kullback-leibler", "solver": "hals"}, "Frobenius loss only"),
        (mg.SparseLogisticRegression, {"penalty": "l2"}, "penalty must be one of"),
    ],
)
def test_unknown_name_lists_the_accepted_ones(cls, params, message, data):
    X, y = data
    with pytest.raises(ValueError, match=message):
        cls(**params).fit(X, y)


def test_case_insensitive_names_still_accepted(data):
    """backend and method names were lower-cased by the solvers before the constraints."""
    X, _ = data
    model = mg.L0DictionaryLearning(
        n_components=8, lam=0.05, n_iter=1, method="MSM", dict_init="Random", backend="CPU"
    )
    assert model.fit(X).components_.shape == (8, 6)


# -- input checks --------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(CHECKED))
def test_empty_and_one_dimensional_data_messages(name, data):
    X, y = data
    est = clone(CHECKED[name])
    with pytest.raises(ValueError, match=r"0 sample\(s\)"):
        est.fit(X[:0], y[:0])
    with pytest.raises(ValueError, match=r"0 feature\(s\)"):
        est.fit(X[:, :0], y)
    with pytest.raises(ValueError, match="2-D.*Reshape your data"):
        est.fit(X[:, 0], y)


@pytest.mark.parametrize("name", list(CHECKED))
def test_fitted_methods_check_features_and_values(name, data):
    X, y = data
    model = _fitted(name, X, y)
    assert model.n_features_in_ == X.shape[1]
    assert not hasattr(model, "feature_names_in_")  # a NumPy array has no column names
    with pytest.raises(ValueError, match=f"X has 5 features, but {name} is expecting 6"):
        _output(model, X[:, :5])
    bad = X.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        _output(model, bad)
    with pytest.raises(ValueError, match="2-D.*Reshape your data"):
        _output(model, X[0])


@pytest.mark.parametrize("name", list(CHECKED))
def test_lists_are_accepted_like_arrays(name, data):
    X, y = data
    from_array = _output(_fitted(name, X, y), X)
    from_list = _output(_fitted(name, X.tolist(), y.tolist()), X.tolist())
    np.testing.assert_array_equal(from_list, from_array)


def test_nmf_converts_other_sparse_formats_without_changing_the_result(data):
    X, _ = data
    csr = sp.csr_matrix(X * (X > 1.0))
    ref = mg.NMF(3, max_iter=20, random_state=0).fit_transform(csr)
    for other in (csr.tocoo(), csr.tolil(), sp.csr_array(csr)):
        got = mg.NMF(3, max_iter=20, random_state=0).fit_transform(other)
        np.testing.assert_array_equal(got, ref)


def test_logistic_messages_for_targets_and_weights(data):
    X, y = data
    model = mg.SparseLogisticRegression(alpha=0.01)
    with pytest.raises(ValueError, match="requires y to be passed"):
        model.fit(X, None)
    with pytest.raises(ValueError, match="Unknown label type"):
        model.fit(X, X[:, 0])
    with pytest.raises(ValueError, match="weight.*zero"):
        model.fit(X, y, sample_weight=np.zeros(len(y)))
    with pytest.warns(sklearn.exceptions.DataConversionWarning):
        column = model.fit(X, y[:, None]).coef_
    np.testing.assert_array_equal(column, clone(model).fit(X, y).coef_)


def test_nmf_transform_agrees_with_fit_transform_once_converged(data):
    """What check_transformer_general asks, where the run has converged (see the xfail)."""
    X, _ = data
    model = mg.NMF(2, tol=1e-10, max_iter=2000, random_state=0)
    W = model.fit_transform(X)
    np.testing.assert_allclose(model.transform(X), W, atol=1e-3 * np.abs(W).max())


# -- feature names and set_output ----------------------------------------------------------


def test_get_feature_names_out(data):
    X, y = data
    nmf = _fitted("NMF", X, y)
    np.testing.assert_array_equal(nmf.get_feature_names_out(), ["nmf0", "nmf1", "nmf2"])
    dl = _fitted("L0DictionaryLearning", X, y)
    names = dl.get_feature_names_out()
    assert len(names) == 8 and names[0] == "l0dictionarylearning0"
    with pytest.raises(NotFittedError):
        mg.NMF(2).get_feature_names_out()


@pytest.mark.parametrize("name", ["NMF", "L0DictionaryLearning"])
def test_dataframe_names_and_set_output(name, data):
    pd = pytest.importorskip("pandas")
    X, y = data
    columns = [f"f{j}" for j in range(X.shape[1])]
    frame = pd.DataFrame(X, columns=columns)
    model = _fitted(name, frame, y)
    np.testing.assert_array_equal(model.feature_names_in_, columns)
    out = model.set_output(transform="pandas").transform(frame)
    assert isinstance(out, pd.DataFrame)
    assert list(out.columns) == list(model.get_feature_names_out())
    np.testing.assert_array_equal(
        out.to_numpy(), model.set_output(transform="default").transform(frame)
    )
    with pytest.raises(ValueError, match="feature names should match"):
        model.transform(frame[columns[::-1]])


# -- composition: Pipeline, GridSearchCV, clone, pickle ------------------------------------


def test_pipeline_of_all_three(data):
    X, y = data
    pipe = Pipeline(
        [
            ("nmf", mg.NMF(4, max_iter=100, random_state=0)),
            ("scale", StandardScaler()),
            ("code", mg.L0DictionaryLearning(n_components=6, lam=0.01, dict_init="random")),
            ("clf", mg.SparseLogisticRegression(alpha=0.01)),
        ]
    )
    pipe.set_params(code__random_state=0)
    assert pipe.fit(X, y).score(X, y) >= 0.95
    np.testing.assert_array_equal(pipe.predict(X), pipe.predict(X.tolist()))
    assert pipe[:-1].get_feature_names_out()[0] == "l0dictionarylearning0"


def test_grid_search_picks_the_working_settings(data):
    X, y = data
    search = GridSearchCV(
        make_pipeline(mg.NMF(max_iter=100, random_state=0), mg.SparseLogisticRegression()),
        {"nmf__n_components": [2, 4], "sparselogisticregression__alpha": [0.01, 10.0]},
        cv=3,
    ).fit(X, y)
    # alpha=10 zeroes every coefficient: a constant predictor, chance accuracy
    assert search.best_params_["sparselogisticregression__alpha"] == 0.01
    assert search.best_score_ >= 0.9
    assert search.best_estimator_.named_steps["nmf"].n_components in (2, 4)


@pytest.mark.parametrize("name", list(CHECKED))
def test_clone_keeps_parameters_and_drops_the_fit(name, data):
    X, y = data
    model = _fitted(name, X, y)
    copy = clone(model)
    assert copy.get_params() == model.get_params()
    with pytest.raises(NotFittedError):
        _output(copy, X)


@pytest.mark.parametrize("name", list(CHECKED))
def test_pickled_fitted_estimator_computes_the_same(name, data):
    X, y = data
    model = _fitted(name, X, y)
    loaded = pickle.loads(pickle.dumps(model))
    assert loaded.get_params() == model.get_params()
    assert loaded.n_features_in_ == model.n_features_in_
    np.testing.assert_array_equal(_output(loaded, X), _output(model, X))
    if hasattr(model, "predict"):
        np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
