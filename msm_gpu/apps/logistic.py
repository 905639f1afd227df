"""Sparse logistic regression (l1, l0, lp) in scikit-learn's style, fitted by
:func:`msm_gpu.minimize` (proximal Newton with MSM inner solves).

    min_{w, b}  (1 / sum s) sum_i s_i log(1 + exp(-y_i (x_i'w + b)))  +  alpha h(w)

with h = ||w||_1 (``"l1"``), ||w||_0 (``"l0"``), sum |w_j|^p (``"lp"``) or 0
(``"none"``); the intercept b is not penalised.  ``alpha`` is skglm's (and
scikit-learn's ``SGDClassifier``'s) scaling; scikit-learn's ``LogisticRegression(C=...)``
with ``penalty="l1"`` corresponds to ``alpha = 1 / (C m)`` (unit weights).
More than two classes are fitted one-vs-rest, all K problems at once (one
``minimize`` call with a K-column Y sharing X).
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from ..arrays import is_cupy, module_of, to_host
from ..glm.losses import Logistic
from ..glm.newton import HESSIANS, minimize
from ..penalties import L0, L1, Lp, Penalty, Zero
from ._estimator import (
    BACKEND_CONSTRAINT,
    check_sample_weight_not_all_zero,
    fit_context,
    validate_classifier_targets,
    validate_X,
)

PENALTIES = ("l1", "l0", "lp", "none")


class SparseLogisticRegression(ClassifierMixin, BaseEstimator):
    """Logistic regression with an l1, l0 or lp penalty (binary or one-vs-rest).

    Parameters
    ----------
    penalty : {"l1", "l0", "lp", "none"} or Penalty
        The penalty h on the coefficients (a :class:`~msm_gpu.Penalty` instance is
        used as given, ``alpha`` then ignored).
    alpha : float >= 0
        Penalty weight; the loss is the (weighted) *mean* logistic loss.
    p : {0.5, 2/3}
        Exponent of ``"lp"``.
    fit_intercept : bool
        Fit an unpenalised intercept.
    tol, max_iter, hessian, backend, verbose
        Passed to :func:`msm_gpu.minimize` (``max_iter``: outer Newton iterations).

    Attributes
    ----------
    classes_ : ndarray (n_classes,)
    coef_ : ndarray (1, n_features) for two classes, (n_classes, n_features) otherwise
    intercept_ : ndarray (1,) or (n_classes,)
    n_iter_ : ndarray of int, outer iterations per problem
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Column names of ``X``, when it was a DataFrame with string column names.
    result_ : SolveResult of the fit (objective history, convergence, timings)
    """

    # Checked by scikit-learn's ``_fit_context`` when fit starts; the penalty's and the
    # solver's own checks (e.g. p in {1/2, 2/3}) follow.
    _parameter_constraints: dict = {
        # Any string here: an unknown name gets _make_penalty's message, which lists the
        # accepted ones and mentions Penalty instances.
        "penalty": [str, Penalty],
        "alpha": [Interval(Real, 0, None, closed="left")],
        "p": [Interval(Real, 0, 1, closed="neither")],
        "fit_intercept": ["boolean"],
        "tol": [Interval(Real, 0, None, closed="left")],
        "max_iter": [Interval(Integral, 0, None, closed="left")],
        "hessian": [StrOptions(set(HESSIANS))],
        "backend": BACKEND_CONSTRAINT,
        "verbose": ["verbose"],
    }

    def __init__(
        self,
        penalty="l1",
        alpha=1.0,
        *,
        p=0.5,
        fit_intercept=True,
        tol=1e-6,
        max_iter=100,
        hessian="auto",
        backend="auto",
        verbose=False,
    ):
        self.penalty = penalty
        self.alpha = alpha
        self.p = p
        self.fit_intercept = fit_intercept
        self.tol = tol
        self.max_iter = max_iter
        self.hessian = hessian
        self.backend = backend
        self.verbose = verbose

    def _make_penalty(self):
        if isinstance(self.penalty, Penalty):
            return self.penalty
        if self.penalty not in PENALTIES:
            raise ValueError(
                f"penalty must be one of {', '.join(map(repr, PENALTIES))} or a Penalty, "
                f"got {self.penalty!r}"
            )
        alpha = self.alpha
        if isinstance(alpha, bool) or not isinstance(alpha, Real) or not alpha >= 0:
            raise ValueError(f"alpha must be a real number >= 0, got {alpha!r}")
        if self.penalty == "l1":
            return L1(alpha)
        if self.penalty == "l0":
            return L0(alpha)
        if self.penalty == "lp":
            return Lp(alpha, self.p)
        return Zero()

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    @fit_context
    def fit(self, X, y, sample_weight=None):
        """Fit on X (m x n, dense or sparse) and labels y (m,).

        Returns
        -------
        self
        """
        penalty = self._make_penalty()
        X = validate_X(self, X, reset=True, accept_sparse=("csr", "csc"))
        labels = validate_classifier_targets(self, y)
        check_sample_weight_not_all_zero(sample_weight)
        classes = np.unique(labels)
        if classes.size < 2:
            # "1 class": the wording scikit-learn's checks look for
            raise ValueError(f"y must hold at least two classes, got {classes.size} class")
        if classes.size == 2:
            targets = (labels == classes[1]).astype(np.float64)
        else:
            targets = (labels[:, None] == classes[None, :]).astype(np.float64)
        if is_cupy(X):
            targets = module_of(X).asarray(targets)
        loss = Logistic(X, targets, sample_weight=sample_weight, fit_intercept=self.fit_intercept)
        res = minimize(
            loss,
            penalty,
            tol=self.tol,
            max_iter=self.max_iter,
            backend=self.backend,
            hessian=self.hessian,
            verbose=self.verbose,
        )
        w = res.x.reshape(loss.n_coef, -1)
        n = loss.n_features
        self.coef_ = w[:n].T.copy()
        xp = module_of(w)
        self.intercept_ = w[n].copy() if self.fit_intercept else xp.zeros(w.shape[1], w.dtype)
        self.classes_ = classes
        self.n_iter_ = res.n_iter_columns
        self.result_ = res
        return self

    def _check_fitted(self):
        """scikit-learn's ``NotFittedError`` before ``fit``."""
        check_is_fitted(self, "coef_")

    def decision_function(self, X):
        """Scores X coef' + intercept: (m,) for two classes, (m, n_classes) otherwise."""
        self._check_fitted()
        X = validate_X(self, X, reset=False, accept_sparse=("csr", "csc"))
        coef, intercept = self.coef_, self.intercept_
        if is_cupy(X) != is_cupy(coef):
            xp = module_of(X) if is_cupy(X) else np
            coef, intercept = xp.asarray(to_host(coef)), xp.asarray(to_host(intercept))
        scores = X @ coef.T + intercept[None, :]
        return scores[:, 0] if scores.shape[1] == 1 else scores

    def predict_proba(self, X):
        """Class probabilities (m, n_classes); one-vs-rest ones normalised per row."""
        scores = self.decision_function(X)
        xp = module_of(scores)
        prob = 1.0 / (1.0 + xp.exp(-scores))
        if prob.ndim == 1:
            return xp.stack([1.0 - prob, prob], axis=1)
        return prob / prob.sum(axis=1, keepdims=True)

    def predict(self, X):
        """Predicted class labels (NumPy array)."""
        scores = to_host(self.decision_function(X))
        if scores.ndim == 1:
            return self.classes_[(scores > 0).astype(np.int64)]
        return self.classes_[np.argmax(scores, axis=1)]
