"""Exact solves on a face: X[F, c] = G[F, F]^{-1} P[F, c] for every column c.

F (``passive``, bool k x c) is the free set of each column; X is zero off F.  Three ways:

``solve_passive``          NumPy: columns sharing a free set are grouped (Van Benthem &
                           Keenan 2004; Kim & Park 2011) and each large group is solved with
                           one Cholesky, the rest one Cholesky per column in Numba.  Used by
                           ``factorization.solvers.bpp`` and by the exact finish on the CPU.
``solve_passive_batched``  Array API (NumPy or CuPy): the same grouping, but the systems are
                           padded to k x k (identity on the rows off F) and factorised in one
                           batched call, so many small groups do not serialise a GPU.
``solve_passive_cg``       Array API: preconditioned conjugate gradients on the face, all
                           columns at once with masked GEMMs (for large k, where one
                           factorisation per column costs k^3/3 each).
"""

from __future__ import annotations

import math

import numpy as np
from numba import prange

from ..arrays import module_of, namespace, to_host
from ..backends.cpu.jit import njit

#: Relative pivot (to G_jj) at or below which a face's Cholesky factor leaves a variable
#: out: rounding gives a dependent column a pivot of ~ n eps G_jj.
SINGULAR_PIVOT = 1e-10


def _solve_columns(G, P, passive, cols, X):
    """Per column c in ``cols``: X[F, c] = G[F, F]^{-1} P[F, c] (F = passive rows), 0 elsewhere.

    Cholesky of the passive block per column (O(|F|^3)).  A variable whose pivot is at
    most ``SINGULAR_PIVOT G_jj`` (its column is, numerically, in the span of the earlier
    ones: a singular face) is left out of the solve, at 0: its pivot is set to +inf, which
    zeroes its row of the triangular solves.  On a face whose right-hand side lies in the
    range of G[F, F] (least squares) that is still a minimiser; a factor that divided by
    rounding noise would give a huge, meaningless one.
    """
    k = G.shape[0]
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
                    tiny = SINGULAR_PIVOT * G[idx[a], idx[a]]
                    L[a, a] = math.sqrt(acc) if acc > tiny and acc > 0.0 else math.inf
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


solve_columns = njit(parallel=True)(_solve_columns)
#: The same, serial: for a few small columns a parallel launch costs more than the work.
solve_columns_serial = njit(_solve_columns)
#: Below this many flops (sum of f^3/3 over the columns) the serial kernel is used.
SERIAL_FLOPS = 2e5

#: Columns sharing a passive set are solved together once a group has this many ...
GROUP_MIN = 8
#: ... and its factorisations would cost this many flops column by column (f^3/3 each):
#: below that one Numba Cholesky per column beats a LAPACK call per group.
GROUP_FLOPS = 5e4


def group_ids(passive):
    """Group id of every column of ``passive`` (k x c bool; equal free sets, equal id).

    Returns (inverse (c,), counts (g,)); NumPy only.
    """
    k = passive.shape[0]
    if k <= 62:  # one integer key per column
        keys = (1 << np.arange(k, dtype=np.int64)) @ passive.astype(np.int64)
        _, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
    else:
        keys = np.packbits(passive, axis=0)
        _, inverse, counts = np.unique(keys, axis=1, return_inverse=True, return_counts=True)
    return np.asarray(inverse).ravel(), counts


