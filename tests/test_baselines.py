"""PGM, PGM+LS, APG (FISTA), APG+LS: correctness against SciPy/scikit-learn/NumPy,
monotonicity, the line-search test, the driver contract (stopping, callback, freezing)."""

from __future__ import annotations

import time

import numpy as np
import pytest
import scipy.optimize
from conftest import objective, random_psd

import msm_gpu as mg
from msm_gpu.backends import get_backend
from msm_gpu.demo.study import solve_with
from msm_gpu.solvers import METHODS, lipschitz_constant, run_baseline
from msm_gpu.solvers.loop import LoopSettings

BE = get_backend("cpu")


def tall_problem(rng, m, n, r):
    """C (m x n, m >= 2n: well conditioned) and D (m x r); A = C'C, R = -C'D."""
    c = rng.normal(size=(m, n))
    d = rng.normal(size=(m, r))
    return c, d, c.T @ c, -c.T @ d


def raw(method, a, r, penalty, *, x0=None, tol=0.0, max_iter=50, trace=None, **kw):
    """run_baseline on NumPy arrays with the driver's defaults (its outcome as a dict)."""
    x0 = np.zeros_like(r) if x0 is None else x0
    opts = dict(time_limit=None, record_objective=True, callback=None)
    opts.update(kw)
    settings = LoopSettings(tol=tol, max_iter=max_iter, start_time=time.perf_counter(), **opts)
    outcome = run_baseline(method, BE, a, r, x0, penalty, settings, trace=trace)
    return vars(outcome)


# -- the Lipschitz constant ------------------------------------------------------------


@pytest.mark.parametrize("n, rank", [(1, None), (3, None), (40, None), (120, 30), (300, None)])
def test_lipschitz_constant_matches_eigvalsh(rng, n, rank):
    a = random_psd(rng, n, rank=rank)
    lmax = np.linalg.eigvalsh(a)[-1]
    est, info = lipschitz_constant(BE, a)
    assert est >= lmax * (1 - 1e-12)  # an upper estimate
    assert est <= lmax * (1 + 1e-6)
    assert info["matvecs"] >= 1


def test_lipschitz_constant_small_gap_and_zero_matrix(rng):
    q, _ = np.linalg.qr(rng.normal(size=(200, 200)))
    evals = np.linspace(0.0, 1.0, 200)
    evals[-2] = 0.999  # tiny gap: the power method would need ~10^4 steps
    a = (q * evals) @ q.T
    est, _ = lipschitz_constant(BE, 0.5 * (a + a.T))
    assert abs(est - 1.0) <= 1e-6
    assert lipschitz_constant(BE, np.zeros((5, 5)))[0] == 0.0


# -- convex problems: the baselines reach the reference solution -----------------------


@pytest.mark.parametrize("method", METHODS)
def test_nnls_matches_scipy(rng, method):
    c, d, a, r = tall_problem(rng, 60, 20, 3)
    res = solve_with(method, a, r, mg.NonNeg(), tol=1e-12, max_iter=20000, backend="cpu")
    ref = np.column_stack([scipy.optimize.nnls(c, d[:, j])[0] for j in range(3)])
    assert res.converged, res.message
    assert res.method == method
    assert np.max(np.abs(res.x - ref)) < 1e-6
    lmax = np.linalg.eigvalsh(a)[-1]
    assert abs(res.info["L"] - lmax) <= 1e-6 * lmax


@pytest.mark.parametrize("method", METHODS)
def test_lasso_matches_sklearn(rng, method):
    from sklearn.linear_model import Lasso

    c, d, a, r = tall_problem(rng, 50, 15, 1)
    alpha = 0.1
    # sklearn: 1/(2 m) ||d - C w||^2 + alpha ||w||_1  ->  times m: lam = m * alpha
    lasso = Lasso(alpha=alpha, fit_intercept=False, tol=1e-14, max_iter=100000)
    ref = lasso.fit(c, d[:, 0]).coef_
    res = solve_with(method, a, r[:, 0], mg.L1(50 * alpha), tol=1e-12, max_iter=20000)
    assert res.x.shape == (15,)
    assert np.max(np.abs(res.x - ref)) < 1e-6
    assert np.count_nonzero(ref == 0) > 0  # the penalty is active


@pytest.mark.parametrize("method", METHODS)
def test_unconstrained_matches_linalg_solve(rng, method):
    _, _, a, r = tall_problem(rng, 45, 15, 4)
    res = solve_with(method, a, r, mg.Zero(), tol=1e-12, max_iter=20000)
    ref = np.linalg.solve(a, -r)
    assert np.max(np.abs(res.x - ref)) < 1e-6
    assert res.converged_columns.all()
    assert res.fun == pytest.approx(objective(a, r, ref, mg.Zero()), rel=1e-10)


