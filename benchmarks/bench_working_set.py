"""The working sets of one dense l1 problem (msm_gpu/finish/working_set.py) against the
general road, on problems they were not tuned on.

Every call is ``mg.least_squares(C, d, penalty)`` at default options (the working sets
first, the general road where they hand over) against the same call on the general road
alone (``msm_gpu.run.least_squares``), timed in turn, best of three, in one process:

* planted: C Gaussian (m, n), d = C x* + 10 % noise with k nonzeros in x*, L1 and
  NonNegL1 at 1-20 % of lambda_max, shapes from wide to tall (a wide C is left to the
  general road: its ratio is the eligibility check's cost);
* random: m, n uniform (n in 129-900), column scales, duplicated, empty and correlated
  columns, a random d (answers of every density, most of them dense), lam log-uniform
  in 0.1-100 % of lambda_max.

Prints, per family, the ratio (time with the working sets / general road) summarised as
the total time, median, 10th and 90th percentiles and worst case, and the rows of the
planted grid.  ``python benchmarks/bench_working_set.py [--quick]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import msm_gpu as mg
from msm_gpu import run


def planted(m, n, k, seed, noise=0.1):
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((m, n))
    x = np.zeros(n)
    x[rng.choice(n, k, replace=False)] = rng.uniform(1, 2, k) * rng.choice([-1, 1], k)
    d = c @ x + noise * rng.standard_normal(m) * np.linalg.norm(c @ x) / np.sqrt(m)
    return c, d


def planted_grid(quick):
    shapes = [(300, 400), (500, 600), (1000, 300), (2000, 500), (800, 800), (100, 2000)]
    fracs = (0.02, 0.1) if quick else (0.01, 0.02, 0.05, 0.1, 0.2)
    out = []
    for frac in fracs:
        for m, n in shapes:
            for k in (10, 40):
                c, d = planted(m, n, k, seed=m + n + k)
                lam = frac * float(np.max(np.abs(c.T @ d)))
                for penalty in (mg.L1(lam), mg.NonNegL1(lam)):
                    name = f"{m}x{n} k={k} {frac:g}lmax {type(penalty).__name__}"
                    out.append((name, c, d, penalty))
    return out


def random_problems(count, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        m, n = int(rng.integers(1, 600)), int(rng.integers(129, 900))
        kind = rng.integers(0, 6)
        c = rng.standard_normal((m, n))
        if kind == 1:
            c[:, rng.integers(0, n, 5)] = 0.0
        elif kind == 2:
            half = c[:, 1::2].shape[1]
            c[:, 1::2] = c[:, 0:-1:2][:, :half]
        elif kind == 3:
            c *= 10.0 ** rng.uniform(-8, 8, n)
        elif kind == 4:
            c = np.cumsum(c, axis=1) / np.sqrt(np.arange(1, n + 1))
        elif kind == 5:
            c = np.asfortranarray(c) * 10.0 ** rng.uniform(-40, 40)
        d = rng.standard_normal(m) * 10.0 ** rng.uniform(-3, 3)
        lam = float(np.max(np.abs(c.T @ d))) * 10 ** rng.uniform(-3, 0)
        penalty = mg.L1(lam) if rng.random() < 0.6 else mg.NonNegL1(lam)
        out.append((f"{m}x{n}", c, d, penalty))
    return out


def compare(problems, log_rows=False):
    ratios, general = [], []
    for name, c, d, penalty in problems:
        best = [np.inf, np.inf]
        for _ in range(3):
            for i, call in enumerate((mg.least_squares, run.least_squares)):
                t0 = time.perf_counter()
                res = call(c, d, penalty)
                best[i] = min(best[i], time.perf_counter() - t0)
        ratios.append(best[0] / best[1])
        general.append(best[1])
        if log_rows:
            took = mg.least_squares(c, d, penalty).info.get("working_set")
            print(
                f"  {name:40s} nnz {np.count_nonzero(res.x):4d}  general {1e3 * best[1]:7.2f} ms"
                f"  with working sets {ratios[-1]:.2f}x  (set {took})"
            )
    r, g = np.array(ratios), np.array(general)
    return {
        "total": float(r @ g / g.sum()),
        "median": float(np.median(r)),
        "p10": float(np.quantile(r, 0.1)),
        "p90": float(np.quantile(r, 0.9)),
        "worst": float(r.max()),
        "count": len(r),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer problems")
    args = parser.parse_args(argv)
    families = {
        "planted": planted_grid(args.quick),
        "random": random_problems(40 if args.quick else 150),
    }
    for _, c, d, penalty in families["planted"][:4]:  # compile and import first
        mg.least_squares(c, d, penalty)
    for name, problems in families.items():
        print(f"{name}:")
        s = compare(problems, log_rows=name == "planted")
        print(
            f"{name}: {s['count']} problems, time with the working sets / general road: "
            f"total {s['total']:.2f}, median {s['median']:.2f}, p10 {s['p10']:.2f}, "
            f"p90 {s['p90']:.2f}, worst {s['worst']:.2f}"
        )


if __name__ == "__main__":
    main()
