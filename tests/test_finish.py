"""The exact finish (msm_gpu/finish/run.py): exact answers against SciPy and brute force.

Truth comes from outside the library: scipy.optimize.nnls (on SciPy's own NNLS test
situations), scipy.optimize.lsq_linear for boxes, and enumeration of every face (sign
pattern) for l1 on small instances.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.optimize
import scipy.sparse
from conftest import objective, random_psd
from hypothesis import given, settings
from hypothesis import strategies as st

import msm_gpu as mg
from msm_gpu._input import problem as problem_module
from msm_gpu.finish import columns as finish
from msm_gpu.finish import objective as finish_objective
from msm_gpu.finish import pivoting
from msm_gpu.finish import run as finish_run
from msm_gpu.finish.face_solves import solve_passive, solve_passive_batched, solve_passive_cg

# -- SciPy's own NNLS test situations ----------------------------------------------------

scipy_tests = pytest.importorskip("scipy.optimize.tests.test_nnls")

#: name of the SciPy test -> whether its solution is unique (x comparable)
SCIPY_CASES = {
    "test_nnls": False,  # 5 x 5 of rank 2: rank-deficient, many minimisers
    "test_nnls_tall": True,  # 50 x 10, exact solution
    "test_nnls_wide": True,  # 100 x 120, exact sparse solution
    "test_nnls_inner_loop_case1": True,  # monotone regression, cond(C'C) ~ 1.5e10
    "test_nnls_inner_loop_case2": True,
    "test_nnls_gh21021_ex1": False,  # 5 x 8 with an exact solution: not unique
    "test_nnls_gh21021_ex2": True,
    "test_nnls_gh21021_ex3": True,
    "test_gh_22791_32bit": False,  # 5 x 12: not unique
}


def _scipy_problems(name):
    """(C, d, x_scipy) for every nnls call that SciPy's test ``name`` makes (it runs)."""
    captured = []
    real = scipy_tests.nnls

    def spy(a, b, *args, **kwargs):
        out = real(a, b, *args, **kwargs)
        captured.append((np.array(a, dtype=float), np.array(b, dtype=float), out[0]))
        return out

    scipy_tests.nnls = spy
    try:
        case = scipy_tests.TestNNLS()
        case.setup_method()
        getattr(case, name)()
    finally:
        scipy_tests.nnls = real
    return [(c, d, x) for c, d, x in captured if d.ndim == 1]


@pytest.mark.parametrize("name", sorted(SCIPY_CASES))
def test_scipy_nnls_situations_exact(name):
    problems = _scipy_problems(name)
    assert problems
    for c, d, x_ref in problems:
        res = mg.nnls(c, d)
        f = 0.5 * np.sum((c @ res.x - d) ** 2)
        f_ref = 0.5 * np.sum((c @ x_ref - d) ** 2)
        # relative to scipy's optimum (to 1/2 ||d||^2 1e-12 where the optimum is ~0)
        assert f - f_ref <= 1e-12 * max(f_ref, 1e-12 * 0.5 * float(d @ d))
        # res.fun is 1/2 x'Ax + x'r + 1/2 d'd: it carries the rounding of 1/2 d'd
        assert res.fun == pytest.approx(f, rel=1e-9, abs=1e-14 * float(d @ d))
        assert res.converged and res.info["kkt_residual"].max() <= 1e-6
        assert np.all(res.x >= 0)
        if SCIPY_CASES[name]:
            np.testing.assert_allclose(res.x, x_ref, rtol=0, atol=1e-8)


def test_scipy_gh20302_objective():
    # cond(C'C) ~ 1e27: the normal equations cannot give x to 1e-8, but F is exact
    ((c, d, x_ref),) = _scipy_problems("test_nnls_gh20302")
    res = mg.nnls(c, d)
    f = 0.5 * np.sum((c @ res.x - d) ** 2)
    f_ref = 0.5 * np.sum((c @ x_ref - d) ** 2)
    assert f - f_ref <= 1e-12 * f_ref
    np.testing.assert_allclose(res.x, x_ref, rtol=1e-5, atol=1e-9)  # x: 1.3e-6 here


