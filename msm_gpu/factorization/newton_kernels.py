"""Compiled half-steps of beta-divergence NMF: proximal Newton with MSM sweeps inside.

A half-step updates every column x (k) of one factor with the other factor F (n x k)
fixed; each column is its own problem (the paper's batched shape)

    min_{x >= 0}  q(x) = sum_i d_beta(v_i | z_i) + l1 sum(x) + l2/2 ||x||^2,   z = F x,

with v the column of the data (H-step: a column of Y, F = W; W-step: a row of Y, F = H').
Each Newton iteration is the paper's section on non-quadratic q (Tseng & Yun 2009):

1. the second-order model of q at x: gradient g = F' phi'(z) + l1 + l2 x and curvature
   A = F' diag(w) F + l2 I.  For beta in [1, 2] (Kullback-Leibler included) phi is convex
   in z and w = phi''(z); elsewhere phi'' is negative where z is far above v, and w is
   Fisher's curvature z^(beta-2) (the expected phi'' when v has mean z: Fisher scoring)
   during a fit, the larger of it and phi'' when solving to convergence (closer to
   Newton's near the solution), so that A is positive definite and the model's step a
   descent direction.  Itakura-Saito on the spectrogram-like data of
   ``benchmarks/bench_nmf_beta.py`` reached scikit-learn mu's 2000-iteration objective
   (within 1e-3) after 9-53 iterations with Fisher's curvature, 17-172 with the larger
   of the two;
2. the model min_{y >= 0} g'(y - x) + 1/2 (y - x)'A(y - x) by MSM sweeps from y = x (paper,
   eq. (4): B = L + (D + theta I) / omega, theta relative to mean(diag A)), at most
   ``max_sweeps`` of them, stopped once a sweep moves y by ``sweep_tol`` times the
   first one's move; solving to convergence (``exact``: the last W-step, ``transform``,
   a mini-batch's W) the sweeps' point is then finished by Lawson & Hanson's active set
   on the k x k model, as ``finish="exact"`` does for NNLS, so Newton's steps are exact
   (a column stops when y - x is at most ``step_tol`` max(x, y));
3. x + t (y - x) with Armijo's rule (sigma = 1e-4, t halved), t first capped below the
   barrier where some z_i with v_i > 0 would reach 0 (beta <= 1).  The rule reads the
   change of q, sum_i [phi(z_i + t u_i) - phi(z_i)] with u = F (y - x), written with
   log1p / expm1 of t u_i / z_i: accurate for the small steps near a solution, and one
   logarithm per entry and trial (q itself is never formed in the iterations).

q decreases at every accepted step; a column whose predicted decrease g'(y - x) is below
the rounding of the gradient's products stops.  The Kullback-Leibler kind reads only the
nonzeros of v: with colsum(F) = fsum the loss is fsum'x + sum_{v_i > 0} (v_i log(v_i /
z_i) - v_i) (0 log 0 = 0, as scikit-learn), so a sparse Y costs O(nnz k^2) per half-step,
and a dense Y is given in the same form (same data, same numbers).  The other kinds read
every entry.  The kind is the kernels' first argument (a branch per entry that the
loops keep out of their bodies), so one cached compilation serves every loss.
"""

from __future__ import annotations

import math

import numpy as np

from ..backends.cpu.jit import njit

#: Kinds of loss the kernels know (the general one takes beta).
KIND_KL = 1
KIND_IS = 0
KIND_BETA = 2

#: LLVM may reassociate sums (vectorised dot products; without it every reduction is a
#: serial chain) and contract multiply-adds, but keeps IEEE infinities and NaNs (the
#: barrier's +inf values): not Numba's full fastmath.  The kernels divide with NumPy's
#: error model (IEEE results, no ZeroDivisionError test, whose branch keeps a loop with a
#: division from being vectorised); no divisor here can be zero but where a NaN or inf
#: is tested for.
FAST = {"reassoc", "contract"}

