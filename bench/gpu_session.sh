#!/usr/bin/env bash
# bench/gpu_session.sh - everything that needs a GPU, in one go, on a machine with one or two
# GPUs: the arena check, then the evaluator benchmark (bench/eval_service.sh) on the first GPU
# and CPUs, beside the GPU test suite (tests/gpu/run.sh) and the agent episode
# (bench/agent_episode.sh) on the second GPU and the other CPUs (or after the benchmark when
# there is one GPU). Results and logs go to OUT_DIR, a summary to stdout.
#
#   bash bench/gpu_session.sh CUDA_AGENT_BINARY OUT_DIR
#   env: BENCH_TIMEOUT (540 s), SUITE_TIMEOUT (540 s; the suites get SIGINT then, so pytest
#        still prints what failed), EPISODE (1; 0 skips the agent episode), ADVERSARIAL (1; 0
#        leaves tests/gpu/test_adversarial.py out of tests/gpu/run.sh), REPEATS, CLIENTS, JOBS,
#        SECTIONS
#        (eval_service.sh)
set -u
CA=${1:?usage: gpu_session.sh CUDA_AGENT_BINARY OUT_DIR}
OUT=${2:?usage: gpu_session.sh CUDA_AGENT_BINARY OUT_DIR}
mkdir -p "$OUT"
CA=$(cd "$(dirname "$CA")" && pwd)/$(basename "$CA")
export CA_BIN=$CA
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
ncpu=$(nproc)
echo "GPUs: $ngpu, CPUs: $ncpu"
nvidia-smi --query-gpu=index,name,clocks.sm,clocks.max.sm,memory.used --format=csv

echo "== arena (device memory shared by descriptor, plain and across the candidate sandbox)"
if ! CUDA_VISIBLE_DEVICES=0 timeout 120 python3 -m pytest -q -p no:cacheprovider \
        tests/gpu/test_arena_ipc.py >"$OUT/arena.log" 2>&1; then
    tail -30 "$OUT/arena.log"
    echo "device-memory sharing failed: the rest runs with CUDA_AGENT_ARENA=mmap (a memfd)"
    export CUDA_AGENT_ARENA=mmap
else
    tail -1 "$OUT/arena.log"
fi

half=$((ncpu / 2))
suite() { # gpu cpus
    CUDA_VISIBLE_DEVICES=$1 CUDA_AGENT_CACHE_DIR=/tmp/ca-cache-suite taskset -c "$2" \
        timeout -s INT -k 20 "${SUITE_TIMEOUT:-540}" bash -c '
        t0=$(date +%s)
        if [ "${EPISODE:-1}" != 0 ]; then
            bash bench/agent_episode.sh "$CA_BIN" "$0/episode" >"$0/episode.log" 2>&1
            echo "episode rc=$?" >>"$0/suite-status"
        fi
        # The GPU tiers, their one command (README), in what is left of the suite time; logs
        # in OUT/gpu/.
        GPU_SUITE_TIMEOUT=$((${SUITE_TIMEOUT:-540} - ($(date +%s) - t0) - 10)) \
            bash tests/gpu/run.sh "$0/gpu" \
            >"$0/gpu-suite.log" 2>&1
        echo "gpu-suite rc=$?" >>"$0/suite-status"' "$OUT"
}
bench() { # gpu cpus
    CUDA_VISIBLE_DEVICES=$1 CUDA_AGENT_CACHE_DIR=/tmp/ca-cache-bench taskset -c "$2" \
        timeout "${BENCH_TIMEOUT:-540}" bash bench/eval_service.sh "$CA" "$OUT/service" \
        >"$OUT/service.log" 2>&1
    echo "bench rc=$?" >>"$OUT/suite-status"
}
if [ "$ngpu" -ge 2 ]; then
    suite 1 "$half-$((ncpu - 1))" &
    bench 0 "0-$((half - 1))"
    wait
else
    bench 0 "0-$((ncpu - 1))"
    suite 0 "0-$((ncpu - 1))"
fi
cat "$OUT/suite-status"
echo "== benchmark"; grep -v "^evaluate:" "$OUT/service.log" | cut -c1-330 | tail -60
echo "== adversarial"; grep -E "^  (ok  |FAIL)|^adversarial:" "$OUT/gpu/adversarial.log" 2>/dev/null | cut -c1-300
echo "== gpu suite"; cut -c1-400 "$OUT/gpu-suite.log" 2>/dev/null | tail -40
echo "== episode"; cat "$OUT/episode/summary.md" 2>/dev/null | head -60 || tail -20 "$OUT/episode.log"
