"""Exact finish on the host for every convex penalty: a primal active set, column by column.

``min_x 1/2 x'Ax + r'x + h(x)`` per column, A symmetric positive *semi*definite, h convex
and piecewise linear per row (Zero, NonNeg, Box, L1, NonNegL1: :class:`msm_gpu.finish.Faces`
tabulates each row's points, pieces and slopes).  Lawson & Hanson's method (1974, ch. 23),
generalised from x >= 0 to those pieces, in Numba, column ranges on the sweep's threads.

Per column, from a feasible x, with F the free variables whose block A_FF is factorised:

1. z = the minimiser on the face (z_F = A_FF^{-1} b_F, the others held where they are);
2. if z leaves a piece, step from x towards z up to the first piece end (F decreases along
   the segment), fix the variables that reach it, go to 1;
3. else x = z; a held variable whose one-sided derivative g_j + slope is negative in some
   direction joins F (all of them at once, or the largest alone after ZERO_STEPS steps of
   length zero); none: the KKT conditions hold.

**Singular faces.**  A_FF may be singular (more free variables than rows of C, collinear
columns).  A variable joins F only if its pivot (the Schur complement of A_FF in
A_{F+j,F+j}) is above PIVOT_TOL A_jj, so the factor never divides by rounding noise.  A
violating variable that cannot join (its column is, numerically, in the span of F's) moves
instead along the direction that keeps A x fixed, d_j = +-1, d_F = -+A_FF^{-1} A_Fj: an
exact line search (the directional derivative is the violation, the curvature the tiny
pivot), stopped at the first piece end; a variable of F that reaches it leaves F, and j can
join next time.  A variable left inside a piece but outside F is *held* (its value fixed,
its slope the piece's); the start's free variables that do not fit in the factor are held.
Every step is monotone in F; a direction with no piece end and no curvature means F is
unbounded below on the column (not ``ok``).
"""

from __future__ import annotations

import math

import numpy as np

from .backends.jit import njit
from .backends.threads import run_ranges, sweep_threads, thread_cap
from .nnls_columns import FAST, ZERO_STEPS, _delete_row

#: A variable joins F only if its pivot exceeds JOIN_TOL A_jj: rounding makes the pivot of
#: a dependent column ~ n eps A_jj, and a factor with pivots down to JOIN_TOL keeps cond(A_FF)
#: near 1 / JOIN_TOL, so that face solutions are accurate to ~1e-6 before refinement.
JOIN_TOL = 1e-10

#: Table columns handed to the kernel, in this order (see :class:`msm_gpu.finish.Faces`).
TABLES = ("lo", "hi", "value", "sigma", "left", "right")


@njit(nogil=True, inline="always")
def _int(value):
    """``value`` typed int64, not as a literal: a literal argument makes Numba compile the
    callee once more for that literal (each such copy costs about a second cold)."""
    return np.int64(value)


@njit(nogil=True, inline="always")
def _row(nr, i):
    """Row of a face table for variable i (one row when every variable is alike)."""
    return i if nr > 1 else 0


@njit(nogil=True, fastmath=FAST)
def _factor_rows(A, order, start, stop, L):
    """Rows start..stop-1 of the Cholesky factor L of A[order, order] (earlier rows kept).

    Returns the first position whose pivot is below JOIN_TOL A_ii (those rows are
    unusable), or -1.
    """
    for a in range(start, stop):
        ia = order[a]
        for c in range(a + 1):
            acc = A[ia, order[c]]
            for t in range(c):
                acc -= L[a, t] * L[c, t]
            if a == c:
                if not acc > JOIN_TOL * A[ia, ia]:
                    return a
                L[a, a] = math.sqrt(acc)
            else:
                L[a, c] = acc / L[c, c]
    return -1


@njit(nogil=True, fastmath=FAST)
def _held_product(A, x, i, infac):
    """(A x)_i over the nonzero entries of x outside F (fixed at a point, or held)."""
    acc = 0.0
    for k in range(x.shape[0]):
        if not infac[k] and x[k] != 0.0:
            acc += A[i, k] * x[k]
    return acc


@njit(nogil=True, fastmath=FAST)
def _product(A, x, i):
    """(A x)_i over the nonzero entries of x."""
    acc = 0.0
    for k in range(x.shape[0]):
        if x[k] != 0.0:
            acc += A[i, k] * x[k]
    return acc


@njit(nogil=True, fastmath=FAST)
def _solve_factor(L, b, f, z):
    """z[:f] = (L L')^{-1} b[:f] (two triangular solves with the rows of L)."""
    for a in range(f):
        acc = b[a]
        for t in range(a):
            acc -= L[a, t] * z[t]
        z[a] = acc / L[a, a]
    for a in range(f - 1, -1, -1):
        z[a] /= L[a, a]
        for t in range(a):
            z[t] -= L[a, t] * z[a]


