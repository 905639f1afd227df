"""Dictionary learning with l0 codes (MSM, the paper's section 5.2) or l1 codes, as a
scikit-learn estimator: :class:`L0DictionaryLearning`.

    min_{D, H}  1/2 ||Y - D H||_F^2 + lam h(H)     s.t.  ||D[:, i]||_2 = 1   (D >= 0)

with h = ||H||_0 (``penalty="l0"``) or ||H||_1 (``"l1"``, scikit-learn's
``DictionaryLearning`` problem with ``alpha = lam``) and optionally H >= 0.  ``fit``
alternates H-steps (:func:`~msm_gpu.apps.sparse_coding.solve_h`, warm-started) with
projected-gradient dictionary steps (:func:`~msm_gpu.apps.sparse_coding.dictionary_step`,
Bao et al. 2016); ``partial_fit`` is the online version of Mairal et al. (2009): each
batch is coded with the current dictionary and the products H H' and Y H' are summed over
the batches, from which the dictionary steps are taken.

Conventions are scikit-learn's: X is (n_samples, n_features), one signal per row;
``components_`` is (n_components, n_features), one atom per row.  The solvers work in
float64 on atoms as columns, ``D = components_.T``.
"""

from __future__ import annotations

import time
import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_array, check_is_fitted

from .._input import validation as v
from ..options import METHODS
from ..penalties import L0, L1, NonNegL1
from ._estimator import (
    BACKEND_CONSTRAINT,
    RANDOM_STATE_CONSTRAINT,
    CaseInsensitiveStrOptions,
    fit_context,
    validate_X,
)
from ._rescale import RescaledPenalty
from .sparse_coding import (
    _check_method,
    _initial_codes,
    coding_objective,
    dictionary_step,
    l0_sweeps,
    omp,
    solve_h,
    statistics_step,
)

__all__ = ["L0DictionaryLearning", "initial_dictionary"]

DICT_INITS = ("auto", "dct", "svd", "random", "data")


def _is_square(n):
    r = int(round(np.sqrt(n)))
    return r * r == n, r


def initial_dictionary(how, m, k, y, rng, *, positive=False):
    """Starting dictionary (m, k) with unit-norm columns, and the rule used.

    Parameters
    ----------
    how : {"auto", "dct", "svd", "random", "data"}
        "auto": the overcomplete DCT (:func:`~msm_gpu.overcomplete_dct`) when m and k are
        perfect squares and the patches are at least 2 x 2, else "svd".  "svd": the
        leading right singular vectors of the signals (scikit-learn's start), completed
        by Gaussian atoms where k exceeds their number.  "random": Gaussian atoms.
        "data": randomly chosen signals.
    m, k : int
        Signal length and number of atoms.
    y : (m, N) array
        The signals, as columns.
    rng : Generator
    positive : bool
        Project onto nonnegative atoms (an atom with no positive entry: its absolute
        value).

    Returns
    -------
    D : ndarray (m, k)
    chosen : str
        "dct", "svd", "random" or "data".
    """
    key = how.lower()
    if key == "auto":
        square_m, p = _is_square(m)
        square_k, _ = _is_square(k)
        key = "dct" if square_m and square_k and p >= 2 else "svd"
    if key == "dct":
        from .dictionaries import overcomplete_dct

        square_m, p = _is_square(m)
        square_k, _ = _is_square(k)
        if not (square_m and square_k and p >= 2):
            raise ValueError(
                "dict_init='dct' needs n_features = p**2 (p >= 2, square patches) and "
                f"n_components a perfect square, got n_features={m} and n_components={k}; "
                "use dict_init='auto', 'svd', 'random' or 'data'"
            )
        d = overcomplete_dct(p, k)
    elif key == "svd":
        _, _, vt = np.linalg.svd(y.T, full_matrices=False)
        atoms = vt[:k]
        # a sign per atom, as scikit-learn's svd_flip: the largest entry positive
        big = np.argmax(np.abs(atoms), axis=1)
        atoms = atoms * np.sign(atoms[np.arange(atoms.shape[0]), big])[:, None]
        if atoms.shape[0] < k:
            extra = rng.standard_normal((k - atoms.shape[0], m))
            atoms = np.vstack([atoms, extra / np.linalg.norm(extra, axis=1, keepdims=True)])
        d = atoms.T.copy()
    elif key == "random":
        d = rng.standard_normal((m, k))
    elif key == "data":
        idx = rng.choice(y.shape[1], size=k, replace=y.shape[1] < k)
        d = y[:, idx] + 1e-10 * rng.standard_normal((m, k))
    else:  # pragma: no cover - the parameter constraints refuse other names
        raise ValueError(f"dict_init must be one of {DICT_INITS} or an array, got {how!r}")
    if positive:
        d = _nonnegative_atoms(d)
    return _unit_columns(d), key


