"""NMF's alternating outer loop, :func:`alternate`, the one for Y in memory and on Dask.

The loop (extrapolation, stopping rule, best pair) asks a :class:`Strategy` for the Gram
products and the half-steps: :class:`InMemory` (:class:`Data` on one backend) here,
``OnDask`` in :mod:`msm_gpu.dask.nmf`.  Also the data and parameter checks both roads
share; the estimator and :func:`msm_gpu.nmf` are in :mod:`msm_gpu.apps.nmf`.

Sturdiness (issue 49):

* Y is divided by a power of four 4^j near max(Y) before anything else (exact), the
  factors by 2^j, so the iterations see numbers of order one whatever Y's units: Y * 1e100
  and Y * 1e-200 no longer overflow or underflow, and Y * 4^j gives bit for bit the
  factors of Y times 2^j (:func:`scale_exponent`).
* The objective is the Gram expansion ||Y||^2 - 2 <W', HY'> + <W'W, HH'> (no product
  with Y of its own) summed in float64, unless that expansion is within
  :data:`EXPANSION_ULPS` rounding units of ||Y||^2, where it would measure rounding
  (a float32 fit with a small residual): there it is computed from the residual.
* A non-finite objective is never counted as convergence.
* A component one factor has all zero (an extrapolation can zero one) keeps its other
  factor's values in every half-step, exact ones included
  (``solvers.keep_free_components``): it is not lost for good.  A component whose W and
  H norms drift more than :data:`BALANCE_LIMIT` apart is rescaled (by a power of two:
  the product is unchanged).
"""

from __future__ import annotations

import math
import time
import warnings
from contextlib import nullcontext
from typing import Protocol

import numpy as np

from .._input import validation as v
from ..arrays import is_cupy, module_of, namespace, to_host
from ..backends import get_backend
from ..finish.run import check_finish
from . import init as nmf_init
from . import solvers as ns
from .beta import beta_value
from .extrapolation import Extrapolation
from .regularization import Regularization, check_alphas

#: Solvers that extrapolate between outer iterations with ``extrapolation="auto"``.
EXTRAPOLATED_SOLVERS = ("msm", "hals")

#: Default (relative) theta of the "msm" half-steps (measurements: there).
DEFAULT_THETA = ns.DEFAULT_THETA

#: The Gram expansion of the objective is trusted down to this many rounding units of
#: the working dtype times ||Y||^2 (it loses about as many to the products and sums);
#: below, the objective is computed from the residual Y - WH.
EXPANSION_ULPS = 1e3

#: Data with at most this share of nonzero entries are "sparse-like", whether Y is
#: stored dense or sparse (same data, same answers): "auto" finishes their msm half-steps
#: exactly and the inner budget counts their products as sparse ones (nonzeros k); other
#: data count m d k.  Measured (``benchmarks/bench_nmf.py --target``): the finish paid on
#: a 1 % Zipf text matrix and cost time on digits (51 % nonzero) and china.jpg (dense),
#: where the inner budget tuned on dense products (3 sweeps on digits, k = 20) is kept;
#: counting digits' nonzeros gave 2 sweeps and up to twice the iterations.
SPARSE_LIKE_DENSITY = 0.1

#: A component whose ||H_t|| / ||W_t|| leaves [1 / BALANCE_LIMIT, BALANCE_LIMIT] is
#: rescaled to equal norms.  Extrapolation can otherwise feed a drift (H_t grows, the
#: W-step shrinks W_t, the next extrapolation grows H_t further: ratios of 1e300 after
#: 2000 HALS iterations on 35 x 53 random matrices, k = 5-7, and H at 1e132 in issue 49's
#: case).  Far above what ordinary runs reach: at 2^20 digits from nndsvda (k = 16) was
#: rescaled once and took 63 iterations instead of 57 to the default tol.
BALANCE_LIMIT = 2.0**40
#: ... checked every this many outer iterations (the drift is slow: hundreds of them).
BALANCE_EVERY = 10

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


