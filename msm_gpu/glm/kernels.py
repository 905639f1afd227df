"""Numba kernels of the proximal Newton loop on the CPU: one outer iteration per column.

The same iteration as :class:`msm_gpu.glm.newton.NewtonMethod` (module docstring of
``newton.py``: working set, forcing sequence, Armijo backtracking, prox-gradient
safeguard, stopping measure), compiled whole, so that an outer iteration costs a few
passes over the nonzeros of X instead of tens of NumPy calls.  The inner MSM sweep
(paper, eq. (3), with B = D/omega + L + theta I) reads the model's Hessian
H = X_W' diag(c) X_W through X instead of forming it: the model's partial derivative at
Y is

    g_j(Y) = G_j + X_j' (c o X_W (Y - W_k)),

and v = c o X_W (Y - W_k) is kept up to date after every 1-D step (v += t (c o X_j)), so
a sweep costs O(nnz(X_W)) rather than O(|W|^2) + the O(m |W|^2) of forming H.  For dense X
H is formed (one GEMM) where the sweeps expected make that cheaper
(:func:`_model_sweeps_gram`).  The 1-D step is MSM's:
t = argmin_t h(t) + 1/2 B_jj t^2 + t (g_j(Y) - B_jj y_j).

Layout: the design by columns (dense: an (m, n) Fortran-order array; sparse: CSC
``indptr, indices, values``), the iterate and the predictor one row per problem
(``W[c]``, ``Z[c]``), so that every loop reads contiguous memory.
"""

from __future__ import annotations

import math

import numpy as np

from ..backends.cpu.jit import njit
from ..backends.cpu.kernels import h_scalar, prox_scalar
from ..penalties import CODE_BOX, CODE_L1
from ..solvers.anderson import extrapolation_weights

#: Reassociation lets LLVM split the dot products' sums over several accumulators (the
#: sweep over sparse columns was bound by the latency of one add chain); rounding-level
#: changes only, no assumption about NaN or inf.
FAST = {"reassoc", "contract"}

#: Anderson acceleration of the inner sweeps (convex h): every ANDERSON_DEPTH sweeps the
#: combination of the last iterates that best cancels their differences is tried, and kept
#: only if it lowers the model (Bertrand & Massias 2021, "Anderson acceleration of
#: coordinate descent"); it cuts the inner sweeps severalfold (docs/development.md,
#: "Proximal Newton: kernels and settings").
ANDERSON_DEPTH = 5

LOSS_LOGISTIC = 0
LOSS_POISSON = 1

#: Outcome codes per column and iteration (``status``).
STEP_NEWTON = 0  # the Armijo line search accepted a step
STEP_FALLBACK = 1  # the prox-gradient safeguard did
STEP_STUCK = 2  # neither found a decrease representable in floating point


# -- the losses, elementwise (formulas of losses.py) ---------------------------------------


@njit(inline="always")
def _loss(kind, z, y):
    if kind == LOSS_LOGISTIC:
        t = -y * z  # log(1 + exp(t)), without overflow
        return max(t, 0.0) + math.log1p(math.exp(-abs(t)))
    return math.exp(z) - y * z


@njit(inline="always")
def _derivative(kind, z, y):
    if kind == LOSS_LOGISTIC:
        t = -y * z
        e = math.exp(-abs(t))
        sig = 1.0 / (1.0 + e) if t >= 0.0 else e / (1.0 + e)
        return -y * sig
    return math.exp(z) - y


@njit(inline="always")
def _curvature(kind, z, y):
    if kind == LOSS_LOGISTIC:
        e = math.exp(-abs(z))
        return e / ((1.0 + e) * (1.0 + e))
    return math.exp(z)


# -- columns of the design --------------------------------------------------------------


@njit(inline="always")
def _axpy(sparse, xd, indptr, indices, values, j, a, out):
    """out += a X_j."""
    if sparse:
        for k in range(indptr[j], indptr[j + 1]):
            out[indices[k]] += a * values[k]
    else:
        for i in range(xd.shape[0]):
            out[i] += a * xd[i, j]


@njit(inline="always")
def _copy(dst, src):
    """dst[:] = src for 1-D arrays of one length, as a loop: an array assigned to a slice
    compiles Numba's shape-mismatch message (string formatting), seconds of a first call
    on an empty cache (docs/first_call.md)."""
    for i in range(dst.shape[0]):
        dst[i] = src[i]


