"""MSM sweeps in the design form: the paper's sweep read through the columns of C.

For least squares A = C'C and r = -C'd, so row j's 1-D problem (eq. (9)) needs
w_j = (A x)_j + r_j - B_jj x_j = c_j'(C x - d) - B_jj x_j with x updated in place: one
pass over column j of C against the residual C x - d, kept current after each step
(res += c_j (z_j - x_j)).  A sweep costs O(nnz(C)) per right-hand side and nothing n x n
is formed.  With omega = 1 and theta = 0 this is cyclic coordinate descent, the method of
scikit-learn's and celer's Lasso.

On the exact finish's road the sweeps are a warm start: first on a working set (the
nonzeros and the rows farthest from their 1-D optimum, grown while rows outside it still
violate: celer's and skglm's strategy for the Lasso), so they find the support cheaply,
and the active set (:mod:`msm_gpu.solvers.pwl_active_set`) then factorises only its free
variables.  Where the support is so large that factorising it costs more than sweeping to
the tolerance (a sparse C with thousands of free variables), the sweeps go on to the end
and the KKT residual decides (:func:`design_sweeps`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba.extending import overload

from ..backends.cpu.jit import njit
from ..backends.cpu.kernels import h_scalar, prox_scalar
from ..backends.cpu.threads import column_ranges, run_ranges, sweep_threads, thread_cap
from .anderson import design_history, forget, record_and_extrapolate
from .nnls_columns import FAST
from .pwl_active_set import _move, form_helpers

#: Sweeps every column gets before the choice between the active set and more sweeps.
WARM_SWEEPS = 10

#: The active set is taken when factorising the free variables (f^3 / 3 flops) costs at
#: most this many sweeps (2 nnz(C) flops each, the gradient and the residual update).
FACTOR_IN_SWEEPS = 200

#: Sweeps between the full sweeps where the rate of convergence is measured
#: (:func:`_sweep_range`), and the windows it spans: over several, from the lowest step
#: so far, because an extrapolation's jump makes one window's ratio noisy.
RATE_WINDOW = 10
RATE_SPAN = 4

#: Most sweeps a column gets in all (then the active set takes over from where it is).
MAX_SWEEPS = 100_000

#: The relative step at which the exact road's sweeps stop where no active set is to
#: follow them (too many free variables to factorise): their point is then the answer,
#: and the user's tol (a KKT residual of 1e-6) left objective gaps of 1e-11 to 3e-8.
ALONE_TOL = 1e-12

#: The working-set phase of the exact road (:func:`_working_set_phase`): its first size,
#: its most rounds, and the most sweeps on one set.
WS_START = 64
WS_ROUNDS = 12
WS_SWEEPS = 20
#: Quarter-octave bins of the violations that choose the working set (down to 2^-64 of
#: the largest; smaller ones share the last bin).
WS_BINS = 257


def _sweep(src, res, x, diag, b_diag, code, params, zero_r, rows, n_rows):
    """One MSM sweep (eq. (9)) on one column over rows[:n_rows] in order; returns
    (||step||^2, ||x||^2, the change of F).  Row j's step d changes F by
    d (g_j + A_jj d / 2) + h(z) - h(x_j), g = A x + r before the step: the objective
    history costs nothing extra."""


def _violations(src, res, x, b_diag, code, params, zero_r, scores):
    """scores[j] = sqrt(B_jj) |prox step of row j|: how far row j is from its 1-D optimum
    (zero exactly where the KKT conditions hold for it).  One pass over C; returns the
    largest, and the largest |g_j| (g = A x + r; at x = 0, max |C'd|: the active set's
    scale of the gradient)."""


# Overloads on the form of ``src``: the row's gradient and residual update are inlined
# (pwl_active_set.form_helpers), not called once per row.


@overload(_sweep, jit_options={"fastmath": FAST})
def _ol_sweep(src, res, x, diag, b_diag, code, params, zero_r, rows, n_rows):
    gradient, move, _ = form_helpers(src)

    def sweep(src, res, x, diag, b_diag, code, params, zero_r, rows, n_rows):
        step2 = 0.0
        size2 = 0.0
        df = 0.0
        for a in range(n_rows):
            j = rows[a]
            b = b_diag[j]
            if not b > 0.0:  # no curvature (a zero column of C, theta = 0): x_j stays
                continue
            xj = x[j]
            g = gradient(src, x, res, zero_r, j)
            lam, lb, ub, p = params[j, 0], params[j, 1], params[j, 2], params[j, 3]
            z, hz = prox_scalar(code, g - b * xj, b, lam, lb, ub, p)
            delta = z - xj
            if delta != 0.0:
                move(src, res, j, delta)
                x[j] = z
                df += delta * (g + 0.5 * diag[j] * delta) + hz - h_scalar(code, xj, lam, lb, ub, p)
            step2 += delta * delta
            size2 += z * z
        return step2, size2, df

    return sweep


@overload(_violations, jit_options={"fastmath": FAST})
def _ol_violations(src, res, x, b_diag, code, params, zero_r, scores):
    gradient = form_helpers(src)[0]

    def violations(src, res, x, b_diag, code, params, zero_r, scores):
        top = 0.0
        g_top = 0.0
        for j in range(x.shape[0]):
            b = b_diag[j]
            scores[j] = 0.0
            if not b > 0.0:  # a zero column (theta = 0): g_j = 0
                continue
            g = gradient(src, x, res, zero_r, j)
            g_top = max(g_top, abs(g))
            z, _ = prox_scalar(
                code, g - b * x[j], b, params[j, 0], params[j, 1], params[j, 2], params[j, 3]
            )
            scores[j] = abs(z - x[j]) * math.sqrt(b)
            top = max(top, scores[j])
        return top, g_top

    return violations


@njit(nogil=True)
def _working_set(x, scores, size, rows, counts):
    """rows[:k] = the nonzeros of x and the largest violations among the others (about
    ``size`` rows in all: the threshold is the edge of a quarter-octave bin, so a few more
    may come), in increasing order; returns k.  A histogram, not a sort: O(n), and no
    NumPy sort to compile (seconds on a cold cache)."""
    n = x.shape[0]
    n_in = 0
    top = 0.0
    for j in range(n):
        if x[j] != 0.0:
            n_in += 1
        else:
            top = max(top, scores[j])
    take = size - n_in
    threshold = math.inf
    if take > 0 and top > 0.0:
        n_bins = counts.shape[0]
        counts[:] = 0
        for j in range(n):
            if x[j] == 0.0 and scores[j] > 0.0:
                counts[min(int(-4.0 * math.log2(scores[j] / top)), n_bins - 1)] += 1
        seen = 0
        threshold = 0.0
        for b in range(n_bins - 1):
            seen += counts[b]
            if seen >= take:
                threshold = top * 2.0 ** (-(b + 1) / 4.0)
                break
    k = 0
    for j in range(n):
        if x[j] != 0.0 or (scores[j] > 0.0 and scores[j] >= threshold):
            rows[k] = j
            k += 1
    return k


@njit(nogil=True, fastmath=FAST)
def _working_set_phase(src, res, x, diag, b_diag, code, params, zero_r, tol, work, first):
    """Sweeps on a growing working set (as celer and skglm do for the Lasso): the
    nonzeros and the rows farthest from their 1-D optimum, swept until the step meets
    ``tol``; then one pass over all rows, and the set doubles while rows outside it
    still violate (by more than ``tol`` times ``first``, the largest violation of the
    first pass when ``first`` < 0).  Returns (sweeps, the change of F, whether no row
    outside the set violates, ``first``, the largest |g_j| of the first pass)."""
    rows, scores, counts = work
    n = x.shape[0]
    size = WS_START
    sweeps = 0
    df = 0.0
    g_first = -1.0
    for _ in range(WS_ROUNDS):
        top, g_top = _violations(src, res, x, b_diag, code, params, zero_r, scores)
        if first < 0.0:
            first = top
        if g_first < 0.0:
            g_first = g_top
        if top <= tol * first or top == 0.0:
            return sweeps, df, True, first, g_first
        k = _working_set(x, scores, size, rows, counts)
        if k >= n:  # the set is everything: the full sweeps take over
            return sweeps, df, False, first, g_first
        for _ in range(WS_SWEEPS):
            step2, size2, d = _sweep(src, res, x, diag, b_diag, code, params, zero_r, rows, k)
            sweeps += 1
            df += d
            if math.sqrt(step2) <= tol * math.sqrt(size2) or not math.isfinite(d):
                break
        size = 2 * max(size, k)
    return sweeps, df, False, first, g_first


@njit(nogil=True)
def _nonzero_rows(x, rows, n_rows):
    """rows[:k] = the nonzeros of x, in order; returns (k, whether rows[:n_rows] held
    other rows before)."""
    k = 0
    changed = False
    for j in range(x.shape[0]):
        if x[j] != 0.0:
            changed = changed or k >= n_rows or rows[k] != j
            rows[k] = j
            k += 1
    return k, changed or k != n_rows


@njit(nogil=True)
def _free_count(x, params):
    """Variables strictly inside their bounds and away from the kink at 0: the active
    set's free variables if it started here."""
    f = 0
    for j in range(x.shape[0]):
        if x[j] != 0.0 and params[j, 1] < x[j] < params[j, 2]:
            f += 1
    return f


