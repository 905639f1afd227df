"""Exact batched NNLS on the host: Lawson & Hanson's active set, one column at a time.

``min_{x >= 0} 1/2 x'Gx - p'x`` for every column p of P (G symmetric PSD, n x n), in
Numba, column ranges on threads (the sweep's pool, :func:`msm_gpu.backends.cpu.threads.run_ranges`).
This is how :func:`msm_gpu.nnls` solves NNLS on the CPU for n up to
:data:`msm_gpu.finish.columns.ACTIVE_SET_MAX_N`.

Per column, from a feasible start x (its positive entries are the free set F):

1. z = argmin on the face (z_F = G_FF^{-1} p_F, z = 0 off F);
2. if some z_j <= 0, step from x towards z up to the first zero (F decreases along the
   segment: G is PSD), drop the variables that reach zero, and go to 1;
3. else x = z; every variable off F whose negative gradient w_j = p_j - (G x)_j exceeds
   ``eps`` joins F (all of them, as block principal pivoting does; only the largest after
   ZERO_STEPS steps of length zero, which is Lawson & Hanson's rule and cannot cycle), or
   the column is done: x satisfies the KKT conditions.

Every step is monotone in F (Lawson & Hanson 1974, ch. 23), except the restart from x = 0
when the start's free set is singular.  Step 1 is solved two ways:

- Schur phase (:func:`_schur_phase`), while few variables B are at 0 and G is well
  conditioned: z_F = u_F - H_FB H_BB^{-1} u_B with H = G^{-1} and u = H p, O(|B|^3 + n|B|)
  (for a call of at least SCHUR_MIN_COLUMNS columns: G^{-1} costs n^3 once);
- factor phase (:func:`_factor_phase`): the Cholesky factor of G_FF, kept between
  iterations (variables are held in the order they joined F, so joins append rows, one
  variable out is a rank-one update (:func:`_delete_row`), several out refactor from the
  first), and G's own factor when every variable joins an empty face (nonnegative data:
  the first step from x = 0).

A column whose G_FF turns out numerically singular (a pivot below ``PIVOT_TOL G_jj``) when
a single variable joins, or that needs more than ``max_iter`` iterations, is returned as
not ``ok`` at its last feasible point (the caller's general finish takes it from there);
after a restart from 0 that point may be worse than the start, so callers compare.
"""

from __future__ import annotations

import math

import numpy as np

from ..backends.cpu.jit import njit
from ..backends.cpu.threads import column_ranges, run_ranges, sweep_threads, thread_cap

#: Reassociation lets LLVM vectorise the dot products of the factorisation and the solves
#: (rounding-level changes only; no assumption about NaN or inf).
FAST = {"reassoc", "contract"}

#: Faces with at most SCHUR_MAX_FRACTION n variables at 0 are solved through G^{-1} (a
#: Schur complement of size |B|, :func:`_schur_solve`) when cond_1(G) <= SCHUR_MAX_COND:
#: its error, cond(G) eps, is removed by one step of iterative refinement (above
#: REFINE_COND).
SCHUR_MAX_FRACTION = 0.34
SCHUR_MAX_COND = 1e8
#: Below this condition number the refinement would change x by less than 1e-12 relative.
REFINE_COND = 1e4
#: Calls with fewer columns than this skip the Schur phase: forming G^{-1} (n^3 flops)
#: costs more than the Schur phase saves them (docs/benchmarks/shapes.md, "One column").
SCHUR_MIN_COLUMNS = 8
#: LAPACK's condition estimate (dpocon) is a lower bound, in practice within a factor of
#: 3 of the exact ||G||_1 ||G^{-1}||_1; times this it is an upper bound in practice, so
#: that a caller that takes a more careful road above some condition takes it no later.
CONDITION_MARGIN = 3.0

#: Relative size (to G_jj) below which a Cholesky pivot counts as zero.
PIVOT_TOL = 1e-13
#: Above this n the full factor (and the inverse) of G come from LAPACK on one thread;
#: up to it from Numba (no thread-limit or call overhead on a small G).
LAPACK_MIN_N = 128
#: Zero-length steps a column may take with block joins; after them one variable joins at a
#: time (Lawson & Hanson's rule, which cannot cycle).
ZERO_STEPS = 3

