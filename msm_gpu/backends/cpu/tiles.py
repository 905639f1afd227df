"""The CPU sweep as register tiles: the panel product without BLAS, packing or zero flops.

Same iterates and statistics as :func:`kernels.sweep_columns` (up to rounding), with
panels of ``TILE_ROWS`` = 8 rows and the matrix folded for that panel
(``fold_matrix(a, c_diag, TILE_ROWS)``).  The columns go in tiles of two SIMD vectors
(:func:`tile_columns`: 16 float64 or 32 float32 columns on AVX-512).  Per tile and panel,
one pass over k keeps the 8 x 2 vector accumulators of ``afold[P, :] @ Y[:, tile]`` in
registers (:func:`_product8`), reading Y straight from the iterate (an n x 16 float64
tile stays in L1 across the panels); then the 8 rows are solved (:func:`_solve_panel`).
For the box penalty (NNLS) with n a multiple of 8, tiles go in pairs and each panel's
solve runs between eighths of the other tile's product (:func:`_sweep_tile_pair_box`):
the solve's chain of dependent operations overlaps independent FMAs instead of waiting
alone (other penalties, with their branches per code, are solved after the product).

F(X) of the iterate before the sweep (``with_f0``, the first sweep of a solve) comes
from the same products, tile by tile: per panel the product is summed over the old rows
from p0 on first (that part also stored), whose row j is C_jj x_j + sum_{i>j} A_ji x_i,
then over the new rows before p0; the panel rows' terms of F are formed from the first
part in float64 vectors (float32 entries widened, :func:`_objective_panel`) while the
tile is in L1 (panel by panel across all tiles, as ``kernels`` does it, streamed Y from
L2/L3 every panel).

Why: BLAS panels pay the zeroed in-panel triangles (T/2n of the flops), small sub-panel
GEMMs, operand packing in every call and a per-row overhead; panels of 8 rows waste
little, and the 8 x 2 product runs at BLAS speed or better.  Used where measured faster
(:func:`use_tiles`); otherwise the BLAS panels of ``kernels``.  The measurements:
docs/development.md, "The CPU sweep's kernels".
"""

from __future__ import annotations

import numpy as np

from ...penalties import CODE_BOX, CODE_L0, CODE_L1
from .jit import njit
from .kernels import h_scalar, prox_scalar, zero_outputs
from .simd import (
    HOST_AVX512,
    VEC_BYTES,
    vabs,
    vadd,
    vdiv,
    vfma,
    vload,
    vload_wide,
    vmax,
    vmin,
    vmul,
    vselect_inside,
    vselect_lt,
    vsplat,
    vstore,
    vsub,
    vzero,
)

