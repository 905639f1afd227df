"""What the input checks of issue 12 cost: the PSD test and the preparation (rescaling).

Usage::

    python benchmarks/bench_robust.py [--repeats 5] [--iters 50]

For NNLS-like problems A = C'C (n x n), R = -C'D (n x r) it times, side by side in one run
(median over the repeats, alternating):

* ``solve`` with the default checks (Cholesky PSD test for n <= 1000) and with
  ``check_convergence=False`` (no PSD test): the difference is the test's cost;
* the PSD test alone (``validation.check_psd``) against one MSM sweep, as "sweeps' worth";
* ``nnls`` setup time (validation, transfer, rescaling, C'C) against its iterations.

All runs use ``tol=0`` and the same ``max_iter``, so they do the same sweeps.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _machine import describe  # noqa: E402

import msm_gpu as mg  # noqa: E402
from msm_gpu._input.validation import check_psd
from msm_gpu.backends.cpu.backend import CpuBackend

SHAPES = [(200, 1), (200, 50), (500, 1), (500, 50), (1000, 1), (1000, 50)]


def _median_time(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--iters", type=int, default=50)
    args = parser.parse_args(argv)
    print(describe())
    print(f"\nsolve, tol=0, max_iter={args.iters}; median of {args.repeats} (seconds)\n")
    header = (
        f"{'n':>5} {'r':>4} | {'checked':>9} {'unchecked':>9} {'ratio':>6} | "
        f"{'psd test':>9} {'sweep':>9} {'sweeps':>7} | {'nnls setup':>10} {'iters':>9}"
    )
    print(header)
    print("-" * len(header))
    for n, r in SHAPES:
        print(_row(n, r, args.iters, args.repeats))


def _row(n, r, iters, repeats):
    rng = np.random.default_rng(n + r)
    c = rng.uniform(size=(n + 10, n))
    d = rng.uniform(size=(n + 10, r))
    a, rhs = c.T @ c, -c.T @ d
    opts = {"tol": 0.0, "max_iter": iters}

    def checked():
        return mg.solve(a, rhs, mg.NonNeg(), **opts)

    def unchecked():
        return mg.solve(a, rhs, mg.NonNeg(), check_convergence=False, **opts)

    checked()  # warm-up (Numba, BLAS)
    t_checked, t_unchecked = [], []
    for _ in range(repeats):  # alternate, so that noise hits both alike
        t_checked.append(_median_time(checked, 1))
        t_unchecked.append(_median_time(unchecked, 1))
    t_checked, t_unchecked = statistics.median(t_checked), statistics.median(t_unchecked)
    scaled = a / np.abs(a).max()
    with CpuBackend().limit_host_blas():  # as solve runs it
        t_psd = _median_time(lambda: check_psd(scaled), repeats)
    res = unchecked()
    t_sweep = res.timings["iterations"] / res.n_iter
    ls = [mg.nnls(c, d, **opts) for _ in range(repeats)]
    setup = statistics.median(x.timings["setup"] for x in ls)
    its = statistics.median(x.timings["iterations"] for x in ls)
    return (
        f"{n:>5} {r:>4} | {t_checked:>9.4f} {t_unchecked:>9.4f} "
        f"{t_checked / t_unchecked:>6.2f} | {t_psd:>9.4f} {t_sweep:>9.5f} "
        f"{t_psd / t_sweep:>7.1f} | {setup:>10.4f} {its:>9.4f}"
    )


if __name__ == "__main__":
    main()
