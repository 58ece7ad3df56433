#!/usr/bin/env bash
# bench/eval_service.sh - the evaluator service on a GPU machine, side by side with the
# one-shot evaluator: start `cuda-agent evaluator`, then
#   1. bench/eval_loop.sh through it (cold, .cu changed, unchanged, new binding, broken);
#   2. stability: REPEATS evaluations of each example's unchanged solution (reward and
#      candidate median each time; CV of the medians), at the default timing budget;
#   3. throughput: JOBS evaluations by CLIENTS concurrent clients, each with a .cu change
#      (so every job compiles), as evaluations per GPU-hour.
#
#   bench/eval_service.sh [CUDA_AGENT_BINARY] [OUT_DIR]
#   env: REPEATS (10), CLIENTS (4), JOBS (40), PREWARM (8), EVAL_SERVICE_FLAGS (extra flags
#        for `cuda-agent evaluator`, e.g. --no-sandbox), SECTIONS (which of 1 2 3 to run;
#        default all)
# Run from the repository root on a machine with a GPU and PyTorch.
set -u
CA=${1:-build/cuda-agent}
OUT=${2:-/tmp/eval-service}
REPEATS=${REPEATS:-10}
CLIENTS=${CLIENTS:-4}
JOBS=${JOBS:-40}
mkdir -p "$OUT"
export CUDA_AGENT_CACHE_DIR=${CUDA_AGENT_CACHE_DIR:-$OUT/cache}
SOCK=$(mktemp -u /tmp/ca-eval-XXXXXX.sock)
work=$(mktemp -d)
t0=$(date +%s.%N)
# shellcheck disable=SC2086
"$CA" evaluator --socket "$SOCK" --prewarm "${PREWARM:-8}" ${EVAL_SERVICE_FLAGS:-} 2>"$OUT/service.log" &
svc=$!
trap 'kill $svc 2>/dev/null; wait $svc 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 3000); do [ -S "$SOCK" ] && break; kill -0 $svc 2>/dev/null || break; sleep 0.1; done
if [ ! -S "$SOCK" ]; then
    echo "the service did not start:"; tail -20 "$OUT/service.log"; exit 1
fi
printf 'service ready in %.1f s (toolchain, precompiled header, runners)\n' \
    "$(python3 -c "print($(date +%s.%N) - $t0)")"

want() { case " ${SECTIONS:-1 2 3} " in *" $1 "*) return 0 ;; esac; return 1; }

if want 1; then
echo "== 1. eval_loop through the service"
EVAL_FLAGS="--server $SOCK" bash bench/eval_loop.sh "$CA" "$OUT/loop"
fi

mk() { # task solution dest
    "$CA" workspace create --task "$1" "$3" >/dev/null || exit 1
    cp "$2"/kernels/* "$3/kernels/"
    cp "$2/model_new.py" "$3/model_new.py"
}

want 2 && echo "== 2. stability: $REPEATS evaluations of each unchanged solution"
want 2 && for sol in examples/solutions/*/; do
    name=$(basename "$sol")
    ws=$work/stab-$name
    mk "examples/tasks/$name.py" "$sol" "$ws"
    for i in $(seq "$REPEATS"); do
        "$CA" eval --server "$SOCK" --json "$ws" >"$OUT/stab-$name-$i.json" 2>/dev/null
    done
    python3 - "$OUT" "$name" "$REPEATS" <<'PY'
import json, statistics, sys
out, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
rewards, meds, cvs, walls, streams, devices, bases = [], [], [], [], [], [], []
for i in range(1, n + 1):
    r = json.load(open(f"{out}/stab-{name}-{i}.json"))
    rewards.append((r.get("reward") or {}).get("reward"))
    t = ((r.get("harness") or {}).get("timing") or {})
    c = t.get("candidate") or {}
    meds.append(c.get("median_ms"))
    cvs.append(c.get("cv"))
    streams.append(c.get("stream_median_ms"))
    devices.append(c.get("device_median_ms"))
    bases.append(c.get("basis"))
    walls.append(r.get("elapsed_ms"))
    base = t
ok = [m for m in meds if isinstance(m, (int, float))]
if not ok:
    print(f"{name}: no evaluation was timed; rewards {rewards}")
    sys.exit(0)
def cv_of(xs):
    xs = [x for x in xs if isinstance(x, (int, float))]
    return 100 * statistics.pstdev(xs) / statistics.mean(xs) if len(xs) > 1 else float("nan")
e = (base.get("eager") or {}).get("median_ms")
c = (base.get("compile") or {}).get("median_ms")
print(f"{name}: rewards {rewards}; candidate median {statistics.mean(ok):.4f} ms, "
      f"CV across runs {cv_of(ok):.2f}%, within-run CV {cvs}; eager {e} compile {c}; "
      f"speedup vs compile {c / statistics.mean(ok):.3f}; "
      f"eval wall median {statistics.median(walls) / 1000:.2f} s")
# The time's basis (the stream's time plus work outside it) beside the two end events alone.
print(f"  {name}: CV across runs of the stream end {cv_of(streams):.2f}%, of the device end "
      f"{cv_of(devices):.2f}%; basis {sorted(set(map(str, bases)))}")
PY
done

want 3 || exit 0
echo "== 3. throughput: $JOBS evaluations, $CLIENTS clients, each after a .cu change"
names=()
for sol in examples/solutions/*/; do names+=("$(basename "$sol")"); done
for c in $(seq "$CLIENTS"); do
    name=${names[$(((c - 1) % ${#names[@]}))]}
    mk "examples/tasks/$name.py" "examples/solutions/$name" "$work/tp-$c"
done
client() { # index count
    local ws=$work/tp-$1 cu
    cu=$(ls "$ws"/kernels/*.cu | head -1)
    for j in $(seq "$2"); do
        echo "// client $1 job $j $(date +%s%N)" >>"$cu"
        "$CA" eval --server "$SOCK" --json "$ws" >"$OUT/tp-$1-$j.json" 2>/dev/null
    done
}
per=$(((JOBS + CLIENTS - 1) / CLIENTS))
# One evaluation per client first (untimed): its compile fills the cache as a warm agent's has.
for c in $(seq "$CLIENTS"); do
    "$CA" eval --server "$SOCK" --json "$work/tp-$c" >/dev/null 2>&1 &
done
wait $(jobs -p | grep -v "^$svc$") 2>/dev/null
t1=$(date +%s.%N)
for c in $(seq "$CLIENTS"); do client "$c" "$per" & done
wait $(jobs -p | grep -v "^$svc$") 2>/dev/null
t2=$(date +%s.%N)
python3 - "$OUT" "$CLIENTS" "$per" "$t1" "$t2" <<'PY'
import glob, json, sys
out, clients, per, t1, t2 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
rs = [json.load(open(f)) for f in glob.glob(f"{out}/tp-*.json")]
ok = sum(1 for r in rs if r.get("ok"))
wall = t2 - t1
gpu = sum(((r.get("harness") or {}).get("elapsed_s") or {}).get("total", 0) for r in rs)
print(f"{len(rs)} evaluations ({ok} correct) in {wall:.1f} s with {clients} clients: "
      f"{3600 * len(rs) / wall:.0f} evaluations per GPU-hour; "
      f"harness (GPU-side) time {gpu:.1f} s total, {gpu / max(1, len(rs)):.2f} s each")
PY
"$CA" eval --server "$SOCK" --help >/dev/null
echo "service log tail:"; tail -5 "$OUT/service.log"
