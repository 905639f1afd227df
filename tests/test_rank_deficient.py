"""Singular faces and the accuracy of F: wide, collinear and rank-deficient problems.

The default finish must never return a worse answer than the paper's plain MSM, must reach
SciPy's / scikit-learn's optimum, and ``res.fun`` must be F at ``res.x`` to the rounding of
F itself (never negative for a sum of squares).  Regression cases from the issue tracker:
Lasso on 100 x n Gaussian designs returned up to 72% above plain MSM (n = 300) and x ~ 1e15
with a negative ``res.fun`` (n = 1000); NNLS 100 x 3000 with ``finish="exact"`` stopped at
F = 1035 (SciPy: 4e-27).
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
import scipy.optimize
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.linear_model import Lasso

import msm_gpu as mg
from msm_gpu.finish import face_solves as facesolve
from msm_gpu.finish import faces as finish_faces
from msm_gpu.finish import objective
from msm_gpu.solvers.pwl_active_set import pwl_active_set

LAM = 5.0


def _design(kind, m, n, rng):
    if kind == "gauss":
        return rng.standard_normal((m, n))
    if kind == "positive":
        return np.abs(rng.standard_normal((m, n)))
    if kind == "low_rank":  # small integers: exactly rank k in float32 too
        k = max(2, min(m, n) // 3)
        return (rng.integers(-3, 4, (m, k)) @ rng.integers(-3, 4, (k, n))).astype(float)
    if kind == "collinear":  # the second half: multiples of the first half's columns
        c = rng.standard_normal((m, n))
        half = n - n // 2
        c[:, n // 2 :] = c[:, :half] * rng.choice([1.0, 2.0], half)
        return c
    raise ValueError(kind)


def _problem(kind, m, n, seed):
    rng = np.random.default_rng(seed)
    c = _design(kind, m, n, rng)
    w = np.zeros(n)
    w[rng.choice(n, min(10, n), replace=False)] = 3.0
    return c, c @ w + 0.1 * rng.standard_normal(m)


PENALTIES = {
    "nonneg": mg.NonNeg(),
    "l1": mg.L1(LAM),
    "nonneg_l1": mg.NonNegL1(LAM),
    "box": mg.Box(-0.5, 0.5),
    "zero": mg.Zero(),
}


def _f(c, d, x, name):
    x = np.asarray(x, dtype=np.float64)
    f = 0.5 * float(np.sum((c @ x - d) ** 2))
    if name in ("l1", "nonneg_l1"):
        f += LAM * float(np.abs(x).sum())
    return f


def _reference(c, d, name):
    """The optimum's x from SciPy / scikit-learn (tight tolerances; the tests take the
    better of it and plain MSM as the best known F)."""
    m, n = c.shape
    if name == "nonneg":
        return scipy.optimize.nnls(c, d, maxiter=50 * n)[0]
    if name in ("l1", "nonneg_l1"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ConvergenceWarning on singular designs
            model = Lasso(
                alpha=LAM / m,
                fit_intercept=False,
                tol=1e-12,
                max_iter=20_000,
                positive=name == "nonneg_l1",
            )
            return model.fit(c, d).coef_
    if name == "box":
        return scipy.optimize.lsq_linear(c, d, bounds=(-0.5, 0.5), method="bvls", tol=1e-15).x
    return np.linalg.lstsq(c, d, rcond=None)[0]


def _rounding_of_f(c, d, *xs):
    """How far evaluating F = 1/2 ||C x - d||^2 (+ h) in float64 can move it.

    Each residual entry carries a rounding error of order eps ((|C| |x|)_i + |d_i|), so F
    moves by about ||r|| times that vector's norm.  Near a wide problem's minimum this is
    far above eps F (a 25 x 120 rank-8 case: F = 0.054, ||d|| = 736, ||C x|| ~ 2000, two
    optimal x differing by 7.7e-15 in F, which a relative 1e-13 bound once rejected).
    """
    eps = np.finfo(np.float64).eps
    bound = 0.0
    for x in xs:
        x = np.asarray(x, dtype=np.float64)
        r = np.linalg.norm(c @ x - d)
        size = np.linalg.norm(np.abs(c) @ np.abs(x)) + np.linalg.norm(d)
        bound = max(bound, 4 * eps * r * size + 4 * eps * float(np.abs(x).sum()) * LAM)
    return bound


def _check(c, d, name, res, plain, dtype=np.float64):
    """The issue's acceptance, for one problem."""
    d64 = np.asarray(d, dtype=np.float64)
    c64 = np.asarray(c, dtype=np.float64)
    f = _f(c64, d64, res.x, name)
    f_plain = _f(c64, d64, plain.x, name)
    floor = 1e-12 * float(np.sum(d64**2))  # absolute, near F = 0
    if dtype == np.float32:  # rounding x to float32 moves C x by ~ 2^-24 |c_j| |x_j| each
        col = np.linalg.norm(c64, axis=0)
        floor += max(2.0**-48 * float(np.sum((col * np.abs(v)) ** 2)) for v in (res.x, plain.x))
    best = min(_f(c64, d64, _reference(c64, d64, name), name), f_plain)
    assert res.fun >= 0
    # res.fun is F at res.x (evaluated directly) to the rounding of evaluating F (two
    # evaluations summing C x in different orders differ by that much near F = 0)
    assert abs(res.fun - f) <= 1e-12 * f + _rounding_of_f(c64, d64, res.x) + 1e-300
    # never above plain MSM (to the rounding of F, or of x to float32), and at the optimum
    if dtype == np.float64:
        assert f <= f_plain + _rounding_of_f(c64, d64, res.x, plain.x) + 1e-30
    else:
        assert f <= f_plain * (1 + 1e-6) + floor
    rel = 1e-10 if dtype == np.float64 else 1e-6
    assert f - best <= rel * best + floor, (f, best)
    assert res.converged


