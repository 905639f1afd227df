"""Batched NNLS on the GPU as users call it: ``mg.nnls(C, D)`` with CuPy arrays, vs the CPU.

Usage::

    python benchmarks/bench_gpu_nnls.py [--quick] [--out DIR]

The shapes of ``benchmarks/bench_nnls.py`` (float64 and float32) plus an NNLS with a
uniform Gram matrix (n = 256).  Per shape, wall-clock seconds (the GPU synchronised) of

    cpu       mg.nnls(C, D) on NumPy arrays (the default: MSM + exact finish)
    gpu       mg.nnls(C, D) on CuPy arrays (the same default, CUDA backend)
    gpu-cg    the same with every face solved by conjugate gradients
              (finish.DIRECT_MAX_N_DEVICE = 0)
    gpu-msm   mg.nnls(C, D, finish=None) on CuPy arrays (the paper's plain MSM)
    gpu-apg   mg.nnls(C, D, method="apg") on CuPy arrays: the library's FISTA (constant
              step 1/L) at its default options (1000 iterations or tol = 1e-6), which
              records the objective and checks the stopping rule every iteration
    gpu-fista FISTA as users write it by hand in CuPy (:func:`hand_fista`): G = C'C,
              L = lambda_max(G), FISTA_ITERATIONS iterations of one GEMM and a few
              elementwise kernels, no stopping test

and the objective gap sum_k (F_k - F_cpu,k) / sum_k F_cpu,k and max |x - x_cpu| against
the CPU default, which is exact (``tests/test_finish.py`` checks it against SciPy).  Each
variant runs twice and the second run is timed: CuPy compiles every elementwise and
reduction kernel at its first use on a machine (seconds; then cached on disk).
Without a usable GPU it prints why and exits with status 0.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's msm_gpu

from bench_nnls import make_problem  # noqa: E402

#: name -> (r, r with --quick)
SHAPES = {
    "dense": (1000, 1000),
    "unmixing": (100_000, 20_000),
    "spectra": (5000, 2000),
    "large": (2048, 256),
    "gram256": (20_000, 5000),
}
VARIANTS = ("cpu", "gpu", "gpu-cg", "gpu-msm", "gpu-apg", "gpu-fista")

#: Iterations of the hand-written FISTA (the library's default max_iter).
FISTA_ITERATIONS = 1000


class HandResult:
    """What the table reads of a result, for :func:`hand_fista`."""

    def __init__(self, x, n_iter):
        self.x, self.n_iter = x, n_iter
        self.info, self.timings = {}, {}
        self.message = f"hand-written FISTA, {n_iter} iterations"


def hand_fista(xp, c, d, iterations=FISTA_ITERATIONS):
    """min_{X >= 0} 1/2 ||C X - D||^2 by FISTA (Beck & Teboulle), step 1/L with
    L = lambda_max(C'C), from X = 0, as a user writes it on the GPU."""
    g = c.T @ c
    b = c.T @ d
    step = 1.0 / float(xp.linalg.eigvalsh(g)[-1])
    x = xp.zeros_like(b)
    y, t = x, 1.0
    for _ in range(iterations):
        x_new = xp.maximum(y - step * (g @ y - b), 0)
        t_new = (1.0 + math.sqrt(1.0 + 4.0 * t * t)) / 2.0
        y = x_new + ((t - 1.0) / t_new) * (x_new - x)
        x, t = x_new, t_new
    return HandResult(x, iterations)


def problem(name, r):
    if name != "gram256":
        return make_problem(name, r)
    rng = np.random.default_rng(0)
    c = rng.uniform(size=(266, 256))
    return c, rng.uniform(size=(266, r))


def run(variant, c, d, cupy):
    import msm_gpu as mg
    from msm_gpu.finish import columns as finish

    saved = finish.DIRECT_MAX_N_DEVICE
    if variant == "gpu-cg":
        finish.DIRECT_MAX_N_DEVICE = 0
    try:
        if variant != "cpu":
            c, d = cupy.asarray(c), cupy.asarray(d)
            cupy.cuda.Device().synchronize()
        t0 = time.perf_counter()
        if variant == "gpu-fista":
            res = hand_fista(cupy, c, d)
        else:
            options = {"gpu-msm": {"finish": None}, "gpu-apg": {"method": "apg"}}
            res = mg.nnls(c, d, **options.get(variant, {}))
        if variant != "cpu":
            cupy.cuda.Device().synchronize()
        seconds = time.perf_counter() - t0
    finally:
        finish.DIRECT_MAX_N_DEVICE = saved
    x = cupy.asnumpy(res.x) if variant != "cpu" else res.x
    return np.asarray(x, dtype=np.float64), seconds, res


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller r")
    parser.add_argument("--dtype", choices=["float32", "float64", "both"], default="both")
    parser.add_argument("--out", type=Path, default=None, help="folder for the JSON table")
    args = parser.parse_args(argv)

    from msm_gpu.backends.cuda.backend import cuda_unavailable_reason

    reason = cuda_unavailable_reason()
    if reason is not None:
        print(f"GPU benchmark skipped: {reason}")
        return 0
    import cupy
    from bench_gpu import machine_lines

    import msm_gpu as mg

    print("\n".join(machine_lines(cupy)))
    dtypes = {"float32": [np.float32], "float64": [np.float64], "both": [np.float64, np.float32]}[
        args.dtype
    ]
    print(
        f"{'problem':>9} {'dtype':>8} {'r':>7} {'variant':>9} {'seconds':>9} {'x cpu':>7} "
        f"{'gap':>9} {'max dx':>9} {'iters':>6} {'finish':>7}  message"
    )
    table = []
    for name, (r_full, r_quick) in SHAPES.items():
        r = r_quick if args.quick else r_full
        for dtype in dtypes:
            c, d = problem(name, r)
            c, d = c.astype(dtype), d.astype(dtype)
            mg.nnls(c, d[:, :2])  # warm-up: compilation on both backends
            mg.nnls(cupy.asarray(c), cupy.asarray(d[:, :2]))
            ref = None
            for variant in VARIANTS:
                try:
                    # twice, the second timed: CuPy compiles each elementwise/reduction
                    # kernel at its first use on a machine (then cached on disk)
                    run(variant, c, d, cupy)
                    x, seconds, res = run(variant, c, d, cupy)
                except Exception as exc:  # reported, not fatal
                    print(
                        f"{name:>9} {np.dtype(dtype).name:>8} {r:>7} {variant:>9}  failed: {exc!r}"
                    )
                    continue
                c64, d64 = c.astype(np.float64), d.astype(np.float64)
                f = 0.5 * np.sum((c64 @ x - d64) ** 2, axis=0)
                if ref is None:
                    ref = (x, f, seconds)
                gap = float((f - ref[1]).sum() / ref[1].sum())
                dx = float(np.abs(x - ref[0]).max())
                row = dict(
                    problem=name,
                    dtype=np.dtype(dtype).name,
                    r=r,
                    variant=variant,
                    seconds=seconds,
                    speedup=ref[2] / seconds,
                    gap=gap,
                    max_dx=dx,
                    n_iter=int(res.n_iter),
                    finish=str(res.info.get("finish_method", "-")),
                    message=res.message,
                    timings={k: float(v) for k, v in res.timings.items()},
                )
                table.append(row)
                print(
                    f"{name:>9} {row['dtype']:>8} {r:>7} {variant:>9} {seconds:9.3f} "
                    f"{row['speedup']:7.1f} {gap:9.1e} {dx:9.1e} {row['n_iter']:>6} "
                    f"{row['finish']:>7}  {res.message[:60]}",
                    flush=True,
                )
            cupy.get_default_memory_pool().free_all_blocks()
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / "bench_gpu_nnls.json"
        path.write_text(json.dumps({"machine": machine_lines(cupy), "rows": table}, indent=1))
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
