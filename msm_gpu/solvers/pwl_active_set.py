"""Exact finish on the host for every convex penalty: a primal active set, column by column.

``min_x 1/2 x'Ax + r'x + h(x)`` per column, A symmetric positive *semi*definite, h convex
and piecewise linear per row (Zero, NonNeg, Box, L1, NonNegL1: :class:`msm_gpu.finish.faces.Faces`
tabulates each row's points, pieces and slopes).  Lawson & Hanson's method (1974, ch. 23),
generalised from x >= 0 to those pieces, in Numba, column ranges on the sweep's threads.

Per column, from a feasible x, with F the free variables whose block A_FF is factorised:

1. the Newton step on the face, z_F = x_F - A_FF^{-1} (g_F + sigma_F), g = A x + r (the
   others held where they are; from the gradient, so every step refines the last);
2. if z leaves a piece, step from x towards z up to the first piece end (F decreases along
   the segment), fix the variables that reach it, go to 1;
3. else x = z; a held variable whose one-sided derivative g_j + slope is negative in some
   direction joins F (the largest violations first, all that the factor takes, or the
   largest alone after ZERO_STEPS steps of length zero); none: the KKT conditions hold.

**Singular faces.**  A_FF may be singular (more free variables than rows of C, collinear
columns).  A variable joins F only if its pivot (the Schur complement of A_FF in
A_{F+j,F+j}) is above JOIN_TOL A_jj, so the factor never divides by rounding noise.  A
violating variable that cannot join (its column is, numerically, in the span of F's) moves
instead along the direction that keeps A x fixed, d_j = +-1, d_F = -+A_FF^{-1} A_Fj: an
exact line search (the directional derivative is the violation, the curvature the tiny
pivot), stopped at the first piece end; a variable of F that reaches it leaves F, and j can
join next time.  A variable left inside a piece but outside F is *held* (its value fixed,
its slope the piece's); the start's free variables that do not fit in the factor are held.
Every step is monotone in F; a direction with no piece end and no curvature means F is
unbounded below on the column (not ``ok``).

**Two forms of A.**  The Gram form reads A (n x n).  The design form reads A = S C'C S
through the columns of C (dense, or CSC sparse; S a diagonal scaling) and keeps the
residual C S x - d of the column: an entry of A costs a dot product of two columns, the
gradient c_j'(C S x - d) one column, and nothing n x n is ever formed (wide and sparse
problems).  The gradient from the residual also makes each Newton step a corrected
semi-normal step, accurate from C rather than from C'C.  The kernel is written once; the
form is chosen by the type of ``src`` (:func:`_gradient`, :func:`_products`, :func:`_move`).
"""

from __future__ import annotations

import math

import numpy as np
from numba.extending import overload

from ..backends.cpu.blas import gemm_rm_at
from ..backends.cpu.jit import njit
from ..backends.cpu.threads import column_ranges, run_ranges, sweep_threads, thread_cap
from .nnls_columns import FAST, ZERO_STEPS, _delete_row, alike

#: A variable joins F only if its pivot exceeds JOIN_TOL A_jj: rounding makes the pivot of
#: a dependent column ~ n eps A_jj, and a factor with pivots down to JOIN_TOL keeps cond(A_FF)
#: near 1 / JOIN_TOL, so that face solutions are accurate to ~1e-6 before refinement.
JOIN_TOL = 1e-10

#: Free variables at a dense design-form column's start from which their products
#: C_F'C_F come from one BLAS product rather than a dot product each as their factor
#: rows are built (measurements: docs/benchmarks/shapes.md).
START_GEMM_MIN = 32

#: Consecutive candidates the factor refuses before a block join stops trying (each try
#: costs a row of the factor; on a wide problem most candidates are in the span of F).
MAX_REFUSALS = 8

#: Newton steps on a face whose free gradients still exceed the KKT tolerance (rounding
#: of an ill-conditioned face), before its point is taken as the answer.
REFINEMENTS = 2

#: Rows of the design form's factor beyond twice the start's free variables (see
#: :func:`active_set_on_source`).
FACTOR_SLACK = 512

#: Table columns handed to the kernel, in this order (see :class:`msm_gpu.finish.faces.Faces`).
TABLES = ("lo", "hi", "value", "sigma", "left", "right")


# -- the two forms of A: overloads chosen by the type of ``src`` ------------------------
#
# Gram form: src = (A,)                          A (n, n)
# dense design form: src = (Ct, s)               Ct (n, m) = C' rows, s (n) applied as read
# sparse design form: src = (indptr, indices, data, s)   C in CSC, s (n) applied as read
#
# The loops over every variable (the scans of the active set, the MSM sweeps of
# design_msm) are overloads whose implementation closes over the form's helpers below,
# inlined at the IR level (``njit(inline="always")``): a call per variable costs more than
# a sparse column's dot product.  (An overload with ``inline="always"`` would do the same
# but trips Numba's SSA check on the helpers' loop-carried sums.)