@pytest.mark.parametrize("n", [300, 1000])
@pytest.mark.parametrize("seed", [0, 1, 2, 4, 5])
def test_lasso_on_wide_gaussian_designs_matches_plain_msm_and_sklearn(n, seed):
    # the table: default 8.5-72% above plain MSM at n = 300, x ~ 1e15 at n = 1000
    c, d = _problem("gauss", 100, n, seed)
    res = mg.least_squares(c, d, mg.L1(LAM))
    plain = mg.least_squares(c, d, mg.L1(LAM), finish=None)
    _check(c, d, "l1", res, plain)
    assert np.abs(res.x).max() < 10


@pytest.mark.parametrize("finish_mode", ["auto", "exact"])
def test_wide_nnls_both_finishes_reach_scipy_with_an_exact_fun(finish_mode):
    # 100 x n |N(0,1)|, n > ACTIVE_SET_MAX_N: "exact" once stopped at F = 1035 (n = 3000) with
    # a RuntimeWarning, at n = 1500 10.28 instead of 9.01; the
    # default reported res.fun = -3.6e-12 for a sum of squares
    rng = np.random.default_rng(0)
    c = np.abs(rng.standard_normal((100, 1500)))
    d = np.abs(rng.standard_normal(100))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning (division by rounding noise)
        res = mg.nnls(c, d, finish=finish_mode)
    x_ref = scipy.optimize.nnls(c, d, maxiter=100_000)[0]
    f, f_ref = _f(c, d, res.x, "nonneg"), _f(c, d, x_ref, "nonneg")
    assert res.converged and res.fun >= 0
    assert f <= f_ref + 1e-12 * float(d @ d)
    assert abs(res.fun - f) <= 1e-12 * f + 1e-28 * float(d @ d)


def test_exact_fit_reports_a_tiny_nonnegative_objective():
    # d = C x_true with x_true >= 0: F = 0 at the answer; the Gram identity reported
    # values of order eps ||d||^2 of either sign
    rng = np.random.default_rng(3)
    c = np.abs(rng.standard_normal((60, 200)))
    d = c @ np.abs(rng.standard_normal((200, 7)))
    res = mg.nnls(c, d)
    assert res.converged and 0 <= res.fun <= 1e-20 * float(np.sum(d**2))
    assert res.objective.size == 0 or res.objective[-1] == res.fun


@settings(max_examples=25, deadline=None)
@given(
    shape=st.sampled_from([(30, 80), (40, 40), (80, 25), (25, 120)]),
    kind=st.sampled_from(["gauss", "positive", "low_rank", "collinear"]),
    name=st.sampled_from(sorted(PENALTIES)),
    seed=st.integers(0, 2**16),
)
def test_default_is_optimal_and_never_worse_than_plain_msm_float64(shape, kind, name, seed):
    c, d = _problem(kind, *shape, seed)
    res = mg.least_squares(c, d, PENALTIES[name])
    plain = mg.least_squares(c, d, PENALTIES[name], finish=None, max_iter=5000)
    _check(c, d, name, res, plain)


