"""Sparse logistic regression (l1, l0, lp) in scikit-learn's style, fitted by
:func:`msm_gpu.minimize` (proximal Newton with MSM inner solves).

    min_{w, b}  (1 / sum s) sum_i s_i log(1 + exp(-y_i (x_i'w + b)))  +  alpha h(w)

with h = ||w||_1 (``"l1"``), ||w||_0 (``"l0"``), sum |w_j|^p (``"lp"``) or 0
(``"none"``); the intercept b is not penalised.  ``alpha`` is skglm's (and
scikit-learn's ``SGDClassifier``'s) scaling; scikit-learn's ``LogisticRegression(C=...)``
with an l1 penalty corresponds to ``alpha = 1 / (C sum s)`` (``1 / (C m)`` for unit
weights), and the default ``alpha=None`` is that of ``C = 1``.
More than two classes are fitted one-vs-rest, all K problems at once (one
``minimize`` call with a K-column Y sharing X).

Units: the columns of X are standardised internally (dense X centred and scaled to unit
standard deviation, sparse X scaled to unit root mean square) and the penalty rewritten
for the scaled coefficients (:class:`~msm_gpu.apps._rescale.RescaledPenalty`), so the
problem solved is exactly the user's while the solver's stopping rule and its inner MSM
sweeps see well-scaled columns: a column in other units (timestamps, a factor 1e6) no
longer stops the fit early or slows it down.
"""

from __future__ import annotations

import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.class_weight import compute_class_weight
from sklearn.utils.validation import _check_sample_weight, check_is_fitted

from ..arrays import is_cupy, module_of, to_host
from ..glm.losses import Logistic
from ..glm.newton import HESSIANS, minimize
from ..penalties import L0, L1, Lp, Penalty, Zero
from ._estimator import (
    BACKEND_CONSTRAINT,
    fit_context,
    validate_classifier_targets,
    validate_X,
)
from ._rescale import RescaledPenalty

PENALTIES = ("l1", "l0", "lp", "none")


