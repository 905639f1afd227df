"""Two rules a newcomer meets: when ``solve`` tests A for positive semidefiniteness up
front (pinned at n = 1200, above ``PSD_CHECK_MAX_N``), and how ``L1(lam)`` maps to
scikit-learn's ``Lasso(alpha)``."""

from __future__ import annotations

import numpy as np
import pytest

import msm_gpu as mg
from msm_gpu._input.problem import PSD_CHECK_MAX_N

N = 1200


@pytest.fixture(scope="module")
def indefinite():
    """A (N x N) with eigenvalue -1 along e_0 - e_1 (positive diagonal) and R = e_0 - e_1:
    F -> -inf along e_1 - e_0 without bounds."""
    a = np.eye(N)
    a[0, 1] = a[1, 0] = 2.0
    r = np.zeros(N)
    r[0], r[1] = 1.0, -1.0
    return a, r


def test_the_size_limit_is_below_the_pinned_size():
    assert PSD_CHECK_MAX_N == 1000 < N


@pytest.mark.parametrize(
    ("penalty", "options"),
    [(mg.NonNeg(), {}), (mg.L1(0.1), {}), (mg.NonNeg(), {"tol": 0.0, "max_iter": 3})],
    ids=["nonneg", "l1", "nonneg-tol0"],
)
def test_msm_with_the_exact_finish_refuses_at_any_n(indefinite, penalty, options):
    # method="msm", finish not None (default "auto") and a convex penalty: tested up front,
    # even when tol = 0 then skips the finish itself
    a, r = indefinite
    with pytest.raises(ValueError, match="not positive semidefinite: its smallest eigenvalue"):
        mg.solve(a, r, penalty, **options)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize(
    ("penalty", "options"),
    [
        (mg.Zero(), {"finish": None}),
        (mg.Zero(), {"method": "pgm"}),
        (mg.Zero(), {"check_convergence": False, "finish": None}),
        (mg.L0(0.1), {}),
    ],
    ids=["finish-none", "pgm", "no-check", "l0"],
)
def test_otherwise_not_tested_above_the_limit(indefinite, penalty, options):
    # no up-front test: the run starts and does not report convergence
    a, r = indefinite
    with np.errstate(all="ignore"):
        res = mg.solve(a, r, penalty, max_iter=50, **options)
    assert res.n_iter > 0 and not res.converged


def test_a_bounded_run_on_an_indefinite_a_can_converge_untested(indefinite):
    # with finish=None and x >= 0 the objective stays bounded here: nothing is tested and
    # the run converges to a stationary point (README must not promise converged=False)
    a, r = indefinite
    res = mg.solve(a, r, mg.NonNeg(), finish=None)
    assert res.converged and np.all(np.isfinite(res.x))


def test_l1_lam_is_lasso_alpha_times_rows():
    # scikit-learn's Lasso: 1/(2m) ||d - C w||^2 + alpha ||w||_1; here
    # 1/2 ||C x - d||^2 + lam ||x||_1, so lam = alpha * m (m = rows of C)
    from sklearn.linear_model import Lasso

    rng = np.random.default_rng(0)
    m, n, alpha = 60, 12, 0.1
    c = rng.normal(size=(m, n))
    truth = np.zeros(n)
    truth[[1, 4, 7]] = [2.0, -1.5, 0.8]
    d = c @ truth + 0.1 * rng.normal(size=m)
    lasso = Lasso(alpha=alpha, fit_intercept=False, tol=1e-14, max_iter=1_000_000).fit(c, d)
    res = mg.least_squares(c, d, mg.L1(alpha * m), tol=1e-12)
    np.testing.assert_allclose(res.x, lasso.coef_, atol=1e-9)
    assert np.count_nonzero(res.x) == np.count_nonzero(lasso.coef_) == 3
    # lam = alpha (without the m) is a different, much weaker penalty
    assert np.max(np.abs(mg.least_squares(c, d, mg.L1(alpha)).x - lasso.coef_)) > 1e-2
