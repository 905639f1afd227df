"""Issue 51's acceptance cells side by side: answers with thousands of nonzeros.

Each cell function solves one problem with msm_gpu at default options and with the peer
the issue names, in turn in this process (best of ``repeat``, after one warm-up call of
each, so that compilation and imports are not timed), and returns a dict of the times, the
objectives (scored here by one formula: F = 1/2 ||C x - d||^2 + lam ||x||_1), msm_gpu's
KKT residual and the ratios the issue states its targets in.  The regression gate imports
them (``quick=True``: a smaller problem of the same kind, about a second a solver).

Cells (issue 51, and issue 48's Lasso cells):

    issue         C = scipy.sparse.random(5000, 20000, density 1e-3, CSR, random_state 0)
                  (uniform entries), d uniform (default_rng(0)); NNLS against scikit-learn's
                  default positive Lasso (alpha 1e-10).  Target: exact (KKT <= 1e-10, F <=
                  the peer's) in <= 1x its time.
    issue_seeds   the same family drawn with random_state 1 and 2 (C and d): shapes the
                  solver was not tuned on.
    sparse        bench_shapes' sparse NNLS (|N(0,1)| entries, d = C x_true + noise) at
                  1e4 x 1e5, density 1e-4 and 1e-3.  Target: exact in <= 2x scikit-learn's
                  default time.
    huge          the same at 1e4 x 1e6, density 1e-5: exact in under a minute.
    dense_square  C |N(0,1)| 1000 x 800, x_true >= 0 on 90% of the columns, d = C x_true +
                  0.1% noise (752 nonzeros in the answer); against scipy.optimize.nnls.
                  Target: <= 0.5x its time, exact.
    lasso         bench_shapes' Lasso cells: square 500 x 600 at 0.05 and 0.1 lambda_max,
                  sparse 1e4 x 1e5 at 0.1 lambda_max; against skglm and celer at
                  bench_shapes' tolerances (PEER_TOL).  Target: >= 1.2x faster than the
                  faster of them (ratio <= 1 / 1.2).

    python benchmarks/bench_sparse_support.py            # every cell, full size
    python benchmarks/bench_sparse_support.py --quick    # small sizes (the gate's)
    python benchmarks/bench_sparse_support.py --cells issue dense_square
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_shapes as shapes  # noqa: E402

#: scikit-learn's positive Lasso standing for NNLS (the issue's call).
NNLS_ALPHA = 1e-10


def objective(C, d, x, lam=0.0):
    """F(x) = 1/2 ||C x - d||^2 + lam ||x||_1 in float64."""
    x = np.asarray(x, dtype=np.float64)
    r = np.asarray(C @ x).ravel() - d
    return 0.5 * float(r @ r) + lam * float(np.abs(x).sum())


def best_time(call, repeat):
    """(value of the fastest call, its wall time) of ``repeat`` calls after one warm-up
    (``_common.best_of``)."""
    from _common import best_of

    call()
    run = best_of(call, k=repeat, memory=False)
    return run["value"], run["seconds"]


def _msm_nnls(C, d):
    import msm_gpu as mg

    res = mg.nnls(C, d)
    return res.x, float(np.max(res.info["kkt_residual"]))


def _sklearn_nnls(C, d, tol=1e-4, max_iter=1000):
    from sklearn.linear_model import Lasso

    model = Lasso(alpha=NNLS_ALPHA, positive=True, fit_intercept=False, tol=tol, max_iter=max_iter)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.fit(C, d).coef_.copy()


def _nnls_vs_sklearn(C, d, repeat):
    (x, kkt), t_msm = best_time(lambda: _msm_nnls(C, d), repeat)
    x_sk, t_sk = best_time(lambda: _sklearn_nnls(C, d), repeat)
    f, f_sk = objective(C, d, x), objective(C, d, x_sk)
    return {
        "msm_s": t_msm,
        "sklearn_s": t_sk,
        "ratio": t_msm / t_sk,
        "msm_kkt": kkt,
        "msm_F": f,
        "sklearn_F": f_sk,
        "sklearn_gap": (f_sk - f) / f,
        "exact": kkt <= 1e-10 and f <= f_sk,
        "nnz": int(np.count_nonzero(x)),
    }


def issue_problem(quick=False, seed=0):
    """The issue's C (CSR, uniform entries) and d (uniform); ``seed`` 0 is the issue's."""
    import scipy.sparse as sp

    m, n = (1000, 4000) if quick else (5000, 20_000)
    C = sp.random(m, n, density=1e-3 * (5 if quick else 1), format="csr", random_state=seed)
    return C, np.random.default_rng(seed).uniform(size=m)


def cell_issue(quick=False, repeat=1, seed=0):
    """The issue's case: msm_gpu's NNLS against scikit-learn's default positive Lasso."""
    C, d = issue_problem(quick, seed)
    name = "issue" if seed == 0 else f"issue seed {seed}"
    return {"cell": name, "shape": C.shape, **_nnls_vs_sklearn(C, d, repeat)}


