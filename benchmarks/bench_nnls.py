"""Batched NNLS side by side: scipy loop, bpp, plain MSM and the default (MSM + exact finish).

The four shapes of issue 9 (C is m x n, D holds r right-hand sides), in float64 and float32:

    dense     C, D with |N(0,1)| entries, 500 x 100, r = 1000
    unmixing  C: 20 endmember spectra on 200 bands, uniform (0, 1) entries; D = C X + noise
              (sd 0.01) with Dirichlet(0.3) abundances X, r = 100000
    spectra   C: 60 Gaussian peaks (centres evenly spaced, width 0.02) on 300 points,
              cond(C'C) ~ 1.3e6; D = C X + noise, X sparse nonnegative, r = 5000
    large     C, D with |N(0,1)| entries, 1200 x 1000, r = 2048

Methods (every time includes forming C'C and C'D where the method needs them):

    scipy    scipy.optimize.nnls column by column (float64), the reference; on a column
             subset, its time extrapolated to r (marked *)
    bpp      this project's block principal pivoting (apps.nmf_solvers.bpp) from zero
    msm      mg.nnls(C, D, finish=None): the paper's MSM at default options
    default  mg.nnls(C, D): MSM + the exact finish (msm_gpu/finish/run.py)

Times are one run, or the median of 3 where a run takes under 2 s.  Accuracy is measured on
the scipy subset: objective gap sum_k (F_k - F*_k) / sum_k F*_k and
max |x - x_scipy|.  bpp and plain MSM, where slower than ``--budget`` seconds per 1000 columns,
run on the scipy subset only and are extrapolated (marked *); the default always runs on all
r.  A PNG of the times goes to ``--out`` (git-ignored benchmarks/out/ by default).

    python benchmarks/bench_nnls.py --quick     # smaller r (a few minutes on 2 cores)
    python benchmarks/bench_nnls.py             # the issue's sizes
    NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/bench_nnls.py --quick --clock cpu
                                                # one thread each, CPU seconds (busy machine)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _machine import describe  # noqa: E402

import msm_gpu as mg  # noqa: E402
from msm_gpu.factorization.solvers import bpp

#: name -> (m, n, r, r_quick, scipy subset)
SHAPES = {
    "dense": (500, 100, 1000, 300, 200),
    "unmixing": (200, 20, 100_000, 10_000, 2000),
    "spectra": (300, 60, 5000, 1000, 300),
    "large": (1200, 1000, 2048, 256, 8),
}
METHODS = ("scipy", "bpp", "msm", "default")


def make_problem(name, r, seed=0):
    """C (m x n) and D (m x r), float64, for one of :data:`SHAPES`."""
    m, n = SHAPES[name][:2]
    rng = np.random.default_rng(seed)
    if name in ("dense", "large"):
        return np.abs(rng.normal(size=(m, n))), np.abs(rng.normal(size=(m, r)))
    if name == "unmixing":
        c = rng.uniform(size=(m, n))  # endmember spectra
        x = rng.dirichlet(0.3 * np.ones(n), size=r).T  # abundances on the simplex
        return c, c @ x + 0.01 * rng.normal(size=(m, r))
    t = np.linspace(0, 1, m)[:, None]
    c = np.exp(-0.5 * ((t - np.linspace(0.02, 0.98, n)) / 0.02) ** 2)
    x = np.abs(rng.normal(size=(n, r))) * (rng.uniform(size=(n, r)) < 0.3)
    return c, c @ x + 0.01 * rng.normal(size=(m, r))


#: The clock: wall time (default) or process CPU time (all threads; ``--clock cpu``), which
#: a busy shared machine disturbs much less.
CLOCK = time.perf_counter


def run_method(method, c, d):
    """x (n x r, float64) and seconds."""
    t0 = CLOCK()
    if method == "scipy":
        import scipy.optimize

        c64, d64 = c.astype(np.float64), d.astype(np.float64)
        x = np.column_stack([scipy.optimize.nnls(c64, d64[:, k])[0] for k in range(d.shape[1])])
    elif method == "bpp":
        g, p = c.T @ c, c.T @ d
        x, _ = bpp(g, p, np.zeros_like(p))
    elif method == "msm":
        x = mg.nnls(c, d, finish=None).x
    else:
        res = mg.nnls(c, d)
        x = res.x
    return np.asarray(x, dtype=np.float64), CLOCK() - t0


#: Runs shorter than this many seconds are repeated REPEAT times and their median reported
#: (a 2-core shared VM: a single short run can be 2x off).
SHORT = 2.0
REPEAT = 3


def timed_method(method, c, d):
    """:func:`run_method`, its time the median of REPEAT runs when one run is short."""
    x, t = run_method(method, c, d)
    if t < SHORT:
        t = float(np.median([t] + [run_method(method, c, d)[1] for _ in range(REPEAT - 1)]))
    return x, t


def objectives(c, d, x):
    c64, d64 = c.astype(np.float64), d.astype(np.float64)
    return 0.5 * np.sum((c64 @ x - d64) ** 2, axis=0)


def bench_shape(name, dtype, quick, budget):
    m, n, r_full, r_quick, n_sub = SHAPES[name]
    r = r_quick if quick else r_full
    n_sub = min(n_sub, r)
    c, d = make_problem(name, r)
    c, d = c.astype(dtype), d.astype(dtype)
    sub = slice(0, n_sub)
    mg.nnls(c[:, :], d[:, :2])  # warm-up: Numba compilation, imports
    x_ref, t_ref = timed_method("scipy", c, d[:, sub])
    f_ref = objectives(c, d[:, sub], x_ref)
    rows = {"scipy": (t_ref * r / n_sub, True, 0.0, 0.0)}
    for method in METHODS[1:]:
        # probe on the subset; run on all r columns unless that would exceed the budget
        x_s, t_s = timed_method(method, c, d[:, sub])
        slow = t_s * r / n_sub > budget * r / 1000
        extrapolate = slow and r > n_sub and method != "default"  # the default: always all r
        if extrapolate:
            x, t = x_s, t_s * r / n_sub
        else:
            x, t = timed_method(method, c, d)
            x = x[:, sub]
        gap = float((objectives(c, d[:, sub], x).sum() - f_ref.sum()) / f_ref.sum())
        rows[method] = (t, extrapolate, gap, float(np.max(np.abs(x - x_ref))))
    return {"name": name, "dtype": np.dtype(dtype).name, "m": m, "n": n, "r": r, "rows": rows}


def format_table(results):
    head = "| problem | dtype | r | " + " | ".join(f"{m} time" for m in METHODS)
    head += " | default: gap | default: max dx | msm: gap | x scipy | x bpp |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for res in results:
        rows = res["rows"]

        def t(method, rows=rows):
            sec, extra, _, _ = rows[method]
            return f"{sec:.3g} s" + ("*" if extra else "")

        t_ref, t_bpp, t_def = rows["scipy"][0], rows["bpp"][0], rows["default"][0]
        lines.append(
            f"| {res['name']} {res['m']}x{res['n']} | {res['dtype']} | {res['r']} | "
            + " | ".join(t(m) for m in METHODS)
            + f" | {rows['default'][2]:.1e} | {rows['default'][3]:.1e} | {rows['msm'][2]:.1e}"
            + f" | {t_ref / t_def:.1f} | {t_bpp / t_def:.1f} |"
        )
    lines.append(
        "(* extrapolated from a column subset; gap = (F - F_scipy) / F_scipy on the scipy "
        "subset; 'x scipy' / 'x bpp' = how many times faster the default is)"
    )
    return "\n".join(lines)


def plot(results, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['name']}\n{r['dtype']}" for r in results]
    pos = np.arange(len(results))
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(results)), 4))
    for i, method in enumerate(METHODS):
        ax.bar(pos + (i - 1.5) * 0.2, [r["rows"][method][0] for r in results], 0.2, label=method)
    ax.set_yscale("log")
    ax.set_xticks(pos, labels)
    ax.set_ylabel("seconds (log)")
    ax.set_title("batched NNLS: scipy loop, bpp, plain MSM, MSM + exact finish")
    ax.legend()
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / "bench_nnls.png"
    fig.savefig(path, dpi=120)
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller r per shape")
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--dtypes", nargs="+", default=["float64", "float32"])
    parser.add_argument(
        "--budget",
        type=float,
        default=20.0,
        help="seconds per 1000 columns above which a method is extrapolated from the subset",
    )
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "out")
    parser.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="wall time, or CPU time of the process summed over its threads",
    )
    args = parser.parse_args(argv)
    from _common import settle_allocator

    settle_allocator()  # peers timed in one allocator state (_common's docstring)
    global CLOCK
    CLOCK = time.perf_counter if args.clock == "wall" else time.process_time
    print(describe())
    print(f"clock: {args.clock}")
    results = []
    for name in args.shapes:
        for dtype in args.dtypes:
            results.append(bench_shape(name, np.dtype(dtype), args.quick, args.budget))
            print(format_table(results[-1:]).split("\n")[2], flush=True)
    print()
    print(format_table(results))
    print(f"PNG: {plot(results, args.out)}")


if __name__ == "__main__":
    main()