def test_batched_nnls_matches_scipy_loop(rng):
    c = np.abs(rng.normal(size=(80, 30)))
    d = np.abs(rng.normal(size=(80, 200)))
    res = mg.nnls(c, d)
    ref = np.column_stack([scipy.optimize.nnls(c, d[:, k])[0] for k in range(d.shape[1])])
    np.testing.assert_allclose(res.x, ref, rtol=0, atol=1e-8)
    f_ref = 0.5 * np.sum((c @ ref - d) ** 2)
    assert res.fun - f_ref <= 1e-12 * f_ref
    assert res.converged and res.converged_columns.all()


# -- Box, L1, NonNegL1 --------------------------------------------------------------------


def test_box_matches_lsq_linear(rng):
    m, n, r = 40, 12, 6
    c = rng.normal(size=(m, n))
    d = rng.normal(size=(m, r)) * 3
    lb = np.array([0.0, -1.0, -np.inf, 0.5, -2.0, -0.5, -0.1, -np.inf, 0, 0, -1, -3])
    ub = np.array([1.0, 1.0, 0.0, np.inf, 2.0, 0.0, 0.1, np.inf, 5, 0.2, 1, 3])
    res = mg.least_squares(c, d, mg.Box(lb, ub))
    assert res.converged
    for k in range(r):
        ref = scipy.optimize.lsq_linear(c, d[:, k], bounds=(lb, ub), method="bvls", tol=1e-14)
        np.testing.assert_allclose(res.x[:, k], ref.x, rtol=0, atol=1e-8)
        f = 0.5 * np.sum((c @ res.x[:, k] - d[:, k]) ** 2)
        assert f <= 2 * ref.cost * (1 + 1e-12) / 2 + 1e-14


def _brute_force_l1(a, r, lam, signs):
    """Global minimiser of 1/2 x'Ax + r'x + lam |x| by enumerating every sign pattern."""
    n = len(r)
    best, best_x = np.inf, None
    for pattern in itertools.product(signs, repeat=n):
        s = np.array(pattern, dtype=float)
        free = np.flatnonzero(s)
        x = np.zeros(n)
        if free.size:
            x[free] = np.linalg.solve(a[np.ix_(free, free)], -(r[free] + lam * s[free]))
            if np.any(np.sign(x[free]) != s[free]):
                continue
        f = 0.5 * x @ a @ x + r @ x + lam * np.abs(x).sum()
        if f < best:
            best, best_x = f, x
    return best, best_x


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("nonneg", [False, True])
def test_l1_matches_brute_force(seed, nonneg):
    rng = np.random.default_rng(seed)
    n = 6
    a = random_psd(rng, n)
    r = rng.normal(size=(n, 3))
    lam = 0.3
    pen = mg.NonNegL1(lam) if nonneg else mg.L1(lam)
    res = mg.solve(a, r, pen)
    assert res.converged
    for k in range(r.shape[1]):
        best, best_x = _brute_force_l1(a, r[:, k], lam, (0, 1) if nonneg else (-1, 0, 1))
        np.testing.assert_allclose(res.x[:, k], best_x, rtol=0, atol=1e-10)
        assert objective(a, r[:, k], res.x[:, k], pen) <= best + 1e-12 * (1 + abs(best))


def test_zero_penalty_is_the_linear_solve(rng):
    a = random_psd(rng, 9)
    r = rng.normal(size=(9, 4))
    res = mg.solve(a, r)
    np.testing.assert_allclose(res.x, np.linalg.solve(a, -r), rtol=1e-10, atol=1e-12)
    assert res.converged


# -- the KKT residual -----------------------------------------------------------------------


def test_kkt_residual_nnls_closed_form(rng):
    # NonNeg: A_jj (x_j - max(x_j - g_j / A_jj, 0)) = min(g_j, A_jj x_j)
    a = random_psd(rng, 10)
    r = rng.normal(size=(10, 5))
    x = np.maximum(rng.normal(size=(10, 5)), 0.0)
    g = a @ x + r
    rho = np.minimum(g, np.diag(a)[:, None] * x)
    w = 1.0 / np.sqrt(np.diag(a))[:, None]  # measured in the equilibrated variables
    want = np.linalg.norm(w * rho, axis=0) / (
        np.linalg.norm(w * (a @ x), axis=0) + np.linalg.norm(w * r, axis=0)
    )
    np.testing.assert_allclose(
        finish_objective.kkt_residual(a, r, x, mg.NonNeg()), want, rtol=1e-12
    )


