"""One Newton iteration for a block of columns at once, its products as matrix products.

The fit's half-steps take one Newton iteration per column (``beta_loop.FIT_NEWTON``).
:func:`~msm_gpu.factorization.newton_kernels.column` forms that iteration's products
one column at a time in scalar loops: z = F x, the gradient F' phi'(z), the curvature
F' diag(w) F and u = F d cost cnt (3k + k(k+1)/2) multiply-adds a column, most of the
half-step.  For the kinds that read every entry (dense v: Itakura-Saito from k =
6, other betas but Kullback-Leibler's from k = 16, :data:`MIN_K`) the same products for a
block of c columns are four GEMMs

    Z = X F' (c x n),   G = Phi' F (c x k),   P = W K (c x k(k+1)/2),   U = D F',

with K the row-wise products F_it F_is (s <= t, n x k(k+1)/2): the curvature of column j
is row j of P, packed.  Between them the compiled kernels below do what is per entry or
per column: the derivatives, the model's MSM sweeps (``newton_kernels.direction``) and
Armijo's rule (``newton_kernels.search``), the same functions ``column`` calls, so a
column's iterate differs from ``column``'s by the products' rounding only.
"""

from __future__ import annotations

import numpy as np

from ..backends.cpu.jit import njit
from . import newton_kernels as nk

#: The smallest k that takes this road, per kind: below it the column kernel's fused
#: pass (every product of an entry while it is in cache) is as fast or faster.  Fits of
#: 30 iterations, 400 x 600 Itakura-Saito, column kernel / here: k = 4 111 / 128 ms,
#: 5 155 / 157, 6 198 / 173, 8 204 / 175; beta = 1.5, 300 x 400 (a power and two expm1
#: an entry, which the GEMMs do not touch): k = 8 170 / 183, 12 235 / 233, 16 259 / 244.
MIN_K = {nk.KIND_IS: 6, nk.KIND_BETA: 16}
#: A block's workspace (five or six c_block x n float64 arrays) stays below this size.
BLOCK_BYTES = 16 * 2**20
#: At most this many blocks per half-step (their number depends on c and n only, not on
#: the threads, so the result is the same on any number of threads).
MAX_BLOCKS = 4
#: ... of at least this many columns (a GEMM of fewer rows loses its efficiency).
MIN_BLOCK_COLUMNS = 32


def takes(kind, k):
    """Whether a fit's half-step of this kind and k takes this road."""
    return k >= MIN_K.get(kind, np.iinfo(np.int64).max)


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
def rows_directions(packed, grad, xs, steps, n, l1, l2, omega, theta, max_sweeps,
                    sweep_tol, deltas, counts):  # fmt: skip
    """Each row's model step into ``steps`` from its packed curvature (a row of P, plus
    l2 I) and gradient (a row of G, plus l1 + l2 x); ``deltas`` gets the predicted
    change (NaN: the column is done); ``counts`` (Newton iterations, sweeps)."""
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
    """Armijo's rule on each row with a step (``deltas`` not NaN): moves its x, z;
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
            kind, beta, v[j], z[j], u[j], iz[j], zb[j], n, x, d, fsum, l1, l2, delta, zmin
        )
        counts[j, 2] = trials
        if df == df:
            out_f[j] = df
            for t in range(k):
                xs[j, t] = x[t]


def newton_block(kind, beta, F, K, fsum, v, xs, l1, l2, zmin, omega, theta, max_sweeps,
                 sweep_tol, out_f, counts):  # fmt: skip
    """One Newton iteration on the columns of the block: ``v`` (c x n) their data, ``xs``
    (c x k, C order) their iterates, updated in place; F (n x k), K its pair products."""
    Z = xs @ F.T
    d1, d2, iz = np.empty_like(Z), np.empty_like(Z), np.empty_like(Z)
    zb = np.empty_like(Z) if kind == nk.KIND_BETA else iz  # z^beta: the general kind only
    rows_derivatives(kind, beta, v, Z, zmin, d1, d2, iz, zb)
    G = d1 @ F
    P = d2 @ K
    steps = np.empty_like(xs)
    deltas = np.empty(xs.shape[0])
    n = F.shape[0]
    rows_directions(P, G, xs, steps, n, l1, l2, omega, theta, max_sweeps, sweep_tol, deltas, counts)
    U = steps @ F.T
    rows_searches(kind, beta, v, Z, U, iz, zb, xs, steps, deltas, fsum, l1, l2, zmin, out_f, counts)
