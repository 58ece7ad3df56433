#!/usr/bin/env bash
# bench/bench_leaderboard.sh - the leaderboard corpus (../shared/corpora/kernelbench-leaderboard:
# 383 LLM-written KernelBench-format solutions of 250 tasks) through
#   cuda-agent bench run --map data.json --rules kernelbench --no-compile-baseline
# on one GPU host, with a cold compile cache (cold compiles included), then a summary: tasks
# and evaluations per GPU-hour, wall time, and where the time goes (evaluator start-up,
# extract / policy / compile / harness summed over attempts, per-attempt percentiles, cache
# hits), verdicts by stage, and the metrics table. With KILL_AFTER=N the run is interrupted
# (SIGINT) after N results and resumed: the summary says whether anything was lost or
# evaluated twice.
#
#   bench/bench_leaderboard.sh [OUT_DIR]
#   env: BIN (build/cuda-agent), CORPUS (../shared/corpora/kernelbench-leaderboard),
#        JOBS (attempts at once; default 2 per CPU core, at most 32), SAMPLE (N solutions'
#        tasks, stratified; default all), BUDGET_MS (timing budget per measured function,
#        300 as bench/leaderboard.py), KILL_AFTER (N: interrupt and resume), WARM_CACHE=1
#        (keep $CUDA_AGENT_CACHE_DIR instead of a fresh cache), BENCH_FLAGS (extra flags)
# Run from the repository root on a machine with a GPU and PyTorch; where the project cannot be
# built, with the carried binary: bash bench/carry.sh here, then carry .carry and the corpus
# (e.g. copied to .corpus/lb) and run BIN=.carry/cuda-agent CORPUS=.corpus/lb. Writes OUT_DIR/lb.sqlite,
# lb.html, lb.md, events*.jsonl, summary.txt and summary.json.
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
    rm -rf "$CUDA_AGENT_CACHE_DIR"
fi
args=(--db "$OUT/lb.sqlite" --map "$CORPUS/data.json" --rules kernelbench --no-compile-baseline
      --budget-ms "${BUDGET_MS:-300}" --jobs "$JOBS" --json)
[ -n "${SAMPLE:-}" ] && args+=(--sample "$SAMPLE" --seed 1)
# shellcheck disable=SC2206
[ -n "${BENCH_FLAGS:-}" ] && args+=(${BENCH_FLAGS})
ngpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
echo "== $BIN bench run ${args[*]} (GPUs: $ngpus, cores: $cores)" >&2

t0=$(date +%s.%N)
if [ -n "${KILL_AFTER:-}" ]; then
    "$BIN" bench run "${args[@]}" >"$OUT/events1.jsonl" 2>"$OUT/stderr1.log" &
    pid=$!
    while kill -0 $pid 2>/dev/null; do
        [ "$(grep -c '"event":"done"' "$OUT/events1.jsonl" 2>/dev/null)" -ge "$KILL_AFTER" ] && break
        sleep 0.5
    done
    tk=$(date +%s.%N)
    kill -INT $pid 2>/dev/null
    wait $pid
    python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("select count(*) from reports").fetchone()[0])' \
        "$OUT/lb.sqlite" >"$OUT/stored_after_kill.txt"
    echo "interrupted: exit $? after $(grep -c '"event":"done"' "$OUT/events1.jsonl") results; stopping took $(echo "$(date +%s.%N) - $tk" | bc) s" >&2
fi
"$BIN" bench run "${args[@]}" >"$OUT/events.jsonl" 2>"$OUT/stderr.log"
rc=$?
t1=$(date +%s.%N)
echo "bench run: exit $rc" >&2
"$BIN" bench report "$OUT/lb.sqlite" >"$OUT/report.txt"

python3 - "$OUT" "$t0" "$t1" "$ngpus" "$JOBS" "${KILL_AFTER:-}" <<'PYEOF' | tee "$OUT/summary.txt"
import collections, glob, json, os, sqlite3, statistics, sys
out, t0, t1, ngpus, jobs, kill_after = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), \
    int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
