"""Block principal pivoting on the faces of a convex separable h, batched over columns.

On a face the problem is a linear system in the free variables F:

    A_FF x_F = -(r_F + s_F + A_FB v_B)          (v_B: the values of the fixed variables)

and the KKT conditions read: a free variable lies inside its piece, and a fixed variable at
a point with slopes s- (left) and s+ (right) has  g + s+ >= 0  and  g + s- <= 0,  where
g = A x + r.  A violation moves the variable to the neighbouring point or piece; all
violators move at once, with Judice & Pires' backup rule (one variable, the last) when a
column stops improving (Kim & Park 2011; Judice & Pires 1994).
"""

from __future__ import annotations

import numpy as np

from .face_solves import solve_passive, solve_passive_batched, solve_passive_cg
from .objective import column_objective

# -- principal pivoting on the faces -------------------------------------------------------


class FaceSolver:
    """Solve A_FF x_F = b_F per column (x zero off F).

    method: "direct" (grouped Cholesky in NumPy + Numba on the CPU, padded batched
    factorisations on a GPU), "batched" (the array-API padded batches everywhere) or "cg"
    (conjugate gradients on the face, warm-started).
    """

    def __init__(self, xp, a, method):
        if method not in ("direct", "batched", "cg"):
            raise ValueError(f"unknown face solver {method!r}")
        self.xp = xp
        self.a = a
        self.method = method
        self.on_host = isinstance(a, np.ndarray)
        self.cg_iterations = 0
        self.solves = 0
        self.rtol = 1e-13  # CG: relative residual of a face solve

    def __call__(self, rhs, free, x_warm=None):
        self.solves += 1
        if self.method == "cg":
            x, it = solve_passive_cg(self.a, rhs, free, x_warm, rtol=self.rtol)
            self.cg_iterations += it
            return x
        if self.method == "direct" and self.on_host:
            return solve_passive(np.asarray(self.a), np.asarray(rhs), np.asarray(free))
        return solve_passive_batched(self.a, rhs, free)


def face_solution(a, r, q, faces, solve, locked=None, x_warm=None):
    """The minimiser of F on the face q (free variables unconstrained within the face)."""
    xp = faces.xp
    free, value, sigma = faces.decode(q)
    if locked is not None:
        free = free & ~locked
        value = xp.where(locked, 0.0, value)
    rhs = -(r + sigma)
    if bool(xp.any(value != 0)):
        rhs = rhs - xp.matmul(a, value)
    return value + solve(rhs, free, x_warm)


def pivot(a, r, q, faces, solve, *, locked=None, max_rounds=None, x_warm=None):
    """Block principal pivoting from the states ``q`` until every column satisfies KKT.

    Parameters
    ----------
    a : (n, n) float64, r : (n, c) float64
    q : (n, c) int states (see :meth:`Faces.states`), the starting face
    faces : Faces
    solve : FaceSolver
    locked : (n, c) bool, optional
        Entries held fixed at zero whatever the KKT conditions say (the polish).
    max_rounds : int, optional
        Default ``min(5 n + 10, MAX_ROUNDS)``.

    Returns
    -------
    x : (n, c) float64, feasible (free entries clipped into their pieces)
    q : final states
    ok : (c,) bool, columns that satisfied KKT
    rounds : int
    """
    xp = faces.xp
    n, c = r.shape
    max_rounds = min(5 * n + 10, MAX_ROUNDS) if max_rounds is None else max_rounds
    if locked is not None:
        q = xp.where(locked, faces.states(xp.zeros_like(r)), q)
    scale = float(xp.max(xp.abs(a)))

    def violations(qs, xs, rs, ls):
        g = xp.matmul(a, xs) + rs
        # a violation must exceed the rounding of g (relative 1e-12 of its terms)
        eps = 1e-12 * (scale * xp.max(xp.abs(xs), axis=0) + xp.max(xp.abs(rs), axis=0))
        mv = faces.moves(qs, xs, g, eps[None, :])
        return mv if ls is None else xp.where(ls, 0, mv)

    x = face_solution(a, r, q, faces, solve, locked, x_warm)
    mv = violations(q, x, r, locked)
    bad = xp.sum(xp.astype(mv != 0, xp.int64), axis=0)
    p_bar = 3
    p_vec = xp.full((c,), p_bar, dtype=xp.int64)
    ninf = xp.full((c,), n + 1, dtype=xp.int64)
    rounds = 0
    rows = xp.arange(n)[:, None]
    while bool(xp.any(bad > 0)) and rounds < max_rounds:
        rounds += 1
        idx = xp.nonzero(bad > 0)[0]
        qs, xs, rs, mvs = q[:, idx], x[:, idx], r[:, idx], mv[:, idx]
        ls = None if locked is None else locked[:, idx]
        bad_s, p_s, ninf_s = bad[idx], p_vec[idx], ninf[idx]
        # Kim & Park's rule: full exchange while the violation count improves (or for
        # p_bar more rounds), else Murty's backup: only the last violating variable moves
        better = bad_s < ninf_s
        patient = ~better & (p_s >= 1)
        p_s = xp.where(better, p_bar, xp.where(patient, p_s - 1, p_s))
        ninf_s = xp.where(better, bad_s, ninf_s)
        full = better | patient
        last = xp.max(xp.where(mvs != 0, rows, -1), axis=0)
        qs = qs + xp.where(full[None, :] | (rows == last[None, :]), mvs, 0)
        xs = face_solution(a, rs, qs, faces, solve, ls, xs)
        mvs = violations(qs, xs, rs, ls)
        q[:, idx] = qs
        x[:, idx] = xs
        mv[:, idx] = mvs
        p_vec[idx] = p_s
        ninf[idx] = ninf_s
        bad[idx] = xp.sum(xp.astype(mvs != 0, xp.int64), axis=0)
    x = faces.clip(q, x)
    if locked is not None:
        x = xp.where(locked, 0.0, x)
    return x, q, bad == 0, rounds


