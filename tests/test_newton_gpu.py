"""mg.minimize on the CUDA backend (CuPy arrays in, CuPy out) against the CPU run.

Run on a GPU machine with ``pytest -m gpu tests/test_newton_gpu.py``; skipped, with the
reason, where CUDA cannot run.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import msm_gpu as mg
from msm_gpu.backends.cuda.backend import cuda_unavailable_reason

REASON = cuda_unavailable_reason()
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(REASON is not None, reason=f"no usable CUDA GPU: {REASON}"),
]


def problem(seed=0, m=400, n=30, r=3):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, n))
    w = np.zeros((n, r))
    w[:5] = rng.standard_normal((5, r))
    y = np.where(rng.random((m, r)) < 1 / (1 + np.exp(-x @ w)), 1.0, 0.0)
    return x, y


@pytest.mark.parametrize("penalty", [mg.L1(0.01), mg.L0(0.01)])
@pytest.mark.parametrize("hessian", ["exact", "bound"])
def test_logistic_gpu_matches_cpu(penalty, hessian):
    import cupy

    x, y = problem()
    cpu = mg.minimize(mg.Logistic(x, y), penalty, tol=1e-9, hessian=hessian, max_iter=500)
    gpu = mg.minimize(
        mg.Logistic(cupy.asarray(x), cupy.asarray(y)),
        penalty,
        tol=1e-9,
        hessian=hessian,
        max_iter=500,
    )
    assert gpu.backend == "cuda" and isinstance(gpu.x, cupy.ndarray)
    assert gpu.converged and cpu.converged
    assert np.all(np.diff(gpu.objective) <= 1e-12 * np.abs(gpu.objective[:-1]))
    if penalty.is_convex:
        np.testing.assert_allclose(cupy.asnumpy(gpu.x), cpu.x, atol=1e-6)
    assert gpu.fun == pytest.approx(cpu.fun, rel=1e-7 if penalty.is_convex else 1e-3)


def test_poisson_and_sparse_gpu_match_cpu():
    import cupy
    import cupyx.scipy.sparse as csp

    x, y = problem(1, r=1)
    counts = np.random.default_rng(2).poisson(np.exp(0.2 * x[:, :3].sum(axis=1))).astype(float)
    cpu = mg.minimize(mg.Poisson(x, counts), mg.L1(0.01), tol=1e-10)
    gpu = mg.minimize(mg.Poisson(cupy.asarray(x), cupy.asarray(counts)), mg.L1(0.01), tol=1e-10)
    np.testing.assert_allclose(cupy.asnumpy(gpu.x), cpu.x, atol=1e-7)
    xs = sp.random(400, 50, density=0.1, random_state=0, format="csr")
    cpu = mg.minimize(mg.Logistic(xs, y[:, 0]), mg.L1(0.001), tol=1e-10)
    gpu = mg.minimize(
        mg.Logistic(csp.csr_matrix(xs), cupy.asarray(y[:, 0])), mg.L1(0.001), tol=1e-10
    )
    assert gpu.backend == "cuda"
    np.testing.assert_allclose(cupy.asnumpy(gpu.x), cpu.x, atol=1e-7)