db = sqlite3.connect(os.path.join(out, "lb.sqlite"))
wall = t1 - t0
rows = db.execute("select r.stage, r.verdict, t.wall_ms, t.stage_ms, r.json from reports r "
                  "join timings t on t.attempt_id = r.attempt_id").fetchall()
n = len(rows)
attempts = db.execute("select count(*) from attempts").fetchone()[0]
tasks = db.execute("select count(*) from tasks").fetchone()[0]
gpu_h = wall / 3600 * max(ngpus, 1)
events = [json.loads(l) for f in sorted(glob.glob(os.path.join(out, "events*.jsonl")))
          for l in open(f) if l.startswith("{")]
ends = [e for e in events if e.get("event") == "end"]
done_events = sum(1 for e in events if e.get("event") == "done")
stage_tot = collections.Counter()
cached = 0
for _, _, _, sm, rep in rows:
    for k, v in json.loads(sm or "{}").items():
        stage_tot[k] += v / 1000
    r = json.loads(rep)
    if ((r.get("compile") or {}).get("link") or {}).get("cached"):
        cached += 1
walls = sorted(w / 1000 for _, _, w, _, _ in rows if w is not None)
pct = lambda q: walls[min(len(walls) - 1, int(q * len(walls)))] if walls else float("nan")
s = {
    "wall_s": round(wall, 1), "gpus": ngpus, "jobs": jobs, "tasks": tasks,
    "attempts": attempts, "evaluated": n,
    "evaluations_per_gpu_hour": round(n / gpu_h, 1) if gpu_h else None,
    "tasks_per_gpu_hour": round(tasks / gpu_h, 1) if gpu_h and n == attempts else None,
    "evaluator_start_s": [e.get("evaluator_start_s") for e in ends],
    "stage_s_summed": {k: round(v, 1) for k, v in stage_tot.most_common()},
    "attempt_wall_s": {"p50": round(pct(0.5), 2), "p90": round(pct(0.9), 2),
                       "max": round(walls[-1], 2) if walls else None},
    "link_cached": cached,
    "verdicts": dict(collections.Counter(v for _, v, _, _, _ in rows)),
    "stages": dict(collections.Counter(st for st, _, _, _, _ in rows).most_common()),
}
if kill_after:
    first = sum(1 for l in open(os.path.join(out, "events1.jsonl")) if '"event":"done"' in l)
    stored = int(open(os.path.join(out, "stored_after_kill.txt")).read())
    s["resume"] = {"finished_before_kill": first, "stored_after_kill": stored,
                   "lost": first - stored, "evaluated_twice": done_events - n}
json.dump(s, open(os.path.join(out, "summary.json"), "w"), indent=1)
print(f"leaderboard corpus: {tasks} tasks, {attempts} solutions, {n} evaluated in {wall:.0f} s "
      f"on {ngpus} GPU(s), {jobs} jobs")
print(f"  {s['evaluations_per_gpu_hour']} evaluations per GPU-hour (goal >= 1000), "
      f"{s['tasks_per_gpu_hour']} tasks per GPU-hour")
print(f"  evaluator start-up: {s['evaluator_start_s']} s; per attempt p50 "
      f"{s['attempt_wall_s']['p50']} s, p90 {s['attempt_wall_s']['p90']} s, max "
      f"{s['attempt_wall_s']['max']} s; link cached {cached}/{n}")
print("  where the time goes (summed over attempts, s): " +
      ", ".join(f"{k} {v}" for k, v in s["stage_s_summed"].items()))
print(f"  verdicts: {s['verdicts']}; stages: {s['stages']}")
if kill_after:
    print(f"  resume: {s['resume']}")
PYEOF
cat "$OUT/report.txt"
echo "files: $OUT/lb.html $OUT/lb.md $OUT/summary.json" >&2
exit $rc
