"""``mg.least_squares(C, d, penalty)`` on one small dense problem at default options, for
the convex piecewise-linear penalties (finish/small_pwl.py; NNLS: test_small_nnls.py).

The small road must give the general road's answer (a keyword given: it never takes the
small road) and one at least as good as an independent solver's (scikit-learn's Lasso at
a tight tolerance, SciPy's bounded least squares), on tall, wide, rank-deficient and
degenerate problems, and hand every other call to the general road.
"""

from __future__ import annotations

import numpy as np
import pytest
from general_road_calls import COMMON, general_road_call
from scipy.optimize import lsq_linear
from sklearn.linear_model import Lasso

import msm_gpu as mg
from msm_gpu.finish import small_nnls, small_pwl

#: A keyword given (its default value): the call takes the general road.
GENERAL = {"finish": "auto"}


def _f(c, d, x, penalty):
    return 0.5 * float(np.sum((c @ x - d) ** 2)) + float(np.sum(penalty.value(x)))


def _designs():
    rng = np.random.default_rng(3)
    out = []
    for m, n in [(20, 10), (200, 20), (30, 100), (5, 1), (1, 3)]:
        out.append((f"{m}x{n}", rng.standard_normal((m, n)), rng.standard_normal(m)))
    c = rng.standard_normal((40, 12))
    c[:, 5] = c[:, 2]  # a duplicated column
    c[:, 7] = c[:, 0] + c[:, 1]  # a dependent one
    out.append(("rank deficient", c, rng.standard_normal(40)))
    c = rng.standard_normal((60, 30)) * np.logspace(-4, 4, 30)  # columns on 8 decades
    out.append(("column scales", c, rng.standard_normal(60) * 1e3))
    return out


def _penalties(c, d):
    n = c.shape[1]
    lam = 0.2 * float(np.max(np.abs(c.T @ d)))
    rng = np.random.default_rng(4)
    return [
        ("l1", mg.L1(lam)),
        ("nonneg l1", mg.NonNegL1(lam)),
        ("box", mg.Box(-0.2, 0.3)),
        ("box per row", mg.Box(-rng.uniform(0, 1, n), rng.uniform(0, 1, n))),
        ("zero", mg.Zero()),
    ]


CASES = [
    (f"{name} {pname}", c, d, pen) for name, c, d in _designs() for pname, pen in _penalties(c, d)
]


def _reference(c, d, penalty):
    """An independent solver's answer: scikit-learn's Lasso (its objective is ours over m)
    at a tight tolerance, SciPy's bounded least squares, or lstsq."""
    m, n = c.shape
    if isinstance(penalty, mg.L1):
        lasso = Lasso(
            alpha=penalty.lam / m,
            fit_intercept=False,
            positive=isinstance(penalty, mg.NonNegL1),
            tol=1e-14,
            max_iter=200_000,
        )
        return lasso.fit(c, d).coef_
    if isinstance(penalty, mg.Zero):
        return np.linalg.lstsq(c, d, rcond=None)[0]
    lb, ub = (np.broadcast_to(np.asarray(b, dtype=float), (n,)) for b in (penalty.lb, penalty.ub))
    return lsq_linear(c, d, bounds=(lb, ub), method="bvls", tol=1e-15, max_iter=10_000).x


@pytest.mark.parametrize(("name", "c", "d", "penalty"), CASES, ids=[k[0] for k in CASES])
def test_small_road_gives_the_general_roads_answer_and_no_worse_than_a_reference(
    name, c, d, penalty
):
    c0, d0 = c.copy(), d.copy()
    res = mg.least_squares(c, d, penalty)
    assert res.info.get("small_problem")
    assert np.array_equal(c, c0) and np.array_equal(d, d0)  # the user's arrays untouched
    general = mg.least_squares(c, d, penalty, **GENERAL)
    assert "small_problem" not in general.info
    f, f_general = _f(c, d, res.x, penalty), _f(c, d, general.x, penalty)
    f_ref = _f(c, d, _reference(c, d, penalty), penalty)
    scale = 1e-13 * float(d @ d)
    assert f <= f_ref + 1e-10 * abs(f_ref) + scale
    assert abs(f - f_general) <= 1e-12 * abs(f_general) + scale
    lb, ub = (np.broadcast_to(np.asarray(b, float), res.x.shape) for b in (penalty.lb, penalty.ub))
    assert np.all(res.x >= lb) and np.all(res.x <= ub) and res.x.shape == (c.shape[1],)
    assert res.converged and res.converged_columns.tolist() == [True]
    assert res.fun == pytest.approx(f, rel=1e-12, abs=scale)
    assert res.info["kkt_residual"][0] <= 1e-6
    f0 = 0.5 * float(d @ d) + float(np.sum(penalty.value(np.zeros(c.shape[1]))))
    assert res.objective[0] == pytest.approx(f0) and res.objective[-1] == res.fun


