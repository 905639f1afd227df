"""NNLS faces solved from C where the Gram form is ill-conditioned.

The host active set (:mod:`msm_gpu.solvers.nnls_columns`) solves every face from
G = C'C: its error is cond(C_F)^2 eps, which on a near-singular design (overlapping
spectral peaks: cond(C'C) 1e14 and beyond) leaves F up to 1e-5 relative above the answer
SciPy's ``nnls`` finds with Householder QR on C (error cond(C_F) eps).  Where C is at hand
(least squares, a host C) and G is ill-conditioned, :func:`polish_from_design` runs
Lawson & Hanson's active set on C itself, with a Householder QR of C[:, F] per face
solve (SciPy's method), started from the Gram answer's free set F, so that it usually
takes one face solve and one gradient check per column; the polished point is kept
where its F, from the residual, is not higher.
"""

from __future__ import annotations

import math

import numpy as np

from ..backends.cpu.jit import njit
from ..backends.cpu.threads import column_ranges, run_ranges, sweep_threads, thread_cap

#: G = C'C (equilibrated) is polished from C above this condition number
#: ||G||_1 ||G^{-1}||_1, or where G is numerically singular.  On Gaussian-peak libraries
#: (300 x 60, noise 1e-3) the Gram form's answers stayed within 1e-13 of SciPy's F up to
#: cond(G) ~ 3e16 and failed only where G's Cholesky factor did (the libraries of
#: tests/test_ill_conditioned.py); the polish costs about a SciPy loop, so it runs only there.
POLISH_COND = 1e15
EPS = float(np.finfo(np.float64).eps)
#: Reassociation lets LLVM vectorise the dot products of the QR and the gradient.
FAST = {"reassoc", "contract"}
#: Columns of D converted to float64 at a time: bounds the extra memory.
BLOCK_ENTRIES = 1 << 22
#: A variable off the free set joins it while its negative gradient C'(d - C x) exceeds
#: KKT_TOL ||c_j|| ||d||: a few rounding units of that gradient.  Not more: along a
#: near-dependent column a gradient of 1e-13 still lowers F by 1e-6 relative; a join
#: that only rounding suggests is refused by Lawson & Hanson's test or by F not dropping.
KKT_TOL = 1e-15
#: Face solves a column's polish may take: MAX_FACE_SOLVES[0] n + MAX_FACE_SOLVES[1]
#: (started from the Gram answer's face it usually takes one).  A column that needs
#: more is reported unconverged: its Gram answer is not known to be exact.
MAX_FACE_SOLVES = (5, 30)
#: A sparse C is densified for the QR (m x n floats, and one m x n work array per
#: thread): above this many bytes the polish is skipped and ``info`` says so.
DENSE_COPY_MAX_BYTES = 2**30


def needs_polish(design, cond) -> bool:
    """Whether the Gram-form answer of an NNLS problem should be polished from C: C at
    hand and G's condition number ``cond`` above :data:`POLISH_COND`."""
    return design is not None and cond > POLISH_COND


def why_not_polished(design) -> str | None:
    """Why an ill-conditioned Gram answer cannot be polished from C (None: it can): C on
    a GPU (the QR runs on the host), or a sparse C whose dense copy would be too large."""
    if design.c_kind.on_device:
        return "C is on the GPU: the QR polish runs on the host only"
    m, n = design.c.shape
    if design.c_kind.sparse and 8 * m * n > DENSE_COPY_MAX_BYTES:
        return f"a dense copy of the sparse C ({m} x {n}) would exceed {DENSE_COPY_MAX_BYTES} bytes"
    return None


