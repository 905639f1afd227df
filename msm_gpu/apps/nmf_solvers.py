"""Batched NNLS half-step solvers for alternating NMF.

Every solver here minimises, for fixed ``G`` (k x k, symmetric PSD) and ``P`` (k x c),

    min_{X >= 0}  1/2 tr(X' G X) - tr(X' P)                               (*)

one independent problem per column of X (k x c).  In NMF, the H-step has G = W'W,
P = W'Y, X = H; the W-step has G = HH', P = HY', X = W'.  In the notation of
:func:`msm_gpu.solve` this is A = G, R = -P with the ``NonNeg()`` penalty.

Solvers
-------
``"msm"``   Matrix Splitting Method sweeps (omega, theta) -- the library's own sweep,
            through the backend's ``SweepState`` (``Backend.start``; no per-call
            validation), on the CPU and on CUDA alike.
``"hals"``  MSM with omega = 1, theta = 0 (Gauss-Seidel = HALS, Cichocki & Phan 2009).
``"pg"``    Projected gradient with the Armijo rule along the projection arc (Lin 2007).
``"apg"``   Nesterov's optimal gradient with step 1/||G||_2 (NeNMF, Guan et al. 2012).
``"bpp"``   Block principal pivoting, exact (Kim & Park 2011).  NumPy, CPU only.
``"cgd"``   Greedy coordinate descent (Hsieh & Dhillon 2011).  Numba, CPU only.

msm, hals, pg and apg are array-API code (NumPy or CuPy arrays); bpp and cgd refuse
CuPy arrays with a clear error.

Inner stopping rule (shared by all iterative solvers, so that they compare fairly)
-----------------------------------------------------------------------------------
At most ``max_inner`` inner iterations; stop earlier after iteration l >= 2 once

    ||X_l - X_{l-1}||_F <= inner_tol * ||X_1 - X_0||_F

(Gillis & Glineur 2012, "Accelerated multiplicative updates and hierarchical ALS
algorithms for NMF").  One inner iteration is one MSM/HALS sweep, one projected or
accelerated gradient step, or, for cgd, k greedy coordinate updates per column (each
costs about one k x k x c product).  :func:`auto_inner_iter` gives the default budget.
"""

from __future__ import annotations

import math

import numpy as np
from numba import prange

from ..arrays import is_cupy, namespace, to_host
from ..backends.jit import njit  # cached outside site-packages
from ..backends.threads import blas_controller
from ..penalties import NonNeg

SOLVERS = ("msm", "hals", "pg", "apg", "bpp", "cgd")
CPU_ONLY = ("bpp", "cgd")

#: Fixed cost of one inner iteration (a kernel call and its bookkeeping, ~10-20 us),
#: in multiply-adds: on small problems it, not the k^2 c flops, bounds the sweep rate.
SWEEP_OVERHEAD = 1e5


def auto_inner_iter(n_rows, n_cols, k, nnz, alpha=0.5, cap=100):
    """Inner-iteration budget of one half-step (Gillis & Glineur 2012, rule ``1 + alpha rho``).

    The half-step that solves for the c = ``n_cols`` columns of X (k x c) from data
    with ``n_rows`` rows first forms its Gram products: G costs ``n_rows k^2`` and P
    costs ``nnz k`` (``nnz = n_rows n_cols`` for dense data).  One sweep costs about
    ``k (k + 1) c`` plus a fixed :data:`SWEEP_OVERHEAD`.  With rho = 1 + (Gram cost) /
    (sweep cost), ``1 + alpha rho`` sweeps spend at most about ``alpha`` times as long
    sweeping as forming the products.

    Returns
    -------
    int in [1, cap]
    """
    gram = float(n_rows) * k * k + float(nnz) * k
    sweep = float(k) * (k + 1) * n_cols + SWEEP_OVERHEAD
    rho = 1.0 + gram / sweep
    return int(max(1, min(cap, math.floor(1.0 + alpha * rho))))


