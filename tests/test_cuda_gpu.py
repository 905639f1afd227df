"""The real CuPy backend against the Numba/CPU sweeps (needs a CUDA GPU and CuPy).

Run on a GPU machine with ``pytest -m gpu tests/test_cuda_gpu.py``.  Everything here is
skipped, with the reason, where ``cuda_unavailable_reason()`` says CUDA is unusable.

Tolerances are a little looser than in the emulated tests: cuBLAS sums in another order
than OpenBLAS, nvcc contracts multiply-adds into FMAs and the device math library
differs from glibc's by an ulp or two.  In float32 a nonconvex prox may then land on the
other side of its zero/nonzero threshold for a rare entry, so those cases allow a tiny
fraction of entries to differ.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cuda_emu.reference import PENALTIES, make_problem, numba_sweep, rel_err  # noqa: E402

from msm_gpu.backends.cuda.backend import cuda_unavailable_reason

REASON = cuda_unavailable_reason()
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(REASON is not None, reason=f"no usable CUDA GPU: {REASON}"),
]

RTOL = {np.float64: 1e-11, np.float32: 1e-4}
NONCONVEX = {"l0", "l0_nonneg", "lp_half", "lp_two_thirds"}


@pytest.fixture(scope="module")
def cupy():
    import cupy

    return cupy


@pytest.fixture(scope="module")
def backend():
    from msm_gpu.backends.cuda.backend import CudaBackend

    return CudaBackend()


def gpu_state(backend, cupy, problem, panel, **kwargs):
    p = problem
    return backend.start(
        cupy.asarray(p.a),
        cupy.asarray(p.r),
        cupy.asarray(p.x0),
        p.splitting,
        p.table,
        p.penalty.code,
        panel,
        **kwargs,
    )


def assert_matches(got, want, dtype, penalty):
    rtol = RTOL[np.dtype(dtype).type]
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if np.dtype(dtype) == np.float32 and penalty in NONCONVEX:
        scale = max(np.abs(want).max(), 1e-300)
        assert np.mean(np.abs(got - want) > rtol * scale) <= 1e-3
    else:
        assert rel_err(got, want) <= rtol, f"relative error {rel_err(got, want):.3g}"


def check_one_sweep(backend, cupy, problem, panel, penalty, **kwargs):
    state = gpu_state(backend, cupy, problem, panel, **kwargs)
    stats = state.sweep()
    x = cupy.asnumpy(state.current_x())
    z_ref, stats_ref = numba_sweep(problem, problem.x0.copy(), state.panel)
    assert x.shape == problem.x0.shape and x.dtype == problem.dtype
    assert_matches(x, z_ref, problem.dtype, penalty)
    if not (np.dtype(problem.dtype) == np.float32 and penalty in NONCONVEX):
        assert rel_err(cupy.asnumpy(stats), stats_ref) <= RTOL[np.dtype(problem.dtype).type]


@pytest.mark.parametrize("layout", ["fused", "resident", "panel"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("penalty", list(PENALTIES))
def test_every_penalty_matches_numba(backend, cupy, penalty, dtype, layout):
    n = 60 if layout == "fused" else 257  # fused: A must fit in shared memory
    problem = make_problem(n, 300, dtype, penalty, seed=1)
    check_one_sweep(backend, cupy, problem, 64, penalty, layout=layout)


def test_tf32_setting_does_not_change_the_panel_gemm(backend, cupy, monkeypatch):
    monkeypatch.setenv("CUPY_TF32", "1")
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "1")
    problem = make_problem(300, 500, np.float32, "nonneg", seed=2)
    check_one_sweep(backend, cupy, problem, 64, "nonneg", layout="panel")


SHAPES = [
    (1, 1, 1, np.float64, "l1"),
    (33, 5000, 16, np.float32, "nonneg"),
    (200, 1000, 64, np.float64, "l0"),
    (1500, 3, 1024, np.float64, "nonneg_l1"),
    (1500, 64, 128, np.float32, "box_rows"),
    (256, 20000, 64, np.float32, "nonneg"),
    (64, 100000, 64, np.float64, "l1"),
]


@pytest.mark.parametrize(
    "n,r,panel,dtype,penalty",
    SHAPES,
    ids=[f"n{n}-r{r}-T{t}-{np.dtype(d).name}-{p}" for n, r, t, d, p in SHAPES],
)
def test_shapes_match_numba(backend, cupy, n, r, panel, dtype, penalty):
    check_one_sweep(backend, cupy, make_problem(n, r, dtype, penalty, seed=n), panel, penalty)


def test_iterations_with_retire(backend, cupy):
    problem = make_problem(130, 50, np.float64, "nonneg_l1", seed=4)
    state = gpu_state(backend, cupy, problem, 64)
    ref = problem.x0.copy()
    active = np.arange(50)
    rng = np.random.default_rng(0)
    for _ in range(4):
        stats = state.sweep()
        z, stats_ref = numba_sweep(problem, ref[:, active], 64, r=problem.r[:, active])
        ref[:, active] = z
        assert np.array_equal(state.active, active)
        assert rel_err(cupy.asnumpy(state.current_x()), ref) <= 1e-10
        assert rel_err(cupy.asnumpy(stats), stats_ref) <= 1e-10
        keep = rng.random(active.size) < 0.7
        state.retire(cupy.asarray(keep))
        active = active[keep]


def test_matches_cpu_backend(backend, cupy):
    from msm_gpu.backends.cpu.backend import CpuBackend

    problem = make_problem(300, 700, np.float64, "nonneg", seed=9)
    cpu = CpuBackend().start(
        problem.a,
        problem.r,
        problem.x0,
        problem.splitting,
        problem.table,
        problem.penalty.code,
        64,
    )
    gpu = gpu_state(backend, cupy, problem, 64)
    for _ in range(3):
        s_cpu, s_gpu = cpu.sweep(), gpu.sweep()
        assert rel_err(cupy.asnumpy(s_gpu), s_cpu) <= 1e-10
    assert rel_err(cupy.asnumpy(gpu.current_x()), cpu.current_x()) <= 1e-10


def test_solve_on_cuda_matches_cpu(cupy):
    from msm_gpu import penalties
    from msm_gpu._api import solve

    problem = make_problem(120, 40, np.float64, "nonneg", seed=12)
    kwargs = dict(tol=1e-10, max_iter=3000)
    res_cpu = solve(problem.a, problem.r, penalties.NonNeg(), backend="cpu", **kwargs)
    res_gpu = solve(
        cupy.asarray(problem.a),
        cupy.asarray(problem.r),
        penalties.NonNeg(),
        backend="cuda",
        **kwargs,
    )
    assert isinstance(res_gpu.x, cupy.ndarray)
    assert rel_err(cupy.asnumpy(res_gpu.x), res_cpu.x) <= 1e-6


def test_backend_roundtrip(backend, cupy):
    x = np.arange(6.0).reshape(2, 3)
    dev = backend.asarray(x, np.float32)
    assert isinstance(dev, cupy.ndarray) and dev.dtype == np.float32
    assert isinstance(backend.to_user(dev, x), np.ndarray)
    assert backend.to_user(dev, dev) is dev
