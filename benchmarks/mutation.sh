#!/usr/bin/env bash
# Mutation testing of msm_gpu with cosmic-ray (slow: not part of CI).
#
# Mutates penalties/__init__.py, solvers/splitting.py, solvers/msm.py, _api.py and backends/cpu/kernels.py one module
# at a time, in a COPY of the repository (the checkout is never modified), and runs for each
# mutant only the test files that exercise that module (benchmarks/mutation/<module>.toml;
# `pytest -x`, per-mutant time limit).  Results, survivors and a report go to the output
# folder (default benchmarks/out/mutation/, git-ignored); the per-module and total
# killed/timeout/survived counts are printed at the end.  See benchmarks/mutation/SURVIVORS.md
# for the last full run and the reasoning about every survivor.
#
# Usage:
#   benchmarks/mutation.sh [options]
#
# Options:
#   -m, --module NAME     run only this module (repeatable): penalties, splitting, driver,
#                         api, cpu_kernels.  Default: all five, one after another.
#   --sample N            run N mutants per module, drawn at random (seeded) from those the
#                         operator filter keeps; the others are recorded as "skipped".
#   --seed S              seed of --sample (default 1).
#   --timeout S           per-mutant time limit in seconds (default: the module's TOML).
#   --before              leave out tests/test_mutants_*.py (the score before they existed).
#   --all-operators       do not exclude the arithmetic -> bitwise/shift operators.
#   --rerun-survivors     do not start a new session: run again the mutants that survived in
#                         the session already in the output folder (after adding tests).
#   --resume              do not start a new session: run the mutants still pending in the
#                         session in the output folder (after an interrupted run).
#   --max-minutes M       stop each module's run after M minutes; the mutants not run by then
#                         (a random subset: cosmic-ray runs them in random order) are recorded
#                         as "unsampled".
#   --summary             only print the summary of the sessions in the output folder.
#   --out DIR             output folder (default <repo>/benchmarks/out/mutation).
#   --keep-workdir        keep the temporary copy of the repository (printed at the start).
#   -h, --help            this text.
#
# Needs cosmic-ray (pip install -e ".[test,mutation]") and the test dependencies in the active
# Python environment.  Examples:
#   benchmarks/mutation.sh                          # everything (hours)
#   benchmarks/mutation.sh -m splitting             # one module
#   benchmarks/mutation.sh -m cpu_kernels --sample 300 --seed 1
#   benchmarks/mutation.sh -m penalties --rerun-survivors
set -euo pipefail

ALL_MODULES=(penalties splitting driver api cpu_kernels)
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT="$REPO/benchmarks/out/mutation"
modules=()
sample=""
seed=1
timeout=""
before=0
all_ops=0
rerun=0
resume=0
max_minutes=""
summary_only=0
keep=0

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }

while [[ $# -gt 0 ]]; do
    case "$1" in
        -m | --module) modules+=("$2"); shift 2 ;;
        --sample) sample=$2; shift 2 ;;
        --seed) seed=$2; shift 2 ;;
        --timeout) timeout=$2; shift 2 ;;
        --before) before=1; shift ;;
        --all-operators) all_ops=1; shift ;;
        --rerun-survivors) rerun=1; shift ;;
        --resume) resume=1; shift ;;
        --max-minutes) max_minutes=$2; shift 2 ;;
        --summary) summary_only=1; shift ;;
        --out) OUT=$(mkdir -p "$2" && cd "$2" && pwd); shift 2 ;;
        --keep-workdir) keep=1; shift ;;
        -h | --help) usage; exit 0 ;;
        *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