@njit(nogil=True)
def _sort_down(keys, a, b, k):
    """Sort keys[:k] in decreasing order, carrying a[:k] and b[:k] along (insertion sort:
    the candidates are few, and a sort from NumPy costs seconds of compilation)."""
    for i in range(1, k):
        key, va, vb = keys[i], a[i], b[i]
        j = i - 1
        while j >= 0 and keys[j] < key:
            keys[j + 1], a[j + 1], b[j + 1] = keys[j], a[j], b[j]
            j -= 1
        keys[j + 1], a[j + 1], b[j + 1] = key, va, vb


@njit(nogil=True)
def _join_state(q, direction):
    """The free state entered from state q moving in ``direction`` (held: its own piece)."""
    if q % 2 == 1:
        return q
    return q + 1 if direction > 0 else q - 1


@njit(nogil=True, fastmath=FAST)
def _column(
    A, r, T, x, q, tol, scale, floor, max_iter, L, order, infac, z, b, w, v, gone, cand, viols, dirs
):
    """One column (x, q in: a feasible start and its states; out: the answer).

    ``T`` (6, rows, 5): the face tables of :data:`TABLES`.  A violation must exceed
    ``tol (scale max|x| + floor)``.  Returns (status, iterations): 1 the KKT conditions
    hold, 0 not finished in ``max_iter``, -1 F unbounded below along a direction of zero
    curvature.
    """
    n = A.shape[0]
    lo, hi, sigma, left, right = T[0], T[1], T[3], T[4], T[5]
    nr = lo.shape[0]
    # the start's free variables, factorised in turn; those that do not fit are held
    f = _int(0)
    for i in range(n):
        infac[i] = False
        if q[i] % 2 == 1:
            order[f] = i
            if _factor_rows(A, order, f, f + 1, L) < 0:
                infac[i] = True
                f += 1
    single = False
    zero_steps = 0
    it = 0
    status = 0
    while it < max_iter:
        it += 1
        # 1. the face minimiser: A_FF z = -(r_F + sigma_F) - A_F,out x_out
        for a in range(f):
            i = order[a]
            b[a] = -(r[i] + sigma[_row(nr, i), q[i]]) - _held_product(A, x, i, infac)
        _solve_factor(L, b, f, z)
        # 2. the first piece end on the segment x -> z
        alpha = 1.0
        for a in range(f):
            i = order[a]
            ri = _row(nr, i)
            if z[a] > hi[ri, q[i]]:
                alpha = min(alpha, (hi[ri, q[i]] - x[i]) / (z[a] - x[i]))
            elif z[a] < lo[ri, q[i]]:
                alpha = min(alpha, (lo[ri, q[i]] - x[i]) / (z[a] - x[i]))
        alpha = max(alpha, 0.0)
        if alpha < 1.0:
            f = _step_to_ends(A, L, order, infac, z, x, q, T, f, alpha, v, gone)
            if alpha == 0.0:
                zero_steps += 1
                single = zero_steps > ZERO_STEPS
            continue
        for a in range(f):
            x[order[a]] = z[a]
        x_max = 0.0
        for i in range(n):
            x_max = max(x_max, abs(x[i]))
        eps = tol * (scale * x_max + floor)
        # 3. one-sided derivatives of the variables outside F
        n_viol = 0
        for i in range(n):
            if infac[i]:
                continue
            ri = _row(nr, i)
            gi = _product(A, x, i) + r[i]
            qi = q[i]
            if qi % 2 == 1:  # held inside a piece: one slope both ways
                up = gi + sigma[ri, qi]
                down = up
            else:
                up = gi + right[ri, qi]
                down = gi + left[ri, qi]
            if up < -eps:
                cand[n_viol], viols[n_viol], dirs[n_viol] = i, -up, 1
                n_viol += 1
            elif down > eps:
                cand[n_viol], viols[n_viol], dirs[n_viol] = i, down, -1
                n_viol += 1
        if n_viol == 0:
            status = 1
            _refine(A, r, T, x, q, L, order, f, b, z)
            break
        # the largest violations first: where the face cannot take them all (A_FF would
        # be singular), the ones that join are those that decrease F fastest
        _sort_down(viols, cand, dirs, n_viol)
        best, best_viol, best_dir = cand[0], viols[0], dirs[0]
        joined = 0
        if not single:
            for k in range(n_viol):
                i = cand[k]
                order[f] = i
                if _factor_rows(A, order, f, f + 1, L) < 0:
                    q[i] = _join_state(q[i], dirs[k])
                    infac[i] = True
                    f += 1
                    joined += 1
        if joined > 0:
            continue
        # the largest violator alone: it joins, or a line search along the null direction
        i = best
        order[f] = i
        if _factor_rows(A, order, f, f + 1, L) < 0:
            q[i] = _join_state(q[i], best_dir)
            infac[i] = True
            f += 1
            single = False
            continue
        ok, f = _null_step(A, L, order, infac, x, q, T, f, i, best_dir, best_viol, z, w, v, gone)
        if not ok:
            status = -1
            break
    return status, it


