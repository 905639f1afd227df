#!/usr/bin/env bash
# The GPU check in one prepared run, for a machine lent for minutes (about 8 in all):
#
#   0. setup: the image's python3 (PyTorch, CuPy, Numba, SciPy, scikit-learn are there, no
#      network), array-api-compat if missing (wheels from $WHEELS, else the copy vendored
#      in scikit-learn or SciPy), `pip install -e .` offline (--no-deps --no-build-isolation
#      --no-index; if that fails the checkout is used through PYTHONPATH all the same);
#   1. the `gpu`-marked tests (pytest -m gpu);
#   2. benchmarks/bench_gpu_peers.py: msm_gpu on the device vs the host's CPU backend and
#      PyTorch peers (issue 40's acceptance table);
#   3. benchmarks/bench_gpu.py --quick (one MSM sweep vs one GEMM);
#   4. benchmarks/bench_gpu_nnls.py --quick (mg.nnls on CuPy vs the CPU backend).
#
# Each step runs under `timeout`, capped by what is left of TOTAL; logs, JSON tables and
# summary.txt go to $OUT (the device runner's folder; benchmarks/out/gpu_check otherwise):
# 8 files, the most the runner brings back -- add no others.
#
#   bash benchmarks/gpu_check.sh                     # everything, about 8 minutes
#   OUT=/some/dir T_TESTS=0 bash benchmarks/gpu_check.sh     # skip the tests
#   PEERS_ARGS="--quick" bash benchmarks/gpu_check.sh        # smaller peer cases
#
# Through the device tool (no `carry` needed):  run(command="bash benchmarks/gpu_check.sh",
# timeout_s=560).
#
# Seconds (0 skips a step): TOTAL (480) for the whole script, setup included; T_TESTS
# (150; T_TEST_EACH, 120, per test where pytest-timeout is installed), T_PEERS (190; the
# peers' case budgets get PEERS_BUDGET = T_PEERS - 60 by default, the rest covers imports
# and warm-up compilation), T_BENCH (60), T_NNLS (60).  Measured before on an H200
# (2026-11-26): the gpu tests 156 s, bench_gpu --quick under 90 s, bench_gpu_nnls --quick
# 140 s to its "large" rows: those three may be cut short; their logs keep what they
# printed (the two benchmarks write their JSON only at the end), and bench_gpu_peers
# rewrites its JSON after every case.
# WHEELS: a folder of wheels to install into /tmp/site first (carry it with the run).
# SKIP_INSTALL=1: no `pip install -e .` (a machine where the checkout is installed already).
set -u
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-benchmarks/out/gpu_check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
TOTAL=${TOTAL:-480}
START=$(date +%s)
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"

say() { echo "$*" | tee -a "$SUMMARY"; }
section() { printf '\n======== %s ========\n' "$*"; }
left() { echo $((TOTAL - ($(date +%s) - START))); }

STEPS=()
step() { # step NAME SECONDS COMMAND...: under a time limit, log in $OUT/NAME.log
    local name=$1 want=$2 limit rc t0
    shift 2
    section "$name"
    if [ "$want" = 0 ]; then
        STEPS+=("$name: skipped (limit 0)")
        echo "skipped"
        return
    fi
    limit=$(left)
    [ "$want" -lt "$limit" ] && limit=$want
    if [ "$limit" -le 5 ]; then
        STEPS+=("$name: skipped (no time left of TOTAL=${TOTAL} s)")
        echo "skipped: no time left"
        return
    fi
    echo "limit ${limit} s: $*"
    t0=$(date +%s)
    timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.log" 2>&1
    rc=$?
    local note=""
    [ "$rc" = 124 ] || [ "$rc" = 137 ] && note=" TIMED OUT"
    STEPS+=("$name: rc=$rc$note after $(($(date +%s) - t0)) s (limit ${limit} s)")
    tail -n "${TAIL:-20}" "$OUT/$name.log"
}