def test_kkt_residual_l1_closed_form(rng):
    a = random_psd(rng, 8)
    r = rng.normal(size=(8, 3))
    x = rng.normal(size=(8, 3)) * (rng.uniform(size=(8, 3)) < 0.5)
    lam = 0.4
    g = a @ x + r
    b = np.diag(a)[:, None]
    z = x - g / b
    soft = np.sign(z) * np.maximum(np.abs(z) - lam / b, 0.0)
    w = 1.0 / np.sqrt(b)
    want = np.linalg.norm(w * b * (x - soft), axis=0) / (
        np.linalg.norm(w * (a @ x), axis=0) + np.linalg.norm(w * r, axis=0)
    )
    np.testing.assert_allclose(finish_objective.kkt_residual(a, r, x, mg.L1(lam)), want, rtol=1e-12)


def test_reported_kkt_residual_and_converged(rng):
    a = random_psd(rng, 15)
    r = rng.normal(size=(15, 7))
    res = mg.solve(a, r, mg.NonNeg())
    want = finish_objective.kkt_residual(a, r, res.x, mg.NonNeg())
    np.testing.assert_allclose(res.info["kkt_residual"], want, rtol=1e-12, atol=1e-300)
    assert res.converged and np.array_equal(res.converged_columns, want <= 1e-6)
    # plain MSM stopped after 3 sweeps is far from KKT: the residual says so
    plain = mg.solve(a, r, mg.NonNeg(), finish=None, max_iter=3, tol=0)
    assert finish_objective.kkt_residual(a, r, plain.x, mg.NonNeg()).max() > 1e-3


def test_kkt_residual_is_scale_invariant(rng):
    a = random_psd(rng, 8)
    r = rng.normal(size=(8, 2))
    x = np.maximum(rng.normal(size=(8, 2)), 0)
    base = finish_objective.kkt_residual(a, r, x, mg.NonNeg())
    np.testing.assert_allclose(
        finish_objective.kkt_residual(7.0 * a, 7.0 * r, x, mg.NonNeg()), base
    )
    np.testing.assert_allclose(
        finish_objective.kkt_residual(a, 0.01 * r, 0.01 * x, mg.NonNeg()), base
    )
    # variables rescaled one by one (columns of C): x -> x / s, A -> S A S, r -> S r
    sc = np.exp(rng.uniform(-20, 20, size=8))
    scaled = finish_objective.kkt_residual(
        a * np.outer(sc, sc), r * sc[:, None], x / sc[:, None], mg.NonNeg()
    )
    np.testing.assert_allclose(scaled, base, rtol=1e-10)


def test_badly_scaled_columns_are_exact(rng):
    # columns of C on scales 1e-6 .. 1e6: the finish equilibrates, F and x match scipy
    c = np.abs(rng.normal(size=(60, 12))) * np.logspace(-6, 6, 12)
    d = np.abs(rng.normal(size=(60, 4)))
    res = mg.nnls(c, d)
    ref = np.column_stack([scipy.optimize.nnls(c, d[:, k])[0] for k in range(4)])
    f = 0.5 * np.sum((c @ res.x - d) ** 2, axis=0)
    f_ref = 0.5 * np.sum((c @ ref - d) ** 2, axis=0)
    assert np.all(f - f_ref <= 1e-10 * f_ref)
    np.testing.assert_allclose(
        res.x * np.logspace(-6, 6, 12)[:, None],
        ref * np.logspace(-6, 6, 12)[:, None],
        rtol=1e-6,
        atol=1e-8,
    )
    assert res.converged


# -- nonconvex polish -----------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    lam=st.floats(0.001, 0.5),
    nonneg=st.booleans(),
    p=st.sampled_from([None, 0.5, 2 / 3]),
)
def test_polish_never_increases_f(seed, lam, nonneg, p):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 12))
    a = random_psd(rng, n, rank=int(rng.integers(2, n + 6)))
    r = rng.normal(size=(n, 4)) * 2
    pen = (mg.L0(lam, lb=0.0) if nonneg else mg.L0(lam)) if p is None else mg.Lp(lam, p)
    plain = mg.solve(a, r, pen, finish=None, max_iter=200)
    polished = mg.solve(a, r, pen, max_iter=200)
    for k in range(r.shape[1]):
        f_plain = objective(a, r[:, k], plain.x[:, k], pen)
        f_pol = objective(a, r[:, k], polished.x[:, k], pen)
        assert f_pol <= f_plain + 1e-12 * (1 + abs(f_plain))
    # whatever was accepted is still a fixed point of the MSM map (to the stopping rule)
    again = mg.solve(a, r, pen, x0=polished.x, finish=None, max_iter=1, tol=0)
    changed = np.flatnonzero(np.any(polished.x != plain.x, axis=0))
    for k in changed:
        step = np.linalg.norm(again.x[:, k] - polished.x[:, k])
        assert step <= 1e-6 * max(1.0, np.linalg.norm(polished.x[:, k]))


