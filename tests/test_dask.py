"""Batched solves and NMF on Dask (msm_gpu/dask/solve.py, msm_gpu/dask/nmf.py).

Everything runs on one LocalCluster of two worker processes (module-scoped) and is compared
with the in-memory call on the same data: columns are independent problems, so the dask
answer must be the in-memory answer up to rounding.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import dask
import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from dask.distributed import Client, LocalCluster, futures_of, wait

import msm_gpu as mg
from msm_gpu.dask.solve import DaskSolveResult


@pytest.fixture(scope="module")
def client():
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            silence_logs=40,
        ) as cluster,
        Client(cluster) as c,
    ):
        yield c


def unmixing(rng, m=60, n=10, r=400):
    """D = C X + noise with a sparse nonnegative X (a small unmixing problem)."""
    C = rng.uniform(size=(m, n))
    X = rng.uniform(size=(n, r)) * (rng.uniform(size=(n, r)) < 0.4)
    return C, C @ X + 0.01 * rng.normal(size=(m, r))


def assert_same_result(got, ref, *, rtol=1e-10):
    np.testing.assert_allclose(got.x, ref.x, rtol=rtol, atol=1e-12)
    np.testing.assert_array_equal(got.converged_columns, ref.converged_columns)
    np.testing.assert_array_equal(got.n_iter_columns, ref.n_iter_columns)
    assert got.n_iter == ref.n_iter
    assert got.converged == ref.converged
    assert got.fun == pytest.approx(ref.fun, rel=1e-10)
    np.testing.assert_allclose(got.objective, ref.objective, rtol=1e-10)


# -- solves ------------------------------------------------------------------------------


def test_nnls_on_dask_equals_in_memory(client, rng):
    C, D = unmixing(rng)
    ref = mg.nnls(C, D, tol=1e-9, max_iter=5000)
    Dd = da.from_array(D, chunks=(D.shape[0], 96))
    res = mg.nnls(C, Dd, tol=1e-9, max_iter=5000)
    assert isinstance(res, DaskSolveResult)
    assert res.x.chunks == ((C.shape[1],), Dd.chunks[1])
    assert res.converged_columns.chunks == (Dd.chunks[1],)
    out = res.compute()
    assert_same_result(out, ref)
    assert out.backend == "cpu"
    assert out.info["n_blocks"] == len(Dd.chunks[1])
    # the lazy scalars and the per-block results agree with the in-memory ones
    fun, n_iter, converged, blocks = dask.compute(res.fun, res.n_iter, res.converged, res.blocks)
    assert float(fun) == pytest.approx(ref.fun, rel=1e-10)
    assert int(n_iter) == ref.n_iter and bool(converged) == ref.converged
    assert all(b.x is None for b in blocks) and len(blocks) == len(Dd.chunks[1])
    start = np.cumsum((0,) + Dd.chunks[1])
    for b, lo, hi in zip(blocks, start[:-1], start[1:], strict=True):
        np.testing.assert_array_equal(b.n_iter_columns, ref.n_iter_columns[lo:hi])


def test_persist_keeps_results_on_the_workers(client, rng):
    C, D = unmixing(rng, r=200)
    res = mg.nnls(C, da.from_array(D, chunks=(D.shape[0], 50)), tol=1e-8, max_iter=3000)
    kept = res.persist()
    assert isinstance(kept, DaskSolveResult)
    futures = futures_of(kept.x) + futures_of(kept.blocks)
    assert futures and all(f.status in ("pending", "finished") for f in futures)
    wait(futures)
    np.testing.assert_allclose(
        kept.x.compute(), mg.nnls(C, D, tol=1e-8, max_iter=3000).x, rtol=1e-10, atol=1e-12
    )


def test_solve_with_penalty_dask_A_and_one_column(client, rng):
    C, D = unmixing(rng, r=120)
    A, R = C.T @ C, -C.T @ D
    pen = mg.L1(0.05)
    ref = mg.solve(A, R, pen, tol=1e-9, max_iter=4000)
    res = mg.solve(da.from_array(A, chunks=5), da.from_array(R, chunks=(10, 50)), pen,
                   tol=1e-9, max_iter=4000)  # fmt: skip
    assert_same_result(res.compute(), ref)
    one = mg.solve(A, da.from_array(R[:, 3], chunks=4), pen, tol=1e-9, max_iter=4000)
    assert one.x.shape == (A.shape[0],)
    np.testing.assert_allclose(one.x.compute(), ref.x[:, 3], rtol=1e-10, atol=1e-12)


def test_least_squares_with_x0_and_float32(client, rng):
    C, D = unmixing(rng, r=150)
    x0 = np.abs(rng.normal(size=(C.shape[1], D.shape[1])))
    ref = mg.least_squares(C, D, mg.NonNegL1(0.1), x0=x0, tol=1e-9, max_iter=4000)
    Dd = da.from_array(D, chunks=(D.shape[0], 40))
    got = mg.least_squares(C, Dd, mg.NonNegL1(0.1), x0=x0, tol=1e-9, max_iter=4000)
    assert_same_result(got.compute(), ref)
    got2 = mg.least_squares(
        C, Dd, mg.NonNegL1(0.1), x0=da.from_array(x0, chunks=7), tol=1e-9, max_iter=4000
    )
    np.testing.assert_allclose(got2.x.compute(), ref.x, rtol=1e-10, atol=1e-12)
    c32, d32 = C.astype(np.float32), D.astype(np.float32)
    res32 = mg.nnls(c32, da.from_array(d32, chunks=(D.shape[0], 64)), tol=1e-5)
    assert res32.x.dtype == np.float32
    ref32 = mg.nnls(c32, d32, tol=1e-5).x
    np.testing.assert_allclose(res32.x.compute(), ref32, rtol=0, atol=1e-4 * np.abs(ref32).max())


def test_rows_chunked_rhs_is_rechunked_to_whole_columns(client, rng):
    """Decision: row chunks are merged (R.rechunk({0: -1})), column chunks are kept."""
    C, D = unmixing(rng, r=300)
    Dd = da.from_array(D, chunks=(25, 70))  # 3 row chunks, 5 column chunks
    res = mg.nnls(C, Dd, tol=1e-9, max_iter=5000)
    assert res.x.chunks == ((C.shape[1],), Dd.chunks[1])
    assert_same_result(res.compute(), mg.nnls(C, D, tol=1e-9, max_iter=5000))
    only_rows = da.from_array(D, chunks=(20, D.shape[1]))  # rows only: one block of all
    assert mg.nnls(C, only_rows, tol=1e-6).x.chunks == ((C.shape[1],), (D.shape[1],))


def test_bad_input_is_refused(client, rng):
    C, D = unmixing(rng, r=40)
    Dd = da.from_array(D, chunks=(D.shape[0], 10))
    with pytest.raises(ValueError, match="D must have 60 rows"):
        mg.nnls(C, Dd[:-1])
    with pytest.raises(TypeError, match="D must hold real numbers"):
        mg.nnls(C, Dd.astype(complex))
    with pytest.raises(ValueError, match="omega"):
        mg.nnls(C, Dd, omega=2.5)
    with pytest.raises(ValueError, match="max_iter"):
        mg.nnls(C, Dd, max_iter=-1)
    with pytest.raises(ValueError, match="callback"):
        mg.nnls(C, Dd, callback=lambda info: None)
    with pytest.raises(ValueError, match="x0 must have shape"):
        mg.nnls(C, Dd, x0=np.zeros((3, 40)))
    A = C.T @ C
    A[0, 1] += 1.0
    with pytest.raises(ValueError, match="A must be symmetric"):
        mg.solve(A, -C.T @ Dd, mg.NonNeg())
    bad = D.copy()
    bad[5, 33] = np.nan  # values are checked where the block is: at compute time
    res = mg.nnls(C, da.from_array(bad, chunks=(D.shape[0], 10)))
    with pytest.raises(ValueError, match="D contains NaN or Inf"):
        res.x.compute()


def test_a_worker_killed_mid_solve_is_recomputed(client, rng):
    """SIGKILL one worker while blocks are running and some are done: dask recomputes."""
    C = rng.uniform(size=(200, 20))
    # generated on the workers, chunk by chunk (no 19 MB graph); the reference reads it back
    Dd = da.random.default_rng(5).uniform(size=(200, 8 * 1500), chunks=(200, 1500))
    opts = {"tol": 0.0, "max_iter": 300}  # fixed work per block
    mg.nnls(C, Dd[:, :50], **opts).x.compute()  # warm-up: Numba compiled on the workers
    pids = client.run(os.getpid)
    victim = sorted(pids)[0]
    x = mg.nnls(C, Dd, **opts).x.persist()
    futures = futures_of(x)
    deadline = time.time() + 60
    while time.time() < deadline:
        done = sum(f.status == "finished" for f in futures)
        busy = client.processing().get(victim, ())
        if done >= 1 and busy and done < len(futures):
            break
        time.sleep(0.02)
    else:
        pytest.fail("could not catch the solve in the middle")
    held = [k for k, where in client.who_has(futures).items() if victim in where]
    os.kill(pids[victim], signal.SIGKILL)
    assert busy or held  # the victim was working on or holding part of the result
    got = x.compute()
    assert victim not in client.scheduler_info()["workers"]
    np.testing.assert_allclose(got, mg.nnls(C, Dd.compute(), **opts).x, rtol=1e-10, atol=1e-12)


# -- NMF ---------------------------------------------------------------------------------


def _digits(m=400):
    from sklearn.datasets import load_digits

    return load_digits().data[:m]


@pytest.mark.parametrize(
    ("solver", "chunks"), [("msm", (100, 64)), ("msm", (400, 16)), ("hals", (150, 40))]
)
def test_nmf_on_dask_follows_the_in_memory_fit(client, solver, chunks):
    Y = _digits()
    rng = np.random.default_rng(3)
    k = 6
    W0, H0 = rng.uniform(size=(Y.shape[0], k)), rng.uniform(size=(k, Y.shape[1]))
    kw = {"solver": solver, "max_iter": 6, "tol": 0, "init": "custom"}
    ref = mg.NMF(k, **kw)
    W = ref.fit_transform(Y, W=W0, H=H0)
    model = mg.NMF(k, **kw)
    Wd = model.fit_transform(da.from_array(Y, chunks=chunks), W=W0, H=H0)
    assert Wd.chunks == (da.from_array(Y, chunks=chunks).chunks[0], (k,))
    assert model.components_.chunks == ((k,), da.from_array(Y, chunks=chunks).chunks[1])
    f, f_ref = model.history_[:, 1], ref.history_[:, 1]
    assert len(f) == len(f_ref) == 7
    assert np.abs(f - f_ref).max() <= 1e-8 * f_ref[-1]
    np.testing.assert_array_equal(model.info_["inner_iterations"], ref.info_["inner_iterations"])
    assert model.reconstruction_err_ == pytest.approx(ref.reconstruction_err_, rel=1e-8)
    np.testing.assert_allclose(Wd.compute(), W, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(model.components_.compute(), ref.components_, rtol=1e-6, atol=1e-8)
    # transform: the exact W-step, blockwise on row chunks
    np.testing.assert_allclose(
        model.transform(da.from_array(Y, chunks=chunks)).compute(),
        ref.transform(Y),
        rtol=1e-6,
        atol=1e-8,
    )


def test_nmf_sparse_blocks_and_bpp(client):
    Ys = sp.random(240, 150, density=0.08, random_state=1, format="csr")
    rng = np.random.default_rng(4)
    k = 5
    W0, H0 = rng.uniform(size=(240, k)), rng.uniform(size=(k, 150))
    Yd = da.from_array(Ys.toarray(), chunks=(80, 50)).map_blocks(
        sp.csr_matrix, meta=sp.csr_matrix((0, 0))
    )
    for solver in ("msm", "bpp"):
        kw = {"solver": solver, "max_iter": 4, "tol": 0, "init": "custom"}
        ref = mg.NMF(k, **kw).fit(Ys, W=W0, H=H0)
        model = mg.NMF(k, **kw).fit(Yd, W=W0, H=H0)
        f, f_ref = model.history_[:, 1], ref.history_[:, 1]
        assert np.abs(f - f_ref).max() <= 1e-8 * f_ref[-1]
        assert model.reconstruction_err_ == pytest.approx(ref.reconstruction_err_, rel=1e-8)


def test_nmf_dask_random_start_and_bad_input(client):
    Y = _digits(300)
    Yd = da.from_array(Y, chunks=(100, 64))
    # without extrapolation alternating NNLS is monotone (with it, restarts are allowed)
    model = mg.NMF(5, max_iter=8, random_state=0, extrapolation=False)
    W = model.fit_transform(Yd)
    f = model.history_[:, 1]
    assert model.info_["extrapolation"] is False
    assert np.all(np.diff(f) <= 1e-9 * f[0])
    assert f[-1] < 0.6 * f[0]
    assert model.reconstruction_err_ == pytest.approx(
        np.linalg.norm(Y - W.compute() @ model.components_.compute()), rel=1e-9
    )
    with pytest.raises(ValueError, match="init='nndsvd' needs an SVD of all of Y"):
        mg.NMF(5, init="nndsvd").fit(Yd)
    with pytest.raises(ValueError, match="solver='pg' is not available for a dask Y"):
        mg.NMF(5, solver="pg").fit(Yd)
    with pytest.raises(ValueError, match="Negative values in data passed to NMF"):
        mg.NMF(5, max_iter=2).fit(Yd - 1.0)
    with pytest.raises(ValueError, match="H must have shape"):
        mg.NMF(5, init="custom").fit(Yd, W=np.ones((300, 5)), H=np.ones((4, 64)))


# -- without dask ------------------------------------------------------------------------


def test_library_imports_and_runs_without_dask():
    code = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "dask" or name.startswith(("dask.", "distributed")):
            raise ImportError("no dask here")
sys.meta_path.insert(0, Block())
import numpy as np, msm_gpu as mg
C = np.random.default_rng(0).uniform(size=(20, 5)); D = C @ np.ones((5, 3))
assert np.allclose(mg.nnls(C, D, tol=1e-10, max_iter=5000).x, 1.0, atol=1e-6)
mg.NMF(2, max_iter=3).fit(np.abs(D))
assert not any(m == "dask" or m.startswith("dask.") for m in sys.modules)
print("ok")
"""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