@njit(inline="always", fastmath=FAST)
def _gradient_gram(src, x, res, r, i):
    a = src[0]
    acc = r[i]
    for k in range(x.shape[0]):
        if x[k] != 0.0:
            acc += a[i, k] * x[k]
    return acc


@njit(inline="always", fastmath=FAST)
def _gradient_dense(src, x, res, r, i):
    row = src[0][i]
    acc = 0.0
    for t in range(res.shape[0]):
        acc += row[t] * res[t]
    return acc * src[1][i] + r[i]


@njit(inline="always", fastmath=FAST)
def _gradient_sparse(src, x, res, r, i):
    indptr, indices, data, s = src
    acc = 0.0
    for p in range(indptr[i], indptr[i + 1]):
        acc += data[p] * res[indices[p]]
    return acc * s[i] + r[i]


@njit(inline="always")
def _move_gram(src, res, i, delta):
    pass


@njit(inline="always", fastmath=FAST)
def _move_dense(src, res, i, delta):
    row = src[0][i]
    step = delta * src[1][i]
    for t in range(res.shape[0]):
        res[t] += step * row[t]


@njit(inline="always", fastmath=FAST)
def _move_sparse(src, res, i, delta):
    indptr, indices, data, s = src
    step = delta * s[i]
    for p in range(indptr[i], indptr[i + 1]):
        res[indices[p]] += step * data[p]


@njit(inline="always")
def _diagonal_gram(src, i):
    return src[0][i, i]


@njit(inline="always", fastmath=FAST)
def _diagonal_dense(src, i):
    row = src[0][i]
    acc = 0.0
    for t in range(row.shape[0]):
        acc += row[t] * row[t]
    return acc * (src[1][i] * src[1][i])


@njit(inline="always", fastmath=FAST)
def _diagonal_sparse(src, i):
    indptr, data, s = src[0], src[2], src[3]
    acc = 0.0
    for p in range(indptr[i], indptr[i + 1]):
        acc += data[p] * data[p]
    return acc * (s[i] * s[i])


def form_helpers(src):
    """(gradient, move, diagonal) of the form of ``src`` (a Numba type), for overloads:
    g_i = (A x)_i + r_i, res += delta c_i, A_ii."""
    form = _form(src)
    if form == 0:
        return _gradient_gram, _move_gram, _diagonal_gram
    if form == 1:
        return _gradient_dense, _move_dense, _diagonal_dense
    return _gradient_sparse, _move_sparse, _diagonal_sparse


def _gradient(src, x, res, r, i):
    """g_i = (A x)_i + r_i (Gram form), c_i'res + r_i (design forms)."""


def _gradients(src, x, res, r, out, skip):
    """out[i] = g_i for every variable but those where ``skip`` (one pass over A or C)."""


def _diagonal_max(src, n):
    """max_i A_ii."""


def _products(src, order, f, j, out, work):
    """out[a] = A[order[a], j] for a < f; returns A_jj (``work``: m floats, design)."""


def _move(src, res, i, delta):
    """res += delta c_i (design forms; the Gram form keeps no residual)."""


def _form(src):
    """0 Gram, 1 dense design, 2 sparse design."""
    if len(src) == 1:
        return 0
    return 1 if len(src) == 2 else 2


@overload(_gradient, jit_options={"fastmath": FAST})
def _ol_gradient(src, x, res, r, i):
    gradient = form_helpers(src)[0]
    return lambda src, x, res, r, i: gradient(src, x, res, r, i)


@overload(_gradients, jit_options={"fastmath": FAST})
def _ol_gradients(src, x, res, r, out, skip):
    # the Gram form's gradient: a row of A against x's nonzeros, per variable (a scan of
    # A's rows was slower on small batches: docs/development.md, "Finish thresholds")
    gradient = _gradient if _form(src) == 0 else form_helpers(src)[0]

    def scan(src, x, res, r, out, skip):
        for i in range(out.shape[0]):
            if not skip[i]:
                out[i] = gradient(src, x, res, r, i)

    return scan


@overload(_diagonal_max, jit_options={"fastmath": FAST})
def _ol_diagonal_max(src, n):
    diagonal = form_helpers(src)[2]

    def scan(src, n):
        top = 0.0
        for i in range(n):
            top = max(top, diagonal(src, i))
        return top

    return scan


@overload(_move, jit_options={"fastmath": FAST})
def _ol_move(src, res, i, delta):
    move = form_helpers(src)[1]
    return lambda src, res, i, delta: move(src, res, i, delta)


