"""Time of one MSM iteration / time of one BLAS GEMM A @ X of the same shape (CPU).

Usage::

    python benchmarks/bench_cpu.py [--quick] [--repeats 7] [--out benchmarks/out]

The sweep and the GEMM are timed in alternating blocks in one run (median over the
repeats), so the ratio is robust to the machine's noise.  Target: <= 1.5.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import describe  # noqa: E402

import msm_gpu as mg  # noqa: E402
from msm_gpu.backends.base import default_panel  # noqa: E402
from msm_gpu.backends.cpu import CpuBackend  # noqa: E402
from msm_gpu.splitting import make_splitting  # noqa: E402

SHAPES = [(200, 1000), (1000, 4096), (256, 50000)]
QUICK_SHAPES = [(200, 1000), (256, 10000)]


def make_problem(n, r, dtype, seed=0):
    rng = np.random.default_rng(seed)
    c = rng.uniform(size=(n + 10, n))
    a = (c.T @ c).astype(dtype)
    rhs = (-c.T @ rng.uniform(size=(n + 10, r))).astype(dtype)
    x = np.abs(rng.normal(size=(n, r))).astype(dtype)
    return a, rhs, x


def time_pair(n, r, dtype, penalty, repeats, panel=None):
    """Median seconds of one MSM iteration and of one GEMM A @ X, timed alternately."""
    a, rhs, x = make_problem(n, r, dtype)
    panel = panel or default_panel(n)
    split = make_splitting(np.diag(a).astype(np.float64), 1.0, 0.01, penalty.is_convex)
    state = CpuBackend().start(a, rhs, x, split, penalty.table(n), penalty.code, panel)
    state.sweep()  # compile / warm up
    a @ x
    sweeps, gemms = [], []
    for _ in range(repeats):
        # Alternating blocks: a block of sweeps, then a block of GEMMs, the first three calls
        # of each block dropped, a pause between blocks.  Single calls interleaved one
        # by one would mostly time the hand-over between OpenBLAS's and Numba's thread
        # pools: both spin-wait after a call and slow the other down on 2 cores.
        sweeps += _time_block(state.sweep, 8)[3:]
        time.sleep(0.3)  # let the spinning Numba/OpenMP threads go idle
        gemms += _time_block(lambda: a @ x, 8)[3:]
        time.sleep(0.3)  # and OpenBLAS's (it spins ~0.1 s)
    return statistics.median(sweeps), statistics.median(gemms)


def _time_block(fn, calls):
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes only")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--penalty", default="nonneg", choices=["nonneg", "l0", "l1"])
    parser.add_argument("--out", type=Path, default=None, help="folder for ratios.png")
    args = parser.parse_args(argv)
    penalty = {"nonneg": mg.NonNeg(), "l0": mg.L0(0.1), "l1": mg.L1(0.1)}[args.penalty]

    print(describe())
    print(f"penalty {penalty!r}; one MSM iteration vs one GEMM A @ X, median of {args.repeats}")
    print(f"{'n':>6} {'r':>7} {'dtype':>8} {'MSM iter [ms]':>14} {'GEMM [ms]':>10} {'ratio':>6}")
    rows = []
    for n, r in QUICK_SHAPES if args.quick else SHAPES:
        for dtype in (np.float64, np.float32):
            t_sweep, t_gemm = time_pair(n, r, dtype, penalty, args.repeats)
            ratio = t_sweep / t_gemm
            rows.append((n, r, np.dtype(dtype).name, ratio))
            print(
                f"{n:>6} {r:>7} {np.dtype(dtype).name:>8} {t_sweep * 1e3:>14.2f} "
                f"{t_gemm * 1e3:>10.2f} {ratio:>6.2f}",
                flush=True,
            )
    if args.out is not None:
        plot(rows, args.out / "cpu_ratio.png")
    return rows


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    labels = [f"{n}x{r}\n{dt}" for n, r, dt, _ in rows]
    fig, ax = plt.subplots(figsize=(1.2 * len(rows) + 2, 3.5))
    ax.bar(labels, [ratio for *_, ratio in rows])
    ax.axhline(1.5, color="red", linestyle="--", label="target 1.5")
    ax.set_ylabel("MSM iteration / GEMM")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
