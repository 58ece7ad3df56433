#!/usr/bin/env bash
# bench/candbox_cost.sh - what the candidate sandbox costs per evaluation, side by side: the
# evaluator service's loop (bench/eval_service.sh sections 1 and 2: cold, .cu changed,
# unchanged, KernelBench-format, broken; then REPEATS evaluations of each unchanged example)
# with candidates sandboxed (the default) and with --no-candidate-sandbox (compilers
# sandboxed in both), on one shared cache, alternating ROUNDS times; then a table of the
# same evaluations' wall times and candidate timings.
#
#   bash bench/candbox_cost.sh CUDA_AGENT_BINARY OUT_DIR      env: ROUNDS (1), REPEATS (3)
set -u
CA=${1:?binary}
OUT=${2:?out dir}
mkdir -p "$OUT"
export CUDA_AGENT_CACHE_DIR=${CUDA_AGENT_CACHE_DIR:-$OUT/cache}
export SECTIONS="1 2" REPEATS=${REPEATS:-3}
for r in $(seq "${ROUNDS:-1}"); do
    echo "=== round $r: candidates sandboxed"
    EVAL_SERVICE_FLAGS="" bash bench/eval_service.sh "$CA" "$OUT/on-$r" 2>&1 | tail -40
    echo "=== round $r: --no-candidate-sandbox"
    EVAL_SERVICE_FLAGS="--no-candidate-sandbox" bash bench/eval_service.sh "$CA" "$OUT/off-$r" \
        2>&1 | tail -40
done
python3 - "$OUT" <<'PY'
import glob, json, os, statistics, sys
out = sys.argv[1]
def load(mode):
    runs = {}
    for f in sorted(glob.glob(os.path.join(out, f"{mode}-*", "**", "*.json"), recursive=True)):
        try:
            r = json.load(open(f))
        except (OSError, ValueError):
            continue
        if not isinstance(r, dict) or "stage" not in r:
            continue
        h = r.get("harness") or {}
        c = ((h.get("timing") or {}).get("candidate") or {}).get("median_ms")
        runs.setdefault(os.path.basename(f), []).append(
            (r.get("elapsed_ms"), c, (r.get("reward") or {}).get("reward"),
             (h.get("isolation") or {}).get("sandbox")))
    return runs
on, off = load("on"), load("off")
print(f"{'evaluation':44s} {'wall on':>9s} {'wall off':>9s} {'cand on':>9s} {'cand off':>9s} rew")
for k in sorted(set(on) & set(off)):
    a, b = on[k], off[k]
    w = lambda xs, i: statistics.median([x[i] for x in xs if x[i] is not None]) if any(x[i] is not None for x in xs) else None
    f = lambda v, d=0: "-" if v is None else (f"{v / 1000:.2f}s" if d == 0 else f"{v:.4f}")
    print(f"{k[:44]:44s} {f(w(a, 0)):>9s} {f(w(b, 0)):>9s} {f(w(a, 1), 1):>9s} {f(w(b, 1), 1):>9s} "
          f"{a[0][2]}/{b[0][2]} sandbox={a[0][3]}/{b[0][3]}")
PY
