"""msm_gpu.solvers.msm.MsmMethod: the tracked objective against a direct float64 evaluation,
through every branch of its bookkeeping (written for the mutants that survived the other
tests; see benchmarks/mutation/SURVIVORS.md).

* columns retired part way (the tracked F of a subset of the columns is updated);
* a backend without the fast objective path (``objective_terms`` returns None, as the CUDA
  backend's state does): the driver then evaluates F with array calls itself.

F is computed here directly: 1/2 x'Ax + r'x + sum_j h(x_j) per column, with h written out
for each penalty (no library helper).
"""

from __future__ import annotations

import numpy as np
import pytest
from array_api_compat import numpy as xp_numpy

import msm_gpu as mg
from msm_gpu.backends.cpu.backend import CpuBackend
from msm_gpu.solvers.msm import MsmMethod, column_objectives
from msm_gpu.solvers.splitting import make_splitting


def _h(pen, x):
    if isinstance(pen, mg.L1):  # L1 and NonNegL1 (NonNegL1 iterates are >= 0)
        return pen.lam * np.abs(x)
    if isinstance(pen, mg.L0):
        return pen.lam * (x != 0)
    if isinstance(pen, mg.Lp):
        return pen.lam * np.abs(x) ** pen.p
    return np.zeros_like(x)


def _direct(a, r, x, pen):
    x = np.asarray(x, dtype=np.float64)
    return 0.5 * np.sum(x * (a @ x), axis=0) + np.sum(x * r, axis=0) + np.sum(_h(pen, x), axis=0)


class _NoFastPath(CpuBackend):
    """The CPU backend with the objective fast path switched off (as on CUDA)."""

    def start(self, *args, **kwargs):
        state = super().start(*args, **kwargs)
        state.objective_terms = lambda x=None: None
        state.sweep_with_objective = lambda: None
        return state


def _problem(n=12, m=4, seed=3):
    rng = np.random.default_rng(seed)
    c = rng.normal(size=(n + 4, n))
    a = c.T @ c / n
    r = rng.normal(size=(n, m))
    return a, r


def _method(backend, a, r, x0, pen):
    split = make_splitting(np.diag(a), 1.0, 0.01, pen.is_convex)
    return MsmMethod(backend, a, r, x0, pen, split, 4)


PENALTIES = [mg.L1(0.3), mg.L0(0.2), mg.Lp(0.1, 0.5), mg.NonNegL1(0.1)]


@pytest.mark.parametrize("backend", [CpuBackend, _NoFastPath], ids=["fast", "no-fast-path"])
@pytest.mark.parametrize("pen", PENALTIES, ids=repr)
def test_tracked_objective_with_retired_columns(backend, pen):
    a, r = _problem()
    m = _method(backend(), a, r, np.zeros_like(r), pen)
    m.start_objective()
    assert float(m.objective()) == 0.0  # F(0) = 0
    for k in range(12):
        m.step(True)
        x = m.current_x()
        direct = _direct(a, r, x, pen)
        assert float(m.objective()) == pytest.approx(direct.sum(), rel=1e-11, abs=1e-11)
        if k == 2:
            m.retire(np.array([False, True, False, False]))  # column 1 stops
        if k == 5:
            m.retire(np.array([True, False, False]))  # column 0 stops (of 0, 2, 3)
    assert list(m.active) == [2, 3]
    x = m.final_x()
    np.testing.assert_allclose(m.final_objective(x), _direct(a, r, x, pen), rtol=1e-11)
    m.close()


@pytest.mark.parametrize("backend", [CpuBackend, _NoFastPath], ids=["fast", "no-fast-path"])
@pytest.mark.parametrize("pen", PENALTIES + [mg.NonNeg(), mg.Box(-0.2, 0.3)], ids=repr)
@pytest.mark.parametrize("start", ["inside", "outside"])
def test_start_objective_from_the_first_sweep(backend, pen, start):
    # start_objective(will_step=True): the CPU takes F(X_0) from the first sweep's split
    # product (cpu_kernels.sweep_columns_with_objective); F(X_0), the tracked F and the
    # iterates must be those of the unfused path (inf where X_0 is outside dom h)
    a, r = _problem(seed=17)
    lb, ub = pen.table(a.shape[0])[0, 1:3]
    x0 = np.clip(np.random.default_rng(4).uniform(-0.1, 0.2, size=r.shape), lb, ub)
    want = _direct(a, r, x0, pen).sum()
    if start == "outside":
        x0[3, 1] = -1.0
        if lb > -1.0:  # outside dom h: F(X_0) = inf
            want = np.inf
        else:
            want = _direct(a, r, x0, pen).sum()
    fused, plain = (_method(backend(), a, r, x0, pen) for _ in range(2))
    fused.start_objective(will_step=True)
    plain.start_objective()
    assert float(fused.objective()) == pytest.approx(want, rel=1e-12, abs=1e-12)
    assert float(plain.objective()) == pytest.approx(want, rel=1e-12, abs=1e-12)
    for _ in range(4):
        sf, sp = fused.step(True), plain.step(True)
        np.testing.assert_allclose(sf.step, sp.step, rtol=1e-12, atol=1e-14)
        xf, xp_ = fused.current_x(), plain.current_x()
        np.testing.assert_allclose(xf, xp_, rtol=1e-12, atol=1e-14)
        direct = _direct(a, r, xf, pen).sum()
        assert float(fused.objective()) == pytest.approx(direct, rel=1e-11, abs=1e-11)
    fused.close()
    plain.close()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("panel", [1, 4, 5, 12, 40])