# -- 0. setup ------------------------------------------------------------------------------
section "setup"
say "gpu_check.sh $(date -u '+%Y-%m-%d %H:%M:%S UTC'), TOTAL=${TOTAL} s"
say "$(nvidia-smi -L 2>/dev/null || echo 'nvidia-smi: not found')"
say "python3: $(command -v python3) ($(python3 --version 2>&1))"
mkdir -p /tmp/site
export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [ -n "${WHEELS:-}" ] && ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site "$WHEELS"/*.whl && say "installed wheels from $WHEELS into /tmp/site" \
        || say "installing the wheels of $WHEELS failed"
fi
if ! python3 -c "import array_api_compat" 2>/dev/null; then
    # no network on the device: the copy vendored in scikit-learn or SciPy is the package
    # itself (relative imports only), copied under its own name
    src=$(python3 - <<'EOF' 2>/dev/null
import importlib, os
for name in ("sklearn.externals.array_api_compat", "scipy._lib.array_api_compat"):
    try:
        print(os.path.dirname(importlib.import_module(name).__file__))
        break
    except Exception:
        pass
EOF
)
    if [ -n "$src" ] && cp -r "$src" /tmp/site/array_api_compat; then
        say "array_api_compat: not installed; using the copy vendored at $src"
    else
        say "array_api_compat: not installed and no vendored copy found (msm_gpu will not import)"
    fi
fi
if [ -n "${SKIP_INSTALL:-}" ]; then
    say "pip install -e . skipped (SKIP_INSTALL); the checkout is on PYTHONPATH"
elif timeout 120 python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . \
    >/tmp/pip_install.log 2>&1; then
    say "pip install -e . (offline): ok"
else
    say "pip install -e . (offline) failed, the checkout is on PYTHONPATH instead:" \
        "$(tail -n 2 /tmp/pip_install.log | tr '\n' ' ')"
fi
python3 - <<'EOF' 2>&1 | tee -a "$SUMMARY"
import importlib
for name in ("numpy", "numba", "scipy", "sklearn", "cupy", "torch", "array_api_compat",
             "threadpoolctl", "tqdm", "matplotlib", "dask", "pytest_timeout"):
    try:
        mod = importlib.import_module(name)
        print(f"  {name} {getattr(mod, '__version__', '?')}")
    except Exception as exc:
        print(f"  {name}: MISSING ({type(exc).__name__}: {exc})")
try:
    import msm_gpu
    from msm_gpu.backends.cuda.backend import cuda_unavailable_reason

    print(f"  msm_gpu {msm_gpu.__version__} from {msm_gpu.__file__}")
    print(f"  CUDA backend: {cuda_unavailable_reason() or 'usable'}")
    import cupy

    name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    name = name.decode() if isinstance(name, bytes) else name
    print(f"  device: {name}, CuPy {cupy.__version__}, "
          f"CUDA runtime {cupy.cuda.runtime.runtimeGetVersion()}")
except Exception as exc:
    print(f"  msm_gpu / CUDA check failed: {type(exc).__name__}: {exc}")
EOF

# -- 1. the gpu tests ----------------------------------------------------------------------
# dask is in the `test` extra, not always on a GPU image: its module is left out when absent
test_args=(-m gpu -v -rfEs -p no:cacheprovider -o addopts="" --durations=10)
python3 -c "import dask.distributed" 2>/dev/null || test_args+=(--ignore tests/test_dask.py)
python3 -c "import pytest_timeout" 2>/dev/null && test_args+=(--timeout "${T_TEST_EACH:-120}")
step gpu_tests "${T_TESTS:-150}" python3 -m pytest "${test_args[@]}" tests

# -- 2. msm_gpu vs the host and PyTorch ------------------------------------------------------
T_PEERS=${T_PEERS:-190}
peers_budget=${PEERS_BUDGET:-$((T_PEERS - 60))}
remaining=$(($(left) - 60))
[ "$peers_budget" -gt "$remaining" ] && peers_budget=$remaining
[ "$peers_budget" -lt 30 ] && peers_budget=30
# shellcheck disable=SC2086  # PEERS_ARGS: extra words on purpose
step bench_gpu_peers "$T_PEERS" python3 benchmarks/bench_gpu_peers.py \
    --budget "$peers_budget" --out "$OUT/gpu_peers.json" ${PEERS_ARGS:-}

# -- 3, 4. the headline GPU benchmarks --------------------------------------------------------
step bench_gpu "${T_BENCH:-60}" python3 benchmarks/bench_gpu.py --quick --no-cpu --repeats 5 \
    --out "$OUT"
step bench_gpu_nnls "${T_NNLS:-60}" python3 benchmarks/bench_gpu_nnls.py --quick --out "$OUT"

# -- summary ---------------------------------------------------------------------------------
section "summary"
for s in "${STEPS[@]}"; do say "$s"; done
if [ -f "$OUT/gpu_tests.log" ]; then
    final=$(grep -E '^=+ .*(passed|failed|error|skipped|deselected|no tests ran).* =+$' \
        "$OUT/gpu_tests.log" | tail -n 1)
    [ -n "$final" ] || final="no pytest summary line (stopped?): $(grep -c ' PASSED' \
        "$OUT/gpu_tests.log") PASSED, $(grep -c -E ' (FAILED|ERROR)' "$OUT/gpu_tests.log") FAILED/ERROR so far"
    say "gpu tests: $final"
    grep -E '^(FAILED|ERROR) ' "$OUT/gpu_tests.log" | head -n 20 | tee -a "$SUMMARY"
fi
if [ -f "$OUT/bench_gpu_peers.log" ]; then
    say "bench_gpu_peers (seconds; * extrapolated; x host / x torch: their time over msm_gpu's):"
    if grep -q '^== summary' "$OUT/bench_gpu_peers.log"; then
        sed -n '/^== summary/,$p' "$OUT/bench_gpu_peers.log" | tee -a "$SUMMARY"
    else
        tail -n 40 "$OUT/bench_gpu_peers.log" | tee -a "$SUMMARY"
    fi
fi
say "total $(($(date +%s) - START)) s; files in $OUT: $(ls "$OUT" | tr '\n' ' ')"