#: Rows of a panel (and of the register tile).
TILE_ROWS = 8
#: Rows n where the tiled sweep runs: A is read once per tile of columns, from L2 or L3.
#: In this range the tiles beat the BLAS panels whichever OpenBLAS kernels run; above it
#: the BLAS panels (docs/development.md, "The CPU sweep's kernels").
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
def _product8(afold, y, p0, t0, n, work, old, split, solving):
    """``work[0:8, 0:W] = afold[p0:p0+8, :] @ y[:, t0:t0+W]`` (W = 2 vectors); with
    ``split``, summed over k = p0..n-1 first, whose part alone is also stored to ``old``
    (the old rows' product, for F(X)), then over k = 0..p0-1.

    With ``solving`` = (b_diag, params, r, s_work, q, s_p0, s_t0) (box penalty, no
    split; None: nothing solved), the 8 rows s_p0.. of another tile (at column s_t0, its
    panel product in ``s_work``) are solved one by one between eighths of the loop over
    k (:func:`_box_row`, statistics into ``q``): a row's solve is a chain of
    dependent operations (in-panel terms, division, clamps, store) that the core overlaps
    with the product's independent FMAs.  (Solved after the product, as in
    :func:`_sweep_whole_tiles`' other loop, the rows' latency is paid in full; the
    iterates and statistics are the same.)

    The 8 x 2 tile of accumulators stays in registers through the loop over k, and from
    one part of the split to the other: per k, 2 loads of Y, 8 broadcasts of A, 16 FMAs
    (A read by index: a row view per panel costs its reference counting).  The column
    index is unsigned: from k = p0, which LLVM cannot prove >= 0, a signed index pays a
    negative-index wraparound per entry, whose registers spill the tile.  The split as
    two passes, the second reloading the first's sums from ``work``, was much dearer than
    keeping them in registers (docs/development.md, "The CPU sweep's kernels")."""
    L = VEC_BYTES // y.itemsize
    s00 = s01 = s10 = s11 = s20 = s21 = s30 = s31 = vzero(y)
    s40 = s41 = s50 = s51 = s60 = s61 = s70 = s71 = vzero(y)
    k0 = p0 if split else 0
    k1 = n
    for part in range(2 if split else 1):
        for eighth in range(TILE_ROWS):
            if solving is not None:
                _box_row(afold, y, solving, eighth)
            ka = k0 + eighth * (k1 - k0) // TILE_ROWS
            kb = k0 + (eighth + 1) * (k1 - k0) // TILE_ROWS
            for k in range(ka, kb):
                ku = np.uintp(k)
                y0 = vload(y, k, t0)
                y1 = vload(y, k, t0 + L)
                v = vsplat(y, afold[p0, ku])
                s00, s01 = vfma(v, y0, s00), vfma(v, y1, s01)
                v = vsplat(y, afold[p0 + 1, ku])
                s10, s11 = vfma(v, y0, s10), vfma(v, y1, s11)
                v = vsplat(y, afold[p0 + 2, ku])
                s20, s21 = vfma(v, y0, s20), vfma(v, y1, s21)
                v = vsplat(y, afold[p0 + 3, ku])
                s30, s31 = vfma(v, y0, s30), vfma(v, y1, s31)
                v = vsplat(y, afold[p0 + 4, ku])
                s40, s41 = vfma(v, y0, s40), vfma(v, y1, s41)
                v = vsplat(y, afold[p0 + 5, ku])
                s50, s51 = vfma(v, y0, s50), vfma(v, y1, s51)
                v = vsplat(y, afold[p0 + 6, ku])
                s60, s61 = vfma(v, y0, s60), vfma(v, y1, s61)
                v = vsplat(y, afold[p0 + 7, ku])
                s70, s71 = vfma(v, y0, s70), vfma(v, y1, s71)
        out = old if split and part == 0 else work
        vstore(out, 0, 0, s00)
        vstore(out, 0, L, s01)
        vstore(out, 1, 0, s10)
        vstore(out, 1, L, s11)
        vstore(out, 2, 0, s20)
        vstore(out, 2, L, s21)
        vstore(out, 3, 0, s30)
        vstore(out, 3, L, s31)
        vstore(out, 4, 0, s40)
        vstore(out, 4, L, s41)
        vstore(out, 5, 0, s50)
        vstore(out, 5, L, s51)
        vstore(out, 6, 0, s60)
        vstore(out, 6, L, s61)
        vstore(out, 7, 0, s70)
        vstore(out, 7, L, s71)
        k0, k1 = 0, p0


@njit(inline="always")
def _product_rows(afold, y, p0, rows, t0, n, work, old, split):
    """:func:`_product8` for any ``rows`` <= 8 (the last panel: one row at a time)."""
    if rows == TILE_ROWS:
        _product8(afold, y, p0, t0, n, work, old, split, None)
        return
    L = VEC_BYTES // y.itemsize
    for i in range(rows):
        s0 = s1 = vzero(y)
        k0 = p0 if split else 0
        k1 = n
        for part in range(2 if split else 1):
            for k in range(k0, k1):
                v = vsplat(y, afold[p0 + i, np.uintp(k)])
                s0 = vfma(v, vload(y, k, t0), s0)
                s1 = vfma(v, vload(y, k, t0 + L), s1)
            out = old if split and part == 0 else work
            vstore(out, i, 0, s0)
            vstore(out, i, L, s1)
            k0, k1 = 0, p0