def solve_passive(G, P, passive):
    """X with X[~passive] = 0 and G[F, F] X[F, col] = P[F, col] on each passive set F.

    Large groups of columns with the same passive set are solved together (Kim &
    Park's grouping, one Cholesky per group); the rest column by column in Numba.
    """
    import scipy.linalg

    k, c = P.shape
    X = np.zeros((k, c), dtype=np.float64)
    if c == 0:
        return X
    inverse, counts = group_ids(passive)
    order = np.argsort(inverse, kind="stable")  # columns of group g: order[starts[g]:...]
    starts = np.concatenate(([0], np.cumsum(counts)))
    sizes = passive[:, order[starts[:-1]]].sum(axis=0).astype(np.float64)
    big = (counts >= GROUP_MIN) & (counts * sizes**3 / 3.0 >= GROUP_FLOPS)
    singles = np.flatnonzero(~big[inverse])
    if singles.size:
        work = float(np.sum(passive[:, singles].sum(axis=0).astype(np.float64) ** 3)) / 3.0
        kernel = solve_columns_serial if work < SERIAL_FLOPS else solve_columns
        kernel(
            np.ascontiguousarray(G, dtype=np.float64),
            np.ascontiguousarray(P, dtype=np.float64),
            np.ascontiguousarray(passive),
            singles.astype(np.int64),
            X,
        )
    for group in np.flatnonzero(big):
        cols = order[starts[group] : starts[group + 1]]
        rows = np.flatnonzero(passive[:, cols[0]])
        if rows.size == 0:
            continue
        sub = G[np.ix_(rows, rows)]
        rhs = P[np.ix_(rows, cols)]
        try:
            factor = scipy.linalg.cho_factor(sub, lower=True, check_finite=False)
            regular = _regular_factor(factor[0], sub)
        except (np.linalg.LinAlgError, scipy.linalg.LinAlgError):
            regular = False
        if regular:
            X[np.ix_(rows, cols)] = scipy.linalg.cho_solve(factor, rhs, check_finite=False)
        else:  # a singular face: the per-column kernel leaves dependent variables out
            solve_columns_serial(
                np.ascontiguousarray(G, dtype=np.float64),
                np.ascontiguousarray(P, dtype=np.float64),
                np.ascontiguousarray(passive),
                cols.astype(np.int64),
                X,
            )
    return X


def _regular_factor(lower, sub):
    """Whether every pivot of the Cholesky factor ``lower`` of ``sub`` exceeds
    :data:`SINGULAR_PIVOT` times its diagonal entry (squared pivot vs G_jj)."""
    pivots = np.diagonal(lower) ** 2
    return bool(np.all(pivots > SINGULAR_PIVOT * np.diagonal(sub)))


def block_pivoting(G, P, passive, *, eps, max_rounds):
    """NNLS ``min_{X >= 0} 1/2 tr(X'GX) - tr(X'P)`` by block principal pivoting (Kim & Park
    2011, Judice & Pires' backup rule), all columns at once, NumPy.

    Parameters
    ----------
    G : (k, k), P : (k, c) float64
    passive : (k, c) bool
        The starting free sets (a warm start: e.g. ``X > 0``); not modified.
    eps : float or (c,) array
        A zero variable with gradient ``(G X - P)_j >= -eps`` counts as optimal.
    max_rounds : int
        Exchange rounds at most.

    Returns
    -------
    X : (k, c) float64
        The last face solution, clipped at 0.
    ok : (c,) bool
        Columns that satisfy the KKT conditions.
    rounds : int
    """
    k, c = P.shape
    passive = np.array(passive, dtype=bool, copy=True)
    X = solve_passive(G, P, passive)
    grad = G @ X - P
    p_bar = 3
    p_vec = np.full(c, p_bar)
    ninf = np.full(c, k + 1)
    non_opt = (grad < -eps) & ~passive
    infea = (X < 0) & passive
    not_good = non_opt.sum(axis=0) + infea.sum(axis=0)
    not_opt_cols = not_good > 0
    rounds = 0
    while not_opt_cols.any() and rounds < max_rounds:
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
        Xs = solve_passive(G, P[:, idx], passive[:, idx])
        Ys = G @ Xs - P[:, idx]
        Xs[np.abs(Xs) < 1e-12 * max(float(np.abs(Xs).max(initial=0.0)), 1e-300)] = 0.0
        X[:, idx] = Xs
        grad[:, idx] = Ys
        eps_idx = eps[idx] if np.ndim(eps) else eps
        non_opt = np.zeros_like(passive)
        infea = np.zeros_like(passive)
        non_opt[:, idx] = (Ys < -eps_idx) & ~passive[:, idx]
        infea[:, idx] = (Xs < 0) & passive[:, idx]
        not_good = non_opt.sum(axis=0) + infea.sum(axis=0)
        not_opt_cols = not_good > 0
    np.maximum(X, 0.0, out=X)
    return X, ~not_opt_cols, rounds


