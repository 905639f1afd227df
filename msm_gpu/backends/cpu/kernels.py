"""Numba kernels of the CPU backend: the scalar prox table and the blocked MSM sweep.

The formulas are the same as the reference ones in ``msm_gpu/penalties/__init__.py`` and the
device ones in ``kernels/prox.cuh``; the tests check all three against each other.

Layout: the sweep works on the n x m iterate in place (C order, the user's layout), one
range of columns [c0, c1) per call, so a thread owns a column range and calls
single-threaded BLAS on it (``gemm_rm``: BLAS with the row stride as leading dimension, no
packing).  The kernels release the GIL; ``backends/cpu/threads.py`` runs column ranges on
a pool of plain threads.
"""

from __future__ import annotations

import math

import numpy as np

from ...penalties import CODE_BOX, CODE_L0, CODE_L1, CODE_LP
from .blas import gemm_rm, gemm_rm_at
from .jit import njit


@njit(inline="always")
def box_prox(w, b, lb, ub):
    """argmin_{lb <= t <= ub} 1/2 b t^2 + w t = clip(-w / b, lb, ub): the box's prox, the
    one scalar definition (l0 and the KKT residual clip with it too)."""
    return min(max(-w / b, lb), ub)


@njit(inline="always")
def l1_box_prox(w, b, cut, lb, ub):
    """argmin_{lb <= t <= ub} 1/2 b t^2 + w t + lam |t| with ``cut`` = lam / b: -w / b
    soft-thresholded by ``cut``, then clipped (prox_scalar's CODE_L1 up to the sign of a
    zero), as selects that vectorise; ``cut`` = 0 is :func:`box_prox`."""
    a = -w / b
    return min(max(math.copysign(max(abs(a) - cut, 0.0), a), lb), ub)


@njit(inline="always")
def prox_scalar(code, w, b, lam, lb, ub, p):
    """Return (t, h(t)) with t = argmin_t 1/2 b t^2 + w t + h(t)."""
    a = -w / b
    if code == CODE_BOX:
        return box_prox(w, b, lb, ub), 0.0
    if code == CODE_L1:
        mag = abs(a) - lam / b
        t = 0.0
        if mag > 0.0:
            t = mag if a > 0.0 else -mag
        t = min(max(t, lb), ub)
        return t, lam * abs(t)
    if code == CODE_L0:
        c = box_prox(w, b, lb, ub)
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
SUB_PANEL = 16


@njit(inline="always")
def _solve_row_box(j, wrow, yrow, rrow, c0, nc, b_diag, afold, params, stats):
    """z_j = prox(w_j) of the box penalty for the columns c0..c0+nc; accumulate the
    statistics; y_j <- z_j.

    ``wrow`` holds the columns from 0, ``yrow``/``rrow``/``stats`` from ``c0`` (sliced
    first: indexing from 0 lets LLVM vectorise the loops).  One
    function per kind of row (this one, :func:`_solve_row_l0`, :func:`_solve_row_prox`),
    so that a sweep compiled for one penalty code inlines only its own (see
    :func:`_make_sweep`); each loop is straight code that LLVM vectorises.
    """
    b = b_diag[j]
    lb = params[j, 1]
    ub = params[j, 2]
    half_b = 0.5 * b
    half_c = 0.5 * afold[j, j]  # C_jj
    c1 = c0 + nc
    st0 = stats[0, c0:c1]
    st2 = stats[2, c0:c1]
    st3 = stats[3, c0:c1]
    yrow = yrow[c0:c1]
    rrow = rrow[c0:c1]
    for col in range(nc):
        w = wrow[col] + rrow[col]
        x = yrow[col]
        z = box_prox(w, b, lb, ub)
        d = z - x
        st0[col] += half_b * (z * z - x * x) + w * d + half_c * d * d
        st2[col] += d * d
        st3[col] += x * x
        yrow[col] = z


