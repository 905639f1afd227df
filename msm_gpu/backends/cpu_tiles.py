"""The CPU sweep as register tiles: the panel product without BLAS, packing or zero flops.

Same iterates and statistics as :func:`cpu_kernels.sweep_columns` (up to rounding), with
panels of ``TILE_ROWS`` = 8 rows and the matrix folded for that panel
(``fold_matrix(a, c_diag, TILE_ROWS)``).  The columns go in tiles of two SIMD vectors
(:func:`tile_columns`: 16 float64 or 32 float32 columns on AVX-512).  Per tile and panel,
one pass over k keeps the 8 x 2 vector accumulators of ``afold[P, :] @ Y[:, tile]`` in
registers (:func:`_product8`), reading Y straight from the iterate (an n x 16 float64
tile stays in L1 across the panels); then the 8 rows are solved (:func:`_solve_panel`).

Why: with BLAS panels of 64 rows a sweep at 200 x 1000 cost 1.5 (float64) and 1.8
(float32) one-thread GEMMs: the zeroed in-panel triangles (T/2n of the flops), small
sub-panel GEMMs, operand packing in every call and ~100 ns of per-row overhead.  Panels
of 8 rows waste 2% of the flops, and the product alone runs in 0.48 of NumPy's GEMM on
this project's AVX-512 VMs, whose environment pins OpenBLAS to its Haswell (AVX2) kernels
(OPENBLAS_CORETYPE); the same 8 x 2 kernel timed alone against OpenBLAS's own AVX-512
kernels: 0.85 (float64) and 0.96 (float32).  Used where measured faster
(:func:`use_tiles`); otherwise the BLAS panels of ``cpu_kernels``.
"""

from __future__ import annotations

import numpy as np

from ..penalties import CODE_BOX, CODE_L0, CODE_L1
from .cpu_kernels import _start_objective_rows, prox_scalar, zero_outputs
from .jit import njit
from .simd import (
    HOST_AVX512,
    VEC_BYTES,
    vabs,
    vadd,
    vdiv,
    vfma,
    vload,
    vmax,
    vmin,
    vmul,
    vselect_lt,
    vsplat,
    vstore,
    vsub,
    vzero,
)

#: Rows of a panel (and of the register tile).
TILE_ROWS = 8
#: Rows n where the tiled sweep runs: A is read once per tile of columns, from L2 or L3.
#: One thread, sweep / GEMM, BLAS panels vs tiles, with OpenBLAS on its Haswell kernels
#: (as this project's VMs set it) and on its own AVX-512 ones: n = 16 f64 2.7 vs 3.1;
#: n = 32 2.5 vs 2.2; n = 200 1.5 vs 0.83 and 1.52 vs 1.39 (f32 1.8 vs 0.89, 2.0 vs
#: 1.5); n = 512 1.27 vs 0.67 and 1.31 vs 1.12; n = 1000 1.26 vs 0.97 but 1.21 vs 1.61
#: with OpenBLAS's AVX-512 kernels (f32 1.41 vs 1.77): above 512 the BLAS panels.
TILE_MIN_ROWS = 32
TILE_MAX_ROWS = 512


def tile_columns(itemsize: int) -> int:
    """Columns of a tile: two SIMD vectors."""
    return 2 * VEC_BYTES // int(itemsize)


def use_tiles(n: int) -> bool:
    """True where the tiled sweep was measured faster than the BLAS panels whichever
    OpenBLAS kernels run: an AVX-512 host and TILE_MIN_ROWS <= n <= TILE_MAX_ROWS
    (float64 and float32 alike)."""
    return HOST_AVX512 and TILE_MIN_ROWS <= n <= TILE_MAX_ROWS


