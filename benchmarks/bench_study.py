"""Figure 1 study on batches: MSM vs PGM, PGM+LS, APG, APG+LS with r right-hand sides.

C (m x n) and D (m x r) uniform on (0, 1); NNLS and l0-regularised least squares, every
method from X0 = 0 for the same number of iterations, on every usable backend.  Each is
measured against a reference F* (sum over the columns) found apart from the runs
(msm_gpu/demo/reference.py): for NNLS the optimum, mg.nnls's, checked against a loop of
SciPy's nnls (1e-10 relative); for l0 the best local minimum found, per column the lowest
F of the methods' last iterates polished by least squares on their supports (not the
optimum).  Prints the machine, the library versions and, per backend / problem / r /
method: seconds per iteration (wall clock of the iterations, setup excluded), the setup
seconds (Lanczos for the baselines), the objective after ``--iters`` iterations, its
relative gap to F* and the first iteration with F - F* <= tol max(1, |F*|) ('-': not
within the run).  ``--plot`` writes F - F* vs time per r.

    python benchmarks/bench_study.py                       # cpu (+ cuda if usable)
    python benchmarks/bench_study.py --r 1 64 1024 --iters 100 --backends cuda
"""

from __future__ import annotations

import argparse
import os
import platform
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir))

import msm_gpu as mg  # noqa: E402
from msm_gpu.demo import reference, study


def usable_backends():
    """``["cpu"]`` plus ``"cuda"`` where it works (the CUDA backend may not exist yet)."""
    try:
        return mg.backends.available()
    except Exception as exc:  # noqa: BLE001 - any failure means: no CUDA here
        print(f"# cuda not checked: {type(exc).__name__}: {exc}")
        return ["cpu"]


def machine_report():
    lines = [f"# {platform.platform()}, python {platform.python_version()}, {os.cpu_count()} CPUs"]
    import numba
    import scipy

    lines.append(
        f"# msm_gpu {mg.__version__}, numpy {np.__version__}, scipy {scipy.__version__}, "
        f"numba {numba.__version__} ({numba.get_num_threads()} threads)"
    )
    try:
        from threadpoolctl import threadpool_info

        for pool in threadpool_info():
            lines.append(
                f"# {pool.get('user_api')}: {pool.get('internal_api')} "
                f"{pool.get('version')} ({pool.get('num_threads')} threads)"
            )
    except ImportError:
        pass
    return "\n".join(lines)


def run_one(method, a, rhs, penalty, iters, backend, constant):
    out = study.run_method(method, a, rhs, penalty, iters=iters, backend=backend, constant=constant)
    times = out["time"][1:]
    per_iter = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else np.nan
    return {**out, "per_iter": per_iter, "setup": out["time"][0]}


def nnls_optimum(c, d):
    """Sum over the columns of the NNLS optimum, mg.nnls's, checked against SciPy's."""
    import scipy.optimize

    x = np.asarray(mg.nnls(c, d, representation="gram").x)
    f = sum(reference.least_squares_value(c, d[:, j], x[:, j]) for j in range(d.shape[1]))
    f_scipy = sum(0.5 * scipy.optimize.nnls(c, d[:, j])[1] ** 2 for j in range(d.shape[1]))
    rel = abs(f - f_scipy) / f_scipy
    if rel > reference.SCIPY_RTOL:
        raise SystemExit(f"mg.nnls and SciPy's optimum differ by {rel:.1e} (relative)")
    return f


def l0_best_found(c, d, lam, runs):
    """Sum over the columns of the lowest polished last iterate of any method."""
    finals = {
        m: np.asarray(run["result"].x.get() if hasattr(run["result"].x, "get") else run["result"].x)
        for m, run in runs.items()
    }
    total = 0.0
    for j in range(d.shape[1]):
        total += min(reference.polish_l0(c, d[:, j], x[:, j], lam)[1] for x in finals.values())
    return total


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", nargs=2, type=int, default=(200, 1000), metavar=("M", "N"))
    parser.add_argument("--r", nargs="+", type=int, default=(1, 16, 256))
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--lam", type=float, default=0.01)
    parser.add_argument("--tol", type=float, default=study.REL_TOL)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backends", nargs="+", default=None)
    parser.add_argument("--problems", nargs="+", default=list(study.PROBLEMS))
    parser.add_argument("--plot", default=None, help="folder for bench_study_<backend>.png")
    args = parser.parse_args(argv)

    backends = args.backends or usable_backends()
    print(machine_report())
    m, n = args.size
    rng = np.random.default_rng(args.seed)
    c = rng.uniform(size=(m, n))
    d_all = rng.uniform(size=(m, max(args.r)))
    a = c.T @ c
    penalties = {"nnls": mg.NonNeg(), "l0": mg.L0(args.lam)}
    print(
        f"{'backend':<8}{'problem':<8}{'r':>6}{'method':>8}{'s/iter':>12}{'setup s':>10}"
        f"{'F_final':>16}{'rel gap':>11}{'iters':>7}"
    )
    optimum = {}
    for backend in backends:
        if backend == "cuda":
            import cupy

            a_in = cupy.asarray(a)
        else:
            a_in = a
        curves = {}
        for name in args.problems:
            penalty = penalties[name]
            for r in args.r:
                d = d_all[:, :r]
                rhs = -(c.T @ d)
                rhs_in = cupy.asarray(rhs) if backend == "cuda" else rhs
                constant = 0.5 * float(np.sum(d * d))
                runs = {}
                for method in study.METHODS:
                    run_one(method, a_in, rhs_in, penalty, 2, backend, constant)  # warm-up
                    runs[method] = run_one(
                        method, a_in, rhs_in, penalty, args.iters, backend, constant
                    )
                if name == "nnls":
                    if r not in optimum:
                        optimum[r] = nnls_optimum(c, d)
                    f_star = optimum[r]
                else:
                    f_star = l0_best_found(c, d, args.lam, runs)
                for method, run in runs.items():
                    final = run["objective"][-1]
                    gap = (final - f_star) / max(1.0, abs(f_star))
                    k = study.first_within(run["objective"], f_star, args.tol)
                    print(
                        f"{backend:<8}{name:<8}{r:>6}{study.LABELS[method]:>8}"
                        f"{run['per_iter']:>12.3e}{run['setup']:>10.3f}{final:>16.8g}{gap:>11.2e}"
                        f"{'-' if k is None else k:>7}"
                    )
                curves[(name, r)] = (f_star, runs)
        if args.plot:
            plot(curves, os.path.join(args.plot, f"bench_study_{backend}.png"), backend)
    print(
        f"# F*: nnls the optimum (mg.nnls, checked against SciPy to {reference.SCIPY_RTOL:g}); "
        "l0 best found (polished last iterates), not the optimum; iters: first with "
        f"F - F* <= {args.tol:g} max(1, |F*|)"
    )


def plot(curves, path, backend):
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    keys = list(curves)
    fig, axes = plt.subplots(1, len(keys), figsize=(4.5 * len(keys), 4), squeeze=False)
    for ax, key in zip(axes[0], keys, strict=True):
        f_star, runs = curves[key]
        for method, run in runs.items():
            gap = run["objective"] - f_star
            gap = np.where(gap > 0, gap, np.nan)
            ax.semilogy(run["time"], gap, label=study.LABELS[method])
        ax.set_title(f"{key[0]}, r = {key[1]} ({backend})")
        ax.set_xlabel("seconds")
        ax.set_ylabel("F - F*" + (" (best found)" if key[0] == "l0" else ""))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    print(f"# wrote {path}")


if __name__ == "__main__":
    main()