@njit(inline="always")
def _solve_row_prox(code, j, wrow, yrow, rrow, c0, nc, b_diag, afold, params, stats):
    """:func:`_solve_row_box` for any penalty code, through :func:`prox_scalar`."""
    b = b_diag[j]
    lam = params[j, 0]
    lb = params[j, 1]
    ub = params[j, 2]
    pexp = params[j, 3]
    half_b = 0.5 * b
    half_c = 0.5 * afold[j, j]  # C_jj
    c1 = c0 + nc
    st0 = stats[0, c0:c1]
    st1 = stats[1, c0:c1]
    st2 = stats[2, c0:c1]
    st3 = stats[3, c0:c1]
    yrow = yrow[c0:c1]
    rrow = rrow[c0:c1]
    for col in range(nc):
        w = wrow[col] + rrow[col]
        x = yrow[col]
        z, hz = prox_scalar(code, w, b, lam, lb, ub, pexp)
        d = z - x
        st0[col] += half_b * (z * z - x * x) + w * d + half_c * d * d
        st1[col] += hz
        st2[col] += d * d
        st3[col] += x * x
        yrow[col] = z


@njit(inline="always")
def _solve_row_l0(j, wrow, yrow, rrow, c0, nc, b_diag, afold, params, stats):
    """:func:`_solve_row_box` for the l0 penalty: a straight loop where 0 is feasible, else
    :func:`_solve_row_prox`."""
    lb = params[j, 1]
    ub = params[j, 2]
    if not (lb <= 0.0 and ub >= 0.0):
        _solve_row_prox(CODE_L0, j, wrow, yrow, rrow, c0, nc, b_diag, afold, params, stats)
        return
    b = b_diag[j]
    lam = params[j, 0]
    half_b = 0.5 * b
    half_c = 0.5 * afold[j, j]  # C_jj
    c1 = c0 + nc
    st0 = stats[0, c0:c1]
    st1 = stats[1, c0:c1]
    st2 = stats[2, c0:c1]
    st3 = stats[3, c0:c1]
    yrow = yrow[c0:c1]
    rrow = rrow[c0:c1]
    for col in range(nc):
        w = wrow[col] + rrow[col]
        x = yrow[col]
        c = box_prox(w, b, lb, ub)
        keep = 0.5 * b * c * c + w * c + lam < 0.0  # strict: tie -> 0
        z = c if keep else 0.0
        d = z - x
        st0[col] += half_b * (z * z - x * x) + w * d + half_c * d * d
        st1[col] += lam if z != 0.0 else 0.0
        st2[col] += d * d
        st3[col] += x * x
        yrow[col] = z


@njit(inline="always")
def _start_objective_rows(code, params, afold, b_diag, r, y, work, p0, p1, c0, nc, f0):
    """Add the rows p0..p1-1 of F(X) per column to ``f0`` (see
    :func:`sweep_columns_with_objective`); ``work`` holds ``afold[P, p0:] @ X[p0:]``."""
    c1 = c0 + nc
    fsum = f0[0, c0:c1]
    hsum = f0[1, c0:c1]
    for j in range(p0, p1):
        wrow = work[j - p0]
        xrow = y[j, c0:c1]
        rrow = r[j, c0:c1]
        half_bc = 0.5 * (np.float64(b_diag[j]) - np.float64(afold[j, j]))
        lam = np.float64(params[j, 0])
        lb = np.float64(params[j, 1])
        ub = np.float64(params[j, 2])
        pexp = np.float64(params[j, 3])
        _add_objective_row(code, wrow, 1.0, half_bc, xrow, rrow, lam, lb, ub, pexp, fsum, hsum)


@njit(inline="always")
def zero_outputs(stats, f0, c0, c1, with_f0):
    """Zero the columns c0..c1-1 of a sweep's ``stats`` (and ``f0`` with ``with_f0``)."""
    for s in range(4):
        for col in range(c0, c1):
            stats[s, col] = 0.0
    if with_f0:
        for s in range(2):
            for col in range(c0, c1):
                f0[s, col] = 0.0