#: A column whose start is 0 starts from the previous column's answer (same thread) where
#: their linear terms make an angle whose cosine is at least this (:func:`alike`): below
#: it, on correlated right-hand sides, the previous face costs more to undo than a face
#: built from 0 (docs/benchmarks/shapes.md, "Warm starts between columns").  Here only in
#: the factor phase: the Schur phase solves a face from 0 in one step, and a start with
#: variables at 0 costs it more.
WARM_COS = 0.99


@njit(nogil=True, fastmath=FAST)
def _factor_rows(G, order, start, stop, L):
    """Rows start..stop-1 of the Cholesky factor L of G[order, order] (earlier rows kept).

    Returns the first position whose pivot is numerically zero, or -1.
    """
    for a in range(start, stop):
        ia = order[a]
        for b in range(a + 1):
            acc = G[ia, order[b]]
            for t in range(b):
                acc -= L[a, t] * L[b, t]
            if a == b:
                if acc <= PIVOT_TOL * G[ia, ia] or acc <= 0.0:
                    return a
                L[a, a] = math.sqrt(acc)
            else:
                L[a, b] = acc / L[b, b]
    return -1


@njit(nogil=True, fastmath=FAST)
def _solve_face(L, p, order, f, z):
    """z[:f] = G_FF^{-1} p_F from the factor L (two triangular solves)."""
    for a in range(f):
        acc = p[order[a]]
        for t in range(a):
            acc -= L[a, t] * z[t]
        z[a] = acc / L[a, a]
    for a in range(f - 1, -1, -1):  # L' z = y by rows of L (contiguous, vectorised)
        z[a] /= L[a, a]
        for t in range(a):
            z[t] -= L[a, t] * z[a]


@njit(nogil=True, inline="always")
def _reaches_zero(xi, zi):
    """The fraction of the step from xi >= 0 towards zi at which the variable reaches 0
    (inf if zi > 0: never)."""
    if zi > 0.0:
        return math.inf
    return xi / (xi - zi) if xi > 0.0 else 0.0


@njit(nogil=True, fastmath=FAST)
def _max(x):
    acc = 0.0
    for v in x:
        acc = max(acc, v)
    return acc


@njit(nogil=True, fastmath=FAST)
def _dot(G, i, x):
    """(G x)_i (x is zero off the free set)."""
    acc = 0.0
    for j in range(x.shape[0]):
        acc += G[i, j] * x[j]
    return acc


@njit(nogil=True, fastmath=FAST)
def _delete_row(L, a, f, v):
    """The factor of G[order, order] with position a removed, in place (rows a..f-2).

    With l = L[a+1:f, a], the trailing block T of the new factor satisfies
    T T' = L33 L33' + l l' (L33 = L[a+1:f, a+1:f]): a rank-one update by Givens rotations,
    O((f - a)^2), instead of refactoring the rows after a.
    """
    m = f - a - 1
    for k in range(m):
        v[k] = L[a + 1 + k, a]
    for k in range(m):
        kk = a + 1 + k
        lkk = L[kk, kk]
        rad = math.hypot(lkk, v[k])
        cos = rad / lkk
        sin = v[k] / lkk
        L[kk, kk] = rad
        for i in range(k + 1, m):
            ii = a + 1 + i
            lik = (L[ii, kk] + sin * v[i]) / cos
            L[ii, kk] = lik
            v[i] = cos * v[i] - sin * lik
    for ii in range(a + 1, f):  # shift up and left over row and column a
        for t in range(a):
            L[ii - 1, t] = L[ii, t]
        for t in range(a + 1, ii + 1):
            L[ii - 1, t - 1] = L[ii, t]


