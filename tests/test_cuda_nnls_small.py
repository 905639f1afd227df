"""The exact small-n NNLS kernel (``kernels/nnls_small.cu``): NVRTC, the CPU emulator, a GPU.

* NVRTC compiles it for sm_80 and sm_90 in both dtypes with no device (cuda-core +
  nvidia-cuda-nvrtc, as ``tests/test_cuda_compile.py``), from the text the launcher hands
  to ``cupy.RawModule``; ptxas' registers and spills are printed (``pytest -s``).
* The emulator (``tests/cuda_emu``: one std::thread per CUDA thread, std::barrier for
  ``__syncthreads``/``__syncwarp`` and warp intrinsics) runs the unchanged .cu file through
  the real launcher ``msm_gpu.backends.cuda.nnls_small.launch`` on NumPy arrays, and every
  column is checked against ``scipy.optimize.nnls`` (objective), the status and the KKT
  residual (against ``finish.objective.kkt_residual``).  Copies with a barrier removed
  must be caught.
* ``gpu``-marked tests run :func:`nnls_small` on CuPy arrays (skipped without a GPU).

Sign convention: the kernel solves ``min 1/2 x'Ax + r'x, x >= 0``; least squares
``min ||Cx - b||`` is ``A = C'C``, ``r = -C'b``.  x = 0 is the solution when ``r >= 0``.
"""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import scipy.optimize

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cuda_emu.harness import KERNEL_DIR, compiler_unavailable_reason  # noqa: E402

from msm_gpu.backends.cuda import nnls_small as ns
from msm_gpu.backends.cuda.backend import cuda_unavailable_reason
from msm_gpu.finish.objective import kkt_residual
from msm_gpu.penalties import NonNeg

#: Objective gap to scipy, relative to |q*| (q = 1/2 x'Ax + r'x, q* <= 0 its minimum).
GAP = {np.float64: 1e-10, np.float32: 1e-5}
#: The KKT residual the kernel reports for a converged column (of the stored x): the
#: issue's bar for "exact" in float64 (rank-deficient faces of the Gram form reach ~1e-12).
KKT = {np.float64: 1e-10, np.float32: 1e-5}
DTYPES = [np.float64, np.float32]


# ------------------------------------------------------------------------------------
# problems and checks
# ------------------------------------------------------------------------------------


def least_squares(c, b, dtype=np.float64):
    """(A, R) of min ||C x - b_j|| for every column b_j of b: A = C'C, R = -C'B."""
    return (c.T @ c).astype(dtype), (-(c.T @ b)).astype(dtype)


def objective_gaps(c, b, x):
    """Per column: (F(x) - F(x_scipy)) / (F(0) - F(x_scipy)), F = 1/2 ||C x - b||^2.

    The denominator is |q*|, the size of the kernel's own objective at its minimum;
    residuals are computed from C, so the gap is accurate to rounding.
    """
    gaps = []
    for j in range(b.shape[1]):
        xs, _ = scipy.optimize.nnls(c, b[:, j])
        f_x = 0.5 * np.sum((c @ x[:, j].astype(np.float64) - b[:, j]) ** 2)
        f_s = 0.5 * np.sum((c @ xs - b[:, j]) ** 2)
        f_0 = 0.5 * np.sum(b[:, j] ** 2)
        gaps.append((f_x - f_s) / max(f_0 - f_s, 1e-300))
    return np.array(gaps)


def check_solution(c, b, x, status, kkt, dtype, a, r):
    """Converged, feasible, at scipy's objective, and the kernel's KKT residual is right."""
    dtype = np.dtype(dtype).type
    assert x.dtype == dtype and x.shape == (c.shape[1], b.shape[1]) and x.flags.c_contiguous
    assert status.dtype == np.int32 and kkt.dtype == np.float64
    assert np.all(status == ns.CONVERGED), status
    assert np.all(x >= 0)
    gaps = objective_gaps(c, b, x)
    assert np.all(np.abs(gaps) <= GAP[dtype]), gaps
    assert np.all(kkt <= KKT[dtype]), kkt
    ref = kkt_residual(a.astype(np.float64), r.astype(np.float64), x.astype(np.float64), NonNeg())
    np.testing.assert_allclose(kkt, ref, rtol=1e-6, atol=1e-14)  # equal up to rounding
    return float(np.max(np.abs(gaps)))