@settings(max_examples=15, deadline=None)
@given(
    shape=st.sampled_from([(30, 80), (40, 40), (80, 25)]),
    kind=st.sampled_from(["gauss", "positive", "low_rank", "collinear"]),
    name=st.sampled_from(sorted(PENALTIES)),
    seed=st.integers(0, 2**16),
)
def test_default_is_optimal_and_never_worse_than_plain_msm_float32(shape, kind, name, seed):
    c, d = _problem(kind, *shape, seed)
    c32, d32 = c.astype(np.float32), d.astype(np.float32)
    res = mg.least_squares(c32, d32, PENALTIES[name])
    plain = mg.least_squares(c32, d32, PENALTIES[name], finish=None, max_iter=5000)
    assert res.x.dtype == np.float32
    _check(c32, d32, name, res, plain, dtype=np.float32)


@pytest.mark.parametrize("name", ["nonneg", "l1", "box", "zero"])
def test_solve_on_a_singular_a_is_never_worse_than_plain_msm(name):
    # solve() has no C: F is compared in the Gram form with its rounding error
    rng = np.random.default_rng(7)
    c = _design("collinear", 30, 60, rng)
    a = c.T @ c
    r = -(c.T @ rng.standard_normal((30, 4)))
    res = mg.solve(a, r, PENALTIES[name])
    plain = mg.solve(a, r, PENALTIES[name], finish=None, max_iter=5000)

    def f(x):
        h = np.sum(PENALTIES[name].value(x))
        return 0.5 * float(np.sum(x * (a @ x))) + float(np.sum(x * r)) + float(h)

    scale = float(np.sum(np.abs(r))) * 10
    assert f(res.x) <= f(plain.x) + 1e-10 * scale
    assert abs(res.fun - f(res.x)) <= 1e-10 * scale
    assert np.abs(res.x).max() < 1e3


# -- the pieces --------------------------------------------------------------------------