SIGMA = 1e-4  # Armijo constant
MAX_HALVINGS = 40
#: A predicted decrease below this many rounding units of the gradient's products ends
#: a column's iterations.
ROUNDING_ULPS = 64.0
EPS = float(np.finfo(np.float64).eps)
#: Derivatives are evaluated at max(z, Z_FLOOR * mean(Y)) (q itself at z): a zero z_i (a
#: zero row of F) must not make them infinite.
Z_FLOOR = 1e-12


def kind_of(beta):
    """The kernel kind of a beta (KL, IS or the general one)."""
    if beta == 1.0:
        return KIND_KL
    if beta == 0.0:
        return KIND_IS
    return KIND_BETA


@njit(nogil=True, fastmath=FAST, error_model="numpy")
def entry_value(kind, beta, v, z):
    """d_beta(v | z) of one entry, +inf where z <= 0 makes it infinite; the KL kind
    omits + z (the caller adds fsum'x for all entries)."""
    if kind == KIND_KL:
        if v <= 0.0:
            return 0.0
        if z <= 0.0:
            return np.inf
        return v * math.log(v / z) - v
    if kind == KIND_IS:
        if z <= 0.0:
            return np.inf
        r = v / z
        return (r - 1.0) - math.log1p(r - 1.0)
    if z <= 0.0:
        if beta <= 0.0 or (beta < 1.0 and v > 0.0):
            return np.inf
        z = 0.0
    zb = z**beta
    if v > 0.0:
        return (v**beta + (beta - 1.0) * zb - beta * v * z ** (beta - 1.0)) / (beta * (beta - 1.0))
    return zb / beta


@njit(nogil=True, fastmath=FAST, error_model="numpy")
def values(kind, beta, vals, z, cnt, x, fsum, l1, l2):
    """q(x) of one column from z = F x on its entries."""
    total = 0.0
    for i in range(cnt):
        total += entry_value(kind, beta, vals[i], z[i])
    for t in range(x.shape[0]):
        total += l1 * x[t] + 0.5 * l2 * x[t] * x[t]
        if kind == KIND_KL:
            total += fsum[t] * x[t]
    return total


@njit(nogil=True, fastmath=FAST, error_model="numpy")
def derivatives(kind, beta, vals, z, cnt, zmin, d1, d2, iz, zb, fisher_only):
    """phi'(z), the model's weights w and 1/z (and z^beta) at max(z, zmin).  Where
    phi is not convex, w is Fisher's z^(beta-2) (``fisher_only``) or the larger of
    it and phi''."""
    for i in range(cnt):
        zi = z[i] if z[i] > zmin else zmin
        inv = 1.0 / zi
        iz[i] = inv
        v = vals[i]
        if kind == KIND_KL:
            r = v * inv
            d1[i] = -r  # the + 1 of phi' is fsum, added by the caller
            d2[i] = r * inv
        elif kind == KIND_IS:
            r = v * inv
            d1[i] = (1.0 - r) * inv
            fisher = inv * inv
            true = (2.0 * r - 1.0) * fisher
            d2[i] = fisher if fisher_only or true < fisher else true
        else:
            p = zi**beta
            zb[i] = p
            p1 = p * inv  # z^(beta-1)
            d1[i] = p1 - v * p1 * inv
            fisher = p1 * inv  # z^(beta-2)
            true = fisher * ((beta - 1.0) - (beta - 2.0) * v * inv)
            if beta >= 1.0 and beta <= 2.0:
                d2[i] = true if true > 0.0 else 0.0
            else:
                d2[i] = fisher if fisher_only or true < fisher else true


