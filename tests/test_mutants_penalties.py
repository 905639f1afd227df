"""msm_gpu.penalties at the edges the other tests do not reach (written for the mutants
that survived them; see benchmarks/mutation/SURVIVORS.md).

Expected values come from closed forms (soft/hard thresholding, clipping), from a brute
force minimisation of the 1-D objective on a fine grid, or from the classes' documented
contract; none from the library's own helpers.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import msm_gpu as mg
from msm_gpu import penalties as P

ALL = [
    mg.Zero(),
    mg.NonNeg(),
    mg.Box(-1.0, 2.0),
    mg.Box(np.array([-1.0, 0.0, 0.5]), np.array([0.0, 1.0, 4.0])),
    mg.L1(0.0),
    mg.L1(0.3),
    mg.NonNegL1(0.2),
    mg.L0(0.0),
    mg.L0(0.5),
    mg.L0(0.5, lb=0.0),
    mg.L0(0.5, lb=0.5, ub=3.0),
    mg.L0(0.5, lb=-2.0, ub=-0.25),
    mg.Lp(0.0, 0.5),
    mg.Lp(0.0, 2 / 3),
    mg.Lp(1.3, 0.5),
    mg.Lp(1.3, 2 / 3),
    mg.Lp(1.0, 0.5),  # mu = lam / b = 1 at b = 1
    mg.Lp(1.0, 2 / 3),
]


def _grid_w():
    w = np.linspace(-30.0, 30.0, 1201)
    return np.concatenate([w, [0.0, -0.0, 1e-300, -1e-300, 1e-8, -1e-8, 1e100, -1e100]])


@pytest.mark.parametrize("pen", ALL, ids=repr)
def test_prox_and_value_raise_no_floating_point_errors(pen):
    # the safe_* guards of the reference formulas exist so that no entry divides by zero
    # or takes an invalid sqrt/acos (users run with warnings as errors); over- and
    # underflow of extreme data are allowed
    w = _grid_w()
    if isinstance(pen.lb, np.ndarray):
        w = np.resize(w, (3, w.size // 3 + 1))
    for b in (1e-3, 0.5, 1.0, 7.0):
        with np.errstate(divide="raise", invalid="raise", over="ignore", under="ignore"):
            t = pen.prox(w, np.full_like(w, b))
            h = pen.value(t)
        assert np.all(np.isfinite(t)) and np.all(np.isfinite(h))


def test_equality_and_hash_follow_type_and_parameters():
    assert mg.Box(0.0, 1.0) == mg.Box(0.0, 1.0)
    assert hash(mg.Box(0.0, 1.0)) == hash(mg.Box(0.0, 1.0))
    assert mg.L0(0.5, lb=0.0) == mg.L0(0.5, lb=0.0)
    assert mg.Lp(1.0, 2 / 3) == mg.Lp(1.0, 2.0 / 3.0 + 1e-15)  # p is snapped to 2/3
    assert mg.NonNeg() == mg.NonNeg() and mg.Zero() == mg.Zero()
    assert mg.Box(0.0, 1.0) != mg.Box(0.0, 2.0)
    assert mg.L1(1.0) != mg.NonNegL1(1.0)  # same lam, different penalty
    assert mg.NonNeg() != mg.Box(0.0, np.inf)  # different classes
    assert mg.L1(1.0) != "L1(lam=1.0)"
    assert len({mg.L1(1.0), mg.L1(1.0), mg.L1(2.0)}) == 2


def test_default_box_is_unbounded():
    box = mg.Box()
    assert box.lb == -np.inf and box.ub == np.inf
    w = np.array([-5.0, 0.0, 3.0])
    np.testing.assert_array_equal(box.prox(w, np.full(3, 2.0)), -w / 2.0)
    np.testing.assert_array_equal(box.value(np.array([-1e300, 0.0, 1e300])), np.zeros(3))
    assert math.isinf(mg.Box(ub=0.0).value(np.array([1.0]))[0])


def test_empty_per_row_bounds_are_refused():
    with pytest.raises(ValueError, match="must not be empty"):
        mg.Box(np.array([]), 1.0)
    with pytest.raises(ValueError, match="must not be empty"):
        mg.L0(0.5, ub=np.array([]))


@pytest.mark.parametrize("code", [P.CODE_BOX, P.CODE_L1, P.CODE_L0, P.CODE_LP])
def test_codes_given_as_numpy_integers(code):
    # a code read back from an array is a NumPy integer: the same penalty
    x = np.array([-2.0, -0.1, 0.0, 0.3, 1.5])
    b = np.full_like(x, 1.5)
    args = (0.4, -1.0, 1.0, 0.5)
    for as_np in (np.int64, np.int32, np.intp):
        np.testing.assert_array_equal(
            P.penalty_value(x, as_np(code), *args), P.penalty_value(x, code, *args)
        )
        np.testing.assert_array_equal(
            P.penalty_prox(x, b, as_np(code), *args), P.penalty_prox(x, b, code, *args)
        )


@pytest.mark.parametrize("p", [0.5, 2 / 3])
def test_lp_with_lam_zero_is_the_identity_step(p):
    # h = 0: argmin 1/2 b t^2 + w t = -w / b exactly
    w = np.array([-7.0, -1.0, -1e-9, 0.0, 2e-7, 0.5, 40.0])
    b = np.array([0.5, 1.0, 2.0, 3.0, 1.0, 0.25, 8.0])
    np.testing.assert_array_equal(mg.Lp(0.0, p).prox(w, b), -w / b)


def _brute_force(pen, w, b):
    """argmin over a fine grid that contains 0 and both bounds (the candidates of h)."""
    lb = max(float(np.min(pen.lb)), -50.0)
    ub = min(float(np.max(pen.ub)), 50.0)
    t = np.unique(np.concatenate([np.linspace(lb, ub, 200_001), [0.0, lb, ub]]))
    t = t[(t >= lb) & (t <= ub)]
    f = 0.5 * b * t * t + w * t + pen.value(t)
    return f.min()


@pytest.mark.parametrize(
    "pen",
    [mg.L0(0.5, lb=-2.0, ub=0.0), mg.L0(0.5, lb=0.0, ub=2.0), mg.L0(0.5, lb=0.0)],
    ids=repr,
)
def test_l0_with_zero_on_a_bound_is_a_global_minimiser(pen):
    # zero is feasible when it is a bound: small steps go to 0, not to the bound side
    for w in (-3.0, -1.2, -0.4, -0.1, 0.0, 0.1, 0.4, 1.2, 3.0):
        for b in (0.5, 1.0, 2.0):
            t = float(pen.prox(np.array([w]), np.array([b]))[0])
            f_t = 0.5 * b * t * t + w * t + float(pen.value(np.array([t]))[0])
            assert np.isfinite(f_t)
            assert f_t <= _brute_force(pen, w, b) + 1e-9, (w, b, t)


@pytest.mark.parametrize("make", [mg.L1, mg.NonNegL1, mg.L0, mg.Lp])
@pytest.mark.parametrize("lam", [-1.0, -1e-300, np.inf, float("nan")])
def test_every_lam_must_be_finite_and_nonnegative(make, lam):
    with pytest.raises(ValueError, match="lam"):
        make(lam)


def test_zero_dimensional_array_bounds_are_scalars():
    box = mg.Box(np.array(-0.5), np.array(2.0))
    assert box.lb == -0.5 and box.ub == 2.0
    assert isinstance(box.lb, float) and isinstance(box.ub, float)
    l0 = mg.L0(0.1, lb=np.array(0.0))
    assert l0.lb == 0.0 and isinstance(l0.lb, float)
