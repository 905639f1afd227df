"""Nonnegative matrix factorisation by alternating NNLS, each half-step solved by MSM.

    min_{W >= 0, H >= 0}  1/2 ||Y - W H||_F^2        Y: m x d,  W: m x k,  H: k x d

One outer iteration is an H-step then a W-step, each a batched NNLS
(:mod:`msm_gpu.factorization.solvers`):

    H-step:  G = W'W (k x k), P = W'Y (k x d), solve for H    (one problem per column of Y)
    W-step:  G = HH' (k x k), P = HY' (k x m), solve for W'   (one problem per row of Y)

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
formed (CSR products), never a dense m x d array.

Stopping rules (the same for every solver): ``max_iter`` outer iterations,
``time_limit`` seconds, or a relative decrease of the objective
``(f_{t-1} - f_t) <= tol * f_{t-1}`` (``tol = 0`` disables it).  ``history_`` holds
(seconds since the start of the iterations, 1/2 ||Y - WH||_F^2) after 0, 1, ... outer
iterations; the objective comes from the W-step's Gram products (O(m k^2), no extra
product with Y).
"""

from __future__ import annotations

import math
import time
import warnings

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from .._input import validation as v
from ..arrays import is_cupy, module_of, namespace
from ..backends import get_backend
from ..dask.solve import is_dask_array
from ..factorization import init as nmf_init
from ..factorization import solvers as ns
from ..factorization.extrapolation import Extrapolation
from ..finish.run import check_finish

#: Solvers that extrapolate between outer iterations with ``extrapolation="auto"``.
EXTRAPOLATED_SOLVERS = ("msm", "hals")

#: Default (relative) theta of the "msm" half-steps (measurements: there).
DEFAULT_THETA = ns.DEFAULT_THETA


# -- input handling ---------------------------------------------------------------------


def _is_sparse(y) -> bool:
    import scipy.sparse as sp

    if sp.issparse(y):
        return True
    return type(y).__module__.startswith("cupyx.scipy.sparse")


def _check_data(Y, name="Y"):
    """Refuse non-numeric, empty, non-2-D, non-finite or negative data; return it unchanged."""
    if Y is None:
        raise TypeError(f"{name} must be a 2-D array or sparse matrix, got None")
    if not _is_sparse(Y) and not hasattr(Y, "__array_namespace__") and not is_cupy(Y):
        Y = np.asarray(Y)
    if len(Y.shape) != 2:
        raise ValueError(f"{name} must be 2-D (samples x features), got shape {Y.shape}")
    if Y.shape[0] == 0 or Y.shape[1] == 0:
        raise ValueError(f"{name} must not be empty, got shape {Y.shape}")
    kind = np.dtype(Y.dtype).kind
    if kind not in "biuf":
        raise TypeError(f"{name} must hold real numbers, got dtype {Y.dtype}")
    values = Y.data if _is_sparse(Y) else Y
    if kind == "f":
        finite = values.size == 0 or bool(_as_bool(module_of(values).isfinite(values).all()))
        if not finite:
            raise ValueError(f"{name} contains NaN or Inf; NMF needs finite data")
    if values.size and bool(_as_bool((values < 0).any())):
        raise ValueError(f"Negative values in data passed to NMF ({name}); NMF needs Y >= 0")
    return Y


def _as_bool(v):
    return v.item() if hasattr(v, "item") else v


def _dtype_of(Y):
    dt = np.dtype(Y.dtype)
    return np.dtype(np.float32) if dt == np.float32 else np.dtype(np.float64)


