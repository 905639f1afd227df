"""l0 sparse coding: DCT dictionary, patches, the MSM H-step, dictionary learning."""

import itertools

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

from msm_gpu.apps.dictionaries import (
    extract_patches,
    overcomplete_dct,
    patch_grid,
    reconstruct_from_patches,
    sample_patches,
)
from msm_gpu.apps.dictionary_learning import L0DictionaryLearning
from msm_gpu.apps.sparse_coding import (
    dictionary_step,
    l0_objective,
    omp,
    solve_h,
    sparse_code,
)

# ---------------------------------------------------------------------------------------
# DCT dictionary
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("p", [1, 2, 4, 8])
def test_dct_square_is_orthonormal_dct2(p):
    d = overcomplete_dct(p, p * p)
    assert d.shape == (p * p, p * p)
    np.testing.assert_allclose(d.T @ d, np.eye(p * p), atol=1e-12)
    np.testing.assert_allclose(d @ d.T, np.eye(p * p), atol=1e-12)
    # the 1-D factor is the orthonormal DCT-II (up to sign)
    if p > 1:
        from scipy.fft import dct

        c = dct(np.eye(p), norm="ortho", axis=0).T  # columns = DCT-II basis vectors
        np.testing.assert_allclose(np.abs(np.kron(c, c)), np.abs(d), atol=1e-12)


@pytest.mark.parametrize(("p", "k"), [(8, 256), (8, 100), (5, 64), (4, 36)])
def test_overcomplete_dct_unit_norm_dc_orthogonal(p, k):
    d = overcomplete_dct(p, k)
    assert d.shape == (p * p, k)
    np.testing.assert_allclose(np.linalg.norm(d, axis=0), 1.0, atol=1e-12)
    np.testing.assert_allclose(d[:, 0], 1.0 / p)  # constant atom
    np.testing.assert_allclose(d[:, 0] @ d[:, 1:], 0.0, atol=1e-12)
    np.testing.assert_allclose(d[:, 1:].sum(axis=0), 0.0, atol=1e-12)
    # separable: D'D = kron(G1, G1) with G1 the 1-D Gram matrix
    g = d.T @ d
    np.testing.assert_allclose(np.diag(g), 1.0, atol=1e-12)
    assert np.linalg.matrix_rank(d) == min(p * p, k)


@pytest.mark.parametrize("bad", [0, 255, 3, -4])
def test_dct_rejects_non_square_atoms(bad):
    with pytest.raises(ValueError, match="perfect square"):
        overcomplete_dct(8, bad)


def test_dct_rejects_bad_types():
    with pytest.raises(TypeError):
        overcomplete_dct(8.0, 256)
    with pytest.raises(ValueError):
        overcomplete_dct(0, 4)


# ---------------------------------------------------------------------------------------
# patches
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(8, 8), (13, 21), (40, 33)])
@pytest.mark.parametrize("step", [1, 3, 8, 9, 100])
def test_extract_reconstruct_exact_inverse(shape, step):
    """Every pixel is covered for any step (step 9 left 732 of 4096 pixels NaN)."""
    rng = np.random.default_rng(0)
    img = rng.uniform(0, 255, size=shape)
    patches = extract_patches(img, 8, step)
    assert patches.shape[0] == 64
    back = reconstruct_from_patches(patches, shape, 8, step)
    np.testing.assert_allclose(back, img, rtol=0, atol=1e-12)


def test_patch_layout_and_uint8():
    img = np.arange(10 * 12, dtype=np.uint8).reshape(10, 12)
    patches = extract_patches(img, 3)
    assert patches.shape == (9, 8 * 10)
    np.testing.assert_array_equal(patches[:, 0], img[:3, :3].ravel())
    np.testing.assert_array_equal(patches[:, 10 + 2], img[1:4, 2:5].ravel())
    np.testing.assert_array_equal(patches[:, -1], img[-3:, -3:].ravel())
    # step 4 > 3 would leave pixel 3 uncovered: the patch at 3 fills the gap
    np.testing.assert_array_equal(patch_grid(10, 3, 4), [0, 3, 4, 7])


def test_patch_errors():
    with pytest.raises(ValueError, match="smaller than"):
        extract_patches(np.zeros((7, 20)), 8)
    with pytest.raises(ValueError, match="grayscale"):
        extract_patches(np.zeros((16, 16, 3)), 8)
    with pytest.raises(ValueError, match="NaN"):
        extract_patches(np.full((16, 16), np.nan), 8)
    with pytest.raises(TypeError):
        extract_patches(np.array([["a"] * 9] * 9), 8)
    with pytest.raises(ValueError, match="shape"):
        reconstruct_from_patches(np.zeros((64, 5)), (16, 16), 8)


