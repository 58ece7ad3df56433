#!/usr/bin/env bash
# tests/gpu/run.sh - every GPU test (tests/gpu), in one go that fits one device call, ending
# with "N passed, N failed, N skipped". Without a CUDA device every file skips, with its reason.
#
#   bash tests/gpu/run.sh [OUT_DIR]        (logs in OUT_DIR, default a temporary directory)
#   env: CA_BIN (the binary, default build/cuda-agent), GPU_SUITE_TIMEOUT (540 s for the whole
#        run: a lane still running then gets SIGINT, so pytest prints what failed),
#        ADVERSARIAL (1; 0 leaves out test_adversarial.py and test_skill_facts.py),
#        GPU_LANES (the lanes to run, below; default all),
#        PYTHON (python3),
#        CUDA_VISIBLE_DEVICES (the GPUs to use; default every GPU)
#
# The files run in six pytest processes, in two phases, sharing one work directory
# ($CA_GPU_WORK, tests/gpu/conftest.py: one compile cache for the CLI tests, one
# torch.utils.cpp_extension build per example solution, locked while it is built):
#   phase 1, side by side (compile-bound; verdicts that do not rest on time), four lanes:
#     solutions:   test_arena_ipc.py test_solutions.py
#     harness:     test_harness_gpu.py -m 'not timing'
#     kernelbench: test_kernelbench.py test_workspace_eval.py
#     legit:       test_legit.py
#   phase 2, the GPU to itself, one after the other:
#     adversarial: test_adversarial.py and test_skill_facts.py (one evaluator service for both,
#                  several evaluations at once; each case evaluated once for the two files)
#     timing:      $TIMING_FILES -m timing (the harness's timing tests, on the extensions
#                  phase 1 built)
# With one GPU the order is adversarial, phase 1, timing (the reward-hack verdicts first, so
# that a run cut by its time limit has them; timing needs phase 1's builds). With two GPUs or
# more, phase 2 runs on the second GPU (and the second half of the CPUs) while phase 1 runs on
# the first, so no timed work shares a GPU with other work.
# On one H100 (16 cores) the whole run took 553 s: adversarial 137 s, phase 1 232 s (its longest
# lane, harness), timing 177 s (docs/BENCHMARKS.md, "The whole GPU suite in one call").
# GPU_LANES (default: every lane) names the lanes to run, e.g. "adversarial kernelbench legit"
# in one device call and "solutions harness timing" in another where one call is too short.
set -u
cd "$(dirname "$0")/../.."
OUT=${1:-$(mktemp -d "${TMPDIR:-/tmp}/ca-gpu-XXXXXX")}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
LIMIT=${GPU_SUITE_TIMEOUT:-540}
export CA_GPU_WORK=${CA_GPU_WORK:-$OUT/work}
[ -n "${CA_BIN:-}" ] && CA_BIN=$(cd "$(dirname "$CA_BIN")" && pwd)/$(basename "$CA_BIN") &&
    export CA_BIN
# The GPUs this run may use ($CUDA_VISIBLE_DEVICES when set, else every one nvidia-smi lists)
# and the CPUs it may use (its affinity), each split in two halves for the two-GPU layout.
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
    IFS=, read -r -a gpus <<<"$CUDA_VISIBLE_DEVICES"
else
    mapfile -t gpus < <(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null)
