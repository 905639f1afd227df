"""The Lipschitz constant L = lambda_max(A) of the gradient of q(x) = 1/2 x'Ax + x'r.

Computed once per call by Lanczos with full reorthogonalisation, written against the
array API (``backend.xp``), so A never leaves the device: each step is one matrix-vector
product on the backend plus a few vector operations; only the small tridiagonal matrix
goes to the host.  The start vector is a fixed pseudo-random vector (seed 0), so the
result is deterministic.

Ritz values are lower bounds of lambda_max.  The returned value is the largest Ritz
value *plus* its residual norm ``|beta_m s_m|`` (the distance to the nearest eigenvalue
is at most that), i.e. an upper estimate; the Lanczos process is restarted from the top
Ritz vector until that residual is below ``rtol`` times the Ritz value.  With n <= the
number of steps the Krylov space is the whole space and the value is exact to rounding.
"""

from __future__ import annotations

import math

import numpy as np


def lipschitz_constant(backend, a, *, steps=48, rtol=1e-7, max_restarts=20, seed=0):
    """Upper estimate of lambda_max(A) for a symmetric PSD backend array ``a`` (n x n).

    Returns
    -------
    L : float
        ``theta_max + residual`` (0.0 when A = 0).
    info : dict
        ``{"ritz": theta_max, "residual": ..., "matvecs": ...}``.
    """
    xp = backend.xp
    n = a.shape[0]
    v = backend.asarray(np.random.default_rng(seed).standard_normal(n), a.dtype)
    steps = max(1, min(int(steps), n))
    eps = float(np.finfo(a.dtype).eps)
    matvecs = 0
    theta = residual = 0.0
    for _ in range(max_restarts + 1):
        norm = float(xp.linalg.vector_norm(v))
        if norm == 0.0:
            break
        basis = [v / norm]
        alphas, betas = [], []
        prev_beta = 0.0
        for j in range(steps):
            q = basis[j]
            w = xp.matmul(a, q)
            matvecs += 1
            alpha = float(xp.sum(q * w))
            w = w - alpha * q
            if j > 0:
                w = w - prev_beta * basis[j - 1]
            qmat = xp.stack(basis, axis=1)
            for _pass in range(2):  # full reorthogonalisation, twice is enough
                w = w - xp.matmul(qmat, xp.matmul(qmat.T, w))
            beta = float(xp.linalg.vector_norm(w))
            alphas.append(alpha)
            scale = max(abs(a_) for a_ in alphas) + prev_beta
            if beta <= 10 * eps * max(scale, 1e-300) or j == n - 1:
                betas.append(0.0)  # invariant subspace: the Ritz values are exact
                break
            betas.append(beta)
            prev_beta = beta
            if j + 1 < steps:
                basis.append(w / beta)
        m = len(alphas)
        t = np.diag(np.asarray(alphas)) + np.diag(np.asarray(betas[: m - 1]), 1)
        t = t + np.triu(t, 1).T
        evals, evecs = np.linalg.eigh(t)
        theta = float(evals[-1])
        residual = abs(betas[m - 1] * float(evecs[m - 1, -1]))
        if theta <= 0.0:
            # A = 0 (PSD with zero Rayleigh quotient everywhere along the Krylov space)
            theta, residual = 0.0, abs(betas[m - 1])
            if residual == 0.0:
                break
        if residual <= rtol * theta or residual == 0.0:
            break
        # restart from the top Ritz vector
        coeffs = backend.asarray(evecs[:, -1], a.dtype)
        v = xp.matmul(xp.stack(basis[:m], axis=1), coeffs)
    value = theta + residual
    if not math.isfinite(value):
        raise FloatingPointError("the Lanczos estimate of lambda_max(A) is not finite")
    return value, {"ritz": theta, "residual": residual, "matvecs": matvecs}
