"""GPU MSM iteration vs one cuBLAS GEMM of the same shape, and vs the CPU backend.

Usage::

    python benchmarks/bench_gpu.py [--quick] [--repeats 10] [--no-cpu] [--out benchmarks/out]

For every shape (n, r) and dtype it prints

* the time of one MSM iteration on the GPU (best panel size of a few, and the default),
* the time of one cuBLAS GEMM ``A @ X`` of the same shape and their ratio
  (target: <= 1.5),
* the time of one iteration of the CPU backend and the GPU speed-up
  (target: >= 20x for n >= 256, r >= 10^4).

* beside it the time the roofline model predicts (``msm_gpu.backends.cuda.model``, the
  rule that picks the layout; ``benchmarks/gpu_model.py`` prints the whole table) and the
  layout that ran,
* ``msm_gpu.solve`` as users call it (``tol=0``, ``finish=None``, objective recorded:
  validation, setup and copies included), timed for 1 and 11 iterations: one more
  iteration ("solve/it") and the fixed cost of a call ("fixed"), in GEMMs of the shape.

Without a usable GPU it prints why and exits with status 0.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's msm_gpu

SHAPES = [
    (200, 1000),
    (1000, 4096),
    (256, 50000),
    (64, 100_000),
    (64, 1_000_000),
    (256, 100_000),
    (256, 1_000_000),
]
QUICK_SHAPES = [(200, 1000), (256, 50000), (64, 100_000)]
PANELS = (32, 64, 128, 256)
TARGET_RATIO = 1.5
TARGET_SPEEDUP = 20.0


def machine_lines(cupy):
    """GPU, CUDA and library versions (plus the CPU facts of benchmarks/_machine.py)."""
    lines = []
    try:
        from _machine import describe

        lines.append(describe())
    except Exception as exc:  # the CPU description is a nicety
        lines.append(f"(no CPU description: {exc})")
    dev = cupy.cuda.Device()
    props = cupy.cuda.runtime.getDeviceProperties(dev.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    lines.append(
        f"GPU: {name}, {props['multiProcessorCount']} SMs, "
        f"{props['totalGlobalMem'] / 2**30:.1f} GiB, compute capability "
        f"{props['major']}.{props['minor']}; CuPy {cupy.__version__}, CUDA runtime "
        f"{cupy.cuda.runtime.runtimeGetVersion()}, driver {cupy.cuda.runtime.driverGetVersion()}"
    )
    return lines


def make_problem(cupy, n, r, dtype, seed=0):
    """NNLS-type data on the GPU: A = C'C, R = -C'B with uniform C, B; X0 = |N(0,1)|."""
    rng = cupy.random.default_rng(seed)
    c = rng.random((n + 10, n), dtype=np.float64)
    a = (c.T @ c).astype(dtype)
    rhs = cupy.empty((n, r), dtype=dtype)
    step = max(1, 2**26 // (n + 10))  # build R in slabs to bound the temporary
    for k in range(0, r, step):
        cols = min(step, r - k)
        rhs[:, k : k + cols] = (-c.T @ rng.random((n + 10, cols), dtype=np.float64)).astype(dtype)
    x0 = cupy.abs(rng.standard_normal((n, r), dtype=np.float64)).astype(dtype)
    return a, rhs, x0


def gpu_median(cupy, fn, repeats):
    """Median seconds of ``fn()`` measured with CUDA events (after one warm-up call)."""
    fn()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for _ in range(repeats):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end) / 1e3)
    return statistics.median(times)


def time_gpu(cupy, backend, data, split, penalty, panel, repeats):
    """(median seconds of one sweep, the layout that ran)."""
    a, rhs, x0 = data
    state = backend.start(a, rhs, x0, split, penalty.table(a.shape[0]), penalty.code, panel)
    seconds = gpu_median(cupy, state.sweep, repeats)
    layout = state.layout
    del state
    cupy.get_default_memory_pool().free_all_blocks()
    return seconds, layout


#: Iterations of the longer solve() call: (t(K) - t(1)) / (K - 1) is one more iteration.
SOLVE_ITERS = 11


def time_solve(cupy, data, penalty, repeats):
    """``solve(A, R, penalty, x0=X0, tol=0, max_iter=k, finish=None)`` as users call it
    (objective recorded, validation and copies included), for k = 1 and SOLVE_ITERS:
    returns (seconds of one more iteration, fixed seconds of a call)."""
    from msm_gpu import solve

    a, rhs, x0 = data

    def run(k):
        return lambda: solve(
            a, rhs, penalty, x0=x0, backend="cuda", max_iter=k, tol=0.0, finish=None
        )

    t1 = gpu_median(cupy, run(1), max(3, repeats // 3))
    tk = gpu_median(cupy, run(SOLVE_ITERS), max(3, repeats // 3))
    per_iter = (tk - t1) / (SOLVE_ITERS - 1)
    return per_iter, t1 - per_iter


def time_cpu(data_host, split, penalty, panel, repeats):
    """Median seconds of one iteration of the CPU backend, or None if it is missing."""
    try:
        from msm_gpu.backends.cpu.backend import CpuBackend
    except ImportError as exc:
        print(f"  (CPU backend unavailable: {exc})")
        return None
    a, rhs, x0 = data_host
    state = CpuBackend().start(a, rhs, x0, split, penalty.table(a.shape[0]), penalty.code, panel)
    state.sweep()  # compile / warm up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        state.sweep()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_shape(cupy, backend, n, r, dtype, penalty, args):
    """One row of the table (a dict)."""
    from msm_gpu.backends.base import default_panel
    from msm_gpu.solvers.splitting import make_splitting

    data = make_problem(cupy, n, r, dtype)
    a, _, x0 = data
    split = make_splitting(
        cupy.asnumpy(cupy.diag(a)).astype(np.float64), 1.0, 0.01, penalty.is_convex
    )
    t_gemm = gpu_median(cupy, lambda: a @ x0, args.repeats)
    default = default_panel(n)
    panels = sorted({default, *(p for p in PANELS if p <= n)})
    runs = {p: time_gpu(cupy, backend, data, split, penalty, p, args.repeats) for p in panels}
    by_panel = {p: t for p, (t, _) in runs.items()}
    best = min(by_panel, key=by_panel.get)
    from msm_gpu.backends.cuda.model import choose_layout

    predicted = choose_layout(n, r, np.dtype(dtype).itemsize, penalty.code, default).seconds
    t_iter, t_fixed = time_solve(cupy, data, penalty, args.repeats)
    row = dict(
        n=n,
        r=r,
        dtype=np.dtype(dtype).name,
        gemm_ms=1e3 * t_gemm,
        iter_ms=1e3 * by_panel[best],
        best_panel=best,
        default_panel=default,
        default_iter_ms=1e3 * by_panel[default],
        ratio=by_panel[best] / t_gemm,
        layout=runs[best][1],
        predicted_ms=1e3 * predicted,
        solve_iter_ms=1e3 * t_iter,
        solve_fixed_ms=1e3 * t_fixed,
        solve_iter_gemm=t_iter / t_gemm,
        solve_fixed_gemm=t_fixed / t_gemm,
        cpu_ms=None,
        speedup=None,
    )
    if not args.no_cpu:
        host = tuple(cupy.asnumpy(x) for x in data)
        t_cpu = time_cpu(host, split, penalty, default, args.cpu_repeats)
        if t_cpu is not None:
            row.update(cpu_ms=1e3 * t_cpu, speedup=t_cpu / by_panel[best])
    del data
    cupy.get_default_memory_pool().free_all_blocks()
    return row


def verdict(row):
    marks = ["ratio " + ("ok" if row["ratio"] <= TARGET_RATIO else "MISS")]
    if row["speedup"] is not None and row["n"] >= 256 and row["r"] >= 10_000:
        marks.append("speed-up " + ("ok" if row["speedup"] >= TARGET_SPEEDUP else "MISS"))
    return ", ".join(marks)


def print_row(row):
    cpu = f"{row['cpu_ms']:10.2f}" if row["cpu_ms"] is not None else f"{'-':>10}"
    speed = f"{row['speedup']:8.1f}" if row["speedup"] is not None else f"{'-':>8}"
    print(
        f"{row['n']:>6} {row['r']:>8} {row['dtype']:>8} {row['layout']:>8} {row['iter_ms']:10.3f} "
        f"{row['predicted_ms']:10.3f} {row['solve_iter_gemm']:8.2f} {row['solve_fixed_gemm']:8.2f} "
        f"{row['best_panel']:>5} {row['default_iter_ms']:10.3f} {row['gemm_ms']:10.3f} "
        f"{row['ratio']:6.2f} {cpu} {speed}  {verdict(row)}",
        flush=True,
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few small shapes only")
    parser.add_argument("--repeats", type=int, default=10, help="GPU timings per median")
    parser.add_argument("--cpu-repeats", type=int, default=3, help="CPU timings per median")
    parser.add_argument("--no-cpu", action="store_true", help="skip the CPU backend")
    parser.add_argument("--dtype", choices=["float32", "float64", "both"], default="both")
    parser.add_argument("--penalty", default="nonneg", choices=["nonneg", "l1", "l0"])
    parser.add_argument("--out", type=Path, default=None, help="folder for bench_gpu.json")
    args = parser.parse_args(argv)

    from msm_gpu.backends.cuda.backend import CudaBackend, cuda_unavailable_reason

    reason = cuda_unavailable_reason()
    if reason is not None:
        print(f"GPU benchmark skipped: {reason}")
        return 0
    import cupy

    from msm_gpu import penalties

    penalty = {"nonneg": penalties.NonNeg(), "l1": penalties.L1(0.1), "l0": penalties.L0(0.1)}[
        args.penalty
    ]
    dtypes = {"float32": [np.float32], "float64": [np.float64], "both": [np.float64, np.float32]}[
        args.dtype
    ]
    backend = CudaBackend()
    print("\n".join(machine_lines(cupy)))
    print(
        f"penalty {penalty!r}; medians of {args.repeats} GPU / {args.cpu_repeats} CPU runs;"
        f" targets: iter/GEMM <= {TARGET_RATIO}, speed-up >= {TARGET_SPEEDUP}x"
        " (n >= 256, r >= 1e4)"
    )
    print(
        f"{'n':>6} {'r':>8} {'dtype':>8} {'layout':>8} {'iter [ms]':>10} {'model[ms]':>10} "
        f"{'solve/it':>8} {'fixed':>8} {'T':>5} {'T=dflt':>10} "
        f"{'GEMM [ms]':>10} {'ratio':>6} {'CPU [ms]':>10} {'speedup':>8}"
    )
    rows = []
    for n, r in QUICK_SHAPES if args.quick else SHAPES:
        for dtype in dtypes:
            try:
                row = bench_shape(cupy, backend, n, r, dtype, penalty, args)
            except cupy.cuda.memory.OutOfMemoryError as exc:
                print(
                    f"{n:>6} {r:>8} {np.dtype(dtype).name:>8}  skipped: out of GPU memory ({exc})"
                )
                cupy.get_default_memory_pool().free_all_blocks()
                continue
            rows.append(row)
            print_row(row)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / "bench_gpu.json"
        path.write_text(json.dumps({"machine": machine_lines(cupy), "rows": rows}, indent=1))
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
