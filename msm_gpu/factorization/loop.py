"""NMF's alternating outer loop, :func:`alternate`, the one for Y in memory and on Dask.

The loop (extrapolation, stopping rule, best pair) asks a :class:`Strategy` for the Gram
products and the half-steps: :class:`InMemory` (:class:`Data` on one backend) here,
``OnDask`` in :mod:`msm_gpu.dask.nmf`.  Also the data and parameter checks both roads
share; the estimator and :func:`msm_gpu.nmf` are in :mod:`msm_gpu.apps.nmf`."""

from __future__ import annotations

import math
import time
import warnings
from contextlib import nullcontext
from typing import Protocol

import numpy as np

from .._input import validation as v
from ..arrays import is_cupy, module_of, namespace
from ..backends import get_backend
from ..finish.run import check_finish
from . import init as nmf_init
from . import solvers as ns
from .extrapolation import Extrapolation

#: Solvers that extrapolate between outer iterations with ``extrapolation="auto"``.
EXTRAPOLATED_SOLVERS = ("msm", "hals")

#: Default (relative) theta of the "msm" half-steps (measurements: there).
DEFAULT_THETA = ns.DEFAULT_THETA


# -- input handling ---------------------------------------------------------------------


def is_sparse(y) -> bool:
    import scipy.sparse as sp

    if sp.issparse(y):
        return True
    return type(y).__module__.startswith("cupyx.scipy.sparse")


def check_data(Y, name="Y"):
    """Refuse non-numeric, empty, non-2-D, non-finite or negative data; return it unchanged."""
    if Y is None:
        raise TypeError(f"{name} must be a 2-D array or sparse matrix, got None")
    if not is_sparse(Y) and not hasattr(Y, "__array_namespace__") and not is_cupy(Y):
        Y = np.asarray(Y)
    if len(Y.shape) != 2:
        raise ValueError(f"{name} must be 2-D (samples x features), got shape {Y.shape}")
    if Y.shape[0] == 0 or Y.shape[1] == 0:
        raise ValueError(f"{name} must not be empty, got shape {Y.shape}")
    kind = np.dtype(Y.dtype).kind
    if kind not in "biuf":
        raise TypeError(f"{name} must hold real numbers, got dtype {Y.dtype}")
    values = Y.data if is_sparse(Y) else Y
    if kind == "f":
        finite = values.size == 0 or bool(_as_bool(module_of(values).isfinite(values).all()))
        if not finite:
            raise ValueError(f"{name} contains NaN or Inf; NMF needs finite data")
    if values.size and bool(_as_bool((values < 0).any())):
        raise ValueError(f"Negative values in data passed to NMF ({name}); NMF needs Y >= 0")
    return Y


def _as_bool(v):
    return v.item() if hasattr(v, "item") else v


def dtype_of(Y):
    dt = np.dtype(Y.dtype)
    return np.dtype(np.float32) if dt == np.float32 else np.dtype(np.float64)


class Data:
    """Y on the backend, with the two products NMF needs and ||Y||_F^2."""

    def __init__(self, Y, backend, dtype):
        self.shape = tuple(Y.shape)
        self.sparse = is_sparse(Y)
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


def _objective(norm2, wt, G_h, P_w):
    """1/2 ||Y - WH||^2 from W' (k x m), G_h = HH' and P_w = HY' (k x m): O(m k^2).

    ||Y - WH||^2 = ||Y||^2 - 2 <W', HY'> + <W'W, HH'>."""
    xp = namespace(wt)
    val = norm2 - 2.0 * float(xp.sum(wt * P_w)) + float(xp.sum((wt @ wt.T) * G_h))
    return 0.5 * max(val, 0.0)


def exact_error(data, W, H):
    """||Y - WH||_F: directly for dense Y, by the Gram identity for sparse Y."""
    xp = data.xp
    if not data.sparse:
        r = data.y - W @ H
        return math.sqrt(float(xp.sum(xp.astype(r * r, xp.float64))))
    return math.sqrt(2.0 * _objective(data.norm2, W.T, H @ H.T, data.h_yt(H)))