@pytest.mark.parametrize("method", METHODS)
def test_box_matches_lsq_linear(rng, method):
    c, d, a, r = tall_problem(rng, 40, 12, 1)
    ref = scipy.optimize.lsq_linear(c, d[:, 0], bounds=(-0.1, 0.2), tol=1e-14).x
    res = solve_with(method, a, r, mg.Box(-0.1, 0.2), tol=1e-12, max_iter=20000)
    assert np.max(np.abs(res.x[:, 0] - ref)) < 1e-6


# -- the iterations themselves ---------------------------------------------------------


def reference_iterates(method, a, r, penalty, x0, iters, lip):
    """Textbook PGM / FISTA with step 1/lip, written independently of the package."""
    x, x_prev, y, t = x0.copy(), x0.copy(), x0.copy(), 1.0
    out = []
    for _ in range(iters):
        v = y - (a @ y + r) / lip
        x_new = penalty.prox(-lip * v, lip)
        if method == "apg":
            t_new = 0.5 * (1 + np.sqrt(1 + 4 * t * t))
            y = x_new + ((t - 1) / t_new) * (x_new - x)
            t = t_new
        else:
            y = x_new
        x_prev, x = x, x_new
        out.append(objective(a, r, x, penalty))
    del x_prev
    return x, np.array(out)


