"""Passes over C that one part of the exact road hands on to the next, not repeated:
a CSC C's column sums of squares found by its scaled copy, max |C'd| read by the working
set's first pass, max A_jj from the caller.  Each against the quantity computed directly,
and the active set given them against the same active set finding them itself."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse

import msm_gpu as mg
from msm_gpu._input.scaling import scaled_sparse_copy
from msm_gpu.finish.faces import Faces
from msm_gpu.solvers.design_msm import design_sweeps
from msm_gpu.solvers.pwl_active_set import DesignSource, active_set_on_source


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_csc_copy_finds_its_column_squares(dtype):
    c = scipy.sparse.random(60, 200, density=0.05, format="csc", random_state=0, dtype=dtype)
    keep = np.ones(200)
    keep[7] = 0.0  # an empty column
    c = (c @ scipy.sparse.diags(keep).astype(dtype)).tocsc()
    c.eliminate_zeros()
    plain = scaled_sparse_copy(c, dtype, -3)
    copy, squares = scaled_sparse_copy(c, dtype, -3, column_squares=True)
    assert copy.dtype == dtype and np.array_equal(copy.data, plain.data)
    assert np.array_equal(copy.indices, c.indices) and copy.indices is not c.indices
    dense = copy.toarray().astype(np.float64)
    np.testing.assert_allclose(squares, np.einsum("ij,ij->j", dense, dense), rtol=1e-14)
    assert squares[7] == 0.0
    # a CSR copy has no column pass: no squares, the copy as before
    csr, none = scaled_sparse_copy(c.tocsr(), dtype, -3, column_squares=True)
    assert none is None and np.array_equal(csr.toarray(), plain.toarray())


def test_a_sparse_design_keeps_the_squares_of_its_copy():
    # the norms the design form reads are those of the rescaled C (no second pass)
    from msm_gpu._input.problem import prepare_design

    c = scipy.sparse.random(50, 300, density=0.04, format="csc", random_state=1) * 1e3
    d = np.random.default_rng(1).uniform(size=50)
    problem = prepare_design(c, d, mg.NonNeg(), None, "cpu")
    scaled = problem.design.c.toarray()
    np.testing.assert_allclose(problem.design.c_norms, (scaled**2).sum(axis=0), rtol=1e-14)


def _sparse_problem(seed):
    c = scipy.sparse.random(80, 400, density=0.03, format="csc", random_state=seed)
    d = np.random.default_rng(seed).standard_normal((80, 2))
    return c, d


@pytest.mark.parametrize("sparse", [False, True])
def test_the_working_sets_first_pass_reads_max_ctd_from_a_cold_start(sparse):
    c, d = _sparse_problem(2)
    c = c if sparse else c.toarray()
    diag = np.asarray(c.multiply(c).sum(axis=0)).ravel() if sparse else (c * c).sum(axis=0)
    x = np.zeros((c.shape[1], 2))
    x[:, 1][[3, 50]] = 0.5  # a warm start: no reading
    out = design_sweeps(DesignSource(c), d, x, diag, diag, mg.L1(0.1), 1e-12, working_set=True)
    expected = np.abs(c.T @ d[:, 0]).max()
    assert out.grad_max[0] == pytest.approx(expected, rel=1e-12)
    assert out.grad_max[1] == -1.0
    plain = design_sweeps(
        DesignSource(c), d, np.zeros((c.shape[1], 2)), diag, diag, mg.L1(0.1), 1e-12, warm=3
    )
    assert np.all(plain.grad_max == -1.0)  # the plain road has no working set


@pytest.mark.parametrize("sparse", [False, True])
def test_the_active_set_given_its_scales_takes_the_same_steps(sparse):
    c, d = _sparse_problem(3)
    c = c if sparse else c.toarray()
    dense = c.toarray() if sparse else c
    source = DesignSource(c)
    faces = Faces(np, mg.NonNeg(), c.shape[1])
    diag = (dense * dense).sum(axis=0)
    grad_max = np.abs(dense.T @ d).max(axis=0)
    found = active_set_on_source(source, d, faces)
    given = active_set_on_source(source, d, faces, diag_max=diag.max(), grad_max=grad_max)
    unknown = active_set_on_source(source, d, faces, grad_max=np.array([-1.0, grad_max[1]]))
    for out in (given, unknown):
        for a, b in zip(out, found, strict=True):
            np.testing.assert_array_equal(a, b)
    assert np.all(found[1] == 1)
    # and the answer is NNLS's: the KKT conditions from C
    x = found[0]
    grad = dense.T @ (dense @ x - d)
    assert np.all(x >= 0.0) and np.all(grad >= -1e-10 * grad_max)
    assert np.all(np.abs(grad[x > 0]) <= 1e-10 * np.broadcast_to(grad_max, x.shape)[x > 0])


def test_a_sparse_design_source_reads_cs_own_arrays():
    # no scaled copy of the entries: s is applied as they are read (the dense form's way);
    # the products it gives are those of C S
    c = scipy.sparse.random(40, 90, density=0.1, format="csc", random_state=4)
    s = np.ldexp(1.0, np.random.default_rng(4).integers(-3, 4, 90))
    source = DesignSource(c, s)
    assert source.src[2] is c.data and source.src[1] is c.indices
    faces = Faces(np, mg.NonNeg(), 90)
    d = np.random.default_rng(4).uniform(size=(40, 1))
    y, status, _ = active_set_on_source(source, d, faces)
    scaled = c.toarray() * s
    grad = scaled.T @ (scaled @ y - d)
    assert status[0] == 1 and np.all(y >= 0.0)
    assert np.all(grad >= -1e-10) and np.all(np.abs(grad[y > 0]) <= 1e-10)


def test_the_active_set_reads_the_gradient_scale_it_is_given():
    # the scale handed in sets the KKT test's floor: one far too large accepts the start
    # (x = 0) at once, so a value given is the value used (no pass of its own behind it)
    c, d = _sparse_problem(3)
    faces = Faces(np, mg.NonNeg(), c.shape[1])
    found = active_set_on_source(DesignSource(c), d, faces)
    loose = active_set_on_source(DesignSource(c), d, faces, grad_max=np.full(2, 1e30))
    assert np.all(found[0].any(axis=0)) and not loose[0].any()