@njit(nogil=True, fastmath=FAST)
def _schur_solve(H, u, free, bidx, k, S, t, z):
    """z = argmin on the face "every variable but B free" from H = G^{-1} and u = H p:

        z_F = u_F - H_FB H_BB^{-1} u_B,   z_B = 0

    (the Schur complement: O(k^3/6 + n k) for k = |B| instead of a factorisation of G_FF).
    S receives the Cholesky factor of H_BB.  Returns False if H_BB is numerically singular.
    """
    if _factor_rows(H, bidx, 0, k, S) >= 0:
        return False
    _schur_correct(H, u, free, bidx, k, S, t, z)
    return True


@njit(nogil=True, fastmath=FAST)
def _schur_correct(H, u, free, bidx, k, S, t, z):
    """z = u - H_:B H_BB^{-1} u_B on F, 0 on B, with S the factor of H_BB."""
    n = H.shape[0]
    _solve_face(S, u, bidx, k, t)  # t = H_BB^{-1} u_B
    for i in range(n):
        if free[i]:
            acc = u[i]
            for a in range(k):
                acc -= H[i, bidx[a]] * t[a]
            z[i] = acc
        else:
            z[i] = 0.0


@njit(nogil=True, fastmath=FAST)
def _schur_phase(
    G, H, refine, p, x, free, tol, g_max, p_max, max_iter, max_k, u, z, bidx, S, t, res
):
    """Lawson & Hanson's iterations (as in :func:`_nnls_range`) while at most ``max_k``
    variables are held at 0, each face solved by :func:`_schur_solve`.

    Returns (done, iterations): done = the KKT conditions hold (x then refined by one step
    of iterative refinement if ``refine``); else x, free are a feasible state for the
    factor loop.
    """
    n = G.shape[0]
    for i in range(n):
        u[i] = _dot(H, i, p)
    _join_violators_of_start(G, p, x, free, tol, g_max, p_max, max_k)
    it = 0
    single = False
    zero_steps = 0
    while it < max_iter:
        k = 0
        for i in range(n):
            if not free[i]:
                bidx[k] = i
                k += 1
        if k == n:
            for i in range(n):
                z[i] = 0.0
        elif k > max_k or not _schur_solve(H, u, free, bidx, k, S, t, z):
            return False, it
        it += 1
        alpha = 1.0
        for i in range(n):
            if free[i]:
                alpha = min(alpha, _reaches_zero(x[i], z[i]))
        if alpha < 1.0:
            for i in range(n):
                if not free[i]:
                    continue
                xi = x[i]
                if _reaches_zero(xi, z[i]) <= alpha:
                    x[i] = 0.0
                    free[i] = False
                else:
                    x[i] = xi + alpha * (z[i] - xi)
            if alpha == 0.0:
                zero_steps += 1
                single = zero_steps > ZERO_STEPS
            continue
        x_max = 0.0
        for i in range(n):
            x[i] = z[i]
            x_max = max(x_max, z[i])
        eps = tol * (g_max * x_max + p_max)
        best = -1
        best_w = 0.0
        for i in range(n):
            if free[i]:
                continue
            w = p[i] - _dot(G, i, x) if k < n else p[i]  # k = n: x = 0
            if w > eps:
                if not single:
                    free[i] = True
                if w > best_w:
                    best, best_w = i, w
        if best < 0:
            if refine and k < n:
                # one step of iterative refinement: H carries cond(G) eps of error
                for i in range(n):
                    res[i] = p[i] - _dot(G, i, x) if free[i] else 0.0
                for i in range(n):
                    u[i] = _dot(H, i, res)
                _schur_correct(H, u, free, bidx, k, S, t, z)
                for i in range(n):
                    if free[i]:
                        x[i] = max(x[i] + z[i], 0.0)
            return True, it
        if single:
            free[best] = True
        single = False
    return False, it


@njit(nogil=True, fastmath=FAST)
def _join_violators_of_start(G, p, x, free, tol, g_max, p_max, max_k):
    """A start with more than ``max_k`` (but not all) variables at 0 -- the design form's
    iterate handed to the Gram form, say -- frees every variable at 0 whose gradient
    points into the orthant (a block join at x, as the iterations make them): the face
    then holds x, the step from x towards its solution lowers F, and with few enough
    variables left at 0 the face is solved by the Schur complement rather than by a
    factor grown a row at a time."""
    n = G.shape[0]
    k = 0
    x_max = 0.0
    for i in range(n):
        if not free[i]:
            k += 1
        x_max = max(x_max, x[i])
    if k <= max_k or k == n:
        return
    eps = tol * (g_max * x_max + p_max)
    for i in range(n):
        if not free[i] and p[i] - _dot(G, i, x) > eps:
            free[i] = True