@njit(nogil=True, fastmath=FAST, error_model="numpy")
def change(kind, beta, vals, z, u, iz, zb, cnt, step, zmin):
    """sum_i phi(z_i + step u_i) - phi(z_i) (the data part of q's change)."""
    total = 0.0
    for i in range(cnt):
        v = vals[i]
        su = step * u[i]
        if su == 0.0:
            continue
        if z[i] <= zmin:  # the ratio form needs z > 0: values directly
            after, before = entry_value(kind, beta, v, z[i] + su), entry_value(kind, beta, v, z[i])
            if after != before:  # (both +inf: no change, not NaN)
                total += after - before
            continue
        rel = su * iz[i]
        if rel <= -1.0:
            return np.inf
        lg = math.log1p(rel)
        if kind == KIND_KL:
            total -= v * lg
        elif kind == KIND_IS:
            total += v * (1.0 / (z[i] + su) - iz[i]) + lg
        else:
            part = (beta - 1.0) * zb[i] * math.expm1(beta * lg)
            if v > 0.0:
                part -= beta * v * zb[i] * iz[i] * math.expm1((beta - 1.0) * lg)
            total += part / (beta * (beta - 1.0))
    return total


#: Itakura-Saito's and Kullback-Leibler's ``change`` by a series where every step ratio
#: r = step u_i / z_i has s = r / (2 + r) within +-SERIES_S (r in [-1/3, 1/2]): log1p(r)
#: = 2 atanh(s) = 2 s sum_j s^(2j) / (2j + 1), cut after SERIES_TERMS terms, where the
#: rest is below 1e-18 of the sum (0.2^24 / 25).
SERIES_S = 0.2
SERIES_TERMS = 12


@njit(nogil=True, fastmath=FAST, error_model="numpy")
def change_series(kind, vals, z, u, iz, cnt, step, zmin):
    """``change`` of the Itakura-Saito or Kullback-Leibler kind without a logarithm
    call: one branch-free pass (vectorised, as a loop calling log1p cannot be), equal to
    ``change`` to rounding.  NaN where some ratio is out of the series' range or some
    z_i at the floor (``change`` then)."""
    total = 0.0
    outside = 0  # a count, not a max: a max of floats keeps LLVM from vectorising
    for i in range(cnt):
        r = step * u[i] * iz[i]
        s = r / (2.0 + r)
        s2 = s * s
        poly = 1.0 / (2.0 * SERIES_TERMS - 1.0)
        for j in range(SERIES_TERMS - 2, -1, -1):
            poly = poly * s2 + 1.0 / (2.0 * j + 1.0)
        log1p_r = 2.0 * s * poly
        if kind == KIND_KL:  # (the kind is loop-invariant: the branch leaves the loop)
            total -= vals[i] * log1p_r
        else:
            total += log1p_r - vals[i] * iz[i] * r / (1.0 + r)
        outside += (not abs(s) <= SERIES_S) + (z[i] <= zmin)
    if outside:
        return np.nan
    return total


@njit(nogil=True, fastmath=FAST, error_model="numpy")
def model_sweeps(a, g, x, y, inv_b, grad, k, omega, theta, max_sweeps, sweep_tol):
    """MSM sweeps on min_{y >= 0} (g - A x)'y + 1/2 y'Ay from y = x (y overwritten;
    ``inv_b`` gets 1 / B_tt, 0 where B_tt <= 0; ``grad`` is workspace).  Returns the
    number of sweeps."""
    for t in range(k):
        y[t] = x[t]
        grad[t] = g[t]  # (g - A x) + A y at y = x
    mean_diag = 0.0
    for t in range(k):
        mean_diag += a[t, t]
    theta_abs = theta * mean_diag / k
    for t in range(k):  # B's diagonal inverted once, not in every sweep
        bt = (a[t, t] + theta_abs) / omega
        inv_b[t] = 1.0 / bt if bt > 0.0 else 0.0
    first = -1.0
    done = 0
    for _ in range(max_sweeps):
        moved = 0.0
        for t in range(k):
            if inv_b[t] > 0.0:
                new = y[t] - grad[t] * inv_b[t]
                if new < 0.0:
                    new = 0.0
            elif grad[t] > 0.0:  # no curvature, rising: the minimum is at the bound
                new = 0.0
            else:  # no curvature, falling or flat: no finite step here
                continue
            diff = new - y[t]
            if diff != 0.0:
                # the gradient kept up to date by A's column t (A symmetric: its row),
                # an update free of the dot product's dependency chain, skipped for
                # the variables that stay at 0
                for s in range(k):
                    grad[s] += a[t, s] * diff
                moved += diff * diff
                y[t] = new
        done += 1
        if first < 0.0:
            first = moved
            if moved == 0.0:
                break
        elif moved <= sweep_tol * sweep_tol * first:
            break
    return done