@njit(inline="always")
def _product8(afold, y, p0, t0, k0, k1, work, wc, accumulate):
    """``work[0:8, wc:wc+W] (+)= afold[p0:p0+8, k0:k1] @ y[k0:k1, t0:t0+W]`` (W = 2
    vectors).

    The 8 x 2 tile of accumulators stays in registers through the loop over k: per k, 2
    loads of Y, 8 broadcasts of A, 16 FMAs (A read by index: a row view per panel costs
    its reference counting)."""
    L = VEC_BYTES // y.itemsize
    if accumulate:
        s00, s01 = vload(work, 0, wc), vload(work, 0, wc + L)
        s10, s11 = vload(work, 1, wc), vload(work, 1, wc + L)
        s20, s21 = vload(work, 2, wc), vload(work, 2, wc + L)
        s30, s31 = vload(work, 3, wc), vload(work, 3, wc + L)
        s40, s41 = vload(work, 4, wc), vload(work, 4, wc + L)
        s50, s51 = vload(work, 5, wc), vload(work, 5, wc + L)
        s60, s61 = vload(work, 6, wc), vload(work, 6, wc + L)
        s70, s71 = vload(work, 7, wc), vload(work, 7, wc + L)
    else:
        s00 = s01 = s10 = s11 = s20 = s21 = s30 = s31 = vzero(y)
        s40 = s41 = s50 = s51 = s60 = s61 = s70 = s71 = vzero(y)
    for k in range(k0, k1):
        y0 = vload(y, k, t0)
        y1 = vload(y, k, t0 + L)
        v = vsplat(y, afold[p0, k])
        s00, s01 = vfma(v, y0, s00), vfma(v, y1, s01)
        v = vsplat(y, afold[p0 + 1, k])
        s10, s11 = vfma(v, y0, s10), vfma(v, y1, s11)
        v = vsplat(y, afold[p0 + 2, k])
        s20, s21 = vfma(v, y0, s20), vfma(v, y1, s21)
        v = vsplat(y, afold[p0 + 3, k])
        s30, s31 = vfma(v, y0, s30), vfma(v, y1, s31)
        v = vsplat(y, afold[p0 + 4, k])
        s40, s41 = vfma(v, y0, s40), vfma(v, y1, s41)
        v = vsplat(y, afold[p0 + 5, k])
        s50, s51 = vfma(v, y0, s50), vfma(v, y1, s51)
        v = vsplat(y, afold[p0 + 6, k])
        s60, s61 = vfma(v, y0, s60), vfma(v, y1, s61)
        v = vsplat(y, afold[p0 + 7, k])
        s70, s71 = vfma(v, y0, s70), vfma(v, y1, s71)
    vstore(work, 0, wc, s00)
    vstore(work, 0, wc + L, s01)
    vstore(work, 1, wc, s10)
    vstore(work, 1, wc + L, s11)
    vstore(work, 2, wc, s20)
    vstore(work, 2, wc + L, s21)
    vstore(work, 3, wc, s30)
    vstore(work, 3, wc + L, s31)
    vstore(work, 4, wc, s40)
    vstore(work, 4, wc + L, s41)
    vstore(work, 5, wc, s50)
    vstore(work, 5, wc + L, s51)
    vstore(work, 6, wc, s60)
    vstore(work, 6, wc + L, s61)
    vstore(work, 7, wc, s70)
    vstore(work, 7, wc + L, s71)


@njit(inline="always")
def _product_rows(afold, y, p0, rows, t0, k0, k1, work, wc, accumulate):
    """:func:`_product8` for any ``rows`` <= 8 (the last panel: one row at a time)."""
    if rows == TILE_ROWS:
        _product8(afold, y, p0, t0, k0, k1, work, wc, accumulate)
        return
    L = VEC_BYTES // y.itemsize
    for i in range(rows):
        if accumulate:
            s0, s1 = vload(work, i, wc), vload(work, i, wc + L)
        else:
            s0 = s1 = vzero(y)
        for k in range(k0, k1):
            v = vsplat(y, afold[p0 + i, k])
            s0 = vfma(v, vload(y, k, t0), s0)
            s1 = vfma(v, vload(y, k, t0 + L), s1)
        vstore(work, i, wc, s0)
        vstore(work, i, wc + L, s1)


