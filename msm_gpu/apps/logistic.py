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

from numbers import Real

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted

from ..arrays import is_cupy, module_of, to_host
from ..glm.losses import Logistic
from ..glm.newton import HESSIANS, minimize
from ..penalties import L0, L1, Lp, Penalty, Zero

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
    result_ : SolveResult of the fit (objective history, convergence, timings)
    """

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

    def fit(self, X, y, sample_weight=None):
        """Fit on X (m x n, dense or sparse) and labels y (m,).

        Returns
        -------
        self
        """
        if self.hessian not in HESSIANS:
            raise ValueError(f"hessian must be one of {HESSIANS}, got {self.hessian!r}")
        penalty = self._make_penalty()
        if y is None:
            raise TypeError("y must be an array of labels, got None")
        labels = to_host(y)
        if labels.ndim != 1:
            raise ValueError(f"y must be 1-D (one label per row of X), got shape {labels.shape}")
        classes = np.unique(labels)
        if classes.size < 2:
            raise ValueError(f"y must hold at least two classes, got {classes.size}")
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
        self.n_features_in_ = n
        self.result_ = res
        return self

    def _check_fitted(self):
        """scikit-learn's ``NotFittedError`` before ``fit``."""
        check_is_fitted(self, "coef_")

    def decision_function(self, X):
        """Scores X coef' + intercept: (m,) for two classes, (m, n_classes) otherwise."""
        self._check_fitted()
        if X is None or getattr(X, "ndim", 0) != 2:
            raise ValueError("X must be a 2-D array or sparse matrix")
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, the model {self.n_features_in_}")
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
