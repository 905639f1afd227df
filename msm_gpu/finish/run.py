"""Exact finish of an MSM run: MSM sweeps find the face, a direct solve on it ends the job.

MSM is a first-order method: its sweeps find quickly WHICH entries of X sit at a bound (or
at zero, for l1), then crawl on an ill-conditioned face.  The finish takes the face of the
MSM iterate and solves the problem restricted to it exactly, batched over columns, then
checks the KKT conditions and exchanges the variables that violate them (block principal
pivoting, Kim & Park 2011 / Judice & Pires 1994, generalised below to every convex penalty
of the library).

NNLS on the host (n <= ACTIVE_SET_MAX_N) takes a shorter road: no sweeps, Lawson &
Hanson's active set per column from x0 (:mod:`msm_gpu.solvers.nnls_columns`), measured faster
than sweeps + face solves on every benchmark shape (``benchmarks/bench_nnls.py``).

Convex penalties as piecewise-linear pieces
-------------------------------------------
Every convex h of the library (Zero, NonNeg, Box, L1, NonNegL1) is, per row j, linear with
slope s on each of at most three pieces between the points lb_j (if finite), 0 (l1 with
lb < 0 < ub) and ub_j (if finite).  A variable is either *fixed* at one of these points or
*free* on one piece.  On a face the problem is a linear system in the free variables F:

    A_FF x_F = -(r_F + s_F + A_FB v_B)          (v_B: the values of the fixed variables)

and the KKT conditions read: a free variable lies inside its piece, and a fixed variable at
a point with slopes s- (left) and s+ (right) has  g + s+ >= 0  and  g + s- <= 0,  where
g = A x + r.  A violation moves the variable to the neighbouring point or piece; all
violators move at once, with Judice & Pires' backup rule (one variable, the last) when a
column stops improving, as ``factorization.solvers.bpp`` does for NNLS.

Nonconvex penalties (L0, Lp)
----------------------------
A polish: least squares on the support of the MSM iterate (within the bounds, by the same
pivoting with the off-support variables held at zero), accepted per column only if F
decreases and the point is still a fixed point of the MSM map.

Monotone in F
-------------
Per column the finished point replaces the MSM iterate only if its F (computed in float64)
is not larger, up to the rounding of F at the MSM iterate (4 eps times its terms' magnitude).
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np

from .._input.scaling import equilibration, row_scaled_penalty
from ..arrays import namespace, to_host
from ..penalties import CODE_BOX, CODE_L1
from ..solvers.loop import LoopOutcome
from ..solvers.nnls_columns import nnls_active_set
from ..solvers.pwl_active_set import pwl_active_set
from .face_solves import block_pivoting, solve_passive, solve_passive_batched, solve_passive_cg
from .terms import host_terms

#: Accepted values of ``finish``.
FINISH_MODES = ("auto", "exact")

#: Largest n for which "auto" factorises every face (above it: conjugate gradients), on
#: the host and on a GPU.  On a GPU the batched factorisations of many distinct faces
#: (cuSOLVER's batched small-matrix routines) lose to CG's GEMMs earlier: measured on an
#: H100 (benchmarks/bench_gpu_nnls.py, float64, warm) n = 100: direct 0.064 s, CG 0.13 s;
#: n = 256 (5000 distinct faces): direct 0.75 s, CG 0.23 s; n = 1000: CG.
DIRECT_MAX_N = 400
DIRECT_MAX_N_DEVICE = 128

#: Largest n for which NNLS on the host is solved by the per-column active set
#: (:mod:`msm_gpu.solvers.nnls_columns`) with no MSM sweeps before it
#: (see :func:`run_msm_finished`).
#: Measured against the MSM + face-solve paths (|N(0,1)| data, m = 1.2 n, 2 cores): it is
#: faster at every n up to 1000 (n = 1000, r = 2048: 3.9 s vs 7.0 s with CG faces), slower
#: from n = 1500 (r = 128: 1.2 s vs 0.97 s).
ACTIVE_SET_MAX_N = 1024

#: Largest n for which the columns the pivoting leaves unfinished go to the per-column
#: active set on the host (:func:`msm_gpu.solvers.pwl_active_set.pwl_active_set`, one n x n factor
#: per thread).
PWL_MAX_N = 4096

#: Warm-up: MSM runs in chunks of WARMUP_CHUNK sweeps, at most WARMUP_MAX sweeps, and stops
#: once fewer than WARMUP_SETTLED of the entries changed face during the last chunk.  Before
#: CG face solves (large n) the MSM iterate is a warm start that halves the CG work (bench:
#: 1200 x 1000, r = 128).  Before factorised faces the sweeps cost about what they save on
#: the benchmark's shapes, but they give the pivoting a good face on numerically singular
#: problems (SciPy's gh-20302 case, cond(C'C) ~ 1e27), where pivoting from zero fails.
WARMUP_CHUNK = 5
WARMUP_MAX = 10
WARMUP_SETTLED = 0.02


# -- the faces of a convex separable h --------------------------------------------------


class Faces:
    """Per-row points and slopes of a convex piecewise-linear h (see the module docstring).

    A state q (int) is 2i for "fixed at point i" and 2i + 1 for "free on piece i" (points
    and pieces numbered from the left, at most 3 points).  Every quantity of a state is
    tabulated per row and state, (n, 5); when all rows are alike (scalar bounds) the
    tables are 1-D and a gather is one ``take``.

    Parameters
    ----------
    xp : array namespace
    penalty : Penalty
        Zero, NonNeg, Box, L1 or NonNegL1 (codes CODE_BOX and CODE_L1).
    n : int
        Rows.
    """

    def __init__(self, xp, penalty, n):
        if penalty.code not in (CODE_BOX, CODE_L1):
            raise ValueError(f"Faces needs a convex piecewise-linear penalty, got {penalty!r}")
        penalty.table(n)  # checks per-row bounds against n (a ValueError naming n)
        inf = math.inf
        lb = np.broadcast_to(np.asarray(penalty.lb, dtype=np.float64), (n,))
        ub = np.broadcast_to(np.asarray(penalty.ub, dtype=np.float64), (n,))
        lam = np.broadcast_to(  # a scalar or one per row (e.g. an unpenalised intercept)
            np.asarray(penalty.lam if penalty.code == CODE_L1 else 0.0, dtype=np.float64), (n,)
        )
        split = (lam > 0) & (lb < 0) & (ub > 0)
        pts = np.full((n, 4), inf)  # points 0..2, padded with +inf
        pts[:, 0] = lb
        pts[:, 1] = np.where(split, 0.0, ub)
        pts[:, 2] = np.where(split, ub, inf)
        n_pts = np.where(split, 3, 2)
        # slope of piece i (between points i and i + 1)
        one_piece = np.where(lb >= 0, lam, np.where(ub <= 0, -lam, 0.0))
        slope = np.zeros((n, 3))
        slope[:, 0] = np.where(split, -lam, one_piece)
        slope[:, 1] = np.where(split, lam, 0.0)
        # per state q = 0..4: i = q // 2
        tab = {k: np.zeros((n, 5)) for k in ("lo", "hi", "value", "sigma", "left", "right")}
        free = np.zeros((n, 5), dtype=bool)
        for q in range(5):
            i = q // 2
            if q % 2:  # free on piece i
                free[:, q] = True
                tab["lo"][:, q] = pts[:, i]
                tab["hi"][:, q] = pts[:, i + 1]
                tab["sigma"][:, q] = slope[:, i]
            else:  # fixed at point i; +-inf slopes where no (or an empty) piece is there
                tab["lo"][:, q] = tab["hi"][:, q] = tab["value"][:, q] = pts[:, i]
                tab["left"][:, q] = slope[:, i - 1] if i >= 1 else -inf
                has_right = (i + 1 < n_pts) & (pts[:, i + 1] > pts[:, i])
                tab["right"][:, q] = np.where(has_right, slope[:, min(i, 2)], inf)
        tab["value"] = np.where(np.isfinite(tab["value"]), tab["value"], 0.0)
        self.xp = xp
        self.uniform = bool(np.all(pts == pts[:1]) and np.all(slope == slope[:1]))
        rows = slice(0, 1) if self.uniform else slice(None)
        self.pts = xp.asarray(pts[rows, :3])
        self.lb = xp.asarray(lb[rows, None])
        self.ub = xp.asarray(ub[rows, None])
        self.tables = {k: xp.asarray(v[rows]) for k, v in tab.items()}
        self.tables["free"] = xp.asarray(free[rows])

    def project(self, x):
        """x clipped into dom h (the bounds): a feasible point to start from."""
        xp = self.xp
        return xp.clip(x, xp.astype(self.lb, x.dtype), xp.astype(self.ub, x.dtype))

    def states(self, x):
        """State of every entry of x: 2i = fixed at point i, 2i + 1 = free on piece i."""
        xp = self.xp
        count = xp.zeros(x.shape, dtype=xp.int64)
        equal = xp.zeros(x.shape, dtype=xp.bool)
        for i in range(3):
            p = xp.astype(self.pts[:, i : i + 1], x.dtype)
            count += xp.astype(x > p, xp.int64)
            equal |= x == p
        return 2 * count - 1 + xp.astype(equal, xp.int64)

    def get(self, name, q):
        """The tabulated quantity ``name`` of every entry's state."""
        xp = self.xp
        table = self.tables[name]
        if self.uniform:
            return xp.take(table[0], q)
        return xp.take_along_axis(table, q, axis=1)

    def decode(self, q):
        """free (bool), value (fixed value, 0 if free), sigma (slope, 0 if fixed)."""
        return self.get("free", q), self.get("value", q), self.get("sigma", q)

    def moves(self, q, x, g, eps):
        """-1 / +1 where a variable violates KKT and must move left / right, else 0."""
        xp = self.xp
        free = self.get("free", q)
        down = xp.where(free, x < self.get("lo", q), g + self.get("left", q) > eps)
        up = xp.where(free, x > self.get("hi", q), g + self.get("right", q) < -eps)
        return xp.astype(up, xp.int64) - xp.astype(down, xp.int64)

    def clip(self, q, x):
        """x with every free entry clipped into its piece and fixed entries set exactly."""
        return self.xp.clip(x, self.get("lo", q), self.get("hi", q))


