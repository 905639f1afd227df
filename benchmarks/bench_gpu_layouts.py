"""Every CUDA sweep layout, tile width and panel size, measured beside the model's prediction.

Usage::

    python benchmarks/bench_gpu_layouts.py [--quick] [--repeats 5] [--out DIR]

For every shape (n, r) and dtype it times one sweep (``state.sweep()``, CUDA events,
median of ``--repeats`` after a warm-up) of every feasible (layout, tile width, panel)
of ``msm_gpu.backends.cuda.model.candidates``, next to one cuBLAS GEMM ``A @ X`` of the
same shape and the time the model predicts for that configuration, and marks the one
the layout rule (``choose_layout``) picks.  The table is what the rule is calibrated
against (``cuda_model.py``'s docstring); ``--out DIR`` writes it as JSON.

Without a usable GPU it prints why and exits with status 0.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's msm_gpu

from bench_gpu import gpu_median, machine_lines, make_problem  # noqa: E402

SHAPES = [
    (8, 1_000_000),
    (20, 1_000_000),
    (64, 100_000),
    (64, 1_000_000),
    (200, 1000),
    (256, 50_000),
    (256, 200_000),
    (1000, 4096),
]
QUICK_SHAPES = [(20, 1_000_000), (64, 100_000), (256, 50_000), (1000, 4096)]
PANELS = (16, 32, 64, 128)


def configurations(n, r, itemsize, code):
    """(layout, tile width, panel) of every feasible candidate, panels from PANELS."""
    from msm_gpu.backends.cuda.model import candidates

    seen = set()
    for panel in PANELS:
        for c in candidates(n, r, itemsize, code, min(panel, n)):
            key = (c.layout, c.tw, c.panel if c.layout == "panel" else 0)
            if key not in seen:
                seen.add(key)
                yield key, c.seconds


def bench_shape(cupy, backend, n, r, dtype, penalty, repeats):
    from msm_gpu.backends.base import default_panel
    from msm_gpu.backends.cuda.model import choose_layout
    from msm_gpu.solvers.splitting import make_splitting

    itemsize = np.dtype(dtype).itemsize
    a, rhs, x0 = make_problem(cupy, n, r, dtype)
    split = make_splitting(
        cupy.asnumpy(cupy.diag(a)).astype(np.float64), 1.0, 0.01, penalty.is_convex
    )
    table = penalty.table(n)
    t_gemm = gpu_median(cupy, lambda: a @ x0, repeats)
    pick = choose_layout(n, r, itemsize, penalty.code, min(default_panel(n), n))
    pick_key = (pick.layout, pick.tw, pick.panel if pick.layout == "panel" else 0)
    rows = []
    for (layout, tw, panel), predicted in configurations(n, r, itemsize, penalty.code):
        try:
            state = backend.start(
                a, rhs, x0, split, table, penalty.code, max(panel, 1), layout=layout, tile_width=tw
            )
            got = (state.layout, state.choice.tw, state.panel if state.layout == "panel" else 0)
            seconds = gpu_median(cupy, state.sweep, repeats)
            regs = getattr(state._launch._function(state._kernel), "num_regs", -1)
            del state
        except Exception as exc:  # a configuration that fails is reported, not fatal
            print(f"  {layout} tw={tw} T={panel}: {type(exc).__name__}: {exc}", flush=True)
            continue
        rows.append(
            dict(
                n=n,
                r=r,
                dtype=np.dtype(dtype).name,
                layout=got[0],
                tw=got[1],
                panel=got[2],
                ms=1e3 * seconds,
                model_ms=1e3 * predicted,
                gemm_ms=1e3 * t_gemm,
                ratio=seconds / t_gemm,
                picked=got == pick_key,
                regs=int(regs),
            )
        )
    cupy.get_default_memory_pool().free_all_blocks()
    return rows


def print_rows(rows):
    best = min(rows, key=lambda row: row["ms"]) if rows else None
    for row in sorted(rows, key=lambda row: row["ms"]):
        marks = ("<- rule" if row["picked"] else "") + (" best" if row is best else "")
        print(
            f"{row['n']:>6} {row['r']:>8} {row['dtype']:>8} {row['layout']:>9} {row['tw']:>4} "
            f"{row['panel']:>5} {row['ms']:10.3f} {row['model_ms']:10.3f} {row['gemm_ms']:9.3f} "
            f"{row['ratio']:8.2f} {row['regs']:5d}  {marks}",
            flush=True,
        )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="four shapes only")
    parser.add_argument("--repeats", type=int, default=5, help="GPU timings per median")
    parser.add_argument("--dtype", choices=["float32", "float64", "both"], default="both")
    parser.add_argument("--out", type=Path, default=None, help="folder for the JSON table")
    args = parser.parse_args(argv)

    from msm_gpu.backends.cuda.backend import CudaBackend, cuda_unavailable_reason

    reason = cuda_unavailable_reason()
    if reason is not None:
        print(f"GPU benchmark skipped: {reason}")
        return 0
    import cupy

    from msm_gpu import penalties

    penalty = penalties.NonNeg()
    dtypes = {"float32": [np.float32], "float64": [np.float64], "both": [np.float64, np.float32]}[
        args.dtype
    ]
    backend = CudaBackend()
    print("\n".join(machine_lines(cupy)))
    print(f"one sweep, NonNeg, median of {args.repeats}; ratio = sweep / GEMM A @ X")
    print(
        f"{'n':>6} {'r':>8} {'dtype':>8} {'layout':>9} {'tw':>4} {'T':>5} {'sweep[ms]':>10} "
        f"{'model[ms]':>10} {'GEMM[ms]':>9} {'ratio':>8} {'regs':>5}"
    )
    table = []
    for n, r in QUICK_SHAPES if args.quick else SHAPES:
        for dtype in dtypes:
            try:
                rows = bench_shape(cupy, backend, n, r, dtype, penalty, args.repeats)
            except cupy.cuda.memory.OutOfMemoryError as exc:
                print(
                    f"{n:>6} {r:>8} {np.dtype(dtype).name:>8}  skipped: out of GPU memory ({exc})"
                )
                cupy.get_default_memory_pool().free_all_blocks()
                continue
            print_rows(rows)
            table.extend(rows)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / "bench_gpu_layouts.json"
        path.write_text(json.dumps({"machine": machine_lines(cupy), "rows": table}, indent=1))
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
