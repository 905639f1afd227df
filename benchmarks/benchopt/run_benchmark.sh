#!/usr/bin/env bash
# Run one benchopt benchmark with msm-gpu's solver beside its peers, and keep the results.
#
#   benchmarks/benchopt/run_benchmark.sh <benchmark> <clone> [more benchopt run options]
#
# <benchmark>: a folder here (benchmark_nnls, benchmark_lasso, benchmark_lasso_path,
# benchmark_logreg_l1, benchmark_nmf); <clone>: a git clone of benchopt/<benchmark>.
# Copies the solver into the clone, runs its config.yml (no HTML, no result cache: fresh
# timings), and copies the result file to docs/benchmarks/benchopt/<benchmark>.parquet.
#
# benchopt >= 1.9 sets its seed bookkeeping in BaseDataset.__init__; datasets whose own
# __init__ does not call it fail on their second use ("'Dataset' object has no attribute
# '_used_seed'": the simulated datasets of benchmark_nnls, _lasso, _logreg_l1 and _nmf).
# The clone's datasets get the missing super().__init__() call (in the clone only).
#
# BENCHOPT (default: benchopt) is the command that runs benchopt, e.g.
# "python -m benchopt".
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
name=$1
clone=$2
shift 2
cp "$here/$name/solver_msm_gpu.py" "$clone/solvers/msm_gpu.py"
python - "$clone"/datasets/*.py <<'PATCH'
import re, sys
for path in sys.argv[1:]:
    text = open(path).read()
    if "def __init__(" not in text or "super().__init__()" in text:
        continue
    # the first statement of __init__: after the line closing its signature
    text = re.sub(r"(\n([ \t]*)def __init__\([^)]*\):\n)", r"\1\2    super().__init__()\n", text, 1)
    open(path, "w").write(text)
    print(f"patched {path}: super().__init__() in Dataset.__init__")
PATCH
rm -f "$clone/outputs/msm_gpu_$name.parquet"  # benchopt would not overwrite it
${BENCHOPT:-benchopt} run "$clone" --config "$here/$name/config.yml" --no-plot --no-html --no-cache \
    --output "msm_gpu_$name" "$@"
mkdir -p "$here/../../docs/benchmarks/benchopt"
cp "$clone/outputs/msm_gpu_$name.parquet" "$here/../../docs/benchmarks/benchopt/$name.parquet"
