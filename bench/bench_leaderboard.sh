#!/usr/bin/env bash
# bench/bench_leaderboard.sh - the leaderboard corpus (../shared/corpora/kernelbench-leaderboard:
# 383 LLM-written KernelBench-format solutions of 250 tasks, 94 of them without one) through
#   cuda-agent bench run --map data.json --rules kernelbench --no-compile-baseline
# on one GPU host, with a cold compile cache (cold compiles included), then a summary:
# evaluations and tasks per GPU-hour, wall time, where the time goes (evaluator start-up;
# extract / policy / compile / harness summed over attempts; per-attempt percentiles; cache
# hits), verdicts by stage, and the metrics table.
#
#   bench/bench_leaderboard.sh [OUT_DIR]
#   env: BIN (build/cuda-agent), CORPUS (../shared/corpora/kernelbench-leaderboard),
#        JOBS (attempts at once; default 2 per CPU core, at most 32), SAMPLE (N tasks,
#        stratified by level, seed 1; default all), BUDGET_MS (timing budget per measured
#        function, 300 as bench/leaderboard.py), KILL_AFTER (N: SIGINT after N results, then
#        resume: the summary says whether anything was lost or evaluated twice), TIME_LIMIT
#        (seconds: stop cleanly then, SIGINT; run the script again with the same OUT_DIR to
#        resume), WARM_CACHE=1 (keep $CUDA_AGENT_CACHE_DIR), BENCH_FLAGS (extra flags),
#        RETIME_NOISY=1 (once every attempt has a result, the correct ones timed while the host
#        was busy run again one at a time, `bench run --retime-noisy --jobs 1`, in what is left
#        of TIME_LIMIT; the throughput figures count the main pass only)
# The cache is made fresh (in OUT_DIR/cache) only when OUT_DIR holds no run yet: a resumed run
# keeps it. Run from the repository root on a machine with a GPU and PyTorch; where the project
# cannot be built, with the carried binary: bash bench/carry.sh here, then carry .carry and the
# corpus (e.g. copied to .corpus/lb) and run BIN=.carry/cuda-agent CORPUS=.corpus/lb. Writes
# OUT_DIR/lb.sqlite, lb.html, lb.md, events-*.jsonl, report.txt, summary.txt, summary.json and
# disagreements.txt/.json (bench/lb_disagreements.py: agreement with KernelBench, by class).
set -u
BIN=${BIN:-build/cuda-agent}
CORPUS=${CORPUS:-../shared/corpora/kernelbench-leaderboard}
OUT=${1:-/tmp/bench-leaderboard-$(date +%Y%m%d-%H%M%S)}
cores=$(nproc)
JOBS=${JOBS:-$((cores * 2 > 32 ? 32 : cores * 2))}
mkdir -p "$OUT"
[ -f "$CORPUS/data.json" ] || { echo "no $CORPUS/data.json (set CORPUS)" >&2; exit 2; }
if [ -z "${WARM_CACHE:-}" ]; then
    export CUDA_AGENT_CACHE_DIR=$OUT/cache # cold: compiles and baselines measured here
    [ -e "$OUT/lb.sqlite" ] || rm -rf "$CUDA_AGENT_CACHE_DIR"
fi
args=(--db "$OUT/lb.sqlite" --map "$CORPUS/data.json" --rules kernelbench --no-compile-baseline
      --budget-ms "${BUDGET_MS:-300}" --jobs "$JOBS" --json)
[ -n "${SAMPLE:-}" ] && args+=(--sample "$SAMPLE" --seed 1)
# shellcheck disable=SC2206
[ -n "${BENCH_FLAGS:-}" ] && args+=(${BENCH_FLAGS})
ngpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
echo "== $BIN bench run ${args[*]} (GPUs: $ngpus, cores: $cores)" >&2
stored() {
    python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("select count(*) from reports").fetchone()[0])' "$OUT/lb.sqlite" 2>/dev/null || echo 0
}
t0=$(date +%s.%N)
call=$(date +%H%M%S)

# run_bench EVENTS STOP_AFTER_RESULTS STOP_AFTER_SECONDS: bench run, SIGINT at either limit.
run_bench() {
    local ev=$1 after=$2 secs=$3 pid rc start
    start=$(date +%s)
    "$BIN" bench run "${args[@]}" >"$ev" 2>"${ev%.jsonl}.err" &
    pid=$!
    while kill -0 $pid 2>/dev/null; do
        if { [ -n "$after" ] && [ "$(grep -c '"event":"done"' "$ev")" -ge "$after" ]; } ||
            { [ -n "$secs" ] && [ $(($(date +%s) - start)) -ge "$secs" ]; }; then
            kill -INT $pid 2>/dev/null
            break
        fi
        sleep 0.5
    done
    wait $pid
    rc=$?
    echo "bench run: exit $rc, $(grep -c '"event":"done"' "$ev") results in $(($(date +%s) - start)) s" >&2
    return $rc
}

if [ -n "${KILL_AFTER:-}" ]; then
    run_bench "$OUT/events-$call-killed.jsonl" "$KILL_AFTER" "${TIME_LIMIT:-}"
    echo "$(grep -c '"event":"done"' "$OUT/events-$call-killed.jsonl") $(stored)" >"$OUT/kill-$call.txt"
fi
left=
[ -n "${TIME_LIMIT:-}" ] && left=$((TIME_LIMIT - ($(date +%s) - ${t0%.*})))
if [ -z "$left" ] || [ "$left" -gt 0 ]; then
    run_bench "$OUT/events-$call.jsonl" "" "$left"
    rc=$?
