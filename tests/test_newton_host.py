"""The compiled proximal Newton road (newton_host.py / newton_kernels.py) against the NumPy
loop of newton.py (same iteration, Hessians formed and inner solves by mg.solve), and its
safeguard on its own.

The NumPy loop is checked against scikit-learn, skglm and closed forms in test_newton.py
(which now runs the compiled road for every exact-Hessian CPU call); here the two roads
must reach the same objective on every kind of input the compiled one reads differently:
dense and sparse X, intercepts, sample weights, several problems, both losses, bounds,
float32.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import msm_gpu as mg
from msm_gpu.glm import kernels as kernels
from msm_gpu.glm import newton
from msm_gpu.glm.newton_host import _design_by_columns
from msm_gpu.penalties.rows import RowPenalty


def data(seed, m=120, n=25, density=None, r=None):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, n))
    if density is not None:
        x = sp.random(m, n, density=density, random_state=seed, format="csr") * 3.0
    w = np.zeros(n)
    w[:5] = rng.standard_normal(5)
    z = np.asarray(x @ w).ravel()
    cols = 1 if r is None else r
    noise = rng.standard_normal((m, cols))
    y = np.where(z[:, None] + noise > 0.2, 1.0, -1.0)
    counts = rng.poisson(np.exp(0.3 * np.tanh(z))[:, None] * np.ones((1, cols))).astype(float)
    if r is None:
        y, counts = y[:, 0], counts[:, 0]
    return x, y, counts


def direct_objective_of(loss, penalty, x):
    """F per problem from the formulas (float64, NumPy): weighted mean loss + h."""
    coef = np.asarray(x, dtype=np.float64).reshape(loss.n_coef, -1)
    w, b = (coef[:-1], coef[-1]) if loss.fit_intercept else (coef, 0.0)
    z = np.asarray(loss.X @ w) + b
    y = np.asarray(loss.Y, dtype=np.float64).reshape(z.shape)
    if isinstance(loss, mg.Logistic):
        per_sample = np.logaddexp(0.0, -np.where(y == 0, -1.0, y) * z)
    else:
        per_sample = np.exp(z) - y * z
    s = loss.sample_shares()[:, None]
    h = 0.0 if penalty is None else np.sum(penalty.value(w), axis=0)
    return np.sum(s * per_sample, axis=0) + h


def both_roads(loss, penalty, **kw):
    """(compiled road's result, NumPy loop's result), each checked to be the road it says:
    the compiled one builds a HostNewtonMethod, the NumPy loop does not."""
    out = {}
    real = newton.HostNewtonMethod
    for host in (True, False):
        built = []
        old = newton.HOST_KERNELS
        newton.HOST_KERNELS = host
        newton.HostNewtonMethod = lambda *a, _b=built, **k: _b.append(1) or real(*a, **k)
        try:
            out[host] = mg.minimize(loss, penalty, **kw)
        finally:
            newton.HOST_KERNELS = old
            newton.HostNewtonMethod = real
        assert bool(built) == host, "the road taken is not the one asked for"
    return out[True], out[False]


CASES = [
    ("dense logistic l1", dict(), "logistic", mg.L1(0.01), {}),
    ("sparse logistic l1", dict(density=0.15), "logistic", mg.L1(0.003), {}),
    ("no intercept", dict(), "logistic", mg.L1(0.01), {"fit_intercept": False}),
    ("weights", dict(), "logistic", mg.L1(0.005), {"weights": True}),
    ("three problems", dict(r=3), "logistic", mg.L1(0.01), {}),
    ("sparse three problems", dict(density=0.2, r=3), "logistic", mg.L1(0.005), {}),
    ("poisson l1", dict(), "poisson", mg.L1(0.01), {}),
    ("sparse poisson", dict(density=0.2), "poisson", mg.L1(0.002), {}),
    ("nonneg l1", dict(), "logistic", mg.NonNegL1(0.002), {}),
    ("box", dict(), "logistic", mg.Box(-0.3, 0.3), {}),
    ("no penalty", dict(n=6), "poisson", None, {}),
]


@pytest.mark.parametrize("name, shape, loss_name, penalty, opts", CASES, ids=[c[0] for c in CASES])
def test_compiled_road_reaches_the_numpy_loops_objective(name, shape, loss_name, penalty, opts):
    x, y, counts = data(3, **shape)
    kw = {"fit_intercept": opts.get("fit_intercept", True)}
    if opts.get("weights"):
        kw["sample_weight"] = np.random.default_rng(1).uniform(0.1, 3.0, x.shape[0])
    loss = (mg.Logistic if loss_name == "logistic" else mg.Poisson)(
        x, y if loss_name == "logistic" else counts, **kw
    )
    host, numpy_loop = both_roads(loss, penalty, tol=1e-10, max_iter=200)
    assert host.converged and numpy_loop.converged, (host.message, numpy_loop.message)
    f_host, f_np = host.info["fun_columns"], numpy_loop.info["fun_columns"]
    np.testing.assert_allclose(f_host, f_np, rtol=1e-11, atol=1e-14)
    np.testing.assert_allclose(host.x, numpy_loop.x, atol=1e-6)
    # the F the compiled road tracks (from its running X W) is F at its x, computed here
    np.testing.assert_allclose(
        f_host, direct_objective_of(loss, penalty, host.x), rtol=1e-12, atol=1e-15
    )
    assert host.objective[-1] == pytest.approx(host.fun, rel=1e-12)
    assert np.all(np.diff(host.objective) <= 1e-12 * np.abs(host.objective[:-1]))
    assert host.info["hessian"] == "exact" and host.info["inner_iterations"] > 0


@pytest.mark.parametrize("penalty", [mg.L0(0.01), mg.Lp(0.01, 0.5)])
def test_nonconvex_penalties_reach_a_fixed_point_with_monotone_objective(penalty):
    x, y, _ = data(5)
    res = mg.minimize(mg.Logistic(x, y), penalty, tol=1e-10, max_iter=300)
    assert res.converged, res.message
    assert np.all(np.diff(res.objective) <= 1e-12 * np.abs(res.objective[:-1]))
    assert res.info["optimality"].max() <= 1e-10 * max(1.0, np.linalg.norm(res.x))


def test_float32_matches_float64_to_float32_accuracy():
    x, y, _ = data(6, density=0.2)
    f64 = mg.minimize(mg.Logistic(x, y), mg.L1(0.003), tol=1e-9)
    f32 = mg.minimize(mg.Logistic(x.astype(np.float32), y.astype(np.float32)), mg.L1(0.003))
    assert f32.x.dtype == np.float32 and f32.converged
    assert f32.fun == pytest.approx(f64.fun, rel=1e-5)


def test_working_set_off_gives_the_same_answer():
    x, y, _ = data(8, n=40)
    ws = mg.minimize(mg.Logistic(x, y), mg.L1(0.01), tol=1e-10)
    full = mg.minimize(mg.Logistic(x, y), mg.L1(0.01), tol=1e-10, working_set=False)
    assert ws.fun == pytest.approx(full.fun, rel=1e-12)
    assert max(ws.info["working_set_size"]) < max(full.info["working_set_size"]) == 41


# -- the safeguard, reached directly (the line search given no trial) ----------------------


def kernel_state(seed=2):
    x, y, _ = data(seed, m=60, n=8)
    loss = mg.Logistic(x, y)
    pen = RowPenalty(mg.L1(0.01), loss.n_coef, free=[loss.n_coef - 1])
    design = _design_by_columns(loss, np.float64)
    m, n = x.shape[0], loss.n_coef
    w = np.random.default_rng(seed).standard_normal((1, n))
    z = np.ascontiguousarray((design["matrix"] @ w[0])[None, :])
    y2 = np.ascontiguousarray(loss._y_host[None, :])
    s = np.full(m, 1.0 / m)
    params = (int(pen.code), pen.lam, pen.lb, pen.ub, 0.0)
    meas = [np.empty((1, m))] + [np.empty((1, n)) for _ in range(4)]
    f = np.empty(1)
    norms = np.empty(1), np.empty(1)
    kernels.measure_columns(*design["args"], 0, y2, s, z, w, f, 0, 1, *params, *meas, *norms)
    return design, y2, s, z, w, f, params, meas


def run_step(state, max_halvings, max_doublings):
    design, y2, s, z, w, f, params, meas = state
    stats = np.zeros((1, 5), dtype=np.int64)
    norms = np.empty(1), np.empty(1)
    kernels.step_columns(
        *design["args"], 0, y2, s, z, w, f, np.zeros(1, dtype=np.int64), 0, 1, *params, *meas,
        w.shape[1] - 1, True, 32, 2, np.array([1e-3]), 100, 1e-8, 1.0, 1e-14, 1e-4,
        max_halvings, max_doublings, np.full(1, 10), stats, *norms,
    )  # fmt: skip
    return stats[0]


def direct_objective(state):
    design, y2, s, _, w, _, params, _ = state
    z = design["matrix"] @ w[0]
    return np.sum(s * np.logaddexp(0.0, -y2[0] * z)) + 0.01 * np.abs(w[0, :-1]).sum()


def test_safeguard_decreases_f_when_the_line_search_gives_up():
    state = kernel_state()
    f0 = direct_objective(state)
    stats = run_step(state, max_halvings=-1, max_doublings=60)  # no Armijo trial at all
    assert stats[4] == kernels.STEP_FALLBACK and stats[1] == 0 and stats[2] >= 1
    f1 = direct_objective(state)
    assert f1 < f0
    assert state[5][0] == pytest.approx(f1, rel=1e-13)  # the F it reports is F at new W
    z_direct = state[0]["matrix"] @ state[4][0]
    np.testing.assert_allclose(state[3][0], z_direct, rtol=1e-12, atol=1e-12)


def test_a_problem_with_no_trial_left_is_stuck_and_unchanged():
    state = kernel_state()
    w_before, f_before = state[4].copy(), state[5].copy()
    stats = run_step(state, max_halvings=-1, max_doublings=0)
    assert stats[4] == kernels.STEP_STUCK
    np.testing.assert_array_equal(state[4], w_before)
    np.testing.assert_array_equal(state[5], f_before)


def test_newton_step_moves_z_with_w():
    state = kernel_state(4)
    stats = run_step(state, max_halvings=30, max_doublings=60)
    assert stats[4] == kernels.STEP_NEWTON and stats[0] >= 1
    np.testing.assert_allclose(state[3][0], state[0]["matrix"] @ state[4][0], atol=1e-12)
    assert state[5][0] == pytest.approx(direct_objective(state), rel=1e-13)


# -- Anderson acceleration of the inner sweeps -----------------------------------------------


def sparse_model(seed=0, m=300, n=80):
    """A random l1 model Q(Y) = <G, Y> + 1/2 Y' X' diag(c) X Y + lam |Y|_1 (W = 0)."""
    rng = np.random.default_rng(seed)
    x = sp.random(m, n, density=0.08, random_state=seed, format="csc")
    x = x + sp.csc_matrix(rng.standard_normal((m, 1)) * np.ones((1, n)) * 0.3)  # correlated
    x = sp.csc_matrix(x)
    x.sort_indices()
    curv = rng.uniform(0.05, 0.25, m) / m
    grad = rng.standard_normal(n) * 0.02
    rows = np.arange(n, dtype=np.int64)
    hdiag = np.asarray(x.multiply(x).T @ curv).ravel()
    pen = (1, np.full(n, 2e-3), np.full(n, -np.inf), np.full(n, np.inf), 0.0)
    args = (x.indptr.astype(np.uint64), x.indices.astype(np.uint64), x.data, curv, grad, *pen)
    return x, curv, grad, rows, hdiag, pen, args


def model_value(x, curv, grad, y, lam=2e-3):
    u = x @ y
    return grad @ y + 0.5 * np.sum(curv * u * u) + lam * np.abs(y).sum()


def test_anderson_sweeps_decrease_the_model_and_reach_the_plain_sweeps_answer():
    x, curv, grad, rows, hdiag, pen, args = sparse_model()
    b = hdiag + 1e-8 * hdiag.mean()
    values = []
    for k in range(1, 40):  # every sweep and every accepted extrapolation lowers Q
        y = np.zeros(len(rows))
        kernels._sweeps_sparse(*args, rows, y, b, 0.0, k, 5)
        values.append(model_value(x, curv, grad, y))
    assert np.all(np.diff(values) <= 1e-15 * np.abs(values[:-1]))
    plain, fast = np.zeros(len(rows)), np.zeros(len(rows))
    n_plain = kernels._sweeps_sparse(*args, rows, plain, b, 1e-12, 50000, 0)
    n_fast = kernels._sweeps_sparse(*args, rows, fast, b, 1e-12, 50000, 5)
    np.testing.assert_allclose(fast, plain, atol=1e-9 * np.abs(plain).max())
    assert n_fast < n_plain < 50000  # (plain: some 19000 sweeps, Anderson: some 2900)


def test_an_extrapolation_that_raises_the_model_is_refused():
    x, curv, grad, rows, hdiag, pen, args = sparse_model(1, m=200, n=30)
    b = hdiag + 1e-8 * hdiag.mean()
    best = np.zeros(len(rows))
    kernels._sweeps_sparse(*args, rows, best, b, 1e-14, 100000, 5)
    rng = np.random.default_rng(0)
    depth = 3
    # a history whose last iterate is the model's minimiser: every other combination of
    # the iterates has a higher model value and must be refused
    ys = np.array([best + 0.1 * rng.standard_normal(len(rows)) for _ in range(depth)] + [best])
    vs = np.array([curv * (x @ y) for y in ys])
    # (the call records (y, v) as the history's last entry and extrapolates from all four)
    y, v = best.copy(), vs[-1].copy()
    hist = (depth, np.zeros(len(rows)), ys.copy(), vs.copy(), np.array([depth], dtype=np.int64))
    kernels._anderson(hist, y, v, rows, grad, curv, *pen)
    np.testing.assert_array_equal(y, best)
    # ... while from a poor last iterate the same history's extrapolation is taken
    worse = best + 0.3 * rng.standard_normal(len(rows))
    ys2 = ys.copy()
    ys2[-1] = worse
    vs2 = np.array([curv * (x @ y) for y in ys2])
    y2, v2 = worse.copy(), vs2[-1].copy()
    hist2 = (depth, np.zeros(len(rows)), ys2, vs2, np.array([depth], dtype=np.int64))
    kernels._anderson(hist2, y2, v2, rows, grad, curv, *pen)
    assert model_value(x, curv, grad, y2) < model_value(x, curv, grad, worse)
    np.testing.assert_allclose(v2, curv * (x @ y2), atol=1e-14)
