"""NMF's sturdiness defects of issue 49, each checked against scikit-learn or a closed form.

Each defect's test failed on the code before the issue (run against a copy of the package
at 60509a8; the few that are checks of what already held say so)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import scipy.optimize
import scipy.sparse as sp
from sklearn.decomposition import NMF as SkNMF
from sklearn.decomposition._nmf import _initialize_nmf
from sklearn.exceptions import ConvergenceWarning

import msm_gpu as mg
from msm_gpu.factorization import loop


@pytest.fixture(autouse=True)
def _quiet_max_iter():
    # short fits stop at max_iter on purpose; the warning has its own test
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        yield


def objective(Y, W, H):
    Y = Y.toarray() if sp.issparse(Y) else Y
    return 0.5 * float(np.sum((Y - W @ H) ** 2))


# -- sparse input: the same fit as dense ---------------------------------------------------


def test_sparse_input_gives_the_dense_fit_and_keeps_every_component():
    # issue 49: the sparse fit lost 2 of 3 components (error 53.25; dense 42.20)
    Y = np.random.default_rng(0).random((30, 12)) * 10
    dense = mg.NMF(3, random_state=0).fit(Y)
    sparse = mg.NMF(3, random_state=0).fit(sp.csr_matrix(Y))
    assert np.all(np.abs(sparse.components_).sum(axis=1) > 0)
    assert sparse.reconstruction_err_ == pytest.approx(dense.reconstruction_err_, rel=1e-9)
    np.testing.assert_allclose(sparse.components_, dense.components_, rtol=1e-7, atol=1e-9)
    sk = SkNMF(3, random_state=0, max_iter=1000).fit(Y).reconstruction_err_
    assert dense.reconstruction_err_ <= 1.001 * sk


def test_sparse_counts_keep_their_components():
    # low-rank Poisson counts, 75 % nonzero, k = 8 (issue 49: 5 of 10 such seeds lost
    # components; this one did not, a check that none is lost now)
    rng = np.random.default_rng(3)
    Y = rng.poisson(rng.gamma(1.0, 1.0, (200, 8)) @ rng.gamma(1.0, 0.2, (8, 300))) * 1.0
    sk = SkNMF(8, random_state=0, max_iter=400).fit(Y).reconstruction_err_
    for data in (Y, sp.csr_matrix(Y)):
        model = mg.NMF(8, random_state=0).fit(data)
        assert np.all(model.components_.max(axis=1) > 0)
        assert model.reconstruction_err_ <= 1.01 * sk


@pytest.mark.parametrize("solver", ["bpp", "msm"])
def test_a_component_the_other_factor_zeroed_keeps_its_values(solver):
    # an extrapolation zeroed row 1 of H: the W-step's G = HH' has a zero row and column,
    # any W[:, 1] is optimal, and the exact solvers returned 0: with H[1] = 0 too the
    # component was lost for good (the sparse 30 x 12 fit above lost 2 of 3 that way)
    from msm_gpu.backends import get_backend
    from msm_gpu.factorization import solvers as ns

    rng = np.random.default_rng(0)
    H = rng.random((3, 12))
    H[1] = 0.0
    Y = rng.random((30, 12))
    Wt0 = rng.random((3, 30))
    be = get_backend("cpu")
    Wt, _ = ns.half_step(solver, be, H @ H.T, H @ Y.T, Wt0, max_inner=50, inner_tol=0.0,
                         finish=True)  # fmt: skip
    np.testing.assert_allclose(Wt[1], Wt0[1], rtol=1e-13)
    ref = np.array([scipy.optimize.nnls(H[[0, 2]].T, y)[0] for y in Y]).T
    np.testing.assert_allclose(Wt[[0, 2]], ref, rtol=1e-8, atol=1e-10)


def test_exact_half_steps_with_extrapolation_keep_every_component():
    Y = np.random.default_rng(0).random((30, 12)) * 10
    for finish in ("exact", None):
        model = mg.NMF(3, random_state=0, finish=finish).fit(sp.csr_matrix(Y))
        assert np.all(model.components_.max(axis=1) > 0), finish
        assert model.reconstruction_err_ <= 1.001 * 42.1640432256738  # scikit-learn's


# -- float32 ---------------------------------------------------------------------------------


def test_float32_does_not_stop_on_rounding():
    # issue 49: error 0.0345 after 73 iterations, converged_=True (float64: 6.5e-6)
    X = np.abs(np.random.default_rng(0).standard_normal((50, 7)))
    fit32 = mg.NMF(tol=1e-10, random_state=0, max_iter=2000).fit(X.astype(np.float32))
    fit64 = mg.NMF(tol=1e-10, random_state=0, max_iter=2000).fit(X)
    assert fit32.components_.dtype == np.float32
    assert fit32.reconstruction_err_ <= 2.0 * fit64.reconstruction_err_ + 1e-5
    assert fit32.n_iter_ >= 0.5 * fit64.n_iter_
    assert fit32.reconstruction_err_ < 1e-3


def test_objective_of_a_close_fit_is_the_residual_not_the_rounding():
    # ||Y||^2 - 2 <W, YH'> + <W'W, HH'> in float32 measures rounding once the fit is close;
    # the stable objective is the float64 residual's
    rng = np.random.default_rng(1)
    W, H = rng.random((60, 4)), rng.random((4, 40))
    Y = (W @ H).astype(np.float32)
    W32, H32 = (W * (1 + 1e-4)).astype(np.float32), H.astype(np.float32)
    from msm_gpu.backends import get_backend

    be = get_backend("cpu")
    data = loop.Data(Y, be, np.float32)
    f = loop.stable_objective(data, W32.T, H32, H32 @ H32.T, data.h_yt(H32))
    truth = objective(Y.astype(np.float64), W32.astype(np.float64), H32.astype(np.float64))
    assert f == pytest.approx(truth, rel=1e-3)


def test_float32_in_float32_out_transform_included():
    X = np.random.default_rng(2).random((30, 10)).astype(np.float32)
    model = mg.NMF(3, random_state=0)
    W = model.fit_transform(X)
    assert W.dtype == model.components_.dtype == np.float32
    assert model.transform(X).dtype == np.float32
    assert model.inverse_transform(W).dtype == np.float32


# -- extrapolation keeps the scale of the factors ------------------------------------------------


def test_hals_extrapolation_keeps_the_factors_balanced():
    # 35 x 53 random matrix, k = 7: one component's ||H_t|| / ||W_t|| drifted to 4e300 over
    # 2000 HALS iterations with extrapolation; the product is unchanged by a rescaling, so
    # nothing but the loop bounds the drift (it rescales beyond 2^40)
    Y = np.random.default_rng(1).random((35, 53)) * 10
    model = mg.NMF(7, solver="hals", random_state=1, max_iter=2000, tol=0)
    W = model.fit_transform(Y)
    ratio = np.linalg.norm(model.components_, axis=1) / np.linalg.norm(W, axis=0)
    assert ratio.max() <= 2.0**42 and ratio.min() >= 2.0**-42
    assert np.abs(model.components_).max() < 1e4
    assert model.reconstruction_err_ <= 1.01 * SkNMF(7, random_state=1).fit(Y).reconstruction_err_


def test_balancing_rescales_by_powers_of_two():
    gram_w = np.diag([1.0, 1.0, 0.0])
    gram_h = np.diag([2.0**90, 1.0, 3.0])  # component 0 out of balance, 2 has W_2 = 0
    s = loop.balance_factors(gram_w, gram_h)
    np.testing.assert_array_equal(s, [2.0**22, 1.0, 1.0])  # sqrt(2^45), rounded to 2^22
    assert loop.balance_factors(np.eye(3), np.eye(3)) is None


# -- scales -------------------------------------------------------------------------------------


@pytest.mark.parametrize("init", ["random", None, "nndsvdar", "nndsvd"])
@pytest.mark.parametrize("s", [2.0**332, 2.0**-664, 2.0**26, 2.0**-26])
def test_powers_of_four_give_the_same_factors_scaled(s, init):
    # issue 49: Y * 1e100 "converged" after 1 iteration (relative error 0.95); Y * 1e-200 at
    # 0.71.  Inside, Y is divided by a power of four: Y * 4^j gives W * 2^j, H * 2^j exactly
    # (2^332 from a random start already held before: a check; 2^-664 did not).  Every
    # init starts from Y / 4^j: from Y itself NNDSVDa's fill (mean(Y)) was far off the
    # factors' scale at 2^26, and the fit stopped 30-40 % above its scale-1 error
    Y = np.random.default_rng(0).random((30, 12)) * 10
    ref = mg.NMF(3, init=init, random_state=0)
    W = ref.fit_transform(Y)
    model = mg.NMF(3, init=init, random_state=0)
    Ws = model.fit_transform(Y * s)
    root = math.sqrt(s)
    np.testing.assert_allclose(Ws / root, W, rtol=1e-12)
    np.testing.assert_allclose(model.components_ / root, ref.components_, rtol=1e-12)
    assert model.reconstruction_err_ / s == pytest.approx(ref.reconstruction_err_, rel=1e-12)
    assert model.n_iter_ == ref.n_iter_


@pytest.mark.parametrize("s", [1e7, 5.7e7, 1e10, 1e-9])
def test_default_fit_does_not_depend_on_the_scale(s):
    # found by fuzzing the scale: Y * 5.7e7 (85 x 110, k = 2) stopped at 200 iterations
    # 70 % above the scale-1 error (scikit-learn 33 % above), from NNDSVDa's start of Y
    rng = np.random.default_rng(3)
    Y = np.abs(rng.standard_normal((85, 2)) @ np.abs(rng.standard_normal((2, 110))))
    Y += 0.05 * rng.random(Y.shape)
    ref = mg.NMF(2, random_state=0).fit(Y)
    model = mg.NMF(2, random_state=0).fit(Y * s)
    assert model.reconstruction_err_ / s == pytest.approx(ref.reconstruction_err_, rel=1e-4)
    assert model.converged_


@pytest.mark.parametrize("s", [1e100, 1e-200])
def test_extreme_scales_fit_like_scale_one(s):
    # default init (nndsvda): its first objective overflowed (1e100) or underflowed (1e-200)
    Y = np.random.default_rng(0).random((30, 12)) * 10
    ref = mg.NMF(3, random_state=0).fit(Y)
    model = mg.NMF(3, random_state=0).fit(Y * s)
    assert model.reconstruction_err_ / s == pytest.approx(ref.reconstruction_err_, rel=1e-3)
    assert model.n_iter_ > 5 and np.isfinite(model.history_[:, 1]).all()


def test_all_zero_custom_start_is_refused():
    # issue 49: W = H = 0 came back with converged_=True; scikit-learn refuses it
    Y = np.random.default_rng(0).random((10, 8))
    with pytest.raises(ValueError, match="full of zeros"):
        SkNMF(2, init="custom").fit(Y, W=np.zeros((10, 2)), H=np.ones((2, 8)))
    with pytest.raises(ValueError, match="full of zeros"):
        mg.NMF(2, init="custom").fit(Y, W=np.zeros((10, 2)), H=np.ones((2, 8)))
    with pytest.raises(ValueError, match="full of zeros"):
        mg.NMF(2, init="custom").fit(Y, W=np.ones((10, 2)), H=np.zeros((2, 8)))


def test_a_non_finite_objective_is_never_convergence():
    Y = np.random.default_rng(0).random((20, 15))

    class Overflowing(loop.InMemory):
        calls = 0

        def objective(self, wt, h, g_h, p_w):
            Overflowing.calls += 1
            return math.inf if Overflowing.calls > 3 else super().objective(wt, h, g_h, p_w)

    from msm_gpu.backends import get_backend

    be = get_backend("cpu")
    data = loop.Data(Y, be, np.float64)
    W0, H0 = _initialize_nmf(Y, 3, init="random", random_state=0)
    p = mg.NMF(3, tol=1e-4, max_iter=50).get_params()
    _, _, info = loop.alternate(Overflowing(data, be), W0.T.copy(), H0.copy(), p)
    assert not info["converged"] and "not finite" in info["message"]
    assert np.isfinite(info["objective"])  # the best finite pair is returned


# -- scikit-learn's conventions -------------------------------------------------------------------


def test_convergence_warning_when_max_iter_stops_the_fit():
    Y = np.random.default_rng(0).random((20, 15))
    for est in (SkNMF(3, max_iter=3, random_state=0), mg.NMF(3, max_iter=3, random_state=0)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ConvergenceWarning)
            est.fit(Y)
        messages = [str(w.message) for w in caught if w.category is ConvergenceWarning]
        assert any("Maximum number of iterations 3" in m for m in messages), type(est)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        mg.NMF(3, max_iter=3, tol=0, random_state=0).fit(Y)  # tol=0: asked for, no warning
        mg.NMF(3, max_iter=5000, tol=1e-3, random_state=0).fit(Y)  # converged


@pytest.mark.parametrize("solver", ["msm", "hals", "bpp"])
def test_fit_transform_and_transform_agree(solver):
    # issue 49: 1.8e-3 relative apart (scikit-learn 7.6e-5); the last W-step is exact
    # (bpp's half-steps were exact already: a check)
    Y = np.random.default_rng(4).random((40, 25))
    model = mg.NMF(5, solver=solver, random_state=0)
    W = model.fit_transform(Y)
    W2 = model.transform(Y)
    assert np.linalg.norm(W - W2) <= 1e-6 * np.linalg.norm(W)
    # and it is the NNLS solution for the final H (scipy, row by row)
    H = model.components_
    ref = np.array([scipy.optimize.nnls(H.T, y)[0] for y in Y])
    np.testing.assert_allclose(W, ref, rtol=1e-7, atol=1e-9)


def test_n_components_auto():
    Y = np.random.default_rng(5).random((20, 6))
    assert mg.NMF().n_components == SkNMF().n_components == "auto"
    assert mg.NMF(max_iter=5).fit(Y).components_.shape == (6, 6)  # n_features
    W0, H0 = np.ones((20, 2)), np.ones((2, 6))
    model = mg.NMF("auto", init="custom", max_iter=5).fit(Y, W=W0, H=H0)
    assert model.n_components_ == 2  # from H, as scikit-learn
    sk = SkNMF("auto", init="custom", max_iter=5).fit(Y, W=W0, H=H0)
    assert sk.n_components_ == 2


def test_w_and_h_without_custom_init_are_ignored_with_a_warning():
    Y = np.random.default_rng(6).random((12, 7))
    W0, H0 = np.ones((12, 2)), np.ones((2, 7))
    with pytest.warns(RuntimeWarning, match="provided W or H are ignored"):
        got = mg.NMF(2, random_state=0, max_iter=5).fit_transform(Y, W=W0, H=H0)
    ref = mg.NMF(2, random_state=0, max_iter=5).fit_transform(Y)
    np.testing.assert_array_equal(got, ref)


def _penalised(Y, W, H, alpha, l1_ratio):
    """scikit-learn's objective: 1/2 ||Y - WH||^2 + d alpha (l1 |W| + l2/2 ||W||^2) + m
    alpha (l1 |H| + l2/2 ||H||^2), l1 = l1_ratio, l2 = 1 - l1_ratio."""
    m, d = Y.shape
    l1 = alpha * l1_ratio * (d * W.sum() + m * H.sum())
    l2 = 0.5 * alpha * (1 - l1_ratio) * (d * (W**2).sum() + m * (H**2).sum())
    return 0.5 * np.sum((Y - W @ H) ** 2) + l1 + l2


@pytest.mark.parametrize(("alpha", "l1_ratio"), [(0.01, 1.0), (0.1, 1.0), (0.01, 0.5)])
def test_l1_penalty_at_defaults_keeps_components_and_beats_scikit_learn(alpha, l1_ratio):
    # extrapolating the first move (from nndsvda's start) pushed components into the l1
    # penalty's zero for good (2 of 10 lost at alpha 0.01).  Truth: scikit-learn's cd on
    # the same data and penalty reaches no lower objective (it loses 1-5 components here).
    from sklearn.datasets import load_digits

    Y = load_digits().data
    kw = {"alpha_W": alpha, "l1_ratio": l1_ratio, "random_state": 0}
    ours = mg.NMF(10, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        W = ours.fit_transform(Y)
        theirs = SkNMF(10, **kw)
        W_sk = theirs.fit_transform(Y)
    f_ours = _penalised(Y, W, ours.components_, alpha, l1_ratio)
    f_sk = _penalised(Y, W_sk, theirs.components_, alpha, l1_ratio)
    assert np.all(ours.components_.max(axis=1) > 0)
    assert f_ours <= f_sk * (1 + 1e-9)


def test_extrapolation_warmup_returns_the_plain_points_first():
    from msm_gpu.factorization.extrapolation import Extrapolation

    new = np.array([[1.0, 2.0], [0.5, 0.0]])
    old = np.array([[0.5, 1.0], [3.0, 1.0]])
    ex = Extrapolation(warmup=2)
    for _ in range(2):
        point = ex.point(new, old)
        np.testing.assert_array_equal(point, new)
        assert point is not new
    # then max(new + 0.5 (new - old), 0)
    np.testing.assert_array_equal(ex.point(new, old), [[1.25, 2.5], [0.0, 0.0]])


def _beta_div(Y, Z, beta):
    if beta == 1.0:
        return float(np.sum(Y * np.log(Y / Z) - Y + Z))
    if beta == 0.0:
        R = Y / Z
        return float(np.sum(R - np.log(R) - 1.0))
    return float(
        np.sum(Y**beta + (beta - 1) * Z**beta - beta * Y * Z ** (beta - 1)) / (beta * (beta - 1))
    )


@pytest.mark.parametrize(
    ("loss", "beta"), [("kullback-leibler", 1.0), ("itakura-saito", 0.0), (0.5, 0.5)]
)
def test_beta_losses_at_every_scale(loss, beta):
    # scikit-learn's NNDSVDa fills its zeros with mean(Y): on Y * 1e5 the start was 1e4
    # times Y and the Newton steps never recovered (Itakura-Saito: relative error 551,
    # 8.9e8 at 1e20; beta = 0.5: 21 at 1e20).  The divergence, in Y's own units
    # (d_beta(sY | sZ) = s^beta d_beta(Y | Z)), must not depend on the scale; on Y * 4^j
    # the fit is the scale-1 fit scaled, exactly
    rng = np.random.default_rng(0)
    Y = rng.random((60, 40)) * (rng.random((60, 40)) < 0.6) + 1e-3
    ref = mg.NMF(4, beta_loss=loss, random_state=0, max_iter=300)
    W = ref.fit_transform(Y)
    f_ref = _beta_div(Y, W @ ref.components_, beta)
    for s in (1e-20, 1e5, 1e20):
        model = mg.NMF(4, beta_loss=loss, random_state=0, max_iter=300)
        Ws = model.fit_transform(Y * s)
        f = _beta_div(Y * s, Ws @ model.components_, beta) / s**beta
        assert abs(f - f_ref) <= 0.05 * f_ref, (s, f, f_ref)
    model = mg.NMF(4, beta_loss=loss, random_state=0, max_iter=300)
    Ws = model.fit_transform(Y * 4.0**10)
    np.testing.assert_array_equal(Ws, W * 2.0**10)
    np.testing.assert_array_equal(model.components_, ref.components_ * 2.0**10)