# -- objective and KKT residual (float64) -------------------------------------------------


def column_objective(xp, a, r, x, penalty):
    """F per column, and the magnitude of its terms (for rounding-aware comparisons)."""
    host = host_terms(a, r, x, penalty, kkt=False)  # host float64: one compiled pass
    if host is not None:
        return host[0], host[1]
    return array_api_column_objective(xp, a, r, x, penalty)


def array_api_column_objective(xp, a, r, x, penalty):
    """:func:`column_objective` in array-API calls (any backend and float dtype)."""
    h = penalty.value(x)
    f = xp.sum(h, axis=0)
    size = xp.sum(xp.abs(h), axis=0)
    if not bool(xp.any(x != 0)):  # x = 0 (a cold start): no quadratic or linear part
        return f, size
    ax = xp.matmul(a, x)
    quad = 0.5 * x * ax
    lin = x * r
    return f + xp.sum(quad + lin, axis=0), size + xp.sum(xp.abs(quad) + xp.abs(lin), axis=0)


def kkt_residual(a, r, x, penalty):
    """Relative, scale-invariant KKT residual of every column of x (float64, host).

    Per entry, the move of an exact coordinate minimisation, in gradient units:

        rho_j = A_jj (x_j - prox_{h / A_jj}(x_j - g_j / A_jj)),       g = A x + r,

    zero for every j exactly when x satisfies the KKT conditions (convex h; a coordinate-wise
    minimum for L0/Lp).  Measured after the Jacobi equilibration y = x sqrt(A_jj) (which
    divides rho_j, (A x)_j and r_j by sqrt(A_jj)), the residual of a column is

        || rho / sqrt(diag A) ||_2 / ( || A x / sqrt(diag A) ||_2 + || r / sqrt(diag A) ||_2 ),

    unchanged when A, r and h are scaled together, when x, r and the bounds are, and when
    the variables are rescaled one by one (the columns of C in least squares).
    """
    xp = namespace(a, r, x)
    a = xp.astype(a, xp.float64, copy=False)
    r = xp.astype(r, xp.float64, copy=False)
    x = xp.astype(x, xp.float64, copy=False)
    host = host_terms(a, r, x, penalty)  # host arrays: one compiled pass
    if host is not None:
        return host[2]
    return array_api_kkt_residual(xp, a, r, x, penalty)