def scale_exponent(Y):
    """An even e with max(Y) / 2^e in [1/4, 4) (0 for Y = 0): NMF works on Y / 2^e.

    Even, so that the factors' share 2^(e/2) is a power of two too: the rescaling is
    exact both ways."""
    values = Y.data if is_sparse(Y) else Y
    if values.size == 0:
        return 0
    top = float(values.max())
    if not top > 0.0 or not math.isfinite(top):
        return 0
    _, ex = math.frexp(top)  # top = f 2^ex, f in [1/2, 1)
    return 2 * math.floor(ex / 2)


class Data:
    """Y / 2^exponent on the backend, with the two products NMF needs and ||Y||_F^2.

    The user's Y is never modified: a sparse Y is copied, a dense one is copied when it is
    rescaled or converted."""

    def __init__(self, Y, backend, dtype, exponent=0):
        self.shape = tuple(Y.shape)
        self.sparse = is_sparse(Y)
        self.exponent = int(exponent)
        factor = 2.0 ** (-self.exponent)
        xp = backend.xp
        if self.sparse:
            if not backend.on_host:
                import cupyx.scipy.sparse as csp

                y = csp.csr_matrix(Y, dtype=dtype, copy=True)
            else:
                if is_cupy(Y):
                    Y = Y.get()
                import scipy.sparse as sp

                y = sp.csr_matrix(Y, dtype=dtype, copy=True)
            y.sum_duplicates()
            if self.exponent:
                y.data *= factor
            self.y = y
            self.yt = y.T.tocsr()
            self.nnz = int(y.nnz)
            data = y.data
            self.nonzeros = (
                int(xp.count_nonzero(data)) if not backend.on_host else int(np.count_nonzero(data))
            )
            self.norm2 = float((data.astype(np.float64) ** 2).sum())
        else:
            y = backend.asarray(Y, dtype)
            self.y = y * factor if self.exponent else y
            self.yt = None
            self.nnz = self.shape[0] * self.shape[1]
            self.nonzeros = int(xp.count_nonzero(self.y))
            self.norm2 = float(xp.sum(xp.astype(self.y, xp.float64) ** 2))
        self.xp = xp
        self.dtype = np.dtype(dtype)

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


def _dot64(xp, a, b):
    """<a, b> summed in float64 (float32 arrays are cast first)."""
    if a.dtype != xp.float64:
        a = xp.astype(a, xp.float64)
    if b.dtype != xp.float64:
        b = xp.astype(b, xp.float64)
    return float(xp.sum(a * b))


def expanded_objective(norm2, wt, G_h, P_w):
    """||Y - WH||^2 = ||Y||^2 - 2 <W', HY'> + <W'W, HH'> from W' (k x m), G_h = HH' and
    P_w = HY' (k x m), in float64: O(m k^2).  Not halved, not clipped (rounding can make
    it slightly negative)."""
    xp = namespace(wt)
    w64 = wt if wt.dtype == xp.float64 else xp.astype(wt, xp.float64)
    return norm2 - 2.0 * _dot64(xp, w64, P_w) + _dot64(xp, w64 @ w64.T, G_h)


