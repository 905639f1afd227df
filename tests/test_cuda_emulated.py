"""The CUDA sweep, executed on the CPU by the emulator (docs/design.md).

``kernels/msm_sweep.cu`` is compiled unchanged with tests/cuda_emu/cuda_emu.hpp and
driven through the real ``msm_gpu.backends.cuda.backend.CudaSweepState`` (NumPy arrays and the
emulated launcher instead of CuPy; the panel GEMM is NumPy's), so the layout rule, the
geometry, the index list and the compaction logic are those that run on a GPU.  Results
must match the Numba sweep ``cpu_kernels.sweep_chunks``.

Cost note: the emulator runs one std::thread per CUDA thread (up to 256 per block) and
the blocks of a launch one after another; the kernels have one barrier per block, so a
launch costs about the thread start-up plus the arithmetic.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

# tests/ may or may not be a package: make tests/cuda_emu importable either way
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cuda_emu.harness import KERNEL_DIR, build_emulator, compiler_unavailable_reason  # noqa: E402
from cuda_emu.reference import (  # noqa: E402
    PENALTIES,
    make_problem,
    numba_sweep,
    objective,
    penalty_sum,
    rel_err,
)

from msm_gpu.backends.cuda.backend import (
    CudaBackend,
    CudaSweepState,
    FusedArgs,
    cuda_unavailable_reason,
)
from msm_gpu.backends.cuda.geometry import fused_shared_bytes, launches

RTOL = {np.float64: 1e-12, np.float32: 1e-5}
DTYPES = [np.float64, np.float32]
LAYOUTS = ["fused", "resident", "panel"]

pytestmark = pytest.mark.skipif(
    compiler_unavailable_reason() is not None, reason=str(compiler_unavailable_reason())
)


def emulated_state(launcher, problem, panel, **kwargs):
    """The real CudaSweepState on NumPy arrays, kernels run by ``launcher``."""
    p = problem
    return CudaSweepState(
        np,
        launcher,
        p.a,
        p.r,
        p.x0,
        p.splitting.b_diag,
        p.splitting.c_diag,
        p.table,
        p.penalty.code,
        panel,
        **kwargs,
    )


def check_one_sweep(emu, problem, panel, **kwargs):
    """One emulated iteration against one Numba iteration; returns the state."""
    state = emulated_state(emu, problem, panel, **kwargs)
    x0 = problem.x0.copy()
    stats = state.sweep()
    x = state.current_x()
    z_ref, stats_ref = numba_sweep(problem, problem.x0.copy(), state.panel)
    rtol = RTOL[problem.dtype.type]
    assert np.array_equal(problem.x0, x0), "the user's X0 was modified"
    assert x.dtype == problem.dtype and x.shape == problem.x0.shape
    assert stats.dtype == np.float64 and stats.shape == (4, problem.r.shape[1])
    assert rel_err(x, z_ref) <= rtol, f"iterate differs: {rel_err(x, z_ref):.3g}"
    assert rel_err(stats, stats_ref) <= rtol, f"stats differ: {rel_err(stats, stats_ref):.3g}"
    return state


# -- every penalty, both dtypes, every layout, on a small awkward shape ---------------


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("penalty", list(PENALTIES))
def test_every_penalty_matches_numba(emu, penalty, dtype, layout):
    # n = 33 with panel 16: panels of 16, 16 and 1 rows; 7 columns in one tile
    problem = make_problem(33, 7, dtype, penalty, seed=1)
    state = check_one_sweep(emu, problem, panel=16, layout=layout)
    assert state.layout == layout
    if penalty not in ("zero", "box_rows"):
        # the thresholding branches were both exercised
        x = state.current_x()
        assert 0.05 < np.mean(x == 0) < 0.95


# -- the grid of shapes, with the layout the rule picks -----------------------

NS = [1, 5, 20, 33, 64, 257, 1500]
RS = [1, 31, 1000]
NAMES = list(PENALTIES)
GRID = [
    (n, r, NAMES[(i * len(RS) + j) % len(NAMES)], DTYPES[(i + j) % 2])
    for i, n in enumerate(NS)
    for j, r in enumerate(RS)
]


@pytest.mark.parametrize(
    "n,r,penalty,dtype",
    GRID,
    ids=[f"n{n}-r{r}-{p}-{np.dtype(d).name}" for n, r, p, d in GRID],
)
def test_grid_matches_numba(emu, n, r, penalty, dtype):
    """Every n x r of the issue; penalties and dtypes rotate so each n meets several."""
    check_one_sweep(emu, make_problem(n, r, dtype, penalty, seed=n + r), panel=64)


def test_grid_covers_every_penalty_and_layout():
    # the rotation above reaches every penalty, and the grid runs both kinds of kernel the
    # rule picks (the resident layout, which the measured model no longer picks on this
    # grid, is checked for every penalty by test_every_penalty_matches_numba)
    assert {p for _, _, p, _ in GRID} == set(PENALTIES)
    from msm_gpu.backends.cuda.model import choose_layout

    picked = {choose_layout(n, r, np.dtype(d).itemsize, 0, 64).layout for n, r, _, d in GRID}
    assert {"fused", "panel"} <= picked <= {"fused", "resident", "panel"}


FORCED = [
    # n, r, panel, layout
    (1, 31, 4, "panel"),
    (5, 1000, 4, "resident"),
    (64, 31, 24, "panel"),
    (257, 31, 64, "resident"),
    (257, 31, 257, "panel"),  # panel clipped by shared memory
    (20, 300, 64, "fused"),
]


@pytest.mark.parametrize("n,r,panel,layout", FORCED, ids=[f"{x}" for x in FORCED])
@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
def test_forced_layouts_match_numba(emu, n, r, panel, layout, dtype):
    problem = make_problem(n, r, dtype, "l0", seed=3 * n + r)
    state = check_one_sweep(emu, problem, panel=panel, layout=layout)
    assert state.layout == layout


def test_sor_splitting_matches_numba(emu):
    problem = make_problem(70, 5, np.float64, "nonneg", seed=3, omega=1.4, theta=0.0)
    check_one_sweep(emu, problem, panel=32)


def test_smaller_shared_budget_still_matches(emu):
    # a small budget forces narrow tiles and short panels
    problem = make_problem(90, 40, np.float64, "l1", seed=8)
    state = check_one_sweep(emu, problem, panel=64, smem_budget=12 * 1024)
    assert state.layout == "panel" and state.panel < 64


# -- several iterations, retiring columns (index list, then compaction) ---------------


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
def test_iterations_with_retire(emu, dtype, layout):
    problem = make_problem(45, 9, dtype, "nonneg_l1", seed=11)
    panel = 16
    state = emulated_state(emu, problem, panel, layout=layout)
    ref = problem.x0.copy()
    active = np.arange(9)
    rtol = RTOL[np.dtype(dtype).type] * 10  # errors may grow a little over iterations
    # positions in `active`: 9 -> 6 -> 5 active (index list only: 5 > 9 / 2), then
    # 5 -> 2 (compaction into 2 stored columns), then the last two
    retire_after = {0: [1, 4, 5], 1: [0], 2: [0, 2, 3], 3: [0, 1]}
    stored = []
    for it in range(4):
        stats = state.sweep()
        z, stats_ref = numba_sweep(problem, ref[:, active], panel, r=problem.r[:, active])
        ref[:, active] = z
        assert np.array_equal(state.active, active)
        assert rel_err(state.current_x(), ref) <= rtol
        assert rel_err(stats, stats_ref) <= rtol
        keep = np.ones(active.size, dtype=bool)
        keep[retire_after[it]] = False
        state.retire(keep)
        active = active[keep]
        stored.append(state._y.shape[1])
    assert stored == [9, 9, 2, 2], stored  # compaction once 2 of 9 were left
    assert active.size == 0 and state.sweep().shape == (4, 0)
    # retired columns keep the value they had when retired
    assert rel_err(state.current_x(), ref) <= rtol


def test_retire_rejects_wrong_length(emu):
    state = emulated_state(emu, make_problem(5, 3, np.float64), panel=4)
    with pytest.raises(ValueError, match="active columns"):
        state.retire(np.ones(2, dtype=bool))


# -- the statistics mean what the driver assumes -------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("penalty", ["nonneg", "l0", "lp_half"])
def test_stats_give_exact_objective_change(emu, penalty, layout):
    """F(z) = F(x) + stats[0] + stats[1] - h(x), and sufficient decrease holds."""
    problem = make_problem(60, 4, np.float64, penalty, seed=5)
    state = emulated_state(emu, problem, panel=24, layout=layout)
    state.sweep()  # make the iterate feasible first
    x = state.current_x()
    stats = state.sweep()
    z = state.current_x()
    f_x, f_z = objective(problem, x), objective(problem, z)
    predicted = f_x + stats[0] + stats[1] - penalty_sum(problem, x)
    np.testing.assert_allclose(f_z, predicted, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(stats[2], np.sum((z - x) ** 2, axis=0), rtol=1e-12)
    np.testing.assert_allclose(stats[3], np.sum(x**2, axis=0), rtol=1e-12)
    delta = problem.splitting.delta
    assert np.all(f_z <= f_x - 0.5 * delta * stats[2] + 1e-10 * np.abs(f_x))


# -- device-side checks ---------------------------------------------------------------


def test_kernel_of_another_code_sets_the_error_flag(emu):
    problem = make_problem(12, 5, np.float64, "l1", seed=4)
    state = emulated_state(emu, problem, panel=8, layout="fused")
    state._kernel = state._kernel.replace("_l1_", "_box_")  # launch the BOX kernel
    with pytest.raises(RuntimeError, match="another penalty code"):
        state.sweep()


def test_too_little_shared_memory_sets_the_error_flag(emu):
    problem = make_problem(12, 5, np.float64, "l1", seed=4)
    state = emulated_state(emu, problem, panel=8, layout="fused")
    need = fused_shared_bytes(12, state.choice.tw, 8, state.choice.a_in_smem)
    (geometry,) = launches(state._kernel, 5, state.choice.tw, need - 8)
    stats = np.zeros((4, 5))
    args = FusedArgs(
        state._y, state._r, 5, np.arange(5), 5, state._amat, state._rowtab, stats, 5,
        state._err, problem.penalty.code, 12, int(state.choice.a_in_smem),
    )  # fmt: skip
    before = state._y.copy()
    emu(geometry, args)
    assert state._err[0] == 2  # MSM_ERR_SMEM, and nothing was written
    assert np.array_equal(state._y, before)


def test_unknown_code_fails_before_any_launch(emu):
    problem = make_problem(6, 3, np.float64, "l1", seed=0)
    launched = len(emu.launches)
    p = problem
    with pytest.raises(ValueError, match="unknown penalty code 7"):
        CudaSweepState(
            np, emu, p.a, p.r, p.x0, p.splitting.b_diag, p.splitting.c_diag, p.table, 7, 4
        )
    assert len(emu.launches) == launched


# -- the emulator catches a race: the staging barrier removed --------------------------

BARRIER_LINE = "#define MSM_STAGE_BARRIER() __syncthreads()"


@pytest.fixture(scope="module")
def emu_without_barrier(tmp_path_factory):
    """The kernel with the staging barrier removed (a copy; the repository is untouched)."""
    source = (KERNEL_DIR / "msm_sweep.cu").read_text()
    assert source.count(BARRIER_LINE) == 1
    build = tmp_path_factory.mktemp("cuda_emu_broken")
    broken = build / "msm_sweep_no_barrier.cu"
    broken.write_text(source.replace(BARRIER_LINE, "#define MSM_STAGE_BARRIER()"))
    return build_emulator(build, kernel_file=broken, name="libmsm_emu_broken.so")


@pytest.fixture
def skewed():
    """Thread 0 of every block sleeps 20 ms after every barrier and at block start."""
    libs = []

    def apply(lib):
        lib.set_skew(thread=0, microseconds=20_000)
        libs.append(lib)
        return lib

    yield apply
    for lib in libs:
        lib.set_skew(-1, 0)


@pytest.mark.parametrize("layout", ["fused", "panel"])
def test_missing_barrier_is_caught(emu_without_barrier, skewed, layout):
    # Thread 0 stages entries 0, tw, 2 tw, ... of A and of the row table, and sleeps:
    # without the barrier the other threads read those entries before they are written.
    problem = make_problem(8, 3, np.float64, "zero", seed=2)
    state = emulated_state(skewed(emu_without_barrier), problem, panel=8, layout=layout)
    with np.errstate(all="ignore"):
        state.sweep()
    z_ref, _ = numba_sweep(problem, problem.x0.copy(), 8)
    x = state.current_x()
    assert not np.all(np.isfinite(x)) or rel_err(x, z_ref) > 1e-3


@pytest.mark.parametrize("layout", ["fused", "panel"])
def test_skew_alone_keeps_results(emu, skewed, layout):
    # the same schedule with the barrier in place: still exact
    problem = make_problem(8, 3, np.float64, "zero", seed=2)
    check_one_sweep(skewed(emu), problem, panel=8, layout=layout)


# -- without CuPy / GPU ----------------------------------------------------------------


def test_import_does_not_need_cupy():
    code = "import sys, msm_gpu.backends.cuda.backend; assert 'cupy' not in sys.modules"
    repo = Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, "-c", code], check=True, cwd=repo)


@pytest.mark.skipif(cuda_unavailable_reason() is None, reason="CUDA is usable here")
def test_backend_says_why_cuda_is_unusable():
    with pytest.raises(RuntimeError, match="CUDA backend is not usable") as info:
        CudaBackend()
    assert cuda_unavailable_reason() in str(info.value)


# -- the CuPy launcher's argument marshalling, against the emulated kernel ------------


class FakeRawKernel:
    """Stands in for cupy.RawKernel: checks the call CuPy would get, runs the emulator."""

    def __init__(self, emu, name):
        self.emu, self.name = emu, name
        self.max_dynamic_shared_size_bytes = 48 * 1024

    def __call__(self, grid, block, args, shared_mem=0):
        assert len(grid) == 3 and len(block) == 3
        fn = self.emu.function(self.name)
        assert len(args) == len(fn.argtypes) - 3
        values = []
        for a in args:
            if isinstance(a, np.ndarray):
                values.append(a.ctypes.data)
            else:
                assert type(a) in (np.int32, np.int64), type(a)
                values.append(int(a))
        assert fn(grid[0], block[0], shared_mem, *values) == 0


class FakeRawModule:
    def __init__(self, emu):
        self.emu = emu

    def get_function(self, name):
        return FakeRawKernel(self.emu, name)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
def test_cupy_launcher_argument_order(emu, dtype, layout):
    from msm_gpu.backends.cuda.backend import CupyLauncher

    problem = make_problem(50, 6, dtype, "l0_nonneg", seed=13)
    launcher = CupyLauncher(FakeRawModule(emu), gemm=emu.gemm)
    state = emulated_state(launcher, problem, 20, layout=layout)
    stats = state.sweep()
    z_ref, stats_ref = numba_sweep(problem, problem.x0.copy(), state.panel)
    assert rel_err(state.current_x(), z_ref) <= RTOL[np.dtype(dtype).type]
    assert rel_err(stats, stats_ref) <= RTOL[np.dtype(dtype).type]


@pytest.mark.parametrize("n,r", [(1, 5), (5, 1), (1, 1)])
def test_current_x_is_a_copy(emu, n, r):
    problem = make_problem(n, r, np.float64, "l1", seed=0)
    state = emulated_state(emu, problem, panel=4)
    x = state.current_x()
    x[...] = 123.0
    assert not np.any(state.current_x() == 123.0)
    assert x.shape == (n, r) and x.flags.c_contiguous