def _fro2(xp, d):
    return float(xp.sum(d * d))


class _InnerRule:
    """The shared inner stopping rule on step norms."""

    def __init__(self, inner_tol):
        self.tol2 = float(inner_tol) ** 2
        self.first = None

    def stop(self, step2):
        if self.first is None:
            self.first = step2
            return step2 == 0.0
        return step2 <= self.tol2 * self.first


# -- MSM / HALS ---------------------------------------------------------------------


def msm_backend(backend, G, P, X, *, omega, theta, max_inner, inner_tol):
    """MSM sweeps on min 1/2 x'Gx - P'x, x >= 0, through the backend's sweep state.

    ``theta = 0`` (HALS) with an all-zero factor column (G_jj = 0) gets the tiny
    positive theta of :func:`msm_gpu.splitting.guarded_theta`.

    Returns
    -------
    X_new : (k, c) backend array
    n_inner : int
    """
    from ..backends.base import default_panel
    from ..splitting import guarded_theta, make_splitting

    k = G.shape[0]
    g_diag = np.asarray(to_host(backend.xp.diagonal(G)), dtype=np.float64)
    splitting = make_splitting(g_diag, omega, guarded_theta(g_diag, theta), True, check=False)
    pen = NonNeg()
    state = backend.start(G, -P, X, splitting, pen.table(k, X.dtype), pen.code, default_panel(k))
    return _inner_sweeps(state, backend.xp, max_inner, inner_tol)


def _inner_sweeps(state, xp, max_inner, inner_tol):
    """Sweep until the inner rule stops; return (the iterate, sweeps done)."""
    from ..backends.base import STAT_DIFF2

    rule = _InnerRule(inner_tol)
    n_inner = 0
    with state:
        while n_inner < max_inner:
            stats = state.sweep()
            n_inner += 1
            if rule.stop(float(xp.sum(stats[STAT_DIFF2]))):
                break
        return state.current_x(), n_inner


# -- projected gradient (Lin 2007) ----------------------------------------------------


def pg(G, P, X, *, max_inner, inner_tol, beta=0.1, sigma=0.01, max_search=20):
    """Projected gradient with Armijo's rule along the projection arc (Lin 2007, ``nlssubprob``).

    The step ``alpha`` starts at 1 in every call and is shrunk or grown by ``beta``
    until the sufficient-decrease condition ``(1 - sigma) g'd + 1/2 d'Gd < 0`` holds
    (grown for as long as it keeps holding), exactly as in Lin's code.
    """
    xp = namespace(X)
    alpha = 1.0
    grad = G @ X - P
    rule = _InnerRule(inner_tol)
    n_inner = 0
    while n_inner < max_inner:
        x_prev = X
        decrease = None
        for _ in range(max_search):
            xn = xp.maximum(X - alpha * grad, 0.0)
            d = xn - X
            gradd = float(xp.sum(grad * d))
            dqd = float(xp.sum((G @ d) * d))
            suff = (1.0 - sigma) * gradd + 0.5 * dqd < 0.0
            if decrease is None:
                decrease = not suff
                x_prev = X
            if decrease:
                if suff:
                    x_prev = xn
                    break
                alpha *= beta
            else:
                if not suff or bool(xp.all(x_prev == xn)):
                    break
                alpha /= beta
                x_prev = xn
        step2 = _fro2(xp, x_prev - X)
        X = x_prev
        n_inner += 1
        if rule.stop(step2):
            break
        grad = G @ X - P
    return X, n_inner


# -- accelerated projected gradient (NeNMF, Guan et al. 2012) --------------------------