@pytest.mark.parametrize("method", ["pgm", "apg"])
@pytest.mark.parametrize("penalty", [mg.NonNeg(), mg.L1(0.3), mg.L0(0.2), mg.Lp(0.1, 0.5)])
def test_constant_step_iterates_match_textbook(rng, method, penalty):
    a = random_psd(rng, 25)
    r = rng.normal(size=(25, 3))
    x0 = rng.normal(size=(25, 3))
    out = raw(method, a, r, penalty, x0=x0, max_iter=40)
    x_ref, f_ref = reference_iterates(method, a, r, penalty, x0, 40, out["info"]["L"])
    assert out["n_iter"] == 40
    np.testing.assert_allclose(out["x"], x_ref, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(out["objective"][1:], f_ref, rtol=1e-9, atol=1e-9)


PENALTIES = [
    mg.Zero(),
    mg.NonNeg(),
    mg.Box(-0.5, 0.3),
    mg.L1(0.5),
    mg.NonNegL1(0.2),
    mg.L0(0.3),
    mg.L0(0.1, lb=0.0),
    mg.Lp(0.2, 0.5),
    mg.Lp(0.2, 2.0 / 3.0),
]


@pytest.mark.parametrize("method", ["pgm", "pgm_ls"])
@pytest.mark.parametrize("penalty", PENALTIES, ids=repr)
@pytest.mark.parametrize("seed", [0, 1])
def test_pgm_decreases_objective_monotonically(method, penalty, seed):
    rng = np.random.default_rng(seed)
    n = 30
    a = random_psd(rng, n, rank=12 if seed else None)  # seed 1: singular A
    r = rng.normal(size=(n, 4)) * 3
    x0 = np.clip(rng.normal(size=(n, 4)), 0, None) if penalty.lb == 0 else np.zeros((n, 4))
    out = raw(method, a, r, penalty, x0=x0, max_iter=150)
    hist = out["objective"]
    assert np.all(np.isfinite(hist))
    scale = max(1.0, abs(hist[0]))
    assert np.all(np.diff(hist) <= 1e-12 * scale), np.diff(hist).max()
    assert hist[-1] < hist[0]  # it moved
    # the tracked objective is the true one
    assert out["fun"] == pytest.approx(objective(a, r, out["x"], penalty), rel=1e-9, abs=1e-9)
    assert hist[-1] == pytest.approx(out["fun"], rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("method", ["pgm_ls", "apg_ls"])
@pytest.mark.parametrize("penalty", [mg.NonNeg(), mg.L1(0.5), mg.L0(0.3), mg.Lp(0.2, 0.5)])
def test_line_search_accepts_only_sufficient_decrease(rng, method, penalty):
    n = 40
    a = random_psd(rng, n, rank=15)
    r = rng.normal(size=(n, 5)) * 2
    events = []
    out = raw(method, a, r, penalty, max_iter=60, trace=events.append)
    n_accepted = n_rejected = 0
    for ev in events:
        y, xp_ = np.asarray(ev["y"]), np.asarray(ev["x_plus"])
        rc = r[:, ev["columns"]]
        dlt = xp_ - y
        grad = a @ y + rc
        q = 0.5 * np.sum(y * (a @ y), 0) + np.sum(y * rc, 0)
        h_plus = np.sum(penalty.value(xp_), 0)
        f_plus = 0.5 * np.sum(xp_ * (a @ xp_), 0) + np.sum(xp_ * rc, 0) + h_plus
        q_model = q + np.sum(grad * dlt, 0) + 0.5 * ev["L"] * np.sum(dlt * dlt, 0) + h_plus
        slack = 1e-10 * (1 + np.abs(f_plus))
        acc = ev["accepted"]
        assert np.all(f_plus[acc] <= q_model[acc] + slack[acc])
        assert np.all(f_plus[~acc] > q_model[~acc] - slack[~acc])
        n_accepted += int(acc.sum())
        n_rejected += int((~acc).sum())
    assert n_accepted == 60 * 5  # one accepted step per column and iteration
    assert n_rejected > 0  # the search did backtrack
    assert out["info"]["ls_backtracks"] == n_rejected
    assert out["info"]["ls_failures"] == 0
    assert np.all(out["info"]["L_columns"] <= 2 * np.linalg.eigvalsh(a)[-1] * (1 + 1e-9))


def test_apg_ls_lipschitz_estimate_never_decreases(rng):
    a = random_psd(rng, 30, rank=10)
    r = rng.normal(size=(30, 3))
    seen = {}
    ok = []

    def trace(ev):
        for col, lv, acc in zip(ev["columns"], ev["L"], ev["accepted"], strict=True):
            if acc:
                ok.append(lv >= seen.get(col, 0.0))
                seen[col] = lv

    raw("apg_ls", a, r, mg.NonNeg(), max_iter=80, trace=trace)
    assert ok and all(ok)


# -- the driver contract ---------------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
def test_tol_zero_runs_exactly_max_iter(rng, method):
    _, _, a, r = tall_problem(rng, 30, 10, 2)
    res = solve_with(method, a, r, mg.NonNeg(), tol=0.0, max_iter=17)
    assert res.n_iter == 17
    assert len(res.objective) == 18
    assert list(res.n_iter_columns) == [17, 17]
    assert not res.converged
    assert "max_iter" in res.message


@pytest.mark.parametrize("method", METHODS)
def test_converged_columns_are_frozen(rng, method):
    _, _, a, r = tall_problem(rng, 45, 15, 4)
    r[:, 1] = 0.0  # x = 0 is optimal from the start: converges after one iteration
    r[:, 3] *= 100.0
    res = raw(method, a, r, mg.NonNeg(), tol=1e-10, max_iter=5000)
    assert res["converged_columns"].all()
    assert res["n_iter_columns"][1] == 1
    assert res["n_iter"] == res["n_iter_columns"].max()
    assert len(set(res["n_iter_columns"].tolist())) > 1
    for j in (0, 2, 3):  # each column is its own problem: same answer alone
        alone = raw(method, a, r[:, [j]], mg.NonNeg(), tol=1e-10, max_iter=5000)
        assert alone["n_iter"] == res["n_iter_columns"][j]
        np.testing.assert_allclose(res["x"][:, j], alone["x"][:, 0], rtol=1e-12, atol=1e-13)
    assert res["fun"] == pytest.approx(objective(a, r, res["x"], mg.NonNeg()), rel=1e-12)
    if method.endswith("_ls"):
        assert np.all(np.isfinite(res["info"]["L_columns"]))


@pytest.mark.parametrize("method", ["pgm", "apg_ls"])
def test_callback_and_time_limit(rng, method):
    _, _, a, r = tall_problem(rng, 30, 10, 3)
    seen = []

    def cb(info):
        seen.append((info.n_iter, info.fun, info.x.shape, info.n_active))
        return info.n_iter == 4

    res = solve_with(method, a, r[:, 0], mg.NonNeg(), tol=0.0, max_iter=50, callback=cb)
    assert res.n_iter == 4 and res.message == "stopped by callback"
    assert [s[0] for s in seen] == [1, 2, 3, 4]
    assert seen[-1][1] == res.objective[-1]
    assert seen[0][2] == (10,) and seen[0][3] == 1

    def stop(info):
        raise StopIteration

    assert solve_with(method, a, r, mg.NonNeg(), max_iter=50, callback=stop).n_iter == 1
    res = solve_with(method, a, r, mg.NonNeg(), tol=0.0, max_iter=10**6, time_limit=1e-9)
    assert res.n_iter == 1 and "time_limit" in res.message


@pytest.mark.parametrize("method", METHODS)
def test_float32_and_no_history(rng, method):
    _, _, a, r = tall_problem(rng, 30, 10, 2)
    res = solve_with(
        method,
        a.astype(np.float32),
        r.astype(np.float32),
        mg.NonNeg(),
        tol=1e-5,
        max_iter=3000,
        record_objective=False,
    )
    assert res.x.dtype == np.float32
    assert res.objective.size == 0
    ref = solve_with(method, a, r, mg.NonNeg(), tol=1e-12, max_iter=20000).x
    assert np.max(np.abs(res.x - ref)) < 1e-3


def test_x0_is_not_modified_and_unknown_method(rng):
    _, _, a, r = tall_problem(rng, 30, 10, 2)
    x0 = rng.normal(size=(10, 2))
    keep = x0.copy()
    raw("apg", a, r, mg.NonNeg(), x0=x0, max_iter=5)
    np.testing.assert_array_equal(x0, keep)
    with pytest.raises(ValueError, match="method"):
        raw("newton", a, r, mg.NonNeg())