@njit(nogil=True, fastmath=FAST, error_model="numpy")
def model_exact(a, g, x, y, b, k, passive, chol, z):
    """The model's exact minimiser from the sweeps' y (>= 0, overwritten): Lawson &
    Hanson's active set on min_{y >= 0} (g - A x)'y + 1/2 y'Ay, each face by a
    Cholesky factor of A_FF (a tiny ridge, 1e-12 max diag A, for a singular A).
    ``b`` (k floats) gets the linear term g - A x.  Returns False if it ran out of
    iterations (y is then feasible, not optimal)."""
    for t in range(k):
        acc = g[t]
        for s in range(k):
            acc -= a[t, s] * x[s]
        b[t] = acc
    top = 0.0
    for t in range(k):
        top = max(top, a[t, t])
    ridge = 1e-12 * top
    scale = 0.0
    for t in range(k):
        scale = max(scale, abs(b[t]))
        passive[t] = y[t] > 0.0
    for _ in range(3 * k + 10):
        # the face's solution z_F = -A_FF^-1 b_F by Cholesky
        for t in range(k):
            for s in range(k):
                chol[t, s] = 0.0
        for t in range(k):
            if not passive[t]:
                continue
            for s in range(t + 1):
                if not passive[s]:
                    continue
                acc = a[t, s] + (ridge if s == t else 0.0)
                for r in range(s):
                    if passive[r]:
                        acc -= chol[t, r] * chol[s, r]
                if s == t:
                    chol[t, t] = math.sqrt(acc) if acc > 0.0 else math.sqrt(ridge + 1e-300)
                else:
                    chol[t, s] = acc / chol[s, s]
        for t in range(k):  # forward: L u = -b_F
            if passive[t]:
                acc = -b[t]
                for r in range(t):
                    if passive[r]:
                        acc -= chol[t, r] * z[r]
                z[t] = acc / chol[t, t]
            else:
                z[t] = 0.0
        for t in range(k - 1, -1, -1):  # back: L' z = u
            if passive[t]:
                acc = z[t]
                for r in range(t + 1, k):
                    if passive[r]:
                        acc -= chol[r, t] * z[r]
                z[t] = acc / chol[t, t]
        # step towards z, stopped where a variable of the face reaches 0
        alpha = 1.0
        for t in range(k):
            if passive[t] and z[t] <= 0.0:
                denom = y[t] - z[t]
                if denom > 0.0 and y[t] / denom < alpha:
                    alpha = y[t] / denom
        for t in range(k):
            if passive[t]:
                y[t] += alpha * (z[t] - y[t])
                if alpha < 1.0 and y[t] <= 1e-300:
                    y[t] = 0.0
                    passive[t] = False
        if alpha < 1.0:
            continue
        # optimal on the face: a variable at 0 with a negative gradient joins
        best, join = 0.0, -1
        big = 0.0
        for t in range(k):
            big = max(big, y[t])
        tol = 1e-12 * (top * big + scale)
        for t in range(k):
            if passive[t]:
                continue
            grad = b[t]
            for s in range(k):
                grad += a[t, s] * y[s]
            if -grad > tol and -grad > best:
                best, join = -grad, t
        if join < 0:
            return True
        passive[join] = True
    return False


#: Components from which :func:`curvature` forms four rows at a time; below it one row at
#: a time is faster (docs/development.md, "Threads of the Newton half-steps").
CURVATURE_BLOCK_MIN_K = 12