@overload(_products, jit_options={"fastmath": FAST})
def _ol_products(src, order, f, j, out, work):
    form = _form(src)
    if form == 0:

        def gram(src, order, f, j, out, work):
            a = src[0]
            for c in range(f):
                out[c] = a[order[c], j]
            return a[j, j]

        return gram
    if form == 1:

        def dense(src, order, f, j, out, work):
            ct, s = src
            cj = ct[j]
            for c in range(f):
                row = ct[order[c]]
                acc = 0.0
                for t in range(cj.shape[0]):
                    acc += row[t] * cj[t]
                out[c] = acc * (s[order[c]] * s[j])
            return _diagonal_dense(src, j)

        return dense

    def sparse(src, order, f, j, out, work):
        indptr, indices, data, s = src
        jj = 0.0
        for p in range(indptr[j], indptr[j + 1]):  # c_j scattered into work (zero)
            work[indices[p]] = data[p]
            jj += data[p] * data[p]
        for c in range(f):
            k = order[c]
            acc = 0.0
            for p in range(indptr[k], indptr[k + 1]):
                acc += data[p] * work[indices[p]]
            out[c] = acc * (s[k] * s[j])
        for p in range(indptr[j], indptr[j + 1]):
            work[indices[p]] = 0.0
        return jj * (s[j] * s[j])

    return sparse


def _gathers_products(src):
    """Whether a column's many starting free variables take their products from
    :func:`_start_products` (the dense design form; a constant of the form)."""


@overload(_gathers_products)
def _ol_gathers_products(src):
    gathers = _form(src) == 1
    return lambda src: gathers


def _start_products(src, cand, nc):
    """The products A[cand[a], cand[c]] (a, c < nc) of a column's starting free variables
    in one BLAS product of their gathered columns (the dense design form; never called
    for the others)."""


@overload(_start_products, jit_options={"fastmath": FAST})
def _ol_start_products(src, cand, nc):
    if _form(src) != 1:
        return lambda src, cand, nc: np.empty((0, 0))

    def dense(src, cand, nc):
        ct, s = src
        m = ct.shape[1]
        # C[:, cand] row-major, the rows of ct gathered as columns (at most the size of C)
        cols = np.empty((m, nc))
        for t in range(m):
            for a in range(nc):
                cols[t, a] = ct[cand[a], t]
        g = np.empty((nc, nc))
        gemm_rm_at(cols, cols, g, 0.0)  # (not np.dot: far dearer to compile)
        for a in range(nc):
            sa = s[cand[a]]
            for c in range(nc):
                g[a, c] *= sa * s[cand[c]]
        return g

    return dense


# -- the kernel ---------------------------------------------------------------------------


@njit(nogil=True, inline="always")
def _int(value):
    """``value`` typed int64, not as a literal: a literal argument makes Numba compile the
    callee once more for that literal (each such copy costs about a second cold)."""
    return np.int64(value)


@njit(nogil=True, inline="always")
def _row(nr, i):
    """Row of a face table for variable i (one row when every variable is alike)."""
    return i if nr > 1 else 0


@njit(nogil=True, inline="always")
def _point(tab, t, i, q):
    """lo (t = 0), hi (1) or value (2) of variable i in state q: the table of h times the
    row's point factor (``tab`` = (T, S), see :func:`_tables`)."""
    T, S = tab
    return T[t, _row(T.shape[1], i), q] * S[0, _row(S.shape[1], i)]


@njit(nogil=True, inline="always")
def _slope(tab, t, i, q):
    """sigma (t = 3), left (4) or right (5) of variable i in state q, times the row's
    slope factor."""
    T, S = tab
    return T[t, _row(T.shape[1], i), q] * S[1, _row(S.shape[1], i)]


@njit(nogil=True, fastmath=FAST)
def _factor_row(src, order, a, L, p, work):
    """Row a of the Cholesky factor L of A[order, order] (rows before a kept).  Returns
    False (row unusable) when its pivot is at most JOIN_TOL A_jj."""
    ajj = _products(src, order, a, order[a], p, work)
    return _factor_row_of(L, a, p, ajj)


@njit(nogil=True, fastmath=FAST)
def _factor_row_from(G, pos, a, f, L, p):
    """Row f of L as :func:`_factor_row` builds it, its products taken from G, those of
    the start's candidates (:func:`_start_products`): row f is candidate a, row c < f
    candidate pos[c] (``p``: f floats of workspace)."""
    for c in range(f):
        p[c] = G[a, pos[c]]
    return _factor_row_of(L, f, p, G[a, a])


@njit(nogil=True, fastmath=FAST, inline="always")
def _factor_row_of(L, a, p, ajj):
    """Row a of L from its products p[c] = A_{order[a], order[c]} (c < a) and A_jj."""
    for c in range(a):
        acc = p[c]
        for t in range(c):
            acc -= L[a, t] * L[c, t]
        L[a, c] = acc / L[c, c]
    acc = ajj
    for t in range(a):
        acc -= L[a, t] * L[a, t]
    if not acc > JOIN_TOL * ajj:
        return False
    L[a, a] = math.sqrt(acc)
    return True


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
def _set(src, x, res, i, value):
    """x_i = value, the residual kept equal to C x - d."""
    if value != x[i]:
        _move(src, res, i, value - x[i])
        x[i] = value


