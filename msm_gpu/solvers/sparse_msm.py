"""MSM on a sparse A: the sweep over CSR rows, O(nnz(A)) per column and sweep.

The paper's sweep (eq. (9)) solves row j's 1-D problem with

    w_j = R_j + sum_{i<j} A_ji Z_i + sum_{i>j} A_ji X_i + C_jj X_j,

the new Z_i for the rows already swept and the old X_i for the others: read in place
(``x`` updated row by row) this is R_j + (A x)_j - B_jj x_j, one pass over row j of A.  So
a sweep touches every stored entry of A once, per column of X, and nothing is ever n x n:
a Laplacian-regularised problem with 10^6 variables costs what its nonzeros cost.

The change of F caused by one row's step is known in closed form,
F(x + d e_j) - F(x) = d (g_j + A_jj d / 2) + h(z) - h(x_j) with g = A x + R, so the
objective history costs nothing extra.  This road is the paper's plain MSM (Theorem 1:
monotone, convergent for convex h with delta > 0; the nonconvex theorem for L0/Lp); the
exact finish needs face solves with A and is not run here.
"""

from __future__ import annotations

import math
import time

import numpy as np

from ..backends.cpu.jit import njit
from ..backends.cpu.kernels import h_scalar, prox_scalar
from ..result import SolveResult
from .splitting import relative_splitting

#: A sparse A with at most this many rows is made dense (the exact finish applies there).
DENSE_MAX_N = 4096
#: Columns swept between two checks of the time limit.
COLUMNS_PER_CHECK = 64


@njit
def _sweep_columns(
    indptr,
    indices,
    data,
    diag,
    b_diag,
    rt,
    xt,
    code,
    params,
    tol,
    floor,
    max_iter,
    history,
    n_iter,
    converged,
    fun,
):
    """Sweep the columns of ``xt`` (r x n, one problem per row of the array) until each
    stops: ||x_{k+1} - x_k|| <= tol max(||x_k||, floor_c).  ``fun`` holds F at entry and
    is updated; ``history[k]`` gains each column's F after min(k, its sweeps)."""
    n_cols, n = xt.shape
    for c in range(n_cols):
        x = xt[c]
        r = rt[c]
        f = fun[c]
        history[0] += f
        k = 0
        done = False
        while k < max_iter and not done:
            step2 = 0.0
            size2 = 0.0
            for j in range(n):
                g = r[j]
                for p in range(indptr[j], indptr[j + 1]):
                    g += data[p] * x[indices[p]]
                xj = x[j]
                b = b_diag[j]
                z, hz = prox_scalar(
                    code, g - b * xj, b, params[j, 0], params[j, 1], params[j, 2], params[j, 3]
                )
                d = z - xj
                if d != 0.0:
                    f += (
                        d * (g + 0.5 * diag[j] * d)
                        + hz
                        - h_scalar(code, xj, params[j, 0], params[j, 1], params[j, 2], params[j, 3])
                    )
                    x[j] = z
                step2 += d * d
                size2 += xj * xj
            k += 1
            history[k] += f
            if not (math.isfinite(f) and math.isfinite(step2)):
                break
            done = math.sqrt(step2) <= tol * max(math.sqrt(size2), floor[c])
        for kk in range(k + 1, max_iter + 1):
            history[kk] += f
        fun[c] = f
        n_iter[c] = k
        converged[c] = done


def applies(A, backend, n_dense_max=DENSE_MAX_N) -> bool:
    """Whether ``solve`` takes this road: a SciPy sparse A on the CPU with more than
    ``n_dense_max`` rows (smaller sparse A are made dense and finished exactly)."""
    if backend not in ("auto", "cpu"):
        return False
    if type(A).__module__.split(".")[0] != "scipy" or not hasattr(A, "tocsr"):
        return False
    return A.shape[0] > n_dense_max


def _check(A, R, x0, penalty):
    n = A.shape[0]
    if A.ndim != 2 or A.shape[1] != n:
        raise ValueError(f"A must be square (n x n), got shape {A.shape}")
    a = A.tocsr().astype(np.float64)
    a.sum_duplicates()
    if not np.all(np.isfinite(a.data)):
        raise ValueError("A must be finite (it holds NaN or inf)")
    asym = abs(a - a.T)
    scale = float(abs(a).max()) if a.nnz else 0.0
    if asym.nnz and float(asym.max()) > 1e-12 * max(scale, 1e-300):
        raise ValueError("A must be symmetric (A - A.T is not zero)")
    r = np.asarray(R)
    if r.ndim not in (1, 2) or r.shape[0] != n:
        raise ValueError(f"R must have shape (n,) or (n, r) with n = {n}, got {r.shape}")
    if r.size == 0:
        raise ValueError("R must not be empty")
    if not np.all(np.isfinite(r)):
        raise ValueError("R must be finite (it holds NaN or inf)")
    if x0 is not None:
        x0 = np.asarray(x0)
        if x0.shape != r.shape:
            raise ValueError(f"x0 must have R's shape {r.shape}, got {x0.shape}")
        if not np.all(np.isfinite(x0)):
            raise ValueError("x0 must be finite (it holds NaN or inf)")
    return a, r, x0


