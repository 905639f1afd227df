"""Batched active sets start a column from the previous column's answer when their linear
terms are alike (``pwl_active_set._gram_range``, and ``nnls_columns._nnls_range`` in its
factor phase): a Lasso path put in one call, neighbouring pixels.  The answers must be
those of the columns solved one at a time, scikit-learn's path and SciPy's NNLS;
unrelated columns, given starts and the NNLS Schur phase are left as they were."""

import numpy as np
import pytest

import msm_gpu as mg
from msm_gpu.finish.faces import Faces
from msm_gpu.solvers import nnls_columns
from msm_gpu.solvers import pwl_active_set as pas


def _ar1_design(rng, m=300, n=60, rho=0.6):
    X = np.empty((m, n))
    X[:, 0] = rng.standard_normal(m)
    for j in range(1, n):
        X[:, j] = rho * X[:, j - 1] + np.sqrt(1 - rho**2) * rng.standard_normal(m)
    return X


def _problem(rng, D, penalty, X=None):
    X = _ar1_design(rng) if X is None else X
    A = X.T @ X
    R = -(X.T @ D)
    return A, R, Faces(np, penalty, A.shape[0])


def _one_at_a_time(A, R, faces, X0):
    """Each column in a call of its own: no previous column to start from."""
    out = [
        pas.pwl_active_set(A, R[:, [k]], faces, X0[:, [k]], threads=1) for k in range(R.shape[1])
    ]
    X = np.hstack([o[0] for o in out])
    status = np.concatenate([o[1] for o in out])
    iters = np.concatenate([o[2] for o in out])
    return X, status, iters


def _objective(A, R, X, lam):
    return 0.5 * np.sum(X * (A @ X), axis=0) + np.sum(R * X, axis=0) + lam * np.abs(X).sum(0)


@pytest.mark.parametrize("penalty_kind", ["l1", "nonnegl1"])
def test_path_columns_match_one_at_a_time_and_take_fewer_steps(rng, penalty_kind):
    X = _ar1_design(rng)
    y = X[:, :5] @ rng.standard_normal(5) + 0.1 * rng.standard_normal(X.shape[0])
    lam_max = float(np.max(np.abs(X.T @ y)))
    scale = np.geomspace(1.0, 1e-3, 40)
    D = y[:, None] / scale[None, :]  # the path's columns rescaled to one lambda
    penalty = mg.L1(lam_max) if penalty_kind == "l1" else mg.NonNegL1(lam_max)
    A, R, faces = _problem(rng, D, penalty, X)
    X0 = np.zeros_like(R)
    warm, status, iters = pas.pwl_active_set(A, R, faces, X0, threads=1)
    alone, status_alone, iters_alone = _one_at_a_time(A, R, faces, X0)
    assert np.all(status == 1) and np.all(status_alone == 1)
    f_warm, f_alone = _objective(A, R, warm, lam_max), _objective(A, R, alone, lam_max)
    assert np.all(f_warm <= f_alone + 1e-12 * np.abs(f_alone))
    assert np.allclose(warm, alone, rtol=1e-9, atol=1e-9 * np.abs(alone).max())
    # the first column has no previous one; the others change a few variables each
    assert iters[0] == iters_alone[0]
    assert iters[1:].sum() < 0.5 * iters_alone[1:].sum()


def test_path_in_one_call_matches_scikit_learn(rng):
    from sklearn.linear_model import lasso_path

    X = _ar1_design(rng, m=400, n=80)
    y = X[:, :8] @ rng.standard_normal(8) + 0.1 * rng.standard_normal(400)
    lam_max = float(np.max(np.abs(X.T @ y)))
    lambdas = lam_max * np.geomspace(1.0, 1e-3, 50)
    scale = lambdas / lam_max
    ours = mg.least_squares(X, y[:, None] / scale[None, :], mg.L1(lam_max))
    coefs = ours.x * scale
    theirs = lasso_path(X, y, alphas=lambdas / 400, tol=1e-12, max_iter=200_000)[1]

    def f(b):
        res = X @ b - y[:, None]
        return 0.5 * np.sum(res * res, axis=0) + lambdas * np.abs(b).sum(0)

    assert ours.converged
    assert np.all(f(coefs) <= f(theirs) + 1e-10 * f(theirs))
    assert np.allclose(coefs, theirs, atol=1e-6 * np.abs(theirs).max())


