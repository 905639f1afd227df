"""solve() skips the symmetry and PSD tests for an A equal to the last one that passed
them (``validation.VerifiedMatrix``), and never for anything else: an A changed in place,
another dtype, another working dtype.  It also reuses that A's rescaled copy, read-only."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import random_psd

import msm_gpu as mg
from msm_gpu._input import problem, validation


@pytest.fixture(autouse=True)
def fresh_cache():
    problem.VERIFIED_A.forget()
    yield
    problem.VERIFIED_A.forget()


@pytest.fixture
def counted(monkeypatch):
    """Counts of the symmetry and PSD tests that solve() runs."""
    calls = {"psd": 0, "symmetry": 0}
    real_psd, real_sym = validation.check_psd, validation.check_square_symmetric

    def psd(*args, **kwargs):
        calls["psd"] += 1
        return real_psd(*args, **kwargs)

    def sym(*args, **kwargs):
        calls["symmetry"] += 1
        return real_sym(*args, **kwargs)

    monkeypatch.setattr(validation, "check_psd", psd)
    monkeypatch.setattr(validation, "check_square_symmetric", sym)
    return calls


def _problem(rng, n=30, r=7, dtype=np.float64):
    a = random_psd(rng, n, dtype=dtype)
    rhs = rng.normal(size=(n, r)).astype(dtype)
    return a, rhs


def test_an_equal_a_skips_the_tests_and_gives_the_same_answer(rng, counted):
    a, rhs = _problem(rng)
    first = mg.solve(a, rhs, mg.NonNeg())
    assert counted == {"psd": 1, "symmetry": 1}
    again = mg.solve(a.copy(), rhs, mg.NonNeg())  # another array, the same entries
    assert counted == {"psd": 1, "symmetry": 1}
    np.testing.assert_array_equal(again.x, first.x)
    assert again.converged and again.fun == first.fun


def test_an_a_made_indefinite_in_place_is_refused(rng, counted):
    a, rhs = _problem(rng)
    mg.solve(a, rhs, mg.NonNeg())
    evals, vecs = np.linalg.eigh(a)
    a[...] = (vecs * np.r_[-1.0, evals[1:]]) @ vecs.T  # one eigenvalue -1, still symmetric
    a[...] = 0.5 * (a + a.T)
    with pytest.raises(ValueError, match="not positive semidefinite"):
        mg.solve(a, rhs, mg.NonNeg())
    assert counted["psd"] == 2


def test_an_a_changed_in_one_entry_is_tested_again(rng, counted):
    a, rhs = _problem(rng)
    mg.solve(a, rhs, mg.NonNeg())
    a[3, 5] += 1.0  # no longer symmetric
    with pytest.raises(ValueError, match="must be symmetric"):
        mg.solve(a, rhs, mg.NonNeg())
    a[3, 5] = np.nan
    with pytest.raises(ValueError, match="NaN or Inf"):
        mg.solve(a, rhs, mg.NonNeg())
    assert counted["symmetry"] == 3


def test_the_psd_verdict_is_kept_per_working_dtype(rng, counted):
    """A float32 A with float32 R works in float32, with float64 R in float64: the PSD
    test (eps, rounding) differs, so each working dtype is tested once."""
    a, rhs = _problem(rng, dtype=np.float32)
    mg.solve(a, rhs, mg.NonNeg())
    mg.solve(a, rhs.astype(np.float64), mg.NonNeg())
    assert counted["psd"] == 2
    mg.solve(a, rhs, mg.NonNeg())
    mg.solve(a, rhs.astype(np.float64), mg.NonNeg())
    assert counted == {"psd": 2, "symmetry": 1}
    mg.solve(a.astype(np.float64), rhs, mg.NonNeg())  # equal values, another dtype
    assert counted == {"psd": 3, "symmetry": 2}


def test_a_rejected_a_is_never_remembered(rng, counted):
    a, rhs = _problem(rng)
    a[0, 0] = -1.0
    for _ in range(2):
        with pytest.raises(ValueError, match="positive semidefinite"):
            mg.solve(a, rhs, mg.NonNeg())
    assert counted["symmetry"] == 2


def test_only_small_host_float_matrices_are_kept(rng):
    cache = validation.VerifiedMatrix(max_n=10)
    small, big = random_psd(rng, 10), random_psd(rng, 11)
    cache.remember(big, np.float64)
    assert not cache.passed(big)
    cache.remember(small.astype(np.int64), np.float64)
    assert not cache.passed(small.astype(np.int64))
    cache.remember(small, np.float64)
    assert cache.passed(small) == {np.dtype(np.float64)}
    small[0, 0] += 1.0  # the cache holds a copy, compared entry by entry
    assert not cache.passed(small)


def test_the_users_a_is_not_kept_by_reference(rng):
    a, rhs = _problem(rng)
    mg.solve(a, rhs, mg.NonNeg())
    kept = problem.VERIFIED_A._entry[0]
    assert not np.shares_memory(kept, a)


@pytest.fixture
def internal_a(monkeypatch):
    """The rescaled A that every solve() call hands on (``problem._finish``'s ``a``)."""
    seen = []
    real = problem._finish

    def spy(be, a, *args, **kwargs):
        seen.append(a)
        return real(be, a, *args, **kwargs)

    monkeypatch.setattr(problem, "_finish", spy)
    return seen


def _fresh_solve(a, rhs, **kwargs):
    problem.VERIFIED_A.forget()
    return mg.solve(a, rhs, mg.NonNeg(), **kwargs)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_an_equal_a_reuses_its_rescaled_copy_read_only(rng, internal_a, dtype):
    a, rhs = _problem(rng, dtype=dtype)
    first = mg.solve(a, rhs, mg.NonNeg(), tol=0, max_iter=30)
    again = mg.solve(a.copy(), rhs, mg.NonNeg(), tol=0, max_iter=30)
    assert internal_a[1] is internal_a[0]  # not made again
    assert not internal_a[0].flags.writeable and not np.shares_memory(internal_a[0], a)
    assert a.flags.writeable  # the user's A untouched
    np.testing.assert_array_equal(again.x, first.x)
    assert again.fun == first.fun
    # the same as a call that made it afresh, bit for bit
    fresh = _fresh_solve(a, rhs, tol=0, max_iter=30)
    np.testing.assert_array_equal(fresh.x, first.x)
    assert internal_a[2] is not internal_a[0]
    np.testing.assert_array_equal(internal_a[2], internal_a[0])


def test_an_a_changed_in_place_gets_a_new_rescaled_copy(rng, internal_a):
    a, rhs = _problem(rng)
    mg.solve(a, rhs, mg.NonNeg())
    a *= 3.0  # still symmetric PSD, other entries: a new scale
    got = mg.solve(a, rhs, mg.NonNeg(), tol=0, max_iter=40)
    assert internal_a[1] is not internal_a[0]
    ref = _fresh_solve(a, rhs, tol=0, max_iter=40)
    np.testing.assert_array_equal(got.x, ref.x)


def test_each_working_dtype_has_its_own_rescaled_copy(rng, internal_a):
    a, rhs = _problem(rng, dtype=np.float32)
    for r in (rhs, rhs.astype(np.float64), rhs, rhs.astype(np.float64)):
        mg.solve(a, r, mg.NonNeg(), tol=0, max_iter=5)
    f32, f64, f32_again, f64_again = internal_a
    assert f32.dtype == np.float32 and f64.dtype == np.float64
    assert f32_again is f32 and f64_again is f64


def test_no_copy_is_kept_without_the_tests(rng, internal_a):
    """check_convergence=False runs no test, so nothing is remembered or reused."""
    a, rhs = _problem(rng)
    for _ in range(2):
        mg.solve(a, rhs, mg.NonNeg(), check_convergence=False, tol=0, max_iter=5)
    assert internal_a[1] is not internal_a[0] and internal_a[0].flags.writeable


def test_derived_values_live_and_die_with_the_entry(rng):
    cache = validation.VerifiedMatrix(max_n=10)
    a, b = random_psd(rng, 5), random_psd(rng, 5)
    entry = cache.remember(a, np.float64)
    assert entry is not None and cache.remember(random_psd(rng, 11), np.float64) is None
    cache.keep_derived(entry, "k", 1)
    passed, found = cache.match(a.copy())
    assert passed == {np.dtype(np.float64)} and cache.derived(found, "k") == 1
    again = cache.remember(a, np.float32, passed, found)  # the same A: kept
    assert cache.derived(cache.match(a)[1], "k") == 1
    cache.remember(b, np.float64)  # another A: dropped
    assert cache.match(a) == (frozenset(), None)
    assert cache.derived(cache.match(b)[1], "k") is None
    # a value derived from an entry that another thread replaced meanwhile stays with
    # the old entry, never with the new matrix
    cache.keep_derived(again, "k", 2)
    assert cache.derived(cache.match(b)[1], "k") is None
    assert cache.derived(None, "k") is None