def test_a_unique_answer_is_the_general_roads_to_rounding():
    rng = np.random.default_rng(5)
    c, d = rng.standard_normal((80, 25)), rng.standard_normal(80)
    for penalty in (mg.L1(3.0), mg.Box(-0.1, 0.1), mg.NonNegL1(1.0), mg.Zero()):
        x = mg.least_squares(c, d, penalty).x
        np.testing.assert_allclose(x, mg.least_squares(c, d, penalty, **GENERAL).x, atol=1e-12)


def test_no_penalty_is_plain_least_squares():
    rng = np.random.default_rng(10)
    c, d = rng.standard_normal((50, 12)), rng.standard_normal(50)
    res = mg.least_squares(c, d)
    assert res.info.get("small_problem") and res.converged
    np.testing.assert_allclose(res.x, np.linalg.lstsq(c, d, rcond=None)[0], atol=1e-12)


def test_a_soft_thresholding_closed_form():
    # orthonormal columns: x = soft threshold of C'd at lam
    q, _ = np.linalg.qr(np.random.default_rng(6).standard_normal((30, 8)))
    d = q @ np.array([3.0, -2.0, 0.4, -0.1, 0.0, 1.0, -5.0, 0.5])
    res = mg.least_squares(q, d, mg.L1(0.5))
    assert res.info.get("small_problem")
    ctd = q.T @ d
    np.testing.assert_allclose(res.x, np.sign(ctd) * np.maximum(np.abs(ctd) - 0.5, 0), atol=1e-14)


def test_one_column_of_d_gives_one_column_of_x():
    c, d = CASES[0][1], CASES[0][2]
    res = mg.least_squares(c, d[:, None], mg.L1(1.0))
    assert res.info.get("small_problem") and res.x.shape == (c.shape[1], 1)
    general = mg.least_squares(c, d[:, None], mg.L1(1.0), **GENERAL)
    np.testing.assert_allclose(res.x, general.x, atol=1e-12)


def test_nnls_keeps_its_own_small_road():
    rng = np.random.default_rng(7)
    c, d = rng.random((30, 8)), rng.standard_normal(30)
    res = mg.least_squares(c, d, mg.NonNeg())
    assert res.info.get("small_problem") and "finish_polished" in res.info  # small_nnls's
    assert mg.nnls(c, d).info.get("small_problem")


def test_an_unfinished_solve_goes_to_the_general_road(monkeypatch):
    rng = np.random.default_rng(8)
    c, d = rng.standard_normal((30, 8)), rng.standard_normal(30)
    real = small_pwl.pwl_active_set

    def unfinished(*args, **kwargs):
        x, status, iters = real(*args, **kwargs)
        return x, np.zeros_like(status), iters

    monkeypatch.setattr(small_pwl, "pwl_active_set", unfinished)
    res = mg.least_squares(c, d, mg.L1(1.0))
    assert "small_problem" not in res.info and res.converged


@pytest.mark.parametrize(
    "case",
    [
        "option",
        "x0",
        "backend",
        "representation",
        "float32",
        "two columns",
        "sparse",
        "too many unknowns",
        "huge scale",
        "huge lam",
        "empty column",
        "list",
        "l0",
    ],
)
def test_other_calls_take_the_general_road(case):
    rng = np.random.default_rng(1)
    c, d, kwargs, penalty = rng.standard_normal((30, 8)), rng.standard_normal(30), {}, mg.L1(1.0)
    if case in COMMON:
        c, d, kwargs = general_road_call(case, c, d)
    elif case == "too many unknowns":
        c = rng.standard_normal((30, small_nnls.MAX_N + 1))
    elif case == "huge scale":
        c, d, penalty = c * 1e150, d * 1e150, mg.L1(1e300)
    elif case == "huge lam":
        penalty = mg.L1(1e120)
    elif case == "empty column":
        c[:, 2] = 0.0
    elif case == "l0":
        penalty = mg.L0(0.5)
    res = mg.least_squares(c, d, penalty, **kwargs)
    assert "small_problem" not in res.info
    assert res.converged or case == "l0"


@pytest.mark.parametrize("case", ["nan", "bounds of the wrong length", "not a penalty"])
def test_bad_input_gets_the_general_roads_errors(case):
    rng = np.random.default_rng(2)
    c, d = rng.standard_normal((30, 8)), rng.standard_normal(30)
    penalty, error = mg.L1(1.0), ValueError
    if case == "nan":
        d[3] = np.nan
    elif case == "bounds of the wrong length":
        penalty = mg.Box(-np.ones(5), np.ones(5))
    else:
        penalty, error = "l1", TypeError
    with pytest.raises(error):
        mg.least_squares(c, d, penalty)