def apg(G, P, X, *, max_inner, inner_tol):
    """Nesterov's optimal gradient method with constant step 1/L, L = ||G||_2 (NeNMF)."""
    xp = namespace(X)
    lip = float(np.linalg.norm(np.asarray(to_host(G), dtype=np.float64), 2))
    if lip <= 0.0:
        return xp.zeros_like(X), 1
    z = X
    t = 1.0
    rule = _InnerRule(inner_tol)
    n_inner = 0
    while n_inner < max_inner:
        xn = xp.maximum(z - (G @ z - P) / lip, 0.0)
        t_next = 0.5 * (1.0 + math.sqrt(4.0 * t * t + 1.0))
        d = xn - X
        z = xn + ((t - 1.0) / t_next) * d
        X, t = xn, t_next
        n_inner += 1
        if rule.stop(_fro2(xp, d)):
            break
    return X, n_inner


# -- block principal pivoting (Kim & Park 2011) -----------------------------------------


@njit(parallel=True)
def _solve_columns(G, P, passive, cols, X):
    """Per column c in ``cols``: X[F, c] = G[F, F]^{-1} P[F, c] (F = passive rows), 0 elsewhere.

    Cholesky of the passive block per column (O(|F|^3)); a pivot <= 0 (singular
    block) is replaced by a tiny positive one, i.e. a minimal ridge.
    """
    k = G.shape[0]
    scale = 0.0
    for i in range(k):
        scale = max(scale, G[i, i])
    tiny = 1e-13 * max(scale, 1e-300)
    for q in prange(cols.shape[0]):
        c = cols[q]
        idx = np.empty(k, dtype=np.int64)
        f = 0
        for i in range(k):
            X[i, c] = 0.0
            if passive[i, c]:
                idx[f] = i
                f += 1
        if f == 0:
            continue
        L = np.empty((f, f))
        for a in range(f):
            for b in range(a + 1):
                acc = G[idx[a], idx[b]]
                for t in range(b):
                    acc -= L[a, t] * L[b, t]
                if a == b:
                    L[a, a] = math.sqrt(acc) if acc > tiny else math.sqrt(tiny)
                else:
                    L[a, b] = acc / L[b, b]
        z = np.empty(f)
        for a in range(f):
            acc = P[idx[a], c]
            for t in range(a):
                acc -= L[a, t] * z[t]
            z[a] = acc / L[a, a]
        for a in range(f - 1, -1, -1):
            acc = z[a]
            for t in range(a + 1, f):
                acc -= L[t, a] * z[t]
            z[a] = acc / L[a, a]
        for a in range(f):
            X[idx[a], c] = z[a]


#: Columns sharing a passive set are solved together once a group has this many.
_GROUP_MIN = 8


def _solve_passive(G, P, passive):
    """X with X[~passive] = 0 and G[F, F] X[F, col] = P[F, col] on each passive set F.

    Large groups of columns with the same passive set are solved together (Kim &
    Park's grouping, one factorisation per group); the rest column by column in Numba.
    """
    import scipy.linalg

    k, c = P.shape
    X = np.zeros((k, c), dtype=np.float64)
    if c == 0:
        return X
    keys = np.packbits(passive, axis=0)
    _, inverse, counts = np.unique(keys, axis=1, return_inverse=True, return_counts=True)
    inverse = np.asarray(inverse).ravel()
    big = counts >= _GROUP_MIN
    singles = np.flatnonzero(~big[inverse])
    if singles.size:
        _solve_columns(
            np.ascontiguousarray(G, dtype=np.float64),
            np.ascontiguousarray(P, dtype=np.float64),
            np.ascontiguousarray(passive),
            singles.astype(np.int64),
            X,
        )
    for group in np.flatnonzero(big):
        cols = np.flatnonzero(inverse == group)
        rows = np.flatnonzero(passive[:, cols[0]])
        if rows.size == 0:
            continue
        sub = G[np.ix_(rows, rows)]
        rhs = P[np.ix_(rows, cols)]
        try:
            sol = scipy.linalg.solve(sub, rhs, assume_a="pos", check_finite=False)
        except (np.linalg.LinAlgError, scipy.linalg.LinAlgError):
            sol = np.linalg.lstsq(sub, rhs, rcond=None)[0]
        X[np.ix_(rows, cols)] = sol
    return X