def test_fused_start_objective_kernel_per_panel(dtype, panel):
    # the split product at every panel boundary, both dtypes, a column range inside
    from msm_gpu.backends.cpu import kernels as cpu_kernels

    a, r = _problem(n=12, m=6, seed=23)
    pen = mg.Lp(0.05, 0.5)
    x0 = np.random.default_rng(2).normal(scale=0.3, size=r.shape)
    split = make_splitting(np.diag(a), 1.0, 0.01, pen.is_convex)
    state = CpuBackend().start(
        a.astype(dtype), r.astype(dtype), x0.astype(dtype), split, pen.table(12), pen.code, panel
    )
    afold, y = state._afold, state._x
    stats = np.zeros((4, 6))
    terms = np.full((2, 6), 7.0)
    table = np.ascontiguousarray(pen.table(12), dtype=dtype)
    cpu_kernels.sweep_columns_with_objective(
        afold, state._b_diag, pen.code, table, state._r_full, y, 1, 5, panel, stats, terms
    )
    x0d = x0.astype(dtype).astype(np.float64)
    want = _direct(a.astype(dtype), r.astype(dtype), x0d, pen)
    rel = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(terms[0, 1:5], want[1:5], rtol=rel)
    np.testing.assert_allclose(terms[1, 1:5], _h(pen, x0d).sum(axis=0)[1:5], rtol=rel)
    assert np.all(terms[:, [0, 5]] == 7.0)  # columns outside the range untouched
    np.testing.assert_array_equal(y[:, [0, 5]], x0.astype(dtype)[:, [0, 5]])
    state.close()


@pytest.mark.parametrize("backend", [CpuBackend, _NoFastPath], ids=["fast", "no-fast-path"])
@pytest.mark.parametrize("pen", PENALTIES, ids=repr)
def test_final_objective_without_tracking(backend, pen):
    # record_objective=False: nothing anchored, the final F is evaluated at the end
    a, r = _problem(seed=5)
    x0 = np.full_like(r, 0.05)
    m = _method(backend(), a, r, x0, pen)
    for _ in range(5):
        m.step(False)
    x = m.final_x()
    np.testing.assert_allclose(m.final_objective(x), _direct(a, r, x, pen), rtol=1e-11)
    m.close()


@pytest.mark.parametrize("backend", [CpuBackend, _NoFastPath], ids=["fast", "no-fast-path"])
def test_infeasible_start_anchors_on_first_iterate(backend):
    # X_0 < 0 is outside dom h of NonNeg: F(X_0) = inf, F is anchored after one step
    a, r = _problem(seed=7)
    pen = mg.NonNeg()
    m = _method(backend(), a, r, np.full_like(r, -1.0), pen)
    m.start_objective()
    assert np.isinf(float(m.objective()))
    for _ in range(4):
        m.step(True)
        x = m.current_x()
        assert float(m.objective()) == pytest.approx(_direct(a, r, x, pen).sum(), rel=1e-11)
    m.close()


def test_column_objectives_closed_form():
    a, r = _problem(n=5, m=3, seed=9)
    x = np.random.default_rng(1).normal(size=r.shape)
    pen = mg.L1(0.4)
    f, h = column_objectives(xp_numpy, a, r, x, pen)
    np.testing.assert_allclose(h, 0.4 * np.abs(x).sum(axis=0), rtol=1e-14)
    np.testing.assert_allclose(f, _direct(a, r, x, pen), rtol=1e-13)


def test_cpu_objective_needs_no_array_evaluation(monkeypatch):
    # module docstring: F(X_0) = 0 without a product for X_0 = 0, then F is updated from the
    # sweep statistics; on the CPU the final F comes from the backend's fast path as well
    import msm_gpu.solvers.msm as driver

    def forbidden(*args, **kwargs):
        raise AssertionError("column_objectives called although the backend has a fast path")

    monkeypatch.setattr(driver, "column_objectives", forbidden)
    a, r = _problem(seed=11)
    pen = mg.L1(0.2)
    for record in (True, False):
        m = _method(CpuBackend(), a, r, np.zeros_like(r), pen)
        if record:
            m.start_objective()
        for _ in range(3):
            m.step(record)
        x = m.final_x()
        np.testing.assert_allclose(m.final_objective(x), _direct(a, r, x, pen), rtol=1e-11)
        m.close()


def test_final_objective_is_a_copy_of_the_tracked_one():
    a, r = _problem(seed=13)
    m = _method(CpuBackend(), a, r, np.zeros_like(r), mg.L1(0.2))
    m.start_objective()
    m.step(True)
    before = float(m.objective())
    f = m.final_objective(m.current_x())
    f[:] = 12345.0  # the caller may scale its array in place
    assert float(m.objective()) == before
    m.close()


def test_threads_is_keyword_only():
    a, r = _problem(seed=1)
    split = make_splitting(np.diag(a), 1.0, 0.01, True)
    with pytest.raises(TypeError):
        MsmMethod(CpuBackend(), a, r, np.zeros_like(r), mg.NonNeg(), split, 4, 1)
