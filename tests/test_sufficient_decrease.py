"""The paper's theorems on random instances: F(x_{k+1}) <= F(x_k) - delta/2 ||x_{k+1} - x_k||^2."""

from __future__ import annotations

import numpy as np
from conftest import objective, random_psd
from hypothesis import given, settings
from hypothesis import strategies as st

import msm_gpu as mg
from msm_gpu.solvers.splitting import convergence_delta

CONVEX = [
    mg.Zero(),
    mg.NonNeg(),
    mg.Box(-0.5, 0.5),
    mg.L1(0.3),
    mg.NonNegL1(0.1),
]
NONCONVEX = [mg.L0(0.1), mg.L0(0.05, lb=0.0), mg.Lp(0.2, 0.5), mg.Lp(0.2, 2 / 3)]


def _iterates(a, r, pen, omega, theta, x0, n_iter, panel):
    xs = [x0]
    res = mg.solve(
        a,
        r,
        pen,
        omega=omega,
        theta=theta,
        x0=x0,
        tol=0,
        max_iter=n_iter,
        panel=panel,
        callback=lambda info: xs.append(info.x),
        finish=None,
    )
    return res, xs


def _check_decrease(a, r, pen, omega, theta, x0, panel):
    # theta is relative to the scale of A: B = L + (D + theta mean(diag A) I) / omega
    theta_abs = theta * float(np.mean(np.diag(a)))
    delta = convergence_delta(np.diag(a), omega, theta_abs, pen.is_convex)
    assert delta > 0
    res, xs = _iterates(a, r, pen, omega, theta, x0, 8, panel)
    np.testing.assert_allclose(res.info["theta_abs"], theta_abs, rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(res.info["delta"], delta, rtol=1e-9, atol=1e-12 * abs(theta_abs))
    f = [objective(a, r, x, pen) for x in xs]
    for k in range(1, len(xs)):
        step2 = float(np.sum((xs[k] - xs[k - 1]) ** 2))
        bound = f[k - 1] - 0.5 * delta * step2
        assert f[k] <= bound + 1e-9 * max(1.0, abs(f[k - 1])), (k, f[k], bound)
    # the tracked history agrees with the exact objective (when X_0 is feasible)
    if np.isfinite(f[0]):
        np.testing.assert_allclose(res.objective, f, rtol=1e-9, atol=1e-9)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    n=st.integers(1, 40),
    r=st.integers(1, 5),
    pen=st.sampled_from(CONVEX),
    omega=st.floats(0.05, 1.95),
    theta=st.floats(0.0, 1.0),
    panel=st.sampled_from([None, 1, 3, 16]),
)
def test_convex_sufficient_decrease(seed, n, r, pen, omega, theta, panel):
    rng = np.random.default_rng(seed)
    a = random_psd(rng, n, rank=int(rng.integers(1, n + 6)))
    a += 1e-3 * np.eye(n)  # keep min diag(A) > 0 so that theta = 0 is allowed
    rr = rng.normal(size=(n, r)) * 3
    x0 = pen.prox(-rng.normal(size=(n, r)), np.ones((n, r)))  # a feasible start
    _check_decrease(a, rr, pen, omega, theta, x0, panel)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    n=st.integers(1, 40),
    r=st.integers(1, 5),
    pen=st.sampled_from(NONCONVEX),
    omega=st.floats(0.05, 1.0),
    theta=st.floats(0.01, 1.0),
    panel=st.sampled_from([None, 1, 5, 16]),
)
def test_nonconvex_sufficient_decrease(seed, n, r, pen, omega, theta, panel):
    rng = np.random.default_rng(seed)
    a = random_psd(rng, n, rank=int(rng.integers(1, n + 6)))
    rr = rng.normal(size=(n, r)) * 3
    x0 = pen.prox(-rng.normal(size=(n, r)) * 2, np.ones((n, r)))
    _check_decrease(a, rr, pen, omega, theta, x0, panel)


def test_objective_converges_monotonically_to_optimum(rng):
    # convex case: F(x_k) decreases to F* (Q-linear rate, paper Theorem 2)
    a = random_psd(rng, 30)
    r = rng.normal(size=(30, 2))
    res = mg.solve(a, r, mg.NonNeg(), tol=0, max_iter=300, finish=None)
    gaps = res.objective - res.objective[-1]
    assert np.all(np.diff(res.objective) <= 1e-12)
    assert gaps[50] < 1e-3 * gaps[0]