# -- pieces of one iteration --------------------------------------------------------------


@njit(inline="always")
def _h_sum(code, w, lam, lb, ub, p):
    acc = 0.0
    for j in range(w.shape[0]):
        acc += h_scalar(code, w[j], lam[j], lb[j], ub[j], p)
    return acc


@njit(inline="always")
def _q_sum(kind, z, y, s):
    acc = 0.0
    for i in range(z.shape[0]):
        acc += s[i] * _loss(kind, z[i], y[i])
    return acc


@njit(nogil=True)
def _loss_derivatives(kind, y, s, z, work, curv):
    """work = s o l'(z, y), curv = s o l''(z, y)."""
    for i in range(z.shape[0]):
        work[i] = s[i] * _derivative(kind, z[i], y[i])
        curv[i] = s[i] * _curvature(kind, z[i], y[i])


@njit(inline="always")
def _gradient_and_diagonal(sparse, xd, indptr, indices, values, work, curv, grad, hdiag):
    """grad = X' work, hdiag = (X o X)' curv (one pass over X); returns max(hdiag)."""
    if sparse:
        _gradient_and_diagonal_sparse(indptr, indices, values, work, curv, grad, hdiag)
    else:
        _gradient_and_diagonal_dense(xd, work, curv, grad, hdiag)
    top = 0.0
    for j in range(grad.shape[0]):
        top = max(top, hdiag[j])
    return top


@njit(nogil=True, fastmath=FAST)
def _gradient_and_diagonal_sparse(indptr, indices, values, work, curv, grad, hdiag):
    for j in range(grad.shape[0]):
        acc = 0.0
        acc_sq = 0.0
        for q in range(indptr[j], indptr[j + 1]):
            i = indices[q]
            x = values[q]
            acc += x * work[i]
            acc_sq += x * x * curv[i]
        grad[j] = acc
        hdiag[j] = acc_sq


@njit(nogil=True, fastmath=FAST)
def _gradient_and_diagonal_dense(xd, work, curv, grad, hdiag):
    for j in range(grad.shape[0]):
        acc = 0.0
        acc_sq = 0.0
        for i in range(xd.shape[0]):
            x = xd[i, j]
            acc += x * work[i]
            acc_sq += x * x * curv[i]
        grad[j] = acc
        hdiag[j] = acc_sq


@njit(inline="always")
def _measure(
    sparse, xd, indptr, indices, values, kind, y, s, z, w, code, lam, lb, ub, p,
    curv, grad, hdiag, diag, step,
):  # fmt: skip
    """Gradient, Hessian weights and diagonal, floored metric and prox-gradient step at W.

    Returns (||step||, ||W||)."""
    # (three compiled functions, not one loop nest: LLVM made the fused version slower;
    # docs/development.md)
    work = np.empty(z.shape[0])
    _loss_derivatives(kind, y, s, z, work, curv)
    top = _gradient_and_diagonal(sparse, xd, indptr, indices, values, work, curv, grad, hdiag)
    floor = max(1e-12 * top, 1e-300)  # newton._floor
    step_sq = 0.0
    w_sq = 0.0
    for j in range(w.shape[0]):
        d = max(hdiag[j], floor)
        diag[j] = d
        t, _ = prox_scalar(code, grad[j] - d * w[j], d, lam[j], lb[j], ub[j], p)
        step[j] = t - w[j]
        step_sq += step[j] * step[j]
        w_sq += w[j] * w[j]
    return math.sqrt(step_sq), math.sqrt(w_sq)


@njit(nogil=True)
def _select(x, k):
    """The k-th smallest entry of ``x`` (0-based; ``np.partition(x, k)[k]``, no NaN), by
    quickselect in place: ``np.partition`` compiles Numba's sort and ``np.unique``, seconds
    of a first call on an empty cache (docs/first_call.md)."""
    lo = 0
    hi = x.shape[0] - 1
    while lo < hi:
        # median of three as the pivot, then Hoare's partition of x[lo..hi]
        mid = (lo + hi) // 2
        if x[mid] < x[lo]:
            x[lo], x[mid] = x[mid], x[lo]
        if x[hi] < x[lo]:
            x[lo], x[hi] = x[hi], x[lo]
        if x[hi] < x[mid]:
            x[mid], x[hi] = x[hi], x[mid]
        pivot = x[mid]
        i = lo
        j = hi
        while i <= j:
            while x[i] < pivot:
                i += 1
            while pivot < x[j]:
                j -= 1
            if i <= j:
                x[i], x[j] = x[j], x[i]
                i += 1
                j -= 1
        if k <= j:
            hi = j
        elif k >= i:
            lo = i
        else:
            return x[k]
    return x[k]