fi
[ ${#gpus[@]} -gt 0 ] || gpus=(0)
read -r cpus cpus_a cpus_b < <("$PY" -c 'import os
c = sorted(os.sched_getaffinity(0)); h = max(1, len(c) // 2); j = lambda l: ",".join(map(str, l))
print(j(c), j(c[:h]), j(c[h:] or c))')
start=$(date +%s)
# The files that hold `timing` tests (named, so that the timing lane does not count every other
# file's skips again).
TIMING_FILES=tests/gpu/test_harness_gpu.py

# lane NAME GPU CPUS PYTEST-ARGS...: one pytest process, its log in OUT/NAME.log; the time left
# of the whole run bounds it.
lane() {
    local name=$1 gpu=$2 cpus=$3 left
    shift 3
    left=$((LIMIT - ($(date +%s) - start)))
    [ "$left" -gt 10 ] || left=10
    CUDA_VISIBLE_DEVICES=$gpu taskset -c "$cpus" timeout -s INT -k 20 "$left" \
        "$PY" -m pytest -q -p no:cacheprovider -rfEs --tb=short --durations=8 "$@" \
        >"$OUT/$name.log" 2>&1
    echo "$name rc=$?" >>"$OUT/status"
}
for l in ${GPU_LANES:-}; do
    case $l in solutions | harness | kernelbench | legit | adversarial | timing) ;;
    *) echo "run.sh: unknown lane '$l' in GPU_LANES (solutions harness kernelbench legit adversarial timing)" >&2
       exit 2 ;;
    esac
done
want() { case " ${GPU_LANES:-solutions harness kernelbench legit adversarial timing} " in
    *" $1 "*) return 0 ;; esac; return 1; }
# lane_if NAME ...: the lane when GPU_LANES names it, else "NAME rc=skipped".
lane_if() {
    if want "$1"; then lane "$@"; else echo "$1 rc=skipped" >>"$OUT/status"; fi
}
phase1() {
    lane_if solutions "$1" "$2" tests/gpu/test_arena_ipc.py tests/gpu/test_solutions.py &
    lane_if harness "$1" "$2" tests/gpu/test_harness_gpu.py -m 'not timing' &
    lane_if kernelbench "$1" "$2" tests/gpu/test_kernelbench.py tests/gpu/test_workspace_eval.py &
    lane_if legit "$1" "$2" tests/gpu/test_legit.py &
    wait
}
adversarial() {
    if [ "${ADVERSARIAL:-1}" = 0 ]; then
        echo "adversarial rc=skipped" >>"$OUT/status"
        return
    fi
    lane_if adversarial "$1" "$2" tests/gpu/test_adversarial.py tests/gpu/test_skill_facts.py
}
: >"$OUT/status"
if [ ${#gpus[@]} -ge 2 ]; then
    phase1 "${gpus[0]}" "$cpus_a" &
    # The timing lane needs the extensions phase 1 builds: it waits for them.
    (
        adversarial "${gpus[1]}" "$cpus_b"
        while ! { grep -q '^solutions ' "$OUT/status" && grep -q '^harness ' "$OUT/status"; }; do
            sleep 2
        done
        lane_if timing "${gpus[1]}" "$cpus_b" $TIMING_FILES -m timing
    ) &
    wait
else
    # The reward-hack verdicts first: a run cut by its time limit has them.
    adversarial "${gpus[0]}" "$cpus"
    phase1 "${gpus[0]}" "$cpus"
    lane_if timing "${gpus[0]}" "$cpus" $TIMING_FILES -m timing
fi

passed=0 failed=0 skipped=0
for name in adversarial solutions harness kernelbench legit timing; do
    log=$OUT/$name.log
    if grep -q "^$name rc=skipped" "$OUT/status"; then
        echo "$name: not run (GPU_LANES or ADVERSARIAL=0)"
        continue
    fi
    line=$(grep -E '[0-9]+ (passed|failed|skipped|errors?|deselected)' "$log" 2>/dev/null |
        tail -1)
    rc=$(sed -n "s/^$name rc=//p" "$OUT/status")
    echo "$name (rc ${rc:-?}): ${line:-no summary (see $log)}"
    grep -E '^(FAILED|ERROR|SKIPPED)' "$log" 2>/dev/null | cut -c1-300 | sed 's/^/  /'
    n() { grep -oE "[0-9]+ $1" <<<"$line" | grep -oE '[0-9]+' || echo 0; }
    p=$(n passed) f=$(n failed) s=$(n skipped) e=$(n 'errors?')
    passed=$((passed + p)) skipped=$((skipped + s)) failed=$((failed + f + e))
    # 0 and 5 (nothing collected: every file skipped at import) are the only clean ends; a
    # lane cut by its time limit or failing without a count fails once.
    case ${rc:-x} in 0 | 5) ;; *) [ $((f + e)) -gt 0 ] || failed=$((failed + 1)) ;; esac
done
echo "gpu: $(($(date +%s) - start)) s, logs in $OUT"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