def test_l0_polish_gives_least_squares_on_the_support(rng):
    a = random_psd(rng, 10)
    r = rng.normal(size=(10, 5)) * 3
    pen = mg.L0(0.05)
    res = mg.solve(a, r, pen, max_iter=30)  # a short MSM run, then the polish
    for k in range(r.shape[1]):
        s = np.flatnonzero(res.x[:, k])
        if res.info["finish_accepted"][k] and s.size:
            xs = np.linalg.solve(a[np.ix_(s, s)], -r[s, k])
            np.testing.assert_allclose(res.x[s, k], xs, rtol=1e-9, atol=1e-10)


# -- dtypes, options, the plain method ------------------------------------------------------


def gaussian_peaks(m, n):
    """Columns of Gaussian peaks: cond(C'C) ~ 1e6 (bench_nnls's spectra)."""
    t = np.linspace(0, 1, m)[:, None]
    return np.exp(-0.5 * ((t - np.linspace(0.02, 0.98, n)) / 0.02) ** 2)


@pytest.mark.parametrize("penalty", [mg.NonNeg(), mg.Box(0.0, 0.8)])
@pytest.mark.parametrize("kind", ["dense", "sparse", "one_column"])
def test_float32_inputs_get_the_answer_of_their_data(rng, monkeypatch, penalty, kind):
    # the finish solves the float32 data's problem with C'C and C'D formed in float64:
    # x is the exact answer (SciPy in float64 on the same float32 numbers) to float32
    # rounding, even at cond(C'C) ~ 1e6 (the float32 Gram matrix alone gave x to ~1e-2)
    monkeypatch.setattr(problem_module, "FINE_BLOCK_ENTRIES", 1000)  # several D blocks
    c = gaussian_peaks(200, 40).astype(np.float32)
    x_true = np.abs(rng.normal(size=(40, 12))) * (rng.uniform(size=(40, 12)) < 0.5)
    d = (c @ x_true + 0.01 * rng.normal(size=(200, 12))).astype(np.float32)
    if kind == "one_column":
        d = d[:, 0]
    c_in, d_in = (
        (scipy.sparse.csr_matrix(c), scipy.sparse.csr_matrix(d)) if kind == "sparse" else (c, d)
    )
    res = mg.least_squares(c_in, d_in, penalty)
    assert res.x.dtype == np.float32 and res.converged
    c64, d64 = c.astype(np.float64), d.astype(np.float64).reshape(200, -1)
    ub = float(penalty.ub)  # NonNeg: inf
    ref = np.column_stack(
        [
            scipy.optimize.lsq_linear(c64, d64[:, k], bounds=(0, ub), tol=1e-14).x
            for k in range(d64.shape[1])
        ]
    )
    x = res.x.astype(np.float64).reshape(40, -1)
    np.testing.assert_allclose(x, ref, rtol=0, atol=1e-6 * np.abs(ref).max())


def test_float64_gram_only_for_a_finished_float32_least_squares(rng):
    c = rng.uniform(size=(30, 6))
    d = rng.uniform(size=(30, 4))
    args = (mg.NonNeg(), None, "cpu")
    assert problem_module.prepare_least_squares(c, d, *args, fine_gram=True).fine is None
    c32, d32 = c.astype(np.float32), d.astype(np.float32)
    assert problem_module.prepare_least_squares(c32, d32, *args).fine is None
    prob = problem_module.prepare_least_squares(c32, d32, *args, fine_gram=True)
    a64, r64 = prob.fine
    assert a64.dtype == r64.dtype == np.float64 and r64.shape == prob.r.shape
    # the same rescaled problem, formed in float64 from the same float32 numbers
    np.testing.assert_allclose(a64, prob.a, rtol=1e-6)
    np.testing.assert_allclose(r64, prob.r, rtol=1e-6, atol=1e-6)


