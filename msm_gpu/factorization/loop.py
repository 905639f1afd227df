"""NMF's outer loop in memory: the data, the parameters' checks and the alternating
half-steps (the estimator and :func:`msm_gpu.nmf` are in :mod:`msm_gpu.apps.nmf`; the Dask
road, :mod:`msm_gpu.dask.nmf`, shares the checks and the half-steps' finish)."""

from __future__ import annotations

import math
import time
import warnings

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


def _objective(norm2, W, G_h, P_w):
    """1/2 ||Y - WH||^2 from G_h = HH' and P_w = HY' (k x m): O(m k^2).

    ||Y - WH||^2 = ||Y||^2 - 2 <W', HY'> + <W'W, HH'>."""
    xp = namespace(W)
    val = norm2 - 2.0 * float(xp.sum(W.T * P_w)) + float(xp.sum((W.T @ W) * G_h))
    return 0.5 * max(val, 0.0)


def exact_error(data, W, H):
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


def run(data, backend, W, H, p, *, update_w=True, update_h=True):
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
    # extrapolation between outer iterations (Ang and Gillis 2019, extrapolation.py):
    # the objective of each iteration is that of the pair (W_new, H_hat) the W-step used,
    # and the best such pair is returned
    ex = Extrapolation() if use_extrapolation(p) else None
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


def prepare(Y, params, W=None, H=None):
    check_params(params)
    Y = check_data(Y)
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