@njit(nogil=True, fastmath=FAST)
def _column(src, r, res, tab, x, q, tol, scale, floor, max_iter, ws, full_stops):
    """One column (x, q in: a feasible start and its states; res: C x - d in the design
    forms; out: the answer).

    ``tab`` = (T, S): the face tables (:func:`_tables`).  A violation must exceed
    ``tol (scale max|x| + floor)``, ``scale`` = max A_jj.  Returns (status, iterations):
    1 the KKT conditions hold, 0 not finished in ``max_iter`` (or, with ``full_stops``, a
    variable had to join a full factor: the caller solves the column another way), -1 F
    unbounded below along a direction of zero curvature.
    """
    L, order, infac, z, b, w, v, gone, cand, viols, dirs, work, grad = ws
    n = x.shape[0]
    k_max = L.shape[0]
    # the start's free variables, factorised in turn; those that do not fit are held
    for i in range(n):
        infac[i] = False
    f = _int(0)
    first = 0  # the variables from here on take their products one by one
    if _gathers_products(src):
        # the first k_max of them, if many, from one product of their gathered columns
        nc = 0
        for i in range(n):
            if q[i] % 2 == 1 and nc < k_max:
                cand[nc] = i
                nc += 1
        if nc >= START_GEMM_MIN:
            G = _start_products(src, cand, nc)
            pos = np.empty(nc, dtype=np.int64)
            for a in range(nc):
                if _factor_row_from(G, pos, a, f, L, b):
                    order[f] = cand[a]
                    infac[cand[a]] = True
                    pos[f] = a
                    f += 1
            first = cand[nc - 1] + 1
    for i in range(first, n):
        if q[i] % 2 == 1 and f < k_max:
            order[f] = i
            if _factor_row(src, order, f, L, b, work):
                infac[i] = True
                f += 1
    single = False
    zero_steps = 0
    refined = 0
    it = 0
    status = 0
    while it < max_iter:
        it += 1
        # 1. the Newton step on the face: A_FF dz = -(g_F + sigma_F)
        for a in range(f):
            i = order[a]
            b[a] = -(_gradient(src, x, res, r, i) + _slope(tab, 3, i, q[i]))
        _solve_factor(L, b, f, z)
        # 2. the first piece end on the segment x -> x + dz
        alpha = 1.0
        for a in range(f):
            i = order[a]
            zi = x[i] + z[a]
            hi_i, lo_i = _point(tab, 1, i, q[i]), _point(tab, 0, i, q[i])
            if zi > hi_i:
                alpha = min(alpha, (hi_i - x[i]) / z[a])
            elif zi < lo_i:
                alpha = min(alpha, (lo_i - x[i]) / z[a])
        alpha = max(alpha, 0.0)
        if alpha < 1.0:
            f = _step_to_ends(src, res, L, order, infac, z, x, q, tab, f, alpha, v, gone, work)
            if alpha == 0.0:
                zero_steps += 1
                single = zero_steps > ZERO_STEPS
            continue
        for a in range(f):
            _set(src, x, res, order[a], x[order[a]] + z[a])
        x_max = 0.0
        for i in range(n):
            x_max = max(x_max, abs(x[i]))
        eps = tol * (scale * x_max + floor)
        # 3. one-sided derivatives of the variables outside F
        _gradients(src, x, res, r, grad, infac)
        n_viol = 0
        for i in range(n):
            if infac[i]:
                continue
            gi = grad[i]
            qi = q[i]
            if qi % 2 == 1:  # held inside a piece: one slope both ways
                up = gi + _slope(tab, 3, i, qi)
                down = up
            else:
                up = gi + _slope(tab, 5, i, qi)
                down = gi + _slope(tab, 4, i, qi)
            if up < -eps:
                cand[n_viol], viols[n_viol], dirs[n_viol] = i, -up, 1
                n_viol += 1
            elif down > eps:
                cand[n_viol], viols[n_viol], dirs[n_viol] = i, down, -1
                n_viol += 1
        if n_viol == 0:
            # done once the free gradients vanish too; else one more Newton step on the
            # face (iterative refinement), at most REFINEMENTS in a row
            if refined >= REFINEMENTS or _face_is_optimal(src, r, res, tab, x, q, order, f, eps):
                status = 1
                break
            refined += 1
            continue
        refined = 0
        # the largest violations first: where the face cannot take them all (A_FF would
        # be singular), the ones that join are those that decrease F fastest
        _sort_down(viols, cand, dirs, n_viol)
        best, best_viol, best_dir = cand[0], viols[0], dirs[0]
        joined = 0
        refused = 0
        if not single:
            for k in range(n_viol):
                if f >= k_max or refused >= MAX_REFUSALS:
                    break
                i = cand[k]
                order[f] = i
                if _factor_row(src, order, f, L, b, work):
                    q[i] = _join_state(q[i], dirs[k])
                    infac[i] = True
                    f += 1
                    joined += 1
                    refused = 0
                else:
                    refused += 1
        if joined > 0:
            continue
        # the largest violator alone: it joins, or a line search along the null direction
        i = best
        if f < k_max:
            order[f] = i
            if _factor_row(src, order, f, L, b, work):
                q[i] = _join_state(q[i], best_dir)
                infac[i] = True
                f += 1
                single = False
                continue
        if full_stops and f >= k_max:
            break
        ok, f = _null_step(src, res, L, order, infac, x, q, tab, f, i, best_dir, best_viol, ws)
        if not ok:
            status = -1
            break
    return status, it


