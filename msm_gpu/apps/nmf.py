"""Nonnegative matrix factorisation: alternating half-steps, each a batch of MSM problems.

    min_{W >= 0, H >= 0}  sum_ij d_beta(Y_ij | (WH)_ij) + penalties
                                                    Y: m x d,  W: m x k,  H: k x d

d_beta is scikit-learn's beta-divergence (``beta_loss``): half the squared error
(Frobenius, the default), Kullback-Leibler, Itakura-Saito or any beta; the penalties are
scikit-learn's ``alpha_W``, ``alpha_H``, ``l1_ratio`` (:mod:`~msm_gpu.factorization.
regularization`).  Frobenius: one outer iteration is an H-step then a W-step, each a
batched NNLS (:mod:`msm_gpu.factorization.solvers`):

    H-step:  G = W'W (k x k), P = W'Y (k x d), solve for H    (one problem per column of Y)
    W-step:  G = HH' (k x k), P = HY' (k x m), solve for W'   (one problem per row of Y)

Other losses: each half-step is a batch of proximal Newton problems with MSM sweeps inside
(:mod:`msm_gpu.factorization.newton_kernels`, the paper's section on non-quadratic q), or
scikit-learn's multiplicative updates (``solver="mu"``; :mod:`~msm_gpu.factorization.
beta_loop`).  Every fit ends with the W-step solved exactly for the final H, the step
``transform`` takes, so that ``fit_transform(Y)`` is ``fit(Y).transform(Y)``.

The Gram products cost O(m d k) (O(nnz(Y) k) for sparse Y) and are formed once per
half-step; one sweep costs O(k^2 c).  When k is small several sweeps per half-step are
nearly free, so the inner budget follows Gillis & Glineur (2012): at most
``1 + alpha rho`` sweeps, now ONE budget for both half-steps
(:func:`~msm_gpu.factorization.solvers.balanced_inner_iter`), stopping early once a sweep
moves X by less than ``inner_tol`` (0.1) times the first sweep's move.

Why MSM-NMF used to settle above bpp and scikit-learn cd on digits (k = 20, issue 11),
and the fix (evidence: ``benchmarks/bench_nmf.py --target``):

* The per-half-step budget gave the H-step (64 columns, cheap sweeps) 13 sweeps and the
  W-step (1797 columns) 2: H solved almost exactly against a barely-updated W.  From
  scikit-learn's random init (seed 0) this settled at 176278 after 500 iterations (bpp:
  169396; cd: 171402 after 1000).  One sweep per half-step (HALS) reached 169945, five
  reached 170011.  Which stationary point a run reaches depends on the schedule and the
  start (bpp itself settled above cd on seeds 1 and 2), so the budget is now balanced.
* Extrapolation between outer iterations (Ang & Gillis 2019,
  :mod:`~msm_gpu.factorization.extrapolation`) cut the iterations to cd's 200-iteration value
  on digits and china.jpg by 2-5x; it is on by default for "msm" and "hals".
* theta is relative to mean(diag G) (it was absolute: negligible against W'W on pixel data,
  dominant on data scaled to 1e-3); omega = 1.
* The default theta is 0.001 of mean(diag G), not 0.01 (:data:`DEFAULT_THETA`).
* Small sweeps run on one thread: the CPU backend picks a sweep's threads from its work
  (``backends.threads.sweep_threads``), and ranges of few rows are wide
  (``backends.cpu.CHUNK_ELEMENTS``); with the leaner half-step, one outer iteration on
  digits took 0.75-0.78 ms, was 0.90-0.94 (``NMF.fit`` at equal settings, old and new
  code timed in turn).
* On the CPU the whole run uses one BLAS thread: OpenBLAS threads spinning after a Gram
  product fight the sweep's threads (measured 20x slower iterations on 2 cores when the
  sweep ran on Numba's threads).  With the sweep on one thread, two BLAS threads were
  measured again on digits (12 starts, time to cd's objective / cd's time, median): idle
  0.39 vs 0.42 with one, beside a busy NumPy process 0.28 vs 0.16, so one it stays.

Sparse Y (scipy.sparse or cupyx.scipy.sparse) stays sparse: only Y H' and Y'W are
formed (CSR products), never a dense m x d array (losses other than Frobenius and KL read
every entry: there Y is made dense).

Stopping rules (the same for every solver): ``max_iter`` outer iterations,
``time_limit`` seconds, or a relative decrease of the objective
``(f_{t-1} - f_t) <= tol * f_{t-1}`` (``tol = 0`` disables it).  ``history_`` holds
(seconds since the start of the iterations, the objective, penalties included) after 0,
1, ... outer iterations; for Frobenius the objective comes from the W-step's Gram products
(O(m k^2), no extra product with Y).
"""

