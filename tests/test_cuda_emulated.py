"""The CUDA sweep, executed on the CPU by the emulator (docs/design.md).

``kernels/msm_sweep.cu`` is compiled unchanged with tests/cuda_emu/cuda_emu.hpp and
driven through the real ``msm_gpu.backends.cuda.PanelSweepState`` (NumPy arrays and the
emulated launcher instead of CuPy), so the panel loop, the geometry and the
retire/compaction logic are those that run on a GPU.  Results must match the Numba sweep
``cpu_kernels.sweep_chunks``.

Cost note: the emulator runs one std::thread per CUDA thread, so a case costs about
5 us x (threads per block) x (barriers per block) x (blocks); big n goes with small r.
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

from msm_gpu.backends.cuda import (  # noqa: E402
    CudaBackend,
    PanelSweepState,
    cuda_unavailable_reason,
)
from msm_gpu.backends.cuda_geometry import (  # noqa: E402
    MAX_PANEL,
    STATIC_SHARED_BYTES,
    effective_panel,
    launch_geometry,
)

RTOL = {np.float64: 1e-12, np.float32: 1e-5}
DTYPES = [np.float64, np.float32]

pytestmark = pytest.mark.skipif(
    compiler_unavailable_reason() is not None, reason=str(compiler_unavailable_reason())
)


@pytest.fixture(scope="module")
def emu(tmp_path_factory):
    """The emulated kernels, built once per module into a temporary directory."""
    return build_emulator(tmp_path_factory.mktemp("cuda_emu"))


def emulated_state(launcher, problem, panel, **kwargs):
    """The real PanelSweepState on NumPy arrays, kernels run by ``launcher``."""
    p = problem
    return PanelSweepState(
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
    """One emulated iteration against one Numba iteration; returns the new iterate."""
    state = emulated_state(emu, problem, panel, **kwargs)
    stats = state.sweep()
    x = state.current_x()
    z_ref, stats_ref = numba_sweep(problem, problem.x0.copy(), state.panel)
    rtol = RTOL[problem.dtype.type]
    assert x.dtype == problem.dtype and x.shape == problem.x0.shape
    assert stats.dtype == np.float64 and stats.shape == (4, problem.r.shape[1])
    assert rel_err(x, z_ref) <= rtol, f"iterate differs: {rel_err(x, z_ref):.3g}"
    assert rel_err(stats, stats_ref) <= rtol, f"stats differ: {rel_err(stats, stats_ref):.3g}"
    return x


# -- every penalty, both dtypes, on a small awkward shape ----------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("penalty", list(PENALTIES))
def test_every_penalty_matches_numba(emu, penalty, dtype):
    # n = 33 with panel 16: panels of 16, 16 and 1 rows; 7 columns share one block
    problem = make_problem(33, 7, dtype, penalty, seed=1)
    x = check_one_sweep(emu, problem, panel=16)
    if penalty not in ("zero", "box_rows"):
        # the thresholding branches were both exercised
        assert 0.05 < np.mean(x == 0) < 0.95


# -- awkward shapes: n not a multiple of the block, n > 1024, r = 1, many columns -----

SHAPES = [
    # n, r, panel, dtype, penalty
    (1, 1, 1, np.float64, "l1"),
    (1, 300, 4, np.float32, "nonneg"),
    (31, 300, 64, np.float64, "l0"),  # panel clipped to n; 8 columns per block
    (33, 300, 33, np.float32, "lp_half"),  # 64-thread rows, 4 columns per block
    (31, 7, 8, np.float32, "box_rows"),
    (257, 7, 64, np.float64, "box_rows"),
    (257, 1, 100, np.float32, "l1"),
    (257, 7, 257, np.float64, "lp_two_thirds"),  # one 257-row panel: 288-thread block
    (1500, 1, 128, np.float64, "lp_two_thirds"),
    (1500, 3, 200, np.float64, "l0_nonneg"),
    (1500, 1, MAX_PANEL, np.float32, "nonneg_l1"),  # 1024-thread blocks, then 476 rows
]


@pytest.mark.parametrize(
    "n,r,panel,dtype,penalty",
    SHAPES,
    ids=[f"n{n}-r{r}-T{t}-{np.dtype(d).name}-{p}" for n, r, t, d, p in SHAPES],
)
def test_shapes_match_numba(emu, n, r, panel, dtype, penalty):
    check_one_sweep(emu, make_problem(n, r, dtype, penalty, seed=n + r), panel)


@pytest.mark.parametrize("target_threads", [32, 128, 1024])
def test_block_shape_does_not_change_results(emu, target_threads):
    problem = make_problem(40, 9, np.float64, "l1", seed=7)
    check_one_sweep(emu, problem, panel=16, target_threads=target_threads)
    # the state launched the geometry the pure function asked for
    assert emu.launches[-1] == launch_geometry(8, 9, 8, target_threads=target_threads)


def test_sor_splitting_matches_numba(emu):
    problem = make_problem(70, 5, np.float64, "nonneg", seed=3, omega=1.4, theta=0.0)
    check_one_sweep(emu, problem, panel=32)


# -- several iterations, retiring columns --------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
def test_iterations_with_retire(emu, dtype):
    problem = make_problem(45, 9, dtype, "nonneg_l1", seed=11)
    panel = 16
    state = emulated_state(emu, problem, panel)
    ref = problem.x0.copy()
    active = np.arange(9)
    rtol = RTOL[np.dtype(dtype).type] * 10  # errors may grow a little over iterations
    retire_after = {0: [1, 4, 5], 2: [0], 3: [0, 1, 2, 3, 4]}  # positions in `active`
    for it in range(4):
        stats = state.sweep()
        z, stats_ref = numba_sweep(problem, ref[:, active], panel, r=problem.r[:, active])
        ref[:, active] = z
        assert np.array_equal(state.active, active)
        assert rel_err(state.current_x(), ref) <= rtol
        assert rel_err(stats, stats_ref) <= rtol
        gone = retire_after.get(it, [])
        keep = np.ones(active.size, dtype=bool)
        keep[gone] = False
        state.retire(keep)
        active = active[keep]
    assert active.size == 0 and state.sweep().shape == (4, 0)
    # retired columns keep the value they had when retired
    assert rel_err(state.current_x(), ref) <= rtol


def test_retire_rejects_wrong_length(emu):
    state = emulated_state(emu, make_problem(5, 3, np.float64), panel=4)
    with pytest.raises(ValueError, match="active columns"):
        state.retire(np.ones(2, dtype=bool))


# -- the statistics mean what the driver assumes -------------------------------------


@pytest.mark.parametrize("penalty", ["nonneg", "l0", "lp_half"])
def test_stats_give_exact_objective_change(emu, penalty):
    """F(z) = F(x) + stats[0] + stats[1] - h(x), and sufficient decrease holds."""
    problem = make_problem(60, 4, np.float64, penalty, seed=5)
    state = emulated_state(emu, problem, panel=24)
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


# -- the emulator catches a race in the right-looking update -------------------------

BARRIER_LINE = "#define MSM_ROW_BARRIER() __syncthreads()"


@pytest.fixture(scope="module")
def emu_without_row_barrier(tmp_path_factory):
    """The kernel with the per-row barrier removed (a copy; the repository is untouched)."""
    source = (KERNEL_DIR / "msm_sweep.cu").read_text()
    assert source.count(BARRIER_LINE) == 1
    build = tmp_path_factory.mktemp("cuda_emu_broken")
    broken = build / "msm_sweep_no_row_barrier.cu"
    broken.write_text(source.replace(BARRIER_LINE, "#define MSM_ROW_BARRIER()"))
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


def test_missing_row_barrier_is_caught(emu_without_row_barrier, skewed):
    # Thread 0 owns row 0 and sleeps: without the barrier the threads of rows 1.. read
    # z_0's shared slot before it is written, so their updates are wrong.
    problem = make_problem(8, 1, np.float64, "zero", seed=2)
    state = emulated_state(skewed(emu_without_row_barrier), problem, panel=8)
    state.sweep()
    z_ref, _ = numba_sweep(problem, problem.x0.copy(), 8)
    assert rel_err(state.current_x(), z_ref) > 1e-3


def test_skew_alone_keeps_results(emu, skewed):
    # the same schedule with the barrier in place: still exact
    problem = make_problem(8, 1, np.float64, "zero", seed=2)
    check_one_sweep(skewed(emu), problem, panel=8)


# -- the launch geometry, on its own -------------------------------------------------


def test_geometry_one_thread_per_row_whole_warps():
    for rows in (1, 31, 32, 33, 100, 257, 1024):
        g = launch_geometry(rows, 1, 8)
        assert g.block[0] % 32 == 0 and rows <= g.block[0] < rows + 32
        assert g.grid == (1, 1, 1) and g.cols_per_block == 1
        assert g.shared_bytes == rows * 8
        assert g.threads_per_block <= 1024


def test_geometry_packs_small_panels():
    g = launch_geometry(16, 300, 4)
    assert g.block == (32, 8, 1) and g.grid == (38, 1, 1)  # 8 * 38 = 304 >= 300
    assert g.shared_bytes == 8 * 16 * 4
    assert g.kernel == "msm_panel_sweep_f32"
    g = launch_geometry(16, 3, 8)  # never more columns per block than columns
    assert g.block == (32, 3, 1) and g.grid == (1, 1, 1)
    assert g.kernel == "msm_panel_sweep_f64"
    g = launch_geometry(100, 1000, 8, target_threads=1024)
    assert g.block == (128, 8, 1) and g.grid == (125, 1, 1)


def test_geometry_covers_every_column():
    for rows in (1, 17, 64, 200, 1024):
        for cols in (1, 2, 7, 300, 10**6):
            g = launch_geometry(rows, cols, 4)
            assert g.grid[0] * g.cols_per_block >= cols > (g.grid[0] - 1) * g.cols_per_block
            assert g.threads_per_block <= 1024
            # dynamic + static shared memory fits without the opt-in
            assert not g.needs_shared_opt_in
            assert g.shared_bytes + STATIC_SHARED_BYTES <= 48 * 1024


def test_geometry_rejects_bad_input():
    with pytest.raises(ValueError):
        launch_geometry(0, 1, 8)
    with pytest.raises(ValueError):
        launch_geometry(1025, 1, 8)
    with pytest.raises(ValueError):
        launch_geometry(10, 0, 8)
    with pytest.raises(ValueError):
        launch_geometry(10, 1, 2)
    with pytest.raises(ValueError):
        launch_geometry(10, 1, 8, target_threads=48)


def test_effective_panel():
    assert effective_panel(1, 64) == 1
    assert effective_panel(100, 64) == 64
    assert effective_panel(5000, 4096) == MAX_PANEL
    with pytest.raises(ValueError):
        effective_panel(10, 0)


# -- without CuPy / GPU ----------------------------------------------------------------


def test_import_does_not_need_cupy():
    code = "import sys, msm_gpu.backends.cuda; assert 'cupy' not in sys.modules"
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
        arrays, scalars = args[:7], args[7:]
        assert all(isinstance(a, np.ndarray) for a in arrays)
        assert all(type(s) is np.int32 for s in scalars) and len(scalars) == 5
        fn = getattr(self.emu.lib, "emu_" + self.name)
        status = fn(*grid, *block, shared_mem, *(a.ctypes.data for a in arrays), *map(int, scalars))
        assert status == 0


class FakeRawModule:
    def __init__(self, emu):
        self.emu = emu

    def get_function(self, name):
        return FakeRawKernel(self.emu, name)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
def test_cupy_launcher_argument_order(emu, dtype):
    from msm_gpu.backends.cuda import CupyLauncher

    problem = make_problem(50, 6, dtype, "l0_nonneg", seed=13)
    state = emulated_state(CupyLauncher(FakeRawModule(emu)), problem, 20)
    stats = state.sweep()
    z_ref, stats_ref = numba_sweep(problem, problem.x0.copy(), 20)
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