@njit(nogil=True, fastmath=FAST)
def _step_to_ends(A, L, order, infac, z, x, q, T, f, alpha, v, gone):
    """x_F += alpha (z - x_F); the variables that reach a piece end are fixed there and
    leave F.  Returns the new |F|."""
    lo, hi, value = T[0], T[1], T[2]
    nr = lo.shape[0]
    first_out = f
    n_out = _int(0)
    for a in range(f):
        i = order[a]
        ri = _row(nr, i)
        d = z[a] - x[i]
        end = math.inf
        if z[a] > hi[ri, q[i]]:
            end = (hi[ri, q[i]] - x[i]) / d
        elif z[a] < lo[ri, q[i]]:
            end = (lo[ri, q[i]] - x[i]) / d
        if end <= alpha:  # fixed at the point it reached
            q[i] = q[i] + 1 if d > 0.0 else q[i] - 1
            x[i] = value[ri, q[i]]
            gone[a] = True
            n_out += 1
            first_out = min(first_out, a)
        else:
            gone[a] = False
            x[i] = x[i] + alpha * d
    return _drop(A, L, order, infac, f, gone, n_out, first_out, v)


@njit(nogil=True, fastmath=FAST)
def _drop(A, L, order, infac, f, gone, n_out, first_out, v):
    """Remove the positions marked in ``gone`` from F and from its factor (one: a rank-one
    downdate; several: refactorised from the first).  Returns the new |F|."""
    keep = _int(0)
    for a in range(f):
        if gone[a]:
            infac[order[a]] = False
        else:
            order[keep] = order[a]
            keep += 1
    if n_out == 1:
        _delete_row(L, first_out, f, v)
    elif n_out > 1:
        bad = _factor_rows(A, order, first_out, keep, L)
        if bad >= 0:  # a kept pivot became tiny: the rest are held where they are
            for a in range(bad, keep):
                infac[order[a]] = False
            keep = bad
    return keep


@njit(nogil=True, fastmath=FAST)
def _null_step(A, L, order, infac, x, q, T, f, j, direction, viol, u, w, v, gone):
    """Move j (outside F, its pivot tiny) and F along d_j = direction,
    d_F = -direction A_FF^{-1} A_Fj: an exact line search (slope -viol, curvature the
    pivot) stopped at the first piece end.  Returns (ok, new |F|); not ok: no piece end
    and no curvature (F unbounded below along d)."""
    lo, hi, value = T[0], T[1], T[2]
    nr = lo.shape[0]
    for a in range(f):
        u[a] = A[order[a], j]
    _solve_factor(L, u, f, w)  # w = A_FF^{-1} A_Fj
    curv = A[j, j]
    for a in range(f):
        curv -= A[order[a], j] * w[a]
    t = viol / curv if curv > 0.0 else math.inf  # the minimiser along d
    qj = _join_state(q[j], direction)
    rj = _row(nr, j)
    end_j = hi[rj, qj] - x[j] if direction > 0 else x[j] - lo[rj, qj]
    own_end = end_j <= t
    t = min(t, end_j)
    hit = _int(-1)
    for a in range(f):
        i = order[a]
        ri = _row(nr, i)
        da = -direction * w[a]
        if da > 0.0:
            s = (hi[ri, q[i]] - x[i]) / da
        elif da < 0.0:
            s = (lo[ri, q[i]] - x[i]) / da
        else:
            continue
        if s < t:
            t = max(s, 0.0)
            hit = a
    if not t < math.inf:
        return False, f
    for a in range(f):
        x[order[a]] -= direction * t * w[a]
    x[j] += direction * t
    q[j] = qj
    if hit >= 0:  # a variable of F reached a piece end: fixed there, out of F
        i = order[hit]
        ri = _row(nr, i)
        q[i] = q[i] + 1 if -direction * w[hit] > 0.0 else q[i] - 1
        x[i] = value[ri, q[i]]
        for a in range(f):
            gone[a] = a == hit
        return True, _drop(A, L, order, infac, f, gone, _int(1), hit, v)
    if own_end:  # j reached its own piece end: fixed at that point
        q[j] = qj + direction
        x[j] = value[rj, q[j]]
    return True, f


