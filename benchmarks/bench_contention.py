"""``mg.solve`` on the CPU next to a busy neighbour process: contended / idle time.

Usage::

    python benchmarks/bench_contention.py [--quick] [--repeats 5] [--out benchmarks/out]

Three solves (the README example: n = 100, r = 50, 1000 iterations, one thread by
default; n = 200, r = 1000, 50 iterations, whose sweeps run on the spinning team; and
n = 1000, r = 4096, 5 iterations), each with the default threads and with ``threads=1``, timed
alone ("idle") and while a neighbour process runs one of:

* ``gemm``   a NumPy GEMM loop (OpenBLAS threads busy);
* ``msm``    a second msm-gpu process solving the README example in a loop;
* ``hals``   a NumPy-heavy NNLS loop (tensorly's ``hals_nnls`` when tensorly is
  installed, else the same HALS sweeps written with NumPy);
* ``numba``  a Numba ``prange`` loop (Numba's default threading layer, which spins).

Target (issue 10): contended / idle <= 2.5 for every neighbour.  "Idle" means no
neighbour started by this script: on a shared machine other users' work still runs, so
rerun on a quiet machine before quoting the numbers.  Works with any msm-gpu version
(``threads=`` is only passed where ``solve`` has it), so older checkouts can be timed
the same way (``PYTHONPATH=<checkout> python benchmarks/bench_contention.py``).
"""

from __future__ import annotations

import argparse
import inspect
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import describe  # noqa: E402

import msm_gpu as mg  # noqa: E402

TARGET = 2.5

NEIGHBOURS = {
    "gemm": """
import numpy as np
a = np.random.default_rng(0).standard_normal((1000, 1000))
while True:
    a @ a
""",
    "msm": """
import numpy as np, msm_gpu as mg
rng = np.random.default_rng(1)
C = rng.uniform(size=(200, 100)); D = rng.uniform(size=(200, 50))
A, R = C.T @ C, -C.T @ D
while True:
    mg.solve(A, R, mg.NonNeg(), tol=0, max_iter=1000)
""",
    "hals": """
import numpy as np
rng = np.random.default_rng(2)
V = rng.uniform(size=(300, 2000)); W = rng.uniform(size=(300, 20))
UtM, UtU = W.T @ V, W.T @ W
try:
    from tensorly.tenalg.proximal import hals_nnls
    def step(x):
        return hals_nnls(UtM, UtU, x, n_iter_max=20)[0]
except ImportError:  # the same sweeps in NumPy
    def step(x):
        for _ in range(20):
            for k in range(x.shape[0]):
                x[k] = np.maximum(x[k] + (UtM[k] - UtU[k] @ x) / UtU[k, k], 0.0)
        return x
x = rng.uniform(size=(20, 2000))
while True:
    x = step(x.copy())
""",
    "numba": """
import numpy as np
from numba import njit, prange
@njit(parallel=True)
def work(x):
    s = 0.0
    for i in prange(x.shape[0]):
        s += np.sqrt(np.abs(x[i])).sum()
    return s
x = np.random.default_rng(3).standard_normal((64, 4096))
while True:
    work(x)
""",
}


def readme_problem():
    rng = np.random.default_rng(0)
    c = rng.uniform(size=(200, 100))
    d = rng.uniform(size=(200, 50))
    return c.T @ c, -c.T @ d, None, 1000


def large_problem():
    rng = np.random.default_rng(0)
    c = rng.uniform(size=(1010, 1000))
    a = c.T @ c
    return a, -c.T @ rng.uniform(size=(1010, 4096)), np.abs(rng.normal(size=(1000, 4096))), 5


def middle_problem():
    rng = np.random.default_rng(0)
    c = rng.uniform(size=(210, 200))
    a = c.T @ c
    return a, -c.T @ rng.uniform(size=(210, 1000)), np.abs(rng.normal(size=(200, 1000))), 50


def cases(quick):
    out = [("README 100x50 x1000", readme_problem())]
    if not quick:
        out.append(("200x1000 x50", middle_problem()))
        out.append(("1000x4096 x5", large_problem()))
    return out


HAS_THREADS = "threads" in inspect.signature(mg.solve).parameters