def test_sample_patches_are_patches():
    rng = np.random.default_rng(1)
    img = rng.standard_normal((20, 17))
    s = sample_patches(img, 50, 4, random_state=3)
    allp = extract_patches(img, 4)
    assert s.shape == (16, 50)
    # every sample is one of the patches, and they are distinct
    idx = [int(np.flatnonzero(np.all(np.isclose(allp, s[:, [j]]), axis=0))[0]) for j in range(50)]
    assert len(set(idx)) == 50
    np.testing.assert_array_equal(s, sample_patches(img, 50, 4, random_state=3))


# ---------------------------------------------------------------------------------------
# H-step
# ---------------------------------------------------------------------------------------


def _brute_force_l0(d, y, lam):
    """Global minimum of 1/2||y - D h||^2 + lam ||h||_0 over all supports."""
    k = d.shape[1]
    best = 0.5 * float(y @ y)
    for size in range(1, k + 1):
        for supp in itertools.combinations(range(k), size):
            ds = d[:, supp]
            coef, *_ = np.linalg.lstsq(ds, y, rcond=None)
            r = y - ds @ coef
            best = min(best, 0.5 * float(r @ r) + lam * size)
    return best


def _random_dictionary(rng, m, k):
    d = rng.standard_normal((m, k))
    return d / np.linalg.norm(d, axis=0)


def test_h_step_orthonormal_matches_brute_force_exactly():
    rng = np.random.default_rng(2)
    d = overcomplete_dct(2, 4)  # orthonormal: the l0 problem separates
    y = rng.standard_normal((4, 40)) * 2.0
    lam = 0.7
    res = sparse_code(d, y, lam, init="random", random_state=0, max_iter=50, tol=1e-12)
    for j in range(y.shape[1]):
        f = l0_objective(d, y[:, j], res.x[:, j], lam)
        assert f == pytest.approx(_brute_force_l0(d, y[:, j], lam), rel=1e-9, abs=1e-9)
    # = hard thresholding of D'y at sqrt(2 lam)
    c = d.T @ y
    np.testing.assert_allclose(res.x, np.where(np.abs(c) > np.sqrt(2 * lam), c, 0.0), atol=1e-8)


def test_h_step_overcomplete_tiny_matches_brute_force():
    rng = np.random.default_rng(3)
    m, k, n_sig, lam = 4, 6, 30, 0.3
    d = _random_dictionary(rng, m, k)
    y = d @ (rng.standard_normal((k, n_sig)) * (rng.random((k, n_sig)) < 0.4))
    y += 0.05 * rng.standard_normal(y.shape)
    best = np.full(n_sig, np.inf)
    for start in ["zeros", "omp"] + [f"r{s}" for s in range(8)]:
        init = "random" if start.startswith("r") else start
        seed = int(start[1:]) if start.startswith("r") else None
        res = sparse_code(d, y, lam, init=init, random_state=seed, max_iter=300, tol=1e-12)
        f = np.array([l0_objective(d, y[:, j], res.x[:, j], lam) for j in range(n_sig)])
        best = np.minimum(best, f)
    brute = np.array([_brute_force_l0(d, y[:, j], lam) for j in range(n_sig)])
    assert np.all(best >= brute - 1e-8)  # never below the global minimum
    hits = np.isclose(best, brute, rtol=1e-6, atol=1e-8)
    assert hits.mean() >= 0.9, f"best of 10 starts reached the global min on {hits.mean():.0%}"


def test_h_step_fixed_point_is_least_squares_on_support():
    rng = np.random.default_rng(4)
    d = _random_dictionary(rng, 6, 10)
    y = rng.standard_normal((6, 5)) * 3
    res = sparse_code(d, y, 0.5, init="zeros", max_iter=5000, tol=1e-13)
    for j in range(5):
        # normal equations on the support: D_S'(y - D h) = 0 (any LS fit on the support)
        supp = np.flatnonzero(res.x[:, j])
        grad = d[:, supp].T @ (y[:, j] - d @ res.x[:, j])
        np.testing.assert_allclose(grad, 0.0, atol=1e-6)
        # and no zero coefficient can be switched on with a gain above lam
        corr = d.T @ (y[:, j] - d @ res.x[:, j])
        off = np.setdiff1d(np.arange(10), supp)
        assert np.all(0.5 * corr[off] ** 2 <= 0.5 * (1 + 1e-6) + 1e-9)