def test_unrelated_columns_are_solved_as_alone(rng):
    D = rng.standard_normal((300, 12))
    A, R, faces = _problem(rng, D, mg.L1(30.0))
    X0 = np.zeros_like(R)
    warm, _, iters = pas.pwl_active_set(A, R, faces, X0, threads=1)
    alone, _, iters_alone = _one_at_a_time(A, R, faces, X0)
    np.testing.assert_array_equal(iters, iters_alone)
    np.testing.assert_array_equal(warm, alone)


def test_a_given_start_is_kept(rng):
    y = rng.standard_normal(300)
    D = y[:, None] * np.geomspace(1.0, 3.0, 8)[None, :]  # alike columns
    A, R, faces = _problem(rng, D, mg.L1(5.0))
    X0 = np.zeros_like(R)
    X0[0, :] = 0.5  # a start that is not 0: the caller's, not the previous answer
    warm, _, iters = pas.pwl_active_set(A, R, faces, X0, threads=1)
    alone, _, iters_alone = _one_at_a_time(A, R, faces, X0)
    np.testing.assert_array_equal(iters, iters_alone)
    np.testing.assert_array_equal(warm, alone)


@pytest.mark.parametrize("penalty", [mg.Box(-0.2, 0.3), mg.L1(2.0)])
def test_threads_split_the_columns_to_the_same_answers(rng, penalty):
    y = rng.standard_normal(300)
    D = y[:, None] + 0.05 * rng.standard_normal((300, 64))  # alike, not equal
    A, R, faces = _problem(rng, D, penalty)
    X0 = np.zeros_like(R)
    one, s1, _ = pas.pwl_active_set(A, R, faces, X0, threads=1)
    two, s2, _ = pas.pwl_active_set(A, R, faces, X0, threads=2)
    alone, _, _ = _one_at_a_time(A, R, faces, X0)
    assert np.all(s1 == 1) and np.all(s2 == 1)
    for x in (one, two):
        assert np.allclose(x, alone, rtol=1e-9, atol=1e-9 * max(np.abs(alone).max(), 1.0))


@pytest.mark.parametrize(
    ("r", "r_prev", "alike"),
    [
        ([1.0, 2.0], [2.0, 4.0], True),  # parallel, any length
        ([1.0, 2.0], [-1.0, -2.0], False),  # opposite
        ([1.0, 0.0], [1.0, 0.2], False),  # cos 0.98
        ([1.0, 0.0], [1.0, 0.1], True),  # cos 0.995
        ([0.0, 0.0], [0.0, 0.0], False),  # nothing to compare
    ],
)
def test_alike_is_a_cosine_threshold(r, r_prev, alike):
    assert nnls_columns.alike(np.array(r), np.array(r_prev)) is alike


# -- NNLS (nnls_columns): only in the factor phase -------------------------------------


def _peak_library(rng, m=200, n=50):
    channels = np.arange(m)[:, None]
    centres = rng.uniform(0, m, n)[None, :]
    widths = rng.uniform(4.0, 16.0, n)[None, :]
    return np.exp(-0.5 * ((channels - centres) / widths) ** 2)


def _nnls_one_at_a_time(G, P):
    out = [nnls_columns.nnls_active_set(G, P[:, [k]], threads=1) for k in range(P.shape[1])]
    return (np.hstack([o[0] for o in out]), np.concatenate([o[1] for o in out]),
            np.concatenate([o[2] for o in out]))  # fmt: skip


def test_nnls_alike_pixels_match_one_at_a_time_and_scipy(rng):
    import scipy.optimize

    C = _peak_library(rng)  # numerically singular C'C: the factor phase
    support = rng.choice(C.shape[1], 6, replace=False)
    A = np.zeros((C.shape[1], 30))
    A[support] = rng.uniform(0.5, 1.0, (6, 1)) + 0.02 * rng.standard_normal((6, 30))
    D = C @ np.abs(A) + 0.01 * rng.standard_normal((C.shape[0], 30))
    G, P = C.T @ C, C.T @ D
    stats = {}
    X, ok, iters = nnls_columns.nnls_active_set(G, P, threads=1, stats=stats)
    assert not stats["cond"] < 1e8  # no Schur phase on this library
    alone, ok_alone, iters_alone = _nnls_one_at_a_time(G, P)
    assert ok.all() and ok_alone.all()

    def f(x):
        return 0.5 * np.sum(x * (G @ x), axis=0) - np.sum(P * x, axis=0)

    assert np.all(f(X) <= f(alone) + 1e-12 * np.abs(f(alone)))
    assert iters[0] == iters_alone[0]
    assert iters[1:].sum() < iters_alone[1:].sum()
    # SciPy's NNLS on C (not C'C) as the independent answer, column by column
    for k in range(0, 30, 7):
        ref = scipy.optimize.nnls(C, D[:, k])[0]
        res = np.sum((C @ X[:, k] - D[:, k]) ** 2)
        assert res <= np.sum((C @ ref - D[:, k]) ** 2) * (1 + 1e-9)