@njit(inline="always")
def _working_set(w, step, diag, free_row, use_ws, ws_min, ws_growth, score, rows):
    """Rows of the model (newton._working_set): the support, the free row and the
    largest violators sqrt(D) |step| (at most max(ws_min, ws_growth nnz)), ascending.

    Returns the number of rows written to ``rows``."""
    n = w.shape[0]
    if not use_ws:
        for j in range(n):
            rows[j] = j
        return n
    nnz = 0
    n_viol = 0
    for j in range(n):
        if w[j] != 0.0:
            nnz += 1
            score[j] = 0.0
        else:
            score[j] = math.sqrt(diag[j]) * abs(step[j])
            if score[j] > 0.0:
                n_viol += 1
    cap = max(ws_min, ws_growth * nnz)
    kth = 0.0
    if n_viol > cap:
        positive = np.empty(n_viol)
        k = 0
        for j in range(n):
            if score[j] > 0.0:
                positive[k] = score[j]
                k += 1
        kth = _select(positive, n_viol - cap)  # the cap-th largest
    count = 0
    for j in range(n):
        if w[j] != 0.0 or j == free_row or (score[j] > 0.0 and score[j] >= kth):
            rows[count] = j
            count += 1
    return count


@njit(inline="always")
def _model_sweeps(
    sparse, xd, indptr, indices, values, curv, grad, hdiag, diag, code, lam, lb, ub, p,
    rows, yk, theta, omega, inner_tol, inner_max_iter,
):  # fmt: skip
    """MSM sweeps on the model over the working set ``rows``, in place on yk (from W's
    entries), H read through X.  Returns the number of sweeps."""
    b = _model_diagonal(hdiag, diag, rows, theta, omega)
    depth = ANDERSON_DEPTH if code == CODE_BOX or code == CODE_L1 else 0  # convex h only
    if sparse:
        return _sweeps_sparse(
            indptr, indices, values, curv, grad, code, lam, lb, ub, p, rows, yk, b, inner_tol,
            inner_max_iter, depth,
        )  # fmt: skip
    return _sweeps_dense(
        xd, curv, grad, code, lam, lb, ub, p, rows, yk, b, inner_tol, inner_max_iter, depth
    )


@njit(inline="always")
def _model_diagonal(hdiag, diag, rows, theta, omega):
    """B_jj = H_jj / omega + theta mean(diag H) (``solve``'s relative theta) on the rows;
    the floored diagonal where both vanish."""
    nws = rows.shape[0]
    mean = 0.0
    for k in range(nws):
        mean += hdiag[rows[k]]
    mean /= nws
    b = np.empty(nws)
    for k in range(nws):
        j = rows[k]
        b[k] = max(hdiag[j] / omega + theta * mean, diag[j] if hdiag[j] <= 0.0 else 0.0)
    return b


@njit(inline="always")
def _step_1d(code, g, b, yk, k, lam, lb, ub, p):
    """MSM's 1-D step on y_k (paper, eq. (3)): y_k = argmin_t h(t) + 1/2 b t^2 +
    t (g - b y_k), g the model's partial derivative at the current Y.  Returns the move."""
    t, _ = prox_scalar(code, g - b * yk[k], b, lam, lb, ub, p)
    dt = t - yk[k]
    yk[k] = t
    return dt


@njit(inline="always")
def _inner_converged(change_sq, norm_sq, inner_tol):
    """The inner stopping rule: ||Y_new - Y|| <= inner_tol max(||Y_new||, 1)."""
    return math.sqrt(change_sq) <= inner_tol * max(math.sqrt(norm_sq), 1.0)


# The two sweeps keep v = c o X_W (Y - W), so that g_j(Y) = G_j + X_j' v (one pass over
# X_j) and a move t of y_j is v += t (c o X_j) (a second pass over the same entries).