class _Data:
    """Y on the backend, with the two products NMF needs and ||Y||_F^2."""

    def __init__(self, Y, backend, dtype):
        self.shape = tuple(Y.shape)
        self.sparse = _is_sparse(Y)
        xp = backend.xp
        if self.sparse:
            if not backend.on_host:
                import cupyx.scipy.sparse as csp

                y = csp.csr_matrix(Y, dtype=dtype)
            else:
                if is_cupy(Y):
                    Y = Y.get()
                import scipy.sparse as sp

                y = sp.csr_matrix(Y, dtype=dtype)
            y.sum_duplicates()
            self.y = y
            self.yt = y.T.tocsr()
            self.nnz = int(y.nnz)
            data = y.data
            self.norm2 = float((data.astype(np.float64) ** 2).sum())
        else:
            self.y = backend.asarray(Y, dtype)
            self.yt = None
            self.nnz = self.shape[0] * self.shape[1]
            self.norm2 = float(xp.sum(xp.astype(self.y, xp.float64) ** 2))
        self.xp = xp

    # Dense Y: the products are formed as (Y'W)' and (YH')', the layouts OpenBLAS runs
    # fastest here (one thread, digits: 106 vs 125 us for W'Y, 98 vs 119 us for HY').

    def wt_y(self, W):
        """W'Y (k x d) for W (m x k)."""
        if self.sparse:
            return (self.yt @ W).T
        return (self.y.T @ W).T

    def h_yt(self, H):
        """H Y' (k x m) for H (k x d)."""
        return (self.y @ H.T).T

    def mean(self):
        m, d = self.shape
        if self.sparse:
            return float(self.y.data.astype(np.float64).sum()) / (m * d)
        return float(self.xp.mean(self.xp.astype(self.y, self.xp.float64)))


def _objective(norm2, W, G_h, P_w):
    """1/2 ||Y - WH||^2 from G_h = HH' and P_w = HY' (k x m): O(m k^2).

    ||Y - WH||^2 = ||Y||^2 - 2 <W', HY'> + <W'W, HH'>."""
    xp = namespace(W)
    val = norm2 - 2.0 * float(xp.sum(W.T * P_w)) + float(xp.sum((W.T @ W) * G_h))
    return 0.5 * max(val, 0.0)


def _exact_error(data, W, H):
    """||Y - WH||_F: directly for dense Y, by the Gram identity for sparse Y."""
    xp = data.xp
    if not data.sparse:
        r = data.y - W @ H
        return math.sqrt(float(xp.sum(xp.astype(r * r, xp.float64))))
    return math.sqrt(2.0 * _objective(data.norm2, W, H @ H.T, data.h_yt(H)))


def finish_half_steps(finish, sparse):
    """Whether the "msm" half-steps end with the exact solve: "exact" always, "auto" for
    sparse Y (measured by ``benchmarks/bench_nmf.py --target``, k = 20-40: on the sparse
    Zipf text matrix plain MSM half-steps settled 0.1 % above bpp and never reached
    scikit-learn cd's 200-iteration objective, finished ones reached it in 0.18x cd's
    time; on the dense digits and china.jpg the finish made each iteration several times
    dearer and cd's objective was no longer reached in time)."""
    return finish == "exact" or (finish == "auto" and sparse)


def _use_extrapolation(p):
    if isinstance(p["extrapolation"], str):
        return p["solver"] in EXTRAPOLATED_SOLVERS
    return bool(p["extrapolation"])


def _check_beta_loss(beta_loss):
    """Only the Frobenius loss (scikit-learn's ``"frobenius"``, i.e. beta = 2)."""
    if isinstance(beta_loss, str) and beta_loss == "frobenius":
        return
    if isinstance(beta_loss, (int, float)) and not isinstance(beta_loss, bool) and beta_loss == 2:
        return
    raise ValueError(
        f"beta_loss={beta_loss!r} is not supported: this NMF minimises the Frobenius loss "
        "only (beta_loss='frobenius' or 2); for 'kullback-leibler' or 'itakura-saito' use "
        "sklearn.decomposition.NMF(solver='mu')"
    )


