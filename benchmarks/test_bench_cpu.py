"""pytest-benchmark suite for the CPU backend.

Run: ``python -m pytest benchmarks/test_bench_cpu.py --benchmark-enable``
(the ratio table of ``bench_cpu.py`` is the number to report; these keep history).
"""

from __future__ import annotations

import numpy as np
import pytest
from bench_cpu import make_problem

import msm_gpu as mg
from msm_gpu.backends.base import default_panel
from msm_gpu.backends.cpu.backend import CpuBackend
from msm_gpu.solvers.splitting import make_splitting

SHAPES = [(200, 1000), (1000, 4096), (256, 50000)]


def _state(n, r, dtype, penalty):
    a, rhs, x = make_problem(n, r, dtype)
    split = make_splitting(np.diag(a).astype(np.float64), 1.0, 0.01, penalty.is_convex)
    return CpuBackend().start(a, rhs, x, split, penalty.table(n), penalty.code, default_panel(n))


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize(("n", "r"), SHAPES, ids=[f"{n}x{r}" for n, r in SHAPES])
def test_msm_iteration(benchmark, n, r, dtype):
    state = _state(n, r, dtype, mg.NonNeg())
    state.sweep()
    benchmark(state.sweep)


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize(("n", "r"), SHAPES, ids=[f"{n}x{r}" for n, r in SHAPES])
def test_gemm_same_shape(benchmark, n, r, dtype):
    a, _, x = make_problem(n, r, dtype)
    benchmark(np.matmul, a, x)


@pytest.mark.parametrize(
    "penalty", [mg.NonNeg(), mg.L1(0.1), mg.L0(0.1), mg.Lp(0.1, 0.5)], ids=repr
)
def test_msm_iteration_by_penalty(benchmark, penalty):
    state = _state(256, 10000, np.float64, penalty)
    state.sweep()
    benchmark(state.sweep)
