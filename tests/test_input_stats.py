"""The one-pass input kernels (msm_gpu._input.stats) against the NumPy code they replace."""

import numpy as np
import pytest
import scipy.sparse as sp

import msm_gpu as mg
from msm_gpu._input import problem as prob
from msm_gpu._input import stats as ist

DTYPES = (np.float32, np.float64)


def _spd(n, dtype, seed=0):
    c = np.random.default_rng(seed).normal(size=(n + 3, n))
    return (c.T @ c).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(7,), (1, 1), (5, 3), (40, 130), (3, 257)])
def test_column_stats_match_numpy(dtype, shape):
    x = np.random.default_rng(1).normal(scale=3.0, size=shape).astype(dtype)
    finite, biggest, squares = ist.column_stats(x)
    x2 = x.reshape(shape[0], -1).astype(np.float64)
    assert finite is True
    assert biggest == np.abs(x).max()
    np.testing.assert_allclose(squares, (x2 * x2).sum(axis=0), rtol=1e-13)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("where", [(0, 0), (13, 6), (39, 9)])
def test_column_stats_find_every_nonfinite_entry(dtype, bad, where):
    x = np.ones((40, 10), dtype=dtype)
    x[where] = bad
    assert ist.column_stats(x)[0] is False
    assert ist.column_stats(x[:, where[1]].copy())[0] is False  # 1-D


def test_column_stats_decline_what_numpy_handles():
    x = np.ones((6, 4))
    assert ist.column_stats(np.asfortranarray(x)) is None
    assert ist.column_stats(x[:, ::2]) is None
    assert ist.column_stats(np.ones((6, 4), dtype=np.int64)) is None
    assert ist.column_stats(sp.csr_matrix(x)) is None
    assert ist.column_stats(np.ones((2, 3, 4))) is None


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 2, 17, 64])
def test_symmetry_stats_match_numpy(dtype, n):
    rng = np.random.default_rng(n)
    a = rng.normal(size=(n, n)).astype(dtype)
    a[np.diag_indices(n)] = rng.normal(size=n)  # some negative
    finite, scale, asym, low, where = ist.symmetry_stats(a)
    assert finite is True
    assert scale == float(np.abs(a).max())
    assert asym == float(np.abs(a - a.T).max())  # the same rounding, in a's dtype
    assert (low, where) == (float(np.diag(a).min()), int(np.argmin(np.diag(a))))
    # on a layout other than C order too
    assert ist.symmetry_stats(np.asfortranarray(a)) == (finite, scale, asym, low, where)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("where", [(0, 0), (2, 5), (5, 2), (6, 6)])
def test_symmetry_stats_find_nonfinite_entries(bad, where):
    a = _spd(7, np.float64)
    a[where] = bad
    assert ist.symmetry_stats(a)[0] is False


def test_symmetry_stats_decline_what_numpy_handles():
    assert ist.symmetry_stats(np.ones((3, 4))) is None
    assert ist.symmetry_stats(np.eye(3, dtype=np.int32)) is None
    assert ist.symmetry_stats(sp.eye(3, format="csr")) is None


@pytest.mark.parametrize("dtype", DTYPES)
def test_psd_test_matrix_is_check_psds_numpy_matrix(dtype):
    a = _spd(30, dtype)
    a[4, 4] = 0.0  # a zero diagonal entry: its scale is 1
    eps = 1e-5
    h = ist.psd_test_matrix(a, eps)
    ref = np.array(a, dtype=np.float64, order="F")
    d = np.diagonal(ref)
    inv_s = 1.0 / np.sqrt(np.where(d > 0, d, 1.0))
    ref *= inv_s[:, None]
    ref *= inv_s[None, :]
    ref[np.diag_indices(30)] += eps
    assert h.flags.f_contiguous and h.dtype == np.float64
    lower = np.tril_indices(30)
    np.testing.assert_array_equal(h[lower], ref[lower])  # all dpotrf(lower=1) reads


