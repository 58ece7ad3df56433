#!/usr/bin/env bash
# bench/bench_agent.sh - `cuda-agent bench run --model` on a few tasks (issue 14): the agent on
# each example task (the ReAct loop, the per-episode sandbox, the workspace's ./compile,
# ./verify and ./profile through the evaluator service bench starts), against the scripted
# OpenAI-compatible server tests/it/fake_llm.py, each episode scored by bench, results in
# SQLite, then `bench report`. The scripted model writes examples/solutions/NAME for the task
# NAME (tests/it/solve_turns.py: read model_new.py, write the kernels and model_new.py,
# ./compile, ./verify, ./profile, answer), so every episode must end correct with reward >= 1:
# the script fails otherwise. Episodes run one at a time (--jobs 1): the scripted server
# answers its steps in order, one task's after the other's.
#
#   bash bench/bench_agent.sh [BIN] [OUT_DIR]
#   env: TASKS (example names, comma-separated; default every examples/solutions/NAME),
#        DEVICE (cuda; cpu with SOLUTION_DIR and TASK_FILE for one CPU-mode task),
#        BENCH_FLAGS (extra flags for bench run)
# Writes OUT_DIR/agent.sqlite, agent.html, agent.md, script.json, fake_llm.log, run.jsonl
# (bench run --json), bench.err, report.json and summary.txt. Exit status: 0 every episode
# correct with reward >= 1; 1 not; 2 usage; 69 a needed component missing.
set -u
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${1:-$REPO/build/cuda-agent}
OUT=${2:-/tmp/bench-agent-$(date +%Y%m%d-%H%M%S)}
DEVICE=${DEVICE:-cuda}
[ -x "$BIN" ] || { echo "bench_agent: no binary $BIN" >&2; exit 69; }
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
# A fresh run (the script's steps start at the top), and no port file of an earlier server.
rm -rf "$OUT/agent.sqlite" "$OUT/agent.files" "$OUT/tasks.jsonl" "$OUT/port"

# The tasks (a JSONL task set, in this order) and the scripted turns for each, concatenated.
pairs=()
if [ -n "${SOLUTION_DIR:-}" ]; then
    pairs=("${TASK_FILE:?SOLUTION_DIR needs TASK_FILE}:$SOLUTION_DIR")
else
    all=("$REPO"/examples/solutions/*/)
    all=("${all[@]%/}")
    all=("${all[@]##*/}")
    IFS=, read -r -a names <<<"${TASKS:-$(IFS=,; echo "${all[*]}")}"
    for n in "${names[@]}"; do
        [ -d "$REPO/examples/solutions/$n" ] || { echo "bench_agent: no example $n" >&2; exit 2; }
        pairs+=("$REPO/examples/tasks/$n.py:$REPO/examples/solutions/$n")
    done
fi
python3 - "$OUT" "$REPO" "${pairs[@]}" <<'PY' || exit 2
import json, os, subprocess, sys
out, repo, pairs = sys.argv[1], sys.argv[2], sys.argv[3:]
steps = []
with open(os.path.join(out, "tasks.jsonl"), "w") as f:
    for pair in pairs:
        task, sol = pair.rsplit(":", 1)
        name = os.path.splitext(os.path.basename(task))[0]
        f.write(json.dumps({"name": name, "code": open(task).read()}) + "\n")
        steps += json.loads(subprocess.check_output(
            [sys.executable, os.path.join(repo, "tests/it/solve_turns.py"), sol,
             "--bash-timeout", "600000", "--done", f"{name}: done.",
             "./compile", "./verify", "./profile"]))
json.dump(steps, open(os.path.join(out, "script.json"), "w"))
print(f"{len(pairs)} task(s), {len(steps)} scripted step(s)", file=sys.stderr)
PY

python3 "$REPO/tests/it/fake_llm.py" "$OUT/script.json" "$OUT/port" "$OUT/fake_llm.log" &
srv=$!
trap 'kill $srv 2>/dev/null' EXIT
for _ in $(seq 200); do [ -s "$OUT/port" ] && break; sleep 0.05; done
[ -s "$OUT/port" ] || { echo "bench_agent: the scripted server did not start" >&2; exit 69; }
URL=http://127.0.0.1:$(cat "$OUT/port")/v1

t0=$(date +%s.%N)
# shellcheck disable=SC2086
"$BIN" bench run --db "$OUT/agent.sqlite" --model scripted --base-url "$URL" --jobs 1 \
    --max-turns 12 --device "$DEVICE" --json ${BENCH_FLAGS:-} "$OUT/tasks.jsonl" \
    >"$OUT/run.jsonl" 2>"$OUT/bench.err"
rc=$?
wall=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$t0" "$(date +%s.%N)")
"$BIN" bench report "$OUT/agent.sqlite" | tee "$OUT/summary.txt"
"$BIN" bench report --json "$OUT/agent.sqlite" >"$OUT/report.json"
python3 - "$OUT" "$rc" "$wall" "$(wc -l <"$OUT/fake_llm.log")" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
out, rc, wall, requests = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
J = json.load(open(f"{out}/report.json"))
bad = []
print(f"bench run: exit {rc}, {wall} s of wall clock, {requests} model request(s)")
for t in J["tasks"]:
    a = (t.get("attempts") or [{}])[0]
    ag = a.get("agent") or {}
    tm = ag.get("timings") or {}
    best = (ag.get("rewards") or {}).get("best") or {}
    s = lambda ms: "-" if ms is None else f"{ms / 1000:.1f}"  # noqa: E731
    print(f"  {t.get('name', t.get('id'))}: {t.get('verdict')}, reward {t.get('reward')} "
          f"(best snapshot: {best.get('command')}), x eager {t.get('speedup_eager')}, "
          f"x compile {t.get('speedup_compile')}; stop {ag.get('stop_reason')}, "
          f"{ag.get('turns')} turns, {ag.get('evals_recorded')} evaluations by the agent; "
          f"episode {s(tm.get('wall_ms'))} s (tools {s(tm.get('tool_ms'))} s, model "
          f"{s(tm.get('model_ms'))} s), attempt {s(a.get('wall_ms'))} s with scoring")
    if t.get("verdict") != "correct" or (t.get("reward") or 0) < 1:
        bad.append(t.get("name", t.get("id")))
print("every episode correct, reward >= 1" if not bad and rc == 0 else f"FAILED: {bad or 'bench run'}")
sys.exit(1 if bad or rc else 0)
PY
