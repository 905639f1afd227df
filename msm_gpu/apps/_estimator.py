"""What the scikit-learn estimators of msm-gpu share: input checks and parameter constraints.

:class:`~msm_gpu.NMF`, :class:`~msm_gpu.SparseLogisticRegression` and
:class:`~msm_gpu.L0DictionaryLearning` validate their data here, through scikit-learn's own
``validate_data``, so that they follow its contract (``n_features_in_``,
``feature_names_in_``, lists and DataFrames accepted, its messages for empty data, sparse
input refused or accepted as the tags say) without each class repeating the rules.

Two things differ from scikit-learn's plain ``validate_data``:

* CuPy arrays and cupyx sparse matrices are not converted (``check_array`` would copy them
  to the host, or fail): only their feature count and names are checked, and the solvers
  check the values on the device as before.
* Numeric data keep their dtype (``dtype="numeric"``): the solvers choose their working
  precision from it, so the numbers they compute do not depend on this layer.

The parameter constraints (``_parameter_constraints``, checked by scikit-learn's
``_fit_context`` at ``fit``) that several estimators use are defined here too.
"""

from __future__ import annotations

import inspect

import numpy as np
from sklearn.base import _fit_context
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_array, column_or_1d

from ..arrays import is_cupy, to_host

try:  # scikit-learn >= 1.6
    from sklearn.utils.validation import validate_data as _sk_validate_data
except ImportError:  # pragma: no cover - scikit-learn 1.4 and 1.5
    _sk_validate_data = None

__all__ = [
    "BACKEND_CONSTRAINT",
    "RANDOM_STATE_CONSTRAINT",
    "CaseInsensitiveStrOptions",
    "check_sample_weight_not_all_zero",
    "fit_context",
    "validate_classifier_targets",
    "validate_X",
]

#: scikit-learn's decorator of ``fit``: validates ``_parameter_constraints`` once per
#: call (nested ``fit`` calls, e.g. ``fit`` -> ``fit_transform``, skip the repeat).
fit_context = _fit_context(prefer_skip_nested_validation=True)

# scikit-learn 1.6 renamed check_array's ``force_all_finite`` to ``ensure_all_finite``
# (and 1.8 removed the old name): ask the installed version which one it takes.
_FINITE_KEYWORD = (
    "ensure_all_finite"
    if "ensure_all_finite" in inspect.signature(check_array).parameters
    else "force_all_finite"
)


class CaseInsensitiveStrOptions(StrOptions):
    """:class:`~sklearn.utils._param_validation.StrOptions` matched case-insensitively.

    The solvers lower-case these names (``backend="CPU"``, ``method="MSM"`` always
    worked); the constraint keeps accepting what they accept.
    """

    def is_satisfied_by(self, val):
        return isinstance(val, str) and val.lower() in self.options


#: ``backend`` of every estimator (:func:`msm_gpu.backends.get_backend`).
BACKEND_CONSTRAINT = [CaseInsensitiveStrOptions({"auto", "cpu", "cuda"})]

#: ``random_state``: scikit-learn's (None, int, RandomState) plus a NumPy Generator,
#: which the initialisations take too.
RANDOM_STATE_CONSTRAINT = ["random_state", np.random.Generator]


def _validate(estimator, X, *, reset, skip_check_array=False, **check_params):
    """scikit-learn's ``validate_data``, or the method it replaced before 1.6."""
    if _sk_validate_data is not None:
        return _sk_validate_data(
            estimator, X, reset=reset, skip_check_array=skip_check_array, **check_params
        )
    return estimator._validate_data(  # pragma: no cover - scikit-learn < 1.6
        X, reset=reset, cast_to_ndarray=not skip_check_array, **check_params
    )


