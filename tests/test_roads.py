"""How a solve is routed: the input's kind found once, the road chosen from it, the loop's
settings handed down as one object."""

from __future__ import annotations

import time

import numpy as np
import pytest
import scipy.optimize
import scipy.sparse as sp

import msm_gpu as mg
from msm_gpu._input.design import Design
from msm_gpu.arrays import ArrayKind
from msm_gpu.backends import get_backend
from msm_gpu.finish.run import FinishRoad, run_active_set, starts_at_active_set
from msm_gpu.solvers.loop import LoopSettings
from msm_gpu.solvers.splitting import relative_splitting


def settings(**changes):
    base = {"tol": 1e-6, "max_iter": 100, "time_limit": None, "record_objective": False}
    base["start_time"] = time.perf_counter()
    return LoopSettings(**{**base, **changes})


# -- the input's kind ---------------------------------------------------------------------


def test_array_kind_of_dense_sparse_and_vector():
    dense = ArrayKind.of(np.zeros((3, 4), dtype=np.float32))
    assert (dense.sparse, dense.on_device, dense.xp) == (False, False, np)
    assert dense.dtype == np.float32 and dense.shape == (3, 4) and dense.n_cols == 4
    sparse = ArrayKind.of(sp.random(5, 7, density=0.3, format="csc", random_state=0))
    assert sparse.sparse and not sparse.on_device and sparse.shape == (5, 7)
    assert ArrayKind.of(np.ones(6)).n_cols == 1


def test_design_finds_its_kinds_once(monkeypatch):
    calls = []
    real = ArrayKind.of.__func__

    def counting(cls, x):
        calls.append(x.shape)
        return real(cls, x)

    monkeypatch.setattr(ArrayKind, "of", classmethod(counting))
    design = Design(sp.random(4, 9, density=0.5, format="csc", random_state=1), np.ones((4, 2)))
    for _ in range(3):
        assert design.c_kind.sparse and not design.d_kind.sparse
        assert design.d_kind.n_cols == 2
    assert calls == [(4, 9), (4, 2)]


# -- the road: the host's active set from x0, or sweeps then the finish --------------------


@pytest.mark.parametrize(
    ("penalty", "changes", "expected"),
    [
        (mg.NonNeg(), {}, True),  # NNLS: x = 0 is a vertex of h
        (mg.L1(0.1), {}, True),
        (mg.NonNeg(), {"tol": 0.0}, False),  # tol = 0 asks for exactly max_iter sweeps
        (mg.NonNeg(), {"callback": lambda info: None}, False),  # someone watches them
        (mg.NonNeg(), {"verbose": True}, False),
        (mg.Box(-1.0, 1.0), {}, False),  # 0 inside the box: sweeps first
        (mg.L0(0.1), {}, False),  # not convex: no active set
    ],
)
def test_which_problems_start_at_the_active_set(penalty, changes, expected):
    assert starts_at_active_set("auto", 50, True, penalty, settings(**changes)) is expected


def test_no_active_set_on_the_device_or_for_large_n():
    assert not starts_at_active_set("auto", 50, False, mg.NonNeg(), settings())
    assert not starts_at_active_set("auto", 10**6, True, mg.NonNeg(), settings())


def test_nnls_goes_straight_to_the_active_set_and_matches_scipy():
    rng = np.random.default_rng(3)
    c, d = rng.normal(size=(40, 12)), rng.normal(size=(40, 3))
    res = mg.nnls(c, d)
    assert res.n_iter == 0 and res.info["finish_method"] == "active_set"
    for k in range(3):
        x_ref, _ = scipy.optimize.nnls(c, d[:, k])
        np.testing.assert_allclose(res.x[:, k], x_ref, atol=1e-10)


def test_run_active_set_refuses_an_a_not_shown_psd():
    be = get_backend("cpu")
    a, r = np.eye(3), -np.ones((3, 1))
    split = relative_splitting(np.diag(a), 1.0, 0.0, True, check=True)
    with pytest.raises(ValueError, match="positive semidefinite"):
        road = FinishRoad(finish="auto", panel=None, settings=settings(), psd_known=False)
        run_active_set(be, a, r, np.zeros((3, 1)), mg.NonNeg(), split, road)


def test_run_active_set_solves_from_x0_with_no_sweep():
    be = get_backend("cpu")
    rng = np.random.default_rng(4)
    c = rng.normal(size=(30, 8))
    d = rng.normal(size=(30, 2))
    a, r = c.T @ c, -(c.T @ d)
    split = relative_splitting(np.diag(a), 1.0, 0.0, True, check=True)
    road = FinishRoad(finish="auto", panel=None, settings=settings(record_objective=True))
    out = run_active_set(be, a, r, np.zeros((8, 2)), mg.NonNeg(), split, road)
    assert out.n_iter == 0 and out.info["finish_method"] == "active_set"
    assert out.info["omega"] == split.omega and out.converged_columns.all()
    assert out.objective[0] == 0.0 and out.objective[-1] < 0.0  # F(x0 = 0), then F(x)
    for k in range(2):
        np.testing.assert_allclose(out.x[:, k], scipy.optimize.nnls(c, d[:, k])[0], atol=1e-10)


# -- the loop's settings ------------------------------------------------------------------


def test_quiet_settings_drop_what_watches_and_keep_the_rule():
    loud = settings(
        record_objective=True,
        time_limit=5.0,
        callback=lambda info: None,
        verbose=True,
        x_floor=np.ones(2),
        to_user=lambda x: 2 * x,
        start_time=0.0,
    )
    quiet = loud.quiet(max_iter=3)
    assert (quiet.tol, quiet.max_iter) == (loud.tol, 3)
    assert quiet.callback is None and not quiet.verbose and not quiet.record_objective
    assert quiet.time_limit is None and quiet.x_floor is None
    assert quiet.to_user(5.0) == 5.0 and quiet.start_time > 0.0
    assert loud.callback is not None and loud.max_iter == 100  # frozen: unchanged