@njit(inline="always")
def _box_pair(y, w0, w1, b, lb, ub):
    """A row's two vectors through the box prox: z = clip(-w / b, lb, ub) (eq. (9) with
    h the box's indicator); the same operations as ``kernels.prox_scalar``'s box."""
    neg_b, low, up = vsplat(y, -b), vsplat(y, lb), vsplat(y, ub)
    return vmin(vmax(vdiv(w0, neg_b), low), up), vmin(vmax(vdiv(w1, neg_b), low), up)


@njit(inline="always")
def _change_pair(y, b, c_jj, w0, w1, x0, x1, z0, z1):
    """d = z - x of a row's two vectors, and the quadratic part of F's change there,
    1/2 b (z^2 - x^2) + w d + 1/2 C_jj d^2 (A = B + C, B_jj = b; the row statistics)."""
    d0, d1 = vsub(z0, x0), vsub(z1, x1)
    half_bv, half_cv = vsplat(y, 0.5 * b), vsplat(y, 0.5 * c_jj)
    e0 = vadd(
        vadd(vmul(half_bv, vsub(vmul(z0, z0), vmul(x0, x0))), vmul(w0, d0)),
        vmul(vmul(half_cv, d0), d0),
    )
    e1 = vadd(
        vadd(vmul(half_bv, vsub(vmul(z1, z1), vmul(x1, x1))), vmul(w1, d1)),
        vmul(vmul(half_cv, d1), d1),
    )
    return d0, d1, e0, e1


@njit(inline="always")
def _solve_panel(code, afold, b_diag, params, r, y, work, wc, p0, rows, t0, stats, buf):
    """Solve the rows p0..p0+rows-1 of the tile at column t0 in place from their panel
    product in ``work[:, wc:wc+W]``; add their statistics (as ``kernels._solve_row``)
    to ``stats``.

    Row j's in-panel lower terms sum_{p0<=k<j} A_jk z_k are added left-looking from the
    rows already solved (A_jk = afold[k, j], folded above the diagonal).  Box, l1 and l0
    with 0 feasible are solved in vectors with ``_solve_row``'s formulas, the other
    penalties lane by lane through ``prox_scalar``.  The statistics are summed over the
    panel in the iterate's dtype, then added to the float64 totals; ``buf`` is a (4, W)
    scratch.  (Right-looking updates with the 8 rows kept in registers were slower.)"""
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
            z0, z1 = _box_pair(y, w0, w1, b, lb, ub)
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
            c0v, c1v = _box_pair(y, w0, w1, b, lb, ub)
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
        d0, d1, e0, e1 = _change_pair(y, b, afold[j, j], w0, w1, x0, x1, z0, z1)
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
    _add_panel_stats(buf, stats, t0, False)


