"""A large sparse A in ``solve``: MSM swept over CSR rows, never densified.

Truth: SciPy's sparse direct solve (Zero penalty), the dense road's exact answer on the
same problem, the paper's monotone decrease (Theorem 1; the nonconvex theorem for L0) and
F evaluated directly.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spl

import msm_gpu as mg
from msm_gpu.solvers import sparse_msm

N = sparse_msm.DENSE_MAX_N + 500


def laplacian_problem(n=N, mu=2.0, r=1, seed=0):
    lap = sp.diags([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1], format="csr")
    A = (sp.identity(n, format="csr") + mu * lap).tocsr()
    rng = np.random.default_rng(seed)
    y = np.sin(np.linspace(0, 20, n))[:, None] + 0.3 * rng.standard_normal((n, r))
    return A, -(y[:, 0] if r == 1 else y)


def objective(A, R, x, penalty):
    return 0.5 * x @ (A @ x) + R @ x + float(np.sum(penalty.value(x)))


def test_zero_penalty_matches_scipy_spsolve():
    A, R = laplacian_problem()
    res = mg.solve(A, R, tol=1e-12, max_iter=5000)
    assert res.info["representation"] == "sparse" and res.converged
    x_ref = spl.spsolve(A.tocsc(), -R)
    np.testing.assert_allclose(res.x, x_ref, rtol=0, atol=1e-9 * np.abs(x_ref).max())


@pytest.mark.parametrize("penalty", [mg.NonNeg(), mg.L1(0.3), mg.Box(-0.2, 0.5)], ids=repr)
def test_convex_penalties_match_the_dense_exact_answer(penalty):
    A, R = laplacian_problem()
    res = mg.solve(A, R, penalty, tol=1e-12, max_iter=5000)
    dense = mg.solve(A.toarray(), R, penalty)
    assert res.converged
    assert res.fun == pytest.approx(dense.fun, rel=1e-10)
    np.testing.assert_allclose(res.x, dense.x, rtol=0, atol=1e-8)


@pytest.mark.parametrize("penalty", [mg.Zero(), mg.NonNeg(), mg.L1(0.3), mg.L0(0.05)], ids=repr)
def test_objective_history_decreases_and_fun_is_f_of_x(penalty):
    A, R = laplacian_problem()
    res = mg.solve(A, R, penalty)
    hist = res.objective
    assert len(hist) == res.n_iter + 1
    assert np.all(np.diff(hist) <= 1e-12 * np.abs(hist).max())
    assert res.fun == pytest.approx(objective(A, R, res.x, penalty), rel=1e-10, abs=1e-9)
    assert hist[-1] == pytest.approx(res.fun, rel=1e-10)


def test_columns_are_independent_and_inputs_untouched():
    A, R = laplacian_problem(r=3)
    A_before, R_before = A.copy(), R.copy()
    res = mg.solve(A, R, mg.NonNeg())
    for j in range(3):
        alone = mg.solve(A, R[:, j], mg.NonNeg())
        np.testing.assert_array_equal(res.x[:, j], alone.x)
    assert (A != A_before).nnz == 0
    np.testing.assert_array_equal(R, R_before)
    assert res.x.shape == (N, 3) and res.converged_columns.shape == (3,)


def test_float32_in_float32_out_and_warm_start():
    A, R = laplacian_problem()
    res = mg.solve(A, R.astype(np.float32))
    assert res.x.dtype == np.float32
    warm = mg.solve(A, R, x0=mg.solve(A, R).x)
    assert warm.n_iter <= 2


def test_small_sparse_a_still_goes_dense():
    A, R = laplacian_problem(n=200)
    res = mg.solve(A, R, mg.NonNeg())
    assert res.info.get("representation") != "sparse" and res.info["finish"] == "auto"


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"callback": lambda info: False}, "callback"),
        ({"verbose": True}, "verbose"),
        ({"finish": "exact"}, "finish"),
        ({"method": "apg"}, "method"),
    ],
)
def test_options_the_sparse_road_lacks_are_named(kwargs, name):
    A, R = laplacian_problem()
    with pytest.raises(ValueError, match=name):
        mg.solve(A, R, **kwargs)


def test_bad_sparse_a_is_refused():
    A, R = laplacian_problem()
    skew = A.tolil()
    skew[0, 1] = 5.0
    with pytest.raises(ValueError, match="symmetric"):
        mg.solve(skew.tocsr(), R)
    bad = A.copy()
    bad.data[0] = np.nan
    with pytest.raises(ValueError, match="finite"):
        mg.solve(bad, R)
    with pytest.raises(ValueError, match="R must have shape"):
        mg.solve(A, R[:-1])


def test_time_limit_stops_between_column_groups():
    A, R = laplacian_problem(r=sparse_msm.COLUMNS_PER_CHECK + 1)
    res = mg.solve(A, R, time_limit=1e-9)
    assert res.message == "time limit reached" and not res.converged


def test_start_outside_the_box_is_projected():
    A, R = laplacian_problem()
    box = mg.Box(-0.2, 0.5)
    ref = mg.solve(A, R, box, tol=1e-12, max_iter=5000)
    res = mg.solve(A, R, box, x0=np.full(N, 3.0), tol=1e-12, max_iter=5000)
    assert res.converged and np.all(np.isfinite(res.objective))
    np.testing.assert_allclose(res.x, ref.x, rtol=0, atol=1e-9)


@pytest.mark.parametrize("penalty", [mg.Zero(), mg.NonNeg(), mg.L1(0.3)], ids=repr)
def test_kkt_residual_is_reported_and_small_at_default_options(penalty):
    """Plain MSM stops on its step; the reported KKT residual says how close it is."""
    A, R = laplacian_problem(r=2)
    res = mg.solve(A, R, penalty)
    kkt = res.info["kkt_residual"]
    assert kkt.shape == (2,) and np.all(kkt <= 1e-5)
    tight = mg.solve(A, R, penalty, tol=1e-12, max_iter=5000)
    assert np.all(tight.info["kkt_residual"] < 1e-10)