def test_nnls_schur_phase_columns_are_solved_as_alone(rng):
    C = np.abs(rng.standard_normal((300, 40)))  # well conditioned: the Schur phase
    D = np.abs(rng.standard_normal((300, 1)) + 0.01 * rng.standard_normal((300, 20)))
    G, P = C.T @ C, C.T @ D
    X, _, iters = nnls_columns.nnls_active_set(G, P, threads=1)
    alone, _, iters_alone = _nnls_one_at_a_time(G, P)
    np.testing.assert_array_equal(iters, iters_alone)
    np.testing.assert_array_equal(X, alone)


def test_an_unfinished_warm_column_is_solved_from_its_own_start():
    # two face solves per column: a column that starts from the previous (finished)
    # answer and stops unfinished is solved again from 0, so that F never ends above F(0)
    rng = np.random.default_rng(0)
    X = _ar1_design(rng)
    y = X[:, :5] @ rng.standard_normal(5) + 0.1 * rng.standard_normal(X.shape[0])
    lam_max = float(np.max(np.abs(X.T @ y)))
    D = y[:, None] / np.geomspace(1.0, 1e-3, 20)[None, :]  # parallel columns: all alike
    A, R, faces = _problem(rng, D, mg.L1(lam_max), X)
    X0 = np.zeros_like(R)
    warm, status, _ = pas.pwl_active_set(A, R, faces, X0, max_iter=2, threads=1)
    alone, _ = _one_at_a_time_limited(A, R, faces, X0, 2)
    unfinished = status != 1
    warm_then_unfinished = unfinished[1:] & (status[:-1] == 1)
    assert warm_then_unfinished.any()
    np.testing.assert_array_equal(warm[:, unfinished], alone[:, unfinished])
    assert np.all(_objective(A, R, warm, lam_max) <= 0.0)  # F(0) = 0 in these terms


def _one_at_a_time_limited(A, R, faces, X0, max_iter):
    out = [
        pas.pwl_active_set(A, R[:, [k]], faces, X0[:, [k]], max_iter=max_iter, threads=1)
        for k in range(R.shape[1])
    ]
    return np.hstack([o[0] for o in out]), np.concatenate([o[1] for o in out])


def test_nnls_unfinished_warm_column_is_solved_from_zero():
    # an ill-conditioned library (no Schur phase); column 0's answer is all positive (two
    # steps from 0), column 1's has four zeros: alike (cosine > 0.99), and from column 0's
    # answer it needs five steps, from 0 three.  With three allowed, the warm start stops
    # unfinished and the column is solved again from 0.
    m, n = 200, 30
    channels = np.arange(m)[:, None]
    C = np.exp(-0.5 * ((channels - np.linspace(10, 190, n)[None, :]) / 12.0) ** 2)
    off = [3, 11, 20, 27]
    a1 = np.ones(n)
    a1[off] = 0.0
    D = np.column_stack([C @ np.ones(n), C @ a1 - 0.05 * C[:, off].sum(axis=1)])
    G, P = C.T @ C, C.T @ D
    stats = {}
    nnls_columns.nnls_active_set(G, P, stats=stats)
    assert stats["cond"] > 1e8  # the factor phase
    assert nnls_columns.alike(P[:, 1].copy(), P[:, 0].copy())
    full, ok_full, iters_full = nnls_columns.nnls_active_set(G, P, threads=1)
    assert ok_full.all() and iters_full[1] > 3  # the warm start's own way is longer
    for max_iter in (2, 3):
        X, ok, _ = nnls_columns.nnls_active_set(G, P, max_iter=max_iter, threads=1)
        alone = nnls_columns.nnls_active_set(G, P[:, [1]], max_iter=max_iter, threads=1)
        assert ok[1] == alone[1][0]
        np.testing.assert_array_equal(X[:, 1], alone[0][:, 0])
