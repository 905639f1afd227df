"""The active set in the design form: A = C'C read through the columns of C (dense or
sparse), nothing n x n formed.  Checked against SciPy / scikit-learn and against the Gram
form on wide, square, tall, collinear and low-rank designs, every convex penalty."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize
import scipy.sparse
from hypothesis import given, settings
from hypothesis import strategies as st
from test_rank_deficient import PENALTIES, _f, _problem, _reference

import msm_gpu as mg
from msm_gpu._input.scaling import row_scaled_penalty
from msm_gpu.finish.design_form import (
    DESIGN_PASSES,
    GRAM_TALL_ROWS,
    GRAM_TALL_ROWS_BATCH,
    SPARSE_GRAM_MAX_N,
    choose_representation,
)
from msm_gpu.finish.faces import Faces
from msm_gpu.solvers.pwl_active_set import pwl_active_set, pwl_active_set_design


def _solve_design(c, d, penalty, sparse):
    """The design form on the column-equilibrated C, back in the user's variables."""
    s = 2.0 ** -np.round(np.log2(np.maximum(np.linalg.norm(c, axis=0), 1e-300)))
    cs = c * s
    faces = Faces(np, row_scaled_penalty(penalty, s), c.shape[1])
    y, status, _ = pwl_active_set_design(
        scipy.sparse.csc_matrix(cs) if sparse else cs, np.atleast_2d(d.T).T, faces
    )
    return y * s[:, None], status