def _as_2d(X, name):
    """X, refused unless 2-D with a message that says how to reshape it.

    Runs before ``check_array``, whose message for 1-D data does not name the argument;
    the wording keeps "2-D" (this library's messages) and "Reshape your data"
    (scikit-learn's).  Objects without ``ndim`` (lists, array-likes) are converted here
    once, by ``np.asarray`` as ``check_array`` would, and returned converted.
    """
    if not hasattr(X, "ndim"):
        try:
            X = np.asarray(X)
        except ValueError:  # ragged nested lists: check_array says what is wrong
            return X
    if X.ndim != 2:
        raise ValueError(
            f"{name} must be 2-D (n_samples, n_features), got shape {tuple(X.shape)}. "
            "Reshape your data either using X.reshape(-1, 1) if it has a single feature "
            "or X.reshape(1, -1) if it holds a single sample."
        )
    return X


def validate_X(estimator, X, *, reset, name="X", accept_sparse=False, finite=True):
    """Check the data of ``fit`` (``reset=True``) or of a fitted method (``reset=False``).

    Parameters
    ----------
    estimator : BaseEstimator
        Gets (``reset=True``) or is checked against (``reset=False``) ``n_features_in_``
        and ``feature_names_in_``.
    X : array-like, sparse matrix, CuPy array or cupyx sparse matrix
    reset : bool
    name : str
        The argument's name in messages (NMF calls its data ``Y``).
    accept_sparse : False or tuple of str
        SciPy sparse formats passed through; others are converted to the first one.
    finite : bool
        Refuse NaN and inf here.  False where the solver's own check (with its own
        message) follows at once, to spare a second pass over the data.

    Returns
    -------
    X : ndarray, sparse matrix, or the CuPy / cupyx input itself
        Numeric input keeps its dtype; lists, DataFrames and object arrays become
        arrays (object arrays of numbers: float64).
    """
    if X is None:
        raise TypeError(f"{name} must be a 2-D array or sparse matrix, got None")
    X = _as_2d(X, name)
    if is_cupy(X):  # CuPy and cupyx sparse: no host copy; values checked by the solver
        return _validate(estimator, X, reset=reset, skip_check_array=True)
    return _validate(
        estimator,
        X,
        reset=reset,
        accept_sparse=accept_sparse,
        dtype="numeric",
        **{_FINITE_KEYWORD: finite},
    )


def validate_classifier_targets(estimator, y):
    """The class labels ``y`` of a classifier's ``fit`` as a 1-D NumPy array.

    A column vector (n, 1) is flattened with scikit-learn's ``DataConversionWarning``;
    continuous or multi-output targets are refused with scikit-learn's messages.  That
    ``y`` has one label per row of X is left to the loss, which says so.
    """
    if y is None:
        raise ValueError(
            f"{type(estimator).__name__} requires y to be passed, but the target y is None."
        )
    labels = to_host(y)
    if labels.ndim != 1 and not (labels.ndim == 2 and labels.shape[1] == 1):
        raise ValueError(f"y must be 1-D (one label per row of X), got shape {labels.shape}")
    labels = column_or_1d(labels, warn=True)
    check_classification_targets(labels)
    return labels


def check_sample_weight_not_all_zero(sample_weight):
    """Refuse weights that are all zero, before the loss (which says only "sum").

    Shapes, signs and values are left to the loss; this adds only the case scikit-learn
    names (``check_all_zero_sample_weights_error``).
    """
    if sample_weight is None or is_cupy(sample_weight):
        return
    sw = np.asarray(sample_weight)
    if sw.size and sw.dtype.kind in "biuf" and not np.any(sw):
        raise ValueError("sample_weight is all zero: at least one sample weight must be positive")


class FactorsMixin:
    """What both NMF estimators declare to scikit-learn: nonnegative input, dense or sparse,
    float32 kept, and k output features (``nmf0``, ``nmf1``, ...)."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.positive_only = True
        tags.input_tags.sparse = True
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags

    @property
    def _n_features_out(self):
        """k, for ``get_feature_names_out``."""
        return self.components_.shape[0]