def array_api_kkt_residual(xp, a, r, x, penalty):
    """:func:`kkt_residual` of float64 arrays in array-API calls (any backend)."""
    return kkt_residual_from(xp, xp.matmul(a, x), r, xp.diagonal(a), x, penalty)


def kkt_residual_from(xp, ax, r, d, x, penalty):
    """:func:`kkt_residual` from A x, r and diag(A) (float64): the design form computes
    them from C without A."""
    g = ax + r
    floor = 1e-300 + np.finfo(np.float64).eps * float(xp.max(xp.abs(d)))
    b = xp.where(d > 0, d, floor * xp.ones_like(d))[:, None]  # floor: zero columns of C
    w = 1.0 / xp.sqrt(b)
    move = x - penalty.prox(g - b * x, b)
    num = xp.linalg.vector_norm(w * b * move, axis=0)
    den = xp.linalg.vector_norm(w * ax, axis=0) + xp.linalg.vector_norm(w * r, axis=0)
    rel = xp.where(den > 0, num / xp.where(den > 0, den, xp.ones_like(den)), num)
    return np.asarray(to_host(rel), dtype=np.float64)


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


# -- the finish of one MSM run --------------------------------------------------------------


def finish_columns(
    a,
    r,
    x,
    penalty,
    *,
    method,
    tol,
    sweep=None,
    settle=None,
    fallback_rounds=10,
    fallback_sweeps=5,
    threads=None,
    fine=None,
    design=None,
):
    """Finish the MSM iterate ``x`` (n x c) of min 1/2 x'Ax + x'r + h(x), per column.

    Parameters
    ----------
    a, r, x : backend arrays (any float dtype; the finish works in float64)
    penalty : Penalty
    method : {"active_set", "direct", "batched", "cg"}
        How faces are solved (see :class:`FaceSolver`); "active_set": NNLS only, on the
        host, by :func:`msm_gpu.solvers.nnls_columns.nnls_active_set`.
    tol : float
        KKT tolerance (convex h) / MSM step tolerance of the fixed-point check (L0, Lp).
    sweep : callable, optional
        ``sweep(x_cols, cols, k)`` -> x after k MSM sweeps on the columns ``cols`` (in the
        working dtype).  Used between the monotone steps for columns the pivoting did not
        finish, and for the fixed-point check of the polish.
    settle : callable, optional
        ``settle(x_cols, cols)`` -> x after plain MSM run to its own stopping rule (the
        user's tol and max_iter) on the columns ``cols``: resumed from ``x`` for the
        columns that still violate KKT, it is plain MSM's answer, and the better of the two
        is kept (no column ends above plain MSM).
    fallback_rounds, fallback_sweeps : int
        Monotone rounds (``fallback_sweeps`` MSM sweeps + :func:`projected_face_step`)
        for the columns the pivoting left violating KKT.
    threads : int, optional
        Most host threads of the "active_set" solve.
    fine : (a, r) float64 arrays, optional
        The same a and r formed in float64 (float32 least squares): the finish solves
        this problem, not the rounded float32 one.
    design : Design, optional
        C and D of a least-squares problem: F is then compared from the residual.

    Returns
    -------
    x : (n, c) float64, per column never of larger F than the input (up to rounding of F)
    info : dict
    """
    xp = namespace(a, r, x)
    if fine is not None:
        a, r = fine
    a64 = xp.astype(a, xp.float64, copy=False)
    r64 = xp.astype(r, xp.float64, copy=False)
    x_in = xp.astype(x, xp.float64, copy=False)
    n, c = r.shape
    # The faces are solved in the Jacobi-equilibrated variables y = x / s (s: powers of
    # two, exact): columns of C on very different scales make A_FF numerically singular
    # and the KKT tests meaningless otherwise (scaling.equilibration).
    s_host = equilibration(to_host(xp.diagonal(a64)))
    s = xp.asarray(s_host)[:, None]
    a_s = a64 * s * xp.reshape(s, (1, n))
    r_s = r64 * s
    if penalty.is_convex:
        locked = None
        pen_s = row_scaled_penalty(penalty, s_host)
    else:
        from ..penalties import Box

        locked = x_in == 0
        pen_s = row_scaled_penalty(Box(penalty.lb, penalty.ub), s_host)
    solver = FaceSolver(xp, a_s, "direct" if method == "active_set" else method)
    # x0 may lie outside the bounds.  The face tables cost ~0.1 ms (a tenth of a small
    # NNLS call): the active set builds them only for its fallback below
    if method == "active_set" and _is_nonnegativity(pen_s):
        faces = None
        y_start = np.maximum(x_in / s, 0.0)  # NNLS: the bounds are [0, inf)
    else:
        faces = Faces(xp, pen_s, n)
        y_start = faces.project(x_in / s)
    if method == "active_set" and _is_nonnegativity(pen_s):
        # NNLS on the host, small n: Lawson & Hanson per column, in Numba
        yf, ok, iterations = nnls_active_set(a_s, -r_s, y_start, threads=threads)
        rounds = int(iterations.max(initial=0))
    elif method == "active_set":
        # every other convex h on the host: the same active set over its pieces
        yf, status, iterations = pwl_active_set(a_s, r_s, faces, y_start, threads=threads)
        ok = status == 1
        rounds = int(iterations.max(initial=0))
    elif method == "direct" and locked is None and solver.on_host and _is_nonnegativity(pen_s):
        # NNLS on the host: the lean NumPy pivoting that bpp uses (same rule as pivot)
        scale = float(np.max(np.abs(a_s)))
        eps = 1e-12 * (scale * np.max(np.abs(y_start), axis=0) + np.max(np.abs(r_s), axis=0))
        yf, ok, rounds = block_pivoting(a_s, -r_s, y_start > 0, eps=eps, max_rounds=MAX_ROUNDS)
    elif method == "cg":
        # CG: identify the face with loose solves first, then solve it tightly
        solver.rtol = CG_LOOSE
        q = faces.states(y_start)
        yf, q, ok, rounds = pivot(a_s, r_s, q, faces, solver, locked=locked, x_warm=y_start)
        solver.rtol = CG_TIGHT
        yf, q, ok, more = pivot(a_s, r_s, q, faces, solver, locked=locked, x_warm=yf)
        rounds += more
    else:
        q = faces.states(y_start)
        yf, q, ok, rounds = pivot(a_s, r_s, q, faces, solver, locked=locked)
    active_iters = 0
    if not bool(xp.all(ok)):
        # the columns the pivoting did not finish: monotone active set from the better
        # (in F) of the MSM iterate and the pivoting's last point
        cols = xp.nonzero(~ok)[0]
        y_in_c = y_start[:, cols]
        if locked is not None:
            y_in_c = xp.where(locked[:, cols], 0.0, y_in_c)
        start = xp.where(
            _no_increase(xp, a_s, r_s[:, cols], y_in_c, yf[:, cols], pen_s)[0][None, :],
            yf[:, cols],
            y_in_c,
        )
        if _tail_on_host(solver, pen_s, locked, n):
            ya, active_iters = _host_active_set(xp, a_s, r_s[:, cols], start, threads)
        elif locked is None and n <= PWL_MAX_N:
            # the per-column active set on the host: singular faces handled as such
            ya, active_iters = _host_pwl(xp, a_s, r_s[:, cols], start, pen_s, threads)
        else:
            lc = None if locked is None else locked[:, cols]
            faces = faces if faces is not None else Faces(xp, pen_s, n)
            ya, _, active_iters = active_set(
                a_s, r_s[:, cols], start, faces.states(start), faces, solver, locked=lc
            )
        yf[:, cols] = ya
    xf = yf * s
    if not penalty.is_convex:
        keep = _no_increase(xp, a64, r64, x_in, xf, penalty, design)[0]
        keep = keep & _fixed_points(xp, xf, xp.arange(c), sweep, x.dtype, tol)
        # a singular support system with r outside its range (F unbounded below on the
        # support) gives a huge, meaningless solution whose F cannot be evaluated: refused
        big_old = xp.max(xp.abs(x_in), axis=0)
        big_new = xp.max(xp.abs(xf), axis=0)
        keep = keep & (big_new <= POLISH_GROWTH * xp.maximum(big_old, xp.ones_like(big_old)))
        x_out = xp.where(keep[None, :], xf, x_in)
        return x_out, _info(xp, solver, rounds, active_iters, 0, keep)
    x_out = xf
    fallback = 0
    kkt = kkt_residual(a64, r64, x_out, penalty)
    todo = xp.nonzero(xp.asarray(kkt > tol))[0]
    if todo.shape[0] > 0 and method != "active_set" and n <= PWL_MAX_N:
        # the KKT conditions fail where a face was (numerically) singular: the host's
        # active set, which handles such faces, from where the pivoting stopped
        ys, more = _host_pwl(xp, a_s, r_s[:, todo], x_out[:, todo] / s, pen_s, threads)
        active_iters = max(active_iters, more)
        x_out[:, todo] = ys * s
        kkt_todo = kkt_residual(a64, r64[:, todo], x_out[:, todo], penalty)
        kkt[to_host(todo)] = kkt_todo
        todo = todo[xp.asarray(kkt_todo > tol)]
    while todo.shape[0] > 0 and fallback < fallback_rounds:
        fallback += 1
        xs = x_out[:, todo]
        if sweep is not None:
            xs = xp.astype(sweep(xp.astype(xs, x.dtype), todo, fallback_sweeps), xp.float64)
        faces = faces if faces is not None else Faces(xp, pen_s, n)
        ys = projected_face_step(a_s, r_s[:, todo], xs / s, pen_s, faces, solver)
        xs = ys * s
        x_out[:, todo] = xs
        kkt_todo = kkt_residual(a64, r64[:, todo], xs, penalty)
        kkt[to_host(todo)] = kkt_todo
        todo = todo[xp.asarray(kkt_todo > tol)]
    if todo.shape[0] > 0 and settle is not None:
        # plain MSM resumed from the finish's input (the iterate of its first sweeps, or
        # x0): plain MSM's own answer, taken where it is better, so that no column ends
        # above it
        xs = xp.astype(settle(xp.astype(x_in[:, todo], x.dtype), todo), xp.float64)
        better, _ = _no_increase(
            xp, a64, r64[:, todo], x_out[:, todo], xs, penalty, _columns(design, todo)
        )
        x_out[:, todo] = xp.where(better[None, :], xs, x_out[:, todo])
        kkt[to_host(todo)] = kkt_residual(a64, r64[:, todo], x_out[:, todo], penalty)
    keep, f_out = _no_increase(xp, a64, r64, x_in, x_out, penalty, design)
    info = _info(xp, solver, rounds, active_iters, fallback, keep)
    if bool(xp.all(keep)):  # what the caller would compute again: F and KKT of x_out
        info.update({"_f_design" if design is not None else "_f_columns": f_out})
        info["_kkt_residual"] = kkt
    else:
        x_out = xp.where(keep[None, :], x_out, x_in)
    return x_out, info