@njit(inline="always")
def _solve_panel(code, afold, b_diag, params, r, y, work, wc, p0, rows, t0, stats, buf):
    """Solve the rows p0..p0+rows-1 of the tile at column t0 in place from their panel
    product in ``work[:, wc:wc+W]``; add their statistics (as ``cpu_kernels._solve_row``)
    to ``stats``.

    Row j's in-panel lower terms sum_{p0<=k<j} A_jk z_k are added left-looking from the
    rows already solved (A_jk = afold[k, j], folded above the diagonal).  Box, l1 and l0
    with 0 feasible are solved in vectors with ``_solve_row``'s formulas, the other
    penalties lane by lane through ``prox_scalar``.  The statistics are summed over the
    panel in the iterate's dtype, then added to the float64 totals; ``buf`` is a (4, W)
    scratch.  (Right-looking updates with the 8 rows kept in registers measured 3-11%
    slower.)"""
    L = VEC_BYTES // y.itemsize
    W = 2 * L
    q00 = q01 = q10 = q11 = q20 = q21 = q30 = q31 = vzero(y)
    for jj in range(rows):
        j = p0 + jj
        w0, w1 = vload(work, jj, wc), vload(work, jj, wc + L)
        for k in range(p0, j):
            v = vsplat(y, afold[k, j])
            w0 = vfma(v, vload(y, k, t0), w0)
            w1 = vfma(v, vload(y, k, t0 + L), w1)
        w0 = vadd(w0, vload(r, j, t0))
        w1 = vadd(w1, vload(r, j, t0 + L))
        x0, x1 = vload(y, j, t0), vload(y, j, t0 + L)
        b = b_diag[j]
        lam, lb, ub = params[j, 0], params[j, 1], params[j, 2]
        neg_b, low, up = vsplat(y, -b), vsplat(y, lb), vsplat(y, ub)
        zero = vzero(y)
        if code == CODE_BOX:
            z0 = vmin(vmax(vdiv(w0, neg_b), low), up)
            z1 = vmin(vmax(vdiv(w1, neg_b), low), up)
            h0 = h1 = zero
        elif code == CODE_L1:
            a0, a1 = vdiv(w0, neg_b), vdiv(w1, neg_b)
            shrink = vsplat(y, lam / b)
            m0, m1 = vsub(vabs(a0), shrink), vsub(vabs(a1), shrink)
            t0v = vselect_lt(zero, m0, vselect_lt(zero, a0, m0, vsub(zero, m0)), zero)
            t1v = vselect_lt(zero, m1, vselect_lt(zero, a1, m1, vsub(zero, m1)), zero)
            z0, z1 = vmin(vmax(t0v, low), up), vmin(vmax(t1v, low), up)
            lamv = vsplat(y, lam)
            h0, h1 = vmul(lamv, vabs(z0)), vmul(lamv, vabs(z1))
        elif code == CODE_L0 and lb <= 0.0 and ub >= 0.0:
            c0v = vmin(vmax(vdiv(w0, neg_b), low), up)
            c1v = vmin(vmax(vdiv(w1, neg_b), low), up)
            half_b, lamv = vsplat(y, 0.5 * b), vsplat(y, lam)
            # keep c iff 1/2 b c^2 + w c + lam < 0 (strict: tie -> 0)
            g0 = vadd(vadd(vmul(vmul(half_b, c0v), c0v), vmul(w0, c0v)), lamv)
            g1 = vadd(vadd(vmul(vmul(half_b, c1v), c1v), vmul(w1, c1v)), lamv)
            z0, z1 = vselect_lt(g0, zero, c0v, zero), vselect_lt(g1, zero, c1v, zero)
            h0 = vselect_lt(zero, vabs(z0), lamv, zero)
            h1 = vselect_lt(zero, vabs(z1), lamv, zero)
        else:
            vstore(work, jj, wc, w0)
            vstore(work, jj, wc + L, w1)
            pexp = params[j, 3]
            for col in range(W):
                z, hz = prox_scalar(code, work[jj, wc + col], b, lam, lb, ub, pexp)
                work[jj, wc + col] = z
                buf[1, col] = hz
            z0, z1 = vload(work, jj, wc), vload(work, jj, wc + L)
            h0, h1 = vload(buf, 1, 0), vload(buf, 1, L)
        d0, d1 = vsub(z0, x0), vsub(z1, x1)
        half_bv, half_cv = vsplat(y, 0.5 * b), vsplat(y, 0.5 * afold[j, j])  # C_jj
        # 1/2 b (z^2 - x^2) + w d + 1/2 C_jj d^2
        e0 = vadd(
            vadd(vmul(half_bv, vsub(vmul(z0, z0), vmul(x0, x0))), vmul(w0, d0)),
            vmul(vmul(half_cv, d0), d0),
        )
        e1 = vadd(
            vadd(vmul(half_bv, vsub(vmul(z1, z1), vmul(x1, x1))), vmul(w1, d1)),
            vmul(vmul(half_cv, d1), d1),
        )
        q00, q01 = vadd(q00, e0), vadd(q01, e1)
        q10, q11 = vadd(q10, h0), vadd(q11, h1)
        q20, q21 = vfma(d0, d0, q20), vfma(d1, d1, q21)
        q30, q31 = vfma(x0, x0, q30), vfma(x1, x1, q31)
        vstore(y, j, t0, z0)
        vstore(y, j, t0 + L, z1)
    vstore(buf, 0, 0, q00)
    vstore(buf, 0, L, q01)
    vstore(buf, 1, 0, q10)
    vstore(buf, 1, L, q11)
    vstore(buf, 2, 0, q20)
    vstore(buf, 2, L, q21)
    vstore(buf, 3, 0, q30)
    vstore(buf, 3, L, q31)
    for s in range(4):
        for col in range(W):
            stats[s, t0 + col] += buf[s, col]