@njit(nogil=True, fastmath=FAST, error_model="numpy")
def curvature(ft, d2, cnt, k, l2, wrk, a):
    """A = F' diag(d2) F + l2 I on the column's entries (``ft`` = F's rows, transposed),
    from k = CURVATURE_BLOCK_MIN_K on four rows of A at a time: each load of a row of
    ``ft`` feeds four dot products (one a row, the dot products' loads, not their
    multiply-adds, bound the loop)."""
    block = 4 if k >= CURVATURE_BLOCK_MIN_K else 1
    t = 0
    while t < k:
        rows = min(block, k - t)
        for q in range(rows):
            for i in range(cnt):
                wrk[q, i] = ft[t + q, i] * d2[i]
        if rows == 4:
            w0, w1, w2, w3 = wrk[0], wrk[1], wrk[2], wrk[3]
            for s in range(t + 4):
                fs = ft[s]
                acc0 = acc1 = acc2 = acc3 = 0.0
                for i in range(cnt):
                    f = fs[i]
                    acc0 += w0[i] * f
                    acc1 += w1[i] * f
                    acc2 += w2[i] * f
                    acc3 += w3[i] * f
                a[t, s] = acc0
                a[t + 1, s] = acc1
                a[t + 2, s] = acc2
                a[t + 3, s] = acc3
        else:
            for q in range(rows):
                wq = wrk[q]
                for s in range(t + q + 1):
                    acc = 0.0
                    for i in range(cnt):
                        acc += wq[i] * ft[s, i]
                    a[t + q, s] = acc
        t += rows
    for t in range(k):  # the lower triangle was formed: mirror it
        for s in range(t):
            a[s, t] = a[t, s]
        a[t, t] += l2