def _nonnegative_atoms(d):
    pos = np.maximum(d, 0.0)
    empty = ~np.any(pos > 0, axis=0)
    pos[:, empty] = np.abs(d[:, empty])
    return pos


def _unit_columns(d):
    norms = np.linalg.norm(d, axis=0)
    # an all-zero atom (constant data, "data" start) becomes a unit basis vector
    zero = ~(norms > 0)
    if np.any(zero):
        d = d.copy()
        d[:, zero] = 0.0
        d[np.arange(np.count_nonzero(zero)) % d.shape[0], np.flatnonzero(zero)] = 1.0
        norms = np.linalg.norm(d, axis=0)
    return d / norms


class L0DictionaryLearning(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Dictionary learning with l0 (MSM) or l1 codes, alternating minimisation.

    Minimises ``1/2 ||Y - D H||_F^2 + lam h(H)`` over unit-norm atoms D and codes H,
    h = ||H||_0 (the paper's) or ||H||_1.  Each outer iteration runs ``h_iter``
    iterations of the H-step (warm-started) and ``d_iter`` projected-gradient dictionary
    steps (Bao et al. 2016).  ``partial_fit`` learns from a stream of batches instead.

    Follows scikit-learn's conventions: ``fit(X)`` takes X of shape
    ``(n_samples, n_features)`` (one signal, e.g. a flattened patch, per row) and
    ``components_`` has shape ``(n_components, n_features)`` (one atom per row).
    ``dictionary_`` is the same dictionary with atoms as columns, ready for
    :func:`~msm_gpu.sparse_code`.  float32 data give float32 components and codes
    (computed in float64); sparse X is refused (scikit-learn's ``DictionaryLearning``
    refuses it too).

    Parameters
    ----------
    n_components : int or None
        Number of atoms k; None: n_features (scikit-learn's default).
    lam : float
        Penalty weight in the units of X squared (paper's scale: pixels in [0, 255]);
        scikit-learn's ``alpha`` for ``penalty="l1"``.
    n_iter : int
        Outer (alternating) iterations of ``fit``; 0 keeps the initial dictionary.
    penalty : {"l0", "l1"}
        The codes' penalty.
    init : {"omp", "zeros", "random"} or array (n_samples, n_components)
        Initial codes (``"random"``: standard normal entries, as in the paper).
    method : {"msm", "pgm", "pgm_ls", "apg", "apg_ls"}
        H-step solver.
    dict_init : {"auto", "dct", "svd", "random", "data"} or array (n_components, n_features)
        Initial dictionary (:func:`initial_dictionary`): "auto" takes the overcomplete DCT
        when n_features and n_components are perfect squares (square patches), else the
        data's singular vectors ("svd").  The rule used is ``dict_init_``.
    h_iter : int
        H-step iterations per outer iteration.
    d_iter : int
        Dictionary steps per outer iteration (per batch in ``partial_fit``).
    tol : float
        Tolerance of the H-step solver (its per-signal stopping rule).  0: every signal
        gets all ``h_iter`` iterations; with ``method="msm"`` and unconstrained l0 codes
        the H-step is then :func:`~msm_gpu.apps.sparse_coding.l0_sweeps` (the sweeps
        alone, sparse on the CPU).
    omp_tol, omp_n_nonzero : optional
        Stopping rule of ``init="omp"`` (see :func:`~msm_gpu.sparse_code`).
    positive_code, positive_dict : bool
        Constrain the codes / the atoms to be nonnegative.
    transform_n_nonzero_coefs : int or None
        ``transform`` codes every signal with exactly this many atoms at most, by
        orthogonal matching pursuit (scikit-learn's ``transform_algorithm="omp"``); not
        with ``positive_code``.
    transform_alpha : float or None
        ``lam`` of ``transform`` (None: ``lam``).
    random_state : int, Generator or None
    backend : {"auto", "cpu", "cuda"}
    verbose : bool
        Show a progress bar with the objective.

    Attributes
    ----------
    components_ : ndarray (n_components, n_features)
    dictionary_ : ndarray (n_features, n_components)
    dict_init_ : str
        The initial dictionary used: "dct", "svd", "random", "data" or "array".
    codes_ : ndarray (n_components, n_samples)
        Codes of the training signals after the last H-step (``fit``).
    objective_ : ndarray
        Objective after initialisation and after every outer iteration (``fit``).
    n_iter_ : int
        Outer iterations of ``fit``; batches seen by ``partial_fit``.
    n_steps_ : int
        Batches seen by ``partial_fit``.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Column names of ``X``, when it was a DataFrame with string column names.
    timings_ : dict
        Seconds in "init", "h_step" and "d_step" (``fit``).

    Examples
    --------
    >>> import numpy as np, msm_gpu as mg
    >>> X = np.random.default_rng(0).standard_normal((200, 16))
    >>> model = mg.L0DictionaryLearning(n_components=16, lam=0.5, n_iter=3).fit(X)
    >>> model.components_.shape, model.dict_init_
    ((16, 16), 'dct')
    >>> bool(model.objective_[-1] <= model.objective_[0])
    True
    >>> model.transform(X[:5]).shape
    (5, 16)
    """

    # Checked by scikit-learn's ``_fit_context`` when fit starts; array values of init
    # and dict_init (shapes, finite, nonzero atoms) are checked where they are used.
    _parameter_constraints: dict = {
        "n_components": [Interval(Integral, 1, None, closed="left"), None],
        "lam": [Interval(Real, 0, None, closed="left")],
        "n_iter": [Interval(Integral, 0, None, closed="left")],
        "penalty": [StrOptions({"l0", "l1"})],
        "init": [CaseInsensitiveStrOptions({"omp", "zeros", "random"}), "array-like"],
        "method": [CaseInsensitiveStrOptions(set(METHODS))],
        "dict_init": [CaseInsensitiveStrOptions(set(DICT_INITS)), "array-like"],
        "h_iter": [Interval(Integral, 1, None, closed="left")],
        "d_iter": [Interval(Integral, 0, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "omp_tol": [Interval(Real, 0, None, closed="left"), None],
        "omp_n_nonzero": [Interval(Integral, 1, None, closed="left"), None],
        "positive_code": ["boolean"],
        "positive_dict": ["boolean"],
        "transform_n_nonzero_coefs": [Interval(Integral, 1, None, closed="left"), None],
        "transform_alpha": [Interval(Real, 0, None, closed="left"), None],
        "random_state": RANDOM_STATE_CONSTRAINT,
        "backend": BACKEND_CONSTRAINT,
        "verbose": ["verbose"],
    }

    def __init__(
        self,
        n_components=None,
        lam=1.0,
        n_iter=10,
        *,
        penalty="l0",
        init="omp",
        method="msm",
        dict_init="auto",
        h_iter=5,
        d_iter=1,
        tol=1e-4,
        omp_tol=None,
        omp_n_nonzero=None,
        positive_code=False,
        positive_dict=False,
        transform_n_nonzero_coefs=None,
        transform_alpha=None,
        random_state=None,
        backend="auto",
        verbose=False,
    ):
        self.n_components = n_components
        self.lam = lam
        self.n_iter = n_iter
        self.penalty = penalty
        self.init = init
        self.method = method
        self.dict_init = dict_init
        self.h_iter = h_iter
        self.d_iter = d_iter
        self.tol = tol
        self.omp_tol = omp_tol
        self.omp_n_nonzero = omp_n_nonzero
        self.positive_code = positive_code
        self.positive_dict = positive_dict
        self.transform_n_nonzero_coefs = transform_n_nonzero_coefs
        self.transform_alpha = transform_alpha
        self.random_state = random_state
        self.backend = backend
        self.verbose = verbose

    # -- a fixed dictionary (scikit-learn's SparseCoder) -----------------------------------

    @classmethod
    def from_dictionary(cls, dictionary, **params):
        """A fitted coder for a fixed dictionary, as scikit-learn's ``SparseCoder``.

        Parameters
        ----------
        dictionary : (n_components, n_features) array
            Atoms as rows, of any nonzero norms (the codes are those of this dictionary
            as given: for l1 codes the penalty is that of the unnormalised atoms).
        **params
            Other parameters of :class:`L0DictionaryLearning` (``lam``, ``penalty``,
            ``positive_code``, ``transform_n_nonzero_coefs``, ...).

        Returns
        -------
        L0DictionaryLearning
            ``transform`` codes signals; ``fit`` (``n_iter=0``) keeps the dictionary,
            normalised.

        Examples
        --------
        >>> import numpy as np, msm_gpu as mg
        >>> atoms = mg.overcomplete_dct(4, 16).T * 2.0        # 16 atoms of norm 2
        >>> coder = mg.L0DictionaryLearning.from_dictionary(atoms, lam=0.1)
        >>> code = coder.transform(3.0 * atoms[5:6])
        >>> np.flatnonzero(code).tolist(), round(float(code[0, 5]), 6)
        ([5], 3.0)
        """
        comp = check_array(dictionary, dtype=(np.float64, np.float32), input_name="dictionary")
        norms = np.linalg.norm(comp, axis=1)
        if not np.all(norms > 0):
            raise ValueError(
                f"dictionary atom {int(np.argmin(norms))} is zero: every atom (row) must "
                "have a nonzero norm"
            )
        params.setdefault("n_iter", 0)
        model = cls(n_components=comp.shape[0], dict_init=comp, **params)
        model.components_ = comp.copy()
        model.n_features_in_ = comp.shape[1]
        model.dict_init_ = "array"
        model.n_iter_ = 0
        return model

    # -- scikit-learn plumbing --------------------------------------------------------------

    @property
    def dictionary_(self):
        """The learned dictionary with atoms as columns, shape (n_features, n_components)."""
        check_is_fitted(self, "components_")  # NotFittedError, an AttributeError too
        return self.components_.T

    @property
    def _n_features_out(self):
        """k, for ``get_feature_names_out`` (``l0dictionarylearning0``, ...)."""
        return self.components_.shape[0]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags

    def _signals(self, X, *, reset):
        """Validated X as float64 signals (columns), and the dtype of the outputs."""
        X = validate_X(self, X, reset=reset)
        dtype = X.dtype if X.dtype in (np.float32, np.float64) else np.dtype(np.float64)
        signals = np.asarray(X, dtype=np.float64).T
        top = float(np.max(np.abs(signals))) if signals.size else 0.0
        # the objective sums n_samples * n_features squares: it must stay finite
        limit = np.sqrt(np.finfo(np.float64).max) / max(signals.size, 1)
        if top > limit:
            raise ValueError(
                f"X has values up to {top:.3g}: the sum of their squares overflows float64 "
                f"(at most {limit:.3g} for X of shape {X.shape}); rescale X"
            )
        return signals, dtype

    def _code_penalty(self, lam):
        lam = float(lam)
        if self.penalty == "l1":
            return NonNegL1(lam) if self.positive_code else L1(lam)
        return L0(lam, lb=0.0) if self.positive_code else L0(lam)

    def _n_components(self, m):
        return m if self.n_components is None else int(self.n_components)

    def _start_dictionary(self, m, y, rng):
        """(D, rule) for ``dict_init`` on signals y (m, N)."""
        k = self._n_components(m)
        init = self.dict_init
        if isinstance(init, str):
            return initial_dictionary(init, m, k, y, rng, positive=self.positive_dict)
        comp = check_array(init, dtype=np.float64, input_name="dict_init")
        if comp.shape != (k, m):
            raise ValueError(
                "dict_init array must have shape (n_components, n_features) = "
                f"{(k, m)}, got {comp.shape}"
            )
        if np.any(np.linalg.norm(comp, axis=1) == 0):
            raise ValueError("dict_init array must have nonzero atoms (rows)")
        d = _nonnegative_atoms(comp.T) if self.positive_dict else comp.T
        return _unit_columns(d), "array"

    def _start_codes(self, d, y, lam, rng, init):
        """Initial codes (k, N) of ``init`` (an array is (n_samples, n_components))."""
        if not isinstance(init, str):
            h0 = np.asarray(init, dtype=np.float64)
            expected = (y.shape[1], d.shape[1])
            if h0.shape != expected:
                raise ValueError(
                    "init array must have shape (n_samples, n_components) = "
                    f"{expected}, got {h0.shape}"
                )
            init = h0.T
        h = _initial_codes(init, d, y, lam, d.T @ d, self.omp_tol, self.omp_n_nonzero, rng)
        h = h.reshape(d.shape[1], y.shape[1])
        return np.maximum(h, 0.0) if self.positive_code else h

    def _h_step(self, d, y, h, penalty, n_iter, *, tol, finish=None):
        """n_iter H-step iterations from h for the unit-norm dictionary d."""
        gram = d.T @ d
        gram = 0.5 * (gram + gram.T)
        method = _check_method(self.method)
        lean = method == "msm" and tol == 0.0 and not self.positive_code
        if lean and self.penalty == "l0":
            # l0's weight is the same on every row, also rescaled (_rescale.py)
            lam = float(np.max(penalty.lam))
            return l0_sweeps(gram, -(d.T @ y), h, lam, n_iter, backend=self.backend)
        res = solve_h(
            gram,
            -(d.T @ y),
            penalty.lam,
            penalty=penalty,
            method=method,
            x0=h,
            max_iter=n_iter,
            tol=tol,
            backend=self.backend,
            record_objective=False,
            finish=finish,
        )
        return np.asarray(res.x).reshape(h.shape)

    # -- fit ------------------------------------------------------------------------------

    @fit_context
    def fit(self, X, y=None):
        """Learn the dictionary from X of shape (n_samples, n_features); returns self."""
        signals, dtype = self._signals(X, reset=True)
        rng = np.random.default_rng(self.random_state)
        penalty = self._code_penalty(self.lam)
        tol = float(self.tol)
        t0 = time.perf_counter()
        d, self.dict_init_ = self._start_dictionary(signals.shape[0], signals, rng)
        h = self._start_codes(d, signals, penalty.lam, rng, self.init)
        timings = {"init": time.perf_counter() - t0, "h_step": 0.0, "d_step": 0.0}
        objective = [coding_objective(d, signals, h, penalty)]
        iterator = range(int(self.n_iter))
        bar = None
        if self.verbose:
            from tqdm.auto import tqdm

            name = f"{self.penalty.upper()} dictionary learning ({self.method})"
            bar = tqdm(iterator, desc=name, unit="it")
            iterator = bar
        for _ in iterator:
            t1 = time.perf_counter()
            h = self._h_step(d, signals, h, penalty, int(self.h_iter), tol=tol)
            t2 = time.perf_counter()
            d = dictionary_step(
                d, signals, h, n_steps=int(self.d_iter), positive=self.positive_dict
            )
            t3 = time.perf_counter()
            timings["h_step"] += t2 - t1
            timings["d_step"] += t3 - t2
            objective.append(coding_objective(d, signals, h, penalty))
            if bar is not None:
                bar.set_postfix(objective=f"{objective[-1]:.6g}", nnz=int(np.count_nonzero(h)))
        if bar is not None:
            bar.close()
        _warn_if_not_finite(objective[-1])
        self.components_ = d.T.astype(dtype)
        self.codes_ = h.astype(dtype)
        self.objective_ = np.asarray(objective)
        self.n_iter_ = int(self.n_iter)
        self.timings_ = timings
        self.__dict__.pop("_stats", None)  # partial_fit starts its sums afresh from here
        return self

    @fit_context
    def partial_fit(self, X, y=None):
        """One online step on the batch X (n_samples, n_features); returns self.

        The first call starts the dictionary (``dict_init``) from its batch.  Every call
        codes the batch with the current dictionary (``h_iter`` iterations from
        ``init``), adds ``H H'`` and ``X' H'`` to the sums over all batches so far, and
        takes ``d_iter`` dictionary steps on them (Mairal et al. 2009).
        """
        fitted = hasattr(self, "components_")
        signals, dtype = self._signals(X, reset=not fitted)
        penalty = self._code_penalty(self.lam)
        if not hasattr(self, "_stats"):
            self._rng = np.random.default_rng(self.random_state)
            self.n_steps_ = 0
        if fitted:  # after fit, from_dictionary or an earlier batch: go on from there
            d = _unit_columns(self.components_.T.astype(np.float64))
        else:
            d, self.dict_init_ = self._start_dictionary(signals.shape[0], signals, self._rng)
        if not hasattr(self, "_stats"):
            k = d.shape[1]
            self._stats = (np.zeros((k, k)), np.zeros((signals.shape[0], k)))
        h = self._start_codes(d, signals, penalty.lam, self._rng, self.init)
        h = self._h_step(d, signals, h, penalty, int(self.h_iter), tol=float(self.tol))
        hht, yht = self._stats
        hht += h @ h.T
        yht += signals @ h.T
        d = statistics_step(d, hht, yht, int(self.d_iter), positive=self.positive_dict)
        self.components_ = d.T.astype(dtype)
        self.n_steps_ += 1
        self.n_iter_ = self.n_steps_
        return self

    # -- transform ---------------------------------------------------------------------------

    def transform(self, X, *, init="omp", max_iter=None):
        """Codes of X (n_samples, n_features) for the dictionary, (n_samples, k).

        ``transform_alpha`` (or ``lam``) weighs the penalty; l0 codes are the MSM
        H-step's (``max_iter`` iterations, default ``4 h_iter``, from ``init``), l1 codes
        are exact (MSM and the exact finish: scikit-learn's Lasso codes);
        ``transform_n_nonzero_coefs`` codes by OMP instead.
        """
        check_is_fitted(self, "components_")
        signals, dtype = self._signals(X, reset=False)
        lam = self.lam if self.transform_alpha is None else self.transform_alpha
        d = np.asarray(self.components_, dtype=np.float64).T
        norms = np.linalg.norm(d, axis=0)
        unit = d / norms
        if self.transform_n_nonzero_coefs is not None:
            if self.positive_code:
                raise ValueError(
                    "transform_n_nonzero_coefs codes by OMP, which has no positive_code "
                    "constraint: set one of them only"
                )
            n = min(int(self.transform_n_nonzero_coefs), d.shape[0], d.shape[1])
            h = omp(unit, signals, n_nonzero_coefs=n)
        else:
            penalty = self._code_penalty(lam)
            # atoms of other norms than 1 (from_dictionary): code y = norms * h over the
            # unit atoms, with the penalty rewritten for y (exact, _rescale.py)
            if not np.allclose(norms, 1.0, rtol=0, atol=1e-12):
                penalty = RescaledPenalty(penalty, norms)
            rng = np.random.default_rng(self.random_state)
            h0 = self._start_codes(unit, signals, float(lam), rng, init)
            n_iter = int(self.h_iter) * 4 if max_iter is None else v.check_int(max_iter, "max_iter")
            finish = "auto" if penalty.is_convex else None
            h = self._h_step(unit, signals, h0, penalty, n_iter, tol=float(self.tol), finish=finish)
        return (h / norms[:, None]).T.astype(dtype)

    def inverse_transform(self, X):
        """Signals from codes: ``X @ components_``, shape (n_samples, n_features)."""
        check_is_fitted(self, "components_")
        codes = check_array(X, dtype=(np.float64, np.float32), input_name="X")
        k = self.components_.shape[0]
        if codes.shape[1] != k:
            raise ValueError(
                f"X must have n_components = {k} columns (one code per atom), got {codes.shape[1]}"
            )
        return codes @ self.components_.astype(codes.dtype, copy=False)


def _warn_if_not_finite(value):
    if not np.isfinite(value):
        warnings.warn(
            f"the dictionary learning objective is not finite ({value}): the data's "
            "squares overflow float64; rescale X",
            ConvergenceWarning,
            stacklevel=3,
        )