def run_solve(problem, threads):
    a, r, x0, iters = problem
    kw = {"threads": threads} if (threads is not None and HAS_THREADS) else {}
    if threads is not None and not HAS_THREADS:  # older versions swept on Numba's threads
        import numba

        saved = numba.get_num_threads()
        numba.set_num_threads(threads)
    t0 = time.perf_counter()
    mg.solve(a, r, mg.NonNeg(), x0=x0, tol=0, max_iter=iters, **kw)
    elapsed = time.perf_counter() - t0
    if threads is not None and not HAS_THREADS:
        numba.set_num_threads(saved)
    return elapsed


def start_neighbour(kind):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    proc = subprocess.Popen(
        [sys.executable, "-c", NEIGHBOURS[kind]],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    time.sleep(3.0)  # imports, compilation, then steady state
    if proc.poll() is not None:
        raise RuntimeError(f"neighbour {kind!r} exited: {proc.stderr.read().decode()[-2000:]}")
    return proc


def stop_neighbour(proc):
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def measure(problems, repeats):
    """{(case, threads label): seconds (median)} for the current surroundings.

    The default threads and ``threads=1`` take turns, one solve each, so that both see
    the same moments of the neighbour (which shares the CPUs by time slices of
    milliseconds): the two rows of a case are a side-by-side comparison."""
    out = {}
    labels = (("default", None), ("1 thread", 1))
    for name, problem in problems:
        times = {label: [] for label, _ in labels}
        for _ in range(repeats):
            for label, threads in labels:
                times[label].append(run_solve(problem, threads))
        for label, _ in labels:
            out[(name, label)] = statistics.median(times[label])
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the README example only")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--neighbours", default=",".join(NEIGHBOURS), help="comma-separated subset")
    parser.add_argument("--out", type=Path, default=None, help="folder for contention.png")
    args = parser.parse_args(argv)

    print(describe())
    from msm_gpu.backends.cpu import backend as cpu_backend

    team = getattr(cpu_backend, "USE_TEAM", None)  # None: a version without the team
    print(f"msm_gpu from {mg.__file__}; threads= option: {HAS_THREADS}; spinning team: {team}")
    print(f"load average before: {os.getloadavg()}")
    problems = cases(args.quick)
    for _, problem in problems:  # compile / warm up
        run_solve(problem, None)
    results = {"idle": measure(problems, args.repeats)}
    for kind in args.neighbours.split(","):
        proc = start_neighbour(kind)
        try:
            results[kind] = measure(problems, args.repeats)
        finally:
            stop_neighbour(proc)
    print(f"load average after: {os.getloadavg()}")

    keys = list(results["idle"])
    header = f"{'case':<22} {'threads':<9} {'idle [s]':>9}"
    kinds = [k for k in results if k != "idle"]
    header += "".join(f" {k + ' [s]':>11} {'ratio':>6}" for k in kinds)
    print(f"median of {args.repeats}; ratio = contended / idle (target <= {TARGET})")
    print(header)
    rows = []
    for case, label in keys:
        idle = results["idle"][(case, label)]
        line = f"{case:<22} {label:<9} {idle:>9.3f}"
        for k in kinds:
            t = results[k][(case, label)]
            line += f" {t:>11.3f} {t / idle:>6.2f}"
            rows.append((case, label, k, t / idle))
        print(line, flush=True)
    if args.out is not None:
        plot(rows, args.out / "contention.png")
    return results


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    groups = sorted({(case, label) for case, label, _, _ in rows})
    kinds = list(dict.fromkeys(k for _, _, k, _ in rows))
    width = 0.8 / max(1, len(kinds))
    fig, ax = plt.subplots(figsize=(2.2 * len(groups) + 2, 3.8))
    for i, kind in enumerate(kinds):
        vals = [next(v for c, l, k, v in rows if (c, l) == g and k == kind) for g in groups]
        ax.bar(np.arange(len(groups)) + i * width, vals, width, label=kind)
    ax.axhline(TARGET, color="red", linestyle="--", label=f"target {TARGET:g}")
    ax.set_xticks(np.arange(len(groups)) + 0.4 - width / 2, [f"{c}\n{l}" for c, l in groups])
    ax.set_ylabel("contended / idle")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
