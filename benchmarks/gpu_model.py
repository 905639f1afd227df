"""Predicted time of one MSM iteration vs one GEMM on a GPU (the roofline model).

Usage::

    python benchmarks/gpu_model.py [--penalty 0] [--bw-h100 3.35e12] [--bw-h200 4.8e12]

For every shape of ``bench_gpu.py`` plus n in {8, 20, 64} x r in {1e6, 1e7} and both
dtypes it prints, per layout the rule considers, the bytes, FMAs and warp-instructions
of one iteration, the predicted times on an H100 and an H200, the predicted MSM/GEMM
ratio and the layout that ``msm_gpu.backends.cuda.model.choose_layout`` picks (the same
function the CUDA backend calls).  Nothing is measured here.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's msm_gpu

from bench_gpu import SHAPES  # noqa: E402

from msm_gpu.backends.cuda.model import H100, H200, candidates, choose_layout, gemm_cost

EXTRA = [(n, r) for n in (8, 20, 64) for r in (10**6, 10**7)]
TARGET = 1.5


def rows(penalty, devices):
    """One dict per shape, dtype and device."""
    out = []
    for n, r in SHAPES + [s for s in EXTRA if s not in SHAPES]:
        for itemsize, dtype in ((8, "float64"), (4, "float32")):
            for dev in devices:
                best = choose_layout(n, r, itemsize, penalty, dev=dev)
                gemm = gemm_cost(n, r, itemsize, dev)
                per_layout = {}
                for c in candidates(n, r, itemsize, penalty, dev=dev):
                    if c.layout not in per_layout or c.seconds < per_layout[c.layout].seconds:
                        per_layout[c.layout] = c
                out.append(
                    dict(n=n, r=r, dtype=dtype, dev=dev, best=best, gemm=gemm, all=per_layout)
                )
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--penalty", type=int, default=0, help="penalty code (0 = box)")
    parser.add_argument("--bw-h100", type=float, default=H100.hbm_bytes_per_s)
    parser.add_argument("--bw-h200", type=float, default=H200.hbm_bytes_per_s)
    args = parser.parse_args(argv)
    devices = [
        replace(H100, hbm_bytes_per_s=args.bw_h100),
        replace(H200, hbm_bytes_per_s=args.bw_h200),
    ]
    rates = ", ".join(f"{d.name} {d.hbm_bytes_per_s / 1e12:.2f} TB/s" for d in devices)
    print(
        f"model rates: {rates};"
        f" FP64 {H100.fp64_flops / 1e12:.1f} TF (tensor {H100.fp64_tensor_flops / 1e12:.0f} TF,"
        f" GEMM only), FP32 {H100.fp32_flops / 1e12:.0f} TF (no TF32),"
        f" {H100.issue_per_s / 1e12:.2f} T warp-instr/s; target MSM/GEMM <= {TARGET}"
    )
    head = (
        f"{'n':>5} {'r':>9} {'dtype':>7} {'dev':>4} {'layout':>8} {'tw':>4} {'T':>4} "
        f"{'HBM GB':>7} {'GFMA':>7} {'Ginstr':>7} {'MSM us':>9} {'GEMM us':>9} {'ratio':>6}"
        f"  alternatives (us)"
    )
    print(head)
    misses = 0
    for row in rows(args.penalty, devices):
        b, g = row["best"], row["gemm"]
        ratio = b.seconds / g.seconds
        misses += ratio > TARGET
        alts = ", ".join(
            f"{k} {v.seconds * 1e6:.0f}" for k, v in sorted(row["all"].items()) if k != b.layout
        )
        print(
            f"{row['n']:>5} {row['r']:>9} {row['dtype']:>7} {row['dev'].name:>4} {b.layout:>8} "
            f"{b.tw:>4} {b.panel or '-':>4} {b.hbm_bytes / 1e9:7.3f} {b.fmas / 1e9:7.2f} "
            f"{b.instructions / 1e9:7.3f} {b.seconds * 1e6:9.1f} {g.seconds * 1e6:9.1f} "
            f"{ratio:6.2f}{' MISS' if ratio > TARGET else '     '}  {alts}"
        )
    print(f"{misses} rows predicted above the target {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
