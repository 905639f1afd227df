"""Dense Lasso and NNLS with one right-hand side on shapes the project was not tuned on.

Two tables, every time the best of ``--repeats`` calls in one process after a warm-up call
of each solver (compilation and imports not timed):

``peers``: ``mg.least_squares(C, d, mg.L1(lam))`` at default options beside skglm and
celer (``Lasso(fit_intercept=False)`` at bench_shapes' tolerances, where installed), on
Gaussian designs with a *random* d (so the answer holds hundreds of nonzeros, unlike
bench_shapes' 10-sparse planted answers), square, wide and tall, and a correlated one
(every column plus 0.8 times one shared Gaussian column); lam a fraction of
||C'd||_inf.  Each objective F = 1/2 ||C x - d||^2 + lam ||x||_1 is reported relative to
the lowest of the row.

``forms``: the design form against the Gram form (``representation=`` forced) for a tall
or square C: Gaussian and AR(1) (rho 0.6) designs, a 10-sparse planted answer with 10%
noise or a random d, Lasso at 0.05 and 0.3 lambda_max and NNLS; the ratio is the Gram
form's time over the design form's (below 1: the Gram form was faster), and the default
(``representation="auto"``) beside them with the form it took: the design form for one
right-hand side, except for a tall C whose first sweep frees most variables of an l1
problem (``msm_gpu.finish.design_form.GRAM_PROBE_ROWS``).

    python benchmarks/bench_untuned_lasso.py                 # both tables (~3 min)
    python benchmarks/bench_untuned_lasso.py --table forms --sizes 300 1000

docs/benchmarks/shapes.md quotes a run of each.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import msm_gpu as mg  # noqa: E402

#: (m, n, fraction of lambda_max, design) of the ``peers`` table.
PEER_CASES = [
    (500, 600, 0.05, "gauss"),
    (500, 600, 0.1, "gauss"),
    (500, 600, 0.01, "gauss"),
    (1000, 300, 0.05, "gauss"),
    (200, 2000, 0.05, "gauss"),
    (500, 600, 0.05, "correlated"),
]


def best_time(fn, repeats):
    """(best wall seconds over ``repeats`` calls, the last result), after one warm-up."""
    fn()
    best, out = np.inf, None
    for _ in range(repeats):
        started = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - started)
    return best, out


def lasso_objective(C, d, x, lam):
    r = C @ x - d
    return 0.5 * float(r @ r) + lam * float(np.abs(x).sum())


def design(kind, m, n, rng):
    """A Gaussian, AR(1) (rho 0.6) or correlated (a shared column) m x n design."""
    C = rng.standard_normal((m, n))
    if kind == "ar1":
        from scipy.signal import lfilter

        rho = 0.6
        C[:, 0] /= np.sqrt(1 - rho**2)
        C = np.ascontiguousarray(lfilter([np.sqrt(1 - rho**2)], [1.0, -rho], C, axis=1))
    elif kind == "correlated":
        C = C + 0.8 * rng.standard_normal((m, 1))
    return C


def peers_table(repeats=5, seed=0):
    """Rows (case, {solver: (seconds, F relative to the row's lowest)}, nonzeros)."""
    import bench_shapes

    peers = [name for name in ("skglm", "celer") if bench_shapes.available(name)]
    rng = np.random.default_rng(seed)
    rows = []
    for m, n, frac, kind in PEER_CASES:
        C = design(kind, m, n, rng)
        d = rng.standard_normal(m)
        lam = frac * float(np.abs(C.T @ d).max())
        calls = {"msm_gpu": lambda C=C, d=d, lam=lam: mg.least_squares(C, d, mg.L1(lam)).x}
        for name in peers:  # bench_shapes' peer settings (PEER_TOL, max_iter, epochs)
            call = bench_shapes.solver_call(name, {"kind": "lasso"}, C, d, lam, limit=600)
            calls[name] = lambda call=call: np.asarray(call()[0])
        timed = {name: best_time(fn, repeats) for name, fn in calls.items()}
        f = {name: lasso_objective(C, d, x, lam) for name, (_, x) in timed.items()}
        low = min(f.values())
        cells = {name: (timed[name][0], (f[name] - low) / low) for name in calls}
        nonzeros = int(np.count_nonzero(timed["msm_gpu"][1]))
        rows.append(((m, n, frac, kind), cells, nonzeros))
    return rows


def forms_table(sizes=(100, 300, 1000), ratios=(1.2, 3, 10), repeats=5, seed=0):
    """Rows (m, n, design, data, penalty, nonzeros, design seconds, Gram seconds, default
    seconds, the form the default took)."""
    rng = np.random.default_rng(seed)
    rows = []
    for n in sizes:
        for ratio in ratios:
            m = int(n * ratio)
            if m * n > 4e6:
                continue
            for kind in ("gauss", "ar1"):
                C = design(kind, m, n, rng)
                for data in ("planted", "random"):
                    if data == "planted":
                        x = np.zeros(n)
                        idx = rng.choice(n, min(10, n), replace=False)
                        x[idx] = rng.uniform(1, 2, idx.size) * rng.choice([-1, 1], idx.size)
                        signal = C @ x
                        d = signal + 0.1 * np.sqrt(np.mean(signal**2)) * rng.standard_normal(m)
                    else:
                        d = rng.standard_normal(m)
                    for pen in ("l1 0.05", "l1 0.3", "nnls"):
                        if pen == "nnls":

                            def solve(rep, C=C, d=d):
                                return mg.nnls(C, d, representation=rep)
                        else:
                            lam = float(pen.split()[1]) * float(np.abs(C.T @ d).max())

                            def solve(rep, C=C, d=d, lam=lam):
                                return mg.least_squares(C, d, mg.L1(lam), representation=rep)

                        t_design, res = best_time(lambda s=solve: s("design"), repeats)
                        t_gram, _ = best_time(lambda s=solve: s("gram"), repeats)
                        t_auto, auto = best_time(lambda s=solve: s("auto"), repeats)
                        form = auto.info["representation"]
                        nonzeros = int(np.count_nonzero(res.x))
                        rows.append(
                            (m, n, kind, data, pen, nonzeros, t_design, t_gram, t_auto, form)
                        )
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", choices=["peers", "forms", "both"], default="both")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 300, 1000])
    args = parser.parse_args(argv)
    from _common import settle_allocator

    settle_allocator()  # peers timed in one allocator state (_common's docstring)
    warnings.filterwarnings("ignore")  # the peers' convergence warnings: F tells
    if args.table in ("peers", "both"):
        print("| case | nonzeros | solver: ms (F above the row's lowest) |\n|---|---:|---|")
        for (m, n, frac, kind), cells, nonzeros in peers_table(args.repeats):
            text = ", ".join(f"{k} {t * 1e3:.2f} ({g:.1e})" for k, (t, g) in cells.items())
            print(f"| {kind} {m} x {n}, {frac:g} lambda_max | {nonzeros} | {text} |", flush=True)
    if args.table in ("forms", "both"):
        print(
            "\n| C | design | data | penalty | nonzeros | design ms | Gram ms | Gram / design "
            "| default ms (form) |"
        )
        print("|---|---|---|---|---:|---:|---:|---:|---:|")
        rows = forms_table(tuple(args.sizes), repeats=args.repeats)
        for m, n, kind, data, pen, nz, t_d, t_g, t_a, form in rows:
            print(
                f"| {m} x {n} | {kind} | {data} | {pen} | {nz} | {t_d * 1e3:.2f} | "
                f"{t_g * 1e3:.2f} | {t_g / t_d:.2f} | {t_a * 1e3:.2f} ({form}) |",
                flush=True,
            )


if __name__ == "__main__":
    main()
