# tests/it/lib.sh - helpers for black-box tests of the cuda-agent binary.
# Source it; call `check NAME CMD...` style helpers; end with `finish`, which
# prints "N passed, N failed, N skipped" and exits non-zero on any failure.
# What cannot run here is skipped with `skip` (one check) or `skip_all` (the
# script), naming the need as tests/unit/test.h does ("userns", "nvcc",
# "torch", ...): where TEST_REQUIRE lists that need, the skip is a failure.
# Environment from tests/run.sh: CUDA_AGENT (binary), CA_REPO (repo root).

: "${CUDA_AGENT:?run through tests/run.sh (CUDA_AGENT unset)}"
: "${CA_REPO:?CA_REPO unset}"
# The tests write scratch files in the current directory: never the checkout's.
case $(pwd -P)/ in
"$(cd "$CA_REPO" && pwd -P)"/*)
    echo "run from a scratch directory outside the checkout (tests/run.sh does)" >&2
    exit 2
    ;;
esac
CA=$CUDA_AGENT
IT_PASS=0
IT_FAIL=0
IT_SKIP=0
OUT=$(mktemp)
ERR=$(mktemp)
trap 'rm -f "$OUT" "$ERR"' EXIT

ok() { IT_PASS=$((IT_PASS + 1)); echo "ok $1"; }
bad() {
    IT_FAIL=$((IT_FAIL + 1))
    echo "FAIL $1: $2"
    echo "  stdout: $(head -c 2000 "$OUT")"
    echo "  stderr: $(head -c 2000 "$ERR")"
}

# Is $1 one of the comma-separated needs in $TEST_REQUIRE (what this host must run)?
required() { [[ ",${TEST_REQUIRE:-}," == *",$1,"* ]]; }

# skip NEED NAME REASON -- NAME was not tested here for want of NEED.
skip() {
    if required "$1"; then
        IT_FAIL=$((IT_FAIL + 1))
        echo "FAIL $2: skipped for want of \"$1\", which TEST_REQUIRE says this host has: $3"
        return
    fi
    IT_SKIP=$((IT_SKIP + 1))
    echo "skip $2: $3"
}

# skip_all NEED REASON -- nothing in the script can run here: exit 77, which tests/run.sh counts
# as one skip (and shows with the reason), or fail where TEST_REQUIRE lists NEED.
skip_all() {
    if required "$1"; then
        echo "FAIL: skipped for want of \"$1\", which TEST_REQUIRE says this host has: $2"
        exit 1
    fi
    echo "SKIP: $2"
    exit 77
}

# run CMD...: runs it, stdout in $OUT, stderr in $ERR, exit code in $RC.
run() {
    [ -n "${IT_TRACE:-}" ] && echo "$(date +%T.%N | cut -c1-12) run: $*" >&2
    "$@" >"$OUT" 2>"$ERR"
    RC=$?
}

# expect NAME CODE [STDOUT_SUBSTR [STDERR_SUBSTR]] -- checks the last `run`.
expect() {
    local name=$1 code=$2 out=${3:-} err=${4:-}
    if [ "$RC" -ne "$code" ]; then bad "$name" "exit $RC, expected $code"; return; fi
    if [ -n "$out" ] && ! grep -qF -- "$out" "$OUT"; then bad "$name" "stdout lacks '$out'"; return; fi
    if [ -n "$err" ] && ! grep -qF -- "$err" "$ERR"; then bad "$name" "stderr lacks '$err'"; return; fi
    ok "$name"
}

# assert NAME CONDITION... -- a shell test.
assert() {
    local name=$1
    shift
    if "$@"; then ok "$name"; else bad "$name" "assertion failed: $*"; fi
}

finish() {
    echo "$IT_PASS passed, $IT_FAIL failed, $IT_SKIP skipped"
    [ "$IT_FAIL" -eq 0 ]
}

# For tests that run the evaluator in CPU mode: skip (exit 77, with the reason) without
# PyTorch or nvcc; else set PY and the evaluator's environment. The compile cache is
# content-addressed and safe to share across test runs (CI runs the suite twice), which saves
# rebuilding the precompiled torch header on slow machines; compilers get generous limits.
require_cpu_evaluator() {
    PY=${CUDA_AGENT_PYTHON:-python3}
    if ! "$PY" -c 'import torch' 2>/dev/null; then
        skip_all torch "PyTorch is not importable by $PY (set CUDA_AGENT_PYTHON; scripts/setup.sh installs it in .venv)"
    fi
    if ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
        skip_all nvcc "no nvcc"
    fi
    export CUDA_AGENT_PYTHON=$PY
    export CUDA_AGENT_CACHE_DIR=${CUDA_AGENT_TEST_CACHE_DIR:-$CA_REPO/.test-cache}
    export CUDA_AGENT_COMPILE_TIMEOUT=${CUDA_AGENT_COMPILE_TIMEOUT:-900}
}