@njit(nogil=True, fastmath=FAST)
def _sweeps_sparse(
    indptr, indices, values, curv, grad, code, lam, lb, ub, p, rows, yk, b, inner_tol,
    inner_max_iter, depth,
):  # fmt: skip
    v = np.zeros(curv.shape[0])
    history = _AndersonHistory(depth, yk, v)
    sweeps = 0
    for _ in range(inner_max_iter):
        change_sq = 0.0
        norm_sq = 0.0
        for k in range(rows.shape[0]):
            j = rows[k]
            g = grad[j]
            for q in range(indptr[j], indptr[j + 1]):
                g += values[q] * v[indices[q]]
            dt = _step_1d(code, g, b[k], yk, k, lam[j], lb[j], ub[j], p)
            if dt != 0.0:
                for q in range(indptr[j], indptr[j + 1]):
                    i = indices[q]
                    v[i] += dt * values[q] * curv[i]
                change_sq += dt * dt
            norm_sq += yk[k] * yk[k]
        sweeps += 1
        if _inner_converged(change_sq, norm_sq, inner_tol):
            break
        _anderson(history, yk, v, rows, grad, curv, code, lam, lb, ub, p)
    return sweeps


@njit(nogil=True, fastmath=FAST)
def _sweeps_dense(
    xd, curv, grad, code, lam, lb, ub, p, rows, yk, b, inner_tol, inner_max_iter, depth
):
    m = curv.shape[0]
    v = np.zeros(m)
    history = _AndersonHistory(depth, yk, v)
    sweeps = 0
    for _ in range(inner_max_iter):
        change_sq = 0.0
        norm_sq = 0.0
        for k in range(rows.shape[0]):
            j = rows[k]
            g = grad[j]
            for i in range(m):
                g += xd[i, j] * v[i]
            dt = _step_1d(code, g, b[k], yk, k, lam[j], lb[j], ub[j], p)
            if dt != 0.0:
                for i in range(m):
                    v[i] += dt * xd[i, j] * curv[i]
                change_sq += dt * dt
            norm_sq += yk[k] * yk[k]
        sweeps += 1
        if _inner_converged(change_sq, norm_sq, inner_tol):
            break
        _anderson(history, yk, v, rows, grad, curv, code, lam, lb, ub, p)
    return sweeps


@njit(inline="always")
def _AndersonHistory(depth, yk, v):
    """(depth, start Y, iterates Y_0.., their v = c o X_W (Y - W), count) for _anderson."""
    rows = depth + 1 if depth > 0 else 1
    return (depth, yk.copy(), np.empty((rows, yk.shape[0])), np.empty((rows, v.shape[0])),
            np.zeros(1, dtype=np.int64))  # fmt: skip


@njit(inline="always")
def _anderson(history, yk, v, rows, grad, curv, code, lam, lb, ub, p):
    """Record the sweep's (Y, v); after depth + 1 of them, replace (Y, v) by the
    extrapolation sum_a c_a Y_{a+1} (c: argmin ||sum_a c_a (Y_{a+1} - Y_a)||, sum c = 1)
    if that lowers the model Q(Y) = <G, Y - W> + 1/2 (Y - W)' H (Y - W) + h(Y).  v is
    linear in Y, so the extrapolated v is the same combination (no pass over X), and
    (Y - W)' H (Y - W) = sum_i v_i^2 / c_i (v_i = 0 where c_i = 0)."""
    depth, y_start, ys, vs, count = history
    if depth == 0:
        return
    n = count[0]
    _copy(ys[n], yk)
    _copy(vs[n], v)
    count[0] = n + 1
    if n < depth:
        return
    count[0] = 0
    coef = extrapolation_weights(ys, depth, yk.shape[0])
    if coef is None:
        return
    y_ext = np.zeros(yk.shape[0])
    v_ext = np.zeros(v.shape[0])
    for a in range(depth):
        y_ext += coef[a] * ys[a + 1]
        v_ext += coef[a] * vs[a + 1]
    if _model_value(y_ext, v_ext, y_start, rows, grad, curv, code, lam, lb, ub, p) < (
        _model_value(yk, v, y_start, rows, grad, curv, code, lam, lb, ub, p)
    ):
        _copy(yk, y_ext)
        _copy(v, v_ext)


