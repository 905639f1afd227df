"""solve() skips the symmetry and PSD tests for an A equal to the last one that passed
them (``validation.VerifiedMatrix``), and never for anything else: an A changed in place,
another dtype, another working dtype."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import random_psd

import msm_gpu as mg
from msm_gpu import problem, validation


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
    kept, _ = problem.VERIFIED_A._entry
    assert not np.shares_memory(kept, a)