@njit(nogil=True, fastmath=FAST)
def _face_is_optimal(src, r, res, tab, x, q, order, f, eps):
    """The free variables' gradients vanish (to ``eps``): the last Newton step landed."""
    for a in range(f):
        i = order[a]
        if abs(_gradient(src, x, res, r, i) + _slope(tab, 3, i, q[i])) > eps:
            return False
    return True


@njit(nogil=True, fastmath=FAST)
def _step_to_ends(src, res, L, order, infac, z, x, q, tab, f, alpha, v, gone, work):
    """x_F += alpha dz; the variables that reach a piece end are fixed there and leave F.
    Returns the new |F|."""
    first_out = f
    n_out = _int(0)
    for a in range(f):
        i = order[a]
        d = z[a]
        zi = x[i] + d
        end = math.inf
        hi_i, lo_i = _point(tab, 1, i, q[i]), _point(tab, 0, i, q[i])
        if zi > hi_i:
            end = (hi_i - x[i]) / d
        elif zi < lo_i:
            end = (lo_i - x[i]) / d
        if end <= alpha:  # fixed at the point it reached
            q[i] = q[i] + 1 if d > 0.0 else q[i] - 1
            _set(src, x, res, i, _point(tab, 2, i, q[i]))
            gone[a] = True
            n_out += 1
            first_out = min(first_out, a)
        else:
            gone[a] = False
            _set(src, x, res, i, x[i] + alpha * d)
    return _drop(src, L, order, infac, f, gone, n_out, first_out, v, work)


@njit(nogil=True, fastmath=FAST)
def _drop(src, L, order, infac, f, gone, n_out, first_out, v, work):
    """Remove the positions marked in ``gone`` from F and from its factor: one rank-one
    downdate each (O(f^2), from the last position down, so that the earlier ones stay
    valid), never a refactorisation (O(f^3), and O(m f^2) products in the design form).
    Returns the new |F|."""
    size = f
    for a in range(f - 1, first_out - 1, -1):
        if gone[a]:
            infac[order[a]] = False
            _delete_row(L, a, size, v)
            size -= 1
    keep = _int(0)
    for a in range(f):
        if not gone[a]:
            order[keep] = order[a]
            keep += 1
    return keep


@njit(nogil=True, fastmath=FAST)
def _null_step(src, res, L, order, infac, x, q, tab, f, j, direction, viol, ws):
    """Move j (outside F, its pivot tiny) and F along d_j = direction,
    d_F = -direction A_FF^{-1} A_Fj: an exact line search (slope -viol, curvature the
    pivot) stopped at the first piece end.  Returns (ok, new |F|); not ok: no piece end
    and no curvature (F unbounded below along d)."""
    u, w, v, gone, work = ws[3], ws[5], ws[6], ws[7], ws[11]
    ajj = _products(src, order, f, j, u, work)
    _solve_factor(L, u, f, w)  # w = A_FF^{-1} A_Fj
    curv = ajj
    for a in range(f):
        curv -= u[a] * w[a]
    t = viol / curv if curv > 0.0 else math.inf  # the minimiser along d
    qj = _join_state(q[j], direction)
    end_j = _point(tab, 1, j, qj) - x[j] if direction > 0 else x[j] - _point(tab, 0, j, qj)
    own_end = end_j <= t
    t = min(t, end_j)
    hit = _int(-1)
    for a in range(f):
        i = order[a]
        da = -direction * w[a]
        if da > 0.0:
            s = (_point(tab, 1, i, q[i]) - x[i]) / da
        elif da < 0.0:
            s = (_point(tab, 0, i, q[i]) - x[i]) / da
        else:
            continue
        if s < t:
            t = max(s, 0.0)
            hit = a
    if not t < math.inf:
        return False, f
    for a in range(f):
        i = order[a]
        _set(src, x, res, i, x[i] - direction * t * w[a])
    _set(src, x, res, j, x[j] + direction * t)
    q[j] = qj
    if hit >= 0:  # a variable of F reached a piece end: fixed there, out of F
        i = order[hit]
        q[i] = q[i] + 1 if -direction * w[hit] > 0.0 else q[i] - 1
        _set(src, x, res, i, _point(tab, 2, i, q[i]))
        for a in range(f):
            gone[a] = a == hit
        return True, _drop(src, L, order, infac, f, gone, _int(1), hit, v, work)
    if own_end:  # j reached its own piece end: fixed at that point
        q[j] = qj + direction
        _set(src, x, res, j, _point(tab, 2, j, q[j]))
    return True, f


