#!/usr/bin/env bash
# Test command of one mutant (cosmic-ray runs it from the root of the repository copy):
#
#     bash benchmarks/mutation/pytest_mutant.sh TEST_FILE_OR_NODE...
#
# (`--print-key` only prints the kernel-cache key, see below) runs `python -m pytest -x -q -p no:cacheprovider` on the given tests (missing files are
# dropped, so a session also runs before tests/test_mutants_*.py exist; with
# MUTATION_SKIP_NEW=1 those files are dropped on purpose, for the "before" score).
#
# Numba kernel cache.  msm_gpu compiles its kernels with cache=True into $MSM_GPU_CACHE_DIR
# (msm_gpu/backends/cpu/jit.py).  Numba's cache index is keyed by the defining file's path and its
# (mtime, size) stamp only: it does NOT see the globals a kernel freezes in from other
# modules (cpu/kernels.py inlines CODE_BOX, ... from penalties.py), so a mutant of
# penalties.py could be served kernels compiled with the original constants.  Here the cache
# folder is content-addressed instead: its name is a hash of cpu/kernels.py plus the
# module-level constants of penalties.py (everything of the five mutated modules that Numba
# compiles into a kernel).  Mutants that do not touch those share the warm cache of the
# unmutated code; every other mutant gets a folder of its own, compiled from scratch and
# deleted after its run.  The other njit modules (blas.py, facesolve.py, ...) are never
# mutated, so they cannot go stale.
set -u

root=$(pwd)
base=${MUTATION_CACHE_BASE:-$root/.mutation-cache}
key=$(
    {
        cat msm_gpu/backends/cpu/kernels.py
        grep -E '^[A-Z_][A-Z0-9_]*( *,[ A-Z0-9_]*)* *=' msm_gpu/penalties/__init__.py
    } | sha1sum | cut -c1-16
)
if [[ "${1:-}" == --print-key ]]; then
    echo "$key"
    exit 0
fi
unset NUMBA_CACHE_DIR
export MSM_GPU_CACHE_DIR="$base/$key"
# the tests' own subprocesses must import this copy, not the editable install
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
# mutation_plugin.py: Hypothesis without shrinking, derandomized
plugin_path="$root/benchmarks/mutation"

tests=()
for t in "$@"; do
    f=${t%%::*}
    case "$f" in
        tests/test_mutants_*) [[ "${MUTATION_SKIP_NEW:-0}" == 1 ]] && continue ;;
    esac
    [[ -e "$f" ]] && tests+=("$t")
done

PYTHONPATH="$plugin_path:$PYTHONPATH" \
    python -m pytest -x -q -p no:cacheprovider -p mutation_plugin "${tests[@]}"
rc=$?

# a mutant's own kernel folder is not reused by anyone: remove it
if [[ -f "$base/BASELINE_KEY" && "$(cat "$base/BASELINE_KEY")" != "$key" ]]; then
    rm -rf "${base:?}/$key"
fi
exit $rc
