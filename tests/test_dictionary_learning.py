"""L0DictionaryLearning at scikit-learn's DictionaryLearning / SparseCoder level (issue 50):
defaults on any shape, float32, bool and sparse input, l1 and positive codes, positive
atoms, OMP codes, partial_fit, inverse_transform, a fixed dictionary; the messages of
sparse_code.  Answers are compared with scikit-learn's on the same input, or with closed
forms (an orthonormal dictionary makes the l0 and l1 codes thresholdings)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.decomposition import DictionaryLearning, SparseCoder, sparse_encode

import msm_gpu as mg

L0DictionaryLearning = mg.L0DictionaryLearning


@pytest.fixture(scope="module")
def X():
    return np.random.default_rng(0).standard_normal((100, 10))


@pytest.fixture(scope="module")
def orthonormal():
    """The 16 x 16 orthonormal 2-D DCT, atoms as rows, and signals in its span whose
    coefficients are away from the thresholds sqrt(2 lam) = 1 and 2 of the tests (MSM's
    fixed points threshold at sqrt(2 lam / (1 + theta)), theta = 0.01)."""
    atoms = mg.overcomplete_dct(4, 16).T
    values = np.array([-3.0, -1.5, -0.3, 0.3, 1.5, 3.0])
    codes = np.random.default_rng(1).choice(values, size=(40, 16))
    return atoms, codes @ atoms


# -- defaults on any shape ----------------------------------------------------------------


def test_default_dictionary_adapts_to_the_sizes(X):
    """dict_init="dct" (the old default) raised unless both sizes were perfect squares."""
    model = L0DictionaryLearning(n_components=16).fit(X)
    assert model.dict_init_ == "svd" and model.components_.shape == (16, 10)
    np.testing.assert_allclose(np.linalg.norm(model.components_, axis=1), 1.0, atol=1e-12)
    square = L0DictionaryLearning(n_components=16, n_iter=1).fit(X[:, :9])
    assert square.dict_init_ == "dct"
    # 1 x 1 "patches" have no DCT beyond the constant atom: from the data
    assert L0DictionaryLearning(n_components=4, n_iter=1).fit(X[:, :1]).dict_init_ == "svd"


def test_n_components_none_is_n_features_as_in_scikit_learn(X):
    ours = L0DictionaryLearning(n_iter=1).fit(X)
    theirs = DictionaryLearning(max_iter=2).fit(X)
    assert ours.components_.shape == theirs.components_.shape == (10, 10)


def test_svd_start_is_the_data_s_singular_vectors(X):
    model = L0DictionaryLearning(n_components=4, n_iter=0, dict_init="svd").fit(X)
    _, _, vt = np.linalg.svd(X, full_matrices=False)
    np.testing.assert_allclose(np.abs(model.components_), np.abs(vt[:4]), atol=1e-12)


def test_fit_transform_is_fit_then_transform(X):
    model = L0DictionaryLearning(n_components=12, lam=0.5, random_state=0)
    codes = model.fit_transform(X)
    np.testing.assert_array_equal(codes, model.transform(X))


# -- dtypes and kinds of input ------------------------------------------------------------


def test_float32_in_float32_out_as_scikit_learn(X):
    x32 = X.astype(np.float32)
    ours = L0DictionaryLearning(n_components=8, lam=0.5, n_iter=2, random_state=0).fit(x32)
    theirs = DictionaryLearning(n_components=8, max_iter=2, random_state=0).fit(x32)
    assert ours.components_.dtype == theirs.components_.dtype == np.float32
    assert ours.transform(x32).dtype == theirs.transform(x32).dtype == np.float32
    assert ours.fit_transform(x32).dtype == np.float32
    assert ours.inverse_transform(ours.transform(x32)).dtype == np.float32
    # the float64 fit of the same numbers, to float32 rounding
    ref = L0DictionaryLearning(n_components=8, lam=0.5, n_iter=2, random_state=0).fit(
        x32.astype(np.float64)
    )
    np.testing.assert_allclose(ours.components_, ref.components_, rtol=0, atol=1e-6)
    d32 = mg.overcomplete_dct(4, 16).astype(np.float32)
    y32 = np.ones((16, 3), np.float32)
    assert mg.sparse_code(d32, y32, lam=0.1).x.dtype == np.float32
    assert mg.sparse_code(d32, y32.astype(np.float64), lam=0.1).x.dtype == np.float64


def test_boolean_input_is_coded_like_its_float_copy(X):
    """bool X was refused ("must be a real numeric array")."""
    xb = X > 0
    a = L0DictionaryLearning(n_components=6, lam=0.1, n_iter=2, random_state=0).fit(xb)
    b = L0DictionaryLearning(n_components=6, lam=0.1, n_iter=2, random_state=0).fit(xb * 1.0)
    np.testing.assert_array_equal(a.components_, b.components_)
    np.testing.assert_array_equal(a.transform(xb), b.transform(xb * 1.0))


def test_sparse_input_is_refused_as_scikit_learn_refuses_it(X):
    csr = sp.csr_matrix(X * (X > 1))
    with pytest.raises(TypeError, match="Sparse data was passed for X") as ours:
        L0DictionaryLearning(n_components=4).fit(csr)
    with pytest.raises(TypeError) as theirs:
        DictionaryLearning(n_components=4).fit(csr)
    assert str(ours.value) == str(theirs.value)


def test_sparse_code_messages_name_the_argument():
    """sparse_code(D, scipy.sparse Y) said "got dtype object", an empty Y "R must not be
    empty" (R is not the user's argument)."""
    d = mg.overcomplete_dct(4, 16)
    with pytest.raises(TypeError, match=r"Y is a sparse matrix .*pass Y.toarray\(\)"):
        mg.sparse_code(d, sp.csr_matrix(np.ones((16, 3))), lam=0.1)
    with pytest.raises(TypeError, match=r"D is a sparse matrix"):
        mg.sparse_code(sp.csr_matrix(d), np.ones(16), lam=0.1)
    with pytest.raises(ValueError, match=r"Y must hold at least one signal .*\(16, 0\)"):
        mg.sparse_code(d, np.zeros((16, 0)), lam=0.1)
    with pytest.raises(ValueError, match=r"D must not be empty"):
        mg.sparse_code(np.zeros((0, 3)), np.zeros(0), lam=0.1)