def _check_params(p):
    if p["n_components"] is not None:
        v.check_int(p["n_components"], "n_components", low=1)
    if p["solver"] not in ns.SOLVERS:
        raise ValueError(
            f"solver must be one of {', '.join(map(repr, ns.SOLVERS))}, got {p['solver']!r}"
        )
    v.check_real(p["omega"], "omega", low=0.0, high=2.0, low_open=True, high_open=True)
    v.check_real(p["theta"], "theta", low=0.0)
    if not (isinstance(p["inner_iter"], str) and p["inner_iter"] == "auto"):
        v.check_int(p["inner_iter"], "inner_iter ('auto' or an int)", low=1)
    v.check_real(p["inner_tol"], "inner_tol", low=0.0)
    v.check_int(p["max_iter"], "max_iter", low=0)
    v.check_real(p["tol"], "tol", low=0.0)
    v.check_time_limit(p["time_limit"])
    nmf_init.check_init(p["init"])
    _check_beta_loss(p["beta_loss"])
    ex = p["extrapolation"]
    if not (isinstance(ex, bool) or (isinstance(ex, str) and ex == "auto")):
        raise ValueError(f"extrapolation must be 'auto', True or False, got {ex!r}")
    check_finish(p["finish"])  # the values of solve's finish


def _check_factor(F, shape, name, backend, dtype):
    if F is None:
        raise ValueError(f"init='custom' needs {name}")
    if _is_sparse(F):
        F = F.toarray()
    if tuple(F.shape) != shape:
        raise ValueError(f"{name} must have shape {shape}, got {tuple(F.shape)}")
    host = F.get() if hasattr(F, "get") else np.asarray(F)
    if not np.isfinite(host).all():
        raise ValueError(f"{name} contains NaN or Inf")
    if (host < 0).any():
        raise ValueError(f"{name} must be nonnegative (init='custom')")
    return backend.asarray(F, dtype)


# -- the alternating loop ----------------------------------------------------------------


def _run(data, backend, W, H, p, *, update_w=True, update_h=True):
    """Alternating NNLS from (W, H) on the backend.  Returns W, H and an info dict."""
    m, d = data.shape
    k = H.shape[0]
    if p["inner_iter"] == "auto":
        inner_h = inner_w = ns.balanced_inner_iter(m, d, k, data.nnz)
    else:
        inner_h = inner_w = int(p["inner_iter"])
    opts = {"inner_tol": p["inner_tol"], "omega": p["omega"], "theta": p["theta"]}
    opts["finish"] = finish_half_steps(p["finish"], data.sparse)
    solver = p["solver"]
    tol, max_iter, time_limit = p["tol"], p["max_iter"], p["time_limit"]

    start = time.perf_counter()
    g_h = H @ H.T
    f = _objective(data.norm2, W, g_h, data.h_yt(H))
    history = [(0.0, f)]
    inner_counts = []
    message = f"reached max_iter = {max_iter}"
    converged = False
    bar = None
    if p["verbose"]:
        from tqdm.auto import tqdm

        bar = tqdm(total=max_iter, desc=f"NMF ({solver}, k={k})", unit="it")
        bar.set_postfix(objective=f"{f:.6g}")
    n_iter = 0
    # extrapolation between outer iterations (Ang and Gillis 2019, nmf_extrapolation.py):
    # the objective of each iteration is that of the pair (W_new, H_hat) the W-step used,
    # and the best such pair is returned
    ex = Extrapolation() if _use_extrapolation(p) else None
    h_prev, w_prev = H, W
    best = (f, W, H)
    # CPU: one BLAS thread for the whole run, all solvers alike (module docstring).
    limit = backend.limit_host_blas()
    limit.__enter__()
    try:
        while n_iter < max_iter:
            n_h = n_w = 0
            h_new, w_new = H, W
            if update_h:
                g = W.T @ W
                h_new, n_h = ns.half_step(
                    solver, backend, g, data.wt_y(W), H, max_inner=inner_h, **opts
                )
            h_hat = ex.point(h_new, h_prev) if ex is not None and update_h else h_new
            g_h = h_hat @ h_hat.T
            p_w = data.h_yt(h_hat)
            if update_w:
                wt, n_w = ns.half_step(solver, backend, g_h, p_w, W.T, max_inner=inner_w, **opts)
                w_new = wt.T
            n_iter += 1
            f_prev, f = f, _objective(data.norm2, w_new, g_h, p_w)
            restarted = False
            if ex is None:
                W, H = w_new, h_new
            elif ex.update(f, f_prev):
                W = ex.point(w_new, w_prev) if update_w else w_new
                H = h_hat
            else:  # restart from the plain iterates
                W, H = w_new, h_new
                restarted = True
            h_prev, w_prev = h_new, w_new
            if f < best[0]:
                best = (f, w_new, h_hat)
            history.append((time.perf_counter() - start, f))
            inner_counts.append((n_h, n_w))
            if bar is not None:
                bar.update(1)
                bar.set_postfix(objective=f"{f:.6g}")
            if tol > 0 and not restarted and f_prev - f <= tol * f_prev:
                message = f"converged: relative decrease of the objective <= tol = {tol:g}"
                converged = True
                break
            if time_limit is not None and time.perf_counter() - start >= time_limit:
                message = f"reached time_limit = {time_limit:g} s"
                break
    finally:
        limit.__exit__(None, None, None)
        if bar is not None:
            bar.close()
    _, W, H = best
    elapsed = time.perf_counter() - start
    info = {
        "n_iter": n_iter,
        "history": np.asarray(history, dtype=np.float64).reshape(-1, 2),
        "converged": converged,
        "message": message,
        "inner_iterations": np.asarray(inner_counts, dtype=np.int64).reshape(-1, 2),
        "inner_iter": (inner_h, inner_w),
        "time": elapsed,
        "solver": solver,
        "backend": backend.name,
        "objective": best[0],
        "extrapolation": ex is not None,
        "restarts": 0 if ex is None else ex.restarts,
    }
    return W, H, info


