"""The design form's projected Newton-CG (faces too large to factorise), checked against
SciPy / scikit-learn on dense copies: every convex penalty, dense and sparse C, and the
degenerate sparse designs that defeated the factorised active set (one entry per column,
duplicated columns, empty columns and rows)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize
import scipy.sparse
from numba import njit
from test_rank_deficient import PENALTIES, _f, _problem, _reference

import msm_gpu as mg
from msm_gpu._input.scaling import equilibration, row_scaled_penalty
from msm_gpu.finish import design_form
from msm_gpu.finish.faces import Faces
from msm_gpu.solvers.projected_newton import (
    _face_product,
    _face_rows,
    projected_newton_on_source,
)
from msm_gpu.solvers.pwl_active_set import DesignSource


def _newton(c, d, penalty, x0=None, max_rounds=200):
    """The projected Newton-CG on the column-equilibrated C, in the user's variables."""
    dense = c.toarray() if scipy.sparse.issparse(c) else c
    norms = np.sum(dense * dense, axis=0)
    s = equilibration(norms)
    n = c.shape[1]
    faces = Faces(np, row_scaled_penalty(penalty, s), n)
    y0 = np.zeros((n, 1)) if x0 is None else (x0 / s)[:, None]
    y, status, rounds, _ = projected_newton_on_source(
        DesignSource(c, s), d[:, None], faces, y0, max_rounds=max_rounds
    )
    return y[:, 0] * s, status[0], rounds[0]