#: Relative residuals of the CG face solves: while the face is searched, and at the end.
CG_LOOSE = 1e-7
CG_TIGHT = 1e-13

#: The polish refuses points more than this many times larger (max |x|) than MSM's.
POLISH_GROWTH = 1e6

#: Pivoting rounds before the columns still violating KKT go to :func:`active_set`.
MAX_ROUNDS = 12


def active_set(a, r, x, q, faces, solve, *, locked=None, max_iter=None):
    """Monotone primal active-set iterations (Lawson & Hanson's, on every penalty's faces).

    From a feasible x on the face q: solve on the face; if the solution z leaves a piece,
    step from x towards z up to the first bound (F decreases along the segment) and fix
    the variables that reach it; else take z and let every variable violating KKT move
    (only the worst one after a zero-length step, which rules out cycling).

    Returns (x, ok, iterations), x feasible with F never larger than at the start.
    """
    xp = faces.xp
    n, c = r.shape
    max_iter = 5 * n + 10 if max_iter is None else max_iter
    scale = float(xp.max(xp.abs(a)))
    ok = xp.zeros((c,), dtype=xp.bool)
    single = xp.zeros((c,), dtype=xp.bool)
    todo = xp.arange(c)
    it = 0
    while todo.shape[0] > 0 and it < max_iter:
        it += 1
        qs, xs, rs = q[:, todo], x[:, todo], r[:, todo]
        ls = None if locked is None else locked[:, todo]
        z = face_solution(a, rs, qs, faces, solve, ls, xs)
        free = faces.get("free", qs)
        lo = faces.get("lo", qs)
        hi = faces.get("hi", qs)
        d = z - xs
        over = free & (z > hi)
        under = free & (z < lo)
        safe = xp.where(d != 0, d, xp.ones_like(d))
        ratio = xp.where(over, (hi - xs) / safe, xp.where(under, (lo - xs) / safe, xp.inf))
        alpha = xp.min(ratio, axis=0)
        blocked = alpha < xp.inf
        alpha = xp.where(blocked, xp.clip(alpha, 0.0, 1.0), 1.0)
        hit = (over | under) & (ratio <= alpha[None, :])
        qs = qs + xp.astype(hit & over, xp.int64) - xp.astype(hit & under, xp.int64)
        xs = faces.clip(qs, xs + alpha[None, :] * d)
        if ls is not None:
            xs = xp.where(ls, 0.0, xs)
        g = xp.matmul(a, xs) + rs
        eps = 1e-12 * (scale * xp.max(xp.abs(xs), axis=0) + xp.max(xp.abs(rs), axis=0))
        mv = faces.moves(qs, xs, g, eps[None, :])
        mv = xp.where(blocked[None, :], 0, mv)
        if ls is not None:
            mv = xp.where(ls, 0, mv)
        # after a zero-length step only the most violating variable moves
        worst = xp.argmax(xp.abs(mv) * xp.abs(g), axis=0)
        only = xp.arange(n)[:, None] == worst[None, :]
        sng = single[todo]
        mv = xp.where(sng[None, :] & ~only, 0, mv)
        done = ~blocked & (xp.sum(xp.abs(mv), axis=0) == 0)
        single[todo] = blocked & (alpha == 0)
        q[:, todo] = qs + mv
        x[:, todo] = xs
        ok[todo] = done
        todo = todo[~done]
    return x, ok, it


def projected_face_step(a, r, x, penalty, faces, solve, max_halvings=30):
    """One monotone step: solve on the face of x, then a projected search towards it.

    x(t) = clip_face(x + t (x_face - x)) for t = 1, 1/2, 1/4, ...; per column the first
    t with F(x(t)) <= F(x) is taken (else x is kept).  The clip keeps every variable in
    the closure of its piece (its bound, or its sign for l1), as in More & Toraldo's GPCG.
    """
    xp = faces.xp
    q = faces.states(x)
    d = face_solution(a, r, q, faces, solve, None, x) - x
    f0, size0 = column_objective(xp, a, r, x, penalty)
    out = x
    done = xp.zeros((x.shape[1],), dtype=xp.bool)
    t = 1.0
    for _ in range(max_halvings):
        xt = faces.clip(q, x + t * d)
        ft, _ = column_objective(xp, a, r, xt, penalty)
        take = ~done & (ft <= f0)
        out = xp.where(take[None, :], xt, out)
        done = done | take
        if bool(xp.all(done)):
            break
        t *= 0.5
    return out