@njit(nogil=True, fastmath=FAST, error_model="numpy")
def direction(a, g, x, y, b, d, k, cnt, omega, theta, max_sweeps, sweep_tol, step_tol,
              exact, passive, chol, zq):  # fmt: skip
    """The model's step d = y - x from its curvature ``a`` and gradient ``g`` (step 2 of
    the module docstring).  Returns (sweeps, the predicted change g'd), the change NaN
    where the column is done: no descent above rounding, or a step below ``step_tol``."""
    # sweeps cost k^2 each, forming A cnt k^2 / 2: a column with few entries gets
    # at most cnt / 2 of them (the model is then cheap to form and needs fewer)
    sweeps_cap = max_sweeps if 2 * max_sweeps <= cnt else max(2, cnt // 2)
    # (d, the step, is formed after the sweeps: until then it holds 1 / B_tt)
    sweeps = model_sweeps(a, g, x, y, d, zq, k, omega, theta, sweeps_cap, sweep_tol)
    if exact:  # the sweeps' point finished exactly (solves to convergence)
        model_exact(a, g, x, y, b, k, passive, chol, zq)
    delta = 0.0
    size = 0.0
    for t in range(k):
        d[t] = y[t] - x[t]
        delta += g[t] * d[t]
        size += abs(g[t]) * (x[t] + abs(d[t]))
    if not delta < -ROUNDING_ULPS * EPS * size:
        return sweeps, np.nan  # no descent above rounding left: this column is done
    big = 0.0
    move = 0.0
    for t in range(k):
        big = max(big, x[t], y[t])
        move = max(move, abs(d[t]))
    if move <= step_tol * big:
        return sweeps, np.nan  # the model's step is below the asked relative size
    return sweeps, delta


@njit(nogil=True, fastmath=FAST, error_model="numpy")
def search(kind, beta, vals, z, u, iz, zb, cnt, x, d, fsum, l1, l2, delta, zmin, move_z):
    """Armijo's rule along d (step 3 of the module docstring) with u = F d on the
    column's entries; an accepted step moves x (and z, ``move_z``).  Returns (the change
    of q, trials), the change NaN where no step was accepted."""
    k = x.shape[0]
    step = 1.0
    if kind != KIND_BETA or beta < 1.0:  # the barrier z_i > 0 where v_i > 0
        # a count first (vectorised, no division): the entries where 0.99 of the way to
        # the barrier is short of the full step; mostly none
        short = 0
        for i in range(cnt):
            short += (u[i] < -0.99 * z[i]) & (vals[i] > 0.0) & (z[i] > 0.0)
        if short:
            for i in range(cnt):
                if u[i] < 0.0 and vals[i] > 0.0 and z[i] > 0.0:
                    limit = -z[i] / u[i]
                    if 0.99 * limit < step:
                        step = 0.99 * limit
    trials = 0
    for _ in range(MAX_HALVINGS):
        trials += 1
        df = 0.0  # the penalties' and (KL) the linear part's change
        for t in range(k):
            sd = step * d[t]
            df += sd * (l1 + l2 * (x[t] + 0.5 * sd))
            if kind == KIND_KL:
                df += fsum[t] * sd
        data_part = np.nan
        if kind == KIND_IS or kind == KIND_KL:  # small steps: no logarithm calls
            data_part = change_series(kind, vals, z, u, iz, cnt, step, zmin)
        if data_part != data_part:
            data_part = change(kind, beta, vals, z, u, iz, zb, cnt, step, zmin)
        df += data_part
        if df <= SIGMA * step * delta:
            for t in range(k):
                xt = x[t] + step * d[t]
                x[t] = xt if xt > 0.0 else 0.0
            if move_z:
                for i in range(cnt):
                    z[i] += step * u[i]
            return df, trials
        step *= 0.5
    return np.nan, trials


@njit(nogil=True, fastmath=FAST, error_model="numpy")
def column(kind, beta, ft, vals, cnt, x, fsum, l1, l2, zmin, omega, theta, max_newton,
           max_sweeps, sweep_tol, step_tol, exact, z, d1, d2, iz, zb, u, wrk, a, g, y, b,
           d, passive, chol, zq, counts):  # fmt: skip
    """Proximal Newton on one column from x (updated in place); ``ft`` (k x cnt) holds
    F's rows of the column's entries, transposed.  Returns the change of q;
    ``counts`` gets (Newton iterations, sweeps, line-search trials)."""
    k = x.shape[0]
    for i in range(cnt):
        z[i] = 0.0
    for t in range(k):
        xt = x[t]
        if xt != 0.0:
            for i in range(cnt):
                z[i] += ft[t, i] * xt
    total = 0.0
    n_newton = n_sweeps = n_trials = 0
    for _ in range(max_newton):
        derivatives(kind, beta, vals, z, cnt, zmin, d1, d2, iz, zb, not exact)
        for t in range(k):
            acc = 0.0
            for i in range(cnt):
                acc += ft[t, i] * d1[i]
            if kind == KIND_KL:
                acc += fsum[t]
            g[t] = acc + l1 + l2 * x[t]
        curvature(ft, d2, cnt, k, l2, wrk, a)
        sweeps, delta = direction(
            a, g, x, y, b, d, k, cnt, omega, theta, max_sweeps, sweep_tol, step_tol, exact,
            passive, chol, zq,
        )  # fmt: skip
        n_sweeps += sweeps
        n_newton += 1
        if delta != delta:
            break
        for i in range(cnt):
            u[i] = 0.0
        for t in range(k):
            dt = d[t]
            if dt != 0.0:
                for i in range(cnt):
                    u[i] += ft[t, i] * dt
        df, trials = search(
            kind, beta, vals, z, u, iz, zb, cnt, x, d, fsum, l1, l2, delta, zmin, True
        )
        n_trials += trials
        if df != df:
            break
        total += df
    counts[0] = n_newton
    counts[1] = n_sweeps
    counts[2] = n_trials
    return total


@njit(nogil=True, fastmath=FAST, error_model="numpy")
def pattern(kind, beta, f_rows, fsum, indptr, indices, values_, xs, c0, c1, l1, l2, zmin,
            omega, theta, max_newton, max_sweeps, sweep_tol, step_tol, exact, evaluate,
            out_f, out_counts):  # fmt: skip
    """Columns c0..c1-1 reading only the stored entries of each column: column j's
    are ``values_[indptr[j]:indptr[j+1]]`` in rows ``indices[...]``; ``f_rows`` is F
    (n x k), ``xs`` the factor (c x k, row j = column j's x), updated in place.
    ``out_f[j]``: the change of q (or q itself, ``evaluate``: no iteration)."""
    k = xs.shape[1]
    longest = 1
    for j in range(c0, c1):
        longest = max(longest, indptr[j + 1] - indptr[j])
    ft = np.empty((k, longest))
    z, d1, d2 = np.empty(longest), np.empty(longest), np.empty(longest)
    iz, zb, u, wrk = np.empty(longest), np.empty(longest), np.empty(longest), np.empty((4, longest))
    vals = np.empty(longest)
    a = np.empty((k, k))
    g, y, b, d, x = np.empty(k), np.empty(k), np.empty(k), np.empty(k), np.empty(k)
    passive = np.zeros(k, dtype=np.bool_)
    chol, zq = np.empty((k, k)), np.empty(k)
    counts = np.zeros(3, dtype=np.int64)
    for j in range(c0, c1):
        p0 = indptr[j]
        cnt = indptr[j + 1] - p0
        for q in range(cnt):
            row = indices[p0 + q]
            vals[q] = values_[p0 + q]
            for t in range(k):
                ft[t, q] = f_rows[row, t]
        for t in range(k):
            x[t] = xs[j, t]
        if evaluate:
            for i in range(cnt):
                acc = 0.0
                for t in range(k):
                    acc += ft[t, i] * x[t]
                z[i] = acc
            out_f[j] = values(kind, beta, vals, z, cnt, x, fsum, l1, l2)
            continue
        out_f[j] = column(
            kind, beta, ft, vals, cnt, x, fsum, l1, l2, zmin, omega, theta, max_newton,
            max_sweeps, sweep_tol, step_tol, exact, z, d1, d2, iz, zb, u, wrk, a, g, y, b,
            d, passive, chol, zq, counts,
        )  # fmt: skip
        for t in range(k):
            xs[j, t] = x[t]
        for q in range(3):
            out_counts[j, q] = counts[q]


@njit(nogil=True, fastmath=FAST, error_model="numpy")
def dense(kind, beta, f_t, fsum, v, xs, c0, c1, l1, l2, zmin, omega, theta, max_newton,
          max_sweeps, sweep_tol, step_tol, exact, evaluate, out_f, out_counts):  # fmt: skip
    """Columns c0..c1-1 reading every entry: column j's data is ``v[j]`` (c x n, C
    order) and ``f_t`` is F' (k x n), read in place."""
    k = xs.shape[1]
    n = v.shape[1]
    m = max(n, 1)
    z, d1, d2 = np.empty(m), np.empty(m), np.empty(m)
    iz, zb, u, wrk = np.empty(m), np.empty(m), np.empty(m), np.empty((4, m))
    a = np.empty((k, k))
    g, y, b, d, x = np.empty(k), np.empty(k), np.empty(k), np.empty(k), np.empty(k)
    passive = np.zeros(k, dtype=np.bool_)
    chol, zq = np.empty((k, k)), np.empty(k)
    counts = np.zeros(3, dtype=np.int64)
    for j in range(c0, c1):
        for t in range(k):
            x[t] = xs[j, t]
        vj = v[j]
        if evaluate:
            for i in range(n):
                z[i] = 0.0
            for t in range(k):
                for i in range(n):
                    z[i] += f_t[t, i] * x[t]
            out_f[j] = values(kind, beta, vj, z, n, x, fsum, l1, l2)
            continue
        out_f[j] = column(
            kind, beta, f_t, vj, n, x, fsum, l1, l2, zmin, omega, theta, max_newton,
            max_sweeps, sweep_tol, step_tol, exact, z, d1, d2, iz, zb, u, wrk, a, g, y, b,
            d, passive, chol, zq, counts,
        )  # fmt: skip
        for t in range(k):
            xs[j, t] = x[t]
        for q in range(3):
            out_counts[j, q] = counts[q]


def kernels(kind):
    """(pattern, dense) for ``kind``: the kernels with the kind as their first argument
    (module-level functions, not closures made per kind: Numba's cache never matched
    those, and every process compiled them again, seconds per loss)."""
    kind = int(kind)

    def run_pattern(*args):
        return pattern(kind, *args)

    def run_dense(*args):
        return dense(kind, *args)

    return run_pattern, run_dense
