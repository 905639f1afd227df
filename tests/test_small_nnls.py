"""``mg.nnls(C, d)`` on one small dense problem at default options (finish/small_nnls.py).

The small road must give what the general road gives (``least_squares(C, d, NonNeg())``
with a keyword given: it never takes the small road) and what SciPy's ``nnls`` gives, on
well- and ill-conditioned, tall, wide and rank-deficient problems, and hand every other
call to the general road.
"""

from __future__ import annotations

import numpy as np
import pytest
from general_road_calls import COMMON, general_road_call
from scipy.optimize import nnls as scipy_nnls

import msm_gpu as mg
from msm_gpu.finish import small_nnls


def _f(c, d, x):
    return 0.5 * float(np.sum((c @ x - d) ** 2))


def _peaks(m, n, width, seed):
    rng = np.random.default_rng(seed)
    t = np.linspace(0, 1, m)[:, None]
    centres = np.sort(rng.uniform(0.05, 0.95, n))
    return np.exp(-0.5 * ((t - centres) / (width * rng.uniform(0.7, 1.3, n))) ** 2)


def _problems():
    rng = np.random.default_rng(0)
    out = []
    for m, n in [(20, 10), (200, 20), (500, 100), (30, 100), (5, 1), (1, 3)]:
        out.append((f"random {m}x{n}", rng.random((m, n)), rng.standard_normal(m)))
    c = rng.standard_normal((40, 12))
    c[:, 5] = c[:, 2]  # a duplicated column
    c[:, 7] = c[:, 0] + c[:, 1]  # a dependent one
    out.append(("rank deficient", c, rng.standard_normal(40)))
    c = _peaks(300, 60, 0.035, 0)  # cond(C'C) ~ 1e18: the QR polish
    x = np.abs(rng.standard_normal(60)) * (rng.uniform(size=60) < 0.3)
    out.append(("ill-conditioned peaks", c, c @ x + 1e-3 * rng.standard_normal(300)))
    c = _peaks(80, 120, 0.02, 1)  # wide and ill-conditioned
    x = np.abs(rng.standard_normal(120)) * (rng.uniform(size=120) < 0.2)
    out.append(("wide peaks", c, c @ x + 1e-3 * rng.standard_normal(80)))
    return out


PROBLEMS = _problems()

#: A keyword given (its default value): the call takes the general road.
GENERAL = {"finish": "auto"}


@pytest.mark.parametrize(("name", "c", "d"), PROBLEMS, ids=[p[0] for p in PROBLEMS])
def test_small_road_gives_the_general_roads_and_scipys_answer(name, c, d):
    c0, d0 = c.copy(), d.copy()
    res = mg.nnls(c, d)
    assert res.info.get("small_problem")
    assert np.array_equal(c, c0) and np.array_equal(d, d0)  # the user's arrays untouched
    general = mg.least_squares(c, d, mg.NonNeg(), **GENERAL)
    assert "small_problem" not in general.info
    ref = scipy_nnls(c, d, maxiter=50 * c.shape[1])[0]
    f, f_general, f_ref = _f(c, d, res.x), _f(c, d, general.x), _f(c, d, ref)
    scale = 1e-14 * float(d @ d)
    assert f <= f_ref * (1 + 1e-12) + scale
    assert abs(f - f_general) <= 1e-12 * f_general + scale
    assert np.all(res.x >= 0) and res.x.shape == (c.shape[1],)
    assert res.converged and res.converged_columns.tolist() == [True]
    assert res.fun == pytest.approx(f, rel=1e-12, abs=scale)
    # the general road's KKT measure, to within the rounding of two near-equal points
    assert res.info["kkt_residual"][0] <= 1e-6
    assert res.objective[0] == pytest.approx(0.5 * float(d @ d))


def test_one_column_of_d_gives_one_column_of_x():
    c, d = PROBLEMS[1][1], PROBLEMS[1][2]
    res = mg.nnls(c, d[:, None])
    assert res.info.get("small_problem") and res.x.shape == (c.shape[1], 1)
    general = mg.least_squares(c, d[:, None], mg.NonNeg(), **GENERAL)
    assert general.x.shape == res.x.shape
    np.testing.assert_allclose(res.x, general.x, atol=1e-12)


def test_the_polish_runs_where_the_gram_matrix_is_ill_conditioned():
    res = mg.nnls(PROBLEMS[-2][1], PROBLEMS[-2][2])
    assert res.info["finish_polished"]
    res = mg.nnls(PROBLEMS[0][1], PROBLEMS[0][2])
    assert not res.info["finish_polished"]


@pytest.mark.parametrize(
    "case",
    [
        "option",
        "float32",
        "two columns",
        "sparse",
        "too many unknowns",
        "huge scale",
        "tiny scale",
        "nan",
        "empty column",
        "list",
    ],
)
def test_other_calls_take_the_general_road(case):
    rng = np.random.default_rng(1)
    c, d, kwargs = rng.random((30, 8)), rng.random(30), {}
    if case in COMMON:
        c, d, kwargs = general_road_call(case, c, d)
    elif case == "too many unknowns":
        c = rng.random((30, small_nnls.MAX_N + 1))
    elif case == "huge scale":
        c = c * 1e150
    elif case == "tiny scale":
        d = d * 1e-150
    elif case == "nan":
        d = d.copy()
        d[3] = np.nan
    elif case == "empty column":
        c[:, 2] = 0.0
    if case == "nan":
        with pytest.raises(ValueError):
            mg.nnls(c, d)
        return
    res = mg.nnls(c, d, **kwargs)
    assert "small_problem" not in res.info
    assert res.converged