def residual_norm2(data, wt, h):
    """||Y - WH||^2 from the residual, in float64 sums: dense Y through Y - WH in the
    working dtype (each entry rounded once), sparse Y as the squared residual on the
    stored entries plus ||WH||^2 on the others (Grams in float64)."""
    xp = data.xp
    if not data.sparse:
        r = data.y - wt.T @ h
        r = xp.astype(r, xp.float64)
        return float(xp.sum(r * r))
    y = data.y.tocoo()
    w64 = xp.astype(wt, xp.float64)
    h64 = xp.astype(h, xp.float64)
    on = z2 = 0.0
    step = max(1, (1 << 22) // max(wt.shape[0], 1))  # k x step gathered entries at a time
    for start in range(0, int(y.nnz), step):
        rows, cols = y.row[start : start + step], y.col[start : start + step]
        z = xp.sum(w64[:, rows] * h64[:, cols], axis=0)
        on += float(xp.sum((xp.astype(y.data[start : start + step], xp.float64) - z) ** 2))
        z2 += float(xp.sum(z * z))
    off = float(xp.sum((w64 @ w64.T) * (h64 @ h64.T))) - z2
    return on + max(off, 0.0)


def stable_objective(data, wt, h, g_h, p_w):
    """1/2 ||Y - WH||^2: the Gram expansion where it is reliable, else the residual's."""
    val = expanded_objective(data.norm2, wt, g_h, p_w)
    if val <= EXPANSION_ULPS * float(np.finfo(data.dtype).eps) * data.norm2:
        val = residual_norm2(data, wt, h)
    return 0.5 * max(val, 0.0)


def exact_error(data, W, H):
    """||Y - WH||_F (in Data's units): directly for dense Y, by the stable form for
    sparse Y."""
    xp = data.xp
    if not data.sparse:
        r = xp.astype(data.y - W @ H, xp.float64)
        return math.sqrt(float(xp.sum(r * r)))
    return math.sqrt(2.0 * stable_objective(data, W.T, H, H @ H.T, data.h_yt(H)))


def sparse_like(density):
    """Whether data with this share of nonzeros count as sparse (:data:`SPARSE_LIKE_DENSITY`)."""
    return density <= SPARSE_LIKE_DENSITY


def cost_nnz(shape, nonzeros):
    """The entries the inner budget's cost model counts for Y's products: its nonzeros
    for sparse-like data, m d otherwise (dense storage or not)."""
    m, d = shape
    return nonzeros if sparse_like(nonzeros / (m * d)) else m * d


def finish_half_steps(finish, density):
    """Whether the "msm" half-steps end with the exact solve: "exact" always, "auto" for
    data with at most :data:`SPARSE_LIKE_DENSITY` nonzero entries, whether Y is stored
    dense or sparse (measured by ``benchmarks/bench_nmf.py --target``, k = 20-40: on the
    1 % Zipf text matrix plain MSM half-steps settled 0.1 % above bpp and never reached
    scikit-learn cd's 200-iteration objective, finished ones reached it in 0.18x cd's
    time; on digits and china.jpg the finish made each iteration several times dearer and
    cd's objective was no longer reached in time).  The rule read Y's storage until
    issue 49: the same data then took different roads dense and sparse."""
    return finish == "exact" or (finish == "auto" and sparse_like(density))


def warn_factors_ignored(stacklevel):
    """scikit-learn's RuntimeWarning for W or H given without ``init="custom"``."""
    warnings.warn(
        "When init!='custom', provided W or H are ignored. Set init='custom' to use "
        "them as initialization.",
        RuntimeWarning,
        stacklevel=stacklevel,
    )


def use_extrapolation(p):
    if isinstance(p["extrapolation"], str):
        return p["solver"] in EXTRAPOLATED_SOLVERS
    return bool(p["extrapolation"])


#: Every ``solver`` the estimator takes: the NNLS half-step solvers and "mu", the
#: multiplicative updates (:mod:`~msm_gpu.factorization.beta_loop`).
ALL_SOLVERS = (*ns.SOLVERS, "mu")

#: The solvers of a beta-divergence other than Frobenius: "msm" (proximal Newton with MSM
#: inside) and "mu".
BETA_SOLVERS = ("msm", "mu")


def _check_beta_loss(beta_loss, solver):
    """A loss name or a finite float; beta != 2 needs a solver that minimises it."""
    beta = beta_value(beta_loss)
    if beta != 2.0 and solver not in BETA_SOLVERS:
        raise ValueError(
            f"solver={solver!r} minimises the Frobenius loss only; beta_loss={beta_loss!r} "
            "needs solver='msm' (proximal Newton with MSM inside, the default) or 'mu' "
            "(multiplicative updates)"
        )
    return beta


def check_params(p):
    nc = p["n_components"]
    if nc is not None and not (isinstance(nc, str) and nc == "auto"):
        v.check_int(nc, "n_components ('auto', None or an int)", low=1)
    if p["solver"] not in ALL_SOLVERS:
        raise ValueError(
            f"solver must be one of {', '.join(map(repr, ALL_SOLVERS))}, got {p['solver']!r}"
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
    _check_beta_loss(p["beta_loss"], p["solver"])
    ex = p["extrapolation"]
    if not (isinstance(ex, bool) or (isinstance(ex, str) and ex == "auto")):
        raise ValueError(f"extrapolation must be 'auto', True or False, got {ex!r}")
    check_finish(p["finish"])  # the values of solve's finish
    check_alphas(p.get("alpha_W", 0.0), p.get("alpha_H", "same"), p.get("l1_ratio", 0.0))


def _check_factor(F, shape, name, backend, dtype, factor=1.0):
    """A user's start factor on the backend in ``dtype``, times ``factor`` (a power of
    two): refused, as scikit-learn does, if missing, of the wrong shape, non-finite,
    negative or all zero (the alternating updates cannot leave W = 0 or H = 0)."""
    if F is None:
        raise ValueError(f"init='custom' needs {name}")
    if is_sparse(F):
        F = F.toarray()
    if tuple(F.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {shape}, got {tuple(F.shape)}")
    host = F.get() if hasattr(F, "get") else np.asarray(F)
    if host.dtype.kind not in "biuf":
        raise TypeError(f"{name} must hold real numbers, got dtype {host.dtype}")
    if not np.isfinite(host).all():
        raise ValueError(f"{name} contains NaN or Inf")
    if (host < 0).any():
        raise ValueError(f"{name} must be nonnegative (init='custom')")
    if host.size and not host.any():
        raise ValueError(f"{name} passed to NMF is full of zeros (init='custom')")
    F = backend.asarray(F, dtype)
    return F * factor if factor != 1.0 else F


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
    nonzeros: int  #: Y's nonzero entries (the same for Y dense or sparse)
    sparse: bool
    norm2: float  #: ||Y||_F^2
    tag: str  #: appended to the progress bar's description

    def session(self):
        """Context manager around the whole loop."""

    def h_step_products(self, wt):
        """(G, P) = (W'W, W'Y) of the H-step, for W' (k x m)."""

    def w_step_products(self, h):
        """(G_h, P_w) = (HH', HY') of the W-step, for H (k x d)."""

    def objective(self, wt, h, g_h, p_w):
        """1/2 ||Y - WH||^2 (a float) from W', H and the W-step's products."""

    def solve_half_step(self, solver, g, p, x, max_inner, **opts):
        """(X_new, inner iterations): the half-step from X (k x c), as ``ns.half_step``."""

    def extrapolate(self, ex, new, old):
        """``ex.point(new, old)``: max(new + beta (new - old), 0), no component zeroed."""

    def scale_rows(self, x, s):
        """X with row t multiplied by s[t] (s a host array of powers of two)."""

    def describe(self):
        """Entries of the loop's info dict: at least ``"backend"``."""


class InMemory:
    """The :class:`Strategy` of a Y in memory (:class:`Data`) on one backend."""

    tag = ""

    def __init__(self, data, backend):
        self.data = data
        self.backend = backend
        self.shape, self.nnz, self.sparse = data.shape, data.nnz, data.sparse
        self.nonzeros = data.nonzeros
        self.norm2 = data.norm2

    def session(self):
        # CPU: one BLAS thread for the whole run, all solvers alike
        return self.backend.limit_host_blas()

    def h_step_products(self, wt):
        return wt @ wt.T, self.data.wt_y(wt.T)

    def w_step_products(self, h):
        return h @ h.T, self.data.h_yt(h)

    def objective(self, wt, h, g_h, p_w):
        return stable_objective(self.data, wt, h, g_h, p_w)

    def solve_half_step(self, solver, g, p, x, max_inner, **opts):
        return ns.half_step(solver, self.backend, g, p, x, max_inner=max_inner, **opts)

    def extrapolate(self, ex, new, old):
        return ex.point(new, old)

    def scale_rows(self, x, s):
        return x * self.backend.xp.asarray(s, dtype=x.dtype)[:, None]

    def describe(self):
        return {"backend": self.backend.name}


def run(data, backend, W, H, p, *, update_w=True, update_h=True, reg=None):
    """Alternating NNLS from (W, H) on the backend.  Returns W, H and an info dict."""
    wt, H, info = alternate(
        InMemory(data, backend), W.T, H, p, update_w=update_w, update_h=update_h, reg=reg
    )
    return wt.T, H, info


def balance_factors(gram_w, gram_h):
    """Powers of two s (k,) that bring ||s_t W_t|| and ||H_t / s_t|| together for the
    components whose norm ratio left [1/BALANCE_LIMIT, BALANCE_LIMIT], or None if there
    is none.  The squared norms are the diagonals of the Grams W'W and HH' the half-steps
    formed anyway (of the iterates they started from: a drift is slow, a stale ratio
    finds it)."""
    nw = np.asarray(to_host(gram_w.diagonal()), dtype=np.float64)
    nh = np.asarray(to_host(gram_h.diagonal()), dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ratio = np.sqrt(nh / nw)  # ||H_t|| / ||W_t||
    bad = (nw > 0) & (nh > 0) & np.isfinite(ratio)
    bad &= (ratio > BALANCE_LIMIT) | (ratio < 1.0 / BALANCE_LIMIT)
    if not bad.any():
        return None
    s = np.ones(len(nw))
    s[bad] = np.exp2(np.round(0.5 * np.log2(ratio[bad])))
    return s


def alternate(strategy, wt, h, p, *, update_w=True, update_h=True, reg=None):
    """NMF's outer loop from (W', H) for any :class:`Strategy`.

    ``reg`` (:class:`~msm_gpu.factorization.regularization.Regularization`) adds
    scikit-learn's l1/l2 penalties to both half-steps and to the objective.  Returns the
    best pair (W', H) met and an info dict."""
    m, d = strategy.shape
    k = h.shape[0]
    reg = reg if reg is not None else Regularization()
    if p["inner_iter"] == "auto":
        nnz = cost_nnz((m, d), strategy.nonzeros)
        inner_h = inner_w = ns.balanced_inner_iter(m, d, k, nnz)
    else:
        inner_h = inner_w = int(p["inner_iter"])
    opts = {"inner_tol": p["inner_tol"], "omega": p["omega"], "theta": p["theta"]}
    opts["finish"] = finish_half_steps(p["finish"], strategy.nonzeros / (m * d))
    solver = p["solver"]
    tol, max_iter, time_limit = p["tol"], p["max_iter"], p["time_limit"]
    # rescaling a component changes its share of the penalty: balance only without one
    balance = not reg.active

    start = time.perf_counter()
    g_h, p_w = strategy.w_step_products(h)
    f = strategy.objective(wt, h, g_h, p_w) + reg.value(wt, h)
    history = [(0.0, f)]
    inner_counts = []
    message = f"reached max_iter = {max_iter}"
    converged = False
    n_iter = 0
    rescaled = 0
    # extrapolation between outer iterations (Ang and Gillis 2019, extrapolation.py):
    # the objective of each iteration is that of the pair (W_new, H_hat) the W-step used,
    # and the best such pair is returned
    # with an l1 penalty, no extrapolation in the first iteration (extrapolation.py)
    warmup = 2 if reg.l1_w > 0 or reg.l1_h > 0 else 0
    ex = Extrapolation(warmup=warmup) if use_extrapolation(p) else None
    h_prev, w_prev = h, wt
    best = (f, wt, h) if math.isfinite(f) else (math.inf, wt, h)
    desc = f"NMF ({solver}, k={k}{strategy.tag})"
    with strategy.session(), _progress(p["verbose"], max_iter, desc, f) as bar:
        while n_iter < max_iter:
            n_h = n_w = 0
            h_new, w_new = h, wt
            if update_h:
                g_w_raw, p_h = strategy.h_step_products(wt)
                g, p_h = reg.gram_form(g_w_raw, p_h, "H")
                h_new, n_h = strategy.solve_half_step(solver, g, p_h, h, inner_h, **opts)
            h_hat = (
                strategy.extrapolate(ex, h_new, h_prev) if ex is not None and update_h else h_new
            )
            g_h, p_w = strategy.w_step_products(h_hat)
            if update_w:
                g_w, p_ww = reg.gram_form(g_h, p_w, "W")
                w_new, n_w = strategy.solve_half_step(solver, g_w, p_ww, wt, inner_w, **opts)
            n_iter += 1
            f_prev, f = f, strategy.objective(w_new, h_hat, g_h, p_w) + reg.value(w_new, h_hat)
            finite = math.isfinite(f)
            restarted = False
            if ex is None:
                wt, h = w_new, h_new
            elif finite and ex.update(f, f_prev):
                wt = strategy.extrapolate(ex, w_new, w_prev) if update_w else w_new
                h = h_hat
            else:  # restart from the plain iterates
                if not finite:
                    ex.update(math.inf, f_prev)
                wt, h = w_new, h_new
                restarted = True
            h_prev, w_prev = h_new, w_new
            if finite and f < best[0]:
                best = (f, w_new, h_hat)
            history.append((time.perf_counter() - start, f))
            inner_counts.append((n_h, n_w))
            if bar is not None:
                bar.update(1)
                bar.set_postfix(objective=f"{f:.6g}")
            if not finite:
                message = (
                    f"stopped: the objective is not finite ({f}) after {n_iter} iterations; "
                    "the best finite pair is returned"
                )
                break
            if tol > 0 and not restarted and math.isfinite(f_prev) and f_prev - f <= tol * f_prev:
                message = f"converged: relative decrease of the objective <= tol = {tol:g}"
                converged = True
                break
            if time_limit is not None and time.perf_counter() - start >= time_limit:
                message = f"reached time_limit = {time_limit:g} s"
                break
            if balance and update_w and update_h and n_iter % BALANCE_EVERY == 0:
                s = balance_factors(g_w_raw, g_h)
                if s is not None:  # the same rescaling of every iterate kept
                    wt, w_prev = strategy.scale_rows(wt, s), strategy.scale_rows(w_prev, s)
                    h, h_prev = strategy.scale_rows(h, 1 / s), strategy.scale_rows(h_prev, 1 / s)
                    rescaled += 1
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
        "rescaled": rescaled,
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


def n_components(params, m, d, H=None):
    """k: ``n_components``; None or "auto" mean d, except that "auto" takes k from a
    custom H (as scikit-learn).  Warns when k > min(m, d)."""
    k = params["n_components"]
    if isinstance(k, str) and k == "auto":
        k = H.shape[0] if H is not None and len(H.shape) == 2 else None
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
    """Checks, then (Y as given, Data (Y / 2^e), backend, W0, H0) with the starting
    factors in Data's units (W / 2^(e/2), H / 2^(e/2))."""
    check_params(params)
    Y = check_data(Y)
    m, d = Y.shape
    custom = params["init"] == "custom"
    k = n_components(params, m, d, H if custom else None)
    backend = get_backend(params["backend"], Y)
    if params["solver"] in ns.CPU_ONLY and backend.name != "cpu":
        raise ValueError(
            f"solver={params['solver']!r} runs on the CPU only; use backend='cpu' or one "
            "of 'msm', 'hals', 'pg', 'apg' on the GPU"
        )
    dtype = dtype_of(Y)
    data = Data(Y, backend, dtype, scale_exponent(Y))
    W0, H0 = start_factors(Y, data.y, params, k, backend, dtype, data.exponent, W, H)
    return Y, data, backend, W0, H0


def start_factors(Y, scaled, params, k, backend, dtype, exponent, W=None, H=None):
    """(W0, H0) on the backend in ``dtype`` and in the units of Y / 2^e: the user's
    (``init="custom"``, checked) or scikit-learn's init of ``scaled`` = Y / 2^e.

    Every loss starts from Y / 2^e (max in [1/4, 4)): scikit-learn's NNDSVDa fills its
    zeros with mean(Y), not with a factor's scale sqrt(mean(Y) / k), so from Y itself a
    start at Y * 2^26 put W0 H0 far above Y and the fit stopped 30-40 % above the error
    it reaches at scale 1 (Itakura-Saito at 1e5 never recovered).  From Y / 2^e it is
    scikit-learn's start where Y is of order one, and the same start scaled for Y * 4^j
    (NMF(Y * 4^j) is NMF(Y) scaled, exactly)."""
    m, d = Y.shape
    if params["init"] == "custom":
        half = 2.0 ** (-(exponent // 2))
        W0 = _check_factor(W, (m, k), "W", backend, dtype, half)
        H0 = _check_factor(H, (k, d), "H", backend, dtype, half)
        return W0, H0
    if W is not None or H is not None:
        warn_factors_ignored(stacklevel=6)
    W0, H0 = nmf_init.initialize(scaled, k, params["init"], params["random_state"])
    return backend.asarray(W0, dtype), backend.asarray(H0, dtype)


_ACTIVE_SET_APPLIES = {}


def exact_nnls(backend, g, p, x0):
    """The exact solution of min_{X >= 0} 1/2 tr(X'GX) - tr(X'P) (host, float64) from X0:
    the active set of :mod:`msm_gpu.solvers.nnls_columns` where it applies (k <=
    ``ACTIVE_SET_MAX_N``; 10-50x faster than bpp on digits and china.jpg's W-steps,
    warm or cold), block principal pivoting above."""
    key = (int(g.shape[0]), bool(backend.on_host))
    if key not in _ACTIVE_SET_APPLIES:  # (asking builds a penalty: ~40 us a call)
        _ACTIVE_SET_APPLIES[key] = ns.finish_applies(backend, g)
    if _ACTIVE_SET_APPLIES[key]:
        return ns.active_set_finish(g, p, x0)
    return ns.half_step("bpp", backend, g, p, x0, max_inner=1, inner_tol=0.0)[0]


def exact_w_step(data, backend, h, p, reg=None, start=None, products=False):
    """W' (k x m) minimising 1/2 ||Y - WH||^2 + W's penalty for the given H, exactly.

    The last half-step of a fit and ``transform`` both call it, so that ``fit_transform(Y)``
    and ``fit(Y).transform(Y)`` agree.  On the CPU: the exact NNLS on G = HH'
    and P = HY' formed in float64 (float32 data too: the NNLS of the data's own numbers;
    :func:`exact_nnls`), the result in the working dtype.  On CUDA: the model's
    iterative solver (``"msm"`` for bpp/cgd) with up to ``max(max_iter, 2000)`` sweeps
    and inner_tol 1e-9.
    ``products``: also return G_h = HH' and P_w = HY' (without the penalty; float64 on
    the CPU) for the objective.
    """
    reg = reg if reg is not None else Regularization()
    xp = backend.xp
    if backend.on_host:
        h64 = np.asarray(h, dtype=np.float64)
        g_h, p_w = h64 @ h64.T, np.asarray(data.h_yt(h64), np.float64)
        g, p_reg = reg.gram_form(g_h, p_w, "W")
        x0 = np.zeros_like(p_w) if start is None else np.asarray(start, np.float64)
        wt = np.ascontiguousarray(exact_nnls(backend, g, p_reg, x0), dtype=data.dtype)
        return (wt, g_h, p_w) if products else wt
    g_h, p_w = h @ h.T, data.h_yt(h)
    g, p_reg = reg.gram_form(g_h, p_w, "W")
    solver = "msm" if p["solver"] in ns.CPU_ONLY else p["solver"]
    solver = solver if solver in ns.SOLVERS else "msm"
    x0 = xp.zeros_like(p_w) if start is None else start
    wt, _ = ns.half_step(
        solver,
        backend,
        g,
        p_reg,
        x0,
        max_inner=max(int(p["max_iter"]), 2000),
        inner_tol=1e-9,
        omega=p["omega"],
        theta=p["theta"],
    )
    return (wt, g_h, p_w) if products else wt


def user_units(x, exponent):
    """A factor in the user's units: ``x * 2^(exponent / 2)`` (exact; x itself if e = 0)."""
    return x * (2.0 ** (exponent // 2)) if exponent else x


def history_in_user_units(history, exponent, beta=2.0):
    """The (seconds, objective) rows with the objective times 2^(beta e): the loss of
    Y / 2^e scaled back to Y's (overflow gives inf, without a warning)."""
    if exponent:
        history = history.copy()
        with np.errstate(over="ignore"):
            history[:, 1] = history[:, 1] * np.exp2(beta * exponent)
    return history


def power_of_two_times(x, n):
    """``x * 2^n`` as a float (inf where that overflows, without an error); ``n`` may be
    a half-integer (beta-divergence units: 2^(beta e / 2))."""
    if not n:
        return float(x)
    with np.errstate(over="ignore"):
        if float(n).is_integer():
            return float(np.ldexp(np.float64(x), int(n)))
        return float(np.float64(x) * np.exp2(n))