def polish_from_design(design, x, threads=None):
    """x (n x r, internal units, host float64) polished column by column from C.

    Every column is polished: on an ill-conditioned G no estimate formed from G tells which
    faces are accurate (G's small eigenvalues are rounding noise), and a polish that finds
    the Gram answer optimal costs one QR of C[:, F] and one gradient.  Returns the polished
    x (a new array), the number of columns whose F it lowered, and a mask of the columns
    whose polish did not meet the KKT conditions within :data:`MAX_FACE_SOLVES`.
    """
    c = design._c64
    c = np.asfortranarray(c.toarray() if hasattr(c, "toarray") else c)  # columns read often
    n, r = x.shape
    out = np.array(x, dtype=np.float64, order="F", copy=True)
    changed = np.zeros(r, dtype=np.bool_)
    unfinished = np.zeros(r, dtype=np.bool_)
    max_solves = MAX_FACE_SOLVES[0] * n + MAX_FACE_SOLVES[1]
    norms = np.sqrt(np.einsum("ij,ij->j", c, c))
    m = c.shape[0]
    step = max(1, BLOCK_ENTRIES // max(m, 1))
    for start in range(0, r, step):
        stop = min(start + step, r)
        d = np.asfortranarray(design.d_columns(np, start, stop))
        k = stop - start
        block = out[:, start:stop]
        flags = changed[start:stop]
        left = unfinished[start:stop]
        n_threads = sweep_threads(2.0 * k * m * n * n, k, thread_cap(threads))
        chunks, bounds = column_ranges(k, n_threads)

        def one(i, d=d, block=block, bounds=bounds, flags=flags, left=left):
            _polish_range(c, norms, d, block, bounds[i], bounds[i + 1], max_solves, flags, left)

        run_ranges(one, chunks, n_threads)
    return np.ascontiguousarray(out), int(changed.sum()), unfinished


@njit(nogil=True, fastmath=FAST)
def _polish_range(c, norms, d, x, lo, hi, max_solves, changed, unfinished):
    """Columns lo..hi-1 of x polished (:func:`_lawson_hanson_qr`), kept where F drops;
    ``unfinished[j]`` where the KKT conditions were not met within ``max_solves``."""
    m, n = c.shape
    qr = _QrWork(m, n)
    res = np.empty(m)
    y = np.empty(n)
    for j in range(lo, hi):
        for i in range(n):
            y[i] = x[i, j]
        f_in = _residual_norm2(c, d[:, j], x[:, j], res)
        if not _lawson_hanson_qr(c, norms, d[:, j], y, qr, res, max_solves):
            unfinished[j] = True
        else:
            f_out = _residual_norm2(c, d[:, j], y, res)
            if f_out < f_in:
                for i in range(n):
                    x[i, j] = y[i]
                changed[j] = True


@njit(nogil=True)
def _QrWork(m, n):
    """Work arrays of one column's polish: the reflected C[:, F] (column-major), the
    reflectors' first entries and squared norms, Q'd, z, the face's indices, a column."""
    return (
        np.empty((n, m)).T,
        np.empty(n),
        np.empty(n),
        np.empty(m),
        np.empty(n),
        np.empty(n, dtype=np.int64),
        np.empty(m),
    )


@njit(nogil=True, fastmath=FAST)
def _residual_norm2(c, d, x, res):
    """||d - C x||^2, the residual left in ``res``."""
    m, n = c.shape
    for i in range(m):
        res[i] = d[i]
    for t in range(n):
        xt = x[t]
        if xt != 0.0:
            for i in range(m):
                res[i] -= c[i, t] * xt
    acc = 0.0
    for i in range(m):
        acc += res[i] * res[i]
    return acc


@njit(nogil=True, fastmath=FAST)
def _lawson_hanson_qr(c, norms, d, x, qr, res, max_iter):
    """Lawson & Hanson's NNLS on C from the feasible x (its positive entries the first
    free set), every face solved by Householder QR of C[:, F]; x overwritten.  Returns
    whether the KKT conditions were met within ``max_iter`` face solves.

    A variable joins the face only if, reflected by the face's Householder vectors, its
    column keeps a part orthogonal to the face above rounding and its own value on the
    enlarged face is positive (Lawson & Hanson's test, O(m |F|) per candidate)."""
    m, n = c.shape
    work, vfirst, vnorm2, b, z, idx, col = qr
    free = np.zeros(n, dtype=np.bool_)
    refused = np.zeros(n, dtype=np.bool_)
    for t in range(n):
        free[t] = x[t] > 0.0
        if not free[t]:
            x[t] = 0.0
    d_norm = math.sqrt(_dot(d, d))
    for _ in range(max_iter):
        k = 0
        for t in range(n):
            if free[t]:
                idx[k] = t
                k += 1
        _face_lstsq(c, idx, k, d, work, vfirst, vnorm2, b, z)
        first, alpha = -1, 1.0
        for a in range(k):
            t = idx[a]
            if z[t] <= 0.0:
                step = x[t] / (x[t] - z[t])
                if first < 0 or step < alpha:
                    first, alpha = t, step
        if first >= 0:
            # step from x towards z up to the first variable that reaches zero, which
            # leaves the free set (with any other that the step takes to zero)
            for a in range(k):
                t = idx[a]
                x[t] += alpha * (z[t] - x[t])
                if t == first or x[t] <= 0.0:
                    x[t] = 0.0
                    free[t] = False
            continue
        for a in range(k):
            x[idx[a]] = z[idx[a]]
        refused[:] = False
        # KKT from the residual: candidates by decreasing negative gradient, each tested
        _residual_norm2(c, d, x, res)
        while True:
            best, best_w = -1, 0.0
            for t in range(n):
                if free[t] or refused[t] or norms[t] == 0.0:
                    continue
                w = 0.0
                for i in range(m):
                    w += c[i, t] * res[i]
                w /= norms[t]
                if w > KKT_TOL * d_norm and w > best_w:
                    best, best_w = t, w
            if best < 0:
                return True
            if _may_join(c, best, k, work, vfirst, vnorm2, b, col, norms[best]):
                free[best] = True
                break
            refused[best] = True
    return False


@njit(nogil=True, fastmath=FAST)
def _may_join(c, j, k, work, vfirst, vnorm2, b, col, norm_j):
    """Lawson & Hanson's test of column j against the face's QR (k reflectors): a part
    orthogonal to the face above rounding, and a positive value of x_j on the enlarged
    face (the last row of its triangular system)."""
    m = c.shape[0]
    if k >= m:
        return False
    for i in range(m):
        col[i] = c[i, j]
    for a in range(k):
        _reflect(work, vfirst[a], vnorm2[a], a, col)
    rest2 = 0.0
    for i in range(k, m):
        rest2 += col[i] * col[i]
    rest = math.sqrt(rest2)
    if rest <= 64.0 * EPS * norm_j:
        return False  # dependent on the face's columns, to rounding
    alpha = -rest if col[k] >= 0.0 else rest
    v0 = col[k] - alpha
    vn2 = rest2 - col[k] * col[k] + v0 * v0
    s = v0 * b[k]
    for i in range(k + 1, m):
        s += col[i] * b[i]
    bk = b[k] - 2.0 * s / vn2 * v0 if vn2 > 0.0 else b[k]
    return bk / alpha > 0.0


@njit(nogil=True, fastmath=FAST)
def _reflect(work, v0, vn2, a, y):
    """y <- H_a y for the Householder reflector a (first entry v0, the rest below the
    diagonal of column a of ``work``, squared norm vn2)."""
    if vn2 == 0.0:
        return
    m = y.shape[0]
    s = v0 * y[a]
    for i in range(a + 1, m):
        s += work[i, a] * y[i]
    s *= 2.0 / vn2
    y[a] -= s * v0
    for i in range(a + 1, m):
        y[i] -= s * work[i, a]


@njit(nogil=True, fastmath=FAST)
def _dot(a, b):
    acc = 0.0
    for i in range(a.shape[0]):
        acc += a[i] * b[i]
    return acc


@njit(nogil=True, fastmath=FAST)
def _face_lstsq(c, idx, k, d, work, vfirst, vnorm2, b, z):
    """z = argmin ||C[:, idx[:k]] z_F - d|| by Householder QR (z = 0 off the face); the
    reflectors are kept (``work`` below the diagonal, ``vfirst``, ``vnorm2``) and b = Q'd.
    A column with a numerically zero R pivot (dependent on the earlier ones) gets z_j = 0."""
    m, n = c.shape
    for jj in range(k):
        src = idx[jj]
        for i in range(m):
            work[i, jj] = c[i, src]
    for i in range(m):
        b[i] = d[i]
    biggest = 0.0
    for jj in range(min(k, m)):
        norm2 = 0.0
        for i in range(jj, m):
            norm2 += work[i, jj] * work[i, jj]
        norm = math.sqrt(norm2)
        biggest = max(biggest, norm)
        if norm == 0.0:
            vfirst[jj], vnorm2[jj] = 0.0, 0.0
            continue
        alpha = -norm if work[jj, jj] >= 0.0 else norm
        v0 = work[jj, jj] - alpha
        vn2 = norm2 - work[jj, jj] * work[jj, jj] + v0 * v0
        vfirst[jj], vnorm2[jj] = v0, vn2
        work[jj, jj] = v0
        if vn2 > 0.0:
            for other in range(jj + 1, k):
                s = 0.0
                for i in range(jj, m):
                    s += work[i, jj] * work[i, other]
                s *= 2.0 / vn2
                for i in range(jj, m):
                    work[i, other] -= s * work[i, jj]
            s = 0.0
            for i in range(jj, m):
                s += work[i, jj] * b[i]
            s *= 2.0 / vn2
            for i in range(jj, m):
                b[i] -= s * work[i, jj]
        work[jj, jj] = alpha  # R's diagonal (v's first entry is kept in vfirst)
    for t in range(n):
        z[t] = 0.0
    floor = 8.0 * EPS * biggest
    for jj in range(min(k, m) - 1, -1, -1):
        rjj = work[jj, jj]
        if abs(rjj) <= floor:
            continue  # dependent column: z_j = 0
        acc = b[jj]
        for t in range(jj + 1, min(k, m)):
            acc -= work[jj, t] * z[idx[t]]
        z[idx[jj]] = acc / rjj