def test_init_array_shape_message_is_in_the_user_s_orientation(X):
    """A (16, 100) init got "must have shape (16, 100), got (100, 16)": transposed."""
    with pytest.raises(ValueError, match=r"= \(100, 16\), got \(16, 100\)"):
        L0DictionaryLearning(n_components=16, init=np.zeros((16, 100))).fit(X)


# -- codes ----------------------------------------------------------------------------------


def test_l1_codes_match_scikit_learn_lasso(X):
    """penalty="l1": scikit-learn's lasso codes (sparse_encode, alpha = lam)."""
    atoms = np.random.default_rng(2).standard_normal((15, 10))
    atoms /= np.linalg.norm(atoms, axis=1, keepdims=True)
    for positive in (False, True):
        coder = L0DictionaryLearning.from_dictionary(
            atoms, penalty="l1", lam=0.3, positive_code=positive, tol=1e-10
        )
        ref = sparse_encode(
            X, atoms, algorithm="lasso_cd", alpha=0.3, positive=positive, max_iter=100000
        )
        np.testing.assert_allclose(coder.transform(X), ref, atol=1e-6)


def test_fixed_dictionary_like_sparse_coder_with_any_atom_norms(X):
    """from_dictionary: scikit-learn's SparseCoder, atoms of any norm as given."""
    atoms = np.random.default_rng(3).standard_normal((12, 10)) * np.arange(1, 13)[:, None]
    coder = L0DictionaryLearning.from_dictionary(atoms, penalty="l1", lam=0.2, tol=1e-10)
    ref = SparseCoder(atoms, transform_algorithm="lasso_cd", transform_alpha=0.2)
    ref.set_params(transform_max_iter=100000)
    np.testing.assert_allclose(coder.transform(X), ref.transform(X), atol=1e-6)
    np.testing.assert_array_equal(coder.components_, atoms)  # used as given
    codes = coder.transform(X)
    np.testing.assert_allclose(coder.inverse_transform(codes), ref.inverse_transform(codes))
    # l0 counts atoms whatever their norms: the codes of the unit atoms, rescaled
    l0 = L0DictionaryLearning.from_dictionary(atoms, lam=0.5).transform(X)
    norms = np.linalg.norm(atoms, axis=1)
    unit = L0DictionaryLearning.from_dictionary(atoms / norms[:, None], lam=0.5).transform(X)
    np.testing.assert_allclose(l0 * norms, unit, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="dictionary atom 2 is zero"):
        L0DictionaryLearning.from_dictionary(np.vstack([atoms[:2], np.zeros((1, 10))]))