def _tail_on_host(solver, penalty, locked, n):
    """Whether the columns a GPU's pivoting left unfinished go to the host active set.

    On a GPU every active-set step is a batched face solve of a few columns, its cost
    fixed by kernel launches and Python, and the stragglers of an ill-conditioned batch
    take tens of steps: spectra 300 x 60, r = 2000 on an H200 (12 pivoting rounds, then 28
    steps) spent 0.149 s of the 0.229 s call in them under the profiler
    (``benchmarks/bench_gpu_nnls.py``; the same pivoting on NumPy arrays leaves 523 of the
    2000 columns).  Lawson & Hanson per column on the host
    (:func:`msm_gpu.solvers.nnls_columns.nnls_active_set`) needs only A (n x n) and those columns
    copied: that call 0.167 -> 0.066 s, the same objective (same H200, in turn), so each
    of the 28 GPU steps had cost at least 3.6 ms.  NNLS
    with factorised faces (n <= :data:`DIRECT_MAX_N_DEVICE`) only: above it a column's
    host solves cost O(n^3) and the GPU's CG faces were not measured against them."""
    return (
        not solver.on_host
        and solver.method == "direct"
        and locked is None
        and n <= DIRECT_MAX_N_DEVICE
        and _is_nonnegativity(penalty)
    )