def sparse_problem(m, n, density):
    C, d, _ = shapes.make_problem(shapes.case("nnls", "sparse", m, n, density=density))
    return C, d


def cell_sparse(density, quick=False, repeat=1):
    """bench_shapes' sparse NNLS at 1e4 x 1e5 (quick: 2000 x 20000) and ``density``
    (quick: ten times it, so that columns hold as many entries)."""
    m, n = (2000, 20_000) if quick else (10_000, 100_000)
    C, d = sparse_problem(m, n, density * (5 if quick else 1))
    return {"cell": f"sparse {density:g}", "shape": C.shape, **_nnls_vs_sklearn(C, d, repeat)}


def cell_huge(quick=False):
    """1e4 x 1e6 at density 1e-5 (quick: 1e4 x 2e5): msm_gpu alone, one call, its time."""
    m, n = (10_000, 200_000) if quick else (10_000, 1_000_000)
    C, d = sparse_problem(m, n, 1e-5)
    t = time.perf_counter()
    x, kkt = _msm_nnls(C, d)
    seconds = time.perf_counter() - t
    return {
        "cell": "huge",
        "shape": C.shape,
        "msm_s": seconds,
        "msm_kkt": kkt,
        "msm_F": objective(C, d, x),
        "exact": kkt <= 1e-10,
        "nnz": int(np.count_nonzero(x)),
    }


def dense_square_problem(quick=False, seed=0):
    rng = np.random.default_rng(seed)
    m, n = (300, 240) if quick else (1000, 800)
    C = np.abs(rng.standard_normal((m, n)))
    x_true = np.abs(rng.standard_normal(n)) * (rng.uniform(size=n) < 0.9)
    signal = C @ x_true
    d = signal + 1e-3 * np.sqrt(np.mean(signal**2)) * rng.standard_normal(m)
    return C, d


def cell_dense_square(quick=False, repeat=3):
    """Dense square positive NNLS with a large support against scipy.optimize.nnls."""
    from scipy.optimize import nnls

    C, d = dense_square_problem(quick)
    (x, kkt), t_msm = best_time(lambda: _msm_nnls(C, d), repeat)
    x_sp, t_sp = best_time(lambda: nnls(C, d, maxiter=50 * C.shape[1])[0], repeat)
    f, f_sp = objective(C, d, x), objective(C, d, x_sp)
    return {
        "cell": "dense_square",
        "shape": C.shape,
        "msm_s": t_msm,
        "scipy_s": t_sp,
        "ratio": t_msm / t_sp,
        "msm_kkt": kkt,
        "msm_F": f,
        "scipy_F": f_sp,
        "exact": kkt <= 1e-10 and f <= f_sp * (1 + 1e-12),
        "nnz": int(np.count_nonzero(x)),
    }


def _lasso_cell(c, repeat):
    C, d, lam = shapes.make_problem(c)
    out = {"cell": c["name"], "shape": C.shape}
    xs = {}
    for name in ("msm_gpu", "skglm", "celer"):
        if not shapes.available(name):
            out[f"{name}_s"] = None
            continue
        call = shapes.solver_call(name, c, C, d, lam, 1e9)
        (x, _), seconds = best_time(call, repeat)
        xs[name] = x
        out[f"{name}_s"] = seconds
    fs = {name: objective(C, d, x, lam) for name, x in xs.items()}
    f_best = min(fs.values())
    for name, f in fs.items():
        out[f"{name}_gap"] = (f - f_best) / f_best
    peers = [out[f"{p}_s"] for p in ("skglm", "celer") if out.get(f"{p}_s") is not None]
    out["ratio"] = out["msm_gpu_s"] / min(peers) if peers else None
    return out


def cell_lasso(quick=False, repeat=3):
    """Issue 48's Lasso cells: msm_gpu's time over the faster of skglm / celer."""
    square = (500, 600)
    ms, ns = (2000, 20_000) if quick else (10_000, 100_000)
    cells = [shapes.case("lasso", "gauss", *square, frac=f) for f in (0.05, 0.1)]
    cells.append(shapes.case("lasso", "sparse", ms, ns, frac=0.1, density=1e-3))
    return [_lasso_cell(c, repeat) for c in cells]


CELLS = {
    "issue": lambda quick: [cell_issue(quick)],
    "issue_seeds": lambda quick: [cell_issue(quick, seed=s) for s in (1, 2)],
    "sparse": lambda quick: [cell_sparse(1e-4, quick), cell_sparse(1e-3, quick)],
    "huge": lambda quick: [cell_huge(quick)],
    "dense_square": lambda quick: [cell_dense_square(quick)],
    "lasso": lambda quick: cell_lasso(quick),
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (the gate's)")
    parser.add_argument("--cells", nargs="*", default=list(CELLS), choices=list(CELLS))
    args = parser.parse_args(argv)
    from _common import settle_allocator

    settle_allocator()  # peers timed in one allocator state (_common's docstring)
    for name in args.cells:
        for row in CELLS[name](args.quick):
            print(
                ", ".join(
                    f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