@njit(nogil=True, fastmath=FAST)
def _factor_phase(G, L_all, p, x, free, tol, g_max, p_max, it, max_iter, L, order, z, v, gone):
    """Lawson & Hanson's iterations from the feasible (x, free), each face solved with the
    Cholesky factor L of G_FF, kept up to date between iterations (module docstring).

    Returns (done, iterations so far): done = the KKT conditions hold.
    """
    n = G.shape[0]
    f = 0
    for i in range(n):
        if free[i]:
            order[f] = i
            f += 1
    valid = 0  # rows of L that are up to date
    added = f  # F[added:] joined in the last iteration
    single = False  # only one variable joins (after ZERO_STEPS zero-length steps)
    zero_steps = 0
    start_face = True  # the face we were handed (a start, or the Schur phase's)
    done = False
    while it < max_iter:
        it += 1
        bad = _factor_rows(G, order, valid, f, L)
        if bad >= 0:
            if start_face and bad < added:
                # the start's free set is singular: start again from x = 0
                for a in range(f):
                    x[order[a]] = 0.0
                    free[order[a]] = False
                f = valid = added = 0
                continue
            if bad < added or f - added == 1:
                break  # G_FF singular with one variable joined: the caller goes on
            for a in range(added, f):  # undo the block join; one variable next time
                free[order[a]] = False
            f = added
            valid = min(valid, f)
            single = True
            it -= 1
            # the largest violator alone (recomputed below from x, which is unchanged)
            best = -1
            best_w = 0.0
            for i in range(n):
                if free[i]:
                    continue
                w = p[i] - _dot(G, i, x)
                if w > tol * (g_max * _max(x) + p_max) and w > best_w:
                    best, best_w = i, w
            if best < 0:
                done = True
                break
            free[best] = True
            order[f] = best
            f += 1
            continue
        valid = f
        start_face = False
        _solve_face(L, p, order, f, z)
        alpha = 1.0
        for a in range(f):
            alpha = min(alpha, _reaches_zero(x[order[a]], z[a]))
        if alpha < 1.0:
            # Lawson & Hanson's inner loop: to the first zero, drop what reached it.
            # One variable out: a rank-one update of the factor; several: refactor
            # from the first one out (cheaper then)
            n_out = 0
            first_out = f
            for a in range(f):
                xi = x[order[a]]
                if _reaches_zero(xi, z[a]) <= alpha:
                    n_out += 1
                    first_out = min(first_out, a)
                    gone[a] = True
                else:
                    gone[a] = False
                    x[order[a]] = xi + alpha * (z[a] - xi)
            keep = 0
            for a in range(f):
                if gone[a]:
                    x[order[a]] = 0.0
                    free[order[a]] = False
                else:
                    order[keep] = order[a]
                    keep += 1
            if n_out == 1:
                _delete_row(L, first_out, f, v)
                valid = keep
            else:
                valid = first_out
            f = keep
            added = f
            if alpha == 0.0:
                zero_steps += 1
                single = zero_steps > ZERO_STEPS
            continue
        x_max = 0.0
        for a in range(f):
            x[order[a]] = z[a]
            x_max = max(x_max, z[a])
        # KKT off F: w = p - G x <= eps, eps above the rounding of w
        eps = tol * (g_max * x_max + p_max)
        best = -1
        best_w = 0.0
        added = f
        for i in range(n):
            if free[i]:
                continue
            w = p[i] - _dot(G, i, x)
            if w > eps:
                if not single:
                    free[i] = True
                    order[f] = i
                    f += 1
                if w > best_w:
                    best, best_w = i, w
        if best < 0:
            done = True
            break
        if single:
            free[best] = True
            order[f] = best
            f += 1
        elif added == 0 and f == n and L_all.shape[0] == n:
            # every variable joins an empty face, in index order: G's own factor
            for a in range(n):  # element by element: a slice assignment makes Numba
                for b in range(n):  # compile its error formatting (seconds, cold)
                    L[a, b] = L_all[a, b]
            valid = n
        single = False
    return done, it