def bpp(G, P, X, *, max_inner=None, inner_tol=None):
    """Exact NNLS by block principal pivoting with multiple right-hand sides (Kim & Park 2011).

    Warm-started from the passive set ``X > 0``.  CPU only (NumPy + SciPy).

    Returns
    -------
    X_new : ndarray (k, c)
    n_inner : int
        Pivoting rounds.
    """
    if is_cupy(G) or is_cupy(P) or is_cupy(X):
        raise ValueError("solver='bpp' runs on the CPU only (NumPy); use backend='cpu'")
    G = np.asarray(G)
    P = np.asarray(P)
    k, c = P.shape
    eps = 1e-12 * max(float(np.abs(G).max(initial=0.0)), 1e-300)
    passive = np.asarray(X) > 0
    Xn = _solve_passive(G, P, passive)
    Yg = G @ Xn - P
    p_bar = 3
    p_vec = np.full(c, p_bar)
    ninf = np.full(c, k + 1)
    non_opt = (Yg < -eps) & ~passive
    infea = (Xn < 0) & passive
    not_good = non_opt.sum(axis=0) + infea.sum(axis=0)
    not_opt_cols = not_good > 0
    rounds = 0
    while not_opt_cols.any() and rounds < 5 * k + 10:
        rounds += 1
        cols1 = not_opt_cols & (not_good < ninf)
        cols2 = not_opt_cols & (not_good >= ninf) & (p_vec >= 1)
        cols3 = np.flatnonzero(not_opt_cols & ~cols1 & ~cols2)
        if cols1.any():
            p_vec[cols1] = p_bar
            ninf[cols1] = not_good[cols1]
        if cols2.any():
            p_vec[cols2] -= 1
        for sel in (cols1, cols2):
            if sel.any():
                passive[:, sel] |= non_opt[:, sel]
                passive[:, sel] &= ~infea[:, sel]
        for col in cols3:  # backup rule: flip the last infeasible variable
            j = np.flatnonzero(non_opt[:, col] | infea[:, col]).max()
            passive[j, col] = not passive[j, col]
        idx = np.flatnonzero(not_opt_cols)
        Xs = _solve_passive(G, P[:, idx], passive[:, idx])
        Ys = G @ Xs - P[:, idx]
        Xs[np.abs(Xs) < 1e-12 * max(float(np.abs(Xs).max(initial=0.0)), 1e-300)] = 0.0
        Xn[:, idx] = Xs
        Yg[:, idx] = Ys
        non_opt = np.zeros_like(passive)
        infea = np.zeros_like(passive)
        non_opt[:, idx] = (Ys < -eps) & ~passive[:, idx]
        infea[:, idx] = (Xs < 0) & passive[:, idx]
        not_good = non_opt.sum(axis=0) + infea.sum(axis=0)
        not_opt_cols = not_good > 0
    np.maximum(Xn, 0.0, out=Xn)
    return Xn, max(rounds, 1)


# -- greedy coordinate descent (Hsieh & Dhillon 2011) -----------------------------------