def solve_sparse(
    A,
    R,
    penalty,
    x0,
    *,
    omega,
    theta,
    tol,
    max_iter,
    time_limit,
    record_objective,
    check_convergence,
    started=None,
):
    """Plain MSM on a sparse A (CSR sweeps); the result of :func:`msm_gpu.solve`."""
    started = time.perf_counter() if started is None else started
    a, r, x0 = _check(A, R, x0, penalty)
    n = a.shape[0]
    out_dtype = r.dtype if r.dtype in (np.float32, np.float64) else np.float64
    rt = np.ascontiguousarray(np.atleast_2d(r.T), dtype=np.float64)  # r x n
    xt = (
        np.zeros_like(rt)
        if x0 is None
        else np.ascontiguousarray(np.atleast_2d(np.asarray(x0).T), dtype=np.float64)
    )
    params = np.ascontiguousarray(penalty.table(n), dtype=np.float64)
    # a start outside [lb, ub] is projected onto it: F there is +inf, and each row's
    # change of F (the objective history) needs a finite start
    xt = np.clip(xt, params[:, 1], params[:, 2])
    diag = a.diagonal().astype(np.float64)
    splitting = relative_splitting(diag, omega, theta, penalty.is_convex, check=check_convergence)
    theta_abs = splitting.theta
    # the stopping floor of the dense road: ||r_c|| / tr(A) where x is 0
    trace = float(diag.sum()) or 1.0
    floor = np.linalg.norm(rt, axis=1) / trace
    floor = np.where(floor > 0, floor, np.linalg.norm(xt, axis=1))
    # F at the start: 1/2 x'Ax + r'x + h(x), per column
    ax = (a @ xt.T).T
    fun = 0.5 * np.einsum("ij,ij->i", xt, ax) + np.einsum("ij,ij->i", rt, xt)
    fun += np.asarray(penalty.value(xt.T), dtype=np.float64).sum(axis=0)
    n_cols = rt.shape[0]
    history = np.zeros(max_iter + 1)
    n_iter = np.zeros(n_cols, dtype=np.int64)
    converged = np.zeros(n_cols, dtype=np.bool_)
    setup = time.perf_counter() - started
    message = "converged" if max_iter else "max_iter = 0"
    indptr, indices, data = a.indptr, a.indices, a.data
    for c0 in range(0, n_cols, COLUMNS_PER_CHECK):
        if time_limit is not None and time.perf_counter() - started > time_limit:
            message = "time limit reached"
            break
        c1 = min(n_cols, c0 + COLUMNS_PER_CHECK)
        part_history = np.zeros(max_iter + 1)
        _sweep_columns(
            indptr,
            indices,
            data,
            diag,
            splitting.b_diag,
            rt[c0:c1],
            xt[c0:c1],
            penalty.code,
            params,
            float(tol),
            floor[c0:c1],
            int(max_iter),
            part_history,
            n_iter[c0:c1],
            converged[c0:c1],
            fun[c0:c1],
        )
        history += part_history
    else:
        if not converged.all():
            message = f"max_iter = {max_iter} reached before every column converged"
    ok = np.isfinite(fun) & np.isfinite(xt).all(axis=1)
    converged &= ok
    if not ok.all():
        message = "the iterate or F is not finite: is A positive semidefinite?"
    total_iter = int(n_iter.max()) if n_cols else 0
    x = xt.T.astype(out_dtype, copy=False)
    if r.ndim == 1:
        x = x[:, 0]
    return SolveResult(
        x=np.ascontiguousarray(x),
        fun=float(fun.sum()),
        n_iter=total_iter,
        converged=bool(converged.all()),
        message=message,
        objective=history[: total_iter + 1] if record_objective else np.zeros(0),
        backend="cpu",
        time=time.perf_counter() - started,
        method="msm",
        converged_columns=converged,
        n_iter_columns=n_iter,
        timings={"setup": setup, "iterations": time.perf_counter() - started - setup},
        info={
            "omega": float(omega),
            "theta": float(theta),
            "theta_abs": float(theta_abs),
            "delta": float(splitting.delta),
            "finish": None,
            "representation": "sparse",
        },
    )