@settings(max_examples=30, deadline=None)
@given(
    shape=st.sampled_from([(30, 80), (40, 40), (80, 25), (25, 200)]),
    kind=st.sampled_from(["gauss", "positive", "low_rank", "collinear"]),
    name=st.sampled_from(sorted(PENALTIES)),
    sparse=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_design_form_reaches_the_reference_optimum(shape, kind, name, sparse, seed):
    c, d = _problem(kind, *shape, seed)
    x, status = _solve_design(c, d, PENALTIES[name], sparse)
    assert status[0] == 1
    f = _f(c, d, x[:, 0], name)
    f_ref = _f(c, d, _reference(c, d, name), name)
    assert f <= f_ref * (1 + 1e-10) + 1e-12 * float(d @ d)


@pytest.mark.parametrize("name", sorted(PENALTIES))
def test_design_and_gram_forms_agree_column_by_column(name):
    rng = np.random.default_rng(5)
    c = rng.standard_normal((40, 25))
    d = rng.standard_normal((40, 6))
    x_design, status = _solve_design(c, d, PENALTIES[name], sparse=False)
    faces = Faces(np, PENALTIES[name], 25)
    x_gram, status_gram, _ = pwl_active_set(c.T @ c, -(c.T @ d), faces, np.zeros((25, 6)))
    assert np.all(status == 1) and np.all(status_gram == 1)
    np.testing.assert_allclose(x_design, x_gram, atol=1e-9)


def test_design_form_on_a_sparse_design_with_empty_columns():
    # a column of zeros has no curvature: it never joins, and stays at its start
    rng = np.random.default_rng(2)
    c = scipy.sparse.random(60, 400, density=0.02, random_state=3, format="csc")
    d = rng.standard_normal(60)
    faces = Faces(np, PENALTIES["nonneg"], 400)
    x, status, _ = pwl_active_set_design(c, d[:, None], faces)
    empty = np.diff(c.indptr) == 0
    assert status[0] == 1 and empty.any() and np.all(x[empty, 0] == 0)
    dense = c.toarray()
    f_ref = _f(dense, d, _reference(dense, d, "nonneg"), "nonneg")
    assert _f(dense, d, x[:, 0], "nonneg") <= f_ref * (1 + 1e-10) + 1e-12 * float(d @ d)


# -- behind mg.least_squares: the choice of form ------------------------------------------


def test_the_choice_rule():
    ok = None  # the design form applies
    assert choose_representation("auto", (100, 1000), False, 50, ok) == "design"  # wide
    assert choose_representation("auto", (500, 100), False, 1000, ok) == "gram"  # tall, many r
    assert choose_representation("auto", (700, 100), False, 1, ok) == "design"  # one r
    few = 100 // DESIGN_PASSES
    assert choose_representation("auto", (700, 100), False, few + 1, ok) == "gram"
    # a dense C at least GRAM_TALL_ROWS times taller than wide: the Gram form for any r,
    # a sparse one by the passes' count
    tall = GRAM_TALL_ROWS * 100
    assert choose_representation("auto", (tall, 100), False, 1, ok) == "gram"
    assert choose_representation("auto", (tall - 1, 100), False, 1, ok) == "design"
    assert choose_representation("auto", (tall, 100), True, 1, ok) == "design"
    assert choose_representation("design", (tall, 100), False, 1, ok) == "design"
    batch = GRAM_TALL_ROWS_BATCH * 100  # two right-hand sides or more: from this ratio
    assert choose_representation("auto", (batch, 100), False, 2, ok) == "gram"
    assert choose_representation("auto", (batch - 1, 100), False, 2, ok) == "design"
    assert choose_representation("auto", (batch, 100), False, 1, ok) == "design"
    sparse_n = SPARSE_GRAM_MAX_N + 1
    assert choose_representation("auto", (10 * sparse_n, sparse_n), True, 10**4, ok) == "design"
    assert choose_representation("auto", (100, 1000), False, 1, "no") == "gram"
    assert choose_representation("gram", (100, 1000), False, 1, ok) == "gram"
    with pytest.raises(ValueError, match="representation='design': no"):
        choose_representation("design", (10, 5), False, 1, "no")
    with pytest.raises(ValueError, match="representation must be one of"):
        choose_representation("dual", (10, 5), False, 1, ok)


@pytest.mark.parametrize("penalty", [mg.NonNeg(), mg.Box(-0.3, 0.3)])
def test_a_tall_dense_design_with_one_column_takes_the_gram_form(rng, penalty):
    c = rng.normal(size=(GRAM_TALL_ROWS * 150, 150))
    d = c @ (rng.normal(size=150) * (rng.uniform(size=150) < 0.3)) + rng.normal(size=c.shape[0])
    auto = mg.least_squares(c, d, penalty)
    design = mg.least_squares(c, d, penalty, representation="design")
    assert auto.info["representation"] == "gram"
    assert design.info["representation"] == "design"
    assert auto.converged and design.converged
    assert auto.fun <= design.fun * (1 + 1e-12)
    if isinstance(penalty, mg.NonNeg):  # SciPy's NNLS (QR on C) as the independent answer
        ref = scipy.optimize.nnls(c, d)[0]
        assert auto.fun <= 0.5 * np.sum((c @ ref - d) ** 2) * (1 + 1e-12)


@pytest.mark.parametrize(
    "options",
    [
        {"callback": lambda info: None},
        {"verbose": True},
        {"method": "apg"},
        {"finish": None, "time_limit": 10.0},
    ],
)
def test_design_refused_where_it_does_not_apply(options):
    c, d = np.eye(3), np.ones(3)
    with pytest.raises(ValueError, match="representation='design'"):
        mg.nnls(c, d, representation="design", **options)


@pytest.mark.parametrize(
    "penalty, options",
    [(mg.NonNeg(), {"finish": None}), (mg.NonNeg(), {"tol": 0.0}), (mg.L0(0.1), {})],
)
def test_design_runs_plain_msm_where_there_is_no_exact_finish(penalty, options):
    c, d = np.eye(3), np.ones(3)
    res = mg.least_squares(c, d, penalty, representation="design", **options)
    assert res.info["representation"] == "design" and res.n_iter >= 1
    assert choose_representation("auto", (5000, 100), False, 1, None, exact=False) == "gram"


@pytest.mark.parametrize("name", sorted(PENALTIES))
@pytest.mark.parametrize("shape", [(40, 120), (120, 40)])
def test_both_forms_give_the_same_answer_through_the_api(name, shape):
    c, d = _problem("gauss", *shape, 11)
    d2 = np.column_stack([d, -0.5 * d + 0.1])
    design = mg.least_squares(c, d2, PENALTIES[name], representation="design")
    gram = mg.least_squares(c, d2, PENALTIES[name], representation="gram")
    assert design.info["representation"] == "design" and gram.info["representation"] == "gram"
    assert design.converged and gram.converged
    assert design.fun <= gram.fun * (1 + 1e-12) + 1e-12
    assert design.fun == pytest.approx(gram.fun, rel=1e-10, abs=1e-12 * float(np.sum(d2**2)))
    f = sum(_f(c, d2[:, k], design.x[:, k], name) for k in range(2))
    assert design.fun == pytest.approx(f, rel=1e-12, abs=1e-28 * float(np.sum(d2**2)))
    if shape[0] > shape[1]:  # unique answer on a tall Gaussian design
        np.testing.assert_allclose(design.x, gram.x, atol=1e-8)


def test_float32_and_one_problem_through_the_design_form():
    c, d = _problem("positive", 30, 90, 4)
    res = mg.nnls(c.astype(np.float32), d.astype(np.float32))
    assert res.info["representation"] == "design" and res.x.dtype == np.float32
    assert res.x.shape == (90,) and res.converged
    f = _f(c.astype(np.float32).astype(float), d.astype(np.float32).astype(float), res.x, "nonneg")
    assert res.fun == pytest.approx(f, rel=1e-12, abs=1e-20)


def test_a_sparse_design_with_1e5_columns_runs_in_bounded_memory():
    # its Gram matrix would be a dense 1e5 x 1e5 array (80 GB): refused before
    import tracemalloc

    m, n = 2000, 100_000
    c = scipy.sparse.random(m, n, density=1e-3, random_state=0, format="csc")
    d = c[:, :20] @ np.ones(20) + 0.01 * np.random.default_rng(0).standard_normal(m)
    mg.nnls(c[:, :50], d)  # compile outside the measurement
    tracemalloc.start()
    res = mg.nnls(c, d)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert res.info["representation"] == "design" and res.converged
    # O(nnz + m + n) per column, far from n^2 (the CSC copy: 12 bytes per nonzero)
    assert peak < 40 * (c.nnz * 12 + 8 * (m + n))
    lasso = mg.least_squares(c, d, mg.L1(0.05 * np.abs(c.T @ d).max()))
    assert lasso.converged and np.count_nonzero(lasso.x) < m


def test_column_norms_from_the_input_checks_pass():
    # the checks' pass over a C-ordered C also sums its columns' squares: the design form's
    # ||c_j||^2 of the rescaled C without another pass; not where C's scale is extreme
    # (a square of the unscaled C could under- or overflow) or C is not C-ordered
    from msm_gpu._input.problem import prepare_design

    rng = np.random.default_rng(5)
    c = rng.normal(size=(60, 90))
    d = rng.normal(size=60)
    for scale, layout, found in (
        (1.0, "C", True),
        (1e3, "C", True),
        (1e200, "C", False),
        (1e-200, "C", False),
        (1.0, "F", False),
    ):
        cs = np.asarray(c * scale, order=layout)
        design = prepare_design(cs, d, mg.L1(0.1), None, "cpu").design
        scaled = np.asarray(design.c, dtype=np.float64)
        if found:
            np.testing.assert_allclose(design.c_norms, np.sum(scaled * scaled, axis=0), rtol=1e-14)
        else:
            assert design.c_norms is None
        res = mg.least_squares(cs, d, mg.L1(0.1 * scale), representation="design")
        ref = mg.least_squares(c, d, mg.L1(0.1), representation="gram")
        np.testing.assert_allclose(res.x * scale, ref.x, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("penalty", [mg.NonNeg(), mg.L1(0.3), mg.Box(-0.5, 0.2)], ids=repr)
def test_end_of_run_products_on_a_sparse_c_match_the_gram_form(penalty):
    # F and the KKT residual the design form reports, from C x over x's nonzero rows and
    # C'[C x, d] in one pass over a CSC C: against A = C'C formed densely (objective.py)
    from msm_gpu.finish.design_form import _kkt_design, _objective_and_kkt
    from msm_gpu.finish.objective import kkt_residual

    rng = np.random.default_rng(7)
    c = scipy.sparse.random(70, 120, density=0.05, format="csc", random_state=3)
    c.data = rng.standard_normal(c.nnz)
    d = rng.standard_normal((70, 4))
    x = np.clip(rng.standard_normal((120, 4)), -0.5, 0.2)
    x[rng.uniform(size=x.shape) < 0.7] = 0.0  # sparse, and one column all zero
    x[:, 2] = 0.0
    dense = c.toarray()
    norms = np.sum(dense * dense, axis=0)
    a, r = dense.T @ dense, -dense.T @ d
    f, kkt = _objective_and_kkt(c, d, norms, x, penalty, np.array([0, 2, 3]))
    res = dense @ x - d
    f_ref = 0.5 * np.sum(res * res, axis=0) + np.sum(penalty.value(x), axis=0)
    kkt_ref = kkt_residual(a, r, x, penalty)
    np.testing.assert_allclose(f, f_ref, rtol=1e-13)
    np.testing.assert_allclose(kkt, kkt_ref[[0, 2, 3]], rtol=1e-10)
    np.testing.assert_allclose(_kkt_design(c, d, norms, x, penalty), kkt_ref, rtol=1e-10)
    np.testing.assert_allclose(_kkt_design(dense, d, norms, x, penalty), kkt_ref, rtol=1e-10)


def test_objective_blocks_give_the_same_f(monkeypatch):
    # F from the residual is formed a block of D's columns at a time: cache-sized blocks
    # where C is small, memory-bounded ones otherwise; the block size changes nothing
    from msm_gpu._input import design as design_module

    assert design_module._block_columns(200, 20) == design_module.CACHE_BLOCK_ENTRIES // 200
    assert design_module._block_columns(10_000, 100) == design_module.BLOCK_ENTRIES // 10_000
    rng = np.random.default_rng(0)
    c, d = rng.random((50, 10)), rng.random((50, 300))
    ref = mg.nnls(c, d)
    monkeypatch.setattr(design_module, "CACHE_BLOCK_ENTRIES", 50 * 10)  # 10 columns a block
    res = mg.nnls(c, d)
    np.testing.assert_array_equal(res.x, ref.x)
    assert res.fun == pytest.approx(ref.fun, rel=1e-14)
    f = 0.5 * np.sum((c @ res.x - d) ** 2)
    assert res.fun == pytest.approx(f, rel=1e-12)


@pytest.mark.parametrize("nonzeros", [3, 80])
def test_kkt_from_one_pass_over_c_is_blas_s(nonzeros):
    # one right-hand side: C x from the columns where x is nonzero, and C'(C x), C'd in
    # one pass over an F-ordered C; the same numbers (to rounding) as the BLAS products
    # of a C-ordered C
    from msm_gpu.finish import design_form as df

    rng = np.random.default_rng(5)
    c = rng.standard_normal((50, 80))
    d = rng.standard_normal((50, 1))
    x = np.zeros((80, 1))
    x[rng.choice(80, nonzeros, replace=False), 0] = rng.uniform(0.5, 2.0, nonzeros)
    norms = np.einsum("ij,ij->j", c, c)
    cf, cc = np.asfortranarray(c), np.ascontiguousarray(c)
    np.testing.assert_allclose(df._times(cf, x), c @ x, rtol=1e-13, atol=1e-13)
    for penalty in (mg.NonNeg(), mg.L1(0.3)):
        one_pass = df._kkt_design(cf, d, norms, x, penalty)
        blas = df._kkt_design(cc, d, norms, x, penalty)
        g = c.T @ (c @ x - d)  # the residual from its definition: nonzero at this x
        assert one_pass[0] > 1e-3 and np.all(np.isfinite(g))
        np.testing.assert_allclose(one_pass, blas, rtol=1e-12)


@pytest.mark.parametrize(
    "penalty", [mg.NonNeg(), mg.L1(0.3), mg.Box(-1.0, 2.0), mg.NonNegL1(0.5), mg.Box(0.5, 0.5)]
)
def test_faces_of_a_scalar_penalty_built_once_are_each_faces_own(penalty):
    # scalar bounds and weight: the one-row tables are kept between calls; each Faces
    # gets the tables a per-row build gives, in arrays of its own
    from msm_gpu.finish.faces import Faces, _row_tables

    n = 7
    lam = getattr(penalty, "lam", 0.0)
    per_row = _row_tables(*(np.full(n, float(v)) for v in (penalty.lb, penalty.ub, lam)))
    first, second = Faces(np, penalty, n), Faces(np, penalty, n)
    assert first.stacked.shape[1] == 1  # one row for all
    np.testing.assert_array_equal(np.broadcast_to(first.stacked, per_row[2].shape), per_row[2])
    np.testing.assert_array_equal(first.pts, per_row[0][:1, :3])
    assert not np.shares_memory(first.stacked, second.stacked)
    first.stacked[...] = np.nan
    assert not np.any(np.isnan(second.stacked))
    np.testing.assert_array_equal(Faces(np, penalty, n).stacked, second.stacked)


@pytest.mark.parametrize("name", ["nonneg", "l1", "box"])
@pytest.mark.parametrize("duplicated", [False, True])
def test_a_start_with_many_free_variables_factorised_from_one_product(name, duplicated):
    # a dense design-form column starting with >= START_GEMM_MIN free variables takes
    # their products from one BLAS product; with duplicated columns among them some rows
    # of the factor are refused (the pivot test) exactly as when built one at a time.
    # Same optimum as SciPy / scikit-learn and the Gram form, from starts that free
    # 40-120 variables
    from msm_gpu.solvers.pwl_active_set import START_GEMM_MIN

    rng = np.random.default_rng(11)
    m, n = 300, 120
    c = rng.standard_normal((m, n))
    if duplicated:
        c[:, 60:70] = c[:, 0:10]  # exactly dependent columns inside the start's free set
        c[:, 70:72] = 2.0 * c[:, 10:12]
    d = rng.standard_normal(m)
    penalty = PENALTIES[name]
    faces = Faces(np, penalty, n)
    f_ref = _f(c, d, _reference(c, d, name), name)
    for free in (START_GEMM_MIN + 8, 80, n):
        x0 = np.zeros((n, 1))
        x0[rng.choice(n, free, replace=False), 0] = rng.uniform(0.01, 0.3, free)
        x, status, _ = pwl_active_set_design(c, d[:, None], faces, x0)
        assert status[0] == 1
        assert _f(c, d, x[:, 0], name) <= f_ref * (1 + 1e-10) + 1e-12 * float(d @ d)
        if not duplicated:  # unique optimum
            x_gram, _, _ = pwl_active_set(c.T @ c, -(c.T @ d)[:, None], faces, np.zeros((n, 1)))
            np.testing.assert_allclose(x, x_gram, atol=1e-9)


def _tall_lasso(m, n, planted, seed, positive=False):
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((m, n))
    if planted:  # ten nonzeros, 10 % noise: the answer holds about ten variables
        x = np.zeros(n)
        x[rng.choice(n, 10, replace=False)] = rng.uniform(1, 2, 10)
        d = c @ x + 0.1 * rng.standard_normal(m) * np.linalg.norm(c @ x) / np.sqrt(m)
    elif positive:  # a positive combination of every column: most variables positive
        d = c @ rng.uniform(0.0, 1.0, n) + rng.standard_normal(m)
    else:  # a random d: the answer holds most variables
        d = rng.standard_normal(m)
    lam = 0.05 * float(np.abs(c.T @ d).max())
    return c, d, (mg.NonNegL1(lam) if positive else mg.L1(lam))


@pytest.mark.parametrize("positive", [False, True])
def test_a_tall_lasso_whose_answer_holds_most_variables_goes_to_the_gram_form(positive):
    """One sweep from 0 frees most variables of a tall C: the Gram form takes the call
    (C'C by BLAS), and its answer is the design form's and scikit-learn's."""
    from sklearn.linear_model import Lasso

    c, d, penalty = _tall_lasso(900, 250, planted=False, seed=3, positive=positive)
    # a keyword: the general road (at default options the working sets take this call,
    # all 250 columns at once: tests/test_working_set.py)
    res = mg.least_squares(c, d, penalty, finish="auto")
    assert res.info["representation"] == "gram" and "design_probe" in res.info
    assert np.count_nonzero(res.x) > 0.6 * 250
    forced = mg.least_squares(c, d, penalty, representation="design")
    assert forced.info["representation"] == "design" and "design_probe" not in forced.info
    ref = Lasso(alpha=penalty.lam / 900, fit_intercept=False, tol=1e-14, max_iter=100_000,
                positive=positive).fit(c, d).coef_  # fmt: skip
    f = [_lasso_f(c, d, x, penalty.lam) for x in (res.x, forced.x, ref)]
    assert f[0] <= min(f) * (1 + 1e-12)
    assert bool(res.converged)


def _lasso_f(c, d, x, lam):
    r = c @ x - d
    return 0.5 * float(r @ r) + lam * float(np.abs(x).sum())


def test_a_tall_lasso_with_a_sparse_answer_stays_in_the_design_form():
    c, d, penalty = _tall_lasso(900, 250, planted=True, seed=4)
    # a keyword: the general road (at default options the working sets take this call)
    res = mg.least_squares(c, d, penalty, finish="auto")
    assert res.info["representation"] == "design" and "design_probe" not in res.info
    assert np.count_nonzero(res.x) < 40


def test_no_probe_from_a_warm_start_nor_below_its_size():
    c, d, penalty = _tall_lasso(900, 250, planted=False, seed=3)
    warm = mg.least_squares(c, d, penalty, x0=np.zeros(250))
    assert warm.info["representation"] == "design" and "design_probe" not in warm.info
    small = mg.least_squares(*_tall_lasso(900, 150, planted=False, seed=3), finish="auto")
    assert small.info["representation"] == "design" and "design_probe" not in small.info
    cold = mg.least_squares(c, d, penalty)
    assert cold.fun == pytest.approx(warm.fun, rel=1e-12)


@pytest.mark.parametrize("fmt", ["csc", "csr"])
@pytest.mark.parametrize(
    "penalty", [mg.NonNeg(), mg.L1(0.1), mg.Box(-1.0, 1.0), mg.NonNegL1(0.1)], ids=repr
)
def test_a_sparse_c_with_no_entry_gives_zero_not_an_error(fmt, penalty):
    # every column empty: F = 1/2 ||d||^2 whatever x is, and x = 0 is the answer a
    # user expects (the smallest; the only one for l1); it divided by nnz(C) = 0 before
    c = scipy.sparse.csc_matrix((40, 120)).asformat(fmt)
    d = np.random.default_rng(0).uniform(size=(40, 2))
    res = mg.least_squares(c, d, penalty)
    assert res.converged and np.all(np.asarray(res.x) == 0.0)
    assert res.fun == pytest.approx(0.5 * np.sum(d * d), rel=1e-15)
