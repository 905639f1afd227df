"""NMF by alternating NNLS: every solver, sparse input, estimator conventions, CPU/CUDA paths."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize
import scipy.sparse as sp
from sklearn.exceptions import NotFittedError

from msm_gpu import backends
from msm_gpu.apps import NMF, nmf
from msm_gpu.factorization import solvers as ns

SOLVERS = ns.SOLVERS


def planted(rng, m=40, d=30, k=4, density=None):
    W = rng.random((m, k))
    H = rng.random((k, d))
    if density is not None:
        H[rng.random(H.shape) > density] = 0.0
    return W @ H, W, H


def objective(Y, W, H):
    Y = Y.toarray() if sp.issparse(Y) else Y
    return 0.5 * float(np.sum((Y - W @ H) ** 2))


# -- every solver --------------------------------------------------------------------


@pytest.mark.parametrize("solver", SOLVERS)
def test_every_solver_lowers_objective_and_stays_nonnegative(solver):
    rng = np.random.default_rng(0)
    Y = rng.random((50, 35))
    # without extrapolation every half-step solver but apg is a descent method
    W, H, info = nmf(Y, 6, solver=solver, max_iter=15, tol=0, random_state=1, extrapolation=False)
    hist = info["history"]
    assert hist.shape == (16, 2)
    assert np.all(np.diff(hist[:, 0]) >= 0)
    assert hist[-1, 1] < 0.5 * hist[0, 1]
    assert W.min() >= 0 and H.min() >= 0
    # the objective is the true one; the last W-step is exact, so it is at most the
    # loop's last value
    assert np.isclose(info["objective"], objective(Y, W, H), rtol=1e-9)
    assert objective(Y, W, H) <= hist[-1, 1] * (1 + 1e-12)
    assert np.isclose(info["reconstruction_err"], np.sqrt(2 * objective(Y, W, H)))
    if solver != "apg":
        assert np.all(np.diff(hist[:, 1]) <= 1e-9 * hist[0, 1])


@pytest.mark.parametrize("solver", SOLVERS)
def test_planted_low_rank_is_recovered(solver):
    rng = np.random.default_rng(1)
    Y, _, _ = planted(rng)
    n_iter = 3000 if solver == "apg" else 1500  # apg: slowest from this start
    W, H, info = nmf(Y, 4, solver=solver, max_iter=n_iter, tol=1e-13, random_state=0, init="random")
    rel = info["reconstruction_err"] / np.linalg.norm(Y)
    assert rel < 1e-3, (solver, rel, info["message"])
    assert W.min() >= 0 and H.min() >= 0


@pytest.mark.parametrize("solver", ["msm", "bpp"])
def test_nnls_subproblem_matches_scipy(solver):
    rng = np.random.default_rng(2)
    m, k, c = 30, 8, 25
    C = rng.random((m, k))
    D = rng.standard_normal((m, c)) + 0.5
    G, P = C.T @ C, C.T @ D
    X0 = np.abs(rng.standard_normal((k, c)))
    be = backends.get_backend("cpu")
    X, _ = ns.half_step(solver, be, G, P, X0, max_inner=5000, inner_tol=0.0)
    ref = np.column_stack([scipy.optimize.nnls(C, D[:, j])[0] for j in range(c)])
    np.testing.assert_allclose(X, ref, atol=1e-7)


@pytest.mark.parametrize("solver", ["pg", "apg", "cgd", "hals"])
def test_other_solvers_approach_the_nnls_solution(solver):
    rng = np.random.default_rng(3)
    C = rng.random((30, 6))
    D = rng.random((30, 10))
    G, P = C.T @ C, C.T @ D
    be = backends.get_backend("cpu")
    X, _ = ns.half_step(solver, be, G, P, np.zeros((6, 10)), max_inner=3000, inner_tol=0.0)
    ref = np.column_stack([scipy.optimize.nnls(C, D[:, j])[0] for j in range(10)])
    np.testing.assert_allclose(X, ref, atol=1e-4)


def test_zero_factor_column_does_not_break_hals():
    rng = np.random.default_rng(4)
    W = rng.random((20, 3))
    W[:, 1] = 0.0
    Y = rng.random((20, 15))
    be = backends.get_backend("cpu")
    for solver in ("hals", "msm", "bpp", "cgd", "pg", "apg"):
        X, _ = ns.half_step(
            solver, be, W.T @ W, W.T @ Y, np.ones((3, 15)), max_inner=50, inner_tol=0.0
        )
        assert np.isfinite(X).all() and X.min() >= 0


# -- sparse input -----------------------------------------------------------------------


@pytest.mark.parametrize("finish", ["exact", None])
@pytest.mark.parametrize("solver", SOLVERS)
def test_sparse_and_dense_give_the_same_result(solver, finish):
    rng = np.random.default_rng(5)
    Y = rng.random((40, 60))
    Y[rng.random(Y.shape) > 0.2] = 0.0
    # a fixed inner budget: "auto" gives sparse Y fewer sweeps (its Gram products are
    # cheaper); the finish fixed too ("auto" finishes sparse Y only)
    kw = {"solver": solver, "max_iter": 10, "tol": 0, "random_state": 3, "inner_iter": 4}
    kw["finish"] = finish
    Wd, Hd, infod = nmf(Y, 5, **kw)
    Ws, Hs, infos = nmf(sp.csr_matrix(Y), 5, **kw)
    np.testing.assert_allclose(Ws, Wd, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(Hs, Hd, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(infos["history"][:, 1], infod["history"][:, 1], rtol=1e-9)
    assert np.isclose(infos["reconstruction_err"], infod["reconstruction_err"], rtol=1e-6)


def test_sparse_input_is_never_densified(monkeypatch):
    rng = np.random.default_rng(6)
    Y = sp.random(200, 300, density=0.02, random_state=7, format="csr")

    def refuse(*args, **kwargs):
        raise AssertionError("sparse Y was densified")

    monkeypatch.setattr(sp.csr_matrix, "toarray", refuse)
    monkeypatch.setattr(sp.csr_matrix, "todense", refuse)
    W, H, info = nmf(Y, 5, max_iter=5, random_state=rng.integers(100))
    assert W.shape == (200, 5) and H.shape == (5, 300)
    assert info["history"][-1, 1] < info["history"][0, 1]


# -- the MSM paths: direct CPU kernel, backend SweepState, real CUDA --------------------


def _plain_msm_nonneg(G, P, X, omega, theta, sweeps):
    """MSM for min 1/2 x'Gx - P'x, x >= 0 written from the paper row by row (eq. (9))."""
    X = X.copy()
    b = (np.diag(G) + theta * np.mean(np.diag(G))) / omega  # theta relative to diag G
    c = np.diag(G) - b
    for _ in range(sweeps):
        for j in range(G.shape[0]):
            w = G[j] @ X - G[j, j] * X[j] + c[j] * X[j] - P[j]
            X[j] = np.maximum(0.0, -w / b[j])
    return X


def test_backend_half_step_matches_plain_numpy_msm():
    """The half-step goes through ``Backend.start``/``SweepState`` and must give the
    paper's iterates (a row-by-row NumPy sweep), for omega != 1 and theta = 0 (HALS)."""
    rng = np.random.default_rng(8)
    C = rng.random((25, 7))
    Y = rng.random((25, 40))
    G, P = C.T @ C, C.T @ Y
    X0 = rng.random((7, 40))
    X0_before = X0.copy()
    be = backends.get_backend("cpu")
    for omega, theta in ((1.0, 0.01), (1.3, 0.1), (1.0, 0.0)):
        opts = {"omega": omega, "theta": theta, "max_inner": 7, "inner_tol": 0.0}
        got, n_inner = ns.msm_backend(be, G, P, X0, **opts)
        assert n_inner == 7
        want = _plain_msm_nonneg(G, P, X0, omega, theta, 7)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)
        assert got is not X0 and not np.shares_memory(got, X0)
    np.testing.assert_array_equal(X0, X0_before)  # the warm start is never swept in place


