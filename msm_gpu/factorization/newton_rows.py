"""One Newton iteration for a block of columns at once, its products as matrix products.

The fit's half-steps take one Newton iteration per column (``beta_loop.FIT_NEWTON``).
:func:`~msm_gpu.factorization.newton_kernels.column` forms that iteration's products
one column at a time in scalar loops: z = F x, the gradient F' phi'(z), the curvature
F' diag(w) F and u = F d cost cnt (3k + k(k+1)/2) multiply-adds a column, most of the
half-step.  For the kinds that read every entry (Itakura-Saito, other betas from k = 8;
Kullback-Leibler reads only the nonzeros and stays there), on data of MIN_ENTRIES
entries or more (:func:`takes`), the same products for a block of c columns are four
GEMMs

    Z = X F' (c x n),   G = Phi' F (c x k),   P = Omega K (c x k(k+1)/2),   U = D F',

with Phi' and Omega the entries' derivatives and curvature weights, D the steps, and K
the row-wise products F_it F_is (s <= t, n x k(k+1)/2): the curvature of column j is row
j of P, packed.  Between them the compiled kernels below do what is per entry or
per column: the derivatives, the model's MSM sweeps (``newton_kernels.direction``) and
Armijo's rule (``newton_kernels.search``), the same functions ``column`` calls, so a
column's iterate differs from ``column``'s by the products' rounding only.
"""

from __future__ import annotations

import numpy as np

from ..backends.cpu.jit import njit
from . import newton_kernels as nk

#: The smallest k that takes this road, per kind, and the fewest entries of Y: below
#: them the column kernel's fused pass is as fast (the general kind's power and expm1 an
#: entry, which the GEMMs do not touch, need a larger k; measurements:
#: docs/development.md, "Threads of the Newton half-steps").
MIN_K = {nk.KIND_IS: 2, nk.KIND_BETA: 8, nk.KIND_KL: 2}
MIN_ENTRIES = 10_000
#: Kullback-Leibler reads only Y's nonzeros (its other kernel costs nnz); this road
#: reads every entry and is taken where at least this share of them is nonzero.
KL_DENSE_SHARE = 0.5
#: Entries of Y a block takes at a time (SUB_ENTRIES / n columns, at least MIN_SUB): their
#: products, six such arrays, stay in the core's cache between the passes over them.
#: Where k is large the curvature's GEMM dominates and wants more rows: at least
#: k(k+1)/2 / SUB_PAIR_SHARE columns.
SUB_ENTRIES = 6400
MIN_SUB = 4
SUB_PAIR_SHARE = 4
#: A block's workspace stays below this size: the sub-blocks' six arrays of n float64
#: a column, and the c_block x n products of :func:`~msm_gpu.factorization.beta_loop.
#: objective`'s blocks.
BLOCK_BYTES = 16 * 2**20
#: At most this many blocks per half-step: their number depends on c and n only, not on
#: the threads, so the result is the same on any number of threads.
MAX_BLOCKS = 4
#: ... of at least this many columns (a small half-step stays one call on one thread).
MIN_BLOCK_COLUMNS = 32


def takes(kind, k, entries):
    """Whether a fit's half-step of this kind, k and number of data entries takes this
    road."""
    return k >= MIN_K.get(kind, np.iinfo(np.int64).max) and entries >= MIN_ENTRIES