@njit(nogil=True)
def sweep_tiles(afold, b_diag, code, params, r, y, c0, c1, stats, f0, with_f0):
    """One MSM iteration on the columns c0..c1-1 of ``y`` in place, as
    ``cpu_kernels.sweep_columns`` (``with_f0``: as ``sweep_columns_with_objective``, F(X)
    of the iterate before the sweep into ``f0``), with ``afold`` folded for panels of
    ``TILE_ROWS`` rows.  Columns past the last whole tile are swept as one tile padded
    with zero columns (through cpu_kernels' BLAS panels they cost about 10% of a 200 x
    1000 sweep for its last 8 columns)."""
    W = 2 * (VEC_BYTES // y.itemsize)
    zero_outputs(stats, f0, c0, c1, with_f0)
    t_end = c0 + (c1 - c0) // W * W
    _sweep_whole_tiles(afold, b_diag, code, params, r, y, c0, t_end, stats, f0, with_f0)
    if t_end < c1:
        n, k = y.shape[0], c1 - t_end
        y_pad = np.zeros((n, W), dtype=y.dtype)
        r_pad = np.zeros((n, W), dtype=r.dtype)
        y_pad[:, :k] = y[:, t_end:c1]
        r_pad[:, :k] = r[:, t_end:c1]
        stats_pad = np.zeros((stats.shape[0], W), dtype=stats.dtype)
        f0_pad = np.zeros((f0.shape[0], W), dtype=f0.dtype)
        _sweep_whole_tiles(
            afold, b_diag, code, params, r_pad, y_pad, 0, W, stats_pad, f0_pad, with_f0
        )
        y[:, t_end:c1] = y_pad[:, :k]
        stats[:, t_end:c1] = stats_pad[:, :k]
        if with_f0:
            f0[:, t_end:c1] = f0_pad[:, :k]


@njit(nogil=True)
def _sweep_whole_tiles(afold, b_diag, code, params, r, y, c0, c1, stats, f0, with_f0):
    """:func:`sweep_tiles` on c0..c1-1, a whole number of tiles, outputs zeroed."""
    n = y.shape[0]
    W = 2 * (VEC_BYTES // y.itemsize)
    if c1 <= c0:
        return
    buf = np.empty((4, W), dtype=y.dtype)  # scratch of _solve_panel
    if with_f0:
        # panel by panel across all tiles: the products of the old rows from p0 on give
        # F(X) of the panel's rows (as in cpu_kernels._sweep) for the whole range at once
        work = np.empty((TILE_ROWS, c1 - c0), dtype=y.dtype)
        for p0 in range(0, n, TILE_ROWS):
            rows = min(TILE_ROWS, n - p0)
            for t0 in range(c0, c1, W):
                _product_rows(afold, y, p0, rows, t0, p0, n, work, t0 - c0, False)
            _start_objective_rows(
                code, params, afold, b_diag, r, y, work, p0, p0 + rows, c0, c1 - c0, f0
            )
            for t0 in range(c0, c1, W):
                wc = t0 - c0
                _product_rows(afold, y, p0, rows, t0, 0, p0, work, wc, True)
                _solve_panel(code, afold, b_diag, params, r, y, work, wc, p0, rows, t0, stats, buf)
    else:
        work = np.empty((TILE_ROWS, W), dtype=y.dtype)
        for t0 in range(c0, c1, W):
            for p0 in range(0, n, TILE_ROWS):
                rows = min(TILE_ROWS, n - p0)
                _product_rows(afold, y, p0, rows, t0, 0, n, work, 0, False)
                _solve_panel(code, afold, b_diag, params, r, y, work, 0, p0, rows, t0, stats, buf)