else
    rc=130
fi
t1=$(date +%s.%N)
if [ "${RETIME_NOISY:-0}" = 1 ] && [ "$rc" = 0 ]; then
    left=
    [ -n "${TIME_LIMIT:-}" ] && left=$((TIME_LIMIT - ($(date +%s) - ${t0%.*})))
    if [ -z "$left" ] || [ "$left" -gt 30 ]; then
        args+=(--retime-noisy --jobs 1)
        run_bench "$OUT/retime-$call.jsonl" "" "$left"
        grep -h 'noisy timing run again' "$OUT/retime-$call.err" >&2
    fi
fi
"$BIN" bench report "$OUT/lb.sqlite" >"$OUT/report.txt"

python3 - "$OUT" "$t0" "$t1" "$ngpus" "$JOBS" "$call" <<'PYEOF' | tee "$OUT/summary.txt"
import collections, glob, json, os, sqlite3, sys
out, t0, t1, ngpus, jobs, call = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), \
    int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
db = sqlite3.connect(os.path.join(out, "lb.sqlite"))
wall = t1 - t0
rows = db.execute("select r.stage, r.verdict, t.wall_ms, t.stage_ms, r.json, t.started_us "
                  "from reports r join timings t on t.attempt_id = r.attempt_id").fetchall()
now = [r for r in rows if (r[5] or 0) >= t0 * 1e6]  # evaluated by this call
attempts = db.execute("select count(*) from attempts").fetchone()[0]
missing = db.execute("select count(*) from attempts where kind = 'missing'").fetchone()[0]
tasks = db.execute("select count(*) from tasks").fetchone()[0]
gpu_h = wall / 3600 * max(ngpus, 1)
evals = [r for r in now if r[0] != "missing"]
events = [json.loads(l) for f in sorted(glob.glob(os.path.join(out, f"events-{call}*.jsonl")))
          for l in open(f) if l.startswith("{")]
stage_tot = collections.Counter()
cached = 0
for r in evals:
    for k, v in json.loads(r[3] or "{}").items():
        stage_tot[k] += v / 1000
    rep = json.loads(r[4])
    if ((rep.get("compile") or {}).get("link") or {}).get("cached"):
        cached += 1
walls = sorted(r[2] / 1000 for r in evals if r[2] is not None)
pct = lambda q: round(walls[min(len(walls) - 1, int(q * len(walls)))], 2) if walls else None
s = {
    "wall_s": round(wall, 1), "gpus": ngpus, "jobs": jobs, "tasks": tasks,
    "attempts": attempts, "attempts_missing": missing, "finished_total": len(rows),
    "evaluated_this_call": len(evals),
    "evaluations_per_gpu_hour": round(len(evals) / gpu_h, 1) if gpu_h and evals else None,
    "tasks_per_gpu_hour": round(len({r[4] and json.loads(r[4]).get("task", {}).get("id")
                                     for r in evals}) / gpu_h, 1) if gpu_h and evals else None,
    "evaluator_start_s": [e.get("evaluator_start_s") for e in events if e.get("event") == "end"],
    "stage_s_summed": {k: round(v, 1) for k, v in stage_tot.most_common()},
    "attempt_wall_s": {"p50": pct(0.5), "p90": pct(0.9), "max": round(walls[-1], 2) if walls else None},
    "link_cached": cached,
    "verdicts": dict(collections.Counter(r[1] for r in rows)),
    "stages": dict(collections.Counter(r[0] for r in rows).most_common()),
}
for k in sorted(glob.glob(os.path.join(out, f"kill-{call}.txt"))):
    first, stored = map(int, open(k).read().split())
    done_now = sum(1 for e in events if e.get("event") == "done")
    s["resume"] = {"results_before_kill": first, "stored_after_kill": stored,
                   "lost": first - stored, "evaluated_twice": done_now - len(now)}
json.dump(s, open(os.path.join(out, "summary.json"), "w"), indent=1)
print(f"leaderboard corpus: {tasks} tasks, {attempts} attempts ({missing} without a solution); "
      f"{len(rows)} finished in all, {len(evals)} evaluated by this call in {wall:.0f} s on "
      f"{ngpus} GPU(s), {jobs} jobs")
print(f"  {s['evaluations_per_gpu_hour']} evaluations per GPU-hour (goal >= 1000), "
      f"{s['tasks_per_gpu_hour']} tasks per GPU-hour")
print(f"  evaluator start-up: {s['evaluator_start_s']} s; per attempt p50 "
      f"{s['attempt_wall_s']['p50']} s, p90 {s['attempt_wall_s']['p90']} s, max "
      f"{s['attempt_wall_s']['max']} s; link cached {cached}/{len(evals)}")
print("  where the time goes (summed over this call's attempts, s): " +
      ", ".join(f"{k} {v}" for k, v in s["stage_s_summed"].items()))
print(f"  verdicts: {s['verdicts']}; stages: {s['stages']}")
if "resume" in s:
    print(f"  kill and resume: {s['resume']}")
PYEOF
cat "$OUT/report.txt"
# Agreement with KernelBench's verdicts and the rank correlation, with every disagreement's class.
python3 "$(dirname "$0")/lb_disagreements.py" "$OUT/lb.sqlite" --json "$OUT/disagreements.json" \
    >"$OUT/disagreements.txt" && grep -v '^         ' "$OUT/disagreements.txt"
echo "files: $OUT/lb.html $OUT/lb.md $OUT/summary.json $OUT/disagreements.txt" >&2
exit $rc