@njit(inline="always")
def _model_value(y, v, y_start, rows, grad, curv, code, lam, lb, ub, p):
    """Q(Y) - q(W) with Y - W = y - y_start on the rows (v = c o X_W (Y - W))."""
    acc = 0.0
    for k in range(rows.shape[0]):
        j = rows[k]
        acc += grad[j] * (y[k] - y_start[k]) + h_scalar(code, y[k], lam[j], lb[j], ub[j], p)
    quad = 0.0
    for i in range(v.shape[0]):
        if curv[i] > 0.0:
            quad += v[i] * v[i] / curv[i]
    return acc + 0.5 * quad


@njit(nogil=True, fastmath=FAST)
def _model_sweeps_gram(
    xd, curv, grad, hdiag, diag, code, lam, lb, ub, p, rows, yk, theta, omega, inner_tol,
    inner_max_iter,
):  # fmt: skip
    """:func:`_model_sweeps` with H = X_W' diag(c) X_W formed (one GEMM; dense X): a sweep
    then costs |W|^2 instead of 2 m |W|."""
    nws = rows.shape[0]
    m = xd.shape[0]
    root = np.sqrt(curv)
    scaled = np.empty((nws, m))
    for k in range(nws):
        j = rows[k]
        for i in range(m):
            scaled[k, i] = xd[i, j] * root[i]
    H = scaled @ scaled.T
    b = _model_diagonal(hdiag, diag, rows, theta, omega)  # diag(H) = hdiag on the rows
    d = np.zeros(nws)  # Y - W
    sweeps = 0
    for _ in range(inner_max_iter):
        change_sq = 0.0
        norm_sq = 0.0
        for k in range(nws):
            j = rows[k]
            g = grad[j]
            for q in range(nws):
                g += H[k, q] * d[q]
            dt = _step_1d(code, g, b[k], yk, k, lam[j], lb[j], ub[j], p)
            if dt != 0.0:
                d[k] += dt
                change_sq += dt * dt
            norm_sq += yk[k] * yk[k]
        sweeps += 1
        if _inner_converged(change_sq, norm_sq, inner_tol):
            break
    return sweeps


@njit(inline="always")
def _direction(sparse, xd, indptr, indices, values, grad, w, code, lam, lb, ub, p, rows, yk, d, u):
    """d = Y - W on the rows, u = X d (afresh: no drift of the sweeps' running product);
    returns the predicted decrease Delta = <G, d> + h(Y) - h(W) and h off the rows."""
    delta = 0.0
    for k in range(rows.shape[0]):
        j = rows[k]
        d[k] = yk[k] - w[j]
        delta += grad[j] * d[k]
        delta += h_scalar(code, yk[k], lam[j], lb[j], ub[j], p)
        delta -= h_scalar(code, w[j], lam[j], lb[j], ub[j], p)
    h_rest = 0.0  # summed directly (no cancellation against h on the rows)
    k = 0
    for j in range(w.shape[0]):
        if k < rows.shape[0] and rows[k] == j:
            k += 1
        else:
            h_rest += h_scalar(code, w[j], lam[j], lb[j], ub[j], p)
    u[:] = 0.0
    for k in range(rows.shape[0]):
        if d[k] != 0.0:
            _axpy(sparse, xd, indptr, indices, values, rows[k], d[k], u)
    return delta, h_rest


@njit(inline="always")
def _line_search(
    kind, y, s, z, w, f0, code, lam, lb, ub, p, rows, d, u, delta, h_rest, rounding, sigma,
    max_halvings, stats,
):  # fmt: skip
    """Armijo backtracking along W + beta d (newton.NewtonMethod._line_search), in place
    on w and z.  Returns (accepted, F)."""
    z_try = np.empty_like(z)
    w_try = np.empty_like(w)  # W's dtype: F is evaluated at the point that is stored
    tiny = rounding * abs(f0)
    beta = 1.0
    for trial in range(max_halvings + 1):
        stats[1] = trial + 1
        for i in range(z.shape[0]):
            z_try[i] = z[i] + beta * u[i]
        h_try = h_rest
        for k in range(rows.shape[0]):
            j = rows[k]
            w_try[k] = w[j] + beta * d[k]
            h_try += h_scalar(code, w_try[k], lam[j], lb[j], ub[j], p)
        f_try = _q_sum(kind, z_try, y, s) + h_try
        # Armijo; where the predicted decrease is below the rounding of F (at the optimum
        # to machine precision) a step that does not increase F is taken
        flat = (-delta <= tiny) and (f_try <= f0 + tiny)
        if (delta < 0.0 and f_try <= f0 + sigma * beta * delta) or flat:
            for k in range(rows.shape[0]):
                w[rows[k]] = w_try[k]
            _copy(z, z_try)
            return True, f_try
        beta *= 0.5
    return False, f0