def run(module, a, r, x0=None, **kwargs):
    kwargs.setdefault("warps", 1)  # fewer std::threads per block in the emulator
    return ns.launch(np, module, a, r, x0, **kwargs)


def problem(rng, kind, n, ncols):
    """(C, B) of one family of test problems."""
    if kind == "well":  # full column rank, random signs: some variables at 0
        c = rng.normal(size=(n + 10, n))
        return c, rng.normal(size=(n + 10, ncols))
    if kind == "rank_deficient":  # m < n
        m = max(1, n // 2)
        return rng.normal(size=(m, n)), rng.normal(size=(m, ncols))
    if kind == "duplicates":  # columns 1, 3 (and more) copies of column 0
        c = rng.normal(size=(n + 5, n))
        for j in range(1, n, 3):
            c[:, j] = c[:, 0]
        return c, rng.normal(size=(n + 5, ncols))
    if kind == "near_dependent":  # square-ish: column 1 is 1e-6 away from the span of 2..m
        m = min(n, 8)
        c = rng.normal(size=(m, n))
        if n > 2:
            u = rng.normal(size=m)
            c[:, 1] = c[:, 2:m] @ rng.normal(size=m - 2) + 1e-6 * u / np.linalg.norm(u)
        return c, rng.normal(size=(m, ncols))
    if kind == "zero_columns":
        c = rng.normal(size=(n + 5, n))
        c[:, ::4] = 0.0
        return c, rng.normal(size=(n + 5, ncols))
    if kind == "x_zero":  # C >= 0, b <= 0: r = -C'b >= 0, x = 0 is optimal
        c = np.abs(rng.normal(size=(n + 5, n)))
        return c, -np.abs(rng.normal(size=(n + 5, ncols)))
    if kind == "all_free":  # b = C x_true, x_true > 0: every variable free at the solution
        c = rng.normal(size=(n + 10, n))
        return c, c @ rng.uniform(0.5, 2.0, size=(n, ncols))
    if kind == "nonneg_data":  # NMF-like: C, b >= 0 (every variable joins from x = 0)
        c = np.abs(rng.normal(size=(n + 10, n)))
        return c, np.abs(rng.normal(size=(n + 10, ncols)))
    raise ValueError(kind)


# ------------------------------------------------------------------------------------
# host-side pieces: constants, prelude, geometry
# ------------------------------------------------------------------------------------


def test_constants_match_the_host_and_the_kernel():
    import inspect

    from msm_gpu.solvers.nnls_columns import PIVOT_TOL, nnls_active_set

    assert ns.MAX_N == 64
    assert ns.PIVOT_TOL == PIVOT_TOL
    assert ns.TOL == inspect.signature(nnls_active_set).parameters["tol"].default
    source = (KERNEL_DIR / ns.KERNEL_FILE).read_text()
    assert f"#define NNLS_MAX_WARPS {ns.MAX_WARPS}" in source
    assert f"#define NNLS_MIN_BLOCKS {ns.MIN_BLOCKS}" in source
    codes = {"NNLS_CONVERGED": 0, "NNLS_ITER_CAP": 1, "NNLS_SINGULAR": 2, "NNLS_BAD_LAUNCH": 3}
    for name, value in codes.items():
        assert f"#define {name} {value}" in source
    assert (ns.CONVERGED, ns.ITER_CAP, ns.SINGULAR, ns.BAD_LAUNCH) == (0, 1, 2, 3)


def test_kernel_source_has_prelude_and_pasted_headers():
    source = ns.kernel_source()
    assert source.startswith("// generated by msm_gpu.backends.cuda.nnls_small.nnls_prelude")
    assert "#define MSM_NNLS_MAX_N 64" in source and "#define MSM_NNLS_PIVOT_TOL 1e-13" in source
    assert "#define MSM_NNLS_NOISE_TOL 1e-08" in source
    assert '#include "prox.cuh"' not in source and "MSM_DYNAMIC_SHARED" in source


def test_kernel_is_package_data():
    # pyproject's package-data takes kernels/*.cu: the new file ships with the wheel
    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert '"msm_gpu.kernels" = ["*.cu", "*.cuh"]' in text
    assert (KERNEL_DIR / ns.KERNEL_FILE).is_file()


def test_shared_bytes_and_warps():
    # n = 64, float64: A 32 KiB + per warp 2080 + 128 doubles and 128 ints
    assert ns.warp_bytes(64) == (2080 + 128) * 8 + 128 * 4 == 18176
    assert ns.shared_bytes(64, 8, 8) == 32768 + 8 * 18176
    assert ns.choose_warps(64, 8) == 8  # H100: 174 KiB per block
    assert ns.choose_warps(64, 8, smem_per_block=163 * 1024) == 7  # A100
    assert ns.choose_warps(20, 4) == ns.MAX_WARPS
    assert ns.choose_warps(64, 8, smem_per_block=40 * 1024) == 0
    for n in (1, 5, 20, 33, 64):
        assert ns.shared_bytes(n, 3, 4) % 16 == 0


def test_geometry():
    g = ns.geometry(20, 1000, 8)
    assert g.kernel == "nnls_small_f64" and g.block == (256, 1, 1) and g.warps == 8
    assert g.grid == (125, 1, 1) and not g.needs_shared_opt_in
    big = ns.geometry(64, 10**7, 8)
    assert big.needs_shared_opt_in and big.shared_bytes == ns.shared_bytes(64, 8, 8)
    # one block per SM fits at n = 64: the grid is 2 waves of 132 SMs, warps loop over columns
    assert big.grid == (2 * 132, 1, 1)
    assert ns.geometry(64, 3, 4).kernel == "nnls_small_f32"
    # n = 20: three blocks of 8 warps per SM (registers), two waves
    assert ns.geometry(20, 10**6, 8).grid == (2 * 132 * 3, 1, 1)
    with pytest.raises(ValueError, match="1 <= n <= 64"):
        ns.geometry(65, 10, 8)
    with pytest.raises(ValueError, match="warps"):
        ns.geometry(64, 10, 8, smem_per_block=40 * 1024)


def test_launch_checks_shapes():
    with pytest.raises(ValueError, match="a must be"):
        ns.launch(np, None, np.eye(3), np.zeros((4, 2)))
    with pytest.raises(TypeError, match="float32 or float64"):
        ns.launch(np, None, np.eye(3), np.zeros((3, 2), dtype=np.int64))
    with pytest.raises(ValueError, match="x0 must have shape"):
        ns.launch(np, None, np.eye(3), np.zeros((3, 2)), np.zeros((3, 3)))
    with pytest.raises(ValueError, match="n <= 64"):
        ns.launch(np, None, np.eye(65), np.zeros((65, 2)))
    x, status, kkt = ns.launch(np, None, np.eye(3), np.zeros((3, 0)))
    assert x.shape == (3, 0) and status.shape == kkt.shape == (0,)


def test_import_does_not_need_cupy():
    code = "import sys, msm_gpu.backends.cuda.nnls_small; assert 'cupy' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[1])


# ------------------------------------------------------------------------------------
# NVRTC: compiles without a device
# ------------------------------------------------------------------------------------

ARCHS = ["sm_80", "sm_90"]


def _nvrtc():
    try:
        from cuda.core import Program, ProgramOptions
    except ModuleNotFoundError as exc:  # only a truly absent compiler skips
        if exc.name is None or not exc.name.startswith("cuda"):
            raise
        pytest.skip(f"cuda-core is not installed ({exc}); pip install cuda-core nvidia-cuda-nvrtc")
    return Program, ProgramOptions


def compile_cubin(source, arch):
    Program, ProgramOptions = _nvrtc()
    options = ProgramOptions(arch=arch, std="c++17", ptxas_options=["-v"], name=ns.KERNEL_FILE)
    log = io.StringIO()
    cubin = Program(source, code_type="c++", options=options).compile("cubin", logs=log)
    return bytes(cubin.code), log.getvalue()


@pytest.fixture(scope="module", params=ARCHS)
def compiled(request):
    _nvrtc()
    cubin, log = compile_cubin(ns.kernel_source(), request.param)
    return request.param, cubin, log


@pytest.mark.parametrize("itemsize", [8, 4], ids=["f64", "f32"])
def test_nvrtc_compiles(compiled, itemsize, record_property):
    from test_cuda_compile import parse_resource_usage

    arch, cubin, log = compiled
    name = ns.kernel_name(itemsize)
    assert cubin[:4] == b"\x7fELF" and name.encode() in cubin, f"{name} missing ({arch})"
    usage = parse_resource_usage(log)
    assert name in usage, f"no ptxas report for {name}:\n{log}"
    info = usage[name]
    print(f"\n{name} {arch}: {info}")
    record_property(f"{name}_{arch}", info)
    # __launch_bounds__(256, 3): three full blocks fit an SM's registers
    assert info["registers"] * ns.MAX_WARPS * ns.WARP * ns.MIN_BLOCKS <= 65536
    assert info["smem"] == 0  # all dynamic, sized by the launcher, checked on the device
    assert info["spill_stores"] <= 32, info  # none with CUDA 13's NVRTC


def test_nvrtc_needs_the_prelude():
    from msm_gpu.backends.cuda.backend import kernel_source as sweep_source

    with pytest.raises(Exception, match="MSM_NNLS_MAX_N must be defined"):
        compile_cubin(sweep_source(KERNEL_DIR / ns.KERNEL_FILE), "sm_90")


# ------------------------------------------------------------------------------------
# the emulator
# ------------------------------------------------------------------------------------

needs_cxx = pytest.mark.skipif(
    compiler_unavailable_reason() is not None, reason=str(compiler_unavailable_reason())
)


@pytest.fixture(scope="module")
def nnls_emu(tmp_path_factory):
    reason = compiler_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    from cuda_emu.nnls_small_emu import build_nnls_emulator

    return build_nnls_emulator(tmp_path_factory.mktemp("nnls_small_emu"))


@needs_cxx
def test_emulator_builds_without_warnings(nnls_emu):
    assert nnls_emu.warnings == ""


# (kind, n, ncols, dtype): every family, n = 1, 2, 5, 20, 64, 1 to 40 columns
CASES = [
    ("well", 1, 7, np.float64),
    ("well", 2, 12, np.float64),
    ("well", 5, 40, np.float64),
    ("well", 20, 25, np.float64),
    ("well", 64, 4, np.float64),
    ("well", 20, 10, np.float32),
    ("well", 64, 2, np.float32),
    ("rank_deficient", 2, 9, np.float64),
    ("rank_deficient", 5, 30, np.float64),
    ("rank_deficient", 20, 20, np.float64),
    ("rank_deficient", 64, 3, np.float64),
    ("duplicates", 5, 10, np.float64),
    ("duplicates", 20, 15, np.float64),
    ("duplicates", 64, 2, np.float64),
    ("zero_columns", 5, 8, np.float64),
    ("zero_columns", 20, 10, np.float64),
    ("zero_columns", 20, 6, np.float32),
    ("x_zero", 1, 3, np.float64),
    ("x_zero", 20, 5, np.float64),
    ("all_free", 2, 4, np.float64),
    ("all_free", 20, 6, np.float64),
    ("all_free", 64, 1, np.float64),
    ("nonneg_data", 20, 12, np.float64),
    ("nonneg_data", 64, 2, np.float32),
    ("near_dependent", 16, 12, np.float64),
]


@needs_cxx
@pytest.mark.parametrize(
    "kind,n,ncols,dtype",
    CASES,
    ids=[f"{k}-n{n}-r{r}-{np.dtype(d).name}" for k, n, r, d in CASES],
)
def test_matches_scipy(nnls_emu, kind, n, ncols, dtype, record_property):
    rng = np.random.default_rng(1000 * n + ncols)
    c, b = problem(rng, kind, n, ncols)
    a, r = least_squares(c, b, dtype)
    x, status, kkt = run(nnls_emu, a, r)
    gap = check_solution(c, b, x, status, kkt, dtype, a, r)
    record_property("max_objective_gap", gap)
    print(f"\n{kind} n={n} r={ncols} {np.dtype(dtype).name}: max |gap| {gap:.2e}")
    if kind == "x_zero":
        assert np.all(x == 0) and np.all(kkt == 0)
    if kind == "all_free":
        assert np.all(x > 0)
    if kind == "zero_columns":
        assert np.all(x[::4] == 0)


@needs_cxx
@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
def test_warm_starts(nnls_emu, dtype):
    rng = np.random.default_rng(7)
    c, b = problem(rng, "duplicates", 12, 8)
    a, r = least_squares(c, b, dtype)
    exact = np.stack([scipy.optimize.nnls(c, b[:, j])[0] for j in range(8)], axis=1)
    starts = {
        "solution": exact,
        "positive": rng.uniform(0.1, 1.0, size=(12, 8)),  # duplicates free together
        "signed": rng.normal(size=(12, 8)),  # clipped at 0
    }
    for label, x0 in starts.items():
        x, status, kkt = run(nnls_emu, a, r, x0.astype(dtype))
        check_solution(c, b, x, status, kkt, dtype, a, r)
        if label == "solution" and dtype == np.float64:
            assert np.allclose(x, exact, rtol=1e-9, atol=1e-12)


@needs_cxx
def test_any_strides_give_the_same_result(nnls_emu):
    rng = np.random.default_rng(3)
    c, b = problem(rng, "well", 9, 6)
    a, r = least_squares(c, b)
    x0 = rng.uniform(0, 1, size=(9, 6))
    x_c, s_c, k_c = run(nnls_emu, a, r, x0)
    wide = np.zeros((9, 20))
    wide[:, ::3][:, :6] = x0
    x_f, s_f, k_f = run(nnls_emu, a, np.asfortranarray(r), wide[:, ::3][:, :6])
    r_t = np.ascontiguousarray(r.T).T  # column-major view
    x_t, _, _ = run(nnls_emu, a, r_t, np.asfortranarray(x0))
    assert np.array_equal(x_c, x_f) and np.array_equal(x_c, x_t)
    assert np.array_equal(s_c, s_f) and np.array_equal(k_c, k_f)


@needs_cxx
def test_several_warps_and_columns_per_warp(nnls_emu):
    """Blocks of 3 warps, a grid of 2 blocks (one per SM, one SM): each warp solves
    several columns, one after another, with the same staged A."""
    rng = np.random.default_rng(11)
    c, b = problem(rng, "well", 10, 23)
    a, r = least_squares(c, b)
    nbytes = ns.shared_bytes(10, 3, 8)
    launched = len(nnls_emu.launches)
    x, status, kkt = run(nnls_emu, a, r, warps=3, sms=1, smem_per_sm=nbytes + 1024)
    assert nnls_emu.launches[launched:] == [("nnls_small_f64", (2, 1, 1), (96, 1, 1), nbytes)]
    check_solution(c, b, x, status, kkt, np.float64, a, r)


@needs_cxx
def test_default_geometry(nnls_emu):
    """The launch shape the GPU gets: 8 warps per block (256 std::threads here)."""
    rng = np.random.default_rng(12)
    c, b = problem(rng, "nonneg_data", 6, 17)
    a, r = least_squares(c, b)
    launched = len(nnls_emu.launches)
    x, status, kkt = ns.launch(np, nnls_emu, a, r)
    assert nnls_emu.launches[launched][2] == (256, 1, 1)
    check_solution(c, b, x, status, kkt, np.float64, a, r)


@needs_cxx
def test_shared_memory_opt_in(nnls_emu):
    # n = 64 float64 needs more than 48 KiB even for one warp: the launcher opts in
    rng = np.random.default_rng(13)
    c, b = problem(rng, "well", 64, 2)
    a, r = least_squares(c, b)
    assert ns.shared_bytes(64, 1, 8) > ns.DEFAULT_SHARED_LIMIT
    x, status, kkt = run(nnls_emu, a, r)
    check_solution(c, b, x, status, kkt, np.float64, a, r)


@needs_cxx
def test_iteration_cap(nnls_emu):
    rng = np.random.default_rng(5)
    c, b = problem(rng, "nonneg_data", 20, 6)
    a, r = least_squares(c, b)
    x, status, kkt = run(nnls_emu, a, r, max_iter=1)
    assert np.all(status == ns.ITER_CAP) and np.all(x >= 0)
    assert np.all(kkt > 1e-8)  # not optimal, and the residual says so


@needs_cxx
@pytest.mark.parametrize("kind", ["duplicates", "rank_deficient"])
def test_dependent_joiners_are_held_at_zero(nnls_emu, kind):
    # tol = 0: a variable whose w is positive rounding joins alone; it is dependent on the
    # face (a copy of a free column, or the (m+1)-th of rank m), and its w is far below
    # NOISE_TOL: it is held at 0 and the column converges (status 0, not SINGULAR)
    rng = np.random.default_rng(3 if kind == "duplicates" else 4)
    c, b = problem(rng, kind, 12, 10)
    a, r = least_squares(c, b)
    x, status, kkt = run(nnls_emu, a, r, tol=0.0)
    check_solution(c, b, x, status, kkt, np.float64, a, r)


@needs_cxx
def test_singular_face(nnls_emu):
    # q = 1/2 (x1 + x2)^2 - x1 - 2 x2: both join at 0, x2 is skipped (dependent), x = (1, 0);
    # then x2 alone joins a singular face (r is not in the range of A: not least squares)
    # (from a warm start the column is solved again from 0, with the same outcome)
    a = np.ones((2, 2))
    r = np.array([[-1.0, -1.0], [-2.0, -2.0]])
    x0 = np.array([[0.0, 0.5], [0.0, 0.5]])
    x, status, kkt = run(nnls_emu, a, r, x0)
    assert np.all(status == ns.SINGULAR)
    np.testing.assert_allclose(x, [[1.0, 1.0], [0.0, 0.0]])
    assert np.all(kkt > 0.1)


@needs_cxx
def test_too_little_shared_memory_is_reported(nnls_emu):
    rng = np.random.default_rng(2)
    c, b = problem(rng, "well", 6, 3)
    a, r = least_squares(c, b)
    x = np.full((6, 3), 7.0)
    status = np.zeros(3, dtype=np.int32)
    kkt = np.zeros(3)
    i32, i64 = np.int32, np.int64
    args = (a, i32(6), r, i64(3), i64(1), r, i64(3), i64(1), i32(0), x, i64(3), i64(1),
            status, kkt, i64(3), np.float64(ns.TOL), i32(50))  # fmt: skip
    fn = nnls_emu.get_function("nnls_small_f64")
    fn((1, 1, 1), (32, 1, 1), args, shared_mem=ns.shared_bytes(6, 1, 8) - 16)
    assert np.all(status == ns.BAD_LAUNCH) and np.all(x == 0) and np.all(kkt == -1.0)


# -- planted bugs: the emulator catches a missing barrier --------------------------------

STAGE_BARRIER = "#define NNLS_STAGE_BARRIER() __syncthreads()"
FACTOR_SYNC = "#define NNLS_FACTOR_SYNC() __syncwarp(NNLS_MASK)"

# A broken kernel may make the lanes of a warp diverge, and the emulator then deadlocks:
# it runs in a subprocess with a timeout (a hang counts as caught).
RUNNER = textwrap.dedent(
    """
    import sys
    import numpy as np
    sys.path.insert(0, {tests!r})
    from cuda_emu.nnls_small_emu import EmulatedNnlsModule
    from msm_gpu.backends.cuda.nnls_small import launch
    module = EmulatedNnlsModule({lib!r})
    module.set_skew({thread}, {us})
    data = np.load({data!r})
    x, status, kkt = launch(np, module, data["a"], data["r"], warps={warps})
    np.savez({out!r}, x=x, status=status, kkt=kkt)
    """
)


def run_isolated(tmp_path, lib, a, r, *, warps, thread, us, timeout=240):
    """(x, status) of the emulated launch in a subprocess, or None if it hung."""
    data, out = tmp_path / "in.npz", tmp_path / "out.npz"
    np.savez(data, a=a, r=r)
    script = RUNNER.format(
        tests=str(Path(__file__).resolve().parent),
        lib=str(lib),
        thread=thread,
        us=us,
        data=str(data),
        warps=warps,
        out=str(out),
    )
    try:
        subprocess.run([sys.executable, "-c", script], check=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    res = np.load(out)
    return res["x"], res["status"]


@pytest.fixture(scope="module")
def broken(tmp_path_factory):
    """Emulator builds of copies with one barrier emptied (the repository is untouched)."""
    from cuda_emu.nnls_small_emu import build_nnls_emulator

    if compiler_unavailable_reason() is not None:
        pytest.skip(compiler_unavailable_reason())
    source = (KERNEL_DIR / ns.KERNEL_FILE).read_text()
    build = tmp_path_factory.mktemp("nnls_small_broken")
    libs = {}
    for label, line, empty in (
        ("stage", STAGE_BARRIER, "#define NNLS_STAGE_BARRIER()"),
        ("factor", FACTOR_SYNC, "#define NNLS_FACTOR_SYNC()"),
    ):
        assert source.count(line) == 1
        path = build / f"nnls_small_no_{label}.cu"
        path.write_text(source.replace(line, empty))
        libs[label] = build_nnls_emulator(build, kernel_file=path, name=f"lib_{label}.so").path
    return libs


# stage: thread 32 (lane 0 of warp 1, which has no column) sleeps before staging its share
#        of A; warp 0 solves its column meanwhile.
# factor: lane 0 sleeps after every barrier: the other lanes update the factor's trailing
#        rows with entries of column t it has not scaled yet.
PLANTED = {
    "stage": dict(warps=2, thread=32, us=400_000),
    "factor": dict(warps=1, thread=0, us=3000),
}


@needs_cxx
@pytest.mark.parametrize("label", list(PLANTED))
def test_missing_barrier_is_caught(broken, nnls_emu, tmp_path, label):
    rng = np.random.default_rng(21)
    c, b = problem(rng, "nonneg_data", 8, 1)
    a, r = least_squares(c, b)
    good = run_isolated(tmp_path, nnls_emu.path, a, r, **PLANTED[label])
    assert good is not None, "the intact kernel hung under the same schedule"
    x_good, status_good = good
    assert status_good[0] == ns.CONVERGED and np.abs(objective_gaps(c, b, x_good)).max() < 1e-10
    bad = run_isolated(tmp_path, broken[label], a, r, **PLANTED[label])
    if bad is not None:  # wrong, or not converged
        x_bad, status_bad = bad
        wrong = not np.all(np.isfinite(x_bad)) or np.abs(objective_gaps(c, b, x_bad)).max() > 1e-6
        assert wrong or status_bad[0] != ns.CONVERGED, "the emulator missed the race"


# ------------------------------------------------------------------------------------
# on a GPU
# ------------------------------------------------------------------------------------

GPU_REASON = cuda_unavailable_reason()
needs_gpu = pytest.mark.skipif(GPU_REASON is not None, reason=f"no usable CUDA GPU: {GPU_REASON}")


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("kind", ["well", "rank_deficient", "duplicates", "nonneg_data"])
@pytest.mark.parametrize("n", [1, 5, 20, 64])
def test_gpu_matches_scipy(n, kind, dtype):
    import cupy

    rng = np.random.default_rng(n)
    ncols = 3000
    c, b = problem(rng, kind, n, ncols)
    a, r = least_squares(c, b, dtype)
    x, status, kkt = ns.nnls_small(cupy.asarray(a), cupy.asarray(r))
    x, status, kkt = cupy.asnumpy(x), cupy.asnumpy(status), cupy.asnumpy(kkt)
    # scipy on a sample of the columns; status and KKT on all of them
    cols = rng.choice(ncols, size=60, replace=False)
    check_solution(c, b[:, cols], x[:, cols], status[cols], kkt[cols], dtype, a, r[:, cols])
    assert np.all(status == ns.CONVERGED) and np.all(kkt <= KKT[np.dtype(dtype).type])


@pytest.mark.gpu
@needs_gpu
def test_gpu_warm_start_and_strides():
    import cupy

    rng = np.random.default_rng(4)
    c, b = problem(rng, "well", 30, 500)
    a, r = least_squares(c, b)
    x, status, _ = ns.nnls_small(cupy.asarray(a), cupy.asarray(r))
    x2, status2, kkt2 = ns.nnls_small(cupy.asarray(a), cupy.asfortranarray(cupy.asarray(r)), x0=x)
    assert np.all(cupy.asnumpy(status) == 0) and np.all(cupy.asnumpy(status2) == 0)
    np.testing.assert_allclose(cupy.asnumpy(x2), cupy.asnumpy(x), rtol=1e-9, atol=1e-12)
    assert float(kkt2.max()) <= 1e-12