def _host_pwl(xp, a, r, start, penalty, threads):
    """:func:`msm_gpu.solvers.pwl_active_set.pwl_active_set` on the host from ``start`` (in
    ``xp``); the answer back in ``xp`` and the most iterations of any column."""
    faces = Faces(np, penalty, a.shape[0])
    y, _, iterations = pwl_active_set(
        to_host(a), to_host(r), faces, to_host(start), threads=threads
    )
    return xp.asarray(y), int(iterations.max(initial=0))


def _host_active_set(xp, a, r, start, threads):
    """NNLS min 1/2 y'Ay + y'r, y >= 0, per column from ``start`` on the host; the answer
    back in ``xp`` and the most iterations of any column."""
    y, _, iterations = nnls_active_set(to_host(a), -to_host(r), to_host(start), threads=threads)
    return xp.asarray(y), int(iterations.max(initial=0))


def _zero_inside_a_box(penalty):
    """Some row has lb < 0 < ub with a finite bound: x = 0 lies inside a piece of h, and
    MSM sweeps find the bounds that hold before the active set starts (a box)."""
    if penalty.code != CODE_BOX:
        return False
    lb = np.asarray(penalty.lb, dtype=np.float64)
    ub = np.asarray(penalty.ub, dtype=np.float64)
    inside = (lb < 0) & (ub > 0) & (np.isfinite(lb) | np.isfinite(ub))
    return bool(np.any(inside))


