"""``mg.solve`` on the CPU as a user calls it, in units of one GEMM ``A @ X`` of the same shape.

Usage::

    python benchmarks/bench_cpu.py [--quick] [--repeats 5] [--out benchmarks/out]

For every shape and dtype, ``mg.solve(A, R, mg.NonNeg(), x0=X, tol=0, max_iter=k)`` with
default options (objective recorded) is timed for two values of k, alternating with blocks
of the GEMM ``A @ X`` (NumPy; the unit is the faster of its default threads and one
thread) in the same run; medians over the repeats.  Reported, in GEMMs:

* ``per iter``: the marginal cost of one more iteration, (T(k2) - T(k1)) / (k2 - k1);
* ``fixed``: the cost of a call besides its iterations, T(k1) - k1 * per iter
  (validation, copies, folding A, the start objective, the result); the same A is
  passed every call, so from the second call on its symmetry and PSD tests are skipped
  (``validation.VerifiedMatrix``); ``--new-a`` times calls that run them;
* ``sweep``: one sweep alone (``SweepState.sweep`` called in a loop), for reference.

Targets (issue 10): per iter <= 1.5, fixed <= 3.  Timings on a shared machine are noisy:
rerun, and compare ratios measured in one run.  ``--clock process`` times CPU seconds of
the whole process instead of wall seconds (every thread counted: a proxy for the ratios
on a machine too busy for wall-clock timings; spinning BLAS threads count too).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import describe  # noqa: E402

import msm_gpu as mg  # noqa: E402
from msm_gpu._input.problem import VERIFIED_A
from msm_gpu.backends.base import default_panel
from msm_gpu.backends.cpu.backend import CpuBackend
from msm_gpu.solvers.splitting import make_splitting

SHAPES = [(200, 1000), (1000, 4096), (256, 50000)]
QUICK_SHAPES = [(200, 1000), (256, 10000)]
TARGET_ITER, TARGET_FIXED = 1.5, 3.0


def make_problem(n, r, dtype, seed=0):
    rng = np.random.default_rng(seed)
    c = rng.uniform(size=(n + 10, n))
    a = (c.T @ c).astype(dtype)
    rhs = (-c.T @ rng.uniform(size=(n + 10, r))).astype(dtype)
    x = np.abs(rng.normal(size=(n, r))).astype(dtype)
    return a, rhs, x


CLOCK = time.perf_counter


def _times(fn, calls, drop=1, before=None):
    times = []
    for _ in range(calls):
        if before is not None:
            before()
        t0 = CLOCK()
        fn()
        times.append(CLOCK() - t0)
    return times[drop:]


#: Seconds after NumPy's threaded GEMM before its OpenBLAS threads stop spinning (measured:
#: 0.1 s of CPU time spent in a 0.2 s sleep after one GEMM).
BLAS_QUIET_S = 0.25


def time_solve(n, r, dtype, repeats, k1=2, k2=10, after_gemm=False, new_a=False):
    """Medians of: GEMM, solve(max_iter=k1), solve(max_iter=k2), one sweep alone.

    ``after_gemm``: every timed call comes right after NumPy's threaded ``A @ X`` (whose
    BLAS threads then spin beside the solve), else after the BLAS threads went quiet.
    ``new_a``: every call's A counts as unseen (``problem.VERIFIED_A`` emptied first),
    so its symmetry and PSD tests run, as for a new matrix each call."""
    a, rhs, x = make_problem(n, r, dtype)
    penalty = mg.NonNeg()

    def solve(k):
        return mg.solve(a, rhs, penalty, x0=x, tol=0, max_iter=k)

    solve(1)  # compile / warm up
    split = make_splitting(np.diag(a).astype(np.float64), 1.0, 0.01, True)
    state = CpuBackend().start(a, rhs, x, split, penalty.table(n), penalty.code, default_panel(n))
    gemm, gemm1, t1, t2, sweeps = [], [], [], [], []

    def before():  # the state the solves start from
        if new_a:
            VERIFIED_A.forget()
        if after_gemm:
            a @ x  # the user's threaded GEMM: its BLAS threads spin while the solve runs

    try:
        for _ in range(repeats):
            gemm += _times(lambda: a @ x, 4)
            with threadpool_limits(1, user_api="blas"):
                gemm1 += _times(lambda: a @ x, 4)
            if not after_gemm:
                # OpenBLAS's threads spin for about 0.1 s after a threaded call (its
                # THREAD_TIMEOUT) and take the core the sweep's second thread needs: wait
                # them out, then one untimed call
                time.sleep(BLAS_QUIET_S)
                solve(1)
            t1 += _times(lambda: solve(k1), 2, drop=0, before=before)
            t2 += _times(lambda: solve(k2), 2, drop=0, before=before)
            sweeps += _times(state.sweep, 3, before=before)
    finally:
        state.close()
    med = statistics.median
    # the unit: the faster of NumPy's GEMM on its default threads and on one thread (on a
    # busy machine the threaded one can be far slower: an honest unit is the best GEMM)
    return min(med(gemm), med(gemm1)), med(t1), med(t2), med(sweeps), (k1, k2)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes only")
    parser.add_argument("--shapes", default=None, help="e.g. 200x1000,1000x4096")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None, help="folder for cpu_solve.png")
    parser.add_argument("--clock", choices=("wall", "process"), default="wall")
    parser.add_argument(
        "--after-gemm",
        action="store_true",
        help="time every call right after a threaded NumPy GEMM (its BLAS threads spinning)",
    )
    parser.add_argument(
        "--new-a",
        action="store_true",
        help="every call's A counts as new: its symmetry and PSD tests run (by default the "
        "same A is passed again and equal entries skip them, as for a user's repeated calls)",
    )
    args = parser.parse_args(argv)
    global CLOCK
    CLOCK = time.perf_counter if args.clock == "wall" else time.process_time

    print(describe())
    print(
        "mg.solve(A, R, NonNeg(), x0=X, tol=0, max_iter=k), default options, in GEMMs A @ X "
        f"(median of {args.repeats} rounds, {args.clock} clock, "
        f"{'right after a threaded GEMM' if args.after_gemm else 'BLAS threads quiet'}"
        f"{', A new every call' if args.new_a else ''}); "
        f"targets: per iter <= {TARGET_ITER}, "
        f"fixed <= {TARGET_FIXED}"
    )
    print(
        f"{'n':>6} {'r':>7} {'dtype':>8} {'GEMM [ms]':>10} {'per iter':>9} {'fixed':>7} "
        f"{'sweep':>7}"
    )
    rows = []
    shapes = QUICK_SHAPES if args.quick else SHAPES
    if args.shapes:
        shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    for n, r in shapes:
        for dtype in (np.float64, np.float32):
            gemm, t1, t2, sweep, (k1, k2) = time_solve(
                n, r, dtype, args.repeats, after_gemm=args.after_gemm, new_a=args.new_a
            )
            per_iter = (t2 - t1) / (k2 - k1)
            fixed = t1 - k1 * per_iter
            row = (n, r, np.dtype(dtype).name, per_iter / gemm, fixed / gemm, sweep / gemm)
            rows.append(row)
            print(
                f"{n:>6} {r:>7} {row[2]:>8} {gemm * 1e3:>10.2f} {row[3]:>9.2f} {row[4]:>7.2f} "
                f"{row[5]:>7.2f}",
                flush=True,
            )
    if args.out is not None:
        plot(rows, args.out / f"cpu_solve_{args.clock}.png")
    return rows


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    labels = [f"{n}x{r}\n{dt}" for n, r, dt, *_ in rows]
    pos = np.arange(len(rows))
    fig, axes = plt.subplots(1, 2, figsize=(1.6 * len(rows) + 3, 3.8))
    for ax, col, target, title in (
        (axes[0], 3, TARGET_ITER, "one more iteration"),
        (axes[1], 4, TARGET_FIXED, "fixed cost of a call"),
    ):
        ax.bar(pos, [row[col] for row in rows])
        ax.axhline(target, color="red", linestyle="--", label=f"target {target:g}")
        ax.set_xticks(pos, labels, fontsize=8)
        ax.set_ylabel("GEMMs A @ X")
        ax.set_title(title)
        ax.legend()
    fig.suptitle("mg.solve on the CPU (NonNeg, default options)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
