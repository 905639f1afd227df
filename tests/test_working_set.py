"""``mg.least_squares(C, d, L1 or NonNegL1)`` on one dense problem too large for the small
road, at default options: the working sets of finish/working_set.py.

Where the answer is sparse the working sets must give the general road's answer (a
keyword given: it never takes them), one at least as good as scikit-learn's Lasso at a
tight tolerance, and the soft-thresholding closed form on orthonormal columns; F must
fall at every round; an answer that looks dense, a set past its limit or an unfinished
solve must hand the call to the general road; every other call must go there too.
"""

from __future__ import annotations

import numpy as np
import pytest
from general_road_calls import COMMON, general_road_call
from test_small_pwl import _reference

import msm_gpu as mg
from msm_gpu.finish import working_set
from msm_gpu.options import SolveOptions

#: A keyword given (its default value): the call takes the general road.
GENERAL = {"finish": "auto"}


def _f(c, d, x, penalty):
    return 0.5 * float(np.sum((c @ x - d) ** 2)) + float(np.sum(penalty.value(x)))


def _planted(m, n, k, seed, noise=0.1):
    """C (m, n) Gaussian, d = C x* + noise with k nonzeros in x*."""
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((m, n))
    x = np.zeros(n)
    x[rng.choice(n, k, replace=False)] = rng.uniform(1, 2, k) * rng.choice([-1, 1], k)
    d = c @ x + noise * rng.standard_normal(m) * np.linalg.norm(c @ x) / np.sqrt(m)
    return c, d


def _designs():
    out = []
    for m, n, k in [(500, 600, 10), (400, 500, 30), (1500, 200, 8), (300, 300, 20)]:
        c, d = _planted(m, n, k, seed=m + n)
        out.append((f"{m}x{n}", c, d))
    c, d = _planted(300, 400, 12, seed=1)
    out.append(("fortran order", np.asfortranarray(c), d))
    c, d = _planted(300, 400, 12, seed=2)
    c[:, 5] = c[:, 7]  # a duplicated column
    c[:, [11, 200]] = 0.0  # empty columns
    out.append(("duplicated and empty columns", c, d))
    c, d = _planted(300, 400, 12, seed=3)
    out.append(("columns on 8 decades", c * np.logspace(-4, 4, 400), d * 1e3))
    rng = np.random.default_rng(4)
    c = np.cumsum(rng.standard_normal((400, 500)), axis=1) / np.sqrt(np.arange(1, 501))
    out.append(("correlated columns", c, c[:, [3, 100, 400]] @ [1.0, -2.0, 3.0]))
    return out


CASES = [
    (f"{name} {pname}", c, d, pen(frac * float(np.max(np.abs(c.T @ d)))))
    for name, c, d in _designs()
    for pname, pen, frac in [("l1", mg.L1, 0.1), ("nonneg l1", mg.NonNegL1, 0.05)]
]


@pytest.mark.parametrize(("name", "c", "d", "penalty"), CASES, ids=[k[0] for k in CASES])
def test_working_sets_give_the_general_roads_answer_and_no_worse_than_lasso(name, c, d, penalty):
    c0, d0 = c.copy(), d.copy()
    res = mg.least_squares(c, d, penalty)
    assert np.array_equal(c, c0) and np.array_equal(d, d0)  # the user's arrays untouched
    assert 0 < res.info["working_set"] <= working_set.MAX_SET
    assert "small_problem" not in res.info and "working set" in res.message
    general = mg.least_squares(c, d, penalty, **GENERAL)
    assert "working_set" not in general.info
    f, f_general = _f(c, d, res.x, penalty), _f(c, d, general.x, penalty)
    f_ref = _f(c, d, _reference(c, d, penalty), penalty)
    scale = 1e-13 * float(d @ d)
    assert f <= f_ref + 1e-10 * abs(f_ref) + scale
    assert abs(f - f_general) <= 1e-12 * abs(f_general) + scale
    if isinstance(penalty, mg.NonNegL1):
        assert np.all(res.x >= 0)
    assert res.x.shape == (c.shape[1],) and res.converged
    assert res.converged_columns.tolist() == [True]
    assert res.fun == pytest.approx(f, rel=1e-12, abs=scale)
    assert res.info["kkt_residual"][0] <= SolveOptions().tol
    f0 = 0.5 * float(d @ d)
    assert res.objective[0] == pytest.approx(f0) and res.objective[-1] == res.fun


def test_a_unique_answer_is_the_general_roads_to_rounding():
    c, d = _planted(400, 500, 15, seed=9)
    penalty = mg.L1(0.1 * float(np.max(np.abs(c.T @ d))))
    res = mg.least_squares(c, d, penalty)
    assert "working_set" in res.info
    np.testing.assert_allclose(res.x, mg.least_squares(c, d, penalty, **GENERAL).x, atol=1e-10)


