"""Every estimator method that needs a fitted model raises scikit-learn's NotFittedError
before ``fit`` (a ValueError and an AttributeError too, as in scikit-learn)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

import msm_gpu as mg

X = np.abs(np.random.default_rng(0).standard_normal((12, 16)))
Y = (X[:, 0] > X[:, 1]).astype(int)

CASES = [
    (mg.NMF, {"n_components": 2}, "transform", (X,)),
    (mg.NMF, {"n_components": 2}, "inverse_transform", (np.ones((12, 2)),)),
    (mg.SparseLogisticRegression, {}, "decision_function", (X,)),
    (mg.SparseLogisticRegression, {}, "predict_proba", (X,)),
    (mg.SparseLogisticRegression, {}, "predict", (X,)),
    (mg.SparseLogisticRegression, {}, "score", (X, Y)),
    (mg.SparseLogisticRegression, {}, "predict_log_proba", (X,)),
    (mg.L0DictionaryLearning, {"n_components": 16}, "transform", (X,)),
    (mg.L0DictionaryLearning, {"n_components": 16}, "inverse_transform", (np.ones((12, 16)),)),
]


@pytest.mark.parametrize(
    ("cls", "params", "method", "args"),
    CASES,
    ids=[f"{cls.__name__}.{method}" for cls, _, method, _ in CASES],
)
def test_methods_before_fit_raise_not_fitted(cls, params, method, args):
    model = cls(**params)
    with pytest.raises(NotFittedError, match="not fitted"):
        getattr(model, method)(*args)


def test_dictionary_property_before_fit():
    model = mg.L0DictionaryLearning(n_components=16)
    with pytest.raises(NotFittedError, match="not fitted"):
        _ = model.dictionary_
    assert not hasattr(model, "dictionary_")  # NotFittedError is an AttributeError


@pytest.mark.parametrize(
    ("model", "fit_args", "method", "args"),
    [
        (mg.NMF(n_components=2, max_iter=20, random_state=0), (X,), "transform", (X,)),
        (mg.SparseLogisticRegression(alpha=0.01), (X, Y), "predict", (X,)),
        (mg.L0DictionaryLearning(n_components=16, lam=0.1, n_iter=1), (X,), "transform", (X,)),
    ],
    ids=["NMF", "SparseLogisticRegression", "L0DictionaryLearning"],
)
def test_the_same_methods_run_after_fit(model, fit_args, method, args):
    out = getattr(model.fit(*fit_args), method)(*args)
    assert np.asarray(out).shape[0] == X.shape[0]