@njit(nogil=True)
def _workspace(n, k_max, m):
    """The per-thread buffers of :func:`_column` (factor and vectors of size k_max; the
    candidates of size n; ``work``: m zeros for the sparse form's scatter)."""
    return (
        np.empty((k_max, k_max)),  # L
        np.empty(k_max + 1, dtype=np.int64),  # order
        np.empty(n, dtype=np.bool_),  # infac
        np.empty(k_max + 1),  # z (also u of the null step)
        np.empty(max(k_max + 1, n)),  # b (also the diagonal scan)
        np.empty(k_max + 1),  # w
        np.empty(k_max + 1),  # v
        np.empty(k_max + 1, dtype=np.bool_),  # gone
        np.empty(n, dtype=np.int64),  # cand
        np.empty(n),  # viols
        np.empty(n, dtype=np.int64),  # dirs
        np.zeros(m),  # work
        np.empty(n),  # grad
    )


@njit(nogil=True, fastmath=FAST)
def _slope_floor(tab):
    """The largest finite slope of the tables (row factors applied)."""
    T, S = tab
    if T.shape[1] == 1:  # h alike in every row: its largest slope times the largest factor
        factor = 0.0
        for row in range(S.shape[1]):
            factor = max(factor, S[1, row])
        return _largest_finite(T, 0) * factor
    s_max = 0.0
    for row in range(T.shape[1]):
        s_max = max(s_max, _largest_finite(T, row) * S[1, _row(S.shape[1], row)])
    return s_max


@njit(nogil=True, inline="always")
def _largest_finite(T, row):
    """max |slope| over the finite slopes of one row of the tables."""
    top = 0.0
    for t in range(3, 6):
        for k in range(5):
            if math.isfinite(T[t, row, k]):
                top = max(top, abs(T[t, row, k]))
    return top


@njit(nogil=True, fastmath=FAST)
def _gram_range(A, R, tab, X, Q, tol, max_iter, c0, c1, status, iters):
    """Columns c0..c1-1 of X, Gram form (in: a feasible start, Q its states).

    A column whose start is 0 and whose r is alike the previous column's
    (:func:`msm_gpu.solvers.nnls_columns.alike`: a Lasso path put in one call,
    neighbouring pixels or frames) starts from that column's answer instead: its face is
    near the answer's, so the active set changes a few variables rather than building
    the face from nothing."""
    n = A.shape[0]
    src = (A,)
    ws = _workspace(n, n, 0)
    s_max = _slope_floor(tab)
    res = np.empty(0)
    x = np.empty(n)
    q = np.empty(n, dtype=np.int64)
    r = np.empty(n)
    x_prev = np.empty(n)
    q_prev = np.empty(n, dtype=np.int64)
    r_prev = np.empty(n)
    have_prev = False
    scale = _diagonal_max(src, n)
    for col in range(c0, c1):
        r_max = 0.0
        zero_start = True
        for i in range(n):
            r[i] = R[i, col]
            r_max = max(r_max, abs(r[i]))
            x[i] = X[i, col]
            q[i] = Q[i, col]
            zero_start &= x[i] == 0.0
        warm = have_prev and zero_start and alike(r, r_prev)
        if warm:
            x[:] = x_prev
            q[:] = q_prev
        r_prev[:] = r
        st, it = _column(src, r, res, tab, x, q, tol, scale, r_max + s_max, max_iter, ws, False)
        if warm and st != 1:
            # unfinished from the previous answer, whose F may be above the start's: the
            # column from its own start, so that F never ends above it
            for i in range(n):
                x[i] = X[i, col]
                q[i] = Q[i, col]
            st, it = _column(src, r, res, tab, x, q, tol, scale, r_max + s_max, max_iter, ws, False)
        for i in range(n):
            X[i, col] = x[i]
            Q[i, col] = q[i]
        status[col] = st
        iters[col] = it
        have_prev = st == 1
        if have_prev:
            x_prev[:] = x
            q_prev[:] = q


@njit(nogil=True, fastmath=FAST)
def _design_range(
    src, D, tab, X, Q, tol, max_iter, k_max, full_stops, scale, r_maxes, c0, c1, status, iters
):
    """Columns c0..c1-1 of X, design form: D (m, c) the right-hand sides; a factor of at
    most k_max rows (``full_stops``: a column that needs more stops, status 0); ``scale``
    max A_jj and ``r_maxes[col]`` max |C'd| of the column (each found here, a pass over
    C, where negative)."""
    n = X.shape[0]
    m = D.shape[0]
    ws = _workspace(n, k_max, m)
    s_max = _slope_floor(tab)
    res = np.empty(m)
    x = np.empty(n)
    q = np.empty(n, dtype=np.int64)
    r = np.zeros(n)
    infac, grad = ws[2], ws[12]
    if scale < 0.0:
        scale = _diagonal_max(src, n)
    for col in range(c0, c1):
        for t in range(m):
            res[t] = -D[t, col]
        r_max = r_maxes[col]  # max |C'd|: the scale of the gradient
        if r_max < 0.0:
            infac[:] = False
            _gradients(src, x, res, r, grad, infac)  # -C'd
            r_max = 0.0
            for i in range(n):
                r_max = max(r_max, abs(grad[i]))
        for i in range(n):
            x[i] = 0.0
            q[i] = Q[i, col]
        for i in range(n):  # the nonzeros alone: a call per variable (not inlined) is dear
            if X[i, col] != 0.0:
                _set(src, x, res, i, X[i, col])
        st, it = _column(
            src, r, res, tab, x, q, tol, scale, r_max + s_max, max_iter, ws, full_stops
        )
        for i in range(n):
            X[i, col] = x[i]
            Q[i, col] = q[i]
        status[col] = st
        iters[col] = it


