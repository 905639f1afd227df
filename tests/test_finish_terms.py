"""The compiled host pass of the finish (msm_gpu/finish/terms.py) against the array-API
code it replaces on the host: the same F, size of terms and KKT residual per column, for
every penalty; the cold start without a product; other inputs left to the array-API code.
(The closed-form KKT values in tests/test_finish.py also run through it.)"""

from __future__ import annotations

import numpy as np
import pytest
from array_api_compat import numpy as xp

import msm_gpu as mg
from msm_gpu.finish import objective
from msm_gpu.finish.terms import host_kkt, host_terms

PENALTIES = [
    mg.Zero(),
    mg.NonNeg(),
    mg.Box(-0.3, 0.4),
    mg.Box(np.linspace(-1.0, 0.0, 12), np.linspace(0.1, 2.0, 12)),  # one bound per row
    mg.L1(0.7),
    mg.NonNegL1(0.2),
    mg.L0(0.05),
    mg.L0(0.05, lb=0.0, ub=1.0),
    mg.Lp(0.1, p=0.5),
    mg.Lp(0.1, p=2 / 3),
]


def problem(rng, n=12, c=9):
    m = rng.normal(size=(n + 3, n))
    a = m.T @ m
    a[4, :] = a[:, 4] = 0.0  # a zero column of C: the residual's diagonal floor
    r = rng.normal(size=(n, c))
    x = rng.normal(size=(n, c))
    x[rng.uniform(size=x.shape) < 0.3] = 0.0  # entries at zero (L0, Lp, the bounds)
    return a, r, x


@pytest.mark.parametrize("penalty", PENALTIES, ids=repr)
def test_host_pass_matches_the_array_api_code(rng, penalty):
    a, r, x = problem(rng)
    # feasible x (F finite), then the same x with entries outside the bounds (F = inf)
    inside = np.clip(x, np.reshape(penalty.lb, (-1, 1)), np.reshape(penalty.ub, (-1, 1)))
    for point in (inside, x):
        f, size, kkt = host_terms(a, r, point, penalty)
        f_ref, size_ref = objective.array_api_column_objective(xp, a, r, point, penalty)
        kkt_ref = objective.array_api_kkt_residual(xp, a, r, point, penalty)
        np.testing.assert_allclose(f, f_ref, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(size, size_ref, rtol=1e-12)
        np.testing.assert_allclose(kkt, kkt_ref, rtol=1e-10, atol=1e-15)
    assert np.isfinite(host_terms(a, r, inside, penalty)[0]).all()
    if np.any((x < np.reshape(penalty.lb, (-1, 1))) | (x > np.reshape(penalty.ub, (-1, 1)))):
        assert np.isinf(host_terms(a, r, x, penalty)[0]).any()


@pytest.mark.parametrize("penalty", PENALTIES, ids=repr)
def test_kkt_from_products_matches_the_array_api_code(rng, penalty):
    # the design form's KKT residual: A x, r and diag(A) given (no A), some columns only
    a, r, x = problem(rng)
    ax, diag = a @ x, np.diagonal(a).copy()
    want = objective.array_kkt_residual_from(xp, ax, r, diag, x, penalty)
    got = objective.kkt_residual_from(xp, ax, r, diag, x, penalty)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-15)
    cols = [1, 5]  # strided column picks: copied to C order, same values
    np.testing.assert_allclose(
        host_kkt(ax[:, cols], r[:, cols], diag, x[:, cols], penalty), want[cols], rtol=1e-10
    )
    # float32 or 1-D input: left to the array-API code
    assert host_kkt(ax.astype(np.float32), r, diag, x, penalty) is None
    assert host_kkt(ax, r, diag[:, None], x, penalty) is None


def test_public_functions_use_the_host_pass_for_host_float64(rng, monkeypatch):
    a, r, x = problem(rng)
    want_f = objective.array_api_column_objective(xp, a, r, x, mg.NonNeg())[0]
    want_kkt = objective.array_api_kkt_residual(xp, a, r, x, mg.NonNeg())

    def forbidden(*args, **kwargs):
        raise AssertionError("the array-API code ran for host float64 arrays")

    monkeypatch.setattr(objective, "array_api_column_objective", forbidden)
    monkeypatch.setattr(objective, "array_api_kkt_residual", forbidden)
    np.testing.assert_allclose(objective.column_objective(xp, a, r, x, mg.NonNeg())[0], want_f)
    np.testing.assert_allclose(objective.kkt_residual(a, r, x, mg.NonNeg()), want_kkt)
    # float32 x: kkt_residual works in float64, so the host pass still runs
    x32 = x.astype(np.float32)
    np.testing.assert_allclose(
        objective.kkt_residual(a, r, x32, mg.NonNeg()),
        objective.kkt_residual(a, r, x32.astype(np.float64), mg.NonNeg()),
    )


def test_cold_start_forms_no_product(rng):
    a, r, _ = problem(rng)
    a[0, 1] = np.nan  # a product with A would show as NaN
    zero = np.zeros_like(r)
    f, size, _ = host_terms(a, r, zero, mg.L1(0.5), kkt=False)
    np.testing.assert_array_equal(f, 0.0)
    np.testing.assert_array_equal(size, 0.0)
    f, _, _ = host_terms(a, r, zero, mg.Box(0.5, 1.0), kkt=False)  # 0 outside the box
    assert np.isinf(f).all()


def test_other_inputs_are_left_to_the_array_api_code(rng):
    a, r, x = problem(rng)
    assert host_terms(a.astype(np.float32), r, x, mg.NonNeg()) is None
    assert host_terms(a, r, x.astype(np.float32), mg.NonNeg()) is None
    assert host_terms(a, r[:, 0], x[:, 0], mg.NonNeg()) is None  # 1-D
    assert host_terms(a, r, list(x), mg.NonNeg()) is None


def test_strided_views_give_the_same_terms(rng):
    a, r, x = problem(rng, c=12)
    cols = np.array([0, 3, 6, 9])
    views = (np.asfortranarray(a), r[:, ::3], x[:, ::3])
    want = host_terms(a, np.ascontiguousarray(r[:, ::3]), x[:, cols], mg.L1(0.3))
    got = host_terms(*views, mg.L1(0.3))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    zero = np.zeros((12, 8))[:, ::2]  # a strided cold start
    np.testing.assert_array_equal(host_terms(a, r[:, ::3], zero, mg.NonNeg())[0], 0.0)
