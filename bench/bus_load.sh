#!/usr/bin/env bash
# bench/bus_load.sh - the job bus under load (issue 20): a redis-server (AOF, fsync every
# second as a deployment would run it) on a loopback port in a temporary directory, WORKERS
# worker processes of SLOTS slots each (WORKERS x SLOTS simulated GPUs) on the fake evaluation
# backend (a TEST DOUBLE: a log-normal sleep of median LATENCY_MS instead of an evaluation;
# digests, blob fetches, job directories, leases and results are real), and build/bench/bus_load
# submitting JOBS jobs from CLIENTS threads. Prints the driver's JSON.
#
#   make && make bench && bench/bus_load.sh [JOBS [CLIENTS [WORKERS SLOTS [LATENCY_MS]]]]
#   (defaults: 2000 jobs, 128 clients, 8 workers x 8 slots = 64 simulated GPUs, 200 ms)
#   TLS=1: every connection over TLS (rediss:// to Redis's tls-port, a CA and a server
#   certificate made here with the openssl command; the server does not ask for client ones)
set -eu
cd "$(dirname "$0")/.."
JOBS=${1:-2000} CLIENTS=${2:-128} WORKERS=${3:-8} SLOTS=${4:-8} LATENCY=${5:-200}
BUILD=${BUILD:-build}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/bus-load-XXXXXX")
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
pids=()
stop_all() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null
    rm -rf "$TMP"
}
trap stop_all EXIT
URL=redis://127.0.0.1:$PORT
tls=()
if [ "${TLS:-0}" = 1 ]; then
    read -r -a tls < <(bash bench/tls_certs.sh "$TMP")
    URL=rediss://127.0.0.1:${tls[-1]}
    export CUDA_AGENT_REDIS_CACERT=$TMP/ca.crt
fi
redis-server --port "$PORT" --bind 127.0.0.1 --dir "$TMP" --save '' --appendonly yes \
    --appendfsync everysec --logfile "$TMP/redis.log" "${tls[@]}" &
pids+=($!)
for _ in $(seq 100); do redis-cli -p "$PORT" ping 2>/dev/null | grep -q PONG && break; sleep 0.05; done
export CUDA_AGENT_CACHE_DIR=$TMP/cache
for i in $(seq "$WORKERS"); do
    "$BUILD/cuda-agent" worker --redis "$URL" --name "sim$i" --jobs "$SLOTS" \
        --fake-eval "$LATENCY" 2>"$TMP/worker$i.log" &
    pids+=($!)
done
sleep 1
echo "# $WORKERS workers x $SLOTS slots, fake latency $LATENCY ms, $JOBS jobs from $CLIENTS clients; $(nproc) cores; ${URL%%:*}" >&2
"$BUILD/bench/bus_load" --redis "$URL" --jobs "$JOBS" --clients "$CLIENTS"
