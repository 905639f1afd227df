"""Unmixing NNLS on Dask: throughput with 1 and 2 worker processes vs the in-memory call.

Problem: C (200 x 20) nonnegative endmember spectra, D = C X + noise with 2e6 right-hand
sides (pixels; ``--quick``: 2e5), X sparse and nonnegative.  D is generated chunk by
chunk on the workers (a seed per chunk): no process ever holds more than a chunk of it,
and the answer is never gathered (the run computes sum(x), the objective and the
converged fraction in one graph, so every block is solved once).

For each LocalCluster(n_workers=w, threads_per_worker=1, processes=True), w = 1, 2, with
``NUMBA_NUM_THREADS = cores // w`` per worker (so that w workers share the cores instead of
oversubscribing them), the table gives right-hand sides per second and each worker's memory:
its resident set size after a warm-up (imports, Numba) and its peak during the run (Linux
VmHWM, reset after the warm-up through /proc/self/clear_refs), next to the size of one chunk
of D.  The in-memory line is ``mg.nnls(C, D_chunks)`` in this process on
``--memory-chunks`` chunks (all cores), its throughput in the same units.

Examples
--------
    python benchmarks/bench_dask.py --quick
    python benchmarks/bench_dask.py                      # 2e6 right-hand sides
    python benchmarks/bench_dask.py --chunk 50000 --workers 1 2
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _machine import describe  # noqa: E402

import msm_gpu as mg  # noqa: E402

M, N = 200, 20  # bands x endmembers


def endmembers(seed=0):
    """C: nonnegative spectra (sums of 3 Gaussian bumps), unit-norm columns; cond(C) ~ 80."""
    rng = np.random.default_rng(seed)
    t = np.linspace(0.0, 1.0, M)[:, None]
    centres, widths = rng.uniform(0, 1, size=(3, N)), rng.uniform(0.02, 0.08, size=(3, N))
    C = sum(np.exp(-0.5 * ((t - centres[i]) / widths[i]) ** 2) for i in range(3))
    return C / np.linalg.norm(C, axis=0)


def make_chunk(block_id=None, *, C, cols, noise, seed):
    """One chunk of D (M x cols): abundances with 3 active endmembers per pixel + noise."""
    j = block_id[1]
    rng = np.random.default_rng([seed, j])
    X = np.zeros((N, cols))
    active = np.argsort(rng.random((N, cols)), axis=0)[:3]
    X[active, np.arange(cols)] = rng.dirichlet(np.ones(3), size=cols).T
    return C @ X + noise * rng.standard_normal((M, cols))


def dask_rhs(C, n_rhs, chunk, noise, seed):
    import dask.array as da

    n_chunks = n_rhs // chunk
    return da.map_blocks(
        make_chunk,
        C=C,
        cols=chunk,
        noise=noise,
        seed=seed,
        chunks=((M,), (chunk,) * n_chunks),
        dtype=np.float64,
        meta=np.empty((0, 0)),
    )


def reset_peak_rss():
    """Reset this process's peak RSS (Linux: write 5 to /proc/self/clear_refs); RSS in MiB.

    A worker process starts with the peak of the process it was forked from, so the
    peak is reset after the warm-up and read back after the run.
    """
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _proc_status("VmRSS")


def peak_rss_mib():
    """Peak resident set size (VmHWM) of this process since the last reset, in MiB."""
    return _proc_status("VmHWM")


def _proc_status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0  # kB
    return float("nan")


def run_cluster(n_workers, C, D, opts):
    import dask
    from dask.distributed import Client, LocalCluster

    cores = os.cpu_count() or 1
    env = {"NUMBA_NUM_THREADS": str(max(1, cores // n_workers))}
    with (
        LocalCluster(
            n_workers=n_workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            silence_logs=40,
            env=env,
        ) as cluster,
        Client(cluster) as client,
    ):
        client.run(_warm_solve, C, opts)  # imports + Numba on every worker
        before = client.run(reset_peak_rss)
        res = mg.nnls(C, D, **opts)
        t0 = time.perf_counter()
        xsum, fun, conv, n_iter = dask.compute(
            res.x.sum(), res.fun, res.converged_columns.mean(), res.n_iter
        )
        elapsed = time.perf_counter() - t0
        after = client.run(peak_rss_mib)
    return {
        "time": elapsed,
        "xsum": float(xsum),
        "fun": float(fun),
        "converged": float(conv),
        "n_iter": int(n_iter),
        "rss": [(before[w], after[w]) for w in sorted(after)],
    }


def _warm_solve(C, opts):
    rng = np.random.default_rng(1)
    mg.nnls(C, np.abs(rng.standard_normal((M, 64))), **opts)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2e5 right-hand sides")
    ap.add_argument("--rhs", type=float, default=2e6, help="right-hand sides (default 2e6)")
    ap.add_argument("--chunk", type=int, default=20000, help="columns per chunk")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--memory-chunks", type=int, default=2, help="chunks for the in-memory line")
    ap.add_argument("--noise", type=float, default=0.01)
    ap.add_argument("--tol", type=float, default=1e-6)
    ap.add_argument("--max-iter", type=int, default=1000)
    args = ap.parse_args(argv)
    n_rhs = int(2e5 if args.quick else args.rhs)
    n_rhs -= n_rhs % args.chunk
    opts = {"tol": args.tol, "max_iter": args.max_iter}
    print(describe())
    C = endmembers()
    D = dask_rhs(C, n_rhs, args.chunk, args.noise, seed=7)
    chunk_mib = M * args.chunk * 8 / 2**20
    print(
        f"\nNNLS unmixing: C {M} x {N}, {n_rhs:.3g} right-hand sides in {D.numblocks[1]} chunks"
        f" of {args.chunk} ({chunk_mib:.1f} MiB of D, {N * args.chunk * 8 / 2**20:.1f} MiB of X"
        f" each; all of D: {M * n_rhs * 8 / 2**30:.2f} GiB), tol={args.tol:g}\n"
    )

    # in memory: the same chunks, concatenated in this process
    k = min(args.memory_chunks, D.numblocks[1])
    D_mem = np.concatenate(
        [make_chunk((0, j), C=C, cols=args.chunk, noise=args.noise, seed=7) for j in range(k)],
        axis=1,
    )
    mg.nnls(C, D_mem[:, :64], **opts)  # Numba warm-up
    t0 = time.perf_counter()
    ref = mg.nnls(C, D_mem, **opts)
    t_mem = time.perf_counter() - t0
    rate_mem = D_mem.shape[1] / t_mem
    # check: the dask answer on the same chunks is the in-memory one
    sub = mg.nnls(C, D[:, : D_mem.shape[1]], **opts).x.compute(scheduler="sync")
    err = float(np.abs(sub - ref.x).max())

    header = f"{'run':<22}{'rhs/s':>12}{'vs memory':>11}{'time s':>9}  RSS MiB: start -> peak"
    print(header)
    print("-" * len(header))
    print(
        f"{'in memory (' + str(D_mem.shape[1]) + ')':<22}{rate_mem:>12.4g}{1.0:>11.2f}"
        f"{t_mem:>9.2f}  this process: {peak_rss_mib():.0f} (peak, D in memory)"
    )
    for w in args.workers:
        out = run_cluster(w, C, D, opts)
        rate = n_rhs / out["time"]
        mem = ", ".join(f"{b:.0f} -> {a:.0f}" for b, a in out["rss"])
        print(
            f"{str(w) + ' worker(s)':<22}{rate:>12.4g}{rate / rate_mem:>11.2f}"
            f"{out['time']:>9.2f}  {mem}"
        )
        print(
            f"{'':<22}fun {out['fun']:.6g}, converged {100 * out['converged']:.2f}%, "
            f"n_iter {out['n_iter']}, sum x {out['xsum']:.6g}"
        )
    print(
        f"\ndask vs in-memory x on the first {D_mem.shape[1]} columns: max |diff| = {err:.2e}"
        f"\nchunk of D: {chunk_mib:.1f} MiB; a worker's peak growth is its own few chunks"
        " (D block, X block, the solver's copies), never the whole D."
    )


if __name__ == "__main__":
    main()
