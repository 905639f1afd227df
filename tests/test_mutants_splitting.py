"""msm_gpu.solvers.splitting against the paper's formulas and its own contract, at the edges the
other tests do not reach (written for the mutants that survived them; see
benchmarks/mutation/SURVIVORS.md).

Every expected value is computed here from the formulas of the paper (eq. (4), Theorem 1
and the nonconvex theorem), not with the library.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from msm_gpu.solvers.splitting import (
    Splitting,
    convergence_delta,
    guarded_theta,
    make_splitting,
    relative_theta,
)

DIAG = np.array([0.5, 2.0, 3.0, 1.25])


@pytest.mark.parametrize("omega", [0.3, 0.5, 0.9, 1.0, 1.4, 1.9])
@pytest.mark.parametrize("theta", [0.0, 0.01, 0.7])
def test_delta_closed_forms(omega, theta):
    # Theorem 1: delta = 2 theta / omega + (2 - omega) / omega * min_j A_jj
    convex = 2.0 * theta / omega + (2.0 - omega) / omega * 0.5
    assert convergence_delta(DIAG, omega, theta, True) == pytest.approx(convex, rel=1e-14)
    # nonconvex theorem: delta = min_j (theta / omega + (1 - omega) / omega * A_jj)
    nonconvex = min(theta / omega + (1.0 - omega) / omega * d for d in DIAG)
    assert convergence_delta(DIAG, omega, theta, False) == pytest.approx(
        nonconvex, rel=1e-14, abs=1e-15
    )


def test_splitting_diagonals_are_eq_4():
    s = make_splitting(DIAG, 0.8, 0.1, True)
    np.testing.assert_allclose(s.b_diag, (DIAG + 0.1) / 0.8, rtol=1e-15)
    # C = A - B: C_jj = ((omega - 1) A_jj - theta) / omega
    np.testing.assert_allclose(s.c_diag, ((0.8 - 1.0) * DIAG - 0.1) / 0.8, rtol=1e-14)
    assert (s.omega, s.theta, s.convex) == (0.8, 0.1, True)


@pytest.mark.parametrize(
    ("omega", "theta", "convex"),
    [
        (2.0, 0.0, True),  # Theorem 1: 2*0/2 + 0/2 * min A_jj = 0 exactly
        (1.0, 0.0, False),  # nonconvex theorem: min(0/1 + 0 * A_jj) = 0 exactly
    ],
)
def test_delta_exactly_zero_is_refused_by_default(omega, theta, convex):
    assert convergence_delta(DIAG, omega, theta, convex) == 0.0
    with pytest.raises(ValueError, match="delta = 0 <= 0"):
        make_splitting(DIAG, omega, theta, convex)  # check=True is the default
    s = make_splitting(DIAG, omega, theta, convex, check=False)
    assert s.delta == 0.0


def test_refusal_hint_names_the_theorem_that_applies():
    with pytest.raises(ValueError, match="omega < 2 \\(Theorem 1 needs delta > 0\\)"):
        make_splitting(DIAG, 2.0, 0.0, True)
    with pytest.raises(ValueError, match="for nonconvex penalties use omega <= 1"):
        make_splitting(DIAG, 1.5, 0.01, False)


@pytest.mark.parametrize("check", [True, False])
def test_row_without_curvature_is_refused_even_unchecked(check):
    # B_jj = (A_jj + theta) / omega <= 0 leaves the 1-D subproblem unbounded, whatever check
    for diag, theta in (([1.0, -0.5], 0.0), ([1.0, 0.0], 0.0), ([1.0, -0.3], 0.1)):
        with pytest.raises(ValueError, match="without curvature"):
            make_splitting(np.array(diag), 1.0, theta, True, check=check)


def test_splitting_is_immutable():
    s = make_splitting(DIAG, 1.0, 0.01, True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.theta = 1.0
    assert dataclasses.is_dataclass(Splitting)


def test_relative_theta_scales_by_mean_diagonal_and_falls_back_at_zero():
    assert relative_theta(DIAG, 0.01) == pytest.approx(0.01 * DIAG.mean(), rel=1e-15)
    # A = 0: the mean is 0, theta itself is used (not 0, which would leave B = 0)
    assert relative_theta(np.zeros(3), 0.01) == 0.01
    assert relative_theta(np.zeros(3), 0.0) == 0.0


def test_guarded_theta_changes_only_theta_zero_with_a_zero_diagonal_entry():
    # theta > 0 is kept, with or without zero diagonal entries
    assert guarded_theta(np.array([0.0, 2.0]), 0.5) == 0.5
    assert guarded_theta(np.array([1.0, 2.0]), 0.5) == 0.5
    # theta = 0 with a positive diagonal is kept: HALS stays exact
    assert guarded_theta(np.array([1.0, 2.0]), 0.0) == 0.0
    assert guarded_theta(np.array([1e-300, 2.0]), 0.0) == 0.0
    # theta = 0 with a zero entry: tiny and positive, relative to the largest curvature
    for diag in ([0.0, 2.0], [0.0, 0.0], [0.0, 1e-3], [0.0, 5e8]):
        diag = np.array(diag)
        t = guarded_theta(diag, 0.0)
        assert 0.0 < t <= 1e-14 * max(1.0, diag.max())
        # ... and the splitting it gives is valid for every row
        assert np.all(make_splitting(diag, 1.0, t, True, check=False).b_diag > 0)


def test_check_is_keyword_only():
    with pytest.raises(TypeError):
        make_splitting(DIAG, 1.0, 0.01, True, False)