from __future__ import annotations

import warnings
from numbers import Integral, Real

from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from .._input.foreign import accepts_foreign_arrays, restore_factors
from ..backends import get_backend
from ..dask.solve import is_dask_array
from ..factorization.beta import beta_value
from ..factorization.beta_loop import fit_beta, transform_beta
from ..factorization.loop import (
    ALL_SOLVERS,
    DEFAULT_THETA,
    Data,
    check_data,
    check_params,
    dtype_of,
    exact_error,
    exact_w_step,
    history_in_user_units,
    power_of_two_times,
    prepare,
    run,
    scale_exponent,
    stable_objective,
    user_units,
)
from ..factorization.regularization import Regularization
from ..finish.run import FINISH_MODES
from ._estimator import (
    BACKEND_CONSTRAINT,
    RANDOM_STATE_CONSTRAINT,
    FactorsMixin,
    fit_context,
    validate_X,
)

# -- public API ----------------------------------------------------------------------------


class NMF(FactorsMixin, ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Nonnegative matrix factorisation Y ~ W H, each half-step a batch of MSM problems.

    Minimises scikit-learn's objective

        d_beta(Y | WH) + alpha_W l1_ratio d ||W||_1 + alpha_W (1 - l1_ratio) d / 2 ||W||^2
                       + alpha_H l1_ratio m ||H||_1 + alpha_H (1 - l1_ratio) m / 2 ||H||^2

    over W >= 0 (m x k), H >= 0 (k x d), with d_beta half the squared error
    (``beta_loss="frobenius"``) or another beta-divergence, scikit-learn style:
    ``W = NMF(k).fit_transform(Y)``, ``H = model.components_``.

    Parameters
    ----------
    n_components : int, "auto" or None
        k.  "auto" (default, as scikit-learn): H's rows with ``init="custom"``, else d;
        None: d.  k > min(m, d) is allowed with a warning.
    solver : {"msm", "hals", "pg", "apg", "bpp", "cgd", "mu"}
        "msm": MSM half-steps (Frobenius), proximal Newton half-steps with MSM inside
        (other losses).  The NNLS solvers of :mod:`msm_gpu.factorization.solvers` ("hals"
        = MSM with omega=1, theta=0; "pg", "apg" run on the CPU and on CUDA; "bpp" and
        "cgd" on the CPU) minimise the Frobenius loss only.  "mu": scikit-learn's
        multiplicative updates (Lee & Seung; Fevotte & Idier), any loss, CPU.
    omega : float in (0, 2)
        MSM relaxation (solver "msm").
    theta : float >= 0
        MSM proximal term (solver "msm"), relative to the scale of the Gram matrix (or of
        the Newton model): ``theta * mean(diag G)`` is added to B's diagonal, so results
        do not depend on the units of Y.  Default 0.001 (:data:`DEFAULT_THETA`).
    inner_iter : "auto" or int
        Most MSM sweeps per half-step; "auto" = Gillis & Glineur's budget
        (:func:`~msm_gpu.factorization.solvers.balanced_inner_iter`) for Frobenius, 30
        per Newton model otherwise.  Ignored by "bpp" and "mu".
    inner_tol : float >= 0
        Stop the inner sweeps once one moves the iterate by at most ``inner_tol``
        times what the first one did (Frobenius).
    max_iter : int
        Outer iterations (H-step + W-step).
    tol : float >= 0
        Stop when an outer iteration lowers the objective by at most ``tol`` times its
        value (default 1e-5); 0 disables the rule.  scikit-learn's ``NMF`` instead
        checks every 10 iterations whether its error fell by less than ``tol`` (1e-4)
        times its value at the start since the last check; from the same start the two
        defaults stop near each other (``benchmarks/bench_nmf_defaults.py``).
    time_limit : float or None
        Stop after this many seconds of iterations.
    init : {None, "random", "nndsvd", "nndsvda", "nndsvdar", "custom"}
        scikit-learn's inits and default rule (None: "nndsvda" if k <= min(m, d), else
        "random"), computed for Y / 4^j (max in [1/4, 4)) and scaled back; for an int
        seed the factors are scikit-learn's where max(Y) is in [1/4, 4) (and for "random"
        everywhere; :mod:`msm_gpu.factorization.init`, the differences below).
        "custom": pass ``W`` and ``H`` to ``fit``/``fit_transform``; without it W and H
        are ignored with a RuntimeWarning.
    beta_loss : "frobenius", "kullback-leibler", "itakura-saito" or float
        The beta-divergence (scikit-learn's names; 2, 1 and 0).  Y with zeros is refused
        for beta <= 0 (the divergence is infinite there), as scikit-learn does.
        Kullback-Leibler reads only Y's nonzeros (0 log 0 = 0): sparse and dense Y cost
        the same per nonzero; where at least half of the entries are nonzero, both take
        the half-steps by matrix products over every entry (faster there).
    alpha_W, alpha_H, l1_ratio : float, float or "same", float in [0, 1]
        scikit-learn's penalties and their scaling by the data's shape (above; ``alpha_H
        ="same"`` takes ``alpha_W``).  ``transform`` applies W's.
    extrapolation : "auto", True or False
        Extrapolate between outer iterations (Ang and Gillis 2019,
        :mod:`msm_gpu.factorization.extrapolation`); "auto": for "msm" and "hals" with
        the Frobenius loss (the Newton half-steps of other losses are not sped up by it;
        with an l1 penalty it starts at the second iteration).  The objective history is
        then not monotone (restarts) and the best pair is returned.
    finish : "auto", "exact" or None
        "exact": on the CPU, each Frobenius "msm" half-step ends with the exact NNLS
        solve from the MSM iterate (Lawson & Hanson's active set,
        :mod:`msm_gpu.solvers.nnls_columns`; k <= ``ACTIVE_SET_MAX_N``).  "auto"
        (default): so for data with at most 10 % nonzero entries, stored dense or sparse
        (``loop.SPARSE_LIKE_DENSITY``).  None: the paper's plain MSM half-steps.
    random_state : None, int, numpy RandomState or Generator
    backend : {"auto", "cpu", "cuda"}
        "auto": CUDA for CuPy/cupyx input, CPU otherwise.  Outputs have the input's
        array type.  Losses other than Frobenius and ``solver="mu"`` run on the CPU.
    verbose : bool
        Show a tqdm progress bar with the objective (Frobenius).

    Attributes
    ----------
    components_ : (k, d) array
        H.
    reconstruction_err_ : float
        sqrt(2 d_beta(Y | WH)) at the end (scikit-learn's; ||Y - WH||_F for Frobenius),
        penalties not included.
    n_iter_ : int
    history_ : (n_iter_ + 1, 2) ndarray
        (seconds since the iterations started, the objective with its penalties) after
        each outer iteration, the initial point first.  With extrapolation the value is
        that of the pair (new W, extrapolated H) the W-step used; the returned pair is
        the best.  The last W-step, solved exactly after the loop, can only lower it
        (``info_["objective"]``).
    converged_ : bool
        Whether the ``tol`` rule stopped the run.
    n_components_, n_features_in_ : int
    feature_names_in_ : ndarray of str
        Column names of ``Y``, when it was a DataFrame with string column names.
    info_ : dict
        Everything :func:`nmf` returns as ``info``.

    Notes
    -----
    Inside, Y is divided by a power of four near its largest entry and the factors by its
    square root (exact): Y * 1e100 or Y * 1e-200 fit as Y does.  float32 Y gives float32
    factors and ``transform`` output; the objective is summed in float64 and computed
    from the residual where its Gram expansion would only measure rounding.

    Differences from scikit-learn's ``NMF`` that remain, with their reasons:

    * ``solver="cd"`` is not a name here: its coordinate descent is "hals" (MSM with
      omega = 1, theta = 0), and the default "msm" is faster to the same objective.
    * ``tol`` means a relative decrease per iteration (above); scikit-learn's rule,
      checked every 10 iterations against the first error, stops far from convergence
      on slowly converging losses (Itakura-Saito: 200 iterations at 1.7 % above its own
      2000-iteration value).
    * The returned W is solved exactly for the final H (scikit-learn returns its last
      iterate): ``fit_transform`` and ``transform`` agree to 1e-6 where the W-step is
      convex (Frobenius, KL, beta in [1, 2]); for beta outside [1, 2] each may end at
      another local minimum of its nonconvex W-step (as scikit-learn's may).
    * The start is scikit-learn's init of Y / 4^j (j such that max(Y) / 4^j is in
      [1/4, 4)), scaled back: the same start where Y is of order one, and a start that
      scales with Y elsewhere, so that ``NMF(Y * 4^j)`` is ``NMF(Y)`` scaled.  Its NNDSVDa
      fills zeros with mean(Y), not with a factor's scale: from Y itself, Y * 2^26 started
      with W0 H0 far above Y and Frobenius fits stopped 30-40 % above their error at scale
      1 (scikit-learn's too), Itakura-Saito at Y * 1e5 did not recover at all.  Where
      max(Y) is outside [1/4, 4), NNDSVDa's fill (and NNDSVD's zero threshold 1e-6)
      therefore differ from scikit-learn's for the same Y; the random init is the same.
    * A custom ``W``/``H`` of another dtype is cast to Y's (scikit-learn raises
      TypeError).
    * ``shuffle`` (scikit-learn's cd) has no counterpart.
    * Dask Y: Frobenius only, init "random" or "custom"; CuPy Y: Frobenius only.

    Examples
    --------
    >>> import numpy as np, msm_gpu as mg
    >>> rng = np.random.default_rng(0)
    >>> Y = rng.random((30, 4)) @ rng.random((4, 20))
    >>> model = mg.NMF(n_components=4, random_state=0, max_iter=500, tol=1e-10)
    >>> W = model.fit_transform(Y)
    >>> bool(model.reconstruction_err_ < 1e-2 * np.linalg.norm(Y))
    True
    >>> counts = rng.poisson(3.0, size=(30, 20))
    >>> kl = mg.NMF(3, beta_loss="kullback-leibler", random_state=0).fit(counts)
    >>> kl.components_.shape
    (3, 20)
    """

    # Checked by scikit-learn's ``_fit_context`` when fit starts (types and ranges, with
    # messages naming the parameter); ``check_params`` then applies the solvers' own
    # finer rules (finite values, bool refused for ints).
    _parameter_constraints: dict = {
        "n_components": [Interval(Integral, 1, None, closed="left"), None, StrOptions({"auto"})],
        "solver": [StrOptions(set(ALL_SOLVERS))],
        "omega": [Interval(Real, 0, 2, closed="neither")],
        "theta": [Interval(Real, 0, None, closed="left")],
        "inner_iter": [StrOptions({"auto"}), Interval(Integral, 1, None, closed="left")],
        "inner_tol": [Interval(Real, 0, None, closed="left")],
        "max_iter": [Interval(Integral, 0, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "time_limit": [Interval(Real, 0, None, closed="neither"), None],
        # Any string here: an unknown name gets check_init's message, which lists the
        # accepted inits (as before these constraints).
        "init": [str, None],
        # scikit-learn's loss names pass here so that the refusal of the losses other
        # than Frobenius says what to use instead (loop.check_params).
        "beta_loss": [StrOptions({"frobenius", "kullback-leibler", "itakura-saito"}), Real],
        "alpha_W": [Interval(Real, 0, None, closed="left")],
        "alpha_H": [Interval(Real, 0, None, closed="left"), StrOptions({"same"})],
        "l1_ratio": [Interval(Real, 0, 1, closed="both")],
        "extrapolation": [StrOptions({"auto"}), "boolean"],
        "finish": [StrOptions(set(FINISH_MODES)), None],
        "random_state": RANDOM_STATE_CONSTRAINT,
        "backend": BACKEND_CONSTRAINT,
        "verbose": ["verbose"],
    }

    def __init__(
        self,
        n_components="auto",
        *,
        solver="msm",
        omega=1.0,
        theta=DEFAULT_THETA,
        inner_iter="auto",
        inner_tol=0.1,
        max_iter=200,
        tol=1e-5,
        time_limit=None,
        init=None,
        beta_loss="frobenius",
        alpha_W=0.0,
        alpha_H="same",
        l1_ratio=0.0,
        extrapolation="auto",
        finish="auto",
        random_state=None,
        backend="auto",
        verbose=False,
    ):
        self.n_components = n_components
        self.solver = solver
        self.omega = omega
        self.theta = theta
        self.inner_iter = inner_iter
        self.inner_tol = inner_tol
        self.max_iter = max_iter
        self.tol = tol
        self.time_limit = time_limit
        self.init = init
        self.beta_loss = beta_loss
        self.alpha_W = alpha_W
        self.alpha_H = alpha_H
        self.l1_ratio = l1_ratio
        self.extrapolation = extrapolation
        self.finish = finish
        self.random_state = random_state
        self.backend = backend
        self.verbose = verbose

    @fit_context
    def fit_transform(self, Y, y=None, W=None, H=None):
        """Fit the model to Y and return W (m x k).

        Parameters
        ----------
        Y : (m, d) array-like or sparse matrix, Y >= 0
            NumPy (or anything NumPy converts: lists, DataFrames), CuPy, scipy.sparse or
            cupyx.scipy.sparse.
        y : ignored
        W, H : arrays, optional
            Starting factors for ``init="custom"`` (ignored, with a RuntimeWarning,
            otherwise).

        A ``dask.array`` Y is factorised block by block and W / ``components_`` are
        then dask arrays (:mod:`msm_gpu.dask.nmf`).
        """
        if is_dask_array(Y):  # -- dask hook (msm_gpu/dask/nmf.py) --
            from ..dask import nmf as nmf_dask

            return nmf_dask.fit_transform(self, Y, W=W, H=H)
        # NaN/inf and negative entries: check_data (in prepare), with its messages
        Y = validate_X(self, Y, reset=True, name="Y", accept_sparse=("csr", "csc"), finite=False)
        params = self.get_params()
        if _beta_road(params):
            Wf, Hf, info = fit_beta(Y, params, W, H)
            self._set_fitted(Hf, info)
            return Wf
        Yc, data, backend, W0, H0 = prepare(Y, params, W, H)
        e = data.exponent
        reg = Regularization.from_params(params, data.shape).rescaled(e, 2.0)
        Wf, Hf, info = run(data, backend, W0, H0, params, reg=reg)
        # the last half-step solves W exactly for the final H: fit_transform(Y) is then
        # transform(Y) of the fitted model
        wt, g_h, p_w = exact_w_step(data, backend, Hf, params, reg, start=Wf.T, products=True)
        info["objective_loop"] = info["objective"]
        info["objective"] = stable_objective(data, wt, Hf, g_h, p_w) + reg.value(wt, Hf)
        info["reconstruction_err"] = power_of_two_times(exact_error(data, wt.T, Hf), e)
        info["objective"] = power_of_two_times(info["objective"], 2 * e)
        info["objective_loop"] = power_of_two_times(info["objective_loop"], 2 * e)
        info["history"] = history_in_user_units(info["history"], e)
        Wf = user_units(backend.xp.ascontiguousarray(wt.T), e)
        Hf = user_units(Hf, e)
        self._set_fitted(backend.to_user(Hf, Yc), info)
        return backend.to_user(Wf, Yc)

    def _set_fitted(self, H, info):
        """The fitted attributes from the final H (user's array type) and the info dict;
        scikit-learn's ConvergenceWarning when ``max_iter`` stopped a run with tol > 0."""
        self.components_ = H
        self.reconstruction_err_ = info["reconstruction_err"]
        self.n_iter_ = info["n_iter"]
        self.history_ = info["history"]
        self.converged_ = info["converged"]
        self.n_components_ = H.shape[0]
        self.info_ = info
        if (
            not info["converged"]
            and info["n_iter"] >= self.max_iter
            and self.tol > 0
            and info["message"].startswith("reached max_iter")
        ):
            warnings.warn(
                f"Maximum number of iterations {self.max_iter} reached. Increase it to "
                "improve convergence.",
                ConvergenceWarning,
                stacklevel=3,
            )

    @fit_context
    def fit(self, Y, y=None, **params):
        """Fit the model to Y; returns self."""
        self.fit_transform(Y, y, **params)
        return self

    def _check_fitted(self):
        """scikit-learn's ``NotFittedError`` before ``fit`` (the dask path calls it too)."""
        check_is_fitted(self, "components_")

    def transform(self, Y):
        """W >= 0 minimising the fitted loss of Y ~ W H for the fitted H (m x k).

        The W-step NNLS (H fixed, W's penalty included) is solved exactly, by the same
        function as the last half-step of ``fit_transform``
        (:func:`~msm_gpu.factorization.loop.exact_w_step`): block principal pivoting in
        float64 on the CPU (float32 Y gives float32 W), on CUDA by the model's solver.
        """
        if is_dask_array(Y):  # -- dask hook (msm_gpu/dask/nmf.py) --
            from ..dask import nmf as nmf_dask

            return nmf_dask.transform(self, Y)
        self._check_fitted()
        Y = validate_X(self, Y, reset=False, name="Y", accept_sparse=("csr", "csc"), finite=False)
        params = self.get_params()
        check_params(params)
        Y = check_data(Y)
        k, d = self.components_.shape
        if Y.shape[1] != d:
            raise ValueError(f"Y has {Y.shape[1]} features, but NMF was fitted with {d}")
        if beta_value(params["beta_loss"]) != 2.0:
            return transform_beta(Y, self.components_, params)
        backend = get_backend(params["backend"], Y, self.components_)
        data = Data(Y, backend, dtype_of(Y), scale_exponent(Y))
        e = data.exponent
        H = backend.asarray(self.components_, data.dtype) * (2.0 ** -(e // 2))
        reg = Regularization.from_params(params, data.shape).rescaled(e, 2.0)
        wt = exact_w_step(data, backend, H, params, reg)
        return backend.to_user(user_units(backend.xp.ascontiguousarray(wt.T), e), Y)

    def inverse_transform(self, W):
        """W @ components_ (the reconstruction, m x d)."""
        self._check_fitted()
        return W @ self.components_


def _beta_road(params):
    """Whether a fit goes to :mod:`~msm_gpu.factorization.beta_loop` (a loss other than
    Frobenius, or the multiplicative updates)."""
    check_params(params)
    return beta_value(params["beta_loss"]) != 2.0 or params["solver"] == "mu"


@accepts_foreign_arrays("Y", "W", "H", restore=restore_factors, callback=None)
def nmf(Y, n_components=None, **kwargs):
    """Functional form of :class:`NMF`: ``W, H, info = nmf(Y, k, ...)``.

    Parameters
    ----------
    Y : (m, d) array or sparse matrix, Y >= 0
    n_components : int or None
    **kwargs
        Any :class:`NMF` parameter, plus ``W`` and ``H`` for ``init="custom"``.

    Returns
    -------
    W : (m, k) array
    H : (k, d) array
    info : dict
        n_iter, history ((seconds, objective) rows), converged, message,
        reconstruction_err, inner_iterations (per outer iteration: H-step, W-step),
        inner_iter (the budgets), time, solver, backend.
    """
    W0 = kwargs.pop("W", None)
    H0 = kwargs.pop("H", None)
    model = NMF(n_components, **kwargs)
    W = model.fit_transform(Y, W=W0, H=H0)
    return W, model.components_, model.info_