def test_finish_none_is_the_plain_method(rng):
    a = random_psd(rng, 12)
    r = rng.normal(size=(12, 3))
    whole = mg.solve(a, r, mg.NonNeg(), finish=None, tol=0, max_iter=6)
    x = None
    for _ in range(6):  # six single sweeps chained by hand
        x = mg.solve(a, r, mg.NonNeg(), finish=None, tol=0, max_iter=1, x0=x).x
    np.testing.assert_allclose(whole.x, x, rtol=1e-13, atol=1e-15)
    assert whole.n_iter == 6 and len(whole.objective) == 7
    assert "kkt_residual" not in whole.info and "finish" not in whole.timings


def test_tol_zero_runs_plain_iterations_unless_exact_is_asked(rng):
    # solve's docstring: tol=0 runs exactly max_iter iterations; "auto" adds no finish
    # then (a KKT residual of 0 is no target), "exact" still finishes
    a = random_psd(rng, 12)
    r = rng.normal(size=(12, 3))
    x0 = np.abs(rng.normal(size=(12, 3)))
    plain = mg.solve(a, r, mg.NonNeg(), x0=x0, finish=None, tol=0, max_iter=7)
    auto = mg.solve(a, r, mg.NonNeg(), x0=x0, tol=0, max_iter=7)  # finish="auto"
    np.testing.assert_array_equal(auto.x, plain.x)
    assert auto.n_iter == 7 and list(auto.n_iter_columns) == [7, 7, 7]
    assert "kkt_residual" not in auto.info and "finish" not in auto.timings
    exact = mg.solve(a, r, mg.NonNeg(), x0=x0, finish="exact", tol=0, max_iter=7)
    assert "finish" in exact.timings and exact.info["finish_method"] == "active_set"
    assert exact.n_iter == 7  # tol = 0: the sweeps asked for, before the finish
    ref = scipy.optimize.minimize(
        lambda x: 0.5 * x @ a @ x + r[:, 0] @ x,
        x0[:, 0],
        jac=lambda x: a @ x + r[:, 0],
        bounds=[(0, None)] * 12,
        method="L-BFGS-B",
        options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 10000},
    )
    f = 0.5 * exact.x[:, 0] @ a @ exact.x[:, 0] + r[:, 0] @ exact.x[:, 0]
    assert f <= ref.fun + 1e-9 * max(1.0, abs(ref.fun))


def test_bad_finish_value(rng):
    a = random_psd(rng, 4)
    with pytest.raises(ValueError, match="finish"):
        mg.solve(a, np.ones(4), finish="fast")
    with pytest.raises(ValueError, match="finish"):
        mg.nnls(a, np.ones(4), finish=True)


def test_exact_and_auto_agree(rng):
    c = np.abs(rng.normal(size=(50, 25)))
    d = np.abs(rng.normal(size=(50, 10)))
    auto = mg.nnls(c, d, finish="auto")
    exact = mg.nnls(c, d, finish="exact")
    np.testing.assert_allclose(auto.x, exact.x, atol=1e-10)
    assert exact.info["finish_method"] == "active_set"  # NNLS, n <= ACTIVE_SET_MAX_N


def test_inputs_untouched(rng):
    c = np.abs(rng.normal(size=(30, 10)))
    d = np.abs(rng.normal(size=(30, 4)))
    x0 = np.ones((10, 4))
    copies = [c.copy(), d.copy(), x0.copy()]
    mg.nnls(c, d, x0=x0)
    for orig, kept in zip((c, d, x0), copies, strict=True):
        np.testing.assert_array_equal(orig, kept)


# -- the face solvers ---------------------------------------------------------------------