def _is_nonnegativity(penalty):
    """h = indicator(x >= 0) on every row (NonNeg, or Box(0, inf))."""
    return (
        penalty.code == CODE_BOX
        and bool(np.all(np.asarray(penalty.lb) == 0.0))
        and bool(np.all(np.asarray(penalty.ub) == np.inf))
    )


def _info(xp, solver, rounds, active_iters, fallback, keep):
    return {
        "finish_rounds": rounds,
        "finish_active_set_iterations": active_iters,
        "finish_fallback_rounds": fallback,
        "finish_accepted": np.asarray(to_host(keep)),
        "finish_face_solves": solver.solves,
        "finish_cg_iterations": solver.cg_iterations,
    }


def _columns(design, cols):
    """``design`` restricted to the columns ``cols`` of D (None stays None)."""
    return None if design is None else design.columns(cols)


def _no_increase(xp, a, r, x_old, x_new, penalty, design=None):
    """Columns where F(x_new) is not above F(x_old) beyond rounding, and F(x_new) per column.

    With the ``design`` (least squares), F comes from the residual (:class:`Design`),
    accurate to its own rounding, and x_new is kept where F(x_new) <= F(x_old) + that
    rounding.  Without it, F comes from the Gram form, whose rounding grows with
    (sum_j |x_j| sqrt(A_jj))^2 (:func:`objective_with_error`): x_new is kept only if
    F(x_new) + its error <= F(x_old) + its error, so that a huge x_new on a singular face
    (where the Gram form is noise) cannot pass for a decrease.
    """
    if design is not None:
        f_old, allowance = design.objective(x_old, penalty)
        f_new, _ = design.objective(x_new, penalty)
        return f_new <= f_old + allowance, f_new
    f_old, err_old = objective_with_error(xp, a, r, x_old, penalty)
    f_new, err_new = objective_with_error(xp, a, r, x_new, penalty)
    return f_new + err_new <= f_old + err_old, f_new


def objective_with_error(xp, a, r, x, penalty):
    """F per column in the Gram form and a bound on its rounding error.

    (A x)_j is off by at most n eps sum_k |A_jk| |x_k| <= n eps sqrt(A_jj) S with
    S = sum_k sqrt(A_kk) |x_k| (A PSD: |A_jk| <= sqrt(A_jj A_kk)); the bound taken is
    sqrt(n) eps S^2 (the typical, not the worst, accumulation) plus 4 eps times the size
    of the other terms.
    """
    f, size = column_objective(xp, a, r, x, penalty)
    n = a.shape[0]
    root = xp.sqrt(xp.clip(xp.astype(xp.diagonal(a), xp.float64), 0.0, None))
    big = xp.sum(root[:, None] * xp.abs(xp.astype(x, xp.float64)), axis=0)
    eps = np.finfo(np.float64).eps
    return f, 4 * eps * size + math.sqrt(n) * eps * big * big


def _fixed_points(xp, xf, cols, sweep, dtype, tol):
    """Columns of xf that one MSM sweep leaves in place (to the MSM stopping rule)."""
    if sweep is None:
        return xp.ones((xf.shape[1],), dtype=xp.bool)
    xd = xp.astype(xf, dtype)
    moved = xp.astype(sweep(xd, cols, 1), xp.float64, copy=False) - xp.astype(
        xd, xp.float64, copy=False
    )
    step = xp.linalg.vector_norm(moved, axis=0)
    size = xp.linalg.vector_norm(xf, axis=0)
    return step <= tol * xp.maximum(size, xp.ones_like(size))


# -- MSM + finish: what msm_gpu.solve runs when finish is not None ---------------------------


