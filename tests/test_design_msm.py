"""MSM sweeps in the design form (eq. (9) read through the columns of C) and the road that
uses them: sweeps find the support, the active set factorises only its free variables, and
where those are too many to factorise the sweeps finish alone under the KKT test.

Truth: SciPy's nnls / lsq_linear and scikit-learn's Lasso on small problems, the KKT
conditions of the convex problem (a certificate of optimality) on larger ones, and the
active set from zero (itself checked against SciPy in test_design_form.py)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize
import scipy.sparse
from test_rank_deficient import PENALTIES, _f, _problem, _reference

import msm_gpu as mg
from msm_gpu.solvers.design_msm import FACTOR_IN_SWEEPS, WARM_SWEEPS, design_sweeps
from msm_gpu.solvers.pwl_active_set import DesignSource


def _sweep_to(c, d, penalty, tol, sparse=False):
    n = c.shape[1]
    source = DesignSource(scipy.sparse.csc_matrix(c) if sparse else c)
    x = np.zeros((n, 1))
    diag = np.einsum("ij,ij->j", c, c)
    out = design_sweeps(source, d[:, None], x, diag, diag, penalty, tol, warm=5000)
    return x[:, 0], out.n_iter[0]


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("name", sorted(PENALTIES))
def test_sweeps_alone_converge_to_the_reference_optimum(name, sparse):
    # omega = 1, theta = 0: cyclic coordinate descent, convergent for convex h (Theorem 1)
    c, d = _problem("gauss", 80, 25, 3)
    x, sweeps = _sweep_to(c, d, PENALTIES[name], 1e-14, sparse)
    f, f_ref = _f(c, d, x, name), _f(c, d, _reference(c, d, name), name)
    assert 0 < sweeps < 1000
    assert abs(f - f_ref) <= 1e-10 * f_ref


def test_a_sweep_never_increases_f():
    # Theorem 1: F(x_{k+1}) <= F(x_k) - delta / 2 ||x_{k+1} - x_k||^2; tol = 0 runs the cap
    c, d = _problem("collinear", 30, 80, 1)
    penalty = mg.L1(2.0)
    values = []
    x = np.zeros((80, 1))
    source = DesignSource(c)
    diag = np.einsum("ij,ij->j", c, c)
    for _ in range(12):  # one warm-up pass each call: F after each group of sweeps
        design_sweeps(source, d[:, None], x, diag, diag, penalty, 0.0)
        values.append(_f(c, d, x[:, 0], "l1"))
    assert np.all(np.diff(values) <= 1e-12 * values[0])
    assert values[-1] < values[0]


def test_the_user_arrays_are_untouched_and_the_start_is_used():
    c, d = _problem("positive", 40, 120, 2)
    c0, d0 = c.copy(), d.copy()
    # a keyword given (its default value): the general road, not the small one
    res = mg.least_squares(c, d, mg.NonNeg(), finish="auto")
    assert np.array_equal(c, c0) and np.array_equal(d, d0)
    warm = mg.nnls(c, d, x0=res.x)
    assert warm.n_iter <= res.n_iter and warm.fun <= res.fun * (1 + 1e-12) + 1e-300


def _sparse_nnls(m, n, density, seed):
    rng = np.random.default_rng(seed)
    c = scipy.sparse.random(
        m, n, density=density, format="csc", random_state=rng, data_rvs=rng.standard_normal
    )
    c.data = np.abs(c.data)
    x = np.zeros(n)
    x[rng.choice(n, 10, replace=False)] = 1.0
    return c, c @ x + 0.1 * rng.standard_normal(m)


def test_a_large_support_is_finished_by_sweeps_and_is_optimal():
    # ~m/3 free variables at the answer: factorising them costs more than FACTOR_IN_SWEEPS
    # sweeps, and with ~10 entries a column coordinate descent converges fast, so the
    # sweeps finish alone (the shape of 1e4 x 1e5, which did not finish in 900 s before)
    c, d = _sparse_nnls(3000, 30_000, 1e-2 / 3, 0)
    res = mg.nnls(c, d)
    assert res.converged and res.info["representation"] == "design"
    support = res.x > 0
    assert min(support.sum(), 3000) ** 3 / 3 > FACTOR_IN_SWEEPS * 2 * c.nnz  # the regime
    assert res.info["finish_columns"] == 0 and res.n_iter > 0
    # no finish follows them, so the sweeps go on to rounding (ALONE_TOL), not to the
    # user's tol: a KKT residual of 1e-7 left F 1.5e-11 above the optimum here
    assert res.info["kkt_residual"].max() <= 1e-12
    # the exact optimum on that support (least squares, dense: 3000 x |S|) is positive and
    # no variable outside it has a negative gradient there: then it is the NNLS optimum
    cs = c[:, support].toarray()
    x_exact = np.zeros(c.shape[1])
    x_exact[support] = np.linalg.lstsq(cs, d, rcond=None)[0]
    assert x_exact.min() >= 0
    g = c.T @ (c @ x_exact - d)
    scale = np.sqrt(np.asarray(c.multiply(c).sum(0)).ravel()) * np.linalg.norm(d)
    assert np.all(g >= -1e-9 * scale)
    f, f_exact = (0.5 * float(np.sum((c @ v - d) ** 2)) for v in (res.x, x_exact))
    assert f - f_exact <= 1e-13 * f_exact


def test_a_small_support_still_ends_in_the_active_set():
    # wide dense NNLS: at most m free variables, a cheap factor: exact to rounding
    rng = np.random.default_rng(4)
    c = np.abs(rng.standard_normal((60, 3000)))
    d = c[:, :8] @ rng.uniform(1, 2, 8) + 0.1 * rng.standard_normal(60)
    res = mg.nnls(c, d)
    assert res.info["finish_columns"] == 1 and res.n_iter > 0
    x_ref = scipy.optimize.nnls(c, d, maxiter=100_000)[0]
    f, f_ref = _f(c, d, res.x, "nonneg"), _f(c, d, x_ref, "nonneg")
    assert f <= f_ref * (1 + 1e-12) + 1e-14 * float(d @ d)


@pytest.mark.parametrize("omega, theta", [(1.0, 0.0), (1.5, 0.1), (0.5, 1.0)])
def test_omega_and_theta_reach_the_same_optimum(omega, theta):
    c, d = _problem("positive", 30, 400, 6)
    res = mg.least_squares(c, d, mg.NonNegL1(5.0), omega=omega, theta=theta)
    f_ref = _f(c, d, _reference(c, d, "nonneg_l1"), "nonneg_l1")
    assert res.converged
    assert _f(c, d, res.x, "nonneg_l1") <= f_ref * (1 + 1e-10)


# -- the paper's plain MSM in the design form: finish=None, tol=0, L0 and Lp ----------------

PLAIN = {
    "nonneg": (mg.NonNeg(), {"finish": None}),
    "box": (mg.Box(-1.0, 1.0), {"finish": None}),
    "l1": (mg.L1(1.0), {"finish": None}),
    "nonneg_l1": (mg.NonNegL1(1.0), {"finish": None}),
    "zero": (mg.Zero(), {"finish": None}),
    "l0": (mg.L0(0.5), {"finish": None}),
    "lp_half": (mg.Lp(0.5, p=0.5), {"finish": None}),
    "lp_two_thirds": (mg.Lp(0.5, p=2 / 3), {"finish": None}),
    "nonneg_tol0": (mg.NonNeg(), {"tol": 0.0, "max_iter": 40}),
}


def _wide(seed=1, m=60, n=400):
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((m, n))
    return c, c[:, :5] @ np.ones(5) + 0.01 * rng.standard_normal(m)


@pytest.mark.parametrize("name", sorted(PLAIN))
def test_plain_msm_takes_the_same_iterations_in_both_forms(name):
    # the same sweep (eq. (9)) read from C or from C'C: the same iterates to rounding
    penalty, kw = PLAIN[name]
    c, d = _wide()
    design = mg.least_squares(c, d, penalty, **kw)
    gram = mg.least_squares(c, d, penalty, representation="gram", **kw)
    assert design.info["representation"] == "design"
    assert design.n_iter == gram.n_iter and design.converged == gram.converged
    np.testing.assert_allclose(design.x, gram.x, rtol=1e-7, atol=1e-9 * np.abs(gram.x).max())
    assert design.fun == pytest.approx(gram.fun, rel=1e-9, abs=1e-12)
    # the history: F at the start, after each sweep (monotone, Theorem 1), F at the end
    assert design.objective.size == design.n_iter + 1
    assert design.objective[-1] == design.fun
    assert np.all(np.diff(design.objective) <= 1e-10 * design.objective[0])
    if kw.get("tol") == 0.0:
        assert design.n_iter == kw["max_iter"] and not design.converged


@pytest.mark.parametrize("penalty", [mg.L0(0.5), mg.Lp(0.5, p=0.5)], ids=["l0", "lp"])
def test_l0_and_lp_on_a_wide_design_run_without_the_gram_matrix(penalty):
    # MSM, then the support polish (least squares on the support, one sweep, kept if F
    # falls): never above plain MSM, and here the planted support is found
    c, d = _wide(2, 50, 3000)
    res = mg.least_squares(c, d, penalty)
    plain = mg.least_squares(c, d, penalty, finish=None)
    assert res.info["representation"] == "design"
    assert res.info["finish_method"] == "support_polish"
    assert res.fun <= plain.fun * (1 + 1e-12)
    assert set(np.flatnonzero(res.x)) == set(range(5))
    if penalty.code == mg.L0(1.0).code:  # on a fixed support, L0's optimum is least squares
        x_ls = np.linalg.lstsq(c[:, :5], d, rcond=None)[0]
        np.testing.assert_allclose(res.x[:5], x_ls, rtol=1e-10)


def test_the_design_form_is_refused_where_the_gram_loop_is_needed():
    c, d = _wide()
    seen = []
    res = mg.least_squares(c, d, mg.L0(0.5), callback=lambda *a: seen.append(1))
    assert res.info["representation"] == "gram" and seen
    res = mg.least_squares(c, d, mg.L1(1.0), finish=None, time_limit=60.0)
    assert res.info["representation"] == "gram"
    with pytest.raises(ValueError, match="representation='design'.*time_limit"):
        mg.least_squares(c, d, mg.L0(0.5), representation="design", time_limit=60.0)
    # a tall C with one right-hand side: plain MSM sweeps a Gram matrix n / m the size
    rng = np.random.default_rng(0)
    tall = rng.standard_normal((500, 40))
    res = mg.least_squares(tall, tall @ np.ones(40), mg.L0(0.1))
    assert res.info["representation"] == "gram"


def test_plain_msm_in_the_design_form_on_a_sparse_c():
    c, d = _sparse_nnls(3000, 30_000, 1e-2 / 3, 3)
    res = mg.nnls(c, d, finish=None, tol=1e-10)
    exact = mg.nnls(c, d)
    assert res.info["representation"] == "design" and res.converged
    assert res.fun <= exact.fun * (1 + 1e-8)


def test_the_working_set_holds_the_nonzeros_and_the_worst_rows():
    from msm_gpu.solvers.design_msm import WS_BINS, _working_set

    rng = np.random.default_rng(0)
    x = np.zeros(1000)
    x[[3, 500, 999]] = [1.0, -2.0, 0.5]
    scores = rng.uniform(0.0, 1.0, 1000) ** 4  # a spread over many octaves
    scores[[3, 500]] = 0.0
    rows = np.empty(1000, dtype=np.int64)
    k = _working_set(x, scores, 53, rows, np.zeros(WS_BINS, dtype=np.int64))
    chosen = rows[:k]
    assert np.all(np.diff(chosen) > 0)  # in increasing order: the sweep's order
    assert {3, 500, 999} <= set(chosen)
    others = np.setdiff1d(np.arange(1000), [3, 500, 999])
    worst = others[np.argsort(-scores[others])[:50]]
    assert set(worst) <= set(chosen)  # the 50 largest violations, and
    # and no row far below them: the threshold is the edge of the 50th's quarter-octave bin
    extra = np.setdiff1d(chosen, [3, 500, 999])
    assert scores[extra].min() >= scores[worst].min() * 2**-0.25
    # fewer candidates than the size: all of them; no room: the nonzeros alone
    k_all = _working_set(x, scores, 5000, rows, np.zeros(WS_BINS, dtype=np.int64))
    assert k_all == np.count_nonzero((x != 0) | (scores > 0))
    assert _working_set(x, scores, 2, rows, np.zeros(WS_BINS, dtype=np.int64)) == 3


def test_the_face_tables_reach_the_active_set_in_its_order():
    from msm_gpu.finish.faces import TABLE_NAMES, Faces
    from msm_gpu.solvers.pwl_active_set import TABLES, _tables

    assert TABLE_NAMES == TABLES
    from msm_gpu._input.scaling import row_scaled_penalty

    # per-row tables (the row scaling makes lam differ by row), and the same faces from
    # the tables of h and a row scale
    s = 2.0 ** np.arange(-3, 4)
    for faces in (Faces(np, row_scaled_penalty(mg.L1(1.0), s), 7), Faces(np, mg.L1(1.0), 7, s)):
        assert not faces.uniform
        T, S = _tables(faces)
        for k, name in enumerate(TABLES):
            factor = S[0] if k < 3 else S[1]
            np.testing.assert_array_equal(T[k] * factor[:, None], faces.tables[name])


@pytest.mark.parametrize(
    "penalty",
    [
        mg.L1(0.5),
        mg.NonNeg(),
        mg.Box(-1.0, 2.0),
        mg.NonNegL1(0.3),
        mg.Zero(),
        mg.Box(0.0, 1.0),
        mg.Box(-2.0, 0.0),
        mg.Box(1.0, 1.0),
        mg.Box(-np.linspace(0.1, 1.0, 7), np.linspace(0.2, 2.0, 7)),
    ],
)
@pytest.mark.parametrize("scaled", [False, True])
def test_the_compiled_start_states_are_the_faces_states(penalty, scaled):
    # the active sets' start reads the states from the tables in one compiled pass; they
    # must be Faces.states on every penalty, at every point of a row, between and beyond
    # them, and at NaN and +-inf
    from msm_gpu.finish.faces import Faces
    from msm_gpu.solvers.pwl_active_set import _start, _tables

    rng = np.random.default_rng(9)
    n = 7
    faces = Faces(np, penalty, n, row_scale=2.0 ** rng.integers(-3, 4, n) if scaled else None)
    pts = np.broadcast_to(np.asarray(faces.pts), (n, 3))
    x = rng.standard_normal((n, 6)) * 2.0
    x[:, 0], x[:, 1], x[:, 2] = pts[:, 0], pts[:, 1], 0.0
    x[0, 3], x[1, 3], x[2, 3] = np.nan, np.inf, -np.inf
    tab = _tables(faces)
    X, Q = _start(faces, tab, x, x.shape)
    np.testing.assert_array_equal(X, faces.project(x))
    np.testing.assert_array_equal(Q, faces.states(X))


@pytest.mark.parametrize(
    "penalty",
    [mg.NonNeg(), mg.L1(0.7), mg.NonNegL1(0.3), mg.Box(-1.0, 2.0), mg.Box(0.5, np.inf)],
)
def test_a_row_scale_gives_the_faces_of_the_row_scaled_penalty(penalty):
    from msm_gpu._input.scaling import row_scaled_penalty
    from msm_gpu.finish.faces import Faces

    rng = np.random.default_rng(5)
    n = 9
    s = 2.0 ** rng.integers(-6, 7, n)
    scaled, direct = (
        Faces(np, penalty, n, row_scale=s),
        Faces(np, row_scaled_penalty(penalty, s), n),
    )
    assert scaled.stacked.shape[1] == 1  # the tables of h: one row, whatever n
    for name in ("lo", "hi", "value", "sigma", "left", "right", "free"):
        np.testing.assert_array_equal(
            np.broadcast_to(scaled.tables[name], (n, 5)),
            np.broadcast_to(direct.tables[name], (n, 5)),
        )
    y = rng.standard_normal((n, 4)) * 3.0
    y[::3] = 0.0
    y = direct.project(y)
    np.testing.assert_array_equal(scaled.project(y), y)
    np.testing.assert_array_equal(scaled.states(y), direct.states(y))


def test_time_limit_bounds_the_design_forms_sweeps_and_skips_the_finish():
    # as in the Gram form: time_limit applies to the sweeps, and no finish follows a stop
    rng = np.random.default_rng(4)
    c = np.abs(rng.standard_normal((60, 3000)))
    d = c[:, :8] @ rng.uniform(1, 2, 8) + 0.1 * rng.standard_normal(60)
    free = mg.nnls(c, d)
    assert free.info["finish_columns"] == 1 and not free.message.startswith("reached")
    res = mg.nnls(c, d, time_limit=1e-9)
    assert res.info["representation"] == "design"
    assert res.message.startswith("reached time_limit")
    assert res.info["finish_columns"] == 0
    assert res.converged == bool(np.all(res.info["kkt_residual"] <= 1e-6))
    assert np.all(res.x >= 0) and np.isfinite(res.fun)
    assert free.fun <= res.fun * (1 + 1e-12)


def test_sparse_index_arrays_of_either_width_give_the_same_answer():
    # the design source reads SciPy's own index arrays (int32 below 2^31 entries); int64
    # ones (a large matrix, or built so) take the same road
    c, d = _sparse_nnls(300, 3000, 0.02, 6)
    wide = c.copy()
    wide.indptr, wide.indices = wide.indptr.astype(np.int64), wide.indices.astype(np.int64)
    assert c.indices.dtype == np.int32
    a, b = mg.nnls(c, d), mg.nnls(wide, d)
    assert a.info["representation"] == b.info["representation"] == "design"
    np.testing.assert_array_equal(a.x, b.x)


def test_a_large_face_that_meets_tol_early_still_goes_on_to_rounding():
    # near-orthogonal columns (I plus a few small entries): the full sweeps meet the
    # user's tol within the first few, before the face-size check at sweep WARM_SWEEPS;
    # every variable is free and the face costs more than FACTOR_IN_SWEEPS sweeps, so no
    # active set follows: the sweeps must still go on to rounding (they stopped at a
    # KKT residual of 1.4e-8, x off by 2e-7, before)
    rng = np.random.default_rng(3)
    n = 60
    off = scipy.sparse.random(n, n, density=1.0 / n, random_state=2, format="csc")
    off.data = 0.05 * rng.uniform(-1, 1, off.nnz)
    c = (scipy.sparse.identity(n, format="csc") + off).tocsc()
    x_true = rng.uniform(1, 2, n)
    res = mg.nnls(c, c @ x_true, representation="design")
    assert n**3 / 3 > FACTOR_IN_SWEEPS * 2 * c.nnz and res.n_iter < WARM_SWEEPS  # the regime
    assert res.info["finish_columns"] == 0
    assert res.info["kkt_residual"].max() <= 1e-12
    np.testing.assert_allclose(res.x, x_true, rtol=1e-12)  # C x = d has this positive root


def test_free_counts_per_column_and_none_for_no_column():
    # the free variables of each column (x strictly inside a piece of h); no column: an
    # empty count, without building the n x 4 table
    from msm_gpu.solvers.design_msm import free_counts

    x = np.array([[0.0, 1.0, -2.0], [2.0, 0.0, 0.0], [0.0, 0.0, 3.0]])
    np.testing.assert_array_equal(free_counts(x, mg.L1(0.1)), [1, 1, 2])
    np.testing.assert_array_equal(free_counts(np.abs(x), mg.NonNeg()), [1, 1, 2])
    box = mg.Box(0.0, 1.0)  # x = 1 sits on the upper bound: not free
    np.testing.assert_array_equal(free_counts(np.array([[1.0], [0.5]]), box), [1])
    empty = free_counts(np.zeros((10**6, 0)), mg.NonNeg())
    assert empty.shape == (0,) and empty.dtype.kind == "i"
