"""The finish of the columns of one MSM run: face solves, pivoting, the host tails.

Takes the face of the MSM iterate per column, solves the problem restricted to it exactly
(:mod:`.pivoting`), hands the columns it cannot settle to the host active sets
(:mod:`msm_gpu.solvers.nnls_columns`, :mod:`msm_gpu.solvers.pwl_active_set`) and keeps,
per column, the finished point only where F does not increase (:func:`.objective.no_increase`).
For L0/Lp it is a support polish: least squares on the support of the MSM iterate,
accepted per column only if F decreases and the point is still a fixed point of the MSM map.
"""

from __future__ import annotations

import numpy as np

from .._input.scaling import equilibration, row_scaled_penalty
from ..arrays import namespace, to_host
from ..penalties import CODE_BOX
from ..solvers.nnls_columns import nnls_active_set
from ..solvers.pwl_active_set import pwl_active_set
from .design_polish import needs_polish, polish_from_design, why_not_polished
from .face_solves import block_pivoting
from .faces import Faces
from .objective import kkt_residual, no_increase
from .pivoting import (
    CG_LOOSE,
    CG_TIGHT,
    MAX_ROUNDS,
    POLISH_GROWTH,
    FaceSolver,
    active_set,
    pivot,
    projected_face_step,
)

#: Largest n for which "auto" factorises every face (above it: conjugate gradients), on
#: the host and on a GPU, where cuSOLVER's batched factorisations of many distinct faces
#: lose to CG's GEMMs earlier (measured: docs/benchmarks.rst, GPU NNLS).
DIRECT_MAX_N = 400
DIRECT_MAX_N_DEVICE = 128

#: Largest n for which NNLS on the host is solved by the per-column active set
#: (:mod:`msm_gpu.solvers.nnls_columns`) with no MSM sweeps before it: faster than MSM +
#: face solves up to about there (docs/development.md, "Finish thresholds").
ACTIVE_SET_MAX_N = 1024

#: Largest n for which the columns the pivoting leaves unfinished go to the per-column
#: active set on the host (:func:`msm_gpu.solvers.pwl_active_set.pwl_active_set`, one
#: n x n factor per thread).
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
    # x0 may lie outside the bounds.  The face tables are a noticeable part of a small
    # NNLS call: the active set builds them only for its fallback below
    if method == "active_set" and _is_nonnegativity(pen_s):
        faces = None
        y_start = np.maximum(x_in / s, 0.0)  # NNLS: the bounds are [0, inf)
    else:
        faces = Faces(xp, pen_s, n)
        y_start = faces.project(x_in / s)
    polish = False
    if method == "active_set" and _is_nonnegativity(pen_s):
        # NNLS on the host, small n: Lawson & Hanson per column, in Numba
        stats = {}
        yf, ok, iterations = nnls_active_set(a_s, -r_s, y_start, threads=threads, stats=stats)
        rounds = int(iterations.max(initial=0))
        # G ill-conditioned: its faces solved again from C (QR), where C is at hand
        polish = needs_polish(design, stats["cond"])
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
            no_increase(xp, a_s, r_s[:, cols], y_in_c, yf[:, cols], pen_s)[0][None, :],
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
        keep = no_increase(xp, a64, r64, x_in, xf, penalty, design)[0]
        keep = keep & _fixed_points(xp, xf, xp.arange(c), sweep, x.dtype, tol)
        # a singular support system with r outside its range (F unbounded below on the
        # support) gives a huge, meaningless solution whose F cannot be evaluated: refused
        big_old = xp.max(xp.abs(x_in), axis=0)
        big_new = xp.max(xp.abs(xf), axis=0)
        keep = keep & (big_new <= POLISH_GROWTH * xp.maximum(big_old, xp.ones_like(big_old)))
        x_out = xp.where(keep[None, :], xf, x_in)
        return x_out, _info(xp, solver, rounds, active_iters, 0, keep)
    x_out = xf
    polished = 0
    unpolished = None  # columns whose polish did not finish: not known to be exact
    skipped = why_not_polished(design) if polish else None
    if polish and skipped is None:
        x_out, polished, unpolished = polish_from_design(design, to_host(x_out), threads)
        x_out = xp.asarray(x_out)
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
        better, _ = no_increase(
            xp, a64, r64[:, todo], x_out[:, todo], xs, penalty, _columns(design, todo)
        )
        x_out[:, todo] = xp.where(better[None, :], xs, x_out[:, todo])
        kkt[to_host(todo)] = kkt_residual(a64, r64[:, todo], x_out[:, todo], penalty)
    keep, f_out = no_increase(xp, a64, r64, x_in, x_out, penalty, design)
    info = _info(xp, solver, rounds, active_iters, fallback, keep)
    info["finish_polished"] = bool(polish) and skipped is None
    info["finish_polished_columns"] = polished
    if skipped is not None:
        info["finish_polish_skipped"] = skipped
    if unpolished is not None and unpolished.any():
        info["finish_polish_unfinished"] = int(unpolished.sum())
        info["_unconverged"] = unpolished
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
    take tens of steps.  Lawson & Hanson per column on the host
    (:func:`msm_gpu.solvers.nnls_columns.nnls_active_set`) needs only A (n x n) and those
    columns copied, and was much faster (docs/development.md, "Finish thresholds").  NNLS
    with factorised faces (n <= :data:`DIRECT_MAX_N_DEVICE`) only: above it a column's
    host solves cost O(n^3) and the GPU's CG faces were not timed against them."""
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


def zero_inside_a_box(penalty):
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
