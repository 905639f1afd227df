"""The active set in the design form: A = C'C read through the columns of C (dense or
sparse), nothing n x n formed.  Checked against SciPy / scikit-learn and against the Gram
form on wide, square, tall, collinear and low-rank designs, every convex penalty."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse
from hypothesis import given, settings
from hypothesis import strategies as st
from test_rank_deficient import PENALTIES, _f, _problem, _reference

from msm_gpu.finish import Faces
from msm_gpu.pwl_active_set import pwl_active_set, pwl_active_set_design
from msm_gpu.scaling import row_scaled_penalty


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
