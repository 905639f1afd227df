"""Projected Newton-CG on the design form: the exact finish for faces too large to factorise.

``min_x 1/2 ||C x - d||^2 + h(x)`` per column, h convex and piecewise linear per row (the
pieces and points of :class:`msm_gpu.finish.faces.Faces`), C read through its columns
(dense or CSC sparse, :class:`msm_gpu.solvers.pwl_active_set.DesignSource`): nothing n x n
and no factor is formed.  Lawson & Hanson's active set
(:mod:`msm_gpu.solvers.pwl_active_set`) factorises the free variables' block of C'C; at
ten thousand free variables (a sparse C whose answer has that many nonzeros) the dense
factor alone costs minutes.  Here every round moves any number of variables (Moré &
Toraldo's GPCG; Bertsekas' projected Newton, with the faces of a piecewise-linear h in
place of bounds):

1. the gradient g = C'(C x - d) of every variable (one pass over C); a variable at a point
   of h whose one-sided derivative g_j + slope is negative in some direction joins the
   face (all of them at once); none, and the free gradients g_F + sigma_F vanish to the
   tolerance: the KKT conditions hold, the column is done;
2. the Newton step on the face, (A_FF + mu I) dz = -(g_F + sigma_F), damped by mu
   proportional to the KKT residual (Levenberg-Marquardt; :data:`DAMPING`), by
   conjugate gradients with A_FF p = C_F'(C_F p) (two passes over C_F's columns,
   Jacobi-preconditioned), to a relative accuracy that tightens as the KKT residual
   falls (inexact Newton);
3. the first minimiser of F along the projected path x(t) = clip(x + t dz) into each
   variable's piece, t >= 0, found exactly: F is quadratic between the piece ends the
   path meets, and at each end one variable is fixed and its part of the direction
   dropped (slope and curvature updated from C dz, one column of C each).  Every
   variable whose end comes before the minimiser is fixed there, all at once; F never
   increases (the path starts downhill: a CG iterate is a descent direction).

CG on a singular face (dependent columns of C_F, parallel ones included) is CG on a
consistent system: the residual stays in the range of A_FF.  A column that has not met
the KKT conditions after ``max_rounds`` rounds is reported unfinished at a feasible point
no worse than its start: the caller hands it to the factorised active set (the last-mile
guarantee).
"""

from __future__ import annotations

import math

import numpy as np
from numba.extending import overload

from ..backends.cpu.jit import njit
from .nnls_columns import FAST
from .pwl_active_set import (
    _form,
    _gradient,
    _gradients,
    _join_state,
    _move,
    _point,
    _run,
    _slope,
    _slope_floor,
    _start,
    _tables,
    form_helpers,
)

#: The largest relative decrease of the face's gradient a round's CG aims at (the square
#: root of the KKT residual's decrease so far, once it is smaller: inexact Newton).
CG_REL = 1e-2

#: The Newton step's damping: CG solves (A_FF + mu I) dz = -(g_F + sigma_F) with mu this
#: times the KKT residual over max|x| (Levenberg-Marquardt's choice, mu -> 0 with the
#: residual: the last rounds are Newton's).  Undamped, a face of nearly dependent columns
#: sends the step far along directions that change F by nothing, and the path stops at
#: the first bound they meet (docs/benchmarks/shapes.md, issue 51).
DAMPING = 1.0

#: Most CG iterations in one round: this times |F|, plus CG_EXTRA.
CG_PER_FREE = 4
CG_EXTRA = 100

#: Rounds (gradient, face, CG, path search) a column gets by default.
MAX_ROUNDS = 200


def _diag_of(src, i):
    """A_ii = ||c_i||^2."""


@overload(_diag_of, jit_options={"fastmath": FAST})
def _ol_diag_of(src, i):
    diagonal = form_helpers(src)[2]
    return lambda src, i: diagonal(src, i)


def _diagonals(src, out):
    """out[i] = A_ii = ||c_i||^2 (one pass over C)."""


@overload(_diagonals, jit_options={"fastmath": FAST})
def _ol_diagonals(src, out):
    diagonal = form_helpers(src)[2]

    def scan(src, out):
        for i in range(out.shape[0]):
            out[i] = diagonal(src, i)

    return scan


def _face_rows_workspace(src, m):
    """(row pointers, face positions, values): room for the rows of C_F (sparse C:
    :func:`_face_rows`; other forms keep none)."""


def _face_rows(src, face, f, rows):
    """The rows of C_F (CSR, columns numbered by their place in the face) into ``rows``;
    sparse C only: its product then forms C_F p by gathers along rows, not by scattering
    C_F's columns into it."""