@njit(inline="always")
def _safeguard(
    sparse, xd, indptr, indices, values, kind, y, s, z, w, f0, code, lam, lb, ub, p, grad,
    diag, sigma, max_doublings, stats,
):  # fmt: skip
    """Diagonal prox-gradient steps with a doubling metric tau D until F decreases, in
    place on w and z.  Returns (accepted, F)."""
    pw = np.empty_like(w)
    z_try = np.empty_like(z)
    tau = 1.0
    for attempt in range(max_doublings):
        stats[2] = attempt + 1
        decrease = 0.0
        _copy(z_try, z)
        for j in range(w.shape[0]):
            t, _ = prox_scalar(
                code, grad[j] - tau * diag[j] * w[j], tau * diag[j], lam[j], lb[j], ub[j], p
            )
            pw[j] = t
            dp = t - w[j]
            if dp != 0.0:
                decrease += diag[j] * dp * dp
                _axpy(sparse, xd, indptr, indices, values, j, dp, z_try)
        decrease *= 0.5 * tau
        f_try = _q_sum(kind, z_try, y, s) + _h_sum(code, pw, lam, lb, ub, p)
        if decrease > 0.0 and f_try <= f0 - sigma * decrease:
            _copy(w, pw)
            _copy(z, z_try)
            return True, f_try
        tau *= 2.0
    return False, f0


def _make_newton(sparse, kind, code):
    """(step, measure): :func:`step_columns` and :func:`measure_columns` compiled for one
    kind of design (``sparse``), loss ``kind`` and penalty ``code``, all three constants of
    the compiled functions (closure variables).  The pieces of an iteration are inlined
    into them, so Numba drops the branches of the other designs, losses and codes before
    compiling (every combination at once, as arguments, was the slowest first call of all;
    docs/first_call.md); the inner sweeps and the passes over X stay compiled functions
    of their own."""

    @njit(nogil=True)
    def step(
        xd, indptr, indices, values, Y, s, Z, W, F, cols, c0, c1, lam, lb, ub, p, CURV, GRAD,
        HDIAG, DIAG, STEP, free_row, use_ws, ws_min, ws_growth, inner_tols, inner_max_iter,
        theta, omega, rounding, sigma, max_halvings, max_doublings, last_sweeps, stats,
        step_norm, w_norm,
    ):  # fmt: skip
        # (the iteration is written out here, not an inlined function of its own: Numba
        # inlines a function by copying it with everything inlined into it, which cost
        # more than the rest of this kernel's compilation)
        for a in range(c0, c1):
            c = cols[a]
            # one proximal Newton iteration on problem c, in place on W[c] and Z[c];
            # CURV[c] .. STEP[c] are the measure at W on entry (_measure); stats[a]
            # receives [inner sweeps, line-search trials, safeguard trials, working-set
            # size, outcome code]
            y, z, w, f0, st = Y[c], Z[c], W[c], F[c], stats[a]
            curv, grad, hdiag, diag = CURV[c], GRAD[c], HDIAG[c], DIAG[c]
            n = w.shape[0]
            score = np.empty(n)
            all_rows = np.empty(n, dtype=np.int64)
            nws = _working_set(
                w, STEP[c], diag, free_row, use_ws, ws_min, ws_growth, score, all_rows
            )
            st[3] = nws
            st[4] = STEP_NEWTON
            f = f0  # nws = 0: no row to move, W is optimal (the flat rule accepts it)
            if nws > 0:
                rows = all_rows[:nws]
                yk = np.empty(nws)
                for k in range(nws):
                    yk[k] = w[rows[k]]
                m = z.shape[0]
                # dense X: form H when that is cheaper over the sweeps expected (as many
                # as last time; the GEMM counted at a quarter of the loops' cost per flop)
                expected = max(last_sweeps[c], 1)
                gram = False
                if sparse:  # (a plain test: Numba folds a constant's branch)
                    gram = False
                else:
                    gram = 0.25 * m * nws * nws + expected * nws * nws < (2.0 * expected * m * nws)
                if gram:
                    st[0] = _model_sweeps_gram(
                        xd, curv, grad, hdiag, diag, code, lam, lb, ub, p, rows, yk, theta,
                        omega, inner_tols[a], inner_max_iter,
                    )  # fmt: skip
                else:
                    st[0] = _model_sweeps(
                        sparse, xd, indptr, indices, values, curv, grad, hdiag, diag, code,
                        lam, lb, ub, p, rows, yk, theta, omega, inner_tols[a], inner_max_iter,
                    )  # fmt: skip
                d = np.empty(nws)
                u = np.empty(m)
                delta, h_rest = _direction(
                    sparse, xd, indptr, indices, values, grad, w, code, lam, lb, ub, p, rows,
                    yk, d, u,
                )  # fmt: skip
                ok, f = _line_search(
                    kind, y, s, z, w, f0, code, lam, lb, ub, p, rows, d, u, delta, h_rest,
                    rounding, sigma, max_halvings, st,
                )  # fmt: skip
                if not ok:
                    st[4] = STEP_FALLBACK
                    ok, f = _safeguard(
                        sparse, xd, indptr, indices, values, kind, y, s, z, w, f0, code, lam,
                        lb, ub, p, grad, diag, sigma, max_doublings, st,
                    )  # fmt: skip
                    if not ok:  # no decrease representable in floating point: it stops
                        st[4] = STEP_STUCK
            F[c] = f  # f0 when stuck
            last_sweeps[c] = st[0]
            step_norm[a], w_norm[a] = _measure(
                sparse, xd, indptr, indices, values, kind, y, s, z, w, code, lam, lb, ub, p,
                curv, grad, hdiag, diag, STEP[c],
            )  # fmt: skip

    @njit(nogil=True)
    def measure(
        xd, indptr, indices, values, Y, s, Z, W, F, c0, c1, lam, lb, ub, p, CURV, GRAD, HDIAG,
        DIAG, STEP, step_norm, w_norm,
    ):  # fmt: skip
        for c in range(c0, c1):
            F[c] = _q_sum(kind, Z[c], Y[c], s) + _h_sum(code, W[c], lam, lb, ub, p)
            step_norm[c], w_norm[c] = _measure(
                sparse, xd, indptr, indices, values, kind, Y[c], s, Z[c], W[c], code, lam,
                lb, ub, p, CURV[c], GRAD[c], HDIAG[c], DIAG[c], STEP[c],
            )  # fmt: skip

    return step, measure


