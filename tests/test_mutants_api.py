"""msm_gpu._api: what its docstrings promise at the edges the other tests do not reach
(written for the mutants that survived them; see benchmarks/mutation/SURVIVORS.md).

* ``result.time`` is the wall time of the call;
* the options after ``penalty`` are keyword-only;
* the method name is compared by value (a name read from a file or built at run time is
  the same method as the literal);
* the up-front positive-semidefiniteness test runs for n <= 1000 only, except for MSM
  with the exact finish on a convex penalty (the finish needs it at any n); a baseline
  on a larger indefinite A runs and reports the divergence instead.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import msm_gpu as mg
from msm_gpu._input.problem import PSD_CHECK_MAX_N


def _small(seed=0, n=6):
    rng = np.random.default_rng(seed)
    c = rng.normal(size=(n + 3, n))
    return c, c.T @ c, rng.normal(size=n)


def _runtime_string(word):
    """``word`` as a new str object (not the interned literal), as from a config file."""
    built = "".join(list(word))
    assert built == word and built is not word
    return built


@pytest.mark.parametrize("method", ["msm", "pgm"])
def test_result_time_is_the_wall_time_of_the_call(method):
    c, a, r = _small()
    d = c @ r
    for call in (
        lambda: mg.solve(a, r, mg.NonNeg(), method=method),
        lambda: mg.least_squares(c, d, mg.L1(0.1), method=method),
        lambda: mg.nnls(c, d, method=method),
    ):
        t0 = time.perf_counter()
        res = call()
        elapsed = time.perf_counter() - t0
        assert 0.0 < res.time <= elapsed


def test_options_are_keyword_only():
    c, a, r = _small()
    with pytest.raises(TypeError):
        mg.solve(a, r, mg.NonNeg(), 1.0)  # omega given by position
    with pytest.raises(TypeError):
        mg.least_squares(c, c @ r, None, np.zeros(a.shape[0]))  # x0 given by position


def test_method_name_is_compared_by_value():
    c, a, r = _small(seed=1)
    literal = mg.solve(a, r, mg.NonNeg(), method="msm")
    built = mg.solve(a, r, mg.NonNeg(), method=_runtime_string("msm"))
    assert built.method == "msm"
    assert built.info["theta"] == literal.info["theta"]
    assert built.info["theta_abs"] == literal.info["theta_abs"]
    np.testing.assert_array_equal(built.x, literal.x)
    pgm = mg.solve(a, r, mg.NonNeg(), method=_runtime_string("pgm"), tol=1e-10)
    assert pgm.method == "pgm" and "theta" not in pgm.info


def _indefinite(n):
    a = np.eye(n)
    a[0, 1] = a[1, 0] = 2.0  # eigenvalue -1 along e_0 - e_1; the diagonal is positive
    r = np.zeros(n)
    r[0], r[1] = 1.0, -1.0
    return a, r


def test_psd_test_runs_at_any_n_for_msm_with_the_exact_finish():
    n = PSD_CHECK_MAX_N + 1
    a, r = _indefinite(n)
    for method in ("msm", _runtime_string("msm")):
        with pytest.raises(ValueError, match="positive semidefinite"):
            mg.solve(a, r, mg.NonNeg(), method=method)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("method", ["apg", "apg_ls", "pgm", "pgm_ls"])
def test_baselines_skip_the_psd_test_above_the_size_limit(method):
    # solve's docstring: for n > 1000 an indefinite A is not refused up front; the run
    # stops when F stops being finite (here -> -inf along e_0 - e_1), not converged
    n = PSD_CHECK_MAX_N + 1
    a, r = _indefinite(n)
    res = mg.solve(a, r, mg.Zero(), method=method, max_iter=30)
    assert res.n_iter > 0 and not res.converged
    # ... while below the limit the same matrix is refused
    a_small, r_small = _indefinite(PSD_CHECK_MAX_N)
    with pytest.raises(ValueError, match="positive semidefinite"):
        mg.solve(a_small, r_small, mg.Zero(), method=method)


def test_result_time_is_measured_from_the_start_of_the_call(monkeypatch):
    # on a clock that starts near 0 (perf_counter's epoch is unspecified), `time` must be
    # end - start, not any other combination of the two readings
    readings = []

    def clock():
        readings.append(0.5 + 0.375 * len(readings))  # 0.5, 0.875, 1.25, ...
        return readings[-1]

    c, a, r = _small(seed=2)
    monkeypatch.setattr(time, "perf_counter", clock)
    res = mg.solve(a, r, mg.NonNeg())
    monkeypatch.undo()
    assert len(readings) >= 3
    # the first reading is the call's start, the last one its end (the result is built last)
    assert res.time == readings[-1] - readings[0]