def _face_product(src, x, face, f, p, u, zero_r, out, rows):
    """out[:f] = A_FF p[:f] = C_F'(C_F p): u (m floats) is the scratch C_F p."""


@overload(_face_rows_workspace)
def _ol_face_rows_workspace(src, m):
    if _form(src) == 2:

        def sparse(src, m):
            nnz = src[0][src[0].shape[0] - 1]
            # face positions as int32, as C's own indices: the copy is never larger
            # than C
            return (np.empty(m + 1, dtype=np.int64), np.empty(nnz, dtype=np.int32), np.empty(nnz))

        return sparse
    return lambda src, m: (np.empty(1, dtype=np.int64), np.empty(1, dtype=np.int32), np.empty(1))


@overload(_face_rows)
def _ol_face_rows(src, face, f, rows):
    if _form(src) == 2:

        def sparse(src, face, f, rows):
            indptr, indices, data, scale = src
            start, where, values = rows
            m = start.shape[0] - 1
            for s in range(m + 1):
                start[s] = 0
            for a in range(f):  # entries per row, shifted by one
                for q in range(indptr[face[a]], indptr[face[a] + 1]):
                    start[indices[q] + 1] += 1
            for s in range(m):  # row s's entries end where row s + 1's begin
                start[s + 1] += start[s]
            for a in range(f):  # start[s] walks through row s, then is row s + 1's start
                for q in range(indptr[face[a]], indptr[face[a] + 1]):
                    s = indices[q]
                    where[start[s]] = a
                    values[start[s]] = data[q] * scale[face[a]]
                    start[s] += 1
            for s in range(m, 0, -1):
                start[s] = start[s - 1]
            start[0] = 0

        return sparse
    return lambda src, face, f, rows: None


@overload(_face_product, jit_options={"fastmath": FAST})
def _ol_face_product(src, x, face, f, p, u, zero_r, out, rows):
    gradient, move, _ = form_helpers(src)
    if _form(src) == 2:

        def by_rows(src, x, face, f, p, u, zero_r, out, rows):
            start, where, values = rows
            for s in range(u.shape[0]):
                acc = 0.0
                for q in range(start[s], start[s + 1]):
                    acc += values[q] * p[where[q]]
                u[s] = acc
            for a in range(f):
                out[a] = gradient(src, x, u, zero_r, face[a])

        return by_rows

    def by_columns(src, x, face, f, p, u, zero_r, out, rows):
        u[:] = 0.0
        for a in range(f):
            if p[a] != 0.0:
                move(src, u, face[a], p[a])
        for a in range(f):
            out[a] = gradient(src, x, u, zero_r, face[a])

    return by_columns


@njit(nogil=True, fastmath=FAST)
def _cg(src, x, face, f, diag, mu, b, target, cg_max, ws):
    """dz[:f] ~ (A_FF + mu I)^{-1} b[:f] by Jacobi-preconditioned CG from 0, until
    max|residual| <= ``target`` or ``cg_max`` iterations.  Returns (dz, iterations)."""
    dz, r, z, p, ap, u, zero_r, rows = ws
    rz = 0.0
    for a in range(f):
        dz[a] = 0.0
        r[a] = b[a]
        z[a] = r[a] / (diag[face[a]] + mu)
        p[a] = z[a]
        rz += r[a] * z[a]
    k = 0
    while k < cg_max:
        top = 0.0
        for a in range(f):
            top = max(top, abs(r[a]))
        if top <= target or not rz > 0.0:
            break
        k += 1
        _face_product(src, x, face, f, p, u, zero_r, ap, rows)
        pap = 0.0
        for a in range(f):
            ap[a] += mu * p[a]
            pap += p[a] * ap[a]
        if not pap > 0.0:  # no curvature left along p (a singular face): stop here
            break
        alpha = rz / pap
        rz_new = 0.0
        for a in range(f):
            dz[a] += alpha * p[a]
            r[a] -= alpha * ap[a]
            z[a] = r[a] / (diag[face[a]] + mu)
            rz_new += r[a] * z[a]
        beta = rz_new / rz
        rz = rz_new
        for a in range(f):
            p[a] = z[a] + beta * p[a]
    return dz, k