def check_finish(finish):
    """Validate the ``finish`` option: "auto", "exact" or None."""
    if finish is None or (isinstance(finish, str) and finish in FINISH_MODES):
        return finish
    raise ValueError(f"finish must be 'auto', 'exact' or None, got {finish!r}")


def face_method(finish, n, on_host=True, penalty=None):
    """How faces are solved: "cg" for large n under "auto" (n > :data:`DIRECT_MAX_N` on the
    host, > :data:`DIRECT_MAX_N_DEVICE` on a GPU), factorisations otherwise; for NNLS
    (``penalty`` NonNeg) on the host with n <= :data:`ACTIVE_SET_MAX_N`, "active_set"."""
    if on_host and n <= ACTIVE_SET_MAX_N and penalty is not None and penalty.is_convex:
        return "active_set"
    limit = DIRECT_MAX_N if on_host else DIRECT_MAX_N_DEVICE
    if finish == "auto" and n > limit:
        return "cg"
    return "direct"


#: Why a solve with finish did not finish (A not shown PSD: check_convergence=False).
FINISH_SKIPPED = "A was not shown positive semidefinite (check_convergence=False): plain MSM"


def run_msm_finished(
    backend,
    a,
    r,
    x0,
    penalty,
    splitting,
    *,
    finish,
    panel,
    psd_known=True,
    threads=None,
    fine=None,
    design=None,
    **loop,
):
    """MSM sweeps through :func:`msm_gpu.solvers.loop.run_iterations`, then the exact finish.

    Convex h: MSM runs in chunks of :data:`WARMUP_CHUNK` sweeps until the face (the
    entries at a bound / at zero) stops changing (fewer than :data:`WARMUP_SETTLED` of the
    entries move between chunks) or ``min(max_iter, WARMUP_MAX)`` sweeps are done; then
    :func:`finish_columns` (which goes back to MSM sweeps for columns it cannot finish).  A
    column is converged when its relative KKT residual (:func:`kkt_residual`) is <= ``tol``.
    Nonconvex h (L0, Lp): the plain MSM run to its own stopping rule, then the polish;
    ``converged`` keeps MSM's meaning (the step rule).

    ``psd_known``: A was shown positive semidefinite (C'C, or the PSD test passed); the
    face solves of a convex finish need it, so without it the plain MSM run (to its own
    stopping rule) is returned, with ``info["finish_skipped"]`` saying why.
    ``fine``: a and r in float64 for a float32 problem (``Problem.fine``): the finish
    and the reported KKT residual use them.  ``design``: C and D of a least-squares
    problem (``Problem.design``): the finish compares F from the residual, and hands it
    on in ``info["_f_design"]`` (float64 runs) for the result.  ``x0`` is handed over:
    the sweeps may overwrite it.
    ``loop`` holds the keywords of ``run_iterations`` (tol, max_iter, time_limit,
    record_objective, callback, to_user, start_time, ...).  Returns its
    :class:`~msm_gpu.solvers.loop.LoopOutcome`, with ``info`` extended by the finish details
    (``kkt_residual`` per column, ``finish``, ``finish_method``) and ``timings["finish"]``.
    """
    from ..solvers.loop import run_iterations
    from ..solvers.msm import MsmMethod

    xp = backend.xp
    n, c = r.shape
    tol, max_iter = loop["tol"], loop["max_iter"]
    record_objective = loop["record_objective"]

    def msm_run(x_start, rr, x0_owned=False, **overrides):
        options = {**loop, **overrides}
        method = MsmMethod(
            backend, a, rr, x_start, penalty, splitting, panel, threads=threads, x0_owned=x0_owned
        )
        return run_iterations(method, n_cols=rr.shape[1], **options)

    def settle(x_cols, cols):
        quiet = {"time_limit": None, "record_objective": False, "callback": None}
        quiet.update({"verbose": False, "to_user": lambda v: v, "x_floor": None})
        return msm_run(x_cols, r[:, cols], start_time=time.perf_counter(), **quiet).x

    def sweep(x_cols, cols, k):
        quiet = {"tol": 0.0, "max_iter": k, "time_limit": None, "record_objective": False}
        quiet.update({"callback": None, "verbose": False, "to_user": lambda v: v})
        quiet["x_floor"] = None
        return msm_run(x_cols, r[:, cols], start_time=time.perf_counter(), **quiet).x

    if penalty.is_convex and not psd_known:
        # the face solves need A PSD and nothing showed it: the plain MSM run, as is
        out = msm_run(x0, r)
        info = dict(out.info)
        info.update({"finish": None, "finish_skipped": FINISH_SKIPPED})
        return replace(out, info=info)
    method = face_method(finish, n, backend.on_host, penalty)
    # sweeps asked for: a callback or progress bar watches them, or tol = 0 (exactly
    # max_iter iterations, then the finish)
    sweeps_wanted = loop["callback"] is not None or loop.get("verbose") or tol == 0
    if method == "active_set" and not sweeps_wanted and not _zero_inside_a_box(penalty):
        # the host's active set from x0 needs no sweeps where x = 0 is a vertex of h
        # (NNLS, l1): they find faces it then has to undo (benchmarks/bench_nnls.py)
        out = _start_outcome(xp, a, r, x0, penalty, record_objective, splitting)
    elif penalty.is_convex:
        # warm-up: MSM until the face settles (checked every WARMUP_CHUNK sweeps)
        faces = Faces(xp, penalty, n)
        seen = {"q": faces.states(x0)}

        def face_settled(method, k):
            if k % WARMUP_CHUNK:
                return False
            q = faces.states(method.current_x())
            moved = float(xp.mean(xp.astype(q != seen["q"], xp.float64, copy=False)))
            seen["q"] = q
            return moved < WARMUP_SETTLED

        out = msm_run(
            x0, r, x0_owned=True, max_iter=min(max_iter, WARMUP_MAX), phase_done=face_settled
        )
    else:
        out = msm_run(x0, r, x0_owned=True)
    history = list(out.objective)
    n_iter, n_iter_cols = out.n_iter, out.n_iter_columns
    timings = dict(out.timings)
    x = out.x
    stopped = out.diverged or out.message.startswith(("stopped", "reached time_limit"))
    started = time.perf_counter()
    info = dict(out.info)
    info.update({"finish": finish, "finish_method": method})
    known = (None, None)  # F and KKT per column of x, when the finish has them
    if not stopped:
        with _blas_threads(backend, n, c):
            x64, details = finish_columns(
                a,
                r,
                x,
                penalty,
                method=method,
                tol=tol,
                sweep=sweep,
                settle=settle,
                threads=threads,
                fine=fine,
                design=design,
            )
        if a.dtype == xp.float64:
            known = details.get("_f_columns"), details.get("_kkt_residual")
            if "_f_design" in details:
                info["_f_design"] = details["_f_design"]
        details.pop("_f_columns", None)
        details.pop("_kkt_residual", None)
        details.pop("_f_design", None)
        info.update(details)
        x = xp.astype(x64, a.dtype)
    f_cols, kkt = known
    if kkt is None:
        kkt = kkt_residual(*(fine if fine is not None else (a, r)), x, penalty)
    info["kkt_residual"] = kkt
    if design is not None:
        f_cols = None  # the result takes F from the residual (problem.user_outcome)
    elif f_cols is None and a.dtype == xp.float64:
        f_cols, _ = column_objective(xp, a, r, x, penalty)
    elif f_cols is None:
        # as the plain run reports it: the bounds compared in x's dtype (a float32 x at a
        # bound is the bound rounded to float32, outside the float64 box by an ulp)
        from ..solvers.msm import column_objectives

        f_cols = column_objectives(xp, a, r, x, penalty)[0]
    fun = math.nan if f_cols is None else float(xp.sum(f_cols))
    if record_objective:
        history.append(fun)
    if penalty.is_convex:
        converged = to_host(kkt <= tol)
        if stopped:
            message = out.message
        elif converged.all():
            message = f"converged: KKT residual <= tol = {tol:g} in every column (finish)"
        else:
            message = (
                f"finish: {int((~converged).sum())} of {c} columns have a KKT "
                f"residual above tol = {tol:g}"
            )
    else:
        converged = out.converged_columns
        message = out.message + " (then the support polish)"
    timings["finish"] = time.perf_counter() - started
    return LoopOutcome(
        x=x,
        fun_columns=f_cols,
        fun=fun,
        n_iter=n_iter,
        converged_columns=np.asarray(converged, dtype=bool),
        n_iter_columns=n_iter_cols,
        message=message,
        objective=np.asarray(history, dtype=np.float64),
        timings=timings,
        info=info,
        diverged=out.diverged,
    )