@njit(nogil=True, fastmath=FAST)
def alike(p, p_prev):
    """True when the angle between two columns' linear terms is below acos(WARM_COS): a
    Lasso path put in one call (parallel columns), neighbouring pixels or frames."""
    dot = 0.0
    pp = 0.0
    qq = 0.0
    for i in range(p.shape[0]):
        dot += p[i] * p_prev[i]
        pp += p[i] * p[i]
        qq += p_prev[i] * p_prev[i]
    return pp > 0.0 and qq > 0.0 and dot >= WARM_COS * math.sqrt(pp * qq)


@njit(nogil=True, fastmath=FAST)
def _nnls_range(G, L_all, H, refine, max_k, P, X, tol, max_iter, c0, c1, ok, iters):
    """Columns c0..c1-1 of X (in: a start, clipped at 0; out: the solution).

    Without the Schur phase, a column whose start is 0 and whose p is :func:`alike` the
    previous column's starts from that column's answer: its face is near this one's."""
    n = G.shape[0]
    schur = H.shape[0] == n
    x_prev = np.empty(n)
    p_prev = np.empty(n)
    have_prev = False
    g_max = 0.0
    for i in range(n):
        for j in range(n):
            g_max = max(g_max, abs(G[i, j]))
    L = np.empty((n, n))
    order = np.empty(n, dtype=np.int64)
    z = np.empty(n)
    x = np.empty(n)
    free = np.empty(n, dtype=np.bool_)
    p = np.empty(n)
    v = np.empty(n)
    gone = np.empty(n, dtype=np.bool_)
    u = np.empty(n)
    bidx = np.empty(n, dtype=np.int64)
    t = np.empty(n)
    res = np.empty(n)
    for col in range(c0, c1):
        p_max = 0.0
        zero_start = True
        for i in range(n):
            p[i] = P[i, col]
            p_max = max(p_max, abs(p[i]))
            x[i] = max(X[i, col], 0.0)
            zero_start &= x[i] == 0.0
        warm = have_prev and zero_start and not schur and alike(p, p_prev)
        if warm:
            x[:] = x_prev
        p_prev[:] = p
        for i in range(n):
            free[i] = x[i] > 0.0
        it = 0
        done = False
        if schur:
            done, it = _schur_phase(
                G, H, refine, p, x, free, tol, g_max, p_max, max_iter, max_k, u, z, bidx, L, t, res
            )
        if not done:
            done, it = _factor_phase(
                G, L_all, p, x, free, tol, g_max, p_max, it, max_iter, L, order, z, v, gone
            )
        if warm and not done:
            # unfinished from the previous answer: from the column's own start (0) instead
            for i in range(n):
                x[i] = 0.0
                free[i] = False
            done, it = _factor_phase(
                G, L_all, p, x, free, tol, g_max, p_max, 0, max_iter, L, order, z, v, gone
            )
        for i in range(n):
            X[i, col] = x[i]
        ok[col] = done
        iters[col] = it
        have_prev = done
        if done:
            x_prev[:] = x


def _full_factor(G):
    """The Cholesky factor of G when every pivot passes :data:`PIVOT_TOL` (else (0, 0)):
    the factor of the face "every variable free", which most columns of nonnegative data
    take first (p > 0)."""
    n = G.shape[0]
    if n <= LAPACK_MIN_N:
        L = np.zeros((n, n))
        if _factor_rows(G, np.arange(n), 0, n, L) >= 0:
            return np.zeros((0, 0))
        return L
    import scipy.linalg

    from ..backends.cpu.threads import serial_blas

    # LAPACK on one thread (as the inverse below): the upper factor of G' (G's memory in
    # Fortran order, symmetric G) is L' in Fortran order, i.e. L row-major
    with serial_blas():
        upper, info = scipy.linalg.lapack.dpotrf(G.T, lower=0, clean=1)
    L = upper.T
    pivots = np.diagonal(L) ** 2  # _factor_rows' test of every pivot
    if info != 0 or not np.all(pivots > PIVOT_TOL * np.diagonal(G)):
        return np.zeros((0, 0))
    return np.ascontiguousarray(L)


