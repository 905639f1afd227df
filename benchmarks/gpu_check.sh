#!/usr/bin/env bash
# The GPU check in one prepared run, for a machine lent for minutes: the `gpu` tests, then
# the quick GPU benchmarks, each under its own time limit, logs and JSON tables in $OUT.
#
#   bash benchmarks/gpu_check.sh                  # logs in benchmarks/out/gpu_check
#   OUT=/some/dir T_TESTS=200 T_BENCH=0 bash benchmarks/gpu_check.sh
#
# T_TESTS, T_BENCH, T_NNLS: seconds for `pytest -m gpu`, `bench_gpu.py --quick` and
# `bench_gpu_nnls.py --quick` (0 skips one; measured on an H200, 2026-11-26: the tests
# 156 s, bench_gpu --quick under 90 s; bench_gpu_nnls --quick took 140 s to its
# "large" rows with the library's FISTA on a fresh machine).  WHEELS: a folder of wheels to
# install into /tmp/site first (packages the machine lacks, e.g. array-api-compat).
set -u
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-benchmarks/out/gpu_check}
mkdir -p "$OUT"
if [ -n "${WHEELS:-}" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site "$WHEELS"/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONUNBUFFERED=1
nvidia-smi -L 2>/dev/null || echo "nvidia-smi: not found"
python3 -c "import numpy, numba, cupy; print('numpy', numpy.__version__, 'numba', numba.__version__, 'cupy', cupy.__version__)" \
    || echo "CuPy cannot be imported: the gpu tests will skip and the benchmarks say why"

step() {  # step NAME SECONDS COMMAND...: run under a time limit, log to $OUT/NAME.log
    local name=$1 limit=$2
    shift 2
    if [ "$limit" = 0 ]; then
        echo "== $name: skipped"
        return
    fi
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    echo "== $name: rc=$? (limit ${limit} s), last lines of $OUT/$name.log:"
    tail -n 25 "$OUT/$name.log"
}

# dask is in the `test` extra, not always on a GPU image: its module is left out when absent
ignore=()
python3 -c "import dask.distributed" 2>/dev/null || ignore=(--ignore tests/test_dask.py)
step gpu_tests "${T_TESTS:-300}" python3 -m pytest -m gpu -q -p no:cacheprovider \
    -o addopts="" --durations=10 "${ignore[@]}" tests
step bench_gpu "${T_BENCH:-120}" python3 benchmarks/bench_gpu.py --quick --no-cpu --repeats 5 \
    --out "$OUT"
step bench_gpu_nnls "${T_NNLS:-240}" python3 benchmarks/bench_gpu_nnls.py --quick --out "$OUT"
