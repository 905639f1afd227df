"""Anderson extrapolation of MSM sweeps (msm_gpu.solvers.anderson).

Truth: the extrapolation weights against the KKT system of their definition, solved
directly; F and the residual recomputed from C; a geometric sequence whose limit is
known (Anderson's extrapolation of one is exact); SciPy's nnls for the sweeps' limit."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize
import scipy.sparse

import msm_gpu as mg
from msm_gpu.solvers import anderson
from msm_gpu.solvers.design_msm import design_sweeps
from msm_gpu.solvers.pwl_active_set import DesignSource


def test_the_weights_sum_to_one_and_cancel_the_differences():
    rng = np.random.default_rng(3)
    r = rng.standard_normal((4, 30))
    gram = r @ r.T
    c = anderson.solve_ones(gram)
    assert c.sum() == pytest.approx(1.0, abs=1e-14)
    # the minimiser of ||R' c|| subject to sum c = 1 (its KKT system, solved directly)
    kkt = np.block([[gram, np.ones((4, 1))], [np.ones((1, 4)), np.zeros((1, 1))]])
    expect = np.linalg.solve(kkt, np.r_[np.zeros(4), 1.0])[:4]
    np.testing.assert_allclose(c, expect, rtol=1e-8)
    assert anderson.solve_ones(np.zeros((4, 4))) is None


def _nnls_problem(m=40, n=12, seed=0):
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((m, n))
    x_opt = rng.uniform(0.5, 2.0, n)  # an interior answer: F's minimiser over x >= 0
    d = c @ x_opt
    return c, d, x_opt


def _record(c, d, points, rows, x):
    """Feed ``points`` (the last one is x's value) to record_and_extrapolate in turn;
    returns the change of the last call."""
    penalty = mg.NonNeg()
    n = c.shape[1]
    source = DesignSource(c)
    params = np.ascontiguousarray(penalty.table(n), dtype=np.float64)
    history = anderson.design_history(n, c.shape[0])
    change = 0.0
    for point in points:
        x[:] = point
        res = c @ x - d
        change = anderson.record_and_extrapolate(
            source.src, res, x, rows, rows.size, penalty.code, params, history
        )
    return change, res


def test_a_geometric_sequence_is_extrapolated_to_its_limit_and_f_falls():
    # x_k = x* + 0.9^k v: the differences are one direction, the weights' combination of
    # the last five is x* exactly; x* minimises F, so the move is kept
    c, d, x_opt = _nnls_problem()
    v = np.random.default_rng(1).standard_normal(x_opt.size) * 0.1
    points = [x_opt + 0.9**k * v for k in range(anderson.DEPTH + 1)]
    x = np.empty_like(x_opt)
    rows = np.arange(x_opt.size)
    f_before = 0.5 * np.sum((c @ points[-1] - d) ** 2)
    change, res = _record(c, d, points, rows, x)
    np.testing.assert_allclose(x, x_opt, atol=1e-6)
    f_after = 0.5 * np.sum((c @ x - d) ** 2)
    assert change < 0.0
    assert f_after == pytest.approx(f_before + change, abs=1e-9 * f_before)
    np.testing.assert_allclose(res, c @ x - d, atol=1e-10)  # the residual follows x


def test_an_extrapolation_that_raises_f_is_refused():
    # a sequence converging to a point worse than its last member: x stays where it was
    c, d, x_opt = _nnls_problem()
    w = np.random.default_rng(2).uniform(0.5, 1.0, x_opt.size)
    z = x_opt + w  # the limit, F(z) > F(x_opt) = 0
    points = [z - 0.5 ** (k - anderson.DEPTH) * w for k in range(anderson.DEPTH + 1)]
    assert np.allclose(points[-1], x_opt)
    x = np.empty_like(x_opt)
    change, res = _record(c, d, points, np.arange(x_opt.size), x)
    assert change == 0.0
    np.testing.assert_array_equal(x, points[-1])
    np.testing.assert_allclose(res, c @ points[-1] - d, atol=1e-12)


def test_the_extrapolation_is_projected_into_the_bounds():
    # the limit has negative entries: the kept point is feasible, its residual C x - d
    c, d, _ = _nnls_problem()
    rng = np.random.default_rng(4)
    limit = rng.standard_normal(c.shape[1])
    ref = scipy.optimize.nnls(c, d)[0]  # pull the limit towards the answer
    limit = np.where(limit < 0, limit, ref)
    v = rng.standard_normal(c.shape[1])
    points = [np.maximum(limit + 0.8**k * (np.abs(v) + 1.0), 0.0) for k in range(6)]
    x = np.empty(c.shape[1])
    change, res = _record(c, d, points, np.arange(c.shape[1]), x)
    assert change < 0.0
    assert np.all(x >= 0.0) and np.sum(x == 0.0) >= 3  # kept, and projected to 0
    np.testing.assert_allclose(res, c @ x - d, atol=1e-10)
    f = 0.5 * np.sum((c @ x - d) ** 2)
    f_last = 0.5 * np.sum((c @ points[-1] - d) ** 2)
    assert f == pytest.approx(f_last + change, rel=1e-9)


def _ill_conditioned(m=80, n=40, seed=5):
    """Singular values from 1 to 1e-2 (cond(C'C) = 1e4), an interior answer: the
    sweeps' support settles and their rate is slow."""
    rng = np.random.default_rng(seed)
    u = np.linalg.qr(rng.standard_normal((m, n)))[0]
    v = np.linalg.qr(rng.standard_normal((n, n)))[0]
    c = u @ np.diag(np.geomspace(1.0, 1e-2, n)) @ v.T
    d = c @ rng.uniform(0.5, 1.5, n) + 1e-3 * rng.standard_normal(m)
    return c, d


def test_sweeps_with_extrapolation_still_never_raise_f_and_get_closer():
    # the plain road records F after every sweep: monotone with the extrapolation too
    # (Theorem 1's decrease kept: a move is kept only where it lowers F), and after the
    # same sweeps much nearer SciPy's optimum on an ill-conditioned design
    c, d = _ill_conditioned()
    f_opt = 0.5 * np.sum((c @ scipy.optimize.nnls(c, d)[0] - d) ** 2)
    source = DesignSource(c)
    diag = np.einsum("ij,ij->j", c, c)
    gaps = {}
    for extrapolate in (False, True):
        x = np.zeros((c.shape[1], 1))
        f0 = np.array([0.5 * d @ d])
        out = design_sweeps(
            source, d[:, None], x, diag, diag, mg.NonNeg(), 0.0, fun=f0, warm=300, cap=300,
            extrapolate=extrapolate,
        )  # fmt: skip
        assert np.all(np.diff(out.history) <= 1e-12 * out.history[0])
        f = 0.5 * np.sum((c @ x[:, 0] - d) ** 2)
        assert out.fun[0] == pytest.approx(f, rel=1e-9)
        gaps[extrapolate] = f - f_opt
    assert 0.0 <= gaps[True] < 1e-4 * gaps[False]


def test_a_sparse_large_face_is_exact_with_the_extrapolated_sweeps():
    # the road the extrapolation serves: a sparse C whose answer has hundreds of nonzeros
    # (the sweeps, then the projected Newton-CG); the KKT conditions, and F no higher
    # than SciPy's on the dense copy
    c = scipy.sparse.random(300, 1200, density=0.01, format="csr", random_state=1)
    d = np.random.default_rng(1).uniform(size=300)
    res = mg.nnls(c, d)
    x = np.asarray(res.x).ravel()
    assert res.converged and np.all(x >= 0.0)
    grad = c.T @ (c @ x - d)
    scale = np.abs(c.T @ d).max()
    assert np.all(grad >= -1e-10 * scale)
    assert np.abs(grad[x > 0]).max() <= 1e-10 * scale
    f_ref = 0.5 * np.sum((c @ scipy.optimize.nnls(c.toarray(), d, maxiter=10_000)[0] - d) ** 2)
    assert 0.5 * np.sum((c @ x - d) ** 2) <= f_ref * (1 + 1e-12)
