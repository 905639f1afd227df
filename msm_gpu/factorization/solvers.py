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

from ..arrays import aligned_copy, is_cupy, namespace, to_host
from ..backends.cpu.jit import njit
from ..backends.cpu.threads import serial_blas
from ..finish.face_solves import block_pivoting
from ..penalties import NonNeg

SOLVERS = ("msm", "hals", "pg", "apg", "bpp", "cgd")
CPU_ONLY = ("bpp", "cgd")

#: Default (relative) theta of the "msm" half-steps.  The paper's absolute theta = 0.01 is
#: about 1e-7 of mean(diag W'W) on pixel data, i.e. no damping at all; a relative 0.01
#: damps every 1-D step by 1 % and slowed the runs: ``benchmarks/bench_nmf.py`` protocol on
#: digits (k = 20), 12 starts (scikit-learn random init, seeds 0-11), MSM's time to
#: scikit-learn cd's 200-iteration objective / cd's time, median (starts within 0.5x):
#: theta = 0.01 0.60 (4/12), 0.003 0.49 (6/12), 0.001 0.40 (10/12), 1e-4 0.37 (9/12), 0
#: 0.31 (8/12; 9/12 in a second run); china.jpg (k = 30, 5 starts) 0.35 / 0.30 / 0.30
#: at 0.01 / 0.001 / 0; the sparse text matrix (finished half-steps) unchanged.  0.001
#: keeps a proximal term (a bounded 1-D step for an all-zero factor column) at no
#: measurable cost.
DEFAULT_THETA = 1e-3

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


def balanced_inner_iter(m, d, k, nnz, alpha=0.35, cap=100):
    """One inner budget for both half-steps of an outer iteration (``1 + alpha rho``).

    rho = 1 + (Gram cost of both half-steps) / (cost of one sweep of both):
    ``(m + d) k^2 + 2 nnz k`` against ``k (k + 1) (m + d)`` plus two
    :data:`SWEEP_OVERHEAD`.  :func:`auto_inner_iter` per half-step gave digits (k = 20)
    13 sweeps for H (64 columns) and 2 for W (1797 columns): H was solved almost
    exactly, W barely, and the run settled in a worse point (176278 after 500
    iterations vs 169396 for exact bpp from the same start).  With equal budgets and
    extrapolation, alpha = 0.35 (digits: 3, china.jpg k = 30: 6, text k = 40: 2) reached
    scikit-learn cd's 200-iteration objective on every start tried
    (``benchmarks/bench_nmf.py --target``).

    Returns
    -------
    int in [1, cap]
    """
    gram = float(m + d) * k * k + 2.0 * float(nnz) * k
    sweep = float(k) * (k + 1) * (m + d) + 2.0 * SWEEP_OVERHEAD
    rho = 1.0 + gram / sweep
    return int(max(1, min(cap, math.floor(1.0 + alpha * rho))))


def _fro2(xp, d):
    return float(xp.sum(d * d))


