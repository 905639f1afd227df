"""Shared helpers for the test suite: random problems with a known structure."""

from __future__ import annotations

import numpy as np
import pytest


def random_psd(rng, n, *, rank=None, dtype=np.float64):
    """A = C'C for a random C with ``rank`` rows (full rank when rank >= n)."""
    rows = n + 5 if rank is None else rank
    c = rng.normal(size=(rows, n))
    return (c.T @ c / rows).astype(dtype)


def objective(a, r, x, penalty):
    """F(X) = 1/2 tr(X'AX) + tr(X'R) + sum h(X), computed directly in float64."""
    a = np.asarray(a, dtype=np.float64)
    x = np.asarray(x, dtype=np.float64)
    r = np.asarray(r, dtype=np.float64)
    return float(0.5 * np.sum(x * (a @ x)) + np.sum(x * r) + np.sum(penalty.value(x)))


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture(scope="session")
def emu(tmp_path_factory):
    """The emulated CUDA kernels of the repository (tests/cuda_emu), built once per test
    session, or a skip where no C++ compiler is found."""
    from cuda_emu.harness import build_emulator, compiler_unavailable_reason

    reason = compiler_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    return build_emulator(tmp_path_factory.mktemp("cuda_emu"))


# -- the extended set -------------------------------------------------------------------
#
# The README's test command (python -m pytest -n auto) leaves out the tests marked ``slow``
# (pyproject.toml's addopts); CI runs them next (python -m pytest -m slow).  They are listed
# here, in one place, by node-id prefix, each with why it is long: cross-checks that need
# a cluster, a compiler, a process pool or a large problem.  Every behaviour they check
# has a quick test in the default set as well.
SLOW = {
    "tests/test_dask.py": "a Dask cluster per test (the extra's own suite)",
    "tests/test_cuda_emulated.py": "builds and runs the C++ emulator of the CUDA kernels",
    "tests/test_cuda_nnls_small.py": "builds the emulator of the per-column CUDA kernel",
    "tests/test_cuda_compile.py": "NVRTC for every kernel, two architectures",
    "tests/test_sweep_team.py::test_team_sweeps_equal": "every penalty x dtype x layout",
    "tests/test_sweep_team.py::test_many_tiny_ranges": "contention stress of the work word",
    "tests/test_mutants_api.py::test_psd_test_runs_at_any_n": "a PSD test at n = 2000",
    "tests/test_mutants_api.py::test_baselines_skip_the_psd_test": "the baselines at n > 1000",
    "tests/test_logistic_estimator.py::test_sparse_input_and_penalties": "every penalty, sparse",
    "tests/test_nmf.py::test_planted_low_rank_is_recovered[cgd]": "the slowest NMF solver",
    "tests/test_nmf.py::test_every_solver_lowers_objective_and_stays_nonnegative[cgd]": "cgd",
    "tests/test_newton_host.py::test_float32_matches_float64": "two dtypes, compiled twice",
    "tests/test_newton_host.py::test_compiled_road_reaches_the_numpy_loops_objective[sparse": (
        "the NumPy reference loop on a sparse Poisson problem"
    ),
    "tests/test_newton_host.py::test_an_extrapolation_that_raises": "a long Newton run",
    "tests/test_newton.py::test_float32_stays_float32": "every loss compiled for float32",
    "tests/test_newton.py::test_objective_never_increases[poisson": "Poisson, every penalty",
    "tests/test_newton.py::test_poisson_matches_sklearn": "scikit-learn's lbfgs to 1e-10",
    "tests/test_newton.py::test_intercept_is_not_penalised_closed_form": "a long Newton run",
    "tests/test_newton.py::test_l1_logistic_with_intercept_matches_skglm": "skglm to 1e-10",
    "tests/test_cpu_runtime.py::test_head_start_keeps_its_measurement": "timed thread runs",
    "tests/test_cpu_runtime.py::test_one_thread_and_several_threads_agree": "both thread paths",
    "tests/test_column_blocks.py::test_calls_from_a_process_pool": "spawns processes",
    "tests/test_column_blocks.py::test_calls_from_joblib_workers": "spawns joblib workers",
    "tests/test_column_blocks.py::test_block_size_does_not_change_the_answer": (
        "every penalty x dtype, cut into one-column blocks"
    ),
    "tests/test_design_form.py::test_a_sparse_design_with_1e5_columns": "1e5 columns, memory",
    "tests/test_nnls_columns.py::test_schur_solves_are_refined": "QR references, many columns",
    "tests/test_demo.py::test_demo_prints_the_headline_first_then_figure1": (
        "the whole demo (CI runs the demo itself first)"
    ),
    "tests/test_sparse_a.py::test_convex_penalties_match_the_dense_exact_answer": (
        "every convex penalty on a sparse A against the dense exact answer"
    ),
    "tests/test_sparse_large_face.py::test_projected_newton_reaches_the_reference": (
        "a face of 1000+ free variables per penalty"
    ),
    "tests/test_nmf_beta.py::test_divergence_is_scikit_learns": "every beta",
    "tests/test_robust_hypothesis.py": "hypothesis's random problems",
    "tests/test_conventions.py::test_msm_with_the_exact_finish_refuses_at_any_n": "n = 1200",
    "tests/test_l0_sweeps.py::test_l0_sweeps_cpu_threaded_ranges": "threaded ranges",
    "tests/test_benchopt_solvers.py::test_logreg_l1_solver_matches_sklearn": (
        "liblinear at tight tolerance on the benchmark's data"
    ),
    "tests/test_readme.py::test_readme_block_runs[docs/user_guide/dask.md": "a Dask cluster",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        node = item.nodeid
        if any(node.startswith(prefix) for prefix in SLOW):
            item.add_marker(pytest.mark.slow)