def free_counts(X, penalty):
    """:func:`_free_count` of every column of X (n, c) for the penalty's table."""
    if X.shape[1] == 0:  # no table (n x 4) to build for no column
        return np.zeros(0, dtype=int)
    params = np.ascontiguousarray(penalty.table(X.shape[0]), dtype=np.float64)
    cols = range(X.shape[1])
    return np.array([_free_count(np.ascontiguousarray(X[:, k]), params) for k in cols], dtype=int)


@njit(nogil=True)
def _factor_in_sweeps(x, params, m, nnz):
    """The active set's factor from x (f^3 / 3 flops, f the free variables, at most m:
    the factor's rank) counted in sweeps (2 nnz(C) flops)."""
    f = float(min(_free_count(x, params), m))
    return f * f * f / 3.0 / (2.0 * max(nnz, 1.0))  # (a C with no entry: no free variable)


@njit(nogil=True, fastmath=FAST)
def _sweep_range(
    src, D, X, diag, b_diag, code, params, settings, floor, fun, history, c0, c1, out, grad_max
):
    """Columns c0..c1-1 of X (in place).

    ``settings`` = (tol, nnz, warm, cap, working set, extrapolate): with the working set
    (the exact road), :func:`_working_set_phase` first, and no full sweep where it
    settles; with ``extrapolate``, Anderson's extrapolation after every
    :data:`msm_gpu.solvers.anderson.DEPTH` + 1 sweeps on one set of nonzeros; then
    ``warm`` full sweeps, and more (up to ``cap`` in all) only where the free variables
    are too many to factorise, while the rate of convergence promises ``tol`` within
    them (with the working set, :data:`ALONE_TOL`: no finish follows).  A column stops
    when ||x_{k+1} - x_k|| <= tol max(||x_{k+1}||, floor[col]).  ``fun`` holds F at the
    start and gets F at the end; ``history[k]`` gains each column's F after min(k, its
    sweeps).  ``out[col]`` = (sweeps,
    met tol, what finishes the column: 0 nothing, 1 the active set, 2 the projected
    Newton-CG, its face being too large to factorise); ``grad_max[col]`` = max |C'd|
    where the working set's first pass found it (a start at 0), else -1.
    """
    tol, nnz = settings[0], settings[1]
    warm, cap = int(settings[2]), int(settings[3])
    use_ws = settings[4] != 0.0
    extrapolate = settings[5] != 0.0
    m, n = D.shape[0], X.shape[0]
    res = np.empty(m)
    x = np.empty(n)
    zero_r = np.zeros(n)
    every = np.arange(n)
    work = (np.empty(n, dtype=np.int64), np.empty(n), np.zeros(WS_BINS, dtype=np.int64))
    history_ws = design_history(n, m)
    steps = np.empty(RATE_SPAN)
    for col in range(c0, c1):
        for t in range(m):
            res[t] = -D[t, col]
        for j in range(n):
            x[j] = 0.0
        cold = True
        for j in range(n):
            if X[j, col] != 0.0:
                _move(src, res, j, X[j, col])
                x[j] = X[j, col]
                cold = False
        grad_max[col] = -1.0
        f = fun[col]
        history[0] += f
        budget = warm
        k = 0
        done = False
        k_ws = 0
        first = -1.0  # the working set's first largest violation (its reference)
        if use_ws:
            k_ws, df, done, first, g_first = _working_set_phase(
                src, res, x, diag, b_diag, code, params, zero_r, tol, work, -1.0
            )
            if cold:  # its first pass read the gradient at 0: -C'd
                grad_max[col] = g_first
            f += df
            if done:
                budget = 0
        col_tol = tol
        in_sweeps = _factor_in_sweeps(x, params, m, nnz) if done else 0.0
        if in_sweeps > FACTOR_IN_SWEEPS:
            # settled on the working set, but no active set will follow: on to rounding,
            # on the working set again first
            col_tol = min(tol, ALONE_TOL)
            k_more, df, done, _, _ = _working_set_phase(
                src, res, x, diag, b_diag, code, params, zero_r, col_tol, work, first
            )
            k_ws += k_more
            f += df
            if not done:
                budget = max(warm, min(cap, int(in_sweeps)))
        # the lowest ||step|| so far, and its value at the last RATE_SPAN windows
        low = math.inf
        n_windows = 0
        rows = work[0]
        n_rows = n
        forget(history_ws)
        while k < budget:
            # on the exact road, between full sweeps (the warm ones, then every
            # RATE_WINDOW-th, where the step is measured) only the nonzeros: a zero the
            # last full sweep left at zero has a gradient that keeps it there, nearly
            full = not use_ws or k < warm or (k + 1 - warm) % RATE_WINDOW == 0
            if full:
                step2, size2, df = _sweep(src, res, x, diag, b_diag, code, params, zero_r, every, n)
                n_rows, changed = _nonzero_rows(x, rows, n_rows)
                if changed:
                    forget(history_ws)
            else:
                step2, size2, df = _sweep(
                    src, res, x, diag, b_diag, code, params, zero_r, rows, n_rows
                )
            k += 1
            f += df
            if extrapolate:
                f += record_and_extrapolate(src, res, x, rows, n_rows, code, params, history_ws)
            if k < history.shape[0]:
                history[k] += f
            if not (math.isfinite(step2) and math.isfinite(f)):
                break
            if not full:
                continue
            step, target = math.sqrt(step2), col_tol * max(math.sqrt(size2), floor[col])
            done = step <= target
            if done and use_ws and col_tol > ALONE_TOL:
                in_sweeps = _factor_in_sweeps(x, params, m, nnz)
                if in_sweeps > FACTOR_IN_SWEEPS:
                    # tol met, but the face is too large for the active set: no finish
                    # follows, so on to rounding (as from sweep ``warm`` below)
                    col_tol = ALONE_TOL
                    budget = max(budget, min(cap, int(in_sweeps)))
                    done = False
            if done:
                break
            if k == warm:
                in_sweeps = _factor_in_sweeps(x, params, m, nnz)
                if in_sweeps > FACTOR_IN_SWEEPS:  # the factor costs more: sweep on
                    budget = max(warm, min(cap, int(in_sweeps)))
                    if use_ws:  # no finish follows where they end: sweep to rounding
                        col_tol = min(tol, ALONE_TOL)
            if k >= warm and (k - warm) % RATE_WINDOW == 0:
                low = min(low, step)
                if k > warm:
                    # linear convergence at the rate seen: hand over early when tol is
                    # further away than the sweeps left (an ill-conditioned face)
                    span = min(n_windows, RATE_SPAN)
                    last = steps[(n_windows - span) % RATE_SPAN]
                    rate = (low / last) ** (1.0 / (span * RATE_WINDOW)) if last > 0.0 else 0.0
                    if rate >= 1.0 or math.log(target / step) / math.log(rate) > budget - k:
                        break
                steps[n_windows % RATE_SPAN] = low
                n_windows += 1
        for kk in range(min(k + 1, history.shape[0]), history.shape[0]):
            history[kk] += f
        for j in range(n):
            X[j, col] = x[j]
        fun[col] = f
        out[col, 0] = k + k_ws
        out[col, 1] = 1 if done else 0
        # a column that met tol with few free variables still gets the active set: it is
        # cheap there and exact to rounding
        many = _factor_in_sweeps(x, params, m, nnz) > FACTOR_IN_SWEEPS
        # a face too large to factorise goes to the projected Newton-CG (2)
        out[col, 2] = 0 if done and many else (2 if many else 1)


