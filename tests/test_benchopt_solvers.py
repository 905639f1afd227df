"""The benchopt solver files (benchmarks/benchopt/*/solver_msm_gpu.py) on tiny instances.

Each file is loaded as benchopt loads it (a module holding ``class Solver``) and driven
through benchopt's solver API (``get_instance``, ``skip``, ``set_objective``,
``warm_up``, ``run``, ``get_result``) without benchopt's runner.  The result is scored
with the benchmark's own objective (restated here from its objective.py) and checked
against an independent solution: SciPy's ``nnls``, scikit-learn's ``Lasso`` /
``lasso_path`` / ``LogisticRegression`` at tight tolerances, scikit-learn's ``NMF``.

Every test runs twice: with benchopt (skipped where it is not installed) and with a tiny
stand-in for the few names the files import from it, so the files are checked where
benchopt is absent too.
"""

from __future__ import annotations

import importlib.util
import sys
import types
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import nnls as scipy_nnls
from sklearn.decomposition import NMF as SkNMF
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import Lasso, LogisticRegression, lasso_path

import msm_gpu as mg

SOLVERS = Path(__file__).resolve().parents[1] / "benchmarks" / "benchopt"
INITIAL_TOL = 3e38  # benchopt's first tolerance (stopping_criterion.INFINITY)


# -- a stand-in for the names the solver files import from benchopt ---------------------
class _StandInSolver:
    """benchopt.BaseSolver's calling conventions, nothing else."""

    parameters: dict = {}
    sampling_strategy = None

    @classmethod
    def get_instance(cls, **parameters):
        obj = cls()
        first = {name: values[0] for name, values in cls.parameters.items()}
        for name, value in {**first, **parameters}.items():
            setattr(obj, name, value)
        return obj

    def skip(self, **objective):
        return False, None

    def warm_up(self):
        pass

    def run_once(self, stop_val=1):
        self.run(stop_val)


class _StandInImportContext:
    """benchopt.safe_import_context: an ImportError inside is recorded, not raised."""

    failed_import = False

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None and issubclass(exc_type, ImportError):
            self.failed_import = True
            return True
        return False


class _StandInCriterion:
    def __init__(self, strategy=None, key_to_monitor="value", **kwargs):
        self.strategy = strategy
        self.key_to_monitor = key_to_monitor


def _stand_in_modules():
    benchopt = types.ModuleType("benchopt")
    benchopt.BaseSolver = _StandInSolver
    benchopt.safe_import_context = _StandInImportContext
    criterion = types.ModuleType("benchopt.stopping_criterion")
    criterion.SufficientProgressCriterion = _StandInCriterion
    benchopt.stopping_criterion = criterion
    return {"benchopt": benchopt, "benchopt.stopping_criterion": criterion}