@pytest.mark.parametrize(
    ("dtype", "scale"),
    [
        (np.float32, 1.0),
        (np.float32, 1e-30),
        (np.float64, 1.0),
        (np.float64, 1e-200),
        (np.float64, 1e200),
    ],
)
def test_prepare_solve_stopping_floor_from_the_one_pass_norms(dtype, scale):
    """The stopping floor from R's one-pass column norms is the one from the rescaled r
    (the fallback for R whose squares would under/overflow), to rounding."""
    a = _spd(12, np.float64) * scale
    a = a.astype(dtype)
    r = (np.random.default_rng(3).normal(size=(12, 9)) * scale).astype(dtype)
    r[:, 4] = 0.0
    x0 = np.ones((12, 9), dtype=dtype)
    problem = prob.prepare_solve(a, r, mg.NonNeg(), x0, "cpu")
    norms = prob._column_norms(np, problem.r)
    trace = float(np.trace(problem.a.astype(np.float64)))
    expected = np.where(norms > 0, norms / trace, prob._column_norms(np, problem.x0))
    np.testing.assert_allclose(problem.x_floor, expected, rtol=1e-6)


def test_input_errors_keep_their_order():
    """NaN is reported before a wrong shape, for A and R alike."""
    a = np.full((3, 4), np.nan)
    with pytest.raises(ValueError, match="A contains NaN or Inf"):
        mg.solve(a, np.ones(3), mg.NonNeg())
    with pytest.raises(ValueError, match="R contains NaN or Inf"):
        mg.solve(np.eye(3), np.full(4, np.nan), mg.NonNeg())
    with pytest.raises(ValueError, match="A must be symmetric"):
        mg.solve(np.array([[1.0, 2.0], [0.0, 1.0]], dtype=np.float32), np.ones(2), mg.NonNeg())
    with pytest.raises(ValueError, match=r"A\[1, 1\] = -1 < 0"):
        mg.solve(np.diag([1.0, -1.0, -1.0]), np.ones(3), mg.NonNeg())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_all_finite_matches_numpy(rng, dtype):
    x = rng.normal(size=(37, 53)).astype(dtype)
    x[0, 0] = -0.0
    assert ist.all_finite(x) is True
    for bad in (np.nan, np.inf, -np.inf):
        for where in ((0, 0), (36, 52), (17, 5)):
            y = x.copy()
            y[where] = bad
            assert ist.all_finite(y) is False
            assert ist.all_finite(np.asfortranarray(y)) is False
            assert ist.all_finite(y[where[0]]) is False  # 1-D
    # not handled (the caller takes NumPy's test): strided views, other dtypes, empty
    assert ist.all_finite(x[:, ::2]) is None
    assert ist.all_finite(x.astype(np.float16)) is None
    assert ist.all_finite(np.zeros((0, 3), dtype)) is None


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_finite_columns_matches_numpy(rng, dtype):
    x = rng.normal(size=(29, 41)).astype(dtype)
    x[3, 7] = np.nan
    x[28, 40] = np.inf
    x[0, 0] = -np.inf
    x[5, 9] = -0.0
    np.testing.assert_array_equal(ist.finite_columns(x), np.isfinite(x).all(axis=0))
    assert ist.finite_columns(x).sum() == 41 - 3
    assert ist.finite_columns(np.asfortranarray(x)) is None  # NumPy's test then
    assert ist.finite_columns(x[:, 0]) is None


def test_equilibration_is_a_power_of_two_that_brings_each_diagonal_near_one():
    from msm_gpu._input.scaling import equilibration

    rng = np.random.default_rng(0)
    d = rng.uniform(0.5, 2.0, 2000) * 10.0 ** rng.uniform(-320, 308, 2000)
    d[:8] = [0.0, np.inf, np.nan, -1.0, 5e-324, 2.2e-308, 1.7e308, 1.0]
    s = equilibration(d)
    mant, _ = np.frexp(s)
    assert np.all(mant == 0.5)  # powers of two, every one a normal number
    ok = np.isfinite(d) & (d > 0)
    assert np.all(s[~ok] == 1.0) and not ok[:4].any()
    scaled = np.ldexp(d[ok], 2 * (np.frexp(s[ok])[1] - 1))  # s^2 d (s^2 may overflow)
    assert np.all((scaled >= 0.5) & (scaled < 2.0))
    k = np.frexp(d[ok])[1]
    np.testing.assert_array_equal(s[ok], np.ldexp(1.0, -np.floor_divide(k, 2)))