def _brute_force(a, r, penalty):
    """min 1/2 x'Ax + r'x + h(x) by enumerating every face (small n): on each, the
    minimiser over the affine hull where one exists (A_FF z = b_F solvable), kept if it
    lies in the closure of its pieces."""
    n = a.shape[0]
    faces = finish_faces.Faces(np, penalty, n)
    best = np.inf
    pts = np.append(np.asarray(faces.pts)[0], np.inf)  # the points, from the left
    # fixed at a finite point, or free on a nonempty piece between two points
    states = [
        q
        for q in range(5)
        if (np.isfinite(pts[q // 2]) if q % 2 == 0 else pts[q // 2] < pts[q // 2 + 1])
    ]
    for combo in itertools.product(states, repeat=n):
        q = np.array(combo)[:, None]
        free, value, sigma = (np.asarray(v)[:, 0] for v in faces.decode(q))
        lo, hi = faces.get("lo", q)[:, 0], faces.get("hi", q)[:, 0]
        if np.any(~free & ~np.isfinite(value)) or np.any(lo > hi):
            continue
        x = np.where(free, 0.0, value)
        if free.any():
            ff = np.flatnonzero(free)
            rhs = -(r[ff] + sigma[ff]) - a[np.ix_(ff, ~free)] @ x[~free]
            z, *_ = np.linalg.lstsq(a[np.ix_(ff, ff)], rhs, rcond=1e-12)
            if np.linalg.norm(a[np.ix_(ff, ff)] @ z - rhs) > 1e-9 * (1 + np.linalg.norm(rhs)):
                continue  # no minimiser on this face's affine hull
            if np.any(z < lo[ff] - 1e-12) or np.any(z > hi[ff] + 1e-12):
                continue
            x[ff] = z
        f = 0.5 * x @ a @ x + r @ x + float(np.sum(penalty.value(x)))
        best = min(best, f)
    return best


@pytest.mark.parametrize(
    "penalty", [mg.NonNeg(), mg.L1(0.7), mg.NonNegL1(0.4), mg.Box(-0.3, 0.6), mg.Zero()]
)
@pytest.mark.parametrize("seed", range(6))
def test_pwl_active_set_reaches_the_brute_force_minimum_on_singular_problems(penalty, seed):
    rng = np.random.default_rng(seed)
    n = 5
    c = rng.standard_normal((3, n))  # rank 3 < n: every large face is singular
    c[:, 4] = c[:, 0] * 2.0  # and two collinear columns
    a = c.T @ c
    r = -(c.T @ rng.standard_normal(3))
    x, status, _ = pwl_active_set(
        a, r[:, None], finish_faces.Faces(np, penalty, n), np.zeros((n, 1))
    )
    f = 0.5 * x[:, 0] @ a @ x[:, 0] + r @ x[:, 0] + float(np.sum(penalty.value(x[:, 0])))
    assert status[0] == 1
    assert f <= _brute_force(a, r, penalty) + 1e-10 * (1 + abs(f))


def test_pwl_active_set_reports_an_unbounded_column():
    # r outside the range of a singular A with no bound in the way: F -> -inf
    a = np.array([[1.0, 1.0], [1.0, 1.0]])
    r = np.array([[1.0], [-1.0]])
    x, status, _ = pwl_active_set(a, r, finish_faces.Faces(np, mg.Zero(), 2), np.zeros((2, 1)))
    assert status[0] == -1 and np.all(np.isfinite(x))


def test_face_solve_leaves_a_dependent_variable_out_instead_of_dividing_by_noise():
    rng = np.random.default_rng(0)
    c = rng.standard_normal((20, 6))
    c[:, 5] = c[:, 2]  # a duplicate column: G[F, F] singular
    g = c.T @ c
    p = c.T @ rng.standard_normal((20, 3))  # in the range: a minimiser exists
    passive = np.ones((6, 3), dtype=bool)
    x = facesolve.solve_passive(g, p, passive)
    assert np.abs(x).max() < 1e3
    np.testing.assert_allclose(g @ x, p, atol=1e-9 * np.abs(p).max())
    batched = facesolve.solve_passive_batched(g, p, passive)
    np.testing.assert_allclose(g @ batched, p, atol=1e-9 * np.abs(p).max())
    # one group of 40 equal free sets: the LAPACK road checks its pivots too
    many = np.repeat(p, 40, axis=1)
    x_group = facesolve.solve_passive(g, many, np.ones((6, 120), dtype=bool))
    assert np.abs(x_group).max() < 1e3
    np.testing.assert_allclose(g @ x_group, many, atol=1e-9 * np.abs(p).max())


def test_cg_stops_at_the_null_space_and_solves_consistent_singular_faces():
    # a right-hand side along the null space: no curvature, CG stops where it is
    g = np.array([[1.0, 1.0], [1.0, 1.0]])
    x, _ = facesolve.solve_passive_cg(g, np.array([[1.0], [-1.0]]), np.ones((2, 1), bool))
    np.testing.assert_array_equal(x, 0.0)
    # a consistent singular face (more variables than rows): a solution, not a blow-up
    rng = np.random.default_rng(0)
    c = rng.standard_normal((20, 40))
    g, p = c.T @ c, c.T @ rng.standard_normal((20, 3))
    x, _ = facesolve.solve_passive_cg(g, p, np.ones((40, 3), dtype=bool))
    assert np.abs(x).max() < 10
    np.testing.assert_allclose(g @ x, p, atol=1e-9 * np.abs(p).max())


def test_gram_comparison_refuses_a_blow_up_along_a_null_direction():
    # without C, a huge x on a singular face can have a Gram-form F below the old one by
    # rounding alone: its error bound must refuse it
    rng = np.random.default_rng(1)
    c = rng.standard_normal((5, 8))
    a, r = c.T @ c, -(c.T @ rng.standard_normal((5, 1)))
    null = np.linalg.svd(c)[2][-1][:, None]  # c @ null = 0
    x_old = np.linalg.lstsq(c, rng.standard_normal(5), rcond=None)[0][:, None]
    x_new = x_old + 1e10 * null  # the same C x: the same F
    f_old, size_old = objective.column_objective(np, a, r, x_old, mg.Zero())
    f_new, _ = objective.column_objective(np, a, r, x_new, mg.Zero())
    assert f_new[0] < f_old[0] - 1e3  # the trap: a fake decrease, far beyond eps |F_old|
    keep, _ = objective.no_increase(np, a, r, x_old, x_new, mg.Zero())
    assert not keep[0]
    keep_same, _ = objective.no_increase(np, a, r, x_old, x_old.copy(), mg.Zero())
    assert keep_same[0]