def _schur_settings(n, h, cond):
    """G^{-1}, whether its solves need refining and the most variables at 0 for the
    Schur-complement solves, from G^{-1} and G's condition number ||G||_1 ||G^{-1}||_1
    (:func:`_inverse_and_condition`): an empty array (no Schur phase) above
    :data:`SCHUR_MAX_COND`; refined above :data:`REFINE_COND`."""
    if h is None or cond > SCHUR_MAX_COND:
        return np.zeros((0, 0)), False, 0
    return h, bool(cond > REFINE_COND), max(2, int(SCHUR_MAX_FRACTION * n))


def _inverse_and_condition(G, L_all):
    """(G^{-1}, ||G||_1 ||G^{-1}||_1) from G's Cholesky factor ``L_all``; (None, inf) where G
    is not numerically positive definite (``L_all`` empty).

    The inverse is formed in Numba up to n = 128 (the norms by NumPy: no kernel to load
    on a first call) and by LAPACK on one thread above: BLAS threads left spinning after
    a call take the CPU the column threads need, and a threaded LAPACK next to a busy
    neighbour is slow (docs/development.md, "The CPU sweep's threads")."""
    import scipy.linalg

    n = G.shape[0]
    if n == 0 or L_all.shape[0] != n:
        return None, np.inf
    if n <= LAPACK_MIN_N:
        h = _inverse_from_factor(L_all)
        cond = float(np.abs(G).sum(axis=0).max() * np.abs(h).sum(axis=0).max())
        return h, cond if np.isfinite(cond) else np.inf
    from ..backends.cpu.threads import serial_blas

    # L row-major is the upper factor L' in Fortran order (no transposing copy); the
    # inverse's upper triangle in Fortran order is its lower one row-major
    with serial_blas():
        inv, info = scipy.linalg.lapack.dpotri(L_all.T, lower=0)
    if info != 0:
        return None, np.inf
    h = inv.T
    _mirror_lower(h)
    cond = _max_row_abs_sum(G) * _max_row_abs_sum(h)  # 1-norms of symmetric matrices
    return h, cond if np.isfinite(cond) else np.inf


def _condition_estimate(G, L_all):
    """CONDITION_MARGIN times LAPACK's estimate of ||G||_1 ||G^{-1}||_1 (dpocon, from G's
    Cholesky factor ``L_all``: O(n^2) against the inverse's n^3); inf where G is not
    numerically positive definite (``L_all`` empty)."""
    n = G.shape[0]
    if n == 0 or L_all.shape[0] != n:
        return np.inf
    import scipy.linalg

    # L row-major is the upper factor L' in Fortran order (no copy), as in the inverse
    rcond, info = scipy.linalg.lapack.dpocon(L_all.T, float(np.abs(G).sum(axis=0).max()))
    if info != 0 or not rcond > 0.0:
        return np.inf
    return CONDITION_MARGIN / float(rcond)


@njit(nogil=True)
def _mirror_lower(h):
    """h's strictly upper triangle from its lower one, in place (h row-major)."""
    n = h.shape[0]
    for i in range(n):
        for j in range(i):
            h[j, i] = h[i, j]


@njit(nogil=True, fastmath=FAST)
def _max_row_abs_sum(a):
    """max_i sum_j |a_ij| (no |a| temporary)."""
    top = 0.0
    for i in range(a.shape[0]):
        acc = 0.0
        for j in range(a.shape[1]):
            acc += abs(a[i, j])
        top = max(top, acc)
    return top


