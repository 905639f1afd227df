"""Random MSM problems and the Numba reference sweep, shared by the CUDA tests.

The reference is ``cpu_kernels.sweep_chunks`` on a single column chunk, fed the same
folded matrix (same panel size) and the same dtype as the CUDA state, so the two differ
only by rounding.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from msm_gpu import penalties as pen
from msm_gpu.backends.base import fold_matrix
from msm_gpu.backends.cpu import kernels as cpu_kernels
from msm_gpu.solvers.splitting import make_splitting

#: name -> factory(n, rng); every penalty code and its variants.
PENALTIES = {
    "zero": lambda n, rng: pen.Zero(),
    "nonneg": lambda n, rng: pen.NonNeg(),
    "box_rows": lambda n, rng: pen.Box(
        lb=np.where(rng.random(n) < 0.2, -np.inf, rng.uniform(-0.8, 0.0, n)),
        ub=np.where(rng.random(n) < 0.2, np.inf, rng.uniform(0.0, 0.8, n)),
    ),
    "l1": lambda n, rng: pen.L1(0.3),
    "nonneg_l1": lambda n, rng: pen.NonNegL1(0.2),
    "l0": lambda n, rng: pen.L0(0.3),
    "l0_nonneg": lambda n, rng: pen.L0(0.3, lb=0.0),
    "lp_half": lambda n, rng: pen.Lp(0.25, 0.5),
    "lp_two_thirds": lambda n, rng: pen.Lp(0.25, 2.0 / 3.0),
}


@dataclass
class Problem:
    """One random instance: A SPD (n x n), R and X0 (n x r), penalty, splitting."""

    a: np.ndarray
    r: np.ndarray
    x0: np.ndarray
    penalty: pen.Penalty
    splitting: object
    table: np.ndarray

    @property
    def dtype(self):
        return self.a.dtype


def make_problem(n, r, dtype, penalty="l1", seed=0, omega=1.0, theta=0.01):
    """A well-conditioned random problem with the penalty ``PENALTIES[penalty]``."""
    rng = np.random.default_rng(seed)
    g = rng.standard_normal((n, n + 8))
    a = g @ g.T / (n + 8) + 0.05 * np.eye(n)
    rr = rng.standard_normal((n, r))
    x0 = rng.standard_normal((n, r)) * 0.5
    penalty = PENALTIES[penalty](n, rng)
    splitting = make_splitting(np.diag(a), omega, theta, penalty.is_convex)
    return Problem(
        a=a.astype(dtype),
        r=rr.astype(dtype),
        x0=x0.astype(dtype),
        penalty=penalty,
        splitting=splitting,
        table=penalty.table(n, dtype),
    )


def numba_sweep(problem, y, panel, r=None):
    """One reference MSM iteration of the columns ``y`` (n, c); returns (z, stats)."""
    dtype = problem.dtype
    r = problem.r if r is None else r
    afold = np.ascontiguousarray(
        fold_matrix(problem.a, problem.splitting.c_diag.astype(dtype), panel), dtype=dtype
    )
    y_chunks = np.ascontiguousarray(y[None], dtype=dtype)
    stats = np.zeros((1, 4, y.shape[1]))
    cpu_kernels.sweep_chunks(
        afold,
        problem.splitting.b_diag.astype(dtype),
        problem.penalty.code,
        np.ascontiguousarray(problem.table, dtype=dtype),
        np.ascontiguousarray(r[None], dtype=dtype),
        y_chunks,
        np.array([y.shape[1]], dtype=np.int64),
        panel,
        stats,
    )
    return y_chunks[0], stats[0]


def objective(problem, x):
    """Per-column F(x) = 1/2 x'Ax + r'x + sum h(x), in float64."""
    a = problem.a.astype(np.float64)
    x = np.asarray(x, dtype=np.float64)
    quad = 0.5 * np.einsum("ij,ij->j", x, a @ x) + np.einsum(
        "ij,ij->j", problem.r.astype(np.float64), x
    )
    return quad + penalty_sum(problem, x)


def penalty_sum(problem, x):
    """Per-column sum_j h(x_j) in float64 (inf outside the bounds)."""
    x = np.asarray(x, dtype=np.float64)
    table = problem.table.astype(np.float64)
    lam, lb, ub, p = (table[:, k : k + 1] for k in range(4))
    return pen.penalty_value(x, problem.penalty.code, lam, lb, ub, p[0, 0]).sum(axis=0)


def rel_err(got, want):
    """max |got - want| / max |want| (0 when both vanish)."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    scale = np.abs(want).max(initial=0.0)
    diff = np.abs(got - want).max(initial=0.0)
    return diff / scale if scale > 0 else diff