def test_positive_l0_codes_and_transform_alpha_on_an_orthonormal_dictionary(orthonormal):
    """Orthonormal atoms: the l0 code of y is the hard thresholding of D y at sqrt(2 lam),
    the nonnegative one keeps the positive coefficients above it."""
    atoms, y = orthonormal
    c = y @ atoms.T
    for lam in (0.5, 2.0):
        coder = L0DictionaryLearning.from_dictionary(atoms, lam=9.0, transform_alpha=lam, tol=1e-12)
        np.testing.assert_allclose(
            coder.transform(y), np.where(c**2 > 2 * lam, c, 0.0), rtol=1e-9, atol=1e-9
        )
        coder.set_params(positive_code=True)
        np.testing.assert_allclose(
            coder.transform(y), np.where((c > 0) & (c**2 > 2 * lam), c, 0.0), atol=1e-9
        )


def test_n_nonzero_coefs_codes_by_omp_as_scikit_learn(X):
    atoms = np.random.default_rng(4).standard_normal((20, 10))
    atoms /= np.linalg.norm(atoms, axis=1, keepdims=True)
    coder = L0DictionaryLearning.from_dictionary(atoms, transform_n_nonzero_coefs=3)
    ref = SparseCoder(atoms, transform_algorithm="omp", transform_n_nonzero_coefs=3)
    codes = coder.transform(X)
    np.testing.assert_allclose(codes, ref.transform(X), atol=1e-10)
    assert np.count_nonzero(codes, axis=1).max() == 3
    coder.set_params(positive_code=True)
    with pytest.raises(ValueError, match="transform_n_nonzero_coefs .* positive_code"):
        coder.transform(X)


def test_positive_dictionary_learning(X):
    data = np.abs(X)
    model = L0DictionaryLearning(n_components=8, lam=0.2, positive_dict=True, positive_code=True)
    model.set_params(random_state=0).fit(data)
    assert np.all(model.components_ >= 0)
    np.testing.assert_allclose(np.linalg.norm(model.components_, axis=1), 1.0, atol=1e-12)
    assert np.all(model.transform(data) >= 0)
    assert model.objective_[-1] < model.objective_[0]


# -- streaming and inverse ------------------------------------------------------------------


def test_partial_fit_learns_from_batches():
    rng = np.random.default_rng(5)
    true = rng.standard_normal((12, 16))
    true /= np.linalg.norm(true, axis=1, keepdims=True)
    codes = np.zeros((600, 12))
    for i in range(600):
        codes[i, rng.choice(12, 2, replace=False)] = rng.uniform(1, 2, 2) * rng.choice([-1, 1], 2)
    data = codes @ true
    model = L0DictionaryLearning(n_components=12, lam=0.05, dict_init="random", random_state=0)
    start = None
    for batch in np.array_split(data, 20):
        model.partial_fit(batch)
        if start is None:
            start = model.components_.copy()
    assert model.n_steps_ == model.n_iter_ == 20 and model.dict_init_ == "random"
    np.testing.assert_allclose(np.linalg.norm(model.components_, axis=1), 1.0, atol=1e-12)

    def misfit(components):
        coder = L0DictionaryLearning.from_dictionary(components, lam=0.05)
        return np.linalg.norm(data - coder.inverse_transform(coder.transform(data)))

    # as far as 20 iterations of the batch fit from the same start (its misfit: 11.2)
    batch = L0DictionaryLearning(n_components=12, lam=0.05, n_iter=20, dict_init="random")
    batch.set_params(random_state=0).fit(data)
    assert misfit(model.components_) < min(1.05 * misfit(batch.components_), 0.6 * misfit(start))
    with pytest.raises(ValueError, match="X has 15 features"):
        model.partial_fit(data[:, :15])


def test_inverse_transform_is_codes_times_components(X):
    model = L0DictionaryLearning(n_components=6, lam=0.1, n_iter=2, random_state=0).fit(X)
    codes = model.transform(X)
    ref = SparseCoder(model.components_).inverse_transform(codes)
    np.testing.assert_allclose(model.inverse_transform(codes), ref, rtol=1e-14)
    with pytest.raises(ValueError, match="n_components = 6 columns"):
        model.inverse_transform(codes[:, :5])


def test_data_whose_squares_overflow_are_refused_naming_x(X):
    """1e300 data gave the solver's message about "max |R|^2 / max |A|", names the user
    never passed."""
    with pytest.raises(ValueError, match=r"X has values up to .*overflows float64.*rescale X"):
        L0DictionaryLearning(n_iter=1).fit(X * 1e300)