class SparseLogisticRegression(ClassifierMixin, BaseEstimator):
    """Logistic regression with an l1, l0 or lp penalty (binary or one-vs-rest).

    Parameters
    ----------
    penalty : {"l1", "l0", "lp", "none"} or Penalty
        The penalty h on the coefficients (a :class:`~msm_gpu.Penalty` instance is
        used as given, ``alpha`` then ignored).
    alpha : float >= 0 or None
        Penalty weight; the loss is the (weighted) *mean* logistic loss.  None (default):
        ``1 / sum(sample weights)`` (``1 / n_samples`` without weights), the weight of
        scikit-learn's ``LogisticRegression(C=1.0)``.  The value used is ``alpha_``.
    p : {0.5, 2/3}
        Exponent of ``"lp"``.
    fit_intercept : bool
        Fit an unpenalised intercept.
    class_weight : dict, "balanced" or None
        Weights of the classes, multiplied into the sample weights (scikit-learn's
        meaning; one-vs-rest problems share them).
    tol : float >= 0
        Stopping rule of :func:`msm_gpu.minimize` on the standardised problem (module
        docstring): the same for any units of the columns of X.
    max_iter : int
        Outer (Newton) iterations; a fit that reaches it warns with scikit-learn's
        ``ConvergenceWarning`` (and ``converged_`` is False).
    hessian, backend, verbose
        Passed to :func:`msm_gpu.minimize`.

    Attributes
    ----------
    classes_ : ndarray (n_classes,)
    coef_ : ndarray (1, n_features) for two classes, (n_classes, n_features) otherwise
    intercept_ : ndarray (1,) or (n_classes,)
    alpha_ : float
        The penalty weight used (``alpha``, or its default).
    n_iter_ : ndarray of int, outer iterations per problem
    converged_ : bool
        Whether every problem met the stopping rule (False: ``max_iter`` or
        ``time_limit`` reached, or a non-finite objective).
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Column names of ``X``, when it was a DataFrame with string column names.
    result_ : SolveResult of the fit on the standardised columns (objective history,
        convergence, timings; its ``x`` is in the standardised units, ``fun`` is the
        objective of the user's problem, equal at corresponding points).
    """

    # Checked by scikit-learn's ``_fit_context`` when fit starts; the penalty's and the
    # solver's own checks (e.g. p in {1/2, 2/3}) follow.
    _parameter_constraints: dict = {
        # Any string here: an unknown name gets _make_penalty's message, which lists the
        # accepted ones and mentions Penalty instances.
        "penalty": [str, Penalty],
        "alpha": [Interval(Real, 0, None, closed="left"), None],
        "p": [Interval(Real, 0, 1, closed="neither")],
        "fit_intercept": ["boolean"],
        "class_weight": [dict, StrOptions({"balanced"}), None],
        "tol": [Interval(Real, 0, None, closed="left")],
        "max_iter": [Interval(Integral, 0, None, closed="left")],
        "hessian": [StrOptions(set(HESSIANS))],
        "backend": BACKEND_CONSTRAINT,
        "verbose": ["verbose"],
    }

    def __init__(
        self,
        penalty="l1",
        alpha=None,
        *,
        p=0.5,
        fit_intercept=True,
        class_weight=None,
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
        self.class_weight = class_weight
        self.tol = tol
        self.max_iter = max_iter
        self.hessian = hessian
        self.backend = backend
        self.verbose = verbose

    def _make_penalty(self, alpha):
        if isinstance(self.penalty, Penalty):
            return self.penalty
        if self.penalty not in PENALTIES:
            raise ValueError(
                f"penalty must be one of {', '.join(map(repr, PENALTIES))} or a Penalty, "
                f"got {self.penalty!r}"
            )
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

        Parameters
        ----------
        X : (n_samples, n_features) array-like or sparse matrix
        y : (n_samples,) array-like of class labels
        sample_weight : (n_samples,) array-like, float or None
            Nonnegative weights (a number: the same weight for every sample).

        Returns
        -------
        self
        """
        if isinstance(self.penalty, str) and self.penalty not in PENALTIES:
            self._make_penalty(0.0)  # the message listing the accepted names, before any work
        X = validate_X(self, X, reset=True, accept_sparse=("csr", "csc"))
        labels = validate_classifier_targets(self, y)
        if labels.shape[0] != X.shape[0]:
            raise ValueError(
                f"y must have one label per row of X: X has {X.shape[0]} rows, "
                f"y has {labels.shape[0]} labels"
            )
        classes = np.unique(labels)
        if classes.size < 2:
            # "1 class": the wording scikit-learn's checks look for
            raise ValueError(f"y must hold at least two classes, got {classes.size} class")
        weights = _sample_weights(sample_weight, X.shape[0])
        if self.class_weight is not None:
            per_class = compute_class_weight(self.class_weight, classes=classes, y=labels)
            weights = weights * per_class[np.searchsorted(classes, labels)]
            if not weights.sum() > 0:
                raise ValueError("class_weight times sample_weight is zero for every sample")
        self.alpha_ = float(1.0 / weights.sum()) if self.alpha is None else float(self.alpha)
        penalty = self._make_penalty(self.alpha_)
        if classes.size == 2:
            targets = (labels == classes[1]).astype(np.float64)
        else:
            targets = (labels[:, None] == classes[None, :]).astype(np.float64)
        if is_cupy(X):
            xp = module_of(X)
            targets, weights = xp.asarray(targets), xp.asarray(weights)
        offset, scale = _column_stats(X, weights, center=self.fit_intercept)
        loss = Logistic(
            _standardised(X, offset, scale),
            targets,
            sample_weight=weights,
            fit_intercept=self.fit_intercept,
        )
        res = minimize(
            loss,
            RescaledPenalty(penalty, to_host(scale)),
            tol=self.tol,
            max_iter=self.max_iter,
            backend=self.backend,
            hessian=self.hessian,
            verbose=self.verbose,
        )
        w = res.x.reshape(loss.n_coef, -1)
        n = loss.n_features
        xp = module_of(w)
        coef = w[:n] / xp.asarray(scale, dtype=w.dtype)[:, None]
        self.coef_ = xp.ascontiguousarray(coef.T)
        if self.fit_intercept:
            shift = xp.asarray(offset, dtype=w.dtype) @ coef
            self.intercept_ = w[n] - shift
        else:
            self.intercept_ = xp.zeros(w.shape[1], w.dtype)
        self.classes_ = classes
        self.n_iter_ = res.n_iter_columns
        self.converged_ = bool(res.converged) and bool(np.isfinite(res.fun))
        self.result_ = res
        if not self.converged_:
            warnings.warn(
                f"{type(self).__name__} did not converge in {res.n_iter} Newton "
                f"iterations ({res.message}; max_iter={self.max_iter}, tol={self.tol:g}): "
                "increase max_iter, or tol",
                ConvergenceWarning,
                stacklevel=2,
            )
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

    def predict_log_proba(self, X):
        """Log of :meth:`predict_proba`, computed without overflow for any score."""
        scores = self.decision_function(X)
        xp = module_of(scores)
        if scores.ndim == 1:
            # log sigma(s) = -log(1 + exp(-s)), log(1 - sigma(s)) = -log(1 + exp(s))
            return xp.stack([-xp.logaddexp(0.0, scores), -xp.logaddexp(0.0, -scores)], axis=1)
        # one-vs-rest: p_k = sigma(s_k) / sum_j sigma(s_j), by log-sum-exp
        logs = -xp.logaddexp(0.0, -scores)
        top = xp.max(logs, axis=1, keepdims=True)
        return logs - (top + xp.log(xp.sum(xp.exp(logs - top), axis=1, keepdims=True)))

    def predict_proba(self, X):
        """Class probabilities (m, n_classes); one-vs-rest ones normalised per row.

        Finite and summing to 1 for any score: far from every class, the one-vs-rest
        probabilities are normalised in the log domain (no 0 / 0).
        """
        log_proba = self.predict_log_proba(X)
        return module_of(log_proba).exp(log_proba)

    def predict(self, X):
        """Predicted class labels (NumPy array)."""
        scores = to_host(self.decision_function(X))
        if scores.ndim == 1:
            return self.classes_[(scores > 0).astype(np.int64)]
        return self.classes_[np.argmax(scores, axis=1)]


def _sample_weights(sample_weight, n_samples):
    """scikit-learn's reading of ``sample_weight`` (None, a number, or one per sample) as
    a host float64 array, refusing negative, non-finite and all-zero weights."""
    sw = to_host(sample_weight) if is_cupy(sample_weight) else sample_weight
    if sw is not None and not isinstance(sw, Real):
        arr = np.asarray(sw)
        if arr.ndim != 1 or arr.shape[0] != n_samples:
            raise ValueError(
                f"sample_weight must be a number or have shape ({n_samples},) (one weight "
                f"per row of X), got shape {arr.shape}"
            )
    sw = _check_sample_weight(sw, np.empty((n_samples, 0)), dtype=np.float64)
    sw = np.asarray(sw, dtype=np.float64)
    if not np.all(np.isfinite(sw)):
        raise ValueError("sample_weight contains NaN or infinite values")
    if np.any(sw < 0):
        raise ValueError("sample_weight must be >= 0 (negative weights are not supported)")
    if not np.any(sw):
        raise ValueError("sample_weight is all zero: at least one sample weight must be positive")
    return sw


def _column_stats(X, weights, *, center):
    """Per-column offset and positive scale of the standardisation (module docstring).

    Dense X: the weighted mean (with an intercept to absorb it; else 0) and the weighted
    standard deviation; sparse X: no offset (centring would fill it) and the weighted
    root mean square.  Weighted by the sample weights, so that a weight of 2 and a
    repeated row give the same scaled problem.  Constant columns keep scale 1.  Both on
    X's array module.
    """
    sparse = hasattr(X, "tocsr")  # SciPy or cupyx sparse
    xp = module_of(X.data if sparse else X)
    share = xp.asarray(weights, dtype=np.float64)
    share = share / share.sum()
    # squares of each column divided by its largest entry first: no overflow for any
    # finite data (a column of 1e160 has a spread of about 1e160, not inf)
    if sparse:
        offset = xp.zeros(X.shape[1])
        top = xp.asarray(abs(X).max(axis=0).toarray(), dtype=np.float64).ravel()
        top = xp.where(top > 0, top, 1.0)
        unit = X @ _diagonal(X, 1.0 / top)
        sq = unit.multiply(unit).T @ share
        spread = top * xp.sqrt(xp.asarray(sq, dtype=np.float64).ravel())
    else:
        x = xp.asarray(X, dtype=np.float64)
        offset = share @ x if center else xp.zeros(X.shape[1])
        dev = x - offset
        top = xp.max(xp.abs(dev), axis=0)
        top = xp.where(top > 0, top, 1.0)
        spread = top * xp.sqrt(share @ (dev / top) ** 2)
        if center:
            # a constant column: its deviations are rounding, not spread
            spread = xp.where(spread <= 1e-12 * xp.abs(offset), 0.0, spread)
    scale = xp.where((spread > 0) & xp.isfinite(spread), spread, 1.0)
    return offset, scale


def _standardised(X, offset, scale):
    """(X - offset) / scale per column, in X's dtype (a new array; X is not modified)."""
    if hasattr(X, "tocsr"):
        dtype = X.dtype if X.dtype.kind == "f" else np.float64
        return (X @ _diagonal(X, (1.0 / scale).astype(dtype))).tocsr()
    dtype = X.dtype if X.dtype.kind == "f" else np.float64
    return ((X - offset.astype(dtype)) / scale.astype(dtype)).astype(dtype, copy=False)


def _diagonal(X, values):
    """A sparse diagonal matrix of ``values`` in the sparse module of X (SciPy or cupyx)."""
    if is_cupy(X):
        import cupyx.scipy.sparse as csp

        return csp.diags(values)
    import scipy.sparse as sp

    return sp.diags(values)