def _degenerate(kind, m, n, rng):
    """Sparse C (CSC) of the kinds named, and d."""
    if kind == "one_per_column":  # parallel columns: every column is a multiple of e_i
        rows = rng.integers(0, m, n)
        c = scipy.sparse.csc_matrix((rng.uniform(0.5, 2.0, n), (rows, np.arange(n))), (m, n))
    elif kind == "duplicated":
        half = scipy.sparse.random(m, n // 2, density=0.05, random_state=rng, format="csc")
        c = scipy.sparse.hstack([half, 2.0 * half], format="csc")
    elif kind == "empty_rows_and_columns":
        c = scipy.sparse.random(m, n, density=0.05, random_state=rng, format="lil")
        c[: m // 5, :] = 0.0
        c[:, ::7] = 0.0
        c = c.tocsc()
        c.eliminate_zeros()
    else:
        raise ValueError(kind)
    return c, rng.uniform(size=m)


def _assert_optimal(c, d, x, name):
    dense = c.toarray() if scipy.sparse.issparse(c) else c
    f = _f(dense, d, x, name)
    f_ref = _f(dense, d, _reference(dense, d, name), name)
    assert f <= f_ref * (1 + 1e-10) + 1e-12 * float(d @ d)


@pytest.mark.parametrize("name", sorted(PENALTIES))
@pytest.mark.parametrize("sparse", [False, True])
def test_projected_newton_reaches_the_reference_optimum(name, sparse):
    c, d = _problem("positive", 40, 120, 3)
    cc = scipy.sparse.csc_matrix(c) if sparse else c
    x, status, _ = _newton(cc, d, PENALTIES[name])
    assert status == 1
    _assert_optimal(c, d, x, name)


@pytest.mark.parametrize("kind", ["one_per_column", "duplicated", "empty_rows_and_columns"])
@pytest.mark.parametrize("name", ["nonneg", "box", "nonneg_l1"])
def test_projected_newton_on_degenerate_sparse_designs(kind, name):
    c, d = _degenerate(kind, 50, 160, np.random.default_rng(7))
    x, status, _ = _newton(c, d, PENALTIES[name])
    assert status == 1
    empty = np.diff(c.indptr) == 0
    assert np.all(x[empty] == 0.0)  # no curvature: the start (0) is kept
    _assert_optimal(c, d, x, name)


@pytest.mark.parametrize("name", sorted(PENALTIES))
def test_each_round_never_increases_f(name):
    # one round at a time from a feasible start: F falls or stays (the path search)
    c, d = _problem("collinear", 30, 90, 11)
    rng = np.random.default_rng(2)
    x = np.clip(rng.standard_normal(90), -0.5, 0.5)
    if name in ("nonneg", "nonneg_l1"):
        x = np.abs(x)
    f_prev = _f(c, d, x, name)
    for _ in range(6):
        x, status, _ = _newton(c, d, PENALTIES[name], x0=x, max_rounds=1)
        f = _f(c, d, x, name)
        assert f <= f_prev * (1 + 1e-13) + 1e-13
        f_prev = f
        if status == 1:
            break


def _large_face_problem():
    # a sparse NNLS whose answer has more free variables than the active set factorises
    # (its sweeps stall on the face first): the road of the projected Newton-CG
    rng = np.random.default_rng(1)
    c = scipy.sparse.random(400, 4000, density=1e-3, format="csc", random_state=rng)
    return c, rng.uniform(size=400)


def test_nnls_on_a_large_sparse_face_takes_the_newton_road_and_is_exact(monkeypatch):
    # the road is taken from NEWTON_MIN_FREE free variables (1000: too slow for a quick
    # test against SciPy); the same face with the threshold at 0
    monkeypatch.setattr(design_form, "NEWTON_MIN_FREE", 0)
    c, d = _large_face_problem()
    res = mg.nnls(c, d)
    assert res.info["representation"] == "design"
    assert res.info.get("newton_columns") == 1
    assert res.converged and res.info["kkt_residual"][0] <= 1e-10
    x_ref = scipy.optimize.nnls(c.toarray(), d, maxiter=50 * 4000)[0]
    f, f_ref = (0.5 * float(np.sum((c @ v - d) ** 2)) for v in (res.x, x_ref))
    assert f <= f_ref * (1 + 1e-12)
    assert np.all(res.x >= 0)


def test_below_the_threshold_the_active_set_finishes():
    # some 770 free variables: the factorised active set is cheaper (measured)
    rng = np.random.default_rng(1)
    c = scipy.sparse.random(700, 2000, density=3e-3, format="csc", random_state=rng)
    d = rng.uniform(size=700)
    res = mg.nnls(c, d)
    assert np.count_nonzero(res.x) < design_form.NEWTON_MIN_FREE
    assert "newton_columns" not in res.info and res.info["finish_columns"] == 1
    assert res.converged and res.info["kkt_residual"][0] <= 1e-10


def test_the_user_arrays_are_left_alone():
    c, d = _large_face_problem()
    c0, d0 = c.copy(), d.copy()
    mg.nnls(c, d)
    assert (c != c0).nnz == 0 and np.array_equal(d, d0)


def test_a_dense_square_face_past_the_cap_goes_to_the_gram_form():
    # positive C, x_true on 90% of the columns: the design form's active set grew this
    # face one solve at a time (2287 solves at 1000 x 800); past its cap the Gram form
    # takes the column from where it stopped, and the answer is SciPy's
    rng = np.random.default_rng(0)
    c = np.abs(rng.standard_normal((1000, 800)))
    x_true = np.abs(rng.standard_normal(800)) * (rng.uniform(size=800) < 0.9)
    s = c @ x_true
    d = s + 1e-3 * np.sqrt(np.mean(s**2)) * rng.standard_normal(1000)
    res = mg.nnls(c, d)
    assert res.info["representation"] == "design"
    assert res.info["finish_active_set_iterations"] <= max(48, 800 // design_form.GRAM_AFTER)
    assert res.info["finish_active_set_iterations"] < 48  # the factor grows <= 256 rows
    assert res.info.get("gram_fallback_columns") == 1
    assert res.converged and res.info["kkt_residual"][0] <= 1e-10
    x_ref = scipy.optimize.nnls(c, d, maxiter=50 * 800)[0]
    f, f_ref = (0.5 * float(np.sum((c @ v - d) ** 2)) for v in (res.x, x_ref))
    assert f <= f_ref * (1 + 1e-12)


def test_a_factor_capped_by_grow_stops_the_column_for_the_caller():
    # the design form's factor grown by at most `grow` rows: a face needing more stops
    # (status 0, F no higher than at the start) instead of null-space steps, and the Gram
    # form solves the column (design_form.GRAM_FACTOR_SHARE); uncapped it finishes
    from msm_gpu.solvers.pwl_active_set import active_set_on_source

    rng = np.random.default_rng(1)
    c = np.abs(rng.standard_normal((300, 120)))
    d = c @ np.abs(rng.standard_normal(120)) + 0.01 * rng.standard_normal(300)
    faces = Faces(np, mg.NonNeg(), 120)
    source = DesignSource(c, np.ones(120))
    D = d[:, None]

    def f(x):
        return 0.5 * float(np.sum((c @ x[:, 0] - d) ** 2))

    x, status, _ = active_set_on_source(source, D, faces, np.zeros((120, 1)), grow=30)
    assert status[0] == 0 and np.count_nonzero(x) <= 30 and f(x) < f(np.zeros((120, 1)))
    x, status, _ = active_set_on_source(source, D, faces, np.zeros((120, 1)))
    x_ref = scipy.optimize.nnls(c, d)[0]
    assert status[0] == 1 and f(x) <= f(x_ref[:, None]) * (1 + 1e-12)


@pytest.mark.parametrize("penalty", [mg.Box(0.0, 1.0), mg.NonNegL1(3e-2), mg.L1(3e-2)])
def test_every_piecewise_linear_penalty_takes_the_same_road_through_the_api(penalty, monkeypatch):
    # Box, NonNegL1 and L1 on a sparse C through mg.least_squares, two right-hand sides
    # at once: the projected Newton-CG's answer (the road forced: NEWTON_MIN_FREE = 0)
    # against the factorised active set's (the default road here, itself checked
    # against SciPy and scikit-learn), column by column; float32 in, float32 out
    c, d = _large_face_problem()
    d = np.stack([d, d[::-1]], axis=1)
    reference = mg.least_squares(c, d, penalty)
    assert "newton_columns" not in reference.info and reference.converged
    monkeypatch.setattr(design_form, "NEWTON_MIN_FREE", 0)
    res = mg.least_squares(c, d, penalty)
    assert res.info.get("newton_columns", 0) >= 1
    assert res.converged and res.info["kkt_residual"].max() <= 1e-10
    lam = getattr(penalty, "lam", 0.0)
    f, f_ref = (
        0.5 * np.sum((c @ x - d) ** 2, axis=0) + lam * np.abs(x).sum(axis=0)
        for x in (res.x, reference.x)
    )
    assert np.all(f <= f_ref * (1 + 1e-10))
    res32 = mg.least_squares(c.astype(np.float32), d.astype(np.float32), penalty)
    assert res32.x.dtype == np.float32 and res32.converged


@pytest.mark.parametrize("seed", [0, 1])
def test_the_damped_newton_step_on_a_nearly_square_face(seed):
    # ~1000 free variables in 1000 rows of a random sparse C: the face's columns are
    # nearly dependent, and the undamped step spent its CG iterations on moves along
    # them that the path cut back to nothing (seed 1: not done in 200 rounds).  The
    # damped one: the KKT conditions (from C itself), F no higher, CG at most 0.6 times
    c = scipy.sparse.random(1000, 4000, density=0.005, format="csc", random_state=seed)
    d = np.random.default_rng(seed).uniform(size=1000)
    norms = np.asarray(c.multiply(c).sum(axis=0)).ravel()
    s = equilibration(norms)
    faces = Faces(np, row_scaled_penalty(mg.NonNeg(), s), c.shape[1])
    runs = {}
    for damping in (0.0, 1.0):
        y, status, _, cg = projected_newton_on_source(
            DesignSource(c, s), d[:, None], faces, np.zeros((c.shape[1], 1)), damping=damping
        )
        x = y[:, 0] * s
        runs[damping] = (status[0], cg[0], 0.5 * np.sum((c @ x - d) ** 2), x)
    status, cg, f, x = runs[1.0]
    assert status == 1 and np.all(x >= 0.0)
    grad = c.T @ (c @ x - d)
    scale = np.abs(c.T @ d).max()
    assert grad.min() >= -1e-10 * scale and np.abs(grad[x > 0]).max() <= 1e-10 * scale
    assert f <= runs[0.0][2] * (1 + 1e-10)
    assert cg <= 0.6 * runs[0.0][1]


@njit
def _rows_and_product(src, face, f, p, u, out, rows):
    """The projected Newton-CG's face rows, then its product (``out``: n entries)."""
    _face_rows(src, face, f, rows)
    _face_product(src, u, face, f, p, u, np.zeros(out.shape[0]), out, rows)


@pytest.mark.parametrize("scaled", [False, True])
def test_the_face_product_by_rows_equals_the_dense_one(scaled):
    # sparse C: the face's rows (CSR of C_F, built per round) carry the CG product; it
    # must equal C_F'(C_F p) formed densely, on a face with empty rows and repeated rows;
    # with a column scale s (the equilibration, applied as C's entries are read) that of
    # C S
    rng = np.random.default_rng(11)
    c = scipy.sparse.random(60, 90, density=0.08, format="lil", random_state=rng)
    c[30:35, :] = 0.0  # rows with no entry in any column
    c[0, :3] = 1.0  # and the first row has some
    c = scipy.sparse.csc_matrix(c)
    c.eliminate_zeros()
    face = np.sort(rng.choice(90, 50, replace=False)).astype(np.int64)
    p = rng.standard_normal(90)
    s = np.ldexp(1.0, rng.integers(-4, 5, 90)) if scaled else np.ones(90)
    src = DesignSource(c, s).src
    rows = (np.empty(61, dtype=np.int64), np.empty(c.nnz, dtype=np.int32), np.empty(c.nnz))
    out, u = np.empty(90), np.empty(60)
    _rows_and_product(src, face, 50, p, u, out, rows)
    dense = (c.toarray() * s)[:, face]
    np.testing.assert_allclose(out[:50], dense.T @ (dense @ p[:50]), rtol=1e-12, atol=1e-12)


def test_a_face_of_some_1400_free_variables_takes_the_newton_road():
    # above NEWTON_MIN_FREE (1000) at default options: the projected Newton-CG, exact by
    # the KKT conditions computed from C itself
    c = scipy.sparse.random(1500, 5000, density=0.003, format="csr", random_state=11)
    d = np.random.default_rng(11).uniform(size=1500)
    res = mg.nnls(c, d)
    x = np.asarray(res.x).ravel()
    assert np.count_nonzero(x) > design_form.NEWTON_MIN_FREE
    assert res.info.get("newton_columns") == 1 and res.converged
    grad = c.T @ (c @ x - d)
    scale = np.abs(c.T @ d).max()
    assert np.all(x >= 0.0) and grad.min() >= -1e-10 * scale
    assert np.abs(grad[x > 0]).max() <= 1e-10 * scale