def test_a_soft_thresholding_closed_form():
    # orthonormal columns: x = soft threshold of C'd at lam, every column of W used
    rng = np.random.default_rng(6)
    q, _ = np.linalg.qr(rng.standard_normal((400, 300)))
    coef = np.zeros(300)
    coef[rng.choice(300, 25, replace=False)] = rng.uniform(1, 3, 25) * rng.choice([-1, 1], 25)
    d = q @ coef + 0.01 * rng.standard_normal(400)
    res = mg.least_squares(q, d, mg.L1(0.5))
    assert "working_set" in res.info
    ctd = q.T @ d
    np.testing.assert_allclose(res.x, np.sign(ctd) * np.maximum(np.abs(ctd) - 0.5, 0), atol=1e-13)


def test_lam_above_its_largest_useful_value_gives_zero_at_once():
    c, d = _planted(300, 400, 12, seed=5)
    res = mg.least_squares(c, d, mg.L1(1.01 * float(np.max(np.abs(c.T @ d)))))
    assert res.info["working_set"] == 0 and res.info["working_set_rounds"] == 1
    assert not np.any(res.x) and res.fun == pytest.approx(0.5 * float(d @ d))


def test_one_column_of_d_gives_one_column_of_x():
    c, d = _planted(300, 400, 12, seed=6)
    res = mg.least_squares(c, d[:, None], mg.L1(30.0))
    assert "working_set" in res.info and res.x.shape == (400, 1)
    general = mg.least_squares(c, d[:, None], mg.L1(30.0), **GENERAL)
    np.testing.assert_allclose(res.x, general.x, atol=1e-10)


def test_f_falls_at_every_round(monkeypatch):
    # the paper's monotone decrease, here across the rounds' exact solves on growing sets
    c, d = _planted(400, 500, 30, seed=7)
    penalty = mg.L1(0.05 * float(np.max(np.abs(c.T @ d))))
    seen = []
    real = working_set._WorkingSet.solve

    def recording(self, penalty, x0):
        out = real(self, penalty, x0)
        x_w, cx = out
        seen.append(0.5 * float((cx - d) @ (cx - d)) + penalty.lam * float(np.abs(x_w).sum()))
        return out

    monkeypatch.setattr(working_set._WorkingSet, "solve", recording)
    res = mg.least_squares(c, d, penalty)
    assert res.info["working_set_rounds"] >= 3 and len(seen) >= 2
    assert all(b < a for a, b in zip(seen, seen[1:], strict=False))
    assert seen[-1] == pytest.approx(res.fun, rel=1e-12)


def _dense_answer(m, n):
    # a random d at a small lam: most variables in the answer
    rng = np.random.default_rng(8)
    c, d = rng.standard_normal((m, n)), rng.standard_normal(m)
    return c, d, mg.L1(0.01 * float(np.max(np.abs(c.T @ d))))


def test_an_answer_that_looks_dense_goes_to_the_general_road():
    c, d, penalty = _dense_answer(700, 600)  # more columns than one set takes at once
    res = mg.least_squares(c, d, penalty)
    assert "working_set" not in res.info and res.converged
    assert np.count_nonzero(res.x) > working_set.MAX_SET


def test_a_tall_c_whose_answer_looks_dense_is_solved_with_all_its_columns():
    c, d, penalty = _dense_answer(1000, 300)
    c[:, 7] = 0.0  # an empty column stays out
    res = mg.least_squares(c, d, penalty)
    assert res.info["working_set"] == 299 and res.converged
    assert np.count_nonzero(res.x) > 0.8 * 300 and res.x[7] == 0.0
    general = mg.least_squares(c, d, penalty, **GENERAL)
    assert res.fun == pytest.approx(general.fun, rel=1e-12)
    f_ref = _f(c, d, _reference(c, d, penalty), penalty)
    assert res.fun <= f_ref + 1e-10 * abs(f_ref)


@pytest.mark.parametrize("limit", ["set", "rounds", "unfinished"])
def test_a_limit_reached_hands_the_call_to_the_general_road(monkeypatch, limit):
    c, d = _planted(400, 500, 30, seed=7)
    penalty = mg.L1(0.05 * float(np.max(np.abs(c.T @ d))))
    if limit == "set":
        monkeypatch.setattr(working_set, "MAX_SET", 24)
    elif limit == "rounds":
        monkeypatch.setattr(working_set, "MAX_ROUNDS", 1)
    else:
        real = working_set.pwl_active_set

        def unfinished(*args, **kwargs):
            x, status, iters = real(*args, **kwargs)
            return x, np.zeros_like(status), iters

        monkeypatch.setattr(working_set, "pwl_active_set", unfinished)
    res = mg.least_squares(c, d, penalty)
    assert "working_set" not in res.info and res.converged
    expected = mg.least_squares(c, d, penalty, **GENERAL)
    assert res.fun == pytest.approx(expected.fun, rel=1e-12)