class InnerRule:
    """The inner stopping rule of an NMF half-step, shared by memory and Dask: stop once a
    sweep's squared step is at most ``inner_tol**2`` times the first sweep's (at once if
    the first step is zero)."""

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

    ``theta`` is relative to the scale of G: the proximal term added to B's diagonal is
    ``theta * mean(diag G)`` (paper, eq. (4), with theta in units of G).  An absolute
    theta = 0.01 is negligible against W'W on pixel data (entries ~ 1e5 on digits) and
    dominates it on data scaled to [0, 1e-3]; the relative one makes the iterates of
    ``NMF(c Y)`` those of ``NMF(Y)`` scaled, for every c > 0.  ``theta = 0`` (HALS) with
    an all-zero factor column (G_jj = 0) gets the tiny positive theta of
    :func:`msm_gpu.solvers.splitting.guarded_theta`.

    On the CPU the backend picks the sweep's threads from its work (one thread for the
    half-steps of digits, china.jpg and the text matrix of ``bench_nmf.py --target``).

    Returns
    -------
    X_new : (k, c) backend array
    n_inner : int
    """
    if backend.on_host and _one_thread_sweeps(G, X):
        return _msm_host_serial(G, P, X, omega, theta, max_inner, inner_tol)
    state = msm_state(backend, G, P, X, omega=omega, theta=theta)
    return _inner_sweeps(state, backend.xp, max_inner, inner_tol)


def _one_thread_sweeps(G, X):
    """Whether the CPU would sweep (*) on one thread with the BLAS-panel kernel (no tiles):
    then :func:`_msm_host_serial` calls that kernel directly."""
    from ..backends.cpu.threads import sweep_threads, thread_cap
    from ..backends.cpu.tiles import use_tiles

    k, c = X.shape
    if use_tiles(k) or not (isinstance(G, np.ndarray) and isinstance(X, np.ndarray)):
        return False
    return sweep_threads(2.0 * k * k * c, c, thread_cap(None)) == 1


def _splitting(g_diag, omega, theta):
    """The splitting of (*) for a relative ``theta`` (see :func:`msm_backend`)."""
    from ..solvers.splitting import guarded_theta, make_splitting, relative_theta

    theta_abs = relative_theta(g_diag, theta)
    return make_splitting(g_diag, omega, guarded_theta(g_diag, theta_abs), True, check=False)


def _msm_host_serial(G, P, X, omega, theta, max_inner, inner_tol):
    """:func:`msm_backend` for a half-step the CPU sweeps on one thread: the compiled
    sweeps and the inner rule in one call (:mod:`.serial_sweeps`), without the sweep state
    (its thread plans, team and column retirement cost more than the sweeps of a small
    NMF's half-step, k x k by c)."""
    from ..backends.base import N_STATS, default_panel, fold_matrix
    from ..backends.cpu.threads import serial_numba_blas
    from ..solvers.splitting import b_diagonal, guarded_theta, relative_theta
    from .serial_sweeps import box_sweeps

    k, c = X.shape
    g_diag = np.diagonal(G).astype(np.float64)
    # the splitting of :func:`_splitting` (the same numbers), without the Splitting and
    # its convergence delta: a small half-step's sweeps take tens of microseconds
    theta_abs = guarded_theta(g_diag, relative_theta(g_diag, theta))
    b_diag = b_diagonal(g_diag, omega, theta_abs)
    if not np.all(b_diag > 0):  # make_splitting's error
        b_diag = _splitting(g_diag, omega, theta).b_diag
    panel = default_panel(k)
    afold = fold_matrix(G, g_diag - b_diag, panel)
    r = np.ascontiguousarray(-P, dtype=G.dtype)
    y = aligned_copy(X, G.dtype)
    stats = np.empty((N_STATS, c), dtype=np.float64)  # zeroed by every sweep
    table = _nonneg_table(k, G.dtype)
    b_diag = b_diag.astype(G.dtype)
    tol2 = float(inner_tol) ** 2
    with serial_numba_blas():
        n_inner = box_sweeps(afold, b_diag, table, r, y, panel, stats, max_inner, tol2)
    return y, n_inner


def msm_state(backend, G, P, X, *, omega, theta):
    """The MSM sweep state of (*) from X: what ``half_step("msm")`` sweeps, one sweep per
    ``state.sweep()`` (per-column statistics, ``STAT_DIFF2`` = squared step).  Used by the
    dask NMF (:mod:`msm_gpu.dask.nmf`), which needs every sweep's step norm."""
    from ..backends.base import default_panel

    k = X.shape[0]
    g_diag = np.asarray(to_host(backend.xp.diagonal(G)), dtype=np.float64)
    splitting = _splitting(g_diag, omega, theta)
    return backend.start(
        G, -P, X, splitting, _nonneg_table(k, X.dtype), NonNeg.code, default_panel(k)
    )


_TABLES = {}


def _nonneg_table(k, dtype):
    """``NonNeg().table(k, dtype)``, built once per (k, dtype): a half-step of a small NMF
    costs tens of microseconds, the table's checks ~6 (the kernels only read it)."""
    key = (int(k), np.dtype(dtype).str)
    if key not in _TABLES:
        _TABLES[key] = NonNeg().table(k, dtype)
    return _TABLES[key]


def _inner_sweeps(state, xp, max_inner, inner_tol):
    """Sweep until the inner rule stops; return (the iterate, sweeps done)."""
    from ..backends.base import STAT_DIFF2

    rule = InnerRule(inner_tol)
    n_inner = 0
    with state:
        while n_inner < max_inner:
            stats = state.sweep()
            n_inner += 1
            if rule.stop(float(xp.sum(stats[STAT_DIFF2]))):
                break
        return state.take_x(), n_inner


def finish_applies(backend, G):
    """The exact finish applies where ``solve`` would take NNLS to the active set (on the
    CPU, k <= ACTIVE_SET_MAX_N)."""
    from ..finish.columns import face_method

    return face_method("auto", G.shape[0], backend.on_host, NonNeg()) == "active_set"


def active_set_finish(G, P, X):
    """The exact NNLS solution from the MSM iterate X, in X's dtype (the active set of
    :mod:`msm_gpu.solvers.nnls_columns`).  A column it could not finish keeps the better of its
    last feasible point and X: after a singular start face the active set starts again
    from 0 and may stop above X."""
    from ..solvers.nnls_columns import nnls_active_set

    G, P, X = np.asarray(G), np.asarray(P), np.asarray(X)
    x_new, ok, _ = nnls_active_set(G, P, X)
    x_new = x_new.astype(X.dtype, copy=False)
    if not ok.all():
        bad = np.flatnonzero(~ok)
        xb, x0 = x_new[:, bad], X[:, bad]
        pb = P[:, bad]

        def f(x):  # 1/2 x'Gx - p'x per column
            return np.einsum("ij,ij->j", x, 0.5 * (G @ x) - pb)

        worse = bad[f(xb) > f(x0)]
        x_new[:, worse] = X[:, worse]
    return keep_free_components(G, X, x_new)


def keep_free_components(G, X, x_new):
    """``x_new`` with the rows t where G_tt = 0 taken from X (host arrays; x_new may be
    modified).

    G_tt = 0 is a component the other factor has all zero (W'W or HH' has a zero row and
    column, and P a zero row): any value of row t is optimal.  MSM, HALS and scikit-learn's
    coordinate descent leave it where it was; an exact solver returns 0, and with the other
    factor's zero row that loses the component for good (issue 49: 2 of 3 components of a
    30 x 12 fit, after an extrapolation zeroed a row of H).  Keeping X's row makes every
    solver do what the sweeps do."""
    free = np.flatnonzero(np.diagonal(G) == 0)
    if free.size:
        x_new[free] = np.asarray(X)[free]
    return x_new


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
    rule = InnerRule(inner_tol)
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
    rule = InnerRule(inner_tol)
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


# The passive-set solves (Kim & Park's grouping, one Cholesky per group or per column)
# live in msm_gpu/finish/face_solves.py, shared with the exact finish of msm_gpu.solve.


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
    k = P.shape[0]
    eps = 1e-12 * max(float(np.abs(G).max(initial=0.0)), 1e-300)
    Xn, _, rounds = block_pivoting(G, P, np.asarray(X) > 0, eps=eps, max_rounds=5 * k + 10)
    return keep_free_components(G, X, Xn), max(rounds, 1)


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
    with serial_blas():
        _cgd_kernel(g, pt, xt, int(max_inner) * k, float(inner_tol) ** 2, counts)
    n_inner = max(1, -(-int(counts.sum()) // max(c * k, 1)))
    return np.ascontiguousarray(xt.T, dtype=dtype), n_inner


# -- dispatch -------------------------------------------------------------------------


def half_step(
    solver, backend, G, P, X, *, max_inner, inner_tol, omega=1.0, theta=DEFAULT_THETA, finish=False
):
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
        Used by ``"msm"`` only; theta is relative to mean(diag G) (:func:`msm_backend`).
    finish : bool
        ``"msm"`` on the CPU: the sweeps' iterate is finished by the exact active set
        (:func:`msm_gpu.solvers.nnls_columns.nnls_active_set`) for k up to
        ``msm_gpu.finish.columns.ACTIVE_SET_MAX_N``.

    Returns
    -------
    X_new : (k, c) backend array, X_new >= 0
    n_inner : int
    """
    opts = {"max_inner": int(max_inner), "inner_tol": float(inner_tol)}
    if solver in ("msm", "hals"):
        if solver == "hals":
            omega, theta = 1.0, 0.0
        x_new, n_inner = msm_backend(backend, G, P, X, omega=omega, theta=theta, **opts)
        if solver == "msm" and finish and finish_applies(backend, G):
            x_new = active_set_finish(G, P, x_new)
        return x_new, n_inner
    if solver == "pg":
        return pg(G, P, X, **opts)
    if solver == "apg":
        return apg(G, P, X, **opts)
    if solver == "bpp":
        return bpp(G, P, X, **opts)
    if solver == "cgd":
        return cgd(G, P, X, **opts)
    raise ValueError(f"solver must be one of {', '.join(map(repr, SOLVERS))}, got {solver!r}")