@pytest.mark.parametrize("init", ["zeros", "omp", "random"])
def test_h_step_lowers_objective_monotonically(init):
    rng = np.random.default_rng(5)
    d = overcomplete_dct(8, 256)
    y = rng.standard_normal((64, 300)) * 20 + 40 * d[:, rng.integers(0, 256, 300)]
    lam = 500.0
    res = sparse_code(d, y, lam, init=init, random_state=1, max_iter=15, tol=0)
    obj = res.objective
    assert len(obj) == 16
    assert np.all(np.diff(obj) <= 1e-9 * np.abs(obj[:-1]))
    assert obj[-1] < obj[0]
    assert res.fun == pytest.approx(l0_objective(d, y, res.x, lam), rel=1e-10)
    assert res.info["init_time"] >= 0


def test_h_step_init_array_and_single_signal():
    d = overcomplete_dct(4, 16)
    y = 3.0 * d[:, 5] + 0.1 * d[:, 9]
    res = sparse_code(d, y, 0.5)
    assert res.x.shape == (16,)
    assert np.flatnonzero(res.x).tolist() == [5]
    res2 = sparse_code(d, y, 0.5, init=res.x, max_iter=3)
    np.testing.assert_allclose(res2.x, res.x, atol=1e-5)


def test_sparse_code_validation():
    d = overcomplete_dct(4, 16)
    y = np.ones((16, 3))
    with pytest.raises(ValueError, match="unit norm"):
        sparse_code(2 * d, y, 1.0)
    with pytest.raises(ValueError, match="shape"):
        sparse_code(d, np.ones((15, 3)), 1.0)
    with pytest.raises(ValueError, match="lam"):
        sparse_code(d, y, -1.0)
    with pytest.raises(ValueError, match="method"):
        sparse_code(d, y, 1.0, method="ista")
    with pytest.raises(ValueError, match="init"):
        sparse_code(d, y, 1.0, init="ones")
    with pytest.raises(ValueError, match="init array"):
        sparse_code(d, y, 1.0, init=np.zeros((16, 2)))


def test_pgm_h_step_lowers_objective_and_msm_is_not_worse():
    rng = np.random.default_rng(6)
    d = overcomplete_dct(8, 256)
    y = rng.standard_normal((64, 200)) * 10 + 30 * d[:, rng.integers(0, 256, 200)]
    a, r, lam = d.T @ d, -(d.T @ y), 200.0
    pgm = solve_h(a, r, lam, method="pgm", max_iter=10, tol=0)
    msm = solve_h(a, r, lam, method="msm", max_iter=10, tol=0)
    assert pgm.objective[-1] < pgm.objective[0]
    assert np.all(np.diff(pgm.objective) <= 1e-9 * np.abs(pgm.objective[:-1]))
    assert msm.fun <= pgm.fun


def test_omp_matches_sklearn_semantics():
    from sklearn.linear_model import orthogonal_mp

    rng = np.random.default_rng(7)
    d = _random_dictionary(rng, 8, 20)
    y = d[:, [1, 4]] @ np.array([[2.0], [-1.5]])
    h = omp(d, y, n_nonzero_coefs=2)
    np.testing.assert_allclose(d @ h, y, atol=1e-10)
    # noisy signals, several columns: the same codes as scikit-learn's own (non-Gram) OMP,
    # by count and by residual tolerance
    y = d @ (rng.standard_normal((20, 30)) * (rng.uniform(size=(20, 30)) < 0.2))
    y += 0.05 * rng.standard_normal(y.shape)
    for k in (1, 3, 5):
        np.testing.assert_allclose(
            omp(d, y, n_nonzero_coefs=k), orthogonal_mp(d, y, n_nonzero_coefs=k), atol=1e-10
        )
    tol = 0.5 * float(np.median(np.sum(y * y, axis=0)))
    np.testing.assert_allclose(omp(d, y, tol=tol), orthogonal_mp(d, y, tol=tol), atol=1e-10)
    h_tol = omp(d, y[:, 0], tol=1e-12)
    assert h_tol.shape == (20,)
    np.testing.assert_allclose(h_tol, orthogonal_mp(d, y[:, 0], tol=1e-12), atol=1e-10)


# ---------------------------------------------------------------------------------------
# dictionary step and learning
# ---------------------------------------------------------------------------------------


def test_dictionary_step_keeps_unit_norm_and_lowers_fit():
    rng = np.random.default_rng(8)
    d0 = _random_dictionary(rng, 16, 32)
    y = rng.standard_normal((16, 400))
    h = sparse_code(d0, y, 0.3, max_iter=10).x
    d1 = dictionary_step(d0, y, h, n_steps=5)
    np.testing.assert_allclose(np.linalg.norm(d1, axis=0), 1.0, atol=1e-12)
    assert l0_objective(d1, y, h, 0.3) < l0_objective(d0, y, h, 0.3)
    unused = ~np.any(h != 0, axis=1)
    np.testing.assert_array_equal(d1[:, unused], d0[:, unused])
    np.testing.assert_array_equal(dictionary_step(d0, y, np.zeros_like(h)), d0)


