"""First-call time of each public road: import, a cold Numba cache, a warm one (issue 37).

For every road (a small problem, so that the time measured is compilation, not solving)
two fresh Python processes run one after the other, sharing a new, empty kernel cache
folder (``MSM_GPU_CACHE_DIR``; ``NUMBA_CACHE_DIR`` is removed from their environment so
that the folder is used):

1. cold: ``import msm_gpu`` (and the road's public names: an estimator's module imports
   scikit-learn), the first call (every kernel it needs compiled and written to the
   folder) and a second call in the same process;
2. warm cache: the same in a new process, whose first call loads the kernels from the
   folder.

The table gives wall seconds of the import, of the cold first call (and its CPU seconds:
compilation runs on one thread, so beside a busy neighbour the CPU time is the steadier
figure), of the warm-cache first call and of the second call.  The ``numba_floor`` road is
no road of the package: a one-line kernel cached the same way, whose warm-cache first call
is what Numba's start (its target context, the registries it imports) costs any caller,
the floor under every other road's.  The ``demo`` road times the
whole ``msm-gpu demo --no-plot`` command instead (first call: the command's wall time;
import and second call: none).

``--profile`` also lists, per road, the kernels compiled on the cold first call: the
compile time of each dispatcher (its own, without the dispatchers it calls, which are
listed on their own lines) and how many specialisations (signatures) it compiled.

Examples
--------
    python benchmarks/bench_first_call.py                     # every road, ~10 min (2 cores)
    python benchmarks/bench_first_call.py --roads nnls ls_l1 --profile
    python benchmarks/bench_first_call.py --roads demo --json first_call.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

#: Roads timed by default, in this order (``--roads`` picks a subset).
PENALTY_ROADS = ("nonneg", "box", "l1", "nonnegl1", "l0", "lp", "zero")
ROADS = (
    "nnls",
    "nnls_wide",
    *(f"ls_{p}" for p in PENALTY_ROADS),
    "solve",
    "nmf",
    "nmf_beta",
    "denoise",
    "logistic",
    "numba_floor",
    "demo",
)


# -- the roads (run in the child process) -------------------------------------------------


def _penalty(mg, name):
    return {
        "nonneg": lambda: mg.NonNeg(),
        "box": lambda: mg.Box(0.0, 0.5),
        "l1": lambda: mg.L1(0.1),
        "nonnegl1": lambda: mg.NonNegL1(0.1),
        "l0": lambda: mg.L0(0.1),
        "lp": lambda: mg.Lp(0.1, 0.5),
        "zero": lambda: mg.Zero(),
    }[name]()


def _road(mg, np, road):
    """A no-argument callable running ``road`` once on a small problem (data built here,
    outside the timing)."""
    rng = np.random.default_rng(0)
    C = rng.uniform(size=(50, 20))
    D = rng.uniform(size=(50, 10))
    if road == "nnls":
        return lambda: mg.nnls(C, D)
    if road == "nnls_wide":  # more unknowns than equations: the design form
        wide = rng.uniform(size=(20, 200))
        return lambda: mg.nnls(wide, wide[:, :3].sum(axis=1))
    if road.startswith("ls_"):
        penalty = _penalty(mg, road[3:])
        return lambda: mg.least_squares(C, D, penalty=penalty)
    if road == "solve":
        A, R = C.T @ C, -C.T @ D
        return lambda: mg.solve(A, R, penalty=mg.NonNeg())
    # the applications' names are resolved here, with the imports (an estimator class needs
    # scikit-learn's, which is the import's cost, not the first call's)
    if road == "nmf":
        Y = rng.uniform(size=(30, 20))
        NMF = mg.NMF
        return lambda: NMF(n_components=3, max_iter=20, random_state=0).fit(Y)
    if road == "nmf_beta":  # the Newton kernels of the Kullback-Leibler and IS losses
        Y = rng.uniform(0.1, 1.0, size=(30, 20))
        NMF = mg.NMF

        def beta_fits():
            for loss in ("kullback-leibler", "itakura-saito"):
                NMF(n_components=3, beta_loss=loss, max_iter=20, random_state=0).fit(Y)

        return beta_fits
    if road == "denoise":
        image = 100.0 + 20.0 * rng.standard_normal((24, 24))
        denoise = mg.denoise
        return lambda: denoise(image, 20.0, n_atoms=64, n_train=100, n_iter=1)
    if road == "logistic":
        X = rng.standard_normal((100, 10))
        y = (X[:, 0] + 0.5 * rng.standard_normal(100) > 0).astype(float)
        return lambda: mg.minimize(mg.Logistic(X, y), mg.L1(0.01))
    if road == "numba_floor":  # Numba's own start: a one-line cached kernel, no msm_gpu code
        from msm_gpu.backends.cpu.jit import njit

        kernel = njit(_one_line)
        ones = np.ones(2)
        return lambda: kernel(ones)
    raise ValueError(f"unknown road {road!r}")


def _one_line(x):
    return x[0] + 1.0


class _CompileLog:
    """Times every ``Dispatcher.compile`` of the process (cache loads included): per
    dispatcher its own seconds (those of the dispatchers it compiles on the way not
    counted) and the specialisations it added."""

    def __init__(self):
        from numba.core import dispatcher

        self.rows = {}
        self._stack = []
        original = dispatcher.Dispatcher.compile
        log = self

        def compile(disp, sig):
            before = len(disp.overloads)
            hits = sum(disp._cache_hits.values())
            started = time.perf_counter()
            log._stack.append(0.0)
            try:
                return original(disp, sig)
            finally:
                spent = time.perf_counter() - started
                inner = log._stack.pop()
                if log._stack:
                    log._stack[-1] += spent
                func = disp.py_func
                row = log.rows.setdefault(
                    f"{func.__module__}.{func.__qualname__}",
                    {"seconds": 0.0, "new": 0, "loaded": 0, "signatures": []},
                )
                row["seconds"] += spent - inner
                if len(disp.overloads) > before:
                    loaded = sum(disp._cache_hits.values()) > hits
                    row["loaded" if loaded else "new"] += 1
                    row["signatures"].append(str(sig))

        dispatcher.Dispatcher.compile = compile

    def table(self):
        return sorted(self.rows.items(), key=lambda item: -item[1]["seconds"])


def child(road, profile):
    """Run ``road`` in this (fresh) process; print one JSON line of timings."""
    started = time.perf_counter()
    import numpy as np

    import msm_gpu as mg

    call = _road(mg, np, road)  # the road's names resolved (its modules imported), data made
    imported = time.perf_counter() - started
    log = _CompileLog() if profile else None
    t0, c0 = time.perf_counter(), time.process_time()
    call()
    first, first_cpu = time.perf_counter() - t0, time.process_time() - c0
    t0 = time.perf_counter()
    call()
    second = time.perf_counter() - t0
    out = {"import": imported, "first": first, "first_cpu": first_cpu, "second": second}
    if log is not None:
        out["compiled"] = log.table()
    print("RESULT " + json.dumps(out))


# -- the parent -----------------------------------------------------------------------------


def _env(cache):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["MSM_GPU_CACHE_DIR"] = cache
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def _run_child(road, cache, profile):
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", road]
    if profile:
        cmd.append("--profile")
    done = subprocess.run(cmd, env=_env(cache), capture_output=True, text=True, check=False)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    raise RuntimeError(f"road {road} failed:\n{done.stdout}\n{done.stderr}")


def _run_demo(cache):
    """The whole ``msm-gpu demo --no-plot`` command: (wall, CPU seconds of the child)."""
    cmd = [sys.executable, "-m", "msm_gpu", "demo", "--no-plot"]
    before = os.times()
    started = time.perf_counter()
    done = subprocess.run(cmd, env=_env(cache), capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    after = os.times()
    if done.returncode != 0:
        raise RuntimeError(f"demo failed:\n{done.stdout}\n{done.stderr}")
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    lines = [
        line.strip()
        for line in done.stdout.splitlines()
        if line.startswith("MSM:") or line.startswith("demo finished")
    ]
    return {"import": None, "first": wall, "first_cpu": cpu, "second": None, "lines": lines}


def measure(road, profile=False):
    """Cold and warm-cache timings of ``road``, each in a fresh process."""
    with tempfile.TemporaryDirectory(prefix="msm-gpu-first-call-") as cache:
        if road == "demo":
            cold = _run_demo(cache)
            warm = _run_demo(cache)
        else:
            cold = _run_child(road, cache, profile)
            warm = _run_child(road, cache, False)
    return {"road": road, "cold": cold, "warm": warm}


def _fmt(value):
    return "-" if value is None else f"{value:.2f}"


def format_table(rows):
    columns = ("road", "import s", "cold first call s", "(cpu s)", "warm-cache first call s")
    lines = ["| " + " | ".join((*columns, "second call s")) + " |", "|---|---|---|---|---|---|"]
    for row in rows:
        cold, warm = row["cold"], row["warm"]
        lines.append(
            f"| {row['road']} | {_fmt(cold['import'])} | {_fmt(cold['first'])} | "
            f"{_fmt(cold['first_cpu'])} | {_fmt(warm['first'])} | {_fmt(cold['second'])} |"
        )
    return "\n".join(lines)


def format_profile(row, top):
    compiled = row["cold"].get("compiled")
    if not compiled:
        return ""
    total = sum(item["seconds"] for _, item in compiled)
    lines = [f"{row['road']}: {total:.2f} s in Dispatcher.compile; top {top}:"]
    for name, item in compiled[:top]:
        lines.append(f"  {item['seconds']:6.2f} s  {item['new']:2d} new  {name}")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--roads", nargs="+", default=list(ROADS), choices=ROADS, metavar="ROAD")
    parser.add_argument("--json", default=None, metavar="PATH", help="write the rows as JSON")
    parser.add_argument("--profile", action="store_true", help="list the kernels compiled")
    parser.add_argument("--top", type=int, default=15, help="kernels listed per road")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        child(args.child, args.profile)
        return 0
    sys.path.insert(0, str(HERE))
    from _machine import describe

    print(describe())
    rows = []
    for road in args.roads:
        row = measure(road, args.profile)
        rows.append(row)
        print(
            f"{road}: cold {row['cold']['first']:.2f} s, warm cache {row['warm']['first']:.2f} s",
            flush=True,
        )
        for line in row["cold"].get("lines", []):
            print(f"  cold demo: {line}")
        for line in row["warm"].get("lines", []):
            print(f"  warm demo: {line}")
        if args.profile and road != "demo":
            print(format_profile(row, args.top), flush=True)
    print()
    print(format_table(rows))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