@njit(inline="always")
def _box_row(afold, y, solving, jj):
    """Row s_p0 + jj of the tile at s_t0 (``solving``, see :func:`_product8`) for the box
    penalty: :func:`_solve_panel`'s box branch, the same operations in the same order;
    its statistics added to the panel's sums ``q`` (4, W)."""
    b_diag, params, r, work, q, p0, t0 = solving
    L = VEC_BYTES // y.itemsize
    j = p0 + jj
    ju = np.uintp(j)
    w0, w1 = vload(work, jj, 0), vload(work, jj, L)
    for k in range(p0, j):
        v = vsplat(y, afold[np.uintp(k), ju])
        w0 = vfma(v, vload(y, k, t0), w0)
        w1 = vfma(v, vload(y, k, t0 + L), w1)
    w0 = vadd(w0, vload(r, j, t0))
    w1 = vadd(w1, vload(r, j, t0 + L))
    x0, x1 = vload(y, j, t0), vload(y, j, t0 + L)
    b = b_diag[ju]
    z0, z1 = _box_pair(y, w0, w1, b, params[ju, 1], params[ju, 2])
    d0, d1, e0, e1 = _change_pair(y, b, afold[ju, ju], w0, w1, x0, x1, z0, z1)
    zero = vzero(y)  # h = 0 inside the box (added as _solve_panel adds it)
    vstore(q, 0, 0, vadd(vload(q, 0, 0), e0))
    vstore(q, 0, L, vadd(vload(q, 0, L), e1))
    vstore(q, 1, 0, vadd(vload(q, 1, 0), zero))
    vstore(q, 1, L, vadd(vload(q, 1, L), zero))
    vstore(q, 2, 0, vfma(d0, d0, vload(q, 2, 0)))
    vstore(q, 2, L, vfma(d1, d1, vload(q, 2, L)))
    vstore(q, 3, 0, vfma(x0, x0, vload(q, 3, 0)))
    vstore(q, 3, L, vfma(x1, x1, vload(q, 3, L)))
    vstore(y, j, t0, z0)
    vstore(y, j, t0 + L, z1)