def _prepare(Y, params, W=None, H=None):
    _check_params(params)
    Y = _check_data(Y)
    m, d = Y.shape
    k = params["n_components"]
    if k is None:
        k = d
    if k > min(m, d):
        warnings.warn(
            f"n_components = {k} is larger than min(n_samples, n_features) = {min(m, d)}; "
            "the factorisation is not unique and some components may be redundant",
            UserWarning,
            stacklevel=3,
        )
    backend = get_backend(params["backend"], Y)
    if params["solver"] in ns.CPU_ONLY and backend.name != "cpu":
        raise ValueError(
            f"solver={params['solver']!r} runs on the CPU only; use backend='cpu' or one "
            "of 'msm', 'hals', 'pg', 'apg' on the GPU"
        )
    dtype = _dtype_of(Y)
    data = _Data(Y, backend, dtype)
    if params["init"] == "custom" or (W is not None and H is not None):
        W0 = _check_factor(W, (m, k), "W", backend, dtype)
        H0 = _check_factor(H, (k, d), "H", backend, dtype)
    else:
        if W is not None or H is not None:
            raise ValueError("W and H are used only with init='custom'")
        W0, H0 = nmf_init.initialize(Y, k, params["init"], params["random_state"])
        W0 = backend.asarray(W0, dtype)
        H0 = backend.asarray(H0, dtype)
    return Y, data, backend, W0, H0


# -- public API ----------------------------------------------------------------------------