@njit(parallel=True)
def _cgd_kernel(G, Pt, Xt, max_updates, ratio, counts):
    """Greedy coordinate descent on the rows of Xt (one NNLS problem per row)."""
    c, k = Xt.shape
    for col in prange(c):
        x = Xt[col]
        p = Pt[col]
        g = np.empty(k)
        s = np.empty(k)
        dec = np.empty(k)
        for i in range(k):  # gradient G x - p
            acc = -p[i]
            for j in range(k):
                acc += G[i, j] * x[j]
            g[i] = acc
        for i in range(k):
            if G[i, i] > 0.0:
                t = x[i] - g[i] / G[i, i]
                s[i] = (t if t > 0.0 else 0.0) - x[i]
                dec[i] = -(g[i] * s[i] + 0.5 * G[i, i] * s[i] * s[i])
            else:
                s[i] = 0.0
                dec[i] = 0.0
        first = -1.0
        n_up = 0
        while n_up < max_updates:
            best = 0
            for i in range(1, k):
                if dec[i] > dec[best]:
                    best = i
            if first < 0.0:
                first = dec[best]
            if dec[best] <= 0.0 or dec[best] < ratio * first:
                break
            step = s[best]
            x[best] += step
            n_up += 1
            for i in range(k):
                g[i] += G[i, best] * step
            for i in range(k):
                if G[i, i] > 0.0:
                    t = x[i] - g[i] / G[i, i]
                    s[i] = (t if t > 0.0 else 0.0) - x[i]
                    dec[i] = -(g[i] * s[i] + 0.5 * G[i, i] * s[i] * s[i])
        counts[col] = n_up


def cgd(G, P, X, *, max_inner, inner_tol):
    """Greedy coordinate descent (Hsieh & Dhillon 2011), Numba, parallel over columns.

    Per column, the coordinate with the largest objective decrease is updated exactly,
    then the gradient (O(k)) and all candidate decreases are refreshed.  Stops per
    column after ``max_inner * k`` updates, or once the best decrease falls below
    ``inner_tol**2`` times the first one (the decrease scales as the squared step).
    CPU only.

    Returns
    -------
    X_new : ndarray (k, c)
    n_inner : int
        Mean coordinate updates per column divided by k (rounded up), i.e. sweep
        equivalents.
    """
    if is_cupy(G) or is_cupy(P) or is_cupy(X):
        raise ValueError("solver='cgd' runs on the CPU only (Numba); use backend='cpu'")
    k, c = X.shape
    dtype = X.dtype
    xt = np.ascontiguousarray(np.asarray(X).T, dtype=np.float64)
    pt = np.ascontiguousarray(np.asarray(P).T, dtype=np.float64)
    g = np.ascontiguousarray(G, dtype=np.float64)
    counts = np.zeros(c, dtype=np.int64)
    with blas_controller().limit(limits=1, user_api="blas"):
        _cgd_kernel(g, pt, xt, int(max_inner) * k, float(inner_tol) ** 2, counts)
    n_inner = max(1, -(-int(counts.sum()) // max(c * k, 1)))
    return np.ascontiguousarray(xt.T, dtype=dtype), n_inner


# -- dispatch -------------------------------------------------------------------------


def half_step(solver, backend, G, P, X, *, max_inner, inner_tol, omega=1.0, theta=0.01):
    """Solve (*) approximately from the warm start X with the named solver.

    Parameters
    ----------
    solver : one of :data:`SOLVERS`
    backend : Backend
        Where the arrays live (``backends.get_backend``).
    G : (k, k) array, P : (k, c) array, X : (k, c) array
        Backend arrays; X is not modified.
    max_inner : int >= 1
    inner_tol : float >= 0
    omega, theta : floats
        Used by ``"msm"`` only.

    Returns
    -------
    X_new : (k, c) backend array, X_new >= 0
    n_inner : int
    """
    opts = {"max_inner": int(max_inner), "inner_tol": float(inner_tol)}
    if solver in ("msm", "hals"):
        if solver == "hals":
            omega, theta = 1.0, 0.0
        return msm_backend(backend, G, P, X, omega=omega, theta=theta, **opts)
    if solver == "pg":
        return pg(G, P, X, **opts)
    if solver == "apg":
        return apg(G, P, X, **opts)
    if solver == "bpp":
        return bpp(G, P, X, **opts)
    if solver == "cgd":
        return cgd(G, P, X, **opts)
    raise ValueError(f"solver must be one of {', '.join(map(repr, SOLVERS))}, got {solver!r}")