[[ ${#modules[@]} -eq 0 ]] && modules=("${ALL_MODULES[@]}")
for m in "${modules[@]}"; do
    [[ -f "$REPO/benchmarks/mutation/$m.toml" ]] || { echo "unknown module $m" >&2; exit 2; }
done
mkdir -p "$OUT"
TOOL="$REPO/benchmarks/mutation/crtool.py"

summarise() {
    local dbs=()
    for m in "${ALL_MODULES[@]}"; do
        [[ -f "$OUT/$m.sqlite" ]] && dbs+=("$OUT/$m.sqlite")
    done
    [[ ${#dbs[@]} -gt 0 ]] || { echo "no sessions in $OUT" >&2; return 1; }
    python "$TOOL" summary "$OUT" "${dbs[@]}"
}

if [[ $summary_only == 1 ]]; then
    summarise
    exit 0
fi

command -v cosmic-ray > /dev/null || { echo "cosmic-ray not found: pip install -e \".[test,mutation]\"" >&2; exit 1; }

# -- a copy of the repository: mutants never touch the checkout -----------------------------
WORK=$(mktemp -d "${TMPDIR:-/tmp}/msm-mutation.XXXXXX")
if [[ $keep == 0 ]]; then
    trap 'rm -rf "$WORK"' EXIT
fi
echo "copy of the repository: $WORK/repo"
mkdir -p "$WORK/repo"
tar -C "$REPO" -cf - \
    --exclude=./.git --exclude=./benchmarks/out --exclude='__pycache__' \
    --exclude='.hypothesis' --exclude='.pytest_cache' --exclude='.ruff_cache' \
    --exclude='*.nbi' --exclude='*.nbc' . | tar -C "$WORK/repo" -xf -
cd "$WORK/repo"

export MUTATION_CACHE_BASE="$WORK/cache"
mkdir -p "$MUTATION_CACHE_BASE"
bash benchmarks/mutation/pytest_mutant.sh --print-key > "$MUTATION_CACHE_BASE/BASELINE_KEY"
[[ $before == 1 ]] && export MUTATION_SKIP_NEW=1
where=$(PYTHONPATH="$PWD" python -c 'import msm_gpu, os; print(os.path.dirname(msm_gpu.__file__))')
[[ "$where" == "$PWD/msm_gpu" ]] || { echo "msm_gpu imports from $where, not the copy" >&2; exit 1; }

for m in "${modules[@]}"; do
    cfg="$WORK/$m.toml"
    cp "benchmarks/mutation/$m.toml" "$cfg"
    [[ -n "$timeout" ]] && sed -i "s/^timeout = .*/timeout = $timeout/" "$cfg"
    db="$OUT/$m.sqlite"
    echo
    echo "=== $m ($(grep '^module-path' "$cfg" | cut -d'"' -f2)) $(date '+%F %T')"
    src=$(grep '^module-path' "$cfg" | cut -d'"' -f2)
    if [[ $rerun == 1 || $resume == 1 ]]; then
        [[ -f "$db" ]] || { echo "no session $db to continue" >&2; exit 1; }
        # a mutation is stored as (operator, occurrence): only valid for the same source
        if [[ "$(sha1sum < "$src")" != "$(cat "$OUT/$m.source.sha1")" ]]; then
            echo "$src changed since the session in $db was made: start a new one" >&2
            exit 1
        fi
        [[ $rerun == 1 ]] && python "$TOOL" rerun-survivors "$db"
    else
        rm -f "$db"
        sha1sum < "$src" > "$OUT/$m.source.sha1"
        cosmic-ray init "$cfg" "$db"
        [[ $all_ops == 1 ]] || cr-filter-operators "$db" "$cfg"
        [[ -n "$sample" ]] && python "$TOOL" sample "$db" "$sample" "$seed"
    fi
    if ! cosmic-ray baseline "$cfg"; then
        echo "baseline of $m fails: the unmutated code does not pass its tests" >&2
        exit 1
    fi
    start=$(date +%s)
    if [[ -n "$max_minutes" ]]; then
        # cosmic-ray's own mutate-and-test loop, stopped at the deadline (between mutants)
        python "$TOOL" exec-until "$cfg" "$db" "$max_minutes"
        python "$TOOL" truncate "$db" "not reached in $max_minutes minutes"
    else
        cosmic-ray exec "$cfg" "$db"
    fi
    echo "$m: $(($(date +%s) - start)) s" | tee -a "$OUT/timings.txt"
    python "$TOOL" summary "$OUT/$m" "$db"
done

echo
echo "=== summary (all sessions in $OUT)"
summarise