@dataclass
class Sweeps:
    """What :func:`design_sweeps` did, per column: ``n_iter`` sweeps, ``met_tol`` (the
    step criterion), ``to_finish`` (a finish should take it from here), ``large_face``
    (its face is too large to factorise: the projected Newton-CG of
    :mod:`msm_gpu.solvers.projected_newton` rather than the active set), ``fun`` (F at
    the end), ``history`` (the summed F after each sweep, ``cap + 1`` entries; on
    the working-set road only F at the start), and ``grad_max`` (max |C'd| where the
    working set's first pass read it from a start at 0, else -1: the finish's scale of
    the gradient without a pass over C of its own)."""

    n_iter: np.ndarray
    met_tol: np.ndarray
    to_finish: np.ndarray
    large_face: np.ndarray
    fun: np.ndarray
    history: np.ndarray
    grad_max: np.ndarray


def design_sweeps(
    source,
    D,
    X,
    diag,
    b_diag,
    penalty,
    tol,
    *,
    fun=None,
    floor=None,
    warm=WARM_SWEEPS,
    cap=MAX_SWEEPS,
    working_set=False,
    extrapolate=None,
    threads=None,
):
    """MSM sweeps on every column of X (in place), in the design form.

    Parameters
    ----------
    source : msm_gpu.solvers.pwl_active_set.DesignSource
        C diag(s).
    D : (m, c) float64 ndarray
    X : (n, c) float64 C-ordered ndarray
        Start, overwritten with the swept iterate (of y = x / s).
    diag, b_diag : (n,) ndarray
        A_jj of A = S C'C S, and B_jj = (A_jj + theta) / omega of the splitting
        (:mod:`msm_gpu.solvers.splitting`).
    penalty : msm_gpu.penalties.Penalty
        Of y (row-scaled); its table gives the per-row parameters.
    tol : float
        A column stops when ||y_{k+1} - y_k|| <= tol max(||y_{k+1}||, floor).
    fun : (c,) ndarray, optional
        F at the start per column (for the history; zeros if not given).
    floor : (c,) ndarray, optional
        The stopping rule's floor per column (zeros by default).
    warm, cap : int
        Sweeps every column gets (unless it meets ``tol`` first), and the most it gets
        where its free variables are too many to factorise.  ``warm = cap = max_iter``
        is the paper's plain MSM.
    working_set : bool
        Start with the working-set phase (:func:`_working_set_phase`): sweeps over the
        nonzeros and the worst rows only, the set grown while rows outside violate.  For
        the exact road, where the active set checks every row afterwards.
    extrapolate : bool, optional
        Anderson's extrapolation of the sweeps on the nonzeros
        (:mod:`msm_gpu.solvers.anderson`), kept only where it lowers F.  Default: with
        the working set (a warm start: the iterates are not the paper's MSM's then).

    Returns
    -------
    Sweeps
    """
    D = np.ascontiguousarray(D, dtype=np.float64)
    m, c = D.shape
    n = X.shape[0]
    params = np.ascontiguousarray(penalty.table(n), dtype=np.float64)
    diag = np.ascontiguousarray(diag, dtype=np.float64)
    b_diag = np.ascontiguousarray(b_diag, dtype=np.float64)
    fun = np.zeros(c) if fun is None else np.array(fun, dtype=np.float64)
    floor = np.zeros(c) if floor is None else np.ascontiguousarray(floor, dtype=np.float64)
    extrapolate = working_set if extrapolate is None else extrapolate
    settings = np.array([tol, source.nnz, warm, cap, working_set, extrapolate], dtype=np.float64)
    out = np.zeros((c, 3), dtype=np.int64)
    grad_max = np.empty(c)
    n_threads = sweep_threads(4.0 * source.nnz * warm * c, c, thread_cap(threads))
    chunks, bounds = column_ranges(c, n_threads)
    # the history is kept for the plain road (warm = cap = max_iter); the exact road
    # reports F at its start and end only
    history = np.zeros((chunks, 1 if working_set else max(warm, cap) + 1))

    def kernel(k):
        _sweep_range(
            source.src,
            D,
            X,
            diag,
            b_diag,
            penalty.code,
            params,
            settings,
            floor,
            fun,
            history[k],
            bounds[k],
            bounds[k + 1],
            out,
            grad_max,
        )

    if c:
        run_ranges(kernel, chunks, n_threads)
    return Sweeps(
        n_iter=out[:, 0].copy(),
        met_tol=out[:, 1] == 1,
        to_finish=out[:, 2] != 0,
        large_face=out[:, 2] == 2,
        fun=fun,
        history=history.sum(axis=0),
        grad_max=grad_max,
    )
