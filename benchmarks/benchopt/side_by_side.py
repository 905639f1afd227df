"""The close and behind cells of the benchopt runs, timed side by side in one process.

    python benchmarks/benchopt/side_by_side.py CLONES [benchmark ...]

CLONES is a folder holding clones of the benchmarks (``benchmark_nnls``, ...) into which
``run_benchmark.sh`` copied msm-gpu's solver (``CLONES/benchmark_*/solvers/msm_gpu.py``).
Each case builds the benchmark's own objective, dataset and solver objects from those
files, then runs msm-gpu's solver at its default tolerance (1e-6; its answer is exact) and
each peer at the smallest stop value whose median reached a relative suboptimality of
1e-10 in the benchopt run (read from its curves), in three rounds of K runs per solver,
and prints the best and the median time and each answer's distance to the best of them.
benchopt times one solver's repetitions one after the other on a machine whose load moves;
these rounds put the solvers next to each other."""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
import warnings
from pathlib import Path

import numpy as np

K = 5
ROUNDS = 3
OURS = ("msm_gpu.py", {}, 1e-6)
LASSO = dict(fit_intercept=False, reg=0.1)
PATH = dict(fit_intercept=False, n_lambda=100)
LOGREG = dict(fit_intercept=False, reg=0.1)
#: (benchmark, objective parameters, dataset parameters, [(solver file, parameters, stop)])
CASES = [
    ("benchmark_nnls", {}, dict(n_samples=100, n_features=5000, positive=False),
     [OURS, ("sklearn.py", {}, 1)]),
    ("benchmark_nnls", {}, dict(n_samples=100, n_features=5000, positive=True),
     [OURS, ("nnls_scipy.py", {}, 94)]),
    ("benchmark_lasso", LASSO, dict(n_samples=500, n_features=600, rho=0.6),
     [OURS, ("sklearn.py", {}, 28), ("skglm.py", {}, 7)]),
    ("benchmark_lasso", LASSO, dict(n_samples=10000, n_features=100, rho=0.6),
     [OURS, ("celer.py", {}, 2)]),
    ("benchmark_lasso", LASSO, dict(n_samples=100, n_features=10000, rho=0.6),
     [OURS, ("celer.py", {}, 14)]),
    ("benchmark_logreg_l1", LOGREG, dict(n_samples=500, n_features=2000),
     [OURS, ("skglm.py", {}, 10)]),
    ("benchmark_logreg_l1", LOGREG, dict(n_samples=500, n_features=5000),
     [OURS, ("skglm.py", {}, 10)]),
    ("benchmark_lasso_path", PATH, dict(n_samples=2000, n_features=200, n_signals=20, rho=0.5),
     [OURS, ("sklearn.py", {}, 9)]),
    ("benchmark_lasso_path", PATH, dict(n_samples=200, n_features=2000, n_signals=20, rho=0.5),
     [OURS, ("celer.py", {}, 6)]),
]  # fmt: skip


def _module(path: Path):
    spec = importlib.util.spec_from_file_location(f"_bench_{abs(hash(str(path)))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _data(clone: Path, benchmark: str, params: dict) -> dict:
    if benchmark == "benchmark_lasso_path":
        # its dataset draws its seed from benchopt's run context: the same data, seed 0
        from benchmark_utils.utils import preprocess_data
        from benchopt.datasets.simulated import make_correlated_data

        n, p = params["n_samples"], params["n_features"]
        X, y, _ = make_correlated_data(
            n, p, rho=params["rho"], density=params["n_signals"] / p, random_state=0
        )
        X, y = preprocess_data(X, y)
        return dict(X=X, y=y)
    dataset = _module(clone / "datasets" / "simulated.py").Dataset.get_instance(**params)
    return dataset.get_data()


def run_case(clone: Path, benchmark, obj_params, data_params, solvers) -> None:
    if str(clone) not in sys.path:
        sys.path.insert(0, str(clone))  # benchmark_utils
    objective = _module(clone / "objective.py").Objective.get_instance(**obj_params)
    objective.set_data(**_data(clone, benchmark, data_params))
    built = []
    for file, params, stop in solvers:
        solver = _module(clone / "solvers" / file).Solver.get_instance(**params)
        solver.set_objective(**objective.get_objective())
        solver.warm_up()
        built.append((file, stop, solver))
    times = {file: [] for file, _, _ in built}
    values = {}
    for _ in range(ROUNDS):
        for file, stop, solver in built:
            for _ in range(K):
                start = time.perf_counter()
                solver.run(stop)
                times[file].append(time.perf_counter() - start)
            value = objective.evaluate_result(**solver.get_result())
            values[file] = value["value"] if isinstance(value, dict) else value
    best = min(values.values())
    print(f"{benchmark} {obj_params} {data_params}")
    for file, stop, _ in built:
        gap = values[file] - best
        print(
            f"   {file:14s} stop={stop:<6g} best {min(times[file]) * 1e3:8.2f} ms"
            f"  median {np.median(times[file]) * 1e3:8.2f} ms"
            f"  f - f_best {gap:.1e} (relative {gap / abs(best):.0e})",
            flush=True,
        )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("clones", type=Path, help="folder holding the benchmark clones")
    parser.add_argument("benchmarks", nargs="*", help="only these (default: all)")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    for case in CASES:
        if not args.benchmarks or case[0] in args.benchmarks:
            run_case(args.clones / case[0], *case)


if __name__ == "__main__":
    main()
