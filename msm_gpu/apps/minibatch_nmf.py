"""Mini-batch NMF: scikit-learn's ``MiniBatchNMF`` with each batch's W solved, not stepped.

The estimator keeps scikit-learn's parameters, stopping rules and attributes; the
numerics are :mod:`msm_gpu.factorization.minibatch` (W per batch by the batched NNLS
or Newton half-steps; for the
Frobenius loss H from the accumulated statistics by one batched NNLS, otherwise
scikit-learn's online multiplicative update).  Data that arrive in pieces go to
:meth:`MiniBatchNMF.partial_fit`; a ``dask.array`` is read one row chunk at a time.
"""

from __future__ import annotations

import math
import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import gen_batches
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from ..backends import get_backend
from ..dask.solve import is_dask_array
from ..factorization.beta import beta_value
from ..factorization.beta_loop import BetaData, check_data_for_beta, divergence
from ..factorization.loop import (
    Data,
    check_data,
    dtype_of,
    exact_error,
    n_components,
    scale_exponent,
    start_factors,
)
from ..factorization.minibatch import OnlineState
from ..factorization.regularization import check_alphas
from ._estimator import RANDOM_STATE_CONSTRAINT, FactorsMixin, fit_context, validate_X


class MiniBatchNMF(FactorsMixin, ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Mini-batch nonnegative matrix factorisation Y ~ W H (scikit-learn's ``MiniBatchNMF``).

    Minimises scikit-learn's objective (``beta_loss``, ``alpha_W``, ``alpha_H``,
    ``l1_ratio`` with its scaling, see :class:`msm_gpu.NMF`) one batch of rows at a time.
    For each batch the batch's W is solved for the current H: exactly for the Frobenius
    loss (the batched NNLS); for other losses by one Newton half-step from the rows' last
    W once they have one (the next pass refines it, as scikit-learn's multiplicative step
    does), else by up to ``fresh_restarts_max_iter`` Newton iterations; then H is
    updated from all batches seen, the older ones weighted down by ``rho =
    forget_factor ** (batch_size / n_samples)`` per batch: for the Frobenius loss H
    minimises the accumulated surrogate exactly (one batched NNLS on the accumulated
    W'W and W'X, Mairal et al. 2010); for other losses by scikit-learn's online
    multiplicative update (Lefevre et al. 2011).

    Parameters
    ----------
    n_components : int, "auto" or None
        As :class:`msm_gpu.NMF`.
    init : {None, "random", "nndsvd", "nndsvda", "nndsvdar", "custom"}
        scikit-learn's inits on the whole data (``fit``) or the first batch
        (``partial_fit``); a dask array takes "random" (the default there).
    batch_size : int
        Rows per batch.
    beta_loss : "frobenius", "kullback-leibler", "itakura-saito" or float
    tol : float >= 0
        Stop when ||H - H_previous|| / ||H|| <= tol after a batch (scikit-learn's rule).
    max_no_improvement : int or None
        Stop after this many batches without improvement of the smoothed batch cost
        (scikit-learn's exponentially weighted average).
    max_iter : int
        Passes over the data.
    alpha_W, alpha_H, l1_ratio :
        scikit-learn's penalties (scaled by each batch's shape, as it does).
    forget_factor : float in [0, 1]
        The weight of the past, per pass over the data.
    fresh_restarts : bool
        Start each batch's W from scikit-learn's constant start instead of the rows'
        last W (for the convex Frobenius and KL losses the exact W is the same).
    fresh_restarts_max_iter : int
        Newton iterations of a batch's W-step for losses other than Frobenius.
    transform_max_iter : int or None
        Newton iterations of ``transform`` (None: ``max_iter``) for losses other than
        Frobenius, whose ``transform`` is an exact NNLS.
    random_state, verbose :
        As scikit-learn.

    Attributes
    ----------
    components_ : (k, d) ndarray
    n_components_, n_features_in_ : int
    n_iter_ : int
        Passes over the data started.
    n_steps_ : int
        Batches processed.
    reconstruction_err_ : float
        sqrt(2 * beta-divergence) of the data ``fit`` saw and the returned W (as
        scikit-learn).

    Differences from scikit-learn's ``MiniBatchNMF``
    -----------------------------------------------
    * Frobenius: each batch's W is exact, not one multiplicative step from its last
      value (other losses: a Newton half-step, see above).  ``fit`` ends by solving W
      for all rows for the final H (exactly for Frobenius; by up to
      ``transform_max_iter`` Newton iterations otherwise), so ``fit_transform(X)``
      equals ``fit(X).transform(X)``.
    * Frobenius: H is the exact minimiser of the accumulated surrogate, not a
      multiplicative step; the accumulated statistics start at zero (scikit-learn starts
      its numerator and denominator from H and ones).
    * The CPU only (NumPy, SciPy sparse, dask arrays); CuPy input is refused.
    """

    _parameter_constraints: dict = {
        "n_components": [Interval(Integral, 1, None, closed="left"), None, StrOptions({"auto"})],
        "init": [StrOptions({"random", "nndsvd", "nndsvda", "nndsvdar", "custom"}), None],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "beta_loss": [StrOptions({"frobenius", "kullback-leibler", "itakura-saito"}), Real],
        "tol": [Interval(Real, 0, None, closed="left")],
        "max_no_improvement": [Interval(Integral, 1, None, closed="left"), None],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "alpha_W": [Interval(Real, 0, None, closed="left")],
        "alpha_H": [Interval(Real, 0, None, closed="left"), StrOptions({"same"})],
        "l1_ratio": [Interval(Real, 0, 1, closed="both")],
        "forget_factor": [Interval(Real, 0, 1, closed="both")],
        "fresh_restarts": ["boolean"],
        "fresh_restarts_max_iter": [Interval(Integral, 1, None, closed="left")],
        "transform_max_iter": [Interval(Integral, 1, None, closed="left"), None],
        "random_state": RANDOM_STATE_CONSTRAINT,
        "verbose": ["verbose"],
    }

    def __init__(
        self,
        n_components="auto",
        *,
        init=None,
        batch_size=1024,
        beta_loss="frobenius",
        tol=1e-4,
        max_no_improvement=10,
        max_iter=200,
        alpha_W=0.0,
        alpha_H="same",
        l1_ratio=0.0,
        forget_factor=0.7,
        fresh_restarts=False,
        fresh_restarts_max_iter=30,
        transform_max_iter=None,
        random_state=None,
        verbose=0,
    ):
        self.n_components = n_components
        self.init = init
        self.batch_size = batch_size
        self.beta_loss = beta_loss
        self.tol = tol
        self.max_no_improvement = max_no_improvement
        self.max_iter = max_iter
        self.alpha_W = alpha_W
        self.alpha_H = alpha_H
        self.l1_ratio = l1_ratio
        self.forget_factor = forget_factor
        self.fresh_restarts = fresh_restarts
        self.fresh_restarts_max_iter = fresh_restarts_max_iter
        self.transform_max_iter = transform_max_iter
        self.random_state = random_state
        self.verbose = verbose

    # -- checks and the shared start ---------------------------------------------------------

    def _params(self):
        """The parameters with the entries the factorisation helpers read."""
        p = self.get_params()
        p.update(solver="mu", backend="cpu", omega=1.0, theta=0.0, inner_iter="auto")
        check_alphas(p["alpha_W"], p["alpha_H"], p["l1_ratio"])
        return p

    def _check_X(self, X, reset):
        if is_dask_array(X):
            return X
        X = validate_X(self, X, reset=reset, name="X", accept_sparse=("csr", "csc"), finite=False)
        X = check_data(X, name="X")
        if hasattr(X, "tocsr"):
            X = X.tocsr()
        if type(X).__module__.startswith("cupy"):
            raise ValueError("MiniBatchNMF runs on the CPU: pass NumPy or SciPy arrays")
        check_data_for_beta(X, beta_value(self.beta_loss))
        return X

    def _start(self, X, W, H, p):
        """The online state from the data's first (or only) look: H0, the exponent."""
        m, d = X.shape
        k = n_components(p, m, d, H if p["init"] == "custom" else None)
        dtype = dtype_of(X)
        e = scale_exponent(X)
        scaled = X * (2.0**-e) if e else X
        backend = get_backend("cpu")
        # the start from X / 2^e, as NMF's (loop.start_factors)
        W0, H0 = start_factors(X, scaled, p, k, backend, dtype, e, W, H)
        batch = min(self.batch_size, m)
        rho = self.forget_factor ** (batch / m)
        self._state = OnlineState(H0, beta_value(self.beta_loss), e, rho, p)
        self._dtype = dtype
        return np.array(W0, dtype=np.float64, order="C")

    def _publish(self):
        """components_ (the user's units and dtype) from the state."""
        state = self._state
        half = 2.0 ** (state.exponent // 2)
        H = np.ascontiguousarray(state.H * half, dtype=self._dtype)
        self.components_ = H
        self.n_components_ = H.shape[0]

    # -- fitting --------------------------------------------------------------------------------

    @fit_context
    def fit_transform(self, X, y=None, W=None, H=None):
        """Fit on X by batches and return W (n_samples x k), solved exactly at the end."""
        p = self._params()
        if is_dask_array(X):
            from ..dask import nmf as nmf_dask

            return nmf_dask.minibatch_fit_transform(self, X, p, W=W, H=H)
        X = self._check_X(X, reset=True)
        W_rows = self._start(X, W, H, p)
        n_samples = X.shape[0]
        batch_size = min(self.batch_size, n_samples)
        n_steps_per_iter = int(math.ceil(n_samples / batch_size))
        batches = [s for s in gen_batches(n_samples, batch_size)]
        self._run(
            ((i % n_steps_per_iter, X[batches[i % n_steps_per_iter]]) for i in range(10**18)),
            n_samples,
            n_steps_per_iter,
            W_rows=W_rows,
            batches=batches,
        )
        W_out = self._exact_w(X, start=None if self.fresh_restarts else W_rows)
        self._publish()
        self.reconstruction_err_ = self._error(X, W_out)
        return np.ascontiguousarray(W_out * (2.0 ** (self._state.exponent // 2)), dtype=self._dtype)

    def _run(self, source, n_samples, n_steps_per_iter, *, W_rows=None, batches=None):
        """The batch loop with scikit-learn's stopping rules; sets n_iter_ and n_steps_."""
        state = self._state
        self._ewa_cost = self._ewa_cost_min = None
        self._no_improvement = 0
        n_steps = self.max_iter * n_steps_per_iter
        H_buffer = state.H.copy()
        newton = self.fresh_restarts_max_iter
        step = 0
        cache = {}  # the batches' data objects, made on the first pass (in-memory X)
        for step, (index, Xb) in zip(range(n_steps), source, strict=False):
            start = data = None
            if W_rows is not None:
                if not self.fresh_restarts:
                    start = W_rows[batches[index]]
                if index not in cache:
                    cache[index] = state.batch_data(Xb)
                data = cache[index]
            Wb, cost = state.step(Xb, start=start, max_newton=newton, data=data)
            if W_rows is not None:
                W_rows[batches[index]] = Wb
            if self._converged(Xb.shape[0], cost, state.H, H_buffer, n_samples, step, n_steps):
                break
            H_buffer[:] = state.H
        self.n_steps_ = step + 1
        self.n_iter_ = int(math.ceil(self.n_steps_ / n_steps_per_iter))
        if self.n_iter_ == self.max_iter and self.tol > 0:
            warnings.warn(
                f"Maximum number of iterations {self.max_iter} reached. Increase it to "
                "improve convergence.",
                ConvergenceWarning,
                stacklevel=3,
            )

    def _converged(self, batch_size, cost, H, H_buffer, n_samples, step, n_steps):
        """scikit-learn's ``_minibatch_convergence``."""
        step = step + 1
        if step == 1:
            if self.verbose:
                print(f"Minibatch step {step}/{n_steps}: mean batch cost: {cost}")
            return False
        if self._ewa_cost is None:
            self._ewa_cost = cost
        else:
            alpha = min(batch_size / (n_samples + 1), 1)
            self._ewa_cost = self._ewa_cost * (1 - alpha) + cost * alpha
        if self.verbose:
            print(
                f"Minibatch step {step}/{n_steps}: mean batch cost: {cost}, "
                f"ewa cost: {self._ewa_cost}"
            )
        h_diff = np.linalg.norm(H - H_buffer) / max(np.linalg.norm(H), 1e-300)
        if self.tol > 0 and h_diff <= self.tol:
            if self.verbose:
                print(f"Converged (small H change) at step {step}/{n_steps}")
            return True
        if self._ewa_cost_min is None or self._ewa_cost < self._ewa_cost_min:
            self._no_improvement = 0
            self._ewa_cost_min = self._ewa_cost
        else:
            self._no_improvement += 1
        if self.max_no_improvement is not None and self._no_improvement >= self.max_no_improvement:
            if self.verbose:
                print(f"Converged (lack of improvement in objective function) at step {step}")
            return True
        return False

    @fit_context
    def fit(self, X, y=None, **params):
        """Fit on X by batches; returns self."""
        self.fit_transform(X, **params)
        return self

    @fit_context
    def partial_fit(self, X, y=None, W=None, H=None):
        """One batch: X's W solved exactly, then H updated (the first call starts the
        model from X: scikit-learn's init, or ``init="custom"`` with H)."""
        if is_dask_array(X):
            raise TypeError(
                "partial_fit takes one batch in memory (NumPy or SciPy); pass a dask array "
                "to fit, which reads it one row chunk at a time, or compute its blocks"
            )
        first = not hasattr(self, "components_")
        X = self._check_X(X, reset=first)
        p = self._params()
        if first:
            self._start(X, W, H, p)
            self.n_steps_ = 0
        self._state.step(X, start=None, max_newton=self.fresh_restarts_max_iter)
        self._publish()
        self.n_steps_ += 1
        return self

    # -- W for given H -----------------------------------------------------------------------------

    def _exact_w(self, X, start=None):
        """W (scaled units, float64) for the current H: exact NNLS (Frobenius) or Newton
        (``transform_max_iter`` iterations at most, default ``max_iter``)."""
        state = self._state
        if state.beta == 2.0:
            W, _ = state.solve_w(X, start)
            return W
        cap = self.transform_max_iter or self.max_iter
        return state.solve_w(X, start, max_newton=cap)[0]

    def _error(self, X, W):
        """sqrt(2 * beta-divergence) of X and W H (the user's units)."""
        state = self._state
        e = state.exponent
        if state.beta == 2.0:
            data = Data(X, get_backend("cpu"), np.float64, e)
            err = exact_error(data, W, state.H)
            return float(np.ldexp(err, e))
        data = BetaData(X, e, state.beta)
        loss = divergence(data, W, np.ascontiguousarray(state.H.T))
        return math.sqrt(2.0 * max(loss, 0.0)) * 2.0 ** (0.5 * state.beta * e)

    def transform(self, X):
        """W for the fitted H, solved exactly (n_samples x k), X's dtype."""
        check_is_fitted(self, "components_")
        if is_dask_array(X):
            from ..dask import nmf as nmf_dask

            return nmf_dask.minibatch_transform(self, X)
        X = self._check_X(X, reset=False)
        W = self._exact_w(X)
        return np.ascontiguousarray(W * (2.0 ** (self._state.exponent // 2)), dtype=dtype_of(X))

    def inverse_transform(self, X):
        """X @ components_ (the reconstruction)."""
        check_is_fitted(self, "components_")
        return X @ self.components_