def test_face_solvers_agree(rng):
    k, c = 14, 300
    g = random_psd(rng, k)
    p = rng.normal(size=(k, c))
    passive = rng.uniform(size=(k, c)) < 0.6
    passive[:, :100] = passive[:, :1]  # one large group sharing a free set
    ref = np.zeros((k, c))
    for j in range(c):
        f = np.flatnonzero(passive[:, j])
        ref[f, j] = np.linalg.solve(g[np.ix_(f, f)], p[f, j])
    np.testing.assert_allclose(solve_passive(g, p, passive), ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(solve_passive_batched(g, p, passive), ref, rtol=1e-9, atol=1e-11)
    x_cg, _ = solve_passive_cg(g, p, passive, rtol=1e-14, max_iter=200)
    np.testing.assert_allclose(x_cg, ref, rtol=1e-8, atol=1e-10)


def test_singular_face_gives_a_minimiser(rng):
    # rank-deficient G = C'C: on a singular face any minimiser will do (rhs in the range)
    cmat = rng.normal(size=(4, 8))
    g = cmat.T @ cmat
    p = cmat.T @ rng.normal(size=(4, 20))
    passive = np.ones((8, 20), dtype=bool)
    for x in (solve_passive_batched(g, p, passive), solve_passive(g, p, passive)):
        np.testing.assert_allclose(g @ x, p, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("method", ["batched", "cg"])
def test_finish_columns_other_face_solvers(rng, method):
    c = np.abs(rng.normal(size=(70, 30)))
    d = np.abs(rng.normal(size=(70, 12)))
    a, r = c.T @ c, -c.T @ d
    x, _ = finish.finish_columns(a, r, np.zeros_like(r), mg.NonNeg(), method=method, tol=1e-6)
    ref = np.column_stack([scipy.optimize.nnls(c, d[:, k])[0] for k in range(12)])
    np.testing.assert_allclose(x, ref, rtol=0, atol=1e-8)


def test_large_n_uses_cg_and_is_exact(rng, monkeypatch):
    # the host's active set takes n <= ACTIVE_SET_MAX_N: lowered here to test CG at n = 420
    monkeypatch.setattr(finish, "ACTIVE_SET_MAX_N", finish.DIRECT_MAX_N)
    n = finish.DIRECT_MAX_N + 20
    c = np.abs(rng.normal(size=(n + 100, n)))
    d = np.abs(rng.normal(size=(n + 100, 3)))
    # a box whose upper bound stays inactive: NNLS's answer, but not the NNLS active set
    res = mg.least_squares(c, d, mg.Box(0.0, 1e3), representation="gram")
    assert res.info["finish_method"] == "cg" and res.converged
    ref = np.column_stack([scipy.optimize.nnls(c, d[:, k])[0] for k in range(3)])
    assert ref.max() < 1e3
    np.testing.assert_allclose(res.x, ref, rtol=0, atol=1e-8)


def test_face_method_per_backend():
    lim_host, lim_dev = finish.DIRECT_MAX_N, finish.DIRECT_MAX_N_DEVICE
    assert lim_dev < lim_host
    n = (lim_host + lim_dev) // 2  # factorised on the host, CG on a GPU
    assert finish.face_method("auto", n, on_host=True) == "direct"
    assert finish.face_method("auto", n, on_host=False) == "cg"
    assert finish.face_method("auto", lim_dev, on_host=False) == "direct"
    assert finish.face_method("exact", 10 * lim_host, on_host=False) == "direct"
    # every convex h on the host up to ACTIVE_SET_MAX_N: the per-column active set,
    # whatever finish; the nonconvex polish factorises its supports
    lim_as = finish.ACTIVE_SET_MAX_N
    for mode in ("auto", "exact"):
        for pen in (mg.NonNeg(), mg.Box(0.0, np.inf), mg.Box(0.0, 1.0), mg.NonNegL1(0.1)):
            assert finish.face_method(mode, lim_as, True, pen) == "active_set"
        assert finish.face_method(mode, 5, True, mg.L1(0.1)) == "active_set"
        assert finish.face_method(mode, 5, True, mg.Zero()) == "active_set"
        assert finish.face_method(mode, 5, False, mg.NonNeg()) == "direct"  # GPU
        assert finish.face_method(mode, 5, True, mg.L0(0.1)) == "direct"
    assert finish.face_method("auto", lim_as + 1, True, mg.NonNeg()) == "cg"
    assert finish.face_method("auto", lim_as + 1, True, mg.L1(0.1)) == "cg"


# -- GPU --------------------------------------------------------------------------------------


def _gaussian_peaks(rng, m=300, n=60, r=200):
    """Overlapping Gaussian peaks (benchmarks/bench_nnls.py "spectra"): ill-conditioned,
    so the pivoting leaves some columns unfinished after its rounds."""
    t = np.linspace(0, 1, m)[:, None]
    c = np.exp(-0.5 * ((t - np.linspace(0.02, 0.98, n)) / 0.02) ** 2)
    x = np.abs(rng.normal(size=(n, r))) * (rng.uniform(size=(n, r)) < 0.3)
    return c, c @ x + 0.01 * rng.normal(size=(m, r))


class _DeviceLikeSolver(pivoting.FaceSolver):
    """The device road (array-API pivoting and active set) on NumPy arrays."""

    def __init__(self, xp, a, method):
        super().__init__(xp, a, method)
        self.on_host = False


@pytest.mark.parametrize("tail", ["nnls", "pwl", "array_api"])
def test_device_road_stragglers_match_scipy(rng, monkeypatch, tail):
    """The columns the pivoting leaves go to the host's NNLS active set (GPU NNLS,
    factorised faces), to the host's active set for every convex h (n <= PWL_MAX_N) or stay
    in the array-API active set: all reach SciPy's answer, and only the stragglers are
    copied to the host."""
    monkeypatch.setattr(finish, "FaceSolver", _DeviceLikeSolver)
    if tail != "nnls":
        monkeypatch.setattr(finish, "_tail_on_host", lambda *args: False)
    if tail == "array_api":
        monkeypatch.setattr(finish, "PWL_MAX_N", 0)
    sizes = []
    real, real_pwl = finish.nnls_active_set, finish.pwl_active_set

    def spy(g, p, x0=None, **kw):
        sizes.append(p.shape[1])
        return real(g, p, x0, **kw)

    def spy_pwl(g, p, faces, x0, **kw):
        sizes.append(p.shape[1])
        return real_pwl(g, p, faces, x0, **kw)

    monkeypatch.setattr(finish, "nnls_active_set", spy)
    monkeypatch.setattr(finish, "pwl_active_set", spy_pwl)
    c, d = _gaussian_peaks(rng)
    a, r = c.T @ c, -(c.T @ d)
    x, info = finish.finish_columns(a, r, np.zeros_like(r), mg.NonNeg(), method="direct", tol=1e-6)
    assert info["finish_rounds"] == pivoting.MAX_ROUNDS  # the pivoting did leave columns
    if tail != "array_api":
        assert len(sizes) == 1 and 0 < sizes[0] < r.shape[1]
        # the pivoting's solves alone (its start and one per round): none after it
        assert info["finish_face_solves"] == pivoting.MAX_ROUNDS + 1
    else:
        assert sizes == [] and info["finish_face_solves"] > pivoting.MAX_ROUNDS + 1
    ref = np.column_stack([scipy.optimize.nnls(c, d[:, k])[0] for k in range(d.shape[1])])

    def f_columns(v):
        return 0.5 * np.sum(v * (a @ v), axis=0) + np.sum(v * r, axis=0)

    f, f_ref = f_columns(x), f_columns(ref)
    assert np.all(f <= f_ref + 1e-12 * np.abs(f_ref))
    np.testing.assert_allclose(x, ref, rtol=0, atol=1e-8 * np.abs(ref).max())


@pytest.mark.parametrize("method", ["direct", "cg"])
def test_device_road_on_scipys_nnls_situations(monkeypatch, method):
    """The finish a GPU runs (array-API pivoting, padded batched or CG face solves, the
    host tail) on NumPy arrays, on every SciPy NNLS situation: SciPy's objective."""
    monkeypatch.setattr(finish, "FaceSolver", _DeviceLikeSolver)
    monkeypatch.setattr(finish_run, "face_method", lambda *args, **kwargs: method)
    for name in [*sorted(SCIPY_CASES), "test_nnls_gh20302"]:
        for c, d, x_ref in _scipy_problems(name):
            res = mg.nnls(c, d, representation="gram")  # a GPU keeps the Gram form
            assert res.info["finish_method"] == method
            f = 0.5 * np.sum((c @ res.x - d) ** 2)
            f_ref = 0.5 * np.sum((c @ x_ref - d) ** 2)
            assert f - f_ref <= 1e-12 * max(f_ref, 1e-12 * 0.5 * float(d @ d)), name
            assert res.converged and np.all(res.x >= 0), name


@pytest.mark.parametrize("penalty", [mg.Box(0.0, 0.3), mg.L1(0.5), mg.NonNegL1(0.5)])
def test_device_road_other_penalties_match_the_host(rng, monkeypatch, penalty):
    """Box and l1 faces through the GPU's finish (on NumPy arrays) reach the host's F."""
    c = np.abs(rng.normal(size=(60, 40)))
    a, r = c.T @ c, -(c.T @ np.abs(rng.normal(size=(60, 300))))
    host = mg.solve(a, r, penalty)
    monkeypatch.setattr(finish, "FaceSolver", _DeviceLikeSolver)
    device = mg.solve(a, r, penalty)
    assert device.converged and host.converged
    assert device.fun <= host.fun + 1e-12 * abs(host.fun)
    np.testing.assert_allclose(device.x, host.x, rtol=0, atol=1e-8 * np.abs(host.x).max())


def test_tail_on_host_only_for_device_nnls_with_factorised_faces(rng):
    a = random_psd(rng, 8)
    n_dev = finish.DIRECT_MAX_N_DEVICE
    device = _DeviceLikeSolver(np, a, "direct")
    host = pivoting.FaceSolver(np, a, "direct")
    cg = _DeviceLikeSolver(np, a, "cg")
    locked = np.zeros((8, 3), dtype=bool)
    nonneg = mg.NonNeg()
    assert finish._tail_on_host(device, nonneg, None, 8)
    assert finish._tail_on_host(device, mg.Box(0.0, np.inf), None, n_dev)
    assert not finish._tail_on_host(device, nonneg, None, n_dev + 1)
    assert not finish._tail_on_host(host, nonneg, None, 8)
    assert not finish._tail_on_host(cg, nonneg, None, 8)
    assert not finish._tail_on_host(device, nonneg, locked, 8)  # the L0/Lp polish
    assert not finish._tail_on_host(device, mg.Box(0.0, 1.0), None, 8)
    assert not finish._tail_on_host(device, mg.L1(0.5), None, 8)


@pytest.mark.gpu
def test_finish_on_cupy_hands_its_stragglers_to_the_host(rng):
    from msm_gpu.backends.cuda.backend import cuda_unavailable_reason

    reason = cuda_unavailable_reason()
    if reason is not None:
        pytest.skip(f"no usable CUDA GPU: {reason}")
    import cupy

    c, d = _gaussian_peaks(rng, r=400)
    gpu = mg.nnls(cupy.asarray(c), cupy.asarray(d))
    assert gpu.backend == "cuda" and gpu.info["finish_method"] == "direct" and gpu.converged
    assert gpu.info["finish_rounds"] == pivoting.MAX_ROUNDS  # the pivoting left columns
    # the pivoting's solves on the GPU (its start and one per round), the rest on the host
    assert gpu.info["finish_face_solves"] == gpu.info["finish_rounds"] + 1
    ref = np.column_stack([scipy.optimize.nnls(c, d[:, k])[0] for k in range(d.shape[1])])
    np.testing.assert_allclose(gpu.x.get(), ref, rtol=0, atol=1e-8 * np.abs(ref).max())


@pytest.mark.gpu
def test_finish_on_cupy_with_cg_faces_matches_scipy(rng):
    from msm_gpu.backends.cuda.backend import cuda_unavailable_reason

    reason = cuda_unavailable_reason()
    if reason is not None:
        pytest.skip(f"no usable CUDA GPU: {reason}")
    import cupy

    n = finish.DIRECT_MAX_N_DEVICE + 40
    c = np.abs(rng.normal(size=(n + 60, n)))
    d = np.abs(rng.normal(size=(n + 60, 6)))
    gpu = mg.nnls(cupy.asarray(c), cupy.asarray(d))
    assert gpu.backend == "cuda" and gpu.info["finish_method"] == "cg" and gpu.converged
    ref = np.column_stack([scipy.optimize.nnls(c, d[:, k])[0] for k in range(6)])
    np.testing.assert_allclose(gpu.x.get(), ref, rtol=0, atol=1e-8)


@pytest.mark.gpu
def test_finish_on_cupy_matches_cpu(rng):
    from msm_gpu.backends.cuda.backend import cuda_unavailable_reason

    reason = cuda_unavailable_reason()
    if reason is not None:
        pytest.skip(f"no usable CUDA GPU: {reason}")
    import cupy

    c = np.abs(rng.normal(size=(200, 40)))
    d = np.abs(rng.normal(size=(200, 500)))
    cpu = mg.nnls(c, d)
    gpu = mg.nnls(cupy.asarray(c), cupy.asarray(d))
    assert gpu.backend == "cuda" and gpu.converged
    np.testing.assert_allclose(gpu.x.get(), cpu.x, rtol=0, atol=1e-8)
