"""Inputs real users pass (issue 12): never a silent wrong answer.

Array-likes, sparse matrices, indefinite A, extreme scales, verbose output, the exported
error and the demo's output folder.  The truth is SciPy (``optimize.nnls``), NumPy's
``linalg.solve`` and the closed-form scaling law of the problem: for s > 0,
``nnls(s C, s D)`` has the solution of ``nnls(C, D)`` and the objective ``s^2`` times its.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import scipy.optimize
import scipy.sparse as sp
from conftest import objective, random_psd

import msm_gpu as mg
from msm_gpu._input import problem
from msm_gpu.demo import cli

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def lsq():
    """A small NNLS instance and its SciPy solution (per column)."""
    rng = np.random.default_rng(7)
    c = rng.uniform(size=(30, 10))
    d = rng.uniform(size=(30, 3)) - 0.3
    x_ref = np.column_stack([scipy.optimize.nnls(c, d[:, j])[0] for j in range(d.shape[1])])
    f_ref = 0.5 * float(np.sum((c @ x_ref - d) ** 2))
    return c, d, x_ref, f_ref


@pytest.fixture(scope="module")
def quad():
    rng = np.random.default_rng(8)
    a = random_psd(rng, 8)
    r = rng.normal(size=(8, 2))
    return a, r, np.linalg.solve(a, -r)


# -- array-likes and sparse matrices: the same answer as the NumPy arrays ------------------

pytestmark = pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")

ARRAY_FORMS = {
    "list": lambda x: x.tolist(),
    "tuple": lambda x: tuple(map(tuple, x)) if x.ndim == 2 else tuple(x),
    "memoryview": lambda x: memoryview(np.ascontiguousarray(x)),
    "np.matrix": lambda x: np.asmatrix(x) if x.ndim == 2 else x,
    "int list": lambda x: np.round(x * 10).astype(int).tolist(),
}


@pytest.mark.parametrize("form", sorted(ARRAY_FORMS))
def test_solve_accepts_array_likes(quad, form):
    a, r, _ = quad
    to = ARRAY_FORMS[form]
    a_in, r_in = to(a), to(r)
    want = mg.solve(np.asarray(a_in, dtype=float), np.asarray(r_in, dtype=float), tol=1e-12)
    res = mg.solve(a_in, r_in, tol=1e-12)
    assert type(res.x) is np.ndarray and res.x.shape == r.shape
    np.testing.assert_array_equal(res.x, want.x)
    truth = np.linalg.solve(np.asarray(a_in, dtype=float), -np.asarray(r_in, dtype=float))
    np.testing.assert_allclose(res.x, truth, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("form", sorted(set(ARRAY_FORMS) - {"int list"}))
def test_nnls_accepts_array_likes(lsq, form):
    c, d, x_ref, _ = lsq
    to = ARRAY_FORMS[form]
    res = mg.nnls(to(c), to(d), tol=1e-12, max_iter=20000)
    assert type(res.x) is np.ndarray and res.x.shape == x_ref.shape
    np.testing.assert_allclose(res.x, x_ref, atol=1e-8)
    one = mg.nnls(to(c), list(d[:, 0]), tol=1e-12, max_iter=20000)
    assert one.x.shape == (10,)
    np.testing.assert_allclose(one.x, x_ref[:, 0], atol=1e-8)


SPARSE_FORMS = [sp.csr_matrix, sp.csc_matrix, sp.coo_matrix, sp.lil_matrix, sp.csr_array]


@pytest.mark.parametrize("dtype", [np.float16, np.longdouble], ids=["float16", "longdouble"])
def test_float16_and_longdouble_inputs(lsq, quad, dtype):
    # the one-pass kernels of input_stats compile for float32/float64 only: other float
    # dtypes take the NumPy checks (working dtype float32 for float16 alone, else float64)
    c, d, x_ref, _ = lsq
    res = mg.nnls(c.astype(dtype), d.astype(dtype))
    assert res.x.dtype == (np.float32 if dtype == np.float16 else np.float64)
    # the answer of the data as rounded to dtype (SciPy on the same numbers)
    c_in, d_in = c.astype(dtype).astype(np.float64), d.astype(dtype).astype(np.float64)
    want = np.column_stack([scipy.optimize.nnls(c_in, d_in[:, j])[0] for j in range(d.shape[1])])
    np.testing.assert_allclose(res.x, want, atol=1e-5 if dtype == np.float16 else 1e-10)
    a, r, x_sol = quad
    for kwargs in ({"A": a.astype(dtype)}, {"R": r.astype(dtype)}, {"x0": np.ones_like(r, dtype)}):
        args = {"A": a, "R": r, **kwargs}
        res = mg.solve(args["A"], args["R"], x0=kwargs.get("x0"))
        assert res.converged and res.x.dtype == np.float64
        if "x0" in kwargs:  # the same problem as quad's, only the start differs
            np.testing.assert_allclose(res.x, x_sol, rtol=1e-5, atol=1e-8)
    bad = r.astype(dtype)
    bad[1, 1] = np.nan
    with pytest.raises(ValueError, match="R contains NaN or Inf"):
        mg.solve(a, bad)
    with pytest.raises(ValueError, match="x0 contains NaN or Inf"):
        mg.solve(a, r, x0=bad)
    bad_a = a.astype(dtype)
    bad_a[0, 0] = np.inf
    with pytest.raises(ValueError, match="A contains NaN or Inf"):
        mg.solve(bad_a, r)


@pytest.mark.parametrize("make", SPARSE_FORMS, ids=lambda f: f.__name__)
def test_nnls_and_least_squares_with_sparse_c_and_d(lsq, make):
    c, d, x_ref, f_ref = lsq
    cs = c * (np.random.default_rng(1).uniform(size=c.shape) < 0.5)  # really sparse
    x_sparse_ref = np.column_stack([scipy.optimize.nnls(cs, d[:, j])[0] for j in range(3)])
    before = make(cs).copy()
    c_in = make(cs)
    res = mg.nnls(c_in, d, tol=1e-12, max_iter=20000)
    np.testing.assert_allclose(res.x, x_sparse_ref, atol=1e-8)
    np.testing.assert_allclose(res.fun, 0.5 * np.sum((cs @ x_sparse_ref - d) ** 2), rtol=1e-9)
    assert (c_in != before).nnz == 0  # never modified
    # sparse D too, and a sparse x0
    res2 = mg.nnls(c_in, make(d), x0=make(np.ones((10, 3))), tol=1e-12, max_iter=20000)
    np.testing.assert_allclose(res2.x, x_sparse_ref, atol=1e-8)
    # least squares with no penalty: the normal equations
    res3 = mg.least_squares(c_in, d, tol=1e-13, max_iter=100000)
    np.testing.assert_allclose(res3.x, np.linalg.lstsq(cs, d, rcond=None)[0], atol=1e-7)


def test_solve_with_sparse_a_and_r(quad):
    a, r, x_true = quad
    res = mg.solve(sp.csr_matrix(a), sp.csc_matrix(r), tol=1e-12)
    np.testing.assert_allclose(res.x, x_true, rtol=1e-8, atol=1e-10)


def test_sparse_too_large_to_densify_is_a_clear_error(lsq, monkeypatch):
    c, d, _, _ = lsq
    monkeypatch.setattr(problem, "DENSE_LIMIT_BYTES", 10 * 10 * 8 - 1)
    with pytest.raises(ValueError, match=r"C: A = C'C would be a dense 10 x 10"):
        mg.nnls(sp.csr_matrix(c), d)
    with pytest.raises(ValueError, match=r"A: A would be a dense 10 x 10"):
        mg.solve(sp.csr_matrix(c.T @ c), d[:10])
    mg.nnls(c, d, max_iter=5)  # dense input is not limited


# -- extreme scales ------------------------------------------------------------------------

SCALES64 = [10.0**k for k in range(-150, 151, 30)] + [2.0**-480, 2.0**470]


@pytest.mark.parametrize("s", SCALES64)
def test_nnls_is_scale_invariant_float64(lsq, s):
    c, d, x_ref, f_ref = lsq
    res = mg.nnls(c * s, d * s, tol=1e-12, max_iter=20000)
    assert res.converged
    np.testing.assert_allclose(res.x, x_ref, atol=1e-8)
    np.testing.assert_allclose(res.fun, f_ref * s * s, rtol=1e-9)
    np.testing.assert_allclose(res.objective[-1], f_ref * s * s, rtol=1e-9)


@pytest.mark.parametrize("k", [-480, -97, 1, 13, 470])
def test_power_of_two_scales_give_identical_iterates(lsq, k):
    c, d, _, _ = lsq
    base = mg.nnls(c, d, tol=1e-10, max_iter=500)
    s = 2.0**k
    res = mg.nnls(c * s, d * s, tol=1e-10, max_iter=500)
    np.testing.assert_array_equal(res.x, base.x)
    assert res.n_iter == base.n_iter
    # solve: A -> s A, R -> t R gives x -> (t / s) x, exactly for powers of two
    a, r = c.T @ c, -c.T @ d
    ref = mg.solve(a, r, mg.L1(0.5), tol=1e-10, max_iter=500)
    t = 2.0 ** (k // 3)
    res = mg.solve(a * s, r * t, mg.L1(0.5 * t), tol=1e-10, max_iter=500)
    np.testing.assert_array_equal(res.x, ref.x * (t / s))


@pytest.mark.parametrize("s", [1e-30, 1e-20, 1e-10, 1.0, 1e10, 1e20, 1e30])
def test_nnls_is_scale_invariant_float32(lsq, s):
    c, d, _, _ = lsq
    c32, d32 = c.astype(np.float32), d.astype(np.float32)
    base = mg.nnls(c32, d32, tol=1e-5, max_iter=5000)
    res = mg.nnls((c * s).astype(np.float32), (d * s).astype(np.float32), tol=1e-5, max_iter=5000)
    assert res.x.dtype == np.float32 and res.converged
    np.testing.assert_allclose(res.x, base.x, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(res.fun, base.fun * s * s, rtol=1e-4)


def test_scaled_l1_least_squares_matches_unscaled(lsq):
    # 1/2||sC x - sD||^2 + s^2 lam |x| = s^2 (1/2||Cx - D||^2 + lam |x|)
    c, d, _, _ = lsq
    base = mg.least_squares(c, d, mg.L1(0.2), tol=1e-12, max_iter=20000)
    for s in (1e-120, 1e-7, 1e90):
        res = mg.least_squares(c * s, d * s, mg.L1(0.2 * s * s), tol=1e-12, max_iter=20000)
        np.testing.assert_allclose(res.x, base.x, atol=1e-9)
        np.testing.assert_allclose(res.fun, base.fun * s * s, rtol=1e-9)


@pytest.mark.parametrize("s", [1e-100, 1.0, 1e100])
def test_theta_is_relative_to_the_mean_diagonal(quad, s):
    a, r, _ = quad
    res = mg.solve(a * s, r, theta=0.3, max_iter=3)
    assert res.info["theta"] == 0.3
    assert res.info["theta_abs"] == pytest.approx(0.3 * np.mean(np.diag(a)) * s, rel=1e-12)
    # delta of Theorem 1 with that theta, in A's units
    delta = 2 * res.info["theta_abs"] + np.min(np.diag(a)) * s
    assert res.info["delta"] == pytest.approx(delta, rel=1e-12)


def test_tiny_scale_is_not_stopped_early_by_absolute_theta(lsq):
    # before: theta = 0.01 dominated B = diag(A) + theta at s = 1e-3 and the absolute
    # stopping rule declared convergence after one iteration, far from the solution
    c, d, x_ref, _ = lsq
    res = mg.nnls(c * 1e-3, d * 1e-3, finish=None)  # the MSM stopping rule itself
    assert res.converged and res.n_iter > 5
    np.testing.assert_allclose(res.x, x_ref, atol=1e-4)


# -- the table of every input of the issue -------------------------------------------------

C0 = np.random.default_rng(3).uniform(size=(20, 6))
D0 = np.random.default_rng(4).uniform(size=(20, 2))
INDEFINITE = np.array([[1.0, 2.0], [2.0, 1.0]])


def _expect_not_converged_non_psd(res):
    assert not res.converged and not res.converged_columns.all()
    assert "not positive semidefinite" in res.message


ISSUE_INPUTS = [
    # (id, call, expected: exception type and message, or a check of the result)
    (
        "indefinite A",
        lambda: mg.solve(INDEFINITE, np.array([-1.0, -1.0])),
        (ValueError, r"A is not positive semidefinite: its smallest eigenvalue is -1 "),
    ),
    (
        "indefinite A, check off",
        lambda: mg.solve(INDEFINITE, np.array([-1.0, -1.0]), check_convergence=False),
        _expect_not_converged_non_psd,
    ),
    (
        "indefinite A, check off, no objective",
        lambda: mg.solve(
            INDEFINITE, np.array([-1.0, -1.0]), check_convergence=False, record_objective=False
        ),
        _expect_not_converged_non_psd,
    ),
    (
        "indefinite A, baseline",
        lambda: mg.solve(INDEFINITE, np.array([-1.0, -1.0]), method="pgm"),
        (ValueError, "not positive semidefinite"),
    ),
    (
        "indefinite A, float32",
        lambda: mg.solve(INDEFINITE.astype(np.float32), np.array([-1.0, -1.0], np.float32)),
        (ValueError, "not positive semidefinite"),
    ),
    (
        "zero diagonal, nonzero row",
        lambda: mg.solve(np.array([[0.0, 1.0], [1.0, 1.0]]), np.array([1.0, 1.0])),
        (ValueError, "not positive semidefinite"),
    ),
    ("overflow C, D", lambda: mg.nnls(C0 * 1e200, D0 * 1e200), (ValueError, r"D: the objective")),
    ("overflow D", lambda: mg.nnls(C0, D0 * 1e200), (ValueError, r"D: the objective.*overflows")),
    (
        "x out of range",
        lambda: mg.nnls(C0 * 1e-200, D0 * 1e150),
        (ValueError, r"solution's scale.*float64"),
    ),
    (
        "x out of float32 range",
        lambda: mg.nnls(
            (C0 * 1e-25).astype(np.float32), (D0 * 1e25).astype(np.float32), max_iter=5
        ),
        (ValueError, r"solution's scale.*float32"),
    ),
    (
        "solve: objective out of range",
        lambda: mg.solve(np.eye(2) * 1e-300, np.array([1e200, 1.0])),
        (ValueError, r"objective's scale"),
    ),
    ("ragged list", lambda: mg.solve([[1.0, 0.0], [0.0]], [1.0, 1.0]), (TypeError, "^A must be")),
    ("string list", lambda: mg.nnls([["a", "b"]], ["c"]), (TypeError, "C must hold real")),
    ("complex D", lambda: mg.nnls(C0, D0 + 1j), (TypeError, "D must hold real numbers")),
    ("object R", lambda: mg.solve(np.eye(2), np.array([1, None])), (TypeError, "R must hold")),
    (
        "masked array",
        lambda: mg.nnls(np.ma.masked_greater(C0, 0.9), D0),
        (TypeError, "C is a masked array"),
    ),
    ("scalar R", lambda: mg.solve(np.eye(2), 3.0), (ValueError, "R must be 1-D or 2-D")),
    (
        "sparse complex C",
        lambda: mg.nnls(sp.csr_matrix(C0 + 1j), D0),
        (TypeError, "C must hold real numbers"),
    ),
    (
        "sparse NaN A",
        lambda: mg.solve(sp.csr_matrix(np.array([[1.0, np.nan], [np.nan, 1.0]])), [1.0, 1.0]),
        (ValueError, "A contains NaN or Inf"),
    ),
    (
        "sparse asymmetric A",
        lambda: mg.solve(sp.csr_matrix(np.array([[1.0, 0.5], [0.0, 1.0]])), [1.0, 1.0]),
        (ValueError, "A must be symmetric"),
    ),
    ("verbose is a keyword", lambda: mg.nnls(C0, D0, verbose=False), lambda res: res.converged),
]


@pytest.mark.parametrize(
    ("call", "expected"), [c[1:] for c in ISSUE_INPUTS], ids=[c[0] for c in ISSUE_INPUTS]
)
def test_issue_inputs(call, expected):
    if isinstance(expected, tuple):
        exc, pattern = expected
        with pytest.raises(exc, match=pattern):
            with np.errstate(all="ignore"):
                call()
    else:
        with np.errstate(all="ignore"):
            res = call()
        assert expected(res) is not False


def test_indefinite_a_above_the_psd_test_size_is_caught_while_running(monkeypatch):
    monkeypatch.setattr(problem, "PSD_CHECK_MAX_N", 1)
    rng = np.random.default_rng(0)
    q, _ = np.linalg.qr(rng.normal(size=(30, 30)))
    a = (q * np.linspace(-0.5, 2.0, 30)) @ q.T
    a = 0.5 * (a + a.T)
    for method in ("msm", "pgm", "apg"):
        with np.errstate(all="ignore"):
            res = mg.solve(a, rng.normal(size=(30, 2)), method=method, max_iter=100000, finish=None)
        _expect_not_converged_non_psd(res)
    # the exact finish needs A PSD: with it (the default) the test runs at any n
    with pytest.raises(ValueError, match="not positive semidefinite"):
        mg.solve(a, rng.normal(size=(30, 2)))
    # a bounded nonconvex problem (box) may still be run and converge to finite values
    with np.errstate(all="ignore"):
        res = mg.solve(a, rng.normal(size=30), mg.Box(-1, 1), max_iter=5000, finish=None)
    assert np.all(np.isfinite(res.x)) and np.isfinite(res.fun)


@pytest.mark.parametrize("lam_min", [-1e-3, -1e-6])
def test_psd_test_catches_small_negative_eigenvalues(lam_min):
    rng = np.random.default_rng(1)
    q, _ = np.linalg.qr(rng.normal(size=(40, 40)))
    evals = np.linspace(0.0, 1.0, 40)
    evals[0] = lam_min
    a = (q * evals) @ q.T
    a = 0.5 * (a + a.T)
    with pytest.raises(ValueError, match="not positive semidefinite") as info:
        mg.solve(a, np.ones(40))
    low = float(re.search(r"smallest eigenvalue is (\S+) ", str(info.value)).group(1))
    assert low == pytest.approx(lam_min, rel=1e-6, abs=1e-12)
    evals[0] = -lam_min  # the PSD neighbour passes
    mg.solve((q * evals) @ q.T, np.ones(40), max_iter=3)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("m", "n"), [(5, 40), (40, 40), (200, 120)])
def test_psd_test_accepts_rank_deficient_gram_matrices(dtype, m, n):
    rng = np.random.default_rng(m + n)
    c = rng.uniform(size=(m, n)).astype(dtype)
    a = c.T @ c
    # the paper's MSM (finish=None) runs its 3 sweeps: no ValueError from the PSD test
    res = mg.solve(
        0.5 * (a + a.T), -c.T @ rng.uniform(size=(m, 2)).astype(dtype), max_iter=3, finish=None
    )
    assert res.n_iter == 3


def test_never_converged_with_non_finite_values():
    # the loop's last line of defence: a column whose x or F is not finite at the end
    with np.errstate(all="ignore"):
        res = mg.solve(INDEFINITE, [-1.0, -1.0], check_convergence=False, tol=1.0)
    assert not res.converged and not res.converged_columns.any()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bad", [np.inf, np.nan])
def test_user_outcome_never_calls_a_non_finite_x_converged(dtype, bad):
    # the last test before the result: x in the user's units (here an entry the loop
    # would have refused, planted to reach the check), C- and Fortran-ordered and strided
    from msm_gpu.solvers.loop import LoopOutcome

    a = np.eye(3, dtype=dtype)
    prep = problem.prepare_solve(a, -np.ones((3, 4), dtype=dtype), mg.NonNeg(), None, "cpu")
    for layout in ("C", "F", "strided"):
        x = (
            np.ones((3, 8), dtype=dtype)[:, ::2]
            if layout == "strided"
            else np.ones((3, 4), dtype=dtype, order=layout)
        )
        x[1, 2] = bad
        out = LoopOutcome(
            x=x,
            fun_columns=np.zeros(4),
            fun=0.0,
            n_iter=1,
            converged_columns=np.ones(4, dtype=bool),
            n_iter_columns=np.ones(4, dtype=int),
            message="converged",
            objective=np.zeros(1),
            timings={},
            info={},
            diverged=False,
        )
        user = problem.user_outcome(prep, out)
        assert not user["converged_columns"].any(), layout
        assert "x is not finite" in user["message"], layout
        x[1, 2] = 1.0
        user = problem.user_outcome(prep, out)
        assert user["converged_columns"].all(), layout


# -- verbose, the exported error, the demo's folder, the design notes ----------------------


@pytest.mark.parametrize("entry", ["solve", "nnls", "least_squares"])
def test_verbose_shows_a_progress_bar(lsq, entry, capsys):
    c, d, _, _ = lsq
    plain = {"verbose": True, "max_iter": 7, "tol": 0, "finish": None}  # the plain loop
    calls = {
        "solve": lambda: mg.solve(c.T @ c, -c.T @ d, mg.NonNeg(), **plain),
        "nnls": lambda: mg.nnls(c, d, **plain),
        "least_squares": lambda: mg.least_squares(c, d, **plain),
    }
    res = calls[entry]()
    err = capsys.readouterr().err
    assert res.n_iter == 7
    assert "MSM" in err and "7/7" in err and "objective=" in err
    mg.nnls(c, d, max_iter=7)
    assert capsys.readouterr().err == ""


def test_callback_sees_user_units(lsq):
    c, d, _, _ = lsq
    seen = []
    s = 1e100
    res = mg.nnls(c * s, d * s, tol=0, max_iter=4, callback=lambda i: seen.append(i), finish=None)
    assert [i.fun for i in seen] == pytest.approx(list(res.objective[1:]), rel=1e-12)
    x = seen[-1].x
    np.testing.assert_allclose(res.fun, 0.5 * np.sum(((c * s) @ x - d * s) ** 2), rtol=1e-9)


def test_backend_unavailable_error_is_exported():
    from msm_gpu.backends import BackendUnavailableError, cuda_unavailable_reason

    assert mg.BackendUnavailableError is BackendUnavailableError
    assert "BackendUnavailableError" in mg.__all__
    if cuda_unavailable_reason() is not None:
        with pytest.raises(mg.BackendUnavailableError, match="backend='cuda' cannot run"):
            mg.solve(np.eye(2), np.ones(2), backend="cuda")


def test_demo_writes_into_a_new_folder_by_default(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    argv = ["demo", "--size", "10", "20", "--iters", "3", "--nnls-size", "0", "0", "0"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert not (tmp_path / "figure1.png").exists()
    path = Path(re.search(r"wrote (\S+figure1\.png)", out).group(1))
    assert path.exists() and path.parent.name.startswith("msm-gpu-demo-")
    assert path.parent.parent == tmp_path / "tmp"
    # --out is created when missing
    assert cli.main([*argv, "--out", str(tmp_path / "a" / "b")]) == 0
    assert (tmp_path / "a" / "b" / "figure1.png").exists()


def test_demo_without_the_backend_is_a_clean_error(monkeypatch, capsys):
    # `msm-gpu demo --backend cuda` where CUDA cannot run: the reason on stderr, no
    # traceback, and an exit status of its own (3), unlike a usage error (2)
    import msm_gpu.backends as backends

    monkeypatch.setattr(backends, "cuda_unavailable_reason", lambda: "no device (test)")
    argv = ["demo", "--backend", "cuda", "--size", "5", "5", "--iters", "2", "--no-plot"]
    assert cli.main(argv) == cli.EXIT_BACKEND_UNAVAILABLE == 3
    err = capsys.readouterr().err
    assert "backend='cuda' cannot run here: no device (test)" in err
    assert "Traceback" not in err
    assert cli.main(["demo", "--iters", "0"]) == 2
    with pytest.raises(SystemExit) as usage:
        cli.main(["demo", "--backend", "tpu"])
    assert usage.value.code == 2


def test_design_notes_cited_by_the_code_exist():
    design = (ROOT / "docs" / "design.md").read_text()
    headings = set(re.findall(r"^#+ (.+)$", design, flags=re.M))
    sources = [*ROOT.glob("msm_gpu/**/*.py"), *ROOT.glob("kernels/*.cu*"), ROOT / "README.md"]
    cited = 0
    for path in sources:
        text = path.read_text()
        missing = "DESIGN.md"  # cited-paths: ignore (the name this test looks for)
        assert missing not in text, f"{path} cites {missing}, which is not in the repository"
        for section in re.findall(r'docs/design\.md, "([^"]+)"', text):
            assert section in headings, f"{path} cites a missing section {section!r}"
            cited += 1
    assert cited > 0


def test_objective_matches_the_direct_formula_at_extreme_scale(quad):
    a, r, _ = quad
    for sa, sr in ((1e-200, 1e-190), (1e150, 1e140), (1e-100, 1e50)):
        res = mg.solve(a * sa, r * sr, mg.NonNeg(), tol=1e-12, max_iter=5000)
        xs = sr / sa
        f0 = objective(a, r, res.x / xs, mg.NonNeg())
        assert res.fun == pytest.approx(f0 * sr * sr / sa, rel=1e-9)


# -- CuPy sparse on the GPU (skipped without one) ------------------------------------------


def _cuda_reason():
    from msm_gpu.backends import cuda_unavailable_reason

    return cuda_unavailable_reason()


@pytest.mark.gpu
@pytest.mark.skipif(_cuda_reason() is not None, reason="needs a usable CUDA GPU and CuPy")
def test_cupy_sparse_c_and_a_on_the_gpu(lsq):
    import cupy
    import cupyx.scipy.sparse as cusparse

    c, d, x_ref, f_ref = lsq
    res = mg.nnls(cusparse.csr_matrix(cupy.asarray(c)), cupy.asarray(d), tol=1e-12, max_iter=20000)
    assert res.backend == "cuda" and isinstance(res.x, cupy.ndarray)
    np.testing.assert_allclose(res.x.get(), x_ref, atol=1e-8)
    np.testing.assert_allclose(res.fun, f_ref, rtol=1e-9)
    # SciPy sparse input on the CUDA backend gives NumPy out
    res = mg.nnls(sp.csr_matrix(c), d, backend="cuda", tol=1e-12, max_iter=20000)
    assert isinstance(res.x, np.ndarray)
    np.testing.assert_allclose(res.x, x_ref, atol=1e-8)
    a = c.T @ c
    res = mg.solve(cusparse.csr_matrix(cupy.asarray(a)), cupy.asarray(-c.T @ d), mg.NonNeg())
    np.testing.assert_allclose(res.x.get(), x_ref, atol=1e-5)
    with pytest.raises(ValueError, match="not positive semidefinite"):
        mg.solve(cupy.asarray(INDEFINITE), cupy.asarray([-1.0, -1.0]))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_power_of_two_rescaling_is_bit_exact(dtype):
    # scaling.ldexp multiplies by 2^e (faster than the ufunc): the same bits as np.ldexp,
    # subnormal and overflowing results included
    from msm_gpu._input.scaling import ldexp

    rng = np.random.default_rng(0)
    x = (rng.standard_normal(5000) * np.exp(rng.uniform(-40, 40, 5000))).astype(dtype)
    x[:3] = [0.0, np.finfo(dtype).tiny, np.finfo(dtype).max]
    with np.errstate(over="ignore", under="ignore"):
        for e in (-1074, -1022, -500, -149, -126, -60, -1, 0, 1, 60, 127, 500, 1023, 1100):
            got = ldexp(x, e)
            assert got.dtype == dtype and got is not x
            np.testing.assert_array_equal(got, np.ldexp(x, e))


@pytest.mark.parametrize("source", [np.float64, np.float32, np.int64])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("order", ["C", "F"])
def test_scaled_dense_copy_is_the_cast_then_the_power_of_two(source, dtype, order):
    # one pass (cast and scale) must give the bits of a cast copy times 2^e, in a new
    # array of the layout of x, x untouched
    from msm_gpu._input.scaling import scaled_dense_copy
    from msm_gpu.backends import get_backend

    be = get_backend("cpu")
    rng = np.random.default_rng(1)
    x = np.asarray(rng.standard_normal((40, 30)) * 1e3, dtype=source, order=order)
    before = x.copy()
    with np.errstate(over="ignore", under="ignore"):
        for e in (-1100, -200, -149, -3, 0, 5, 127, 200, 1100):
            got = scaled_dense_copy(be, x, dtype, e)
            want = np.ldexp(np.asarray(x, dtype=dtype), e)
            assert got.dtype == dtype and not np.shares_memory(got, x)
            assert got.flags.f_contiguous == (order == "F")
            np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(x, before)


@pytest.mark.parametrize("source", [np.float64, np.float32, np.int64])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", [(40, 30), (130, 70), (1, 9), (9, 1), (65, 129)])
def test_column_major_scaled_copy_of_a_row_major_array(source, dtype, shape):
    # order="F" of a C-ordered x (the design form's copy of C; float x turns in blocks):
    # the bits of the cast copy times 2^e, column-major, x untouched, the edges of the
    # blocks included (shapes that are not multiples of the block)
    from msm_gpu._input.scaling import scaled_dense_copy
    from msm_gpu.backends import get_backend

    be = get_backend("cpu")
    rng = np.random.default_rng(2)
    x = np.asarray(rng.standard_normal(shape) * np.exp(rng.uniform(-30, 30, shape)), dtype=source)
    if source is not np.int64:
        x.flat[:2] = [np.finfo(source).tiny, -np.finfo(source).max]
    before = x.copy()
    with np.errstate(over="ignore", under="ignore"):
        for e in (-1100, -1060, -200, -149, -130, -3, 0, 5, 127, 200, 1100):
            want = np.ldexp(np.asarray(x, dtype=dtype), e)
            kept = []  # the retained copies alive at once: each in its own memory
            for retained in (False, True, True):
                got = scaled_dense_copy(be, x, dtype, e, order="F", retained=retained)
                assert got.dtype == dtype and not np.shares_memory(got, x)
                assert not any(np.shares_memory(got, other) for other in kept)
                info = np.finfo(dtype)
                if info.minexp - info.nmant <= e < info.maxexp:  # 2^e a number of dtype
                    assert got.flags.f_contiguous
                np.testing.assert_array_equal(got, want)
                kept.append(got)
    np.testing.assert_array_equal(x, before)


@pytest.mark.parametrize("fmt", ["csr", "csc"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_scaled_sparse_copy_is_the_cast_then_the_power_of_two(fmt, dtype):
    # the entries cast and scaled in one pass; index arrays copied (sorting the copy never
    # reorders the user's), the format and SciPy's sortedness flag kept
    import scipy.sparse

    from msm_gpu._input.scaling import scaled_sparse_copy

    x = scipy.sparse.random(30, 40, density=0.2, format=fmt, random_state=2) * 1e3
    # the same matrix with each row's (column's) entries stored in reverse order
    ptr, idx, val = x.indptr, x.indices.copy(), x.data.copy()
    for k in range(len(ptr) - 1):
        idx[ptr[k] : ptr[k + 1]] = idx[ptr[k] : ptr[k + 1]][::-1]
        val[ptr[k] : ptr[k + 1]] = val[ptr[k] : ptr[k + 1]][::-1]
    unsorted = type(x)((val, idx, ptr.copy()), shape=x.shape)
    for a in (x, unsorted):
        before = (a.data.copy(), a.indices.copy(), a.indptr.copy())
        with np.errstate(over="ignore", under="ignore"):
            for e in (-1100, -149, -3, 0, 5, 200):
                got = scaled_sparse_copy(a, dtype, e)
                assert got.format == fmt and got.dtype == dtype
                assert not np.shares_memory(got.indices, a.indices)
                assert got.has_sorted_indices == a.has_sorted_indices
                want = np.ldexp(a.toarray().astype(dtype), e)
                np.testing.assert_array_equal(got.toarray(), want)
                got.sort_indices()
                np.testing.assert_array_equal(got.toarray(), want)
        for kept, was in zip((a.data, a.indices, a.indptr), before, strict=True):
            np.testing.assert_array_equal(kept, was)
    assert not unsorted.has_sorted_indices


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_one_pass_stats_of_d_match_numpy(rng, dtype):
    from msm_gpu._input.stats import host_float_stats

    d = rng.normal(size=(40, 30)).astype(dtype) * 1e3
    for x in (d, d[::2, 3:], d.T, d[:, 0]):  # contiguous, strided, transposed, 1-D
        finite, biggest, squares = host_float_stats(x)
        x64 = x.astype(np.float64)
        assert finite and biggest == np.abs(x64).max()
        assert squares == pytest.approx(np.sum(x64**2), rel=1e-12)
    for bad in (np.inf, -np.inf, np.nan):
        e = d.copy()
        e[3, 4] = bad
        assert host_float_stats(e)[0] is False
        with pytest.raises(ValueError, match="D contains NaN or Inf"):
            mg.nnls(rng.uniform(size=(40, 5)), e)
    assert host_float_stats(np.ones((3, 3), dtype=np.int64)) is None
    assert host_float_stats([1.0, 2.0]) is None


@pytest.mark.parametrize(
    "penalty",
    [mg.NonNeg(), mg.Zero(), mg.Box(-2.5, 3.0), mg.L1(0.7), mg.NonNegL1(1.5), mg.L0(0.3, lb=0)],
    ids=repr,
)
def test_scalar_penalty_scaling_matches_the_numpy_path(penalty):
    # scaled_penalty's Python-float path for scalar parameters must give the numbers and
    # errors of its NumPy path (taken here with one-row arrays), extreme exponents included
    import copy

    from msm_gpu._input.scaling import scaled_penalty

    as_rows = copy.copy(penalty)
    for name in ("lam", "lb", "ub"):
        setattr(as_rows, name, np.array([getattr(penalty, name)], dtype=np.float64))
    for x_exp in (-1100, -1030, -300, -7, 0, 3, 400, 1030, 1100):
        for f_exp in (-1100, -1020, -9, 0, 2, 1020, 1100):
            outcomes = []
            for p in (penalty, as_rows):
                try:
                    got = scaled_penalty(p, x_exp, f_exp)
                except ValueError as exc:
                    outcomes.append(str(exc).split("(")[0])
                else:
                    outcomes.append(
                        tuple(float(np.ravel(getattr(got, k))[0]) for k in ("lam", "lb", "ub"))
                    )
            assert outcomes[0] == outcomes[1], (x_exp, f_exp)
    assert penalty.lb == as_rows.lb[0] and penalty.lam == as_rows.lam[0]  # untouched