@pytest.mark.gpu
@pytest.mark.skipif(
    "cuda" not in backends.available(),
    reason=f"needs a usable CUDA GPU and CuPy: {backends.status().get('cuda')}",
)
@pytest.mark.parametrize("solver", ["msm", "hals", "pg", "apg"])
def test_cuda_matches_cpu(solver):
    import cupy
    import cupyx.scipy.sparse as csp

    rng = np.random.default_rng(9)
    Y = rng.random((60, 45))
    kw = {"solver": solver, "max_iter": 8, "tol": 0, "random_state": 0}
    Wc, Hc, infoc = nmf(Y, 5, backend="cpu", **kw)
    Wg, Hg, infog = nmf(cupy.asarray(Y), 5, **kw)
    assert infog["backend"] == "cuda" and isinstance(Wg, cupy.ndarray)
    np.testing.assert_allclose(Wg.get(), Wc, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(Hg.get(), Hc, rtol=1e-6, atol=1e-8)
    Ws, _, _ = nmf(csp.csr_matrix(cupy.asarray(Y)), 5, **kw)
    np.testing.assert_allclose(Ws.get(), Wc, rtol=1e-6, atol=1e-8)
    Wn, _, info_n = nmf(Y, 5, backend="cuda", **kw)  # NumPy in -> NumPy out
    assert isinstance(Wn, np.ndarray) and info_n["backend"] == "cuda"


def test_cpu_only_solvers_refuse_cuda_clearly():
    rng = np.random.default_rng(10)
    Y = rng.random((10, 8))
    for solver in ns.CPU_ONLY:
        with pytest.raises((ValueError, backends.BackendUnavailableError), match="cuda|CPU"):
            nmf(Y, 2, solver=solver, backend="cuda")


# -- estimator conventions -----------------------------------------------------------------


def test_estimator_attributes_and_transform():
    rng = np.random.default_rng(11)
    Y, _, _ = planted(rng, m=30, d=20, k=3)
    model = NMF(3, max_iter=400, tol=1e-10, random_state=0)
    W = model.fit_transform(Y)
    H = model.components_
    assert W.shape == (30, 3) and H.shape == (3, 20)
    assert model.n_components_ == 3 and model.n_features_in_ == 20
    assert model.history_.shape == (model.n_iter_ + 1, 2)
    assert np.isclose(model.reconstruction_err_, np.linalg.norm(Y - W @ H))
    np.testing.assert_allclose(model.inverse_transform(W), W @ H)
    W2 = model.transform(Y)
    assert W2.min() >= 0
    assert np.linalg.norm(Y - W2 @ H) <= model.reconstruction_err_ * (1 + 1e-6) + 1e-9
    assert model.fit(Y) is model


def test_get_set_params_and_clone():
    from sklearn.base import clone

    model = NMF(5, solver="apg", theta=0.5, random_state=3)
    params = model.get_params()
    assert params["n_components"] == 5 and params["solver"] == "apg" and params["theta"] == 0.5
    other = clone(model)
    assert other.get_params() == params and other is not model
    assert model.set_params(solver="bpp", max_iter=7) is model
    assert model.solver == "bpp" and model.max_iter == 7
    with pytest.raises(ValueError, match="(?i)invalid parameter"):
        model.set_params(nonsense=1)
    assert "solver='bpp'" in repr(model)


def test_same_random_state_same_result():
    rng = np.random.default_rng(12)
    Y = rng.random((20, 15))
    W1 = NMF(3, random_state=5, max_iter=5).fit_transform(Y)
    W2 = NMF(3, random_state=5, max_iter=5).fit_transform(Y)
    np.testing.assert_array_equal(W1, W2)


def test_custom_init_and_functional_form():
    rng = np.random.default_rng(13)
    Y = rng.random((20, 15))
    W0, H0 = rng.random((20, 4)), rng.random((4, 15))
    W, H, info = nmf(Y, 4, init="custom", W=W0, H=H0, max_iter=3, tol=0)
    assert np.isclose(info["history"][0, 1], objective(Y, W0, H0))
    assert info["n_iter"] == 3 and info["solver"] == "msm"
    with pytest.raises(ValueError, match="needs W"):
        nmf(Y, 4, init="custom")
    with pytest.raises(ValueError, match="shape"):
        nmf(Y, 4, init="custom", W=W0[:, :3], H=H0)


def test_bad_input_is_refused_clearly():
    rng = np.random.default_rng(14)
    Y = rng.random((10, 8))
    bad = Y.copy()
    bad[0, 0] = -1.0
    with pytest.raises(ValueError, match="Negative values"):
        NMF(2).fit(bad)
    with pytest.raises(ValueError, match="Negative values"):
        NMF(2).fit(sp.csr_matrix(bad))
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN or Inf"):
        NMF(2).fit(bad)
    with pytest.raises(ValueError, match="2-D"):
        NMF(2).fit(Y[0])
    with pytest.raises(ValueError, match="solver"):
        NMF(2, solver="nope").fit(Y)
    with pytest.raises(ValueError, match="omega"):
        NMF(2, omega=2.0).fit(Y)
    with pytest.raises(ValueError, match="n_components"):
        NMF(0).fit(Y)
    with pytest.raises(NotFittedError, match="not fitted"):
        NMF(2).transform(Y)


def test_too_many_components_warns():
    rng = np.random.default_rng(15)
    Y = rng.random((6, 5))
    with pytest.warns(UserWarning, match="larger than min"):
        W = NMF(7, max_iter=5).fit_transform(Y)
    assert W.shape == (6, 7)


def test_stopping_rules_and_verbose(capsys):
    rng = np.random.default_rng(16)
    Y, _, _ = planted(rng)
    model = NMF(4, max_iter=10000, tol=1e-3, random_state=0).fit(Y)
    assert model.converged_ and model.n_iter_ < 10000
    model = NMF(4, max_iter=10**6, tol=0, time_limit=0.05, random_state=0).fit(Y)
    assert "time_limit" in model.info_["message"] and model.history_[-1, 0] < 1.0
    NMF(4, max_iter=3, verbose=True, random_state=0).fit(Y)
    assert "objective" in capsys.readouterr().err


def test_float32_input_stays_float32():
    rng = np.random.default_rng(17)
    Y = rng.random((20, 10)).astype(np.float32)
    for solver in ("msm", "pg"):
        W, H, _ = nmf(Y, 3, solver=solver, max_iter=5)
        assert W.dtype == np.float32 and H.dtype == np.float32


def test_auto_inner_iter_budget():
    # one budget for both half-steps, growing with the Gram cost per sweep
    assert ns.balanced_inner_iter(1797, 64, 20, 1797 * 64) == 3
    assert ns.balanced_inner_iter(100, 10**6, 50, 10**6) == 1
    assert ns.balanced_inner_iter(10**5, 10**5, 5, 10**10, cap=30) == 30
    # few cheap sweeps pay off when the Gram products dominate
    assert ns.auto_inner_iter(1797, 64, 20, 1797 * 64) > ns.auto_inner_iter(64, 1797, 20, 1797 * 64)
    assert ns.auto_inner_iter(10, 10**6, 50, 10**7) == 1
    assert ns.auto_inner_iter(10**6, 10, 5, 10**7, cap=30) == 30


def test_finish_of_the_msm_half_steps(monkeypatch):
    # "exact": every msm half-step ends at the exact NNLS solution of its (G, P), so the
    # factors after one outer iteration are bpp's from the MSM iterate; "auto" finishes
    # data with at most 10 % nonzero entries, stored dense or sparse; None never; the
    # other solvers ignore it
    from msm_gpu.factorization import solvers as ns

    calls = []
    real = ns.active_set_finish
    monkeypatch.setattr(ns, "active_set_finish", lambda *a: calls.append(1) or real(*a))
    rng = np.random.default_rng(8)
    Y = rng.random((30, 40))
    Y[rng.random(Y.shape) > 0.3] = 0.0
    Y_text = Y * (rng.random(Y.shape) < 0.25)  # 7 % nonzero
    kw = {"max_iter": 3, "tol": 0, "random_state": 0}
    for finish, data, solver, expected in (
        ("exact", Y, "msm", 6),
        ("auto", sp.csr_matrix(Y), "msm", 0),
        ("auto", Y, "msm", 0),
        ("auto", sp.csr_matrix(Y_text), "msm", 6),
        ("auto", Y_text, "msm", 6),
        (None, sp.csr_matrix(Y_text), "msm", 0),
        ("exact", Y, "hals", 0),
    ):
        calls.clear()
        nmf(data, 4, solver=solver, finish=finish, **kw)
        # plus one: the exact last W-step of every fit (loop.exact_w_step)
        assert len(calls) == expected + 1, (finish, solver)
    # the finished H-step is optimal: KKT of min_{H >= 0} 1/2 ||Y - W0 H||^2 at the start
    # W0 (one iteration, extrapolation off: the returned H is that H-step's); plain MSM
    # steps are not.  (The returned W is always exact: the last W-step of every fit.)
    W0, H0 = rng.random((30, 4)), rng.random((4, 40))
    one = {"solver": "msm", "max_iter": 1, "tol": 0, "extrapolation": False, "init": "custom"}
    for finish, exact in (("exact", True), (None, False)):
        W, H, _ = nmf(Y, 4, finish=finish, W=W0, H=H0, **one)
        grad = W0.T @ (W0 @ H - Y)
        scale = np.abs(W0.T @ Y).max()
        kkt = np.where(H > 0, np.abs(grad), np.maximum(-grad, 0.0)).max() / scale
        assert (H >= 0).all() and (kkt < 1e-10) == exact, (finish, kkt)
        grad = (W @ H - Y) @ H.T
        kkt = np.where(W > 0, np.abs(grad), np.maximum(-grad, 0.0)).max()
        assert kkt < 1e-10 * np.abs(Y @ H.T).max()
    with pytest.raises(ValueError, match="finish"):
        nmf(Y, 4, finish="always")


def test_unfinished_active_set_columns_are_never_worse_than_the_msm_iterate(monkeypatch):
    # nnls_active_set may hand back a not-ok column worse than its start (a restart from
    # 0 after a singular start face); the half-step's finish then keeps the MSM iterate
    import msm_gpu.solvers.nnls_columns as nc

    rng = np.random.default_rng(3)
    C = rng.random((20, 4))
    G, P = C.T @ C, C.T @ rng.random((20, 5))
    exact, ok_all, _ = nc.nnls_active_set(G, P)
    assert ok_all.all()
    X = 0.9 * exact + 0.01  # an MSM-like iterate near the solution: F(X) < 0

    def partly_unfinished(g, p, x0):
        x = exact.copy()
        x[:, 1] = 0.0  # F = 0, above F(X) for column 1
        x[:, 3] = exact[:, 3]  # an unfinished column that did improve is kept
        return x, np.array([True, False, True, False, True]), np.zeros(5, dtype=np.int64)

    monkeypatch.setattr(nc, "nnls_active_set", partly_unfinished)
    got = ns.active_set_finish(G, P, X)

    def f(x):
        return np.einsum("ij,ij->j", x, 0.5 * (G @ x) - P)

    assert f(X)[1] < 0.0  # so 0 is worse there
    np.testing.assert_array_equal(got[:, 1], X[:, 1])
    np.testing.assert_array_equal(got[:, [0, 2, 3, 4]], exact[:, [0, 2, 3, 4]])
    assert np.all(f(got) <= f(X) + 1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(("omega", "theta"), [(1.0, 0.0), (1.2, 0.01)])
def test_one_thread_half_step_is_the_sweep_states(dtype, omega, theta, monkeypatch):
    # a half-step the CPU sweeps on one thread calls the compiled sweep directly; it must
    # give the sweep state's iterates bit for bit (same kernel, same splitting)
    rng = np.random.default_rng(3)
    w = rng.random((60, 12)).astype(dtype)
    g, p = w.T @ w, w.T @ rng.random((60, 40)).astype(dtype)
    x0 = rng.random((12, 40)).astype(dtype)
    cpu = backends.get_backend("cpu")
    assert ns._one_thread_sweeps(g, x0)
    opts = {"omega": omega, "theta": theta, "max_inner": 7, "inner_tol": 1e-3}
    fast, n_fast = ns.msm_backend(cpu, g, p, x0.copy(), **opts)
    monkeypatch.setattr(ns, "_one_thread_sweeps", lambda G, X: False)
    slow, n_slow = ns.msm_backend(cpu, g, p, x0.copy(), **opts)
    assert n_fast == n_slow and fast.dtype == slow.dtype
    np.testing.assert_array_equal(fast, slow)
