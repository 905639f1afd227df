"""Batches whose columns are alike: a Lasso path in one call, correlated right-hand sides.

The Gram form's active set starts a column from the previous column's answer where their
linear terms make a small angle (``pwl_active_set.WARM_COS``).  This script times
``mg.least_squares`` at default options on families of batches, from unrelated columns to
a path, and prints one line per case (best of ``--repeat``).  To compare two versions of
the package, run it in each tree in turn (``PYTHONPATH=<tree>``) and read the lines side
by side; ``--json`` writes the rows.

    python benchmarks/bench_warm_columns.py
    python benchmarks/bench_warm_columns.py --json warm.json
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np


def ar1_design(rng, m, n, rho=0.6):
    X = np.empty((m, n))
    X[:, 0] = rng.standard_normal(m)
    for j in range(1, n):
        X[:, j] = rho * X[:, j - 1] + np.sqrt(1 - rho**2) * rng.standard_normal(m)
    return X


def correlated_columns(rng, m, c, rho):
    """c right-hand sides, each rho times the previous plus fresh noise (cosine ~ rho)."""
    E = rng.standard_normal((m, c))
    D = np.empty_like(E)
    D[:, 0] = E[:, 0]
    for k in range(1, c):
        D[:, k] = rho * D[:, k - 1] + np.sqrt(1 - rho**2) * E[:, k]
    return D


def peak_library(rng, m, n, width=8.0):
    """n Gaussian peaks on m channels (centres, widths drawn): an ill-conditioned library."""
    channels = np.arange(m)[:, None]
    centres = rng.uniform(0, m, n)[None, :]
    widths = rng.uniform(0.5, 2.0, n)[None, :] * width
    return np.exp(-0.5 * ((channels - centres) / widths) ** 2)


def abundances(rng, n, c, smooth, k=8):
    """c columns of k nonzeros each; with probability ``smooth`` a column keeps the
    previous one's support and moves its values a little (neighbouring pixels)."""
    out = np.zeros((n, c))
    support, values = rng.choice(n, k, replace=False), rng.uniform(size=k)
    for j in range(c):
        if rng.uniform() > smooth:
            support, values = rng.choice(n, k, replace=False), rng.uniform(size=k)
        else:
            values = np.abs(values + 0.05 * rng.standard_normal(k))
        out[support, j] = values
    return out


def cases():
    """name -> (C, D, penalty); the path: y / s_k at lambda_max, the answer times s_k."""
    import msm_gpu as mg

    rng = np.random.default_rng(0)
    out = {}
    X = ar1_design(rng, 2000, 200)
    y = X[:, :10] @ rng.standard_normal(10) + 0.5 * rng.standard_normal(2000)
    lam_max = float(np.max(np.abs(X.T @ y)))
    scale = np.geomspace(1.0, 1e-3, 100)
    out["path ar1 2000x200, 100 lambdas"] = (X, y[:, None] / scale, mg.L1(lam_max))
    G = rng.standard_normal((500, 300))
    for name, C in (("ar1 2000x200", X), ("gauss 500x300", G)):
        for rho in (0.0, 0.9, 0.99, 0.999):
            D = correlated_columns(rng, C.shape[0], 150, rho)
            lam_max = float(np.max(np.abs(C.T @ D)))
            for pen in ("L1", "NonNegL1"):
                penalty = getattr(mg, pen)(0.05 * lam_max)
                out[f"{name} rho {rho} {pen} 0.05 lmax"] = (C, D, penalty)
    for m, n, c in ((300, 60, 2000), (500, 200, 500), (1000, 400, 300)):
        library = peak_library(rng, m, n)
        for smooth in (0.0, 0.99):
            D = library @ abundances(rng, n, c, smooth) + 0.01 * rng.standard_normal((m, c))
            out[f"nnls peaks {m}x{n}, {c} pixels, smooth {smooth}"] = (library, D, mg.NonNeg())
    C = np.abs(rng.standard_normal((500, 100)))  # the gate's nnls/dense: the Schur phase
    out["nnls |gauss| 500x100, 1000 columns"] = (
        C,
        np.abs(rng.standard_normal((500, 1000))),
        mg.NonNeg(),
    )
    from sklearn.datasets import load_digits

    digits = load_digits().data.T[:, :1000].astype(float)
    library = rng.uniform(size=(64, 100))
    lam = 0.05 * float(np.max(library.T @ digits))
    out["digits 64x1000 on a 64x100 nonneg library, NonNegL1"] = (
        library,
        digits,
        mg.NonNegL1(lam),
    )
    return out


def time_case(C, D, penalty, repeat):
    from _common import best_of

    import msm_gpu as mg

    res = mg.least_squares(C, D, penalty)  # compiled, warm
    run = best_of(lambda: mg.least_squares(C, D, penalty), k=repeat, memory=False)
    kkt = float(np.max(res.info["kkt_residual"]))
    return run["seconds"], kkt, bool(res.converged)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
    from _common import settle_allocator

    settle_allocator()
    import msm_gpu

    print(msm_gpu.__file__)
    rows = []
    for name, (C, D, penalty) in cases().items():
        seconds, kkt, converged = time_case(C, D, penalty, args.repeat)
        rows.append({"case": name, "seconds": seconds, "kkt": kkt, "converged": converged})
        print(f"{name:55s} {seconds * 1e3:9.2f} ms  kkt {kkt:.1e}  {converged}", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