_NEWTON = {}


def _newton(sparse, kind, code):
    """The compiled (step, measure) of a design, loss and penalty code (made on first use)."""
    key = (bool(sparse), int(kind), int(code))
    if key not in _NEWTON:
        _NEWTON[key] = _make_newton(*key)
    return _NEWTON[key]


def step_columns(sparse, xd, indptr, indices, values, kind, Y, s, Z, W, F, cols, c0, c1, code,
                 *args):  # fmt: skip
    """One outer iteration on the problems cols[c0:c1] (rows of W, Z, ...), then the new
    measure; ``step_norm``/``w_norm`` (per entry of cols) get ||P - W|| and ||W||.

    ``args``: ``lam, lb, ub, p, CURV, GRAD, HDIAG, DIAG, STEP, free_row, use_ws, ws_min,
    ws_growth, inner_tols, inner_max_iter, theta, omega, rounding, sigma, max_halvings,
    max_doublings, last_sweeps, stats, step_norm, w_norm``; runs the kernel of
    :func:`_newton` ``(sparse, kind, code)``."""
    step, _ = _newton(sparse, kind, code)
    step(xd, indptr, indices, values, Y, s, Z, W, F, cols, c0, c1, *args)


def measure_columns(sparse, xd, indptr, indices, values, kind, Y, s, Z, W, F, c0, c1, code,
                    *args):  # fmt: skip
    """F, the measure and ||P - W||, ||W|| of the problems c0..c1 at W (the start).

    ``args``: ``lam, lb, ub, p, CURV, GRAD, HDIAG, DIAG, STEP, step_norm, w_norm``; runs
    the kernel of :func:`_newton` ``(sparse, kind, code)``."""
    _, measure = _newton(sparse, kind, code)
    measure(xd, indptr, indices, values, Y, s, Z, W, F, c0, c1, *args)
