"""Peak memory of a big batch against the size of its data and its answer.

For each number of right-hand sides r, a fresh process builds C (m x n) and D (m x r),
then measures one call's peak resident memory beyond what it held before the call (Linux:
the peak is reset through ``/proc/self/clear_refs`` and read as ``VmHWM``), its time and
time per column, at default options (blocks sized by the default budget) and, with
``--one-block``, with one block for the whole batch (what every call did before blocks).
Target: extra peak <= 1.2 x size(x) + 512 MB.

    python benchmarks/bench_memory.py                     # r = 1e5, 3e5, 1e6
    python benchmarks/bench_memory.py --r 1e5 3e6 --one-block --json out.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, sys, time
import numpy as np
import msm_gpu as mg

m, n, r = (int(a) for a in sys.argv[1:4])
kind, max_memory = sys.argv[4], sys.argv[5]
max_memory = None if max_memory == "default" else int(float(max_memory))
rng = np.random.default_rng(0)
C = rng.uniform(size=(m, n))
D = np.empty((m, r))
for s in range(0, r, 100_000):  # built in slices: no r-sized temporaries
    e = min(r, s + 100_000)
    D[:, s:e] = C @ rng.uniform(size=(n, e - s)) + 0.05 * rng.standard_normal((m, e - s))
call = {
    "nnls": lambda: mg.nnls(C, D, max_memory=max_memory),
    "l1": lambda: mg.least_squares(C, D, mg.L1(1.0), max_memory=max_memory),
}[kind]
mg.nnls(C, D[:, :200]); mg.least_squares(C, D[:, :200], mg.L1(1.0))  # compiled


def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024


before = status("VmRSS")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset the peak (VmHWM) to the current RSS
t = time.perf_counter()
res = call()
elapsed = time.perf_counter() - t
peak = status("VmHWM")
print(json.dumps({
    "m": m, "n": n, "r": r, "kind": kind, "max_memory": max_memory,
    "seconds": elapsed, "us_per_column": 1e6 * elapsed / r,
    "extra_peak_bytes": peak - before, "x_bytes": res.x.nbytes, "d_bytes": D.nbytes,
    "n_blocks": res.info.get("n_blocks"), "block_columns": res.info.get("block_columns"),
    "converged": bool(res.converged),
}))
"""


def run_case(m, n, r, kind, max_memory):
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(m), str(n), str(r), kind, str(max_memory)],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        return {"r": r, "kind": kind, "max_memory": max_memory, "error": out.stderr[-500:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--r", type=float, nargs="+", default=[1e5, 3e5, 1e6])
    parser.add_argument("--m", type=int, default=200)
    parser.add_argument("--n", type=int, default=20)
    parser.add_argument("--kind", choices=["nnls", "l1"], default="nnls")
    parser.add_argument("--one-block", action="store_true", help="also one block per batch")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args(argv)

    settings = ["default"] + (["1e13"] if args.one_block else [])
    rows = []
    header = (
        f"{'r':>9} {'blocks':>16} {'D MB':>7} {'x MB':>6} {'extra peak MB':>13} "
        f"{'/ size(x)':>9} {'target MB':>9} {'s':>7} {'us/col':>7}"
    )
    print(f"{args.kind}: C {args.m} x {args.n}, float64")
    print(header)
    for r in (int(v) for v in args.r):
        for setting in settings:
            row = run_case(args.m, args.n, r, args.kind, setting)
            rows.append(row)
            if "error" in row:
                print(f"{r:>9} {setting:>16} failed: {row['error']}")
                continue
            mb = 1e-6
            target = 1.2 * row["x_bytes"] + 512 * 2**20
            blocks = f"{row['n_blocks']} x {row['block_columns']}"
            print(
                f"{r:>9} {blocks:>16} {row['d_bytes'] * mb:>7.0f} {row['x_bytes'] * mb:>6.0f} "
                f"{row['extra_peak_bytes'] * mb:>13.0f} "
                f"{row['extra_peak_bytes'] / row['x_bytes']:>9.2f} {target * mb:>9.0f} "
                f"{row['seconds']:>7.2f} {row['us_per_column']:>7.2f}"
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