@njit(inline="always")
def _add_panel_stats(q, stats, t0, clear):
    """``stats[:, t0:t0+W] += q`` (a panel's sums, float64 totals); then ``q = 0`` with
    ``clear`` (sums accumulated in q, :func:`_box_row`)."""
    W = q.shape[1]
    for s in range(4):
        for w in range(0, W, VEC_BYTES // 8):
            vstore(stats, s, t0 + w, vadd(vload(stats, s, t0 + w), vload_wide(q, s, w)))
    if clear:
        zero = vzero(q)
        for s in range(4):
            for w in range(0, W, VEC_BYTES // q.itemsize):
                vstore(q, s, w, zero)


@njit
def _sweep_tile_pair_box(afold, b_diag, params, r, y, ta, tb, n, work_a, work_b, qa, qb, stats):
    """Both tiles at columns ta and tb (box penalty, n a multiple of TILE_ROWS) in lock
    step: each panel's product of one tile runs while the other tile's panel is solved
    (:func:`_product8`), so no solve waits alone; the same iterates and statistics as
    sweeping them one after the other."""
    _product8(afold, y, 0, ta, n, work_a, work_a, False, None)
    for p0 in range(0, n, TILE_ROWS):
        solve_a = (b_diag, params, r, work_a, qa, p0, ta)
        _product8(afold, y, p0, tb, n, work_b, work_b, False, solve_a)
        _add_panel_stats(qa, stats, ta, True)
        solve_b = (b_diag, params, r, work_b, qb, p0, tb)
        if p0 + TILE_ROWS < n:
            _product8(afold, y, p0 + TILE_ROWS, ta, n, work_a, work_a, False, solve_b)
        else:
            for jj in range(TILE_ROWS):
                _box_row(afold, y, solve_b, jj)
        _add_panel_stats(qb, stats, tb, True)


@njit(inline="always")
def _objective_lanes(code, x, v, r, h_other, row):
    """(x (v + curv x + r) + h(x), h(x)) lane by lane, for float64 vectors x, v, r and
    ``row`` = (curv, lam, lb, ub): the terms of
    ``kernels._add_objective_row(code, v, 1.0, curv, ...)``, the same operations in
    the same order.

    h as selects (inf outside [lb, ub] or where x is NaN) for box, l1 and l0; for the
    other penalties ``h_other``, computed lane by lane by the caller.  (Vectors and
    scalars only: an array argument of an inlined function that branches on ``code``
    costs a reference count increment and decrement per call, calls that spill every
    vector register.)"""
    curv, lam, lb, ub = row
    quad = vmul(x, vadd(vadd(v, vmul(vsplat(x, curv), x)), r))
    inf, zero = vsplat(x, np.inf), vzero(x)
    low, up = vsplat(x, lb), vsplat(x, ub)
    if code == CODE_BOX:
        h = vselect_inside(x, low, up, zero, inf)
    elif code == CODE_L1:
        h = vselect_inside(x, low, up, vmul(vsplat(x, lam), vabs(x)), inf)
    elif code == CODE_L0:
        h = vselect_inside(x, low, up, vselect_lt(zero, vabs(x), vsplat(x, lam), zero), inf)
    else:
        h = h_other
    return vadd(quad, h), h


@njit(inline="always")
def _objective_piece(code, y, r, old, scratch, jj, j, t0, q, row):
    """:func:`_objective_lanes` on the q-th float64 vector of lanes of the tile at column
    t0: x = y[j], v = old[jj], r = r[j] (``scratch[1]``: h for the other penalties)."""
    w = q * (VEC_BYTES // 8)
    x, v = vload_wide(y, j, t0 + w), vload_wide(old, jj, w)
    return _objective_lanes(code, x, v, vload_wide(r, j, t0 + w), vload(scratch, 1, w), row)


@njit(literal_calls=True)  # a version per literal code (see the docstring)
def _objective_panel(code, y, r, params, old, rowc, scratch, p0, rows, t0, sums):
    """``sums`` (fsum, hsum of the tile's lanes: 4 + 4 float64 vectors, the last 2 + 2
    unused for float64 tiles) plus the terms of F(X) of the rows p0..p0+rows-1 of the tile
    at column t0, from ``old[jj]`` = the product of the old rows from p0 on and
    ``rowc[j]`` = (curv, lam, lb, ub) (float64).

    Called with ``code`` a literal where h is vectorised: Numba compiles a version per
    code, with the branches on it folded away (branching per vector of lanes made the
    objective much slower), and LLVM inlines it.  Not ``inline="always"``: Numba's
    inlining wraps the array arguments in reference counting that the caller's branch on
    ``code`` keeps from being pruned, atomic calls per panel that spill every vector
    register (docs/development.md, "The CPU sweep's kernels")."""
    L64 = VEC_BYTES // 8
    W = 2 * (VEC_BYTES // y.itemsize)
    fs0, fs1, fs2, fs3, hs0, hs1, hs2, hs3 = sums
    for jj in range(rows):
        j = p0 + jj
        row = (rowc[j, 0], rowc[j, 1], rowc[j, 2], rowc[j, 3])
        if code != CODE_BOX and code != CODE_L1 and code != CODE_L0:
            pexp = np.float64(params[j, 3])
            for col in range(W):
                xv = np.float64(y[j, t0 + col])
                scratch[1, col] = h_scalar(code, xv, row[1], row[2], row[3], pexp)
        f, h = _objective_piece(code, y, r, old, scratch, jj, j, t0, 0, row)
        fs0, hs0 = vadd(fs0, f), vadd(hs0, h)
        f, h = _objective_piece(code, y, r, old, scratch, jj, j, t0, 1, row)
        fs1, hs1 = vadd(fs1, f), vadd(hs1, h)
        if W > 2 * L64:  # float32 tiles: 4 float64 vectors of lanes
            f, h = _objective_piece(code, y, r, old, scratch, jj, j, t0, 2, row)
            fs2, hs2 = vadd(fs2, f), vadd(hs2, h)
            f, h = _objective_piece(code, y, r, old, scratch, jj, j, t0, 3, row)
            fs3, hs3 = vadd(fs3, f), vadd(hs3, h)
    return fs0, fs1, fs2, fs3, hs0, hs1, hs2, hs3


@njit(nogil=True)
def sweep_tiles(afold, b_diag, code, params, r, y, c0, c1, stats, f0, with_f0):
    """One MSM iteration on the columns c0..c1-1 of ``y`` in place, as
    ``kernels.sweep_columns`` (``with_f0``: as ``sweep_columns_with_objective``, F(X)
    of the iterate before the sweep into ``f0``), with ``afold`` folded for panels of
    ``TILE_ROWS`` rows.  Columns past the last whole tile are swept as one tile padded
    with zero columns (through kernels' BLAS panels they cost far more than their share
    of the sweep)."""
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
    work = np.empty((TILE_ROWS, W), dtype=y.dtype)
    if not with_f0:
        if code == CODE_BOX and n % TILE_ROWS == 0:  # tiles in pairs, solves overlapped
            work_b = np.empty((TILE_ROWS, W), dtype=y.dtype)
            qa = np.zeros((4, W), dtype=y.dtype)
            qb = np.zeros((4, W), dtype=y.dtype)
            t_pairs = c0 + (c1 - c0) // (2 * W) * (2 * W)
            for ta in range(c0, t_pairs, 2 * W):
                _sweep_tile_pair_box(
                    afold, b_diag, params, r, y, ta, ta + W, n, work, work_b, qa, qb, stats
                )
            c0 = t_pairs
        for t0 in range(c0, c1, W):
            for p0 in range(0, n, TILE_ROWS):
                rows = min(TILE_ROWS, n - p0)
                _product_rows(afold, y, p0, rows, t0, n, work, work, False)
                _solve_panel(code, afold, b_diag, params, r, y, work, 0, p0, rows, t0, stats, buf)
        return
    # F(X) of the iterate before the sweep, tile by tile as the plain sweep: per panel the
    # product of the old rows from p0 on first, whose row j is C_jj x_j + sum_{i>j} A_ji x_i
    # (as in kernels._sweep), gives the panel rows' terms of F; then the new rows
    # before p0 are added and the panel is solved.  The terms are summed in float64
    # vectors over the tile's panels (2 of them for float64 tiles, 4 for float32 ones,
    # whose entries are widened) and added to f0 once per tile.
    L64 = VEC_BYTES // 8
    scratch = np.zeros((2, W), dtype=np.float64)
    old = np.empty((TILE_ROWS, W), dtype=y.dtype)  # the panel's product of the old rows
    rowc = np.empty((n, 4), dtype=np.float64)  # per row: curv, lam, lb, ub
    for j in range(n):
        rowc[j, 0] = 0.5 * (np.float64(b_diag[j]) - np.float64(afold[j, j]))
        for s in range(3):
            rowc[j, 1 + s] = np.float64(params[j, s])
    for t0 in range(c0, c1, W):
        zero = vzero(scratch)
        sums = (zero, zero, zero, zero, zero, zero, zero, zero)
        for p0 in range(0, n, TILE_ROWS):
            rows = min(TILE_ROWS, n - p0)
            _product_rows(afold, y, p0, rows, t0, n, work, old, True)
            if code == CODE_BOX:
                sums = _objective_panel(
                    CODE_BOX, y, r, params, old, rowc, scratch, p0, rows, t0, sums
                )
            elif code == CODE_L1:
                sums = _objective_panel(
                    CODE_L1, y, r, params, old, rowc, scratch, p0, rows, t0, sums
                )
            elif code == CODE_L0:
                sums = _objective_panel(
                    CODE_L0, y, r, params, old, rowc, scratch, p0, rows, t0, sums
                )
            else:
                sums = _objective_panel(code, y, r, params, old, rowc, scratch, p0, rows, t0, sums)
            _solve_panel(code, afold, b_diag, params, r, y, work, 0, p0, rows, t0, stats, buf)
        for q in range(W // L64):
            vstore(scratch, 0, q * L64, sums[q])
            vstore(scratch, 1, q * L64, sums[4 + q])
        for s in range(2):
            for col in range(W):
                f0[s, t0 + col] += scratch[s, col]
