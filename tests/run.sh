#!/usr/bin/env bash
# tests/run.sh - runs every test tier and ends with "N passed, N failed, N skipped".
#
#   unit/  C unit-test binaries (built by make into $BUILD/tests/unit/); each ends with
#          "N passed, N failed, N skipped", and its skipped cases are shown with their reasons
#   it/    black-box scripts: exit 0 pass, 77 skip (reason on stdout), else fail;
#          a script may print its own "N passed, N failed, N skipped" line to count cases
#   py/    pytest (skipped with a reason when pytest is missing)
#   lint/  pyflakes over the project's Python code (skipped when pyflakes is missing), and no
#          merge-conflict markers in any file git tracks or would add
#   gpu/   pytest files and scripts that need a CUDA GPU (they skip themselves)
#
# Environment: BUILD (default build), TESTS (a regex on test names to run a subset),
# TEST_REQUIRE (what this host must be able to run, e.g. "userns,cc,torch": a unit case, an it/
# script or check, or the py/ tier skipped for want of one of them fails; see tests/unit/test.h,
# tests/it/lib.sh, tests/py/conftest.py; .ci/run sets it).
set -u
cd "$(dirname "$0")/.."
REPO=$(pwd)
BUILD=${BUILD:-build}
FILTER=${TESTS:-}
export CA_REPO="$REPO" CUDA_AGENT="$REPO/$BUILD/cuda-agent" BUILD
# The Python environment scripts/setup.sh made (pyarrow, pytest), when present.
[ -x "$REPO/.venv/bin/python3" ] && export PATH="$REPO/.venv/bin:$PATH"
passed=0 failed=0 skipped=0
failures=()
TMP_ROOT=$(mktemp -d "${TMPDIR:-/tmp}/ca-tests-XXXXXX")
# Searchable by others: some unit tests drop to an unprivileged user inside it.
chmod 711 "$TMP_ROOT"
trap 'rm -rf "$TMP_ROOT"' EXIT

want() { [ -z "$FILTER" ] || [[ "$1" =~ $FILTER ]]; }