def _tables(faces):
    """(T, S): Faces.stacked, the tables of h in the order of TABLES (6, rows, 5; taken as
    it is, no copy when contiguous; tests/test_design_msm.py checks the order), and
    Faces.row_scale (2, 1 or n), each row's point and slope factors."""
    T = np.ascontiguousarray(faces.stacked, dtype=np.float64)
    return T, np.ascontiguousarray(faces.row_scale, dtype=np.float64)


def _start(faces, tab, X0, shape):
    """The projected start (a fresh float64 C array) and its states (those of
    :meth:`Faces.states`, read from the tables ``tab`` of :func:`_tables` in one
    compiled pass: the NumPy form's dozen array operations were a tenth of a small
    design-form solve)."""
    X = np.array(faces.project(np.asarray(X0, dtype=np.float64)), dtype=np.float64, order="C")
    if X.shape != shape:
        raise ValueError(f"X0 must have shape {shape}, got {X.shape}")
    Q = np.empty(X.shape, dtype=np.int64)
    _states(tab, X, Q)
    return X, Q


@njit(nogil=True)
def _states(tab, X, Q):
    """Q = the state of every entry of X (:meth:`Faces.states`): 2 k - 1 + [x on a point]
    for the k points of its row below x (point p = the lo table of state 2 p)."""
    n, c = X.shape
    for i in range(n):
        for col in range(c):
            x = X[i, col]
            count = 0
            on_point = 0
            for p in range(3):
                point = _point(tab, 0, i, 2 * p)
                if x > point:
                    count += 1
                if x == point:
                    on_point = 1
            Q[i, col] = 2 * count - 1 + on_point


def _run(kernel, work_per_column, c, threads):
    """``kernel(c0, c1)`` over column ranges on the sweep's threads."""
    n_threads = sweep_threads(work_per_column * c, c, thread_cap(threads))
    chunks, bounds = column_ranges(c, n_threads)
    run_ranges(lambda k: kernel(bounds[k], bounds[k + 1]), chunks, n_threads)