#: Entries (systems x k x k) of one padded batch: bounds the memory of the batched solve.
BATCH_ENTRIES = 1 << 24


def _group_keys(passive):
    """Group ids of the columns of ``passive`` (k x c bool; equal free sets, equal id).

    Returns (inverse (c,), first (g,)): the id of each column and one column of each
    group, in the namespace of ``passive``.  k <= 62: one integer key per column, unique
    on the device; larger k: the bit-packed columns are grouped on the host.
    """
    mod = module_of(passive)
    k = passive.shape[0]
    if k <= 62:
        weights = mod.asarray(1 << np.arange(k, dtype=np.int64))
        keys = weights @ passive.astype(mod.int64)
        _, first, inverse = mod.unique(keys, return_index=True, return_inverse=True)
        return mod.reshape(inverse, (-1,)), first
    # 62 rows per int64 key (cupy.packbits has no axis): (ceil(k/62), c) keys to the host.
    chunks = -(-k // 62)
    padded = mod.zeros((chunks * 62, passive.shape[1]), dtype=mod.int64)
    padded[:k] = passive
    weights = mod.asarray(1 << np.arange(62, dtype=np.int64))
    keys = to_host(mod.sum(mod.reshape(padded, (chunks, 62, -1)) * weights[:, None], axis=1))
    _, first, inverse = np.unique(keys, axis=1, return_index=True, return_inverse=True)
    return mod.asarray(np.reshape(inverse, (-1,))), mod.asarray(first)


def _inverse_spd(xp, m):
    """Inverses of a stack of symmetric PSD matrices (b, k, k).

    Cholesky when it succeeds for the whole stack with every pivot above
    :data:`SINGULAR_PIVOT` times its diagonal entry; otherwise the eigendecomposition with
    the eigenvalues below k eps max|eig| dropped (the pseudo-inverse: on a singular face of
    a least-squares problem the right-hand side lies in the range, so it gives a minimiser).
    """
    k = m.shape[-1]
    eye = xp.eye(k, dtype=m.dtype)
    try:
        chol = xp.linalg.cholesky(m)
        pivots = xp.linalg.diagonal(chol) ** 2
        ok = bool(xp.all(xp.isfinite(chol))) and bool(
            xp.all(pivots > SINGULAR_PIVOT * xp.linalg.diagonal(m))
        )
    except np.linalg.LinAlgError:
        ok = False
    if ok:
        linv = xp.linalg.solve(chol, xp.broadcast_to(eye, m.shape))
        return xp.matmul(xp.matrix_transpose(linv), linv)
    w, v = xp.linalg.eigh(m)
    cut = k * np.finfo(np.float64).eps * xp.max(xp.abs(w), axis=-1, keepdims=True)
    winv = xp.where(w > cut, 1.0 / xp.where(w > cut, w, xp.ones_like(w)), xp.zeros_like(w))
    return xp.matmul(v * winv[..., None, :], xp.matrix_transpose(v))


def solve_passive_batched(G, P, passive):
    """:func:`solve_passive` on NumPy or CuPy arrays, with batched factorisations.

    The distinct free sets are found once; each one's system, padded to k x k with the
    identity on the rows off F, is inverted in batches (Cholesky, or a pseudo-inverse
    when a face is singular), and every column is then one batched mat-vec with its
    group's inverse.  No Python loop over groups, so thousands of small groups cost a
    few batched calls on a GPU.
    """
    xp = namespace(G, P)
    k, c = P.shape
    X = xp.zeros((k, c), dtype=xp.float64)
    if c == 0:
        return X
    G = xp.astype(G, xp.float64)
    P = xp.astype(P, xp.float64)
    fmask = xp.astype(passive, xp.float64)
    inverse, first = _group_keys(passive)
    n_groups = int(first.shape[0])
    per_batch = max(1, BATCH_ENTRIES // (k * k))
    inv = xp.empty((n_groups, k, k), dtype=xp.float64)
    eye = xp.eye(k, dtype=xp.float64)
    for s in range(0, n_groups, per_batch):
        f = xp.take(fmask, first[s : s + per_batch], axis=1).T  # (b, k)
        m = G[None, :, :] * f[:, :, None] * f[:, None, :] + eye * (1.0 - f)[:, None, :]
        inv[s : s + per_batch] = _inverse_spd(xp, m)
    for s in range(0, c, per_batch):
        cols = slice(s, min(s + per_batch, c))
        rhs = (P[:, cols] * fmask[:, cols]).T[:, :, None]  # (b, k, 1)
        sol = xp.matmul(xp.take(inv, inverse[cols], axis=0), rhs)[:, :, 0]
        X[:, cols] = sol.T * fmask[:, cols]
    return X


#: CG stops a column whose search direction p has p'Gp <= NULL_CURVATURE sum_j G_jj p_j^2.
NULL_CURVATURE = 1e-10


def solve_passive_cg(G, P, passive, x0=None, *, rtol=1e-13, max_iter=None):
    """:func:`solve_passive` by Jacobi-preconditioned conjugate gradients (array API).

    All columns at once: one masked GEMM ``G @ (F * p)`` per iteration, on the columns
    not yet converged (they are compacted as others finish).  A column stops when its
    residual on F is below ``rtol`` times the larger of its right-hand side and its
    starting residual (``x0`` restricted to F: a warm start; zeros by default).

    Returns
    -------
    X : (k, c) float64
    n_iter : int
        CG iterations (GEMMs) done.
    """
    xp = namespace(G, P)
    k, c = P.shape
    G = xp.astype(G, xp.float64)
    fmask_all = xp.astype(passive, xp.float64)
    b = xp.astype(P, xp.float64) * fmask_all
    x_all = xp.zeros_like(b) if x0 is None else xp.astype(x0, xp.float64) * fmask_all
    diag = xp.diagonal(G)
    dinv_all = fmask_all / xp.where(diag > 0, diag, xp.ones_like(diag))[:, None]
    res = b - fmask_all * xp.matmul(G, x_all)
    norm = xp.linalg.vector_norm
    target = rtol * xp.maximum(norm(b, axis=0), norm(res, axis=0))
    cols = xp.nonzero(norm(res, axis=0) > target)[0]
    max_iter = 2 * k if max_iter is None else int(max_iter)
    n_iter = 0
    if cols.shape[0] == 0:
        return x_all, 0
    # the working set: columns still iterating
    x, res, fmask, dinv, tgt = (
        x_all[:, cols],
        res[:, cols],
        fmask_all[:, cols],
        dinv_all[:, cols],
        target[cols],
    )
    z = dinv * res
    p = z
    rz = xp.sum(res * z, axis=0)
    while n_iter < max_iter:
        q = fmask * xp.matmul(G, p)
        pq = xp.sum(p * q, axis=0)
        # a direction of (numerically) zero curvature lies in the face's null space: the
        # column stops there (on an inconsistent singular face CG would grow without end)
        ok = pq > NULL_CURVATURE * xp.sum(p * p * diag[:, None], axis=0)
        alpha = xp.where(ok, rz / xp.where(ok, pq, xp.ones_like(pq)), xp.zeros_like(pq))
        x = x + alpha * p
        res = res - alpha * q
        z = dinv * res
        rz_new = xp.sum(res * z, axis=0)
        beta = xp.where(rz > 0, rz_new / xp.where(rz > 0, rz, xp.ones_like(rz)), 0.0)
        p = z + beta * p
        rz = rz_new
        n_iter += 1
        going = ok & (norm(res, axis=0) > tgt)
        n_going = int(xp.sum(xp.astype(going, xp.int64)))
        if n_going == 0:
            break
        if n_going < 0.8 * going.shape[0]:  # compact: finished columns leave the GEMM
            x_all[:, cols] = x
            keep = xp.nonzero(going)[0]
            cols = cols[keep]
            x, res, p, rz = x[:, keep], res[:, keep], p[:, keep], rz[keep]
            fmask, dinv, tgt = fmask[:, keep], dinv[:, keep], tgt[keep]
    x_all[:, cols] = x
    return x_all, n_iter