# Add counts from a "N passed, N failed[, N skipped]" line in file $2 (or the exit code $3).
count() {
    local name=$1 log=$2 rc=$3 line p f s
    line=$(grep -E '^([A-Za-z]+: )?[0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
    if [ -n "$line" ]; then
        p=$(sed -E 's/.*\b([0-9]+) passed.*/\1/' <<<"$line")
        f=$(sed -E 's/.*\b([0-9]+) failed.*/\1/' <<<"$line")
        s=0
        if grep -q skipped <<<"$line"; then s=$(sed -E 's/.*\b([0-9]+) skipped.*/\1/' <<<"$line"); fi
        passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
        if [ "$f" -gt 0 ] || { [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; }; then
            [ "$f" -gt 0 ] || failed=$((failed + 1))
            failures+=("$name")
            sed 's/^/    /' "$log"
        fi
    elif [ "$rc" -eq 0 ]; then
        passed=$((passed + 1))
    elif [ "$rc" -eq 77 ]; then
        skipped=$((skipped + 1))
        echo "  skip $name: $(tail -1 "$log")"
    else
        failed=$((failed + 1))
        failures+=("$name")
        sed 's/^/    /' "$log"
    fi
}

echo "== unit ($BUILD)"
for t in "$BUILD"/tests/unit/test_*; do
    [ -x "$t" ] || continue
    name=unit/$(basename "$t")
    want "$name" || continue
    log="$TMP_ROOT/$(basename "$t").log"
    # Cases that run real compilers (nvcc, c++) get longer on a busy two-core machine.
    limit=${TEST_TIMEOUT:-20}
    case $name in unit/test_compile | unit/test_compile_inline) limit=${TEST_TIMEOUT:-120} ;; esac
    t0=$SECONDS
    TMPDIR="$TMP_ROOT" TEST_TIMEOUT=$limit "$t" >"$log" 2>&1
    rc=$?
    echo "$name: $(tail -1 "$log") ($((SECONDS - t0)) s)"
    grep '^skip ' "$log" | sed 's/^/  /'
    count "$name" "$log" $rc
done

echo "== it"
for t in tests/it/*.sh; do
    [ -f "$t" ] || continue
    [ "$(basename "$t")" = lib.sh ] && continue # sourced by the others
    name=it/$(basename "$t" .sh)
    want "$name" || continue
    log="$TMP_ROOT/it-$(basename "$t").log"
    work=$(mktemp -d "$TMP_ROOT/it-XXXXXX")
    t0=$SECONDS
    (cd "$work" && TMPDIR="$work" timeout 600 bash "$REPO/$t") >"$log" 2>&1
    rc=$?
    took="($((SECONDS - t0)) s)"
    case $rc in 0) echo "$name: ok $took" ;; 77) echo "$name: skipped $took" ;; *) echo "$name: FAIL ($rc) $took" ;; esac
    grep '^skip ' "$log" | sed 's/^/  /'
    count "$name" "$log" $rc
done

run_pytest() {
    local tier=$1 log="$TMP_ROOT/pytest-$1.log" rc
    ls tests/"$tier"/test_*.py >/dev/null 2>&1 || return 0
    want "$tier/" || return 0
    if ! python3 -c 'import pytest' 2>/dev/null; then
        echo "  skip $tier: pytest is not installed (pip install pytest)"
        skipped=$((skipped + 1))
        return 0
    fi
    local t0=$SECONDS
    # --durations: the slowest cases, so that the tier's share of CI time stays visible.
    python3 -m pytest -q -rs -p no:cacheprovider --durations=12 "tests/$tier" >"$log" 2>&1
    rc=$?
    sed -n '/slowest/,/^$/p' "$log" | head -16
    tail -15 "$log"
    echo "$tier: $((SECONDS - t0)) s"
    local line p f s e
    line=$(grep -E '(passed|failed|skipped|error)' "$log" | tail -1)
    p=$(grep -oE '[0-9]+ passed' <<<"$line" | grep -oE '[0-9]+' || echo 0)
    f=$(grep -oE '[0-9]+ failed' <<<"$line" | grep -oE '[0-9]+' || echo 0)
    s=$(grep -oE '[0-9]+ skipped' <<<"$line" | grep -oE '[0-9]+' || echo 0)
    e=$(grep -oE '[0-9]+ errors?' <<<"$line" | grep -oE '[0-9]+' || echo 0)
    passed=$((passed + p)) skipped=$((skipped + s)) failed=$((failed + f + e))
    # exit 5: nothing collected (all skipped at import); anything else non-zero fails.
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ] && [ $((f + e)) -eq 0 ]; then
        failed=$((failed + 1))
    fi
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then failures+=("$tier"); cat "$log"; fi
}
# Python code of the project (not the fixtures: candidates written to break rules) checked by
# pyflakes: undefined names and unused imports, which tests that skip without a GPU never hit.
lint_python() {
    local name=lint/pyflakes log="$TMP_ROOT/pyflakes.log" rc
    want "$name" || return 0
    if ! python3 -c 'import pyflakes' 2>/dev/null; then
        echo "  skip $name: pyflakes is not installed (scripts/setup.sh installs it)"
        skipped=$((skipped + 1))
        return 0
    fi
    python3 -m pyflakes harness train src/*/*.py bench/*.py tests/py tests/gpu/*.py tests/it/*.py \
        >"$log" 2>&1
    rc=$?
    case $rc in 0) echo "$name: ok" ;; *) echo "$name: FAIL ($rc)" ;; esac
    count "$name" "$log" $rc
}
# Merge-conflict markers left in a tracked file (a merge once landed them in README.md and a
# design document, and every test passed).
lint_conflicts() {
    local name=lint/conflict-markers log="$TMP_ROOT/conflicts.log" rc
    want "$name" || return 0
    if ! git -C "$REPO" rev-parse --git-dir >/dev/null 2>&1; then
        echo "  skip $name: not a git checkout"
        skipped=$((skipped + 1))
        return 0
    fi
    git -C "$REPO" grep --untracked -n -I -E '^(<{7}|>{7})( |$)|^={7}$' >"$log" 2>&1
    rc=$?
    case $rc in
    1) echo "$name: ok" && rc=0 ;;
    0) echo "$name: FAIL (conflict markers)" && rc=1 ;;
    *) echo "$name: FAIL (git grep exit $rc)" ;;
    esac
    count "$name" "$log" $rc
}
echo "== lint"
lint_python
lint_conflicts
echo "== py"
run_pytest py
echo "== gpu"
run_pytest gpu

if [ ${#failures[@]} -gt 0 ]; then
    echo "failed: ${failures[*]}"
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