@njit(nogil=True, fastmath=FAST)
def _path_search(src, res, tab, x, q, face, f, dz, b, ws):
    """Move x to the first minimiser of F along the projected path x(t) = clip(x + t dz)
    into each face variable's piece, t >= 0 (exact: F is quadratic between the piece
    ends the path meets); every variable whose end comes before it is fixed there.
    ``b`` holds g_F + sigma_F at x.  Returns (t, variables fixed)."""
    ends, order, u, r0, zero_r = ws
    m = res.shape[0]
    slope = 0.0  # phi'(t) along the current direction
    for a in range(f):
        i = face[a]
        slope += b[a] * dz[a]
        ends[a] = math.inf
        if dz[a] > 0.0:
            ends[a] = (_point(tab, 1, i, q[i]) - x[i]) / dz[a]
        elif dz[a] < 0.0:
            ends[a] = (_point(tab, 0, i, q[i]) - x[i]) / dz[a]
        ends[a] = max(ends[a], 0.0)
    # u = C dz, r0 = res: the residual on the path is r0 + t u
    u[:] = 0.0
    for a in range(f):
        if dz[a] != 0.0:
            _move(src, u, face[a], dz[a])
    curv = 0.0
    for s in range(m):
        r0[s] = res[s]
        curv += u[s] * u[s]
    order[:f] = np.argsort(ends[:f])
    t = 0.0
    fixed = 0
    exact = curv  # the last curvature computed from u itself
    for k in range(f + 1):
        nxt = ends[order[k]] if k < f else math.inf
        if curv < 0.5 * exact:  # updates that cancel: recompute from u
            curv = 0.0
            for s in range(m):
                curv += u[s] * u[s]
            exact = curv
        if slope >= 0.0:  # F rises from here on
            break
        if curv > 0.0 and t - slope / curv <= nxt:  # the minimum inside this segment
            t = t - slope / curv
            break
        if not nxt < math.inf:  # no curvature and no end: F unbounded below
            t = math.inf
            break
        slope += curv * (nxt - t)
        t = nxt
        # the variable at its end is fixed there: its part of the direction goes
        a = order[k]
        i = face[a]
        d = dz[a]
        if d == 0.0:
            continue
        cu = _gradient(src, x, u, zero_r, i)  # c_i'u
        g = _gradient(src, x, r0, zero_r, i) + t * cu  # g_i at x(t)
        slope -= (g + _slope(tab, 3, i, q[i])) * d
        # ||u - d c_i||^2, and r0 + t u unchanged at t
        curv = max(curv - 2.0 * d * cu + d * d * _diag_of(src, i), 0.0)
        _move(src, u, i, -d)
        _move(src, r0, i, t * d)
        fixed += 1
        q[i] = q[i] + 1 if d > 0.0 else q[i] - 1
        x[i] = _point(tab, 2, i, q[i])
        dz[a] = 0.0
    if not t < math.inf:  # x stays where the last end left it
        t = 0.0
        for a in range(f):
            dz[a] = 0.0
        for s in range(m):
            res[s] = r0[s]
        return math.inf, fixed
    for a in range(f):
        if dz[a] != 0.0:
            x[face[a]] += t * dz[a]
    for s in range(m):
        res[s] = r0[s] + t * u[s]
    return t, fixed


@njit(nogil=True, fastmath=FAST)
def _column(src, res, tab, x, q, diag, tol, floor, max_rounds, damping, ws):
    """One column (x, q in: a feasible start and its states; res = C x - d; out: the
    answer).  Returns (status, rounds, CG iterations): 1 the KKT conditions hold to
    ``tol (max A_jj max|x| + floor)``, 0 not within ``max_rounds``, -1 F unbounded
    below along a direction of zero curvature."""
    grad, face, b, cg_ws, no_skip, path_ws = ws
    n = x.shape[0]
    zero_r = cg_ws[6]
    scale = 0.0
    for i in range(n):
        scale = max(scale, diag[i])
    cg_total = 0
    status = 0
    rounds = 0
    first = -1.0
    while rounds < max_rounds:
        rounds += 1
        x_max = 0.0
        for i in range(n):
            x_max = max(x_max, abs(x[i]))
        eps = tol * (scale * x_max + floor)
        # 1. the gradient; the face: the free variables and every violator, joined
        _gradients(src, x, res, zero_r, grad, no_skip)
        f = 0
        joined = 0
        worst = 0.0
        for i in range(n):
            if not diag[i] > 0.0:  # a zero column of C: no curvature, stays
                continue
            qi = q[i]
            if qi % 2 == 0:
                if grad[i] + _slope(tab, 5, i, qi) < -eps:
                    qi = _join_state(qi, 1)
                elif grad[i] + _slope(tab, 4, i, qi) > eps:
                    qi = _join_state(qi, -1)
                else:
                    continue
                q[i] = qi
                joined += 1
            gf = grad[i] + _slope(tab, 3, i, qi)
            worst = max(worst, abs(gf))
            b[f] = -gf
            face[f] = i
            f += 1
        if joined == 0 and worst <= eps:
            status = 1
            break
        if first < 0.0:
            first = worst
        # 2. the Newton step on the face, to a relative accuracy that tightens as the
        # KKT residual falls (inexact Newton)
        top = 0.0
        for a in range(f):
            top = max(top, abs(b[a]))
        eta = min(CG_REL, math.sqrt(worst / first))
        target = max(eta * top, 0.5 * eps)
        mu = damping * worst / x_max if x_max > 0.0 else 0.0
        _face_rows(src, face, f, cg_ws[7])
        dz, k = _cg(src, x, face, f, diag, mu, b, target, CG_PER_FREE * f + CG_EXTRA, cg_ws)
        cg_total += k
        # 3. the projected path's first minimiser (b: g_F + sigma_F)
        for a in range(f):
            b[a] = -b[a]
        t, fixed = _path_search(src, res, tab, x, q, face, f, dz, b, path_ws)
        if not t < math.inf:
            status = -1
            break
    return status, rounds, cg_total