def finish_half_steps(finish, sparse):
    """Whether the "msm" half-steps end with the exact solve: "exact" always, "auto" for
    sparse Y (measured by ``benchmarks/bench_nmf.py --target``, k = 20-40: on the sparse
    Zipf text matrix plain MSM half-steps settled 0.1 % above bpp and never reached
    scikit-learn cd's 200-iteration objective, finished ones reached it in 0.18x cd's
    time; on the dense digits and china.jpg the finish made each iteration several times
    dearer and cd's objective was no longer reached in time)."""
    return finish == "exact" or (finish == "auto" and sparse)


def use_extrapolation(p):
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


def check_params(p):
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
    if is_sparse(F):
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


class Strategy(Protocol):
    """Where Y lives, as the outer loop (:func:`alternate`) sees it.

    The loop holds both factors as k x c matrices, W' (k x m) and H (k x d), so that both
    half-steps solve min_{X >= 0} 1/2 tr(X'GX) - tr(X'P) over the columns of X.  A
    strategy forms the Gram products, solves the half-steps and extrapolates, and decides
    where each result lives and when it is computed: :class:`InMemory` here, ``OnDask``
    in :mod:`msm_gpu.dask.nmf` (k x k matrices and scalars on the client, factors and
    products persisted on the workers).
    """

    shape: tuple  #: (m, d), Y's shape
    nnz: int  #: Y's stored entries (m d for dense Y)
    sparse: bool
    norm2: float  #: ||Y||_F^2
    tag: str  #: appended to the progress bar's description

    def session(self):
        """Context manager around the whole loop."""

    def h_step_products(self, wt):
        """(G, P) = (W'W, W'Y) of the H-step, for W' (k x m)."""

    def w_step_products(self, h):
        """(G_h, P_w) = (HH', HY') of the W-step, for H (k x d)."""

    def objective(self, wt, g_h, p_w):
        """1/2 ||Y - WH||^2 (a float) from W' and the W-step's products."""

    def solve_half_step(self, solver, g, p, x, max_inner, **opts):
        """(X_new, inner iterations): the half-step from X (k x c), as ``ns.half_step``."""

    def extrapolate(self, ex, new, old):
        """``ex.point(new, old)``: max(new + beta (new - old), 0)."""

    def describe(self):
        """Entries of the loop's info dict: at least ``"backend"``."""


class InMemory:
    """The :class:`Strategy` of a Y in memory (:class:`Data`) on one backend."""

    tag = ""

    def __init__(self, data, backend):
        self.data = data
        self.backend = backend
        self.shape, self.nnz, self.sparse = data.shape, data.nnz, data.sparse
        self.norm2 = data.norm2

    def session(self):
        # CPU: one BLAS thread for the whole run, all solvers alike
        return self.backend.limit_host_blas()

    def h_step_products(self, wt):
        return wt @ wt.T, self.data.wt_y(wt.T)

    def w_step_products(self, h):
        return h @ h.T, self.data.h_yt(h)

    def objective(self, wt, g_h, p_w):
        return _objective(self.norm2, wt, g_h, p_w)

    def solve_half_step(self, solver, g, p, x, max_inner, **opts):
        return ns.half_step(solver, self.backend, g, p, x, max_inner=max_inner, **opts)

    def extrapolate(self, ex, new, old):
        return ex.point(new, old)

    def describe(self):
        return {"backend": self.backend.name}


def run(data, backend, W, H, p, *, update_w=True, update_h=True):
    """Alternating NNLS from (W, H) on the backend.  Returns W, H and an info dict."""
    wt, H, info = alternate(
        InMemory(data, backend), W.T, H, p, update_w=update_w, update_h=update_h
    )
    return wt.T, H, info