class NMF(TransformerMixin, BaseEstimator):
    """Nonnegative matrix factorisation Y ~ W H by alternating NNLS (MSM by default).

    Minimises 1/2 ||Y - WH||_F^2 over W >= 0 (m x k), H >= 0 (k x d), scikit-learn
    style: ``W = NMF(k).fit_transform(Y)``, ``H = model.components_``.

    Parameters
    ----------
    n_components : int or None
        k.  None: d (as scikit-learn).  k > min(m, d) is allowed with a warning.
    solver : {"msm", "hals", "pg", "apg", "bpp", "cgd"}
        NNLS solver of each half-step (:mod:`msm_gpu.factorization.solvers`).  "msm" and
        "hals" (MSM with omega=1, theta=0), "pg" and "apg" run on the CPU and on CUDA;
        "bpp" and "cgd" on the CPU only.
    omega : float in (0, 2)
        MSM relaxation (solver "msm" only).
    theta : float >= 0
        MSM proximal term (solver "msm" only), relative to the scale of the Gram matrix:
        ``theta * mean(diag G)`` is added to B's diagonal, so results do not depend on
        the units of Y.  Default 0.001 (see :data:`DEFAULT_THETA` for the measurements
        behind it).
    inner_iter : "auto" or int
        Most inner iterations per half-step; "auto" = Gillis & Glineur's
        ``1 + 0.5 rho`` (see :func:`~msm_gpu.factorization.solvers.auto_inner_iter`).
        Ignored by "bpp", which solves each half-step exactly.
    inner_tol : float >= 0
        Stop the inner iterations once one moves the iterate by at most ``inner_tol``
        times what the first one did.
    max_iter : int
        Outer iterations (H-step + W-step).
    tol : float >= 0
        Stop when an outer iteration lowers the objective by at most ``tol`` times its
        value; 0 disables the rule.
    time_limit : float or None
        Stop after this many seconds of iterations.
    init : {None, "random", "nndsvd", "nndsvda", "nndsvdar", "custom"}
        scikit-learn's inits and default rule (None: "nndsvda" if k <= min(m, d), else
        "random"); for an int seed the factors equal scikit-learn's
        (:mod:`msm_gpu.factorization.init`).  "custom": pass ``W`` and ``H`` to
        ``fit``/``fit_transform``.
    beta_loss : "frobenius" (or 2)
        Accepted for scikit-learn compatibility; any other loss is refused.
    extrapolation : "auto", True or False
        Extrapolate between outer iterations (Ang and Gillis 2019,
        :mod:`msm_gpu.factorization.extrapolation`); "auto": for "msm" and "hals".  The
        objective history is then not monotone (restarts) and the best pair is returned.
    finish : "auto", "exact" or None
        "exact": on the CPU, each "msm" half-step ends with the exact NNLS solve from the
        MSM iterate (Lawson & Hanson's active set, :mod:`msm_gpu.solvers.nnls_columns`; k <=
        ``msm_gpu.finish.run.ACTIVE_SET_MAX_N``).  "auto" (default): so for sparse Y, not for
        dense Y (see ``finish_half_steps`` for the measurements).  None: the paper's plain MSM
        half-steps.  Ignored by the other solvers and on the GPU.
    random_state : None, int, numpy RandomState or Generator
    backend : {"auto", "cpu", "cuda"}
        "auto": CUDA for CuPy/cupyx input, CPU otherwise.  Outputs have the input's
        array type.
    verbose : bool
        Show a tqdm progress bar with the objective.

    Attributes
    ----------
    components_ : (k, d) array
        H.
    reconstruction_err_ : float
        ||Y - WH||_F at the end (as scikit-learn: not squared, not halved).
    n_iter_ : int
    history_ : (n_iter_ + 1, 2) ndarray
        (seconds since the iterations started, 1/2 ||Y - WH||_F^2) after each outer
        iteration, the initial point first.  With extrapolation the value is that of
        the pair (new W, extrapolated H) the W-step used; the returned pair is the best.
    converged_ : bool
        Whether the ``tol`` rule stopped the run.
    n_components_, n_features_in_ : int
    info_ : dict
        Everything :func:`nmf` returns as ``info``.

    Examples
    --------
    >>> import numpy as np, msm_gpu as mg
    >>> rng = np.random.default_rng(0)
    >>> Y = rng.random((30, 4)) @ rng.random((4, 20))
    >>> model = mg.NMF(n_components=4, random_state=0, max_iter=500, tol=1e-10)
    >>> W = model.fit_transform(Y)
    >>> bool(model.reconstruction_err_ < 1e-2 * np.linalg.norm(Y))
    True
    """

    def __init__(
        self,
        n_components=None,
        *,
        solver="msm",
        omega=1.0,
        theta=DEFAULT_THETA,
        inner_iter="auto",
        inner_tol=0.1,
        max_iter=200,
        tol=1e-4,
        time_limit=None,
        init=None,
        beta_loss="frobenius",
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
        self.extrapolation = extrapolation
        self.finish = finish
        self.random_state = random_state
        self.backend = backend
        self.verbose = verbose

    def fit_transform(self, Y, y=None, W=None, H=None):
        """Fit the model to Y and return W (m x k).

        Parameters
        ----------
        Y : (m, d) array or sparse matrix, Y >= 0
            NumPy, CuPy, scipy.sparse or cupyx.scipy.sparse.
        y : ignored
        W, H : arrays, optional
            Starting factors for ``init="custom"``.

        A ``dask.array`` Y is factorised block by block and W / ``components_`` are
        then dask arrays (:mod:`msm_gpu.dask.nmf`).
        """
        if is_dask_array(Y):  # -- dask hook (msm_gpu/apps/nmf_dask.py) --
            from ..dask import nmf as nmf_dask

            return nmf_dask.fit_transform(self, Y, W=W, H=H)
        params = self.get_params()
        Yc, data, backend, W0, H0 = _prepare(Y, params, W, H)
        Wf, Hf, info = _run(data, backend, W0, H0, params)
        info["reconstruction_err"] = _exact_error(data, Wf, Hf)
        self.components_ = backend.to_user(Hf, Yc)
        self.reconstruction_err_ = info["reconstruction_err"]
        self.n_iter_ = info["n_iter"]
        self.history_ = info["history"]
        self.converged_ = info["converged"]
        self.n_components_ = Hf.shape[0]
        self.n_features_in_ = Yc.shape[1]
        self.info_ = info
        return backend.to_user(Wf, Yc)

    def fit(self, Y, y=None, **params):
        """Fit the model to Y; returns self."""
        self.fit_transform(Y, y, **params)
        return self

    def _check_fitted(self):
        """scikit-learn's ``NotFittedError`` before ``fit`` (the dask path calls it too)."""
        check_is_fitted(self, "components_")

    def transform(self, Y):
        """W >= 0 minimising 1/2 ||Y - W H||^2 for the fitted H (m x k).

        The W-step NNLS (H fixed) is solved exactly by block principal pivoting on the
        CPU, and on CUDA by the model's solver (``"msm"`` for bpp/cgd) with up to
        ``max(max_iter, 2000)`` inner iterations and inner_tol 1e-9, from zero.
        """
        if is_dask_array(Y):  # -- dask hook (msm_gpu/apps/nmf_dask.py) --
            from ..dask import nmf as nmf_dask

            return nmf_dask.transform(self, Y)
        self._check_fitted()
        params = self.get_params()
        _check_params(params)
        Y = _check_data(Y)
        k, d = self.components_.shape
        if Y.shape[1] != d:
            raise ValueError(f"Y has {Y.shape[1]} features, but NMF was fitted with {d}")
        backend = get_backend(params["backend"], Y, self.components_)
        dtype = _dtype_of(Y)
        data = _Data(Y, backend, dtype)
        H = backend.asarray(self.components_, dtype)
        g = H @ H.T
        p_w = data.h_yt(H)
        x0 = backend.xp.zeros_like(p_w)
        solver = params["solver"]
        if backend.on_host:
            solver = "bpp"
        elif solver in ns.CPU_ONLY:
            solver = "msm"
        wt, _ = ns.half_step(
            solver,
            backend,
            g,
            p_w,
            x0,
            max_inner=max(int(params["max_iter"]), 2000),
            inner_tol=1e-9,
            omega=params["omega"],
            theta=params["theta"],
        )
        return backend.to_user(wt.T, Y)

    def inverse_transform(self, W):
        """W @ components_ (the reconstruction, m x d)."""
        self._check_fitted()
        return W @ self.components_


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