#: Column blocks of the BLAS-panel sweep (:func:`column_block`): the iterate's block
#: (n x block) and the panel's products (panel x block) together within about half of a
#: core's L2 cache, for n up to BLOCK_MAX_ROWS; at least BLOCK_MIN_COLUMNS columns a
#: block (the panel GEMMs stay wide).  Above BLOCK_MAX_ROWS one block: the GEMMs of
#: wider blocks run faster than the cache saves (docs/development.md, "The CPU sweep's
#: kernels").
BLOCK_BYTES = 1 << 18
BLOCK_MIN_COLUMNS = 512
BLOCK_MAX_ROWS = 256


@njit(inline="always")
def column_block(n, panel, itemsize, nc):
    """Columns of one block of the sweep over ``nc`` columns (see BLOCK_BYTES)."""
    if n > BLOCK_MAX_ROWS:
        return nc
    block = max(BLOCK_MIN_COLUMNS, BLOCK_BYTES // ((n + panel) * itemsize))
    return min(block, nc)


def _make_sweep(code):
    """The BLAS-panel sweep compiled for one penalty ``code`` (see :func:`sweep_for`).

    ``code`` is a constant of the compiled function (a closure variable): Numba drops the
    branches of the other codes, those choosing the row solve before it inlines them, the
    others (objective terms, ``prox_scalar``) after, so that only this code's loops are
    typed, lowered and optimised.  A sweep compiled for every code at once (``code`` an
    argument) was the largest compilation of a first call (docs/first_call.md); with the
    code a constant the loops of l1 and lp are also straight code (no test of the code
    per entry).
    """

    @njit(nogil=True)
    def sweep(afold, b_diag, params, r, y, c0_all, c1_all, panel, stats, f0, with_f0):
        n = y.shape[0]
        zero_outputs(stats, f0, c0_all, c1_all, with_f0)
        if c1_all <= c0_all:
            return
        # the columns in blocks whose iterate and panel products stay in cache (each
        # column's arithmetic is the same in any block: columns are independent problems)
        block = column_block(n, panel, y.itemsize, c1_all - c0_all)
        work_all = np.empty(panel * block, dtype=y.dtype)
        for c0 in range(c0_all, c1_all, block):
            c1 = min(c0 + block, c1_all)
            nc = c1 - c0
            ycols = y[:, c0:c1]
            work = work_all[: panel * nc].reshape((panel, nc))
            for p0 in range(0, n, panel):
                p1 = min(p0 + panel, n)
                m = p1 - p0
                if with_f0:
                    # the old rows from p0 on first: with C_jj x_j and the upper terms of A,
                    # they give F(X) of the rows of P (see sweep_columns_with_objective)
                    # before the new rows before p0 are added
                    gemm_rm(afold[p0:p1, p0:], ycols[p0:], work[:m], 0.0)
                    _start_objective_rows(
                        code, params, afold, b_diag, r, y, work, p0, p1, c0, nc, f0
                    )
                    gemm_rm(afold[p0:p1, :p0], ycols[:p0], work[:m], 1.0)
                else:
                    gemm_rm(afold[p0:p1], ycols, work[:m], 0.0)
                for s0 in range(p0, p1, SUB_PANEL):
                    s1 = min(s0 + SUB_PANEL, p1)
                    k = s0 - p0
                    if k > 0:
                        # left-looking: the rows of this sub-panel get A[S, p0:s0] @ Z[p0:s0]
                        # as one small GEMM (A[i, j] = afold[j, i] for j < i in the panel:
                        # afold's block above the diagonal, used transposed)
                        gemm_rm_at(afold[p0:s0, s0:s1], ycols[p0:s0], work[k : k + s1 - s0], 1.0)
                    for j in range(s0, s1):
                        yrow = y[j]
                        wrow = work[j - p0]
                        if code == CODE_BOX:
                            _solve_row_box(
                                j, wrow, yrow, r[j], c0, nc, b_diag, afold, params, stats
                            )
                        elif code == CODE_L0:
                            _solve_row_l0(j, wrow, yrow, r[j], c0, nc, b_diag, afold, params, stats)
                        else:
                            _solve_row_prox(
                                code, j, wrow, yrow, r[j], c0, nc, b_diag, afold, params, stats
                            )
                        # right-looking inside the sub-panel: rows i > j get A_ij z_j
                        zrow = yrow[c0:c1]
                        for i in range(j + 1, s1):
                            a_ij = afold[j, i]
                            if a_ij != 0.0:
                                wi = work[i - p0]
                                for col in range(nc):
                                    wi[col] += a_ij * zrow[col]

    return sweep


#: The sweep of each penalty code (:func:`_make_sweep`), compiled on first use.
SWEEPS = {code: _make_sweep(code) for code in (CODE_BOX, CODE_L1, CODE_L0, CODE_LP)}
_SWEEP_BOX, _SWEEP_L1, _SWEEP_L0, _SWEEP_LP = (
    SWEEPS[c] for c in (CODE_BOX, CODE_L1, CODE_L0, CODE_LP)
)


def sweep_for(code):
    """The compiled sweep of penalty ``code``:
    ``sweep(afold, b_diag, params, r, y, c0, c1, panel, stats, f0, with_f0)`` is
    :func:`sweep_columns` (``with_f0`` False, ``f0`` unused) or
    :func:`sweep_columns_with_objective` (``with_f0`` True)."""
    sweep = SWEEPS.get(int(code))
    if sweep is None:
        raise ValueError(f"unknown penalty code {code} (see penalties.PENALTY_CODES)")
    return sweep


@njit(inline="always")
def _sweep(afold, b_diag, code, params, r, y, c0, c1, panel, stats, f0, with_f0):
    """The sweep of ``code`` called from compiled code, where ``code`` is not a constant:
    every code's sweep is compiled in."""
    if code == CODE_BOX:
        _SWEEP_BOX(afold, b_diag, params, r, y, c0, c1, panel, stats, f0, with_f0)
    elif code == CODE_L1:
        _SWEEP_L1(afold, b_diag, params, r, y, c0, c1, panel, stats, f0, with_f0)
    elif code == CODE_L0:
        _SWEEP_L0(afold, b_diag, params, r, y, c0, c1, panel, stats, f0, with_f0)
    elif code == CODE_LP:
        _SWEEP_LP(afold, b_diag, params, r, y, c0, c1, panel, stats, f0, with_f0)
    else:
        raise ValueError("unknown penalty code (see penalties.PENALTY_CODES)")


@njit(nogil=True)
def sweep_columns(afold, b_diag, code, params, r, y, c0, c1, panel, stats):
    """One MSM iteration (paper, Algorithm 2) on the columns c0..c1-1 of ``y``, in place.

    Parameters
    ----------
    afold : (n, n) folded matrix: A with the strictly lower part of every diagonal
        panel block zeroed and the diagonal replaced by C_jj (docs/design.md, "CPU sweep"), so
        ``afold[P, :] @ Y`` is the whole off-panel part plus the old in-panel part.
        The in-panel lower entries A[k, j] (k > j) are read as afold[j, k] (symmetry).
    b_diag : (n,) B_jj.
    code, params : penalty table (penalties.py).
    r, y : (n, m) C-ordered linear term and iterate; the columns c0..c1-1 of y are
        overwritten with the new iterate, the other columns are not touched.
    panel : rows per panel T.
    stats : (4, m) float64; columns c0..c1-1 are overwritten with, per column,
        [0] sum_j 1/2 b (z^2 - x^2) + w (z - x) + 1/2 C_jj (z - x)^2
        [1] sum_j h(z_j)
        [2] ||z - x||^2
        [3] ||x||^2
        so that F(z) = F(x) + stats[0] + stats[1] - sum_j h(x_j)   (exact identity,
        see solvers/msm.py).

    ``code`` is an argument here: this kernel holds the sweep of every code; the
    backend calls the sweep of its code alone (:func:`sweep_for`).
    """
    _sweep(afold, b_diag, code, params, r, y, c0, c1, panel, stats, stats, False)


@njit(nogil=True)
def sweep_columns_with_objective(afold, b_diag, code, params, r, y, c0, c1, panel, stats, f0):
    """:func:`sweep_columns`, and F(X) of the iterate before the sweep per column, at no
    extra product: ``f0[0, c]`` = F_c, ``f0[1, c]`` = sum_j h(x_jc) (float64, columns
    c0..c1-1 overwritten; F = inf where an entry is outside dom h).

    The panel product is split, ``afold[P, p0:] @ X[p0:]`` (old rows only) first, so that
    row j of it is ``C_jj x_j + sum_{i>j} A_ji x_i`` and
    ``1/2 x'Ax = sum_j x_j (work_j + 1/2 (B_jj - C_jj) x_j)`` (A_jj = B_jj + C_jj), then
    ``afold[P, :p0] @ Z[:p0]`` is added: the same flops as the sweep's one product, so the
    start objective of a solve costs no GEMM of its own.
    """
    _sweep(afold, b_diag, code, params, r, y, c0, c1, panel, stats, f0, True)


@njit
def sweep_chunks(afold, b_diag, code, params, r_chunks, y_chunks, ncols, panel, stats):
    """:func:`sweep_columns` on K separate (n, c) chunks, serially (reference layout).

    ``r_chunks``/``y_chunks`` are (K, n, c), ``ncols`` (K,) the real columns of each chunk
    (the rest is padding, left as it is), ``stats`` (K, 4, c).
    """
    for k in range(y_chunks.shape[0]):
        sweep_columns(
            afold, b_diag, code, params, r_chunks[k], y_chunks[k], 0, ncols[k], panel, stats[k]
        )


# -- objective --------------------------------------------------------------------------


@njit(inline="always")
def h_scalar(code, x, lam, lb, ub, p):
    """h(x) for one entry (``penalties.penalty_value``): inf outside [lb, ub]."""
    if not (x >= lb and x <= ub):
        return np.inf
    if code == CODE_BOX:
        return 0.0
    if code == CODE_L1:
        return lam * abs(x)
    if code == CODE_L0:
        return lam if x != 0.0 else 0.0
    return lam * abs(x) ** p


@njit(inline="always")
def _add_objective_row(code, vrow, scale, curv, xrow, rrow, lam, lb, ub, p, fsum, hsum):
    """Add ``x (scale v + curv x + r) + h(x)`` to ``fsum`` and ``h(x)`` to ``hsum``, entry
    by entry over one row (float64 sums).

    One loop per penalty code with h as a select (inf outside [lb, ub]), so that the
    loops vectorise: through :func:`h_scalar`'s branches, or with the code test inside
    one loop (even as selects), the start objective costs a large part of the sweep
    (docs/development.md, "The CPU sweep's kernels").
    """
    nc = xrow.shape[0]
    if code == CODE_BOX:
        for col in range(nc):
            xv = np.float64(xrow[col])
            quad = xv * (scale * np.float64(vrow[col]) + curv * xv + np.float64(rrow[col]))
            hv = 0.0 if (xv >= lb) & (xv <= ub) else np.inf
            fsum[col] += quad + hv
            hsum[col] += hv
    elif code == CODE_L1:
        for col in range(nc):
            xv = np.float64(xrow[col])
            quad = xv * (scale * np.float64(vrow[col]) + curv * xv + np.float64(rrow[col]))
            hv = lam * abs(xv) if (xv >= lb) & (xv <= ub) else np.inf
            fsum[col] += quad + hv
            hsum[col] += hv
    elif code == CODE_L0:
        for col in range(nc):
            xv = np.float64(xrow[col])
            quad = xv * (scale * np.float64(vrow[col]) + curv * xv + np.float64(rrow[col]))
            hv = (lam if xv != 0.0 else 0.0) if (xv >= lb) & (xv <= ub) else np.inf
            fsum[col] += quad + hv
            hsum[col] += hv
    else:
        for col in range(nc):
            xv = np.float64(xrow[col])
            quad = xv * (scale * np.float64(vrow[col]) + curv * xv + np.float64(rrow[col]))
            hv = h_scalar(code, xv, lam, lb, ub, p)
            fsum[col] += quad + hv
            hsum[col] += hv


#: Rows of A per block of the objective's GEMM (the block of A X stays in cache).
OBJECTIVE_ROWS = 128


def _make_objective(code):
    """:func:`objective_columns` compiled for one penalty ``code`` (a constant, as in
    :func:`_make_sweep`)."""

    @njit(nogil=True)
    def objective(a, params, r, x, c0, c1, fun, hsum):
        n = x.shape[0]
        nc = c1 - c0
        for col in range(c0, c1):
            fun[col] = 0.0
            hsum[col] = 0.0
        if nc <= 0:
            return
        xcols = x[:, c0:c1]
        rows = min(OBJECTIVE_ROWS, n)
        ax = np.empty((rows, nc), dtype=x.dtype)
        for p0 in range(0, n, rows):
            p1 = min(p0 + rows, n)
            gemm_rm(a[p0:p1], xcols, ax[: p1 - p0], 0.0)
            for j in range(p0, p1):
                axrow = ax[j - p0]
                xrow = x[j, c0:c1]
                rrow = r[j, c0:c1]
                frow = fun[c0:c1]
                hrow = hsum[c0:c1]
                lam = np.float64(params[j, 0])
                lb = np.float64(params[j, 1])
                ub = np.float64(params[j, 2])
                pexp = np.float64(params[j, 3])
                _add_objective_row(code, axrow, 0.5, 0.0, xrow, rrow, lam, lb, ub, pexp, frow, hrow)

    return objective


#: The objective of each penalty code (:func:`_make_objective`), compiled on first use.
OBJECTIVES = {code: _make_objective(code) for code in (CODE_BOX, CODE_L1, CODE_L0, CODE_LP)}
_OBJECTIVE_BOX, _OBJECTIVE_L1, _OBJECTIVE_L0, _OBJECTIVE_LP = (
    OBJECTIVES[c] for c in (CODE_BOX, CODE_L1, CODE_L0, CODE_LP)
)


def objective_for(code):
    """The compiled objective of penalty ``code``:
    ``objective(a, params, r, x, c0, c1, fun, hsum)`` is :func:`objective_columns`."""
    objective = OBJECTIVES.get(int(code))
    if objective is None:
        raise ValueError(f"unknown penalty code {code} (see penalties.PENALTY_CODES)")
    return objective


@njit(nogil=True)
def objective_columns(a, code, params, r, x, c0, c1, fun, hsum):
    """Per column c of c0..c1-1: F_c = sum_j x_jc (1/2 (A x)_jc + r_jc) + h(x_jc), and
    sum_j h(x_jc), in float64, written to ``fun[c]``/``hsum[c]``.

    A x is formed a block of rows at a time (never as a whole n x m array), so the
    objective costs one GEMM of flops and one read of x and r.  ``code`` is an argument
    here (every code compiled in); the backend calls :func:`objective_for` ``(code)``.
    """
    if code == CODE_BOX:
        _OBJECTIVE_BOX(a, params, r, x, c0, c1, fun, hsum)
    elif code == CODE_L1:
        _OBJECTIVE_L1(a, params, r, x, c0, c1, fun, hsum)
    elif code == CODE_L0:
        _OBJECTIVE_L0(a, params, r, x, c0, c1, fun, hsum)
    else:
        _OBJECTIVE_LP(a, params, r, x, c0, c1, fun, hsum)


#: Entries :func:`all_zero` tests at a time.
ZERO_TEST_BLOCK = 1 << 15


def all_zero(x) -> bool:
    """True when every entry of the C-ordered array ``x`` is 0 (a NaN is not), testing
    blocks of ZERO_TEST_BLOCK entries until one is not.

    NumPy, not a kernel: nothing to compile on a first call, and faster on large arrays
    (a compiled loop that can stop at any entry is not vectorised; docs/first_call.md).
    """
    flat = x.reshape(-1)
    for start in range(0, flat.size, ZERO_TEST_BLOCK):
        if flat[start : start + ZERO_TEST_BLOCK].any():
            return False
    return True


# -- l0 sweeps on sparse iterates ----------------------------------------------------------


@njit(inline="always")
def _l0_column_sweeps(a, b_diag, thresh, rc, xc, g, n_sweeps):
    """``n_sweeps`` sparse l0 sweeps of one column (see :func:`l0_sparse_sweeps`): ``xc``
    (the iterate) in place, ``g`` a work vector."""
    n = a.shape[0]
    for i in range(n):
        g[i] = 0.0
    for i in range(n):
        xi = xc[i]
        if xi != 0.0:
            ai = a[i]
            for k in range(n):
                g[k] += ai[k] * xi
    for _ in range(n_sweeps):
        for j in range(n):
            xj = xc[j]
            b = b_diag[j]
            w = rc[j] + g[j] - b * xj
            z = -w / b if w * w > thresh[j] else 0.0
            if z != xj:
                step = z - xj
                aj = a[j]
                for k in range(n):
                    g[k] += aj[k] * step
                xc[j] = z


#: Columns gathered into contiguous buffers at a time by the sparse l0 kernels (one
#: cache line of float64 per row of the strided (n, m) arrays).
L0_BLOCK = 8


@njit(nogil=True)
def l0_sparse_sweeps(a, b_diag, lam, r, x, c0, c1, n_sweeps):
    """``n_sweeps`` MSM iterations of the unconstrained l0 problem on the columns c0..c1-1
    of ``x``, in place, at a cost that grows with the nonzeros of the iterate, not with n^2.

    The same iterates as :func:`sweep_columns` with the L0 penalty (no bounds), up to
    rounding.  Per column the sweep keeps ``g = A v``, v the iterate being built (new
    entries before row j, old ones from j on), so that row j's linear term is
    ``w_j = r_j + sum_{i<j} A_ji z_i + sum_{i>j} A_ji x_i + C_jj x_j = r_j + g_j - B_jj x_j``
    (C_jj = A_jj - B_jj), and updates g by ``A[:, j] (z_j - x_j)`` only where z_j != x_j.
    For L0 the prox keeps ``z_j = -w_j / B_jj`` iff ``w_j^2 > 2 lam B_jj`` (strict: tie
    -> 0).  A row of codes with a few atoms per column costs O(n) per column and sweep
    instead of the dense sweep's O(n^2).

    Parameters
    ----------
    a : (n, n) symmetric matrix A (row j is read as column j).
    b_diag : (n,) B_jj > 0.
    lam : float >= 0, the l0 weight of every row.
    r, x : (n, m) C-ordered linear term and iterate; the columns c0..c1-1 of x are
        overwritten, the others are not touched.
    n_sweeps : int
    """
    n = a.shape[0]
    g = np.empty(n, dtype=np.float64)
    thresh = np.empty(n, dtype=np.float64)
    for j in range(n):
        thresh[j] = 2.0 * lam * b_diag[j]
    xb = np.empty((L0_BLOCK, n), dtype=np.float64)
    rb = np.empty((L0_BLOCK, n), dtype=np.float64)
    for cb in range(c0, c1, L0_BLOCK):
        nb = min(L0_BLOCK, c1 - cb)
        for i in range(n):
            for q in range(nb):
                xb[q, i] = x[i, cb + q]
                rb[q, i] = r[i, cb + q]
        for q in range(nb):
            _l0_column_sweeps(a, b_diag, thresh, rb[q], xb[q], g, n_sweeps)
        for i in range(n):
            for q in range(nb):
                x[i, cb + q] = xb[q, i]