@pytest.fixture(params=["benchopt", "stand-in"])
def load_solver(request, monkeypatch):
    """Load a benchmark's solver file with benchopt or with the stand-in."""
    if request.param == "benchopt":
        # find_spec, not importorskip: with benchmarks/ on sys.path (test_regress.py puts
        # it there) the folder benchmarks/benchopt/ imports as a namespace package
        spec = importlib.util.find_spec("benchopt")
        if spec is None or spec.origin in (None, "namespace"):
            pytest.skip("benchopt is not installed")
    else:
        for name, module in _stand_in_modules().items():
            monkeypatch.setitem(sys.modules, name, module)

    def load(benchmark, **parameters):
        path = SOLVERS / benchmark / "solver_msm_gpu.py"
        spec = importlib.util.spec_from_file_location(f"_benchopt_{benchmark}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        assert not module.import_ctx.failed_import
        return module.Solver.get_instance(**parameters)

    return load


def _solve(solver, objective, stop_val):
    skip, reason = solver.skip(**objective)
    assert not skip, reason
    solver.set_objective(**objective)
    solver.warm_up()
    solver.run(stop_val)
    return solver.get_result()


# -- the benchmarks' objectives (their objective.py, restated) ---------------------------
def _nnls_value(X, y, beta):
    diff = y - X @ np.maximum(0, beta)
    return 0.5 * diff @ diff


def _lasso_value(X, y, lmbd, beta, fit_intercept):
    n = X.shape[1]
    diff = y - X @ beta[:n] - (beta[n] if fit_intercept else 0.0)
    return 0.5 * diff @ diff + lmbd * abs(beta[:n]).sum()


def _logreg_value(X, y, lmbd, beta):
    return np.logaddexp(0, -y * (X @ beta)).sum() + lmbd * abs(beta).sum()


def _regression(m, n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((m, n))
    y = X[:, :3] @ np.array([1.0, -2.0, 0.5]) + 3.0 + 0.1 * rng.standard_normal(m)
    return X, y


# -- benchmark_nnls -----------------------------------------------------------------------
@pytest.mark.parametrize("positive", [True, False])
@pytest.mark.parametrize("layout", ["dense", "sparse"])
def test_nnls_solver_matches_scipy(load_solver, positive, layout):
    X, y = _regression(30, 12)
    if positive:  # the benchmark's "positive" datasets
        X = np.abs(X)
    Xin = sp.csc_matrix(X) if layout == "sparse" else X
    solver = load_solver("benchmark_nnls")
    beta = _solve(solver, dict(X=Xin, y=y, fit_intercept=False), 1e-10)["beta"]
    ref, _ = scipy_nnls(X, y)
    assert beta.shape == (12,)
    assert beta.min() >= 0
    np.testing.assert_allclose(_nnls_value(X, y, beta), _nnls_value(X, y, ref), rtol=1e-12)
    np.testing.assert_allclose(beta, ref, atol=1e-9)
    solver.run(INITIAL_TOL)  # benchopt's first point: the start
    np.testing.assert_array_equal(solver.get_result()["beta"], np.zeros(12))


@pytest.mark.parametrize("name", ["benchmark_nnls", "benchmark_lasso"])
def test_loose_tolerance_is_capped_at_the_default(load_solver, monkeypatch, name):
    """benchopt's loose tolerances (1, 0.67, ...) never loosen msm-gpu's tol past its
    default, whose answer is exact: the answer at tol=1 is the exact one."""
    X, y = _regression(30, 12)
    solver = load_solver(name)
    if name == "benchmark_nnls":
        objective, call = dict(X=X, y=y, fit_intercept=False), "nnls"
        ref = scipy_nnls(X, y)[0]
    else:
        lmbd = 0.1 * abs(X.T @ y).max()
        objective, call = dict(X=X, y=y, lmbd=lmbd, fit_intercept=False), "least_squares"
        ref = Lasso(alpha=lmbd / 30, fit_intercept=False, tol=1e-14, max_iter=100_000)
        ref = ref.fit(X, y).coef_
    seen = []
    original = getattr(mg, call)

    def spy(*args, **kwargs):
        seen.append(kwargs["tol"])
        return original(*args, **kwargs)

    beta = _solve(solver, objective, 1.0)["beta"]
    np.testing.assert_allclose(beta, ref, atol=1e-7)
    monkeypatch.setattr(mg, call, spy)
    solver.run(1.0)
    assert seen == [1e-6]


def test_nnls_solver_skips_intercept(load_solver):
    X, y = _regression(10, 4)
    skip, reason = load_solver("benchmark_nnls").skip(X=X, y=y, fit_intercept=True)
    assert skip and "intercept" in reason


# -- benchmark_lasso ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "fit_intercept, layout", [(False, "dense"), (True, "dense"), (False, "sparse")]
)
def test_lasso_solver_matches_sklearn(load_solver, fit_intercept, layout):
    X, y = _regression(40, 25)
    centred = y - y.mean() if fit_intercept else y
    lmbd = 0.1 * abs(X.T @ centred).max()
    Xin = sp.csc_matrix(X) if layout == "sparse" else X
    objective = dict(X=Xin, y=y, lmbd=lmbd, fit_intercept=fit_intercept)
    beta = _solve(load_solver("benchmark_lasso"), objective, 1e-10)["beta"]
    ref = Lasso(alpha=lmbd / 40, fit_intercept=fit_intercept, tol=1e-14, max_iter=100_000)
    ref.fit(X, y)
    ref_beta = np.r_[ref.coef_, ref.intercept_] if fit_intercept else ref.coef_
    assert beta.shape == (25 + fit_intercept,)
    got = _lasso_value(X, y, lmbd, beta, fit_intercept)
    want = _lasso_value(X, y, lmbd, ref_beta, fit_intercept)
    assert got <= want * (1 + 1e-12)
    np.testing.assert_allclose(beta, ref_beta, atol=1e-7)


def test_lasso_solver_skips_sparse_intercept(load_solver):
    X, y = _regression(10, 4)
    skip, reason = load_solver("benchmark_lasso").skip(
        X=sp.csc_matrix(X), y=y, lmbd=1.0, fit_intercept=True
    )
    assert skip and "sparse" in reason


# -- benchmark_lasso_path -------------------------------------------------------------------
@pytest.mark.parametrize("fit_intercept", [False, True])
def test_lasso_path_solver_matches_sklearn(load_solver, fit_intercept):
    X, y = _regression(30, 40)  # wide, as the benchmark's second dataset
    lmax = abs(X.T @ (y - y.mean() if fit_intercept else y)).max()
    lambdas = lmax * np.geomspace(1.0, 0.01, 6)
    objective = dict(X=X, y=y, lambdas=lambdas, fit_intercept=fit_intercept)
    coefs = _solve(load_solver("benchmark_lasso_path"), objective, 1e-10)["coefs"]
    assert coefs.shape == (40 + fit_intercept, 6)
    for k, lam in enumerate(lambdas):
        ref = Lasso(alpha=lam / 30, fit_intercept=fit_intercept, tol=1e-14, max_iter=100_000)
        ref.fit(X, y)
        ref_beta = np.r_[ref.coef_, ref.intercept_] if fit_intercept else ref.coef_
        got = _lasso_value(X, y, lam, coefs[:, k], fit_intercept)
        want = _lasso_value(X, y, lam, ref_beta, fit_intercept)
        assert got <= want * (1 + 1e-12), k
        np.testing.assert_allclose(coefs[:, k], ref_beta, atol=1e-6)
    # the benchmark's peers use lasso_path; without an intercept it must agree too
    if not fit_intercept:
        _, path, _ = lasso_path(X, y, alphas=lambdas / 30, tol=1e-14, max_iter=100_000)
        np.testing.assert_allclose(coefs, path, atol=1e-6)


# -- benchmark_logreg_l1 ----------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["dense", "sparse"])
def test_logreg_l1_solver_matches_sklearn(load_solver, layout):
    rng = np.random.default_rng(1)
    X = rng.standard_normal((60, 30))
    y = np.where(X[:, :4] @ np.array([1.0, -1.0, 2.0, 0.5]) + rng.standard_normal(60) > 0, 1, -1)
    lmbd = 0.1 * abs(X.T @ y).max() / 2  # the objective's reg * lambda_max
    Xin = sp.csr_matrix(X) if layout == "sparse" else X
    beta = _solve(load_solver("benchmark_logreg_l1"), dict(X=Xin, y=y, lmbd=lmbd), 1e-12)["beta"]
    ref = LogisticRegression(
        C=1 / lmbd, l1_ratio=1, solver="liblinear", fit_intercept=False, tol=1e-14, max_iter=10_000
    ).fit(X, y)
    assert beta.shape == (30,)
    got, want = _logreg_value(X, y, lmbd, beta), _logreg_value(X, y, lmbd, ref.coef_.ravel())
    assert got <= want * (1 + 1e-10)
    np.testing.assert_allclose(beta, ref.coef_.ravel(), atol=1e-5)


# -- benchmark_nmf ----------------------------------------------------------------------------
def _nmf_instance():
    rng = np.random.RandomState(26)  # the benchmark's simulated data, smaller
    X = rng.rand(20, 3) @ rng.rand(3, 15) + 1e-3 * rng.randn(20, 15)
    X = np.abs(X)
    init = np.random.RandomState(27)
    factors = [init.rand(20, 3), init.rand(3, 15)]
    for factor in factors:
        factor.flags.writeable = False  # as the objective shares them
    return X, factors


def test_nmf_solver_not_above_sklearn(load_solver):
    X, factors = _nmf_instance()
    solver = load_solver("benchmark_nmf", loss="frobenius")
    objective = dict(X=X, rank=3, factors_init=factors)
    result = _solve(solver, objective, 300)
    W, H = result["W"], result["H"]
    assert W.shape == (20, 3) and H.shape == (3, 15)
    assert W.min() >= 0 and H.min() >= 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = SkNMF(3, init="custom", solver="cd", tol=0, max_iter=300)
        W_ref = ref.fit_transform(X, W=factors[0].copy(), H=factors[1].copy())

    def value(W, H):
        return 0.5 * np.linalg.norm(X - W @ H) ** 2

    assert value(W, H) <= value(W_ref, ref.components_)
    solver.run(0)  # n_iter = 0: the shared start
    start = solver.get_result()
    np.testing.assert_array_equal(start["W"], factors[0])
    np.testing.assert_array_equal(start["H"], factors[1])


def test_nmf_solver_kl_skipped_exactly_when_refused(load_solver):
    X, factors = _nmf_instance()
    solver = load_solver("benchmark_nmf", loss="kullback-leibler")
    objective = dict(X=X, rank=3, factors_init=factors)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            mg.NMF(3, beta_loss="kullback-leibler", max_iter=2).fit(X)
        refused = False
    except ValueError:
        refused = True
    skip, reason = solver.skip(**objective)
    assert skip == refused
    if refused:
        assert "kullback-leibler" in reason
        return
    # the loss is fitted: its divergence is not above scikit-learn's (mu) at equal iterations
    result = _solve(solver, objective, 50)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = SkNMF(3, init="custom", solver="mu", beta_loss="kullback-leibler", tol=0, max_iter=50)
        W_ref = ref.fit_transform(X, W=factors[0].copy(), H=factors[1].copy())

    def kl(WH):
        return np.sum(X * np.log(X / WH) - X + WH)

    assert kl(result["W"] @ result["H"]) <= kl(W_ref @ ref.components_)
