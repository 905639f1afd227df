"""Numba kernels of the CPU backend: the scalar prox table and the blocked MSM sweep.

The formulas are the same as the reference ones in ``msm_gpu/penalties.py`` and the
device ones in ``kernels/prox.cuh``; the tests check all three against each other.

Layout: the n x r iterate is stored as ``K`` column chunks ``Y[k]`` of shape (n, c),
each contiguous, so one Numba thread owns a chunk and calls single-threaded BLAS on it.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from ..penalties import CODE_BOX, CODE_L0, CODE_L1, CODE_LP


@njit(cache=True, inline="always")
def prox_scalar(code, w, b, lam, lb, ub, p):
    """Return (t, h(t)) with t = argmin_t 1/2 b t^2 + w t + h(t)."""
    a = -w / b
    if code == CODE_BOX:
        return min(max(a, lb), ub), 0.0
    if code == CODE_L1:
        mag = abs(a) - lam / b
        t = 0.0
        if mag > 0.0:
            t = mag if a > 0.0 else -mag
        t = min(max(t, lb), ub)
        return t, lam * abs(t)
    if code == CODE_L0:
        c = min(max(a, lb), ub)
        if lb <= 0.0 and ub >= 0.0:
            if 0.5 * b * c * c + w * c + lam >= 0.0:  # tie -> 0
                return 0.0, 0.0
        return c, (lam if c != 0.0 else 0.0)
    if code != CODE_LP:
        # Unknown code: flag it with NaN, never fall through to the Lp prox.  (No raise
        # here: it would stop Numba from parallelising the sweep's prange loop; the
        # sweep and CpuBackend.start raise before any row is solved.)
        return math.nan, math.nan
    # CODE_LP: argmin 1/2 (t - a)^2 + mu |t|^p, see penalties._lp_prox
    mu = lam / b
    mag = abs(a)
    if mu <= 0.0:
        return a, 0.0
    if mag <= 0.0:
        return 0.0, 0.0
    if p == 0.5:
        z = -(3.0 * mu / (4.0 * mag)) * math.sqrt(3.0 / mag)
        if z < -1.0:
            return 0.0, 0.0
        s = 2.0 * math.sqrt(mag / 3.0) * math.cos(math.acos(z) / 3.0)
        t = s * s
        tp = s
    else:
        cc = 2.0 * mu / 3.0
        z = (3.0 * mag * mag / (16.0 * cc)) * math.sqrt(3.0 / cc)
        if z > 1.0:
            y = 2.0 * math.sqrt(cc / 3.0) * math.cosh(math.acosh(z) / 3.0)
        else:
            y = 2.0 * math.sqrt(cc / 3.0) * math.cos(math.acos(z) / 3.0)
        phi = math.sqrt(2.0 * y)
        disc = 2.0 * mag / phi - phi * phi
        if disc < 0.0:
            return 0.0, 0.0
        s = 0.5 * (phi + math.sqrt(disc))
        t = s * s * s
        tp = s * s
    if 0.5 * t * t - mag * t + mu * tp >= 0.0:  # tie -> 0
        return 0.0, 0.0
    return (t if a > 0.0 else -t), lam * tp


#: Rows of the sub-panels inside a panel: the in-panel lower terms between sub-panels
#: go through small GEMMs, only the SUB_PANEL x SUB_PANEL triangles are row updates.
SUB_PANEL = 8


@njit(cache=True, inline="always")
def _solve_row(code, j, wrow, yrow, rrow, b_diag, afold, params, st, nc):
    """z_j = prox(w_j) for every column; accumulate the statistics; y_j <- z_j."""
    b = b_diag[j]
    lam = params[j, 0]
    lb = params[j, 1]
    ub = params[j, 2]
    pexp = params[j, 3]
    half_b = 0.5 * b
    half_c = 0.5 * afold[j, j]  # C_jj
    # The penalty branch is taken once per row, so that the common cases compile to
    # straight loops that LLVM vectorises (same formulas as prox_scalar).
    if code == CODE_BOX:
        for col in range(nc):
            w = wrow[col] + rrow[col]
            x = yrow[col]
            z = min(max(-w / b, lb), ub)
            d = z - x
            st[0, col] += half_b * (z * z - x * x) + w * d + half_c * d * d
            st[2, col] += d * d
            st[3, col] += x * x
            yrow[col] = z
    elif code == CODE_L0 and lb <= 0.0 and ub >= 0.0:
        for col in range(nc):
            w = wrow[col] + rrow[col]
            x = yrow[col]
            c = min(max(-w / b, lb), ub)
            keep = 0.5 * b * c * c + w * c + lam < 0.0  # strict: tie -> 0
            z = c if keep else 0.0
            d = z - x
            st[0, col] += half_b * (z * z - x * x) + w * d + half_c * d * d
            st[1, col] += lam if z != 0.0 else 0.0
            st[2, col] += d * d
            st[3, col] += x * x
            yrow[col] = z
    else:
        for col in range(nc):
            w = wrow[col] + rrow[col]
            x = yrow[col]
            z, hz = prox_scalar(code, w, b, lam, lb, ub, pexp)
            d = z - x
            st[0, col] += half_b * (z * z - x * x) + w * d + half_c * d * d
            st[1, col] += hz
            st[2, col] += d * d
            st[3, col] += x * x
            yrow[col] = z


def _sweep_chunks(afold, b_diag, code, params, r_chunks, y_chunks, ncols, panel, stats):
    """One MSM iteration (paper, Algorithm 2) on every column chunk, in place.

    Parameters
    ----------
    afold : (n, n) folded matrix: A with the strictly lower part of every diagonal
        panel block zeroed and the diagonal replaced by C_jj (docs/design.md, "CPU sweep"), so
        ``afold[P, :] @ Y`` is the whole off-panel part plus the old in-panel part.
        The in-panel lower entries A[k, j] (k > j) are read as afold[j, k] (symmetry).
    b_diag : (n,) B_jj.
    code, params : penalty table (penalties.py).
    r_chunks, y_chunks : (K, n, c) linear term and iterate; y is overwritten with the
        new iterate.
    ncols : (K,) number of real columns in each chunk (the rest is padding).
    panel : rows per panel T.
    stats : (K, 4, c) float64 output per column:
        [0] sum_j 1/2 b (z^2 - x^2) + w (z - x) + 1/2 C_jj (z - x)^2
        [1] sum_j h(z_j)
        [2] ||z - x||^2
        [3] ||x||^2
        so that F(z) = F(x) + stats[0] + stats[1] - sum_j h(x_j)   (exact identity,
        see driver.py).
    """
    if code != CODE_BOX and code != CODE_L1 and code != CODE_L0 and code != CODE_LP:
        raise ValueError("unknown penalty code (see penalties.PENALTY_CODES)")
    n_chunks = y_chunks.shape[0]
    n = y_chunks.shape[1]
    width = y_chunks.shape[2]
    for k in prange(n_chunks):
        y = y_chunks[k]
        r = r_chunks[k]
        st = stats[k]
        nc = ncols[k]
        st[:, :] = 0.0
        work = np.empty((panel, width), dtype=y.dtype)
        a_buf = np.empty(SUB_PANEL * panel, dtype=y.dtype)
        t_buf = np.empty(SUB_PANEL * width, dtype=y.dtype)
        for p0 in range(0, n, panel):
            p1 = min(p0 + panel, n)
            m = p1 - p0
            np.dot(afold[p0:p1], y, work[:m])
            for s0 in range(p0, p1, SUB_PANEL):
                s1 = min(s0 + SUB_PANEL, p1)
                ms = s1 - s0
                k = s0 - p0
                if k > 0:
                    # left-looking: the rows of this sub-panel get A[S, p0:s0] @ Z[p0:s0]
                    # as one small GEMM (A[i, j] = afold[j, i] for j < i in the panel)
                    a_sub = a_buf[: ms * k].reshape(ms, k)
                    for ii in range(ms):
                        for jj in range(k):
                            a_sub[ii, jj] = afold[p0 + jj, s0 + ii]
                    t_sub = t_buf[: ms * width].reshape(ms, width)
                    np.dot(a_sub, y[p0:s0], t_sub)
                    for ii in range(ms):
                        wi = work[k + ii]
                        ti = t_sub[ii]
                        for col in range(nc):
                            wi[col] += ti[col]
                for j in range(s0, s1):
                    _solve_row(code, j, work[j - p0], y[j], r[j], b_diag, afold, params, st, nc)
                    # right-looking inside the sub-panel: rows i > j get A_ij z_j
                    yrow = y[j]
                    for i in range(j + 1, s1):
                        a_ij = afold[j, i]
                        if a_ij != 0.0:
                            wi = work[i - p0]
                            for col in range(nc):
                                wi[col] += a_ij * yrow[col]


#: The sweep with one thread per chunk (prange) and without (one chunk: no thread start).
sweep_chunks_parallel = njit(cache=True, parallel=True)(_sweep_chunks)
sweep_chunks_serial = njit(cache=True)(_sweep_chunks)
sweep_chunks = sweep_chunks_parallel