def _start_outcome(xp, a, r, x0, penalty, record_objective, splitting):
    """The outcome of zero MSM iterations from x0 (what the finish starts from); its info
    holds the splitting's parameters, as a run's does."""
    c = r.shape[1]
    history = []
    if record_objective:
        history.append(float(xp.sum(column_objective(xp, a, r, x0, penalty)[0])))
    return LoopOutcome(
        x=x0,
        fun_columns=None,
        fun=math.nan,
        n_iter=0,
        converged_columns=np.zeros(c, dtype=bool),
        n_iter_columns=np.zeros(c, dtype=np.int64),
        message="no MSM iterations (active set from x0)",
        objective=np.asarray(history, dtype=np.float64),
        timings={"setup": 0.0, "iterations": 0.0},
        info={"omega": splitting.omega, "theta": splitting.theta, "delta": splitting.delta},
        diverged=False,
    )


#: Up to this n the finish's GEMMs ((n x n) @ (n x c)) are thin and memory-bound: BLAS runs
#: them on one thread (threads cost more than they save there, above all on a busy machine).
SERIAL_BLAS_N = 128


def _blas_threads(backend, n, c):
    """Host BLAS on one thread for a finish with n <= SERIAL_BLAS_N (else no change)."""
    from contextlib import nullcontext

    if backend.on_host and n <= SERIAL_BLAS_N and n * n * c > 1e6:
        return backend.limit_host_blas()
    return nullcontext()