@njit(nogil=True, fastmath=FAST)
def _inverse_from_factor(L):
    """G^{-1} = L^{-T} L^{-1} from the Cholesky factor L of G (lower, row-major)."""
    n = L.shape[0]
    inv = np.zeros((n, n))  # L^{-1}, lower
    for j in range(n):
        inv[j, j] = 1.0 / L[j, j]
        for i in range(j + 1, n):
            acc = 0.0
            for t in range(j, i):
                acc -= L[i, t] * inv[t, j]
            inv[i, j] = acc / L[i, i]
    h = np.empty((n, n))
    for i in range(n):
        for j in range(i + 1):
            acc = 0.0
            for t in range(i, n):
                acc += inv[t, i] * inv[t, j]
            h[i, j] = acc
            h[j, i] = acc
    return h


def nnls_active_set(G, P, X0=None, *, tol=1e-12, max_iter=None, threads=None, stats=None):
    """Exact NNLS ``min_{X >= 0} 1/2 tr(X'GX) - tr(X'P)``, every column by Lawson & Hanson's
    active set (block joins), NumPy + Numba.

    Parameters
    ----------
    G : (n, n) array_like
        Symmetric positive semidefinite.
    P : (n, c) array_like
    X0 : (n, c) array_like, optional
        Start (clipped at 0; its positive entries are the first free sets).  Default 0.
        Without the Schur phase, a column whose start is 0 and whose p is alike the
        previous column's (same thread) is started from that column's answer, and again
        from 0 if it does not finish from there.
    tol : float
        A variable at 0 whose negative gradient ``(P - G X)_j`` is at most
        ``tol (max|G| max|x| + max|p|)`` (the rounding of the gradient, for the default)
        counts as optimal.
    max_iter : int, optional
        Iterations (face solves) per column; default ``3 n + 30``.
    threads : int, optional
        Most threads (default: from the work and the CPUs available).
    stats : dict, optional
        Filled with ``"cond"``: ||G||_1 ||G^{-1}||_1 (inf where G is not numerically
        positive definite), which the caller may use to judge the face solves' accuracy;
        with fewer than :data:`SCHUR_MIN_COLUMNS` columns, an estimate of it that is an
        upper bound in practice (:func:`_condition_estimate`).

    Returns
    -------
    X : (n, c) float64 ndarray
        Feasible; optimal in the columns marked ``ok``.
    ok : (c,) bool ndarray
        Columns that satisfied the KKT conditions.
    iterations : (c,) int64 ndarray
    """
    G = np.ascontiguousarray(G, dtype=np.float64)
    P = np.ascontiguousarray(P, dtype=np.float64)
    n, c = P.shape
    if G.shape != (n, n):
        raise ValueError(f"G must be ({n}, {n}) to match P {P.shape}, got {G.shape}")
    X = np.zeros((n, c)) if X0 is None else np.array(X0, dtype=np.float64, order="C", copy=True)
    if X.shape != (n, c):
        raise ValueError(f"X0 must have shape {(n, c)}, got {X.shape}")
    max_iter = 3 * n + 30 if max_iter is None else int(max_iter)
    ok = np.zeros(c, dtype=np.bool_)
    iters = np.zeros(c, dtype=np.int64)
    if c == 0:
        return X, ok, iters
    L_all = _full_factor(G)
    if c >= SCHUR_MIN_COLUMNS:
        h, cond = _inverse_and_condition(G, L_all)
        H, refine, max_k = _schur_settings(n, h, cond)
    else:  # few columns: the factor phase alone, G's condition estimated from its factor
        cond = _condition_estimate(G, L_all)
        H, refine, max_k = np.zeros((0, 0)), False, 0
    if stats is not None:
        stats["cond"] = cond
    # a few face solves of (n/2)^3/6 flops per column: the work that decides the threads
    flops = 4.0 * c * (n**3 / 48.0 + n * n)
    n_threads = sweep_threads(flops, c, thread_cap(threads))
    chunks, bounds = column_ranges(c, n_threads)  # one call per range

    def one(k):
        _nnls_range(
            G, L_all, H, refine, max_k, P, X, tol, max_iter, bounds[k], bounds[k + 1], ok, iters
        )

    run_ranges(one, chunks, n_threads)
    return X, ok, iters
