"""The finish's no-increase guard evaluates F once per point, a cold start's F for free.

Issue 48: on the tall many-right-hand-side road (unmixing), the guard formed the residual
C X - D twice over every column (F of the start and F of the answer), four times the
active set's own cost.  Truth here: F from the residual computed directly in NumPy, and
the number of residual passes counted.
"""

from __future__ import annotations

import numpy as np
import pytest

import msm_gpu as mg
from msm_gpu._input.design import Design
from msm_gpu._input.problem import prepare_design


def _unmixing(m=60, n=8, r=400, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    c = rng.uniform(size=(m, n))
    x = rng.dirichlet(0.3 * np.ones(n), size=r).T
    d = c @ x + 0.01 * rng.normal(size=(m, r))
    return c.astype(dtype), d.astype(dtype)


def _count_residual_passes(monkeypatch):
    calls = {"objective": 0}
    original = Design.objective

    def counted(self, x, penalty, cols=None):
        calls["objective"] += 1
        return original(self, x, penalty, cols)

    monkeypatch.setattr(Design, "objective", counted)
    return calls


def test_a_cold_nnls_forms_the_residual_once(monkeypatch):
    calls = _count_residual_passes(monkeypatch)
    c, d = _unmixing()
    res = mg.nnls(c, d)
    assert calls["objective"] == 1  # F of the answer; F of x = 0 from D's norms
    f = 0.5 * np.sum((c @ res.x - d) ** 2)
    assert res.fun == pytest.approx(f, rel=1e-13)


def test_a_warm_start_compares_against_its_own_objective(monkeypatch):
    # x0 given: its F is a residual pass of its own (there is nothing to read it from)
    calls = _count_residual_passes(monkeypatch)
    c, d = _unmixing()
    x0 = np.full((c.shape[1], d.shape[1]), 0.1)
    res = mg.nnls(c, d, x0=x0)
    assert calls["objective"] == 2
    ref = mg.nnls(c, d)
    np.testing.assert_allclose(res.x, ref.x, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize(
    ("dtype", "scale"),
    [
        (np.float64, 1.0),
        (np.float64, 2.0**-300),  # D rescaled by a copy (far from 1)
        (np.float64, 2.0**300),
        (np.float32, 1.0),
        (np.float32, 2.0**-60),
    ],
)
def test_f_at_zero_and_at_x_match_the_residual(order, dtype, scale):
    # D's column norms from the checks' pass (C-ordered D) or from D itself (F-ordered)
    c, d = _unmixing(dtype=dtype)
    d = np.asarray(d * dtype(scale), order=order)
    prob = prepare_design(c, d, mg.NonNeg(), None, "cpu")
    design, pen = prob.design, prob.penalty
    assert (design.d_squares is not None) == (order == "C")
    d_int = np.ldexp(d.astype(np.float64), -prob.scaling.f_exp // 2)
    f0, allowance0 = design.objective_at_zero(pen)
    np.testing.assert_allclose(f0, 0.5 * np.sum(d_int**2, axis=0), rtol=1e-14)
    assert np.all(allowance0 > 0)
    x = np.abs(np.random.default_rng(1).normal(size=(c.shape[1], d.shape[1])))
    f, _ = design.objective(x, pen)
    c_int = np.ldexp(c.astype(np.float64), prob.scaling.x_exp - prob.scaling.f_exp // 2)
    np.testing.assert_allclose(f, 0.5 * np.sum((c_int @ x - d_int) ** 2, axis=0), rtol=1e-12)
    # a subset of the columns, as the finish asks for them
    cols = np.array([3, 0, 17])
    f_sub, _ = design.objective(x[:, cols], pen, cols)
    np.testing.assert_allclose(f_sub, f[cols], rtol=1e-15)
    np.testing.assert_allclose(design.objective_at_zero(pen, cols)[0], f0[cols], rtol=1e-15)


def test_the_users_d_is_not_modified():
    c, d = _unmixing()
    keep = d.copy()
    mg.nnls(c, d)
    np.testing.assert_array_equal(d, keep)