def block_bounds(c, n):
    """Column ranges of one half-step: [bounds[i], bounds[i + 1])."""
    per_bytes = max(1, BLOCK_BYTES // (6 * 8 * max(n, 1)))
    n_blocks = max(1, min(MAX_BLOCKS, c // MIN_BLOCK_COLUMNS))
    n_blocks = max(n_blocks, -(-c // per_bytes))
    return np.linspace(0, c, n_blocks + 1).astype(np.int64)


def pair_products(F):
    """K (n x k(k+1)/2): column t(t+1)/2 + s is F[:, t] * F[:, s], s <= t."""
    ti, si = np.tril_indices(F.shape[1])
    return F[:, ti] * F[:, si]


@njit(nogil=True, fastmath=nk.FAST, error_model="numpy")
def rows_derivatives(kind, beta, v, z, zmin, d1, d2, iz, zb):
    """``newton_kernels.derivatives`` (Fisher's curvature) of each row."""
    n = z.shape[1]
    for j in range(z.shape[0]):
        nk.derivatives(kind, beta, v[j], z[j], n, zmin, d1[j], d2[j], iz[j], zb[j], True)


@njit(nogil=True, fastmath=nk.FAST, error_model="numpy")
def rows_directions(kind, packed, grad, xs, steps, n, fsum, l1, l2, omega, theta, max_sweeps,
                    sweep_tol, deltas, counts):  # fmt: skip
    """Each row's model step into ``steps`` from its packed curvature (a row of P, plus
    l2 I) and gradient (a row of G, plus l1 + l2 x, and for Kullback-Leibler the column
    sums of F, the + 1 of phi'); ``deltas`` gets the predicted change (NaN: the column is
    done); ``counts`` (Newton iterations, sweeps)."""
    c, k = xs.shape
    a = np.empty((k, k))
    g, y, b, x = np.empty(k), np.empty(k), np.empty(k), np.empty(k)
    d = np.empty(k)
    passive = np.zeros(k, dtype=np.bool_)
    chol, zq = np.empty((k, k)), np.empty(k)
    for j in range(c):
        p = 0
        for t in range(k):
            for s in range(t + 1):
                a[t, s] = packed[j, p]
                a[s, t] = packed[j, p]
                p += 1
            a[t, t] += l2
            x[t] = xs[j, t]
            g[t] = grad[j, t] + l1 + l2 * x[t]
            if kind == nk.KIND_KL:
                g[t] += fsum[t]
        sweeps, delta = nk.direction(
            a, g, x, y, b, d, k, n, omega, theta, max_sweeps, sweep_tol, 0.0, False,
            passive, chol, zq,
        )  # fmt: skip
        for t in range(k):
            steps[j, t] = d[t]
        deltas[j] = delta
        counts[j, 0] = 1
        counts[j, 1] = sweeps


@njit(nogil=True, fastmath=nk.FAST, error_model="numpy")
def rows_searches(kind, beta, v, z, u, iz, zb, xs, steps, deltas, fsum, l1, l2, zmin,
                  out_f, counts):  # fmt: skip
    """Armijo's rule on each row with a step (``deltas`` not NaN): moves its x;
    ``out_f`` gets the change of q (0 where no step), ``counts[:, 2]`` the trials."""
    c, k = xs.shape
    n = z.shape[1]
    x, d = np.empty(k), np.empty(k)
    for j in range(c):
        out_f[j] = 0.0
        counts[j, 2] = 0
        delta = deltas[j]
        if delta != delta:
            continue
        for t in range(k):
            x[t] = xs[j, t]
            d[t] = steps[j, t]
        df, trials = nk.search(
            kind, beta, v[j], z[j], u[j], iz[j], zb[j], n, x, d, fsum, l1, l2, delta, zmin, False
        )  # (z is formed afresh by the next half-step: not moved)
        counts[j, 2] = trials
        if df == df:
            out_f[j] = df
            for t in range(k):
                xs[j, t] = x[t]


@njit(nogil=True, fastmath=nk.FAST, error_model="numpy")
def newton_block(kind, beta, F, Ft, K, fsum, v, xs, l1, l2, zmin, omega, theta, max_sweeps,
                 sweep_tol, out_f, counts):  # fmt: skip
    """One Newton iteration on the columns of the block: ``v`` (c x n) their data, ``xs``
    (c x k, C order) their iterates, updated in place; F (n x k), Ft = F' (C order), K
    the pair products.  SUB_ENTRIES entries at a time, so that the products between the
    passes stay in the core's cache (np.dot: BLAS, as the Python operator would)."""
    c, k = xs.shape
    n = F.shape[0]
    sub = max(MIN_SUB, SUB_ENTRIES // max(n, 1), K.shape[1] // SUB_PAIR_SHARE)
    sub = max(1, min(sub, c, BLOCK_BYTES // (6 * 8 * max(n, 1))))
    Z, U = np.empty((sub, n)), np.empty((sub, n))
    d1, d2, iz = np.empty((sub, n)), np.empty((sub, n)), np.empty((sub, n))
    zb = np.empty((sub, n)) if kind == nk.KIND_BETA else iz  # z^beta: the general kind only
    G, P = np.empty((sub, k)), np.empty((sub, K.shape[1]))
    steps, deltas = np.empty((sub, k)), np.empty(sub)
    for j0 in range(0, c, sub):
        j1 = min(j0 + sub, c)
        m = j1 - j0
        x, vj = xs[j0:j1], v[j0:j1]
        np.dot(x, Ft, Z[:m])
        rows_derivatives(kind, beta, vj, Z[:m], zmin, d1[:m], d2[:m], iz[:m], zb[:m])
        np.dot(d1[:m], F, G[:m])
        np.dot(d2[:m], K, P[:m])
        rows_directions(
            kind, P[:m], G[:m], x, steps[:m], n, fsum, l1, l2, omega, theta, max_sweeps,
            sweep_tol, deltas[:m], counts[j0:j1],
        )  # fmt: skip
        np.dot(steps[:m], Ft, U[:m])
        rows_searches(
            kind, beta, vj, Z[:m], U[:m], iz[:m], zb[:m], x, steps[:m], deltas[:m], fsum, l1,
            l2, zmin, out_f[j0:j1], counts[j0:j1],
        )  # fmt: skip