@njit(nogil=True, fastmath=FAST)
def _refine(A, r, T, x, q, L, order, f, b, z):
    """One step of iterative refinement of x_F on its face (the residual recomputed from
    A), kept inside the pieces."""
    lo, hi, sigma = T[0], T[1], T[3]
    nr = lo.shape[0]
    for a in range(f):
        i = order[a]
        b[a] = -(r[i] + sigma[_row(nr, i), q[i]] + _product(A, x, i))
    _solve_factor(L, b, f, z)
    for a in range(f):
        i = order[a]
        ri = _row(nr, i)
        x[i] = min(max(x[i] + z[a], lo[ri, q[i]]), hi[ri, q[i]])


@njit(nogil=True, fastmath=FAST)
def _pwl_range(A, R, T, X, Q, tol, max_iter, c0, c1, status, iters):
    """Columns c0..c1-1 of X (in: a feasible start, Q its states; out: the answer)."""
    n = A.shape[0]
    scale = 0.0
    for i in range(n):
        for k in range(n):
            scale = max(scale, abs(A[i, k]))
    s_max = 0.0  # largest finite slope
    for t in range(3, 6):
        for row in range(T.shape[1]):
            for k in range(5):
                if math.isfinite(T[t, row, k]):
                    s_max = max(s_max, abs(T[t, row, k]))
    L = np.empty((n, n))
    order = np.empty(n, dtype=np.int64)
    infac = np.empty(n, dtype=np.bool_)
    gone = np.empty(n, dtype=np.bool_)
    x = np.empty(n)
    q = np.empty(n, dtype=np.int64)
    r = np.empty(n)
    z = np.empty(n)
    b = np.empty(n)
    w = np.empty(n)
    v = np.empty(n)
    cand = np.empty(n, dtype=np.int64)
    viols = np.empty(n)
    dirs = np.empty(n, dtype=np.int64)
    for col in range(c0, c1):
        r_max = 0.0
        for i in range(n):
            r[i] = R[i, col]
            r_max = max(r_max, abs(r[i]))
            x[i] = X[i, col]
            q[i] = Q[i, col]
        st, it = _column(
            A,
            r,
            T,
            x,
            q,
            tol,
            scale,
            r_max + s_max,
            max_iter,
            L,
            order,
            infac,
            z,
            b,
            w,
            v,
            gone,
            cand,
            viols,
            dirs,
        )
        for i in range(n):
            X[i, col] = x[i]
            Q[i, col] = q[i]
        status[col] = st
        iters[col] = it


def pwl_active_set(A, R, faces, X0, *, tol=1e-12, max_iter=None, threads=None):
    """Exact ``min 1/2 x'Ax + r'x + h(x)`` for every column, by the active set above.

    Parameters
    ----------
    A : (n, n) array_like
        Symmetric positive semidefinite (singular allowed).
    R : (n, c) array_like
    faces : msm_gpu.finish.Faces
        The penalty's face tables, built on NumPy.
    X0 : (n, c) array_like
        Start; projected into the bounds (the states follow from the values).
    tol : float
        A held variable counts as optimal while its one-sided derivatives are within
        ``tol (max|A| max|x| + max|r| + max|slope|)`` of the KKT conditions.
    max_iter : int, optional
        Face solves per column; default ``3 n + 30``.
    threads : int, optional
        Most threads (default: from the work and the CPUs available).

    Returns
    -------
    X : (n, c) float64 ndarray
        Feasible, F never above the start's (monotone steps).
    status : (c,) int8 ndarray
        1: the KKT conditions hold; 0: not finished in ``max_iter``; -1: F unbounded
        below along a direction of zero curvature.
    iterations : (c,) int64 ndarray
    """
    A = np.ascontiguousarray(A, dtype=np.float64)
    R = np.ascontiguousarray(R, dtype=np.float64)
    n, c = R.shape
    X = np.ascontiguousarray(faces.project(np.asarray(X0, dtype=np.float64)), dtype=np.float64)
    if X is X0:
        X = X.copy()
    Q = np.ascontiguousarray(faces.states(X), dtype=np.int64)
    T = np.ascontiguousarray(np.stack([np.asarray(faces.tables[k], np.float64) for k in TABLES]))
    max_iter = 3 * n + 30 if max_iter is None else int(max_iter)
    status = np.zeros(c, dtype=np.int8)
    iters = np.zeros(c, dtype=np.int64)
    if c == 0:
        return X, status, iters
    flops = 4.0 * c * (n**3 / 48.0 + n * n)
    n_threads = sweep_threads(flops, c, thread_cap(threads))
    chunks = 1 if n_threads == 1 else min(c, 8 * n_threads)
    bounds = np.linspace(0, c, chunks + 1).astype(np.int64)

    def one(k):
        _pwl_range(A, R, T, X, Q, tol, max_iter, bounds[k], bounds[k + 1], status, iters)

    run_ranges(one, chunks, n_threads)
    return X, status, iters
