"""Every prox against a dense grid minimisation of its 1-D problem, and the shared table."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import msm_gpu as mg
from msm_gpu.backends.cpu.kernels import prox_scalar
from msm_gpu.penalties import COL_LAM, COL_LB, COL_P, COL_UB

PENALTIES = [
    mg.Zero(),
    mg.NonNeg(),
    mg.Box(-1.0, 2.0),
    mg.Box(0.5, np.inf),
    mg.L1(0.7),
    mg.NonNegL1(0.3),
    mg.L0(1.3),
    mg.L0(0.5, lb=0.0),
    mg.L0(0.5, lb=0.5, ub=3.0),
    mg.L0(0.8, lb=-2.0, ub=1.0),
    mg.Lp(0.9, 0.5),
    mg.Lp(0.9, 2 / 3),
    mg.Lp(4.0, 0.5),
    mg.Lp(4.0, 2 / 3),
]

GRID = np.linspace(-40.0, 40.0, 400_001)


def one_d_objective(pen, w, b, t):
    return 0.5 * b * t * t + w * t + pen.value(np.asarray(t, dtype=np.float64))


@pytest.mark.parametrize("pen", PENALTIES, ids=repr)
@settings(max_examples=60, deadline=None)
@given(w=st.floats(-30, 30), b=st.floats(0.05, 5.0))
def test_prox_is_global_minimiser_on_dense_grid(pen, w, b):
    t = float(pen.prox(np.array([w]), np.array([b]))[0])
    f_t = float(one_d_objective(pen, w, b, t))
    f_grid = one_d_objective(pen, w, b, GRID)
    assert np.isfinite(f_t), "prox left the domain of h"
    # the prox may beat the grid (it is exact), but never lose to it beyond rounding
    assert f_t <= f_grid.min() + 1e-9 * max(1.0, abs(f_grid.min()))


@pytest.mark.parametrize("pen", PENALTIES, ids=repr)
def test_numba_prox_matches_reference(pen):
    rng = np.random.default_rng(0)
    w = rng.normal(size=500) * 6
    b = rng.uniform(0.05, 4.0, size=500)
    ref = pen.prox(w, b)
    row = pen.table(1)[0]
    got = np.array(
        [
            prox_scalar(pen.code, wi, bi, row[COL_LAM], row[COL_LB], row[COL_UB], row[COL_P])
            for wi, bi in zip(w, b, strict=True)
        ]
    )
    np.testing.assert_allclose(got[:, 0], ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got[:, 1], pen.value(got[:, 0]), rtol=1e-12, atol=1e-12)


def test_l0_matches_paper_rule():
    # paper, section 4.1: t* = -w/b if w^2 > 2 lam b else 0 (tie -> 0)
    lam, b = 0.5, 2.0
    w = np.array([-3.0, -2.0, -1.0, 0.0, 1.9, 2.0, 2.1])
    expected = np.where(w**2 > 2 * lam * b, -w / b, 0.0)
    np.testing.assert_array_equal(mg.L0(lam).prox(w, np.full_like(w, b)), expected)


def test_l1_soft_threshold_closed_form():
    w = np.array([-3.0, -0.5, 0.0, 0.5, 3.0])
    b, lam = 2.0, 1.0
    a = -w / b
    expected = np.sign(a) * np.maximum(np.abs(a) - lam / b, 0)
    np.testing.assert_allclose(mg.L1(lam).prox(w, np.full_like(w, b)), expected)


def test_lp_half_threshold_value():
    # Xu et al. (2012): for min 1/2 (t-a)^2 + mu |t|^(1/2) the threshold is
    # a* = (3/2) mu^(2/3); below it the prox is 0, above it nonzero.
    mu = 1.0
    thr = 1.5 * mu ** (2 / 3)
    pen = mg.Lp(mu, 0.5)
    below = pen.prox(np.array([-(thr - 1e-6)]), np.array([1.0]))
    above = pen.prox(np.array([-(thr + 1e-6)]), np.array([1.0]))
    assert below[0] == 0.0
    assert above[0] > 0.0


def test_table_layout_and_per_row_bounds():
    lb = np.array([0.0, -1.0, -np.inf])
    ub = np.array([1.0, 1.0, np.inf])
    table = mg.Box(lb, ub).table(3)
    np.testing.assert_array_equal(table[:, COL_LB], lb)
    np.testing.assert_array_equal(table[:, COL_UB], ub)
    with pytest.raises(ValueError, match="n = 4"):
        mg.Box(lb, ub).table(4)


def test_value_is_infinite_outside_bounds():
    assert mg.NonNeg().value(np.array([-1e-9]))[0] == np.inf
    assert mg.L0(1.0, lb=0.0).value(np.array([2.0]))[0] == 1.0


@pytest.mark.parametrize(
    ("make", "match", "exc"),
    [
        (lambda: mg.L1(-1.0), "lam", ValueError),
        (lambda: mg.L0(float("nan")), "lam", ValueError),
        (lambda: mg.L1("a"), "lam", TypeError),
        (lambda: mg.Box(2.0, 1.0), "lb must be <= ub", ValueError),
        (
            lambda: mg.Box(np.array([0.0, 2.0]), np.array([1.0, 1.0])),
            "lb must be <= ub",
            ValueError,
        ),
        (lambda: mg.L0(1.0, lb=1.0, ub=0.0), "lb must be <= ub", ValueError),
        (lambda: mg.Lp(1.0, 0.3), "p must be 1/2 or 2/3", ValueError),
        (lambda: mg.Box(np.zeros((2, 2))), "lb", ValueError),
        (lambda: mg.Box(np.array([np.nan])), "lb", ValueError),
    ],
)
def test_bad_penalty_parameters(make, match, exc):
    with pytest.raises(exc, match=match):
        make()


def test_penalty_bounds_are_copied():
    lb = np.zeros(3)
    pen = mg.Box(lb, 1.0)
    lb[0] = 5.0
    assert pen.lb[0] == 0.0