def pwl_active_set(A, R, faces, X0, *, tol=1e-12, max_iter=None, threads=None):
    """Exact ``min 1/2 x'Ax + r'x + h(x)`` for every column, by the active set above.

    Parameters
    ----------
    A : (n, n) array_like
        Symmetric positive semidefinite (singular allowed).
    R : (n, c) array_like
    faces : msm_gpu.finish.faces.Faces
        The penalty's face tables, built on NumPy.
    X0 : (n, c) array_like
        Start; projected into the bounds (the states follow from the values).  A column
        whose start is 0 and whose r is alike the previous column's (in the same thread's
        range of columns) is started from that column's answer, and again from 0 if it
        does not finish from there.
    tol : float
        A held variable counts as optimal while its one-sided derivatives are within
        ``tol (max A_jj max|x| + max|r| + max|slope|)`` of the KKT conditions.
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
    tab = _tables(faces)
    X, Q = _start(faces, tab, X0, (n, c))
    max_iter = 3 * n + 30 if max_iter is None else int(max_iter)
    status = np.zeros(c, dtype=np.int8)
    iters = np.zeros(c, dtype=np.int64)
    if c:

        def kernel(c0, c1):
            _gram_range(A, R, tab, X, Q, tol, max_iter, c0, c1, status, iters)

        _run(kernel, 4.0 * (n**3 / 48.0 + n * n), c, threads)
    return X, status, iters


def pwl_active_set_design(
    C, D, faces, X0=None, *, scale=None, tol=1e-12, max_iter=None, threads=None
):
    """:func:`pwl_active_set` for A = C'C, r = -C'd, reading C: ``min 1/2 ||C x - d||^2 +
    h(x)`` per column of D, with nothing n x n formed.

    Parameters
    ----------
    C : (m, n) ndarray or scipy.sparse matrix
        Dense or sparse (converted to CSC once).
    D : (m, c) array_like
    scale : (n,) array_like, optional
        Solve for y with C diag(scale) in place of C (the finish's equilibration: columns
        of comparable norms, as the join test is relative to them); applied as the
        columns are copied, no scaled C is formed.  The faces are those of y.
    faces, tol, max_iter, threads
        As in :func:`pwl_active_set`.
    X0 : (n, c) array_like, optional
        Start (zeros by default).

    Returns
    -------
    X, status, iterations
        As in :func:`pwl_active_set`.
    """
    D = np.ascontiguousarray(D, dtype=np.float64)
    if C.shape[0] != D.shape[0]:
        raise ValueError(f"D must have {C.shape[0]} rows to match C {C.shape}, got {D.shape}")
    source = DesignSource(C, scale)
    return active_set_on_source(source, D, faces, X0, tol=tol, max_iter=max_iter, threads=threads)


class DesignSource:
    """C diag(s) as the design-form kernels read it: ``src`` (dense: the columns of C as
    rows, C-ordered, and s; sparse: C's CSC arrays and s; s applied as they are read),
    ``shape`` (m, n), ``nnz`` (entries stored; m n when dense)."""

    def __init__(self, C, scale=None):
        import scipy.sparse

        m, n = C.shape
        s = np.ones(n) if scale is None else np.asarray(scale, dtype=np.float64).reshape(n)
        if scipy.sparse.issparse(C):
            # a CSC float64 C as it is: a new wrapper of its arrays would not know that
            # its indices are sorted, and sort_indices() would check them again (a pass)
            csc = C
            if not (C.format == "csc" and C.dtype == np.float64):
                csc = scipy.sparse.csc_matrix(C, dtype=np.float64)  # a copy only if not CSC
            csc.sort_indices()
            # SciPy's own arrays (indices int32 below 2^31 entries), not widened or scaled
            # copies: every pass over C reads them, and s is applied as they are read (a
            # power of two: the same values as from C S)
            self.src = (csc.indptr, csc.indices, csc.data, s)
            self.nnz = int(csc.nnz)
        else:
            # the columns of C as rows, C-ordered (s is applied as they are read: a power of
            # two, exact): a view of an F-ordered float64 C, else one transposing copy
            ct = np.asarray(C).T
            if not (ct.dtype == np.float64 and ct.flags.c_contiguous):
                ct = np.ascontiguousarray(ct, dtype=np.float64)
            self.src = (ct, s)
            self.nnz = m * n
        self.shape = (m, n)


@njit(nogil=True)
def column_norms_squared(indptr, data):
    """||c_j||^2 of a CSC matrix, float64 (one pass, no squared copy)."""
    n = indptr.shape[0] - 1
    out = np.zeros(n)
    for j in range(n):
        acc = 0.0
        for p in range(indptr[j], indptr[j + 1]):
            v = np.float64(data[p])
            acc += v * v
        out[j] = acc
    return out


def active_set_on_source(
    source,
    D,
    faces,
    X0=None,
    *,
    tol=1e-12,
    max_iter=None,
    grow=None,
    diag_max=None,
    grad_max=None,
    threads=None,
):
    """:func:`pwl_active_set_design` on a prepared :class:`DesignSource`.

    The factor of A_FF is sized for the start: at most min(m, n) rows, and no more than
    twice the start's free variables plus ``FACTOR_SLACK`` (a dense min(m, n)^2 factor
    would be 800 MB at m = 10^4).  A variable that finds the factor full moves along
    its null-space direction instead (:func:`_null_step`: monotone, exact line search);
    with ``grow`` given, the factor holds at most that many rows more than the start's
    free variables, and a column that needs more stops there, unfinished (status 0),
    for the caller to solve another way.  ``diag_max`` (max A_jj) and ``grad_max`` (per
    column, max |C'd|; negative: unknown): the scales of the KKT test, where the caller
    has them (found here otherwise, a pass over C each)."""
    D = np.ascontiguousarray(D, dtype=np.float64)
    m, c = D.shape
    n = source.shape[1]
    tab = _tables(faces)
    X, Q = _start(faces, tab, np.zeros((n, c)) if X0 is None else X0, (n, c))
    max_iter = 3 * n + 30 if max_iter is None else int(max_iter)
    status = np.zeros(c, dtype=np.int8)
    iters = np.zeros(c, dtype=np.int64)
    free = int((Q % 2 == 1).sum(axis=0).max(initial=0))
    stop = grow is not None
    grow = n if grow is None else int(grow)
    k_max = min(n, m, 2 * free + FACTOR_SLACK, free + grow)
    scale = -1.0 if diag_max is None else float(diag_max)
    r_maxes = np.full(c, -1.0)
    if grad_max is not None:
        r_maxes[:] = grad_max
    if c:

        def kernel(c0, c1):
            _design_range(
                source.src,
                D,
                tab,
                X,
                Q,
                tol,
                max_iter,
                k_max,
                stop,
                scale,
                r_maxes,
                c0,
                c1,
                status,
                iters,
            )

        _run(kernel, 40.0 * source.nnz, c, threads)
    return X, status, iters