@pytest.mark.parametrize("init", ["omp", "random", "zeros"])
def test_dictionary_learning_lowers_objective(init):
    rng = np.random.default_rng(9)
    true = _random_dictionary(rng, 16, 24)
    codes = rng.standard_normal((24, 500)) * (rng.random((24, 500)) < 0.1)
    x = (true @ codes + 0.01 * rng.standard_normal((16, 500))).T
    model = L0DictionaryLearning(
        n_components=36, lam=0.05, n_iter=8, init=init, random_state=0, h_iter=5
    )
    codes_fit = model.fit_transform(x)
    assert codes_fit.shape == (500, 36)
    assert model.components_.shape == (36, 16)
    assert model.dictionary_.shape == (16, 36)
    np.testing.assert_allclose(np.linalg.norm(model.components_, axis=1), 1.0, atol=1e-12)
    assert model.objective_.shape == (9,)
    assert model.objective_[-1] < model.objective_[1] <= model.objective_[0] * (1 + 1e-12)
    assert set(model.timings_) == {"init", "h_step", "d_step"}
    assert model.transform(x[:10]).shape == (10, 36)


def test_dictionary_learning_params_and_errors():
    model = L0DictionaryLearning(n_components=16, lam=1.0)
    assert model.get_params()["lam"] == 1.0
    assert model.set_params(lam=2.0).lam == 2.0
    with pytest.raises(ValueError, match="(?i)invalid parameter"):
        model.set_params(alpha=1)
    with pytest.raises(NotFittedError, match="not fitted"):
        model.transform(np.zeros((2, 16)))
    x = np.random.default_rng(0).standard_normal((50, 10))
    with pytest.raises(ValueError, match=r"dict_init='dct' needs n_features = p\*\*2"):
        L0DictionaryLearning(n_components=16, dict_init="dct").fit(x)
    m = L0DictionaryLearning(n_components=12, lam=0.1, n_iter=2, dict_init="data").fit(x)
    assert m.components_.shape == (12, 10)
    with pytest.raises(ValueError, match="n_iter"):
        L0DictionaryLearning(n_components=12, n_iter=-1, dict_init="random").fit(x)
    with pytest.raises(ValueError, match="2-D"):
        L0DictionaryLearning().fit(np.zeros(5))


def test_dictionary_learning_verbose(capsys):
    x = np.random.default_rng(0).standard_normal((50, 16))
    L0DictionaryLearning(n_components=16, lam=0.2, n_iter=2, verbose=True).fit(x)
    err = capsys.readouterr().err
    assert "dictionary learning" in err


def _reference_dictionary_step(d, y, h, n_steps):
    """Bao et al.'s projected gradient step written out with dense NumPy products."""
    d = d.copy()
    used = np.any(h != 0, axis=1)
    hu = h[used]
    hht = hu @ hu.T
    lip = np.linalg.eigvalsh(hht)[-1]
    du = d[:, used]
    for _ in range(n_steps):
        cand = du - (du @ hht - y @ hu.T) / lip
        du = cand / np.linalg.norm(cand, axis=0)
    d[:, used] = du
    return d


@pytest.mark.parametrize("density", [0.02, 0.5])
def test_dictionary_step_matches_dense_reference_for_sparse_and_dense_codes(density):
    rng = np.random.default_rng(11)
    d0 = _random_dictionary(rng, 16, 64)
    y = rng.standard_normal((16, 300))
    h = rng.standard_normal((64, 300)) * (rng.random((64, 300)) < density)
    h[5] = 0.0  # an unused atom
    got = dictionary_step(d0, y, h, n_steps=3)
    np.testing.assert_allclose(got, _reference_dictionary_step(d0, y, h, 3), atol=1e-12)
    np.testing.assert_array_equal(got[:, 5], d0[:, 5])


def test_dictionary_learning_msm_without_tolerance_runs_the_plain_alternation():
    rng = np.random.default_rng(12)
    x = rng.standard_normal((200, 16)) * 3
    model = L0DictionaryLearning(
        n_components=16, lam=2.0, n_iter=3, init="zeros", h_iter=2, d_iter=2, tol=0
    ).fit(x)
    # the same alternation from the solver's H-step (tol=0: every column, every iteration)
    d = overcomplete_dct(4, 16)
    h = np.zeros((16, 200))
    for _ in range(3):
        h = solve_h(d.T @ d, -(d.T @ x.T), 2.0, x0=h, max_iter=2, tol=0).x
        d = _reference_dictionary_step(d, x.T, h, 2)
    np.testing.assert_allclose(model.dictionary_, d, atol=1e-9)
    np.testing.assert_allclose(model.codes_, h, atol=1e-9)
