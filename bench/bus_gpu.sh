#!/usr/bin/env bash
# bench/bus_gpu.sh - a GPU worker of the job bus beside the local evaluator service (issue 20):
# the examples' iteration loop (bench/eval_loop.sh: cold, .cu changed, unchanged, binding
# changed, the KernelBench-format candidates, the broken ones) first through `cuda-agent
# evaluator --socket` (eval --server), then through `cuda-agent worker --redis` with a
# redis-server on loopback (eval --redis), one after the other on the same GPU, each with a
# cold cache of its own (compiles and baselines measured in both). Prints both runs' lines and
# then, step by step, both wall times and their difference: the bus's overhead per job (blob
# uploads, the queue, the worker's fetch and checks, the result's way back). A repeat the bus
# has a result for is answered from Redis without an evaluation (a job delivered twice yields
# one result); the table says so.
#
#   bench/bus_gpu.sh [CUDA_AGENT_BINARY] [OUT_DIR]
#   env: REDIS_SERVER (default .carry/redis-server, run with LD_LIBRARY_PATH=.carry/lib as
#        bench/carry.sh leaves it, else the PATH's), PREWARM (8), TLS=1 (the bus over rediss://,
#        a CA and server certificate made here with the openssl command), SERVICE_FLAGS (extra
#        flags for both the evaluator service and the worker, e.g. --device cpu to try the
#        script where there is no GPU), LOOP (the loop to run, default bench/eval_loop.sh; it
#        is called as `LOOP BINARY OUT_DIR` with $EVAL_FLAGS and prints eval_loop.sh's lines)
# Run from the repository root on a GPU machine with PyTorch.
set -u
CA=${1:-build/cuda-agent}
OUT=${2:-/tmp/bus-gpu}
mkdir -p "$OUT"
CA=$(cd "$(dirname "$CA")" && pwd)/$(basename "$CA")
REDIS=${REDIS_SERVER:-}
if [ -z "$REDIS" ] && [ -x .carry/redis-server ]; then
    REDIS=$PWD/.carry/redis-server
    export LD_LIBRARY_PATH=$PWD/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
REDIS=${REDIS:-redis-server}
command -v "$REDIS" >/dev/null || { echo "no redis-server (set REDIS_SERVER or run bench/carry.sh)"; exit 2; }
pids=()
sockdir=
stop_all() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    [ -z "$sockdir" ] || rm -rf "$sockdir"
}
trap stop_all EXIT
since() { python3 -c "import sys, time; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$1"; }

echo "== 1. the local evaluator service"
sockdir=$(mktemp -d) # a private directory: no other user can take the name first
SOCK=$sockdir/evaluator.sock
t0=$(date +%s.%N)
# shellcheck disable=SC2086 # SERVICE_FLAGS: a list of flags
CUDA_AGENT_CACHE_DIR=$OUT/cache-local "$CA" evaluator --socket "$SOCK" --prewarm "${PREWARM:-8}" \
    ${SERVICE_FLAGS:-} 2>"$OUT/service.log" &
svc=$!
pids+=("$svc")
for _ in $(seq 3000); do [ -S "$SOCK" ] && break; kill -0 "$svc" 2>/dev/null || break; sleep 0.1; done
[ -S "$SOCK" ] || { echo "the service did not start:"; tail -20 "$OUT/service.log"; exit 1; }
echo "service ready in $(since "$t0") s"
CUDA_AGENT_CACHE_DIR=$OUT/cache-local EVAL_FLAGS="--server $SOCK" \
    bash "${LOOP:-bench/eval_loop.sh}" "$CA" "$OUT/local" | tee "$OUT/local.txt"
kill "$svc"
wait "$svc" 2>/dev/null

echo "== 2. a worker of the job bus"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
URL=redis://127.0.0.1:$PORT
mkdir -p "$OUT/redis"
tls=()
if [ "${TLS:-0}" = 1 ]; then
    read -r -a tls < <(bash bench/tls_certs.sh "$OUT/redis")
    URL=rediss://127.0.0.1:${tls[-1]}
    export CUDA_AGENT_REDIS_CACERT=$OUT/redis/ca.crt
fi
"$REDIS" --port "$PORT" --bind 127.0.0.1 --dir "$OUT/redis" --save '' --appendonly yes \
    --appendfsync everysec --logfile "$OUT/redis/redis.log" "${tls[@]}" &
pids+=($!)
for _ in $(seq 100); do grep -qs "Ready to accept" "$OUT/redis/redis.log" && break; sleep 0.05; done
t0=$(date +%s.%N)
# shellcheck disable=SC2086
CUDA_AGENT_CACHE_DIR=$OUT/cache-bus "$CA" --log-level info worker --redis "$URL" --name gpu0 \
    --prewarm "${PREWARM:-8}" ${SERVICE_FLAGS:-} 2>"$OUT/worker.log" &
w=$!
pids+=("$w")
for _ in $(seq 3000); do grep -qs "serving" "$OUT/worker.log" && break; kill -0 "$w" 2>/dev/null || break; sleep 0.1; done
grep -qs "serving" "$OUT/worker.log" || { echo "the worker did not start:"; tail -20 "$OUT/worker.log"; exit 1; }
echo "worker ready in $(since "$t0") s ($URL)"
CUDA_AGENT_CACHE_DIR=$OUT/cache-bus-client EVAL_FLAGS="--redis $URL" \
    bash "${LOOP:-bench/eval_loop.sh}" "$CA" "$OUT/bus" | tee "$OUT/bus.txt"
kill -TERM "$w"
wait "$w" 2>/dev/null

echo "== side by side (wall seconds; the bus's overhead = bus - local)"
python3 - "$OUT/local.txt" "$OUT/bus.txt" "$OUT/bus" <<'PY'
import json, os, re, statistics, sys
def walls(path):
    out = {}
    for line in open(path):
        m = re.match(r"(\S+)\s+rc=(\d+) wall=\s*([\d.]+)s", line)
        if m:
            out[m.group(1)] = (float(m.group(3)), int(m.group(2)))
    return out
local, bus = walls(sys.argv[1]), walls(sys.argv[2])
print(f"{'step':34} {'local':>7} {'bus':>7} {'overhead':>9}  same rc  bus answered from")
over = []
for k, (lw, lrc) in local.items():
    if k not in bus:
        print(f"{k:34} {lw:7.2f} {'-':>7}")
        continue
    bw, brc = bus[k]
    how = "-"
    try:
        r = json.load(open(os.path.join(sys.argv[3], k + ".json")))
        b = r.get("bus") or {}
        how = "stored result" if b.get("stored") else f"evaluated by {b.get('worker')}"
    except (OSError, ValueError):
        pass
    if how.startswith("evaluated"):
        over.append(bw - lw)
    print(f"{k:34} {lw:7.2f} {bw:7.2f} {bw - lw:+9.2f}  {'yes' if lrc == brc else 'NO':7}  {how}")
if over:
    print(f"evaluated steps: {len(over)}; overhead median {statistics.median(over):+.2f} s, "
          f"mean {statistics.mean(over):+.2f} s")
PY