def alternate(strategy, wt, h, p, *, update_w=True, update_h=True):
    """NMF's outer loop from (W', H) for any :class:`Strategy`.

    Returns the best pair (W', H) met and an info dict."""
    m, d = strategy.shape
    k = h.shape[0]
    if p["inner_iter"] == "auto":
        inner_h = inner_w = ns.balanced_inner_iter(m, d, k, strategy.nnz)
    else:
        inner_h = inner_w = int(p["inner_iter"])
    opts = {"inner_tol": p["inner_tol"], "omega": p["omega"], "theta": p["theta"]}
    opts["finish"] = finish_half_steps(p["finish"], strategy.sparse)
    solver = p["solver"]
    tol, max_iter, time_limit = p["tol"], p["max_iter"], p["time_limit"]

    start = time.perf_counter()
    g_h, p_w = strategy.w_step_products(h)
    f = strategy.objective(wt, g_h, p_w)
    history = [(0.0, f)]
    inner_counts = []
    message = f"reached max_iter = {max_iter}"
    converged = False
    n_iter = 0
    # extrapolation between outer iterations (Ang and Gillis 2019, extrapolation.py):
    # the objective of each iteration is that of the pair (W_new, H_hat) the W-step used,
    # and the best such pair is returned
    ex = Extrapolation() if use_extrapolation(p) else None
    h_prev, w_prev = h, wt
    best = (f, wt, h)
    desc = f"NMF ({solver}, k={k}{strategy.tag})"
    with strategy.session(), _progress(p["verbose"], max_iter, desc, f) as bar:
        while n_iter < max_iter:
            n_h = n_w = 0
            h_new, w_new = h, wt
            if update_h:
                g, p_h = strategy.h_step_products(wt)
                h_new, n_h = strategy.solve_half_step(solver, g, p_h, h, inner_h, **opts)
            h_hat = (
                strategy.extrapolate(ex, h_new, h_prev) if ex is not None and update_h else h_new
            )
            g_h, p_w = strategy.w_step_products(h_hat)
            if update_w:
                w_new, n_w = strategy.solve_half_step(solver, g_h, p_w, wt, inner_w, **opts)
            n_iter += 1
            f_prev, f = f, strategy.objective(w_new, g_h, p_w)
            restarted = False
            if ex is None:
                wt, h = w_new, h_new
            elif ex.update(f, f_prev):
                wt = strategy.extrapolate(ex, w_new, w_prev) if update_w else w_new
                h = h_hat
            else:  # restart from the plain iterates
                wt, h = w_new, h_new
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
    f_best, wt, h = best
    info = {
        "n_iter": n_iter,
        "history": np.asarray(history, dtype=np.float64).reshape(-1, 2),
        "converged": converged,
        "message": message,
        "inner_iterations": np.asarray(inner_counts, dtype=np.int64).reshape(-1, 2),
        "inner_iter": (inner_h, inner_w),
        "time": time.perf_counter() - start,
        "solver": solver,
        **strategy.describe(),
        "objective": f_best,
        "extrapolation": ex is not None,
        "restarts": 0 if ex is None else ex.restarts,
    }
    return wt, h, info


def _progress(verbose, total, desc, f):
    """A tqdm bar that shows the objective (closed on exit), or None when not verbose."""
    if not verbose:
        return nullcontext()
    from tqdm.auto import tqdm

    bar = tqdm(total=total, desc=desc, unit="it")
    bar.set_postfix(objective=f"{f:.6g}")
    return bar


def n_components(params, m, d):
    """k (``n_components``, or d when None), with a warning when k > min(m, d)."""
    k = params["n_components"]
    if k is None:
        k = d
    if k > min(m, d):
        warnings.warn(
            f"n_components = {k} is larger than min(n_samples, n_features) = {min(m, d)}; "
            "the factorisation is not unique and some components may be redundant",
            UserWarning,
            stacklevel=4,
        )
    return k


def prepare(Y, params, W=None, H=None):
    check_params(params)
    Y = check_data(Y)
    m, d = Y.shape
    k = n_components(params, m, d)
    backend = get_backend(params["backend"], Y)
    if params["solver"] in ns.CPU_ONLY and backend.name != "cpu":
        raise ValueError(
            f"solver={params['solver']!r} runs on the CPU only; use backend='cpu' or one "
            "of 'msm', 'hals', 'pg', 'apg' on the GPU"
        )
    dtype = dtype_of(Y)
    data = Data(Y, backend, dtype)
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