@pytest.mark.parametrize(
    "case",
    [
        "option",
        "x0",
        "representation",
        "float32",
        "two columns",
        "sparse",
        "strided view",
        "wide",
        "lam zero",
        "nonneg",
        "box",
        "l0",
        "huge scale",
        "list",
    ],
)
def test_other_calls_take_the_general_road(case):
    c, d = _planted(300, 400, 12, seed=10)
    kwargs, penalty = {}, mg.L1(0.1 * float(np.max(np.abs(c.T @ d))))
    if case in COMMON:
        c, d, kwargs = general_road_call(case, c, d, representation="design")
    elif case == "strided view":
        c = np.repeat(c, 2, axis=1)[:, ::2]
    elif case == "wide":  # fewer rows than MIN_ROWS_PER_COLUMN per column
        c, d = _planted(200, 400, 12, seed=10)
    elif case == "lam zero":
        penalty = mg.L1(0.0)
    elif case == "nonneg":
        penalty = mg.NonNeg()
    elif case == "box":
        penalty = mg.Box(-1.0, 1.0)
    elif case == "l0":
        penalty = mg.L0(penalty.lam)
    elif case == "huge scale":
        c, d, penalty = c * 1e150, d * 1e150, mg.L1(penalty.lam * 1e300)
    res = mg.least_squares(c, d, penalty, **kwargs)
    assert "working_set" not in res.info
    assert res.converged or case == "l0"


@pytest.mark.parametrize("case", ["nan in C", "inf in d"])
def test_bad_input_gets_the_general_roads_errors(case):
    c, d = _planted(300, 400, 12, seed=11)
    if case == "nan in C":
        c[4, 7] = np.nan
    else:
        d[3] = np.inf
    with pytest.raises(ValueError, match="C" if case == "nan in C" else "D"):
        mg.least_squares(c, d, mg.L1(1.0))


def test_the_copies_of_c_follow_the_set_not_the_limit(monkeypatch):
    # a sparse answer on a tall C: the copy of C_W grows with W (no MAX_ALL columns held)
    c, d = _planted(2000, 500, 10, seed=12)
    held = []
    real = working_set._WorkingSet.solve

    def recording(self, penalty, x0):
        held.append((self.size, self.cw.shape[1], self.gram.shape))
        return real(self, penalty, x0)

    monkeypatch.setattr(working_set._WorkingSet, "solve", recording)
    res = mg.least_squares(c, d, mg.L1(0.1 * float(np.max(np.abs(c.T @ d)))))
    assert "working_set" in res.info and held
    assert all(size <= room <= max(2 * size, 2 * working_set.FIRST_SET) for size, room, _ in held)
    assert all(shape == (room, room) for _, room, shape in held)


@pytest.mark.parametrize("tol", [1e-13, 1e-8, 1e-3])
def test_a_tol_given_is_the_working_sets_own(tol):
    # tol alone keeps the fast roads (benchopt's solver passes it): the KKT residual is
    # within it, and F within rounding of the general road's at the same tol or below
    c, d = _planted(500, 600, 10, seed=13)
    penalty = mg.L1(0.05 * float(np.max(np.abs(c.T @ d))))
    res = mg.least_squares(c, d, penalty, tol=tol)
    assert "working_set" in res.info and res.converged
    assert res.info["kkt_residual"][0] <= tol
    general = mg.least_squares(c, d, penalty, tol=tol, **GENERAL)
    assert res.fun <= general.fun + 1e-12 * abs(general.fun)
    small = mg.least_squares(c[:100, :40], d[:100], penalty, tol=tol)
    assert small.info.get("small_problem") and small.info["kkt_residual"][0] <= tol


@pytest.mark.parametrize(("tol", "error"), [(-1.0, ValueError), ("1e-6", TypeError)])
def test_a_bad_tol_is_named(tol, error):
    c, d = _planted(500, 600, 10, seed=13)
    with pytest.raises(error, match="tol"):
        mg.least_squares(c, d, mg.L1(1.0), tol=tol)


def test_a_hand_over_makes_no_second_pass_over_c(monkeypatch):
    # the general road takes the working sets' column statistics of C
    from msm_gpu._input import problem, stats

    c, d, penalty = _dense_answer(700, 600)
    passes = []
    real = stats.column_stats

    def counting(x):
        passes.append(x is c)
        return real(x)

    monkeypatch.setattr(working_set, "column_stats", counting)
    monkeypatch.setattr(problem, "column_stats", counting)
    res = mg.least_squares(c, d, penalty)
    assert "working_set" not in res.info and res.converged
    assert passes.count(True) == 1
    expected = mg.least_squares(c, d, penalty, **GENERAL)
    np.testing.assert_array_equal(res.x, expected.x)