@njit(nogil=True, fastmath=FAST)
def _design_range(src, D, tab, X, Q, tol, max_rounds, damping, c0, c1, status, rounds, cg_iters):
    """Columns c0..c1-1 of X (in: a feasible start, Q its states)."""
    n = X.shape[0]
    m = D.shape[0]
    diag = np.empty(n)
    _diagonals(src, diag)
    s_max = _slope_floor(tab)
    grad = np.empty(n)
    no_skip = np.zeros(n, dtype=np.bool_)
    ws = (
        grad,
        np.empty(n, dtype=np.int64),  # face
        np.empty(n),  # b
        (
            np.empty(n),
            np.empty(n),
            np.empty(n),
            np.empty(n),
            np.empty(n),
            np.empty(m),
            np.zeros(n),
            _face_rows_workspace(src, m),
        ),
        no_skip,
        (np.empty(n), np.empty(n, dtype=np.int64), np.empty(m), np.empty(m), np.zeros(n)),
    )
    res = np.empty(m)
    x = np.empty(n)
    q = np.empty(n, dtype=np.int64)
    zero_r = np.zeros(n)
    for col in range(c0, c1):
        for t in range(m):
            res[t] = -D[t, col]
        _gradients(src, x, res, zero_r, grad, no_skip)  # -C'd
        r_max = 0.0  # max |C'd|: the scale of the gradient
        for i in range(n):
            r_max = max(r_max, abs(grad[i]))
        for i in range(n):
            x[i] = X[i, col]
            q[i] = Q[i, col]
            if x[i] != 0.0:
                _move(src, res, i, x[i])
        st, rd, it = _column(src, res, tab, x, q, diag, tol, r_max + s_max, max_rounds, damping, ws)
        for i in range(n):
            X[i, col] = x[i]
            Q[i, col] = q[i]
        status[col] = st
        rounds[col] = rd
        cg_iters[col] = it


def projected_newton_on_source(
    source, D, faces, X0, *, tol=1e-12, max_rounds=MAX_ROUNDS, damping=DAMPING, threads=None
):
    """Projected Newton-CG (module docstring) on every column of D, from X0.

    Parameters
    ----------
    source : msm_gpu.solvers.pwl_active_set.DesignSource
        C diag(s), dense or sparse.
    D : (m, c) array_like
        The right-hand sides.
    faces : msm_gpu.finish.faces.Faces
        The faces of h (of y = x / s with a row scale).
    X0 : (n, c) array_like
        Start; projected into the bounds (the states follow from the values).
    tol : float
        The KKT test of :func:`msm_gpu.solvers.pwl_active_set.pwl_active_set`.
    max_rounds : int
        Rounds per column.
    damping : float
        The Newton step's damping, mu over (KKT residual / max|x|) (:data:`DAMPING`;
        0: the undamped step).
    threads : int, optional
        Most threads (default: from the work and the CPUs available).

    Returns
    -------
    X : (n, c) float64 ndarray
        Feasible, F never above the start's.
    status : (c,) int8 ndarray
        1: the KKT conditions hold; 0: not within ``max_rounds``; -1: a round made no
        progress.
    rounds, cg_iterations : (c,) int64 ndarray
    """
    D = np.ascontiguousarray(D, dtype=np.float64)
    m, c = D.shape
    n = source.shape[1]
    tab = _tables(faces)
    X, Q = _start(faces, tab, X0, (n, c))
    status = np.zeros(c, dtype=np.int8)
    rounds = np.zeros(c, dtype=np.int64)
    cg_iters = np.zeros(c, dtype=np.int64)
    if c:

        def kernel(c0, c1):
            _design_range(
                source.src,
                D,
                tab,
                X,
                Q,
                tol,
                int(max_rounds),
                float(damping),
                c0,
                c1,
                status,
                rounds,
                cg_iters,
            )

        _run(kernel, 400.0 * source.nnz, c, threads)
    return X, status, rounds, cg_iters
