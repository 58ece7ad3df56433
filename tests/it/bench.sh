#!/usr/bin/env bash
# `cuda-agent bench` end to end against a fake evaluator service (tests/it/fake_evaluator.py:
# the service's protocol, reports made from each fixture's `# FAKE {...}` line), so it runs
# without PyTorch or a GPU: the plan (tree + JSONL map, the leaderboard's data.json, --levels,
# --sample, --label), the metrics against hand-computed values (best of two attempts, a tie at
# 1.0x, a failure, an infrastructure error), SIGINT mid-run and resume (nothing lost, nothing
# evaluated twice), a finished run run again (database unchanged), refused databases and bad
# input, compare, and the HTML report in headless Chromium. The real evaluator in CPU mode is
# tests/it/bench_cpu.sh.
. "${CA_REPO:?run through tests/run.sh (make test), which sets CA_REPO}/tests/it/lib.sh"
PY=python3
FIX=$CA_REPO/tests/bench
TASKS=$FIX/cpu/tasks
MAP=$FIX/fake/map.jsonl
SOCK=$PWD/fe.sock
unset CUDA_AGENT_EVALUATOR
"$PY" "$CA_REPO/tests/it/fake_evaluator.py" "$SOCK" 2>"$PWD/fake.err" &
fake_pid=$!
trap 'kill $fake_pid 2>/dev/null; rm -f "$OUT" "$ERR"' EXIT
for _ in $(seq 100); do [ -S "$SOCK" ] && break; sleep 0.05; done
assert "the fake evaluator listens" [ -S "$SOCK" ]
bench() { "$CA" bench run --evaluator "$SOCK" "$@"; }
j() { "$PY" -c 'import json,sys; J=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$OUT" "$1"; }
requests() { grep -c '"op": "eval"' "$SOCK.log" 2>/dev/null || echo 0; }
dump() { "$PY" -c 'import sqlite3,sys; print("\n".join(sqlite3.connect(sys.argv[1]).iterdump()))' "$1"; }

# -- usage and bad input
run "$CA" bench run --map "$MAP" "$TASKS";                   expect "--db is required" 2 "" "--db"
run bench --db x.sqlite "$TASKS";                            expect "a source is required" 2 "" "one source"
run bench --db x.sqlite --map "$MAP" --solutions . "$TASKS"; expect "one source only" 2 "" "one source"
run bench --db x.sqlite --map "$MAP" --tasks nope "$TASKS"
expect "an unknown task: exit 4" 4 "" "no task 'nope'"
run bench --db x.sqlite --map "$MAP" --levels 1,x "$TASKS";  expect "bad --levels" 2 "" "--levels"
printf '{"task": "l1_1_Swish", "solution": "%s"}\nnot json\n' "$FIX/fake/s_fast.py" >"$PWD/bad.jsonl"
run bench --db bad1.sqlite --map "$PWD/bad.jsonl" "$TASKS"
expect "a bad map line names file:line" 3 "" "bad.jsonl:2: expected"
printf '{"task": "l1_1_Swish", "solution": "nowhere.py"}\n' >"$PWD/missing.jsonl"
run bench --db bad2.sqlite --map "$PWD/missing.jsonl" "$TASKS"
expect "a missing solution file: exit 4, named" 4 "" "nowhere.py: no such file"
"$PY" -c 'import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute("create table t(x)"); c.commit()' "$PWD/foreign.sqlite"
run bench --db foreign.sqlite --map "$MAP" "$TASKS"
expect "a foreign SQLite database is refused" 3 "" "not a cuda-agent bench run"
head -c 4096 /dev/urandom >"$PWD/corrupt.sqlite"
run bench --db corrupt.sqlite --map "$MAP" "$TASKS"
expect "a corrupted database is refused" 3 "" "not a bench run database"
run "$CA" bench report "$PWD/none.sqlite";                   expect "report: no such run" 4 "" "no such bench run"
assert "no evaluation was requested by refused runs" [ "$(requests)" = 0 ]
assert "a refused new run leaves no database behind" [ ! -e x.sqlite ] && [ ! -e bad1.sqlite ]

# -- a run, interrupted after its first result, then resumed
"$CA" bench run --evaluator "$SOCK" --db a.sqlite --map "$MAP" --jobs 1 --json "$TASKS" \
    >"$PWD/a1.jsonl" 2>"$PWD/a1.err" &
pid=$!
for _ in $(seq 200); do grep -q '"event":"done"' "$PWD/a1.jsonl" 2>/dev/null && break; sleep 0.02; done
kill -INT $pid
wait $pid
RC=$?
assert "SIGINT: exit 130 (interrupted), rc $RC" [ "$RC" = 130 ]
n1=$(grep -c '"event":"done"' "$PWD/a1.jsonl")
db1=$("$PY" -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("select count(*) from reports").fetchone()[0])' a.sqlite)
assert "every result announced is in the database ($n1 = $db1)" [ "$n1" = "$db1" ]
assert "the run stopped early ($n1 of 5 finished)" [ "$n1" -ge 1 ] && [ "$n1" -lt 5 ]
run bench --db a.sqlite --map "$MAP" --jobs 2 --json "$TASKS"
expect "resume: exit 0" 0 '"already_finished":'"$n1"
assert "resume: only the rest ran" grep -q "\"finished_now\":$((5 - n1))," "$OUT"
assert "nothing was evaluated twice ($(requests) requests for 5 attempts)" [ "$(requests)" = 5 ]
assert "the HTML and Markdown reports were written" [ -s a.html ] && [ -s a.md ]

# -- interrupted twice: the running attempt is abandoned at once, not recorded, run on resume
"$CA" bench run --evaluator "$SOCK" --db c.sqlite --map "$MAP" --jobs 1 --json "$TASKS" \
    >"$PWD/c1.jsonl" 2>"$PWD/c1.err" &
pid=$!
for _ in $(seq 200); do grep -q '"event":"done"' "$PWD/c1.jsonl" 2>/dev/null && break; sleep 0.02; done
kill -INT $pid
sleep 0.05
kill -INT $pid
wait $pid
RC=$?
assert "two SIGINTs: exit 130 ($RC)" [ "$RC" = 130 ]
assert "... said so" grep -q "abandoned the running attempts" "$PWD/c1.err"
n1=$(grep -c '"event":"done"' "$PWD/c1.jsonl")
db1=$("$PY" -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("select count(*) from reports").fetchone()[0])' c.sqlite)
assert "the abandoned attempt is not in the database ($n1 announced, $db1 stored)" [ "$n1" = "$db1" ]
run bench --db c.sqlite --map "$MAP" --no-html "$TASKS"
expect "... and runs on resume" 0 "all       4       3   66.7%"

# -- a finished run run again changes nothing
base=$(requests)
dump a.sqlite >"$PWD/before.sql"
run bench --db a.sqlite --map "$MAP" "$TASKS"
expect "re-run: exit 0, the table printed" 0 "66.7%"
dump a.sqlite >"$PWD/after.sql"
assert "re-run: the database is unchanged" cmp -s "$PWD/before.sql" "$PWD/after.sql"
assert "re-run: no evaluation requested" [ "$(requests)" = "$base" ]
run bench --db a.sqlite --map "$MAP" --retry-infra --no-html "$TASKS"
expect "--retry-infra runs the infrastructure failure again, only it" 0 "" "1 attempt(s) without a verdict run again"
assert "... one more request" [ "$(requests)" = $((base + 1)) ]
run bench --db a.sqlite --map "$MAP" --rules kernelbench "$TASKS"
expect "other settings on an existing run are refused" 3 "" "--rules was \"cuda-agent\", now \"kernelbench\""

# -- --retime-noisy: the correct attempts whose timing was noisy run again, only they
printf '# FAKE {"reward": 3, "speedup_eager": 2.0, "speedup_compile": 1.5, "timing_noisy": true}\n' \
    >"$PWD/s_noisy.py"
cat "$FIX/fake/s_fast.py" >>"$PWD/s_noisy.py"
printf '{"task": "l1_1_Swish", "solution": "%s", "label": "noisy"}\n{"task": "l1_2_SwishWide", "solution": "%s", "label": "clean"}\n' \
    "$PWD/s_noisy.py" "$FIX/fake/s_tie.py" >"$PWD/noisy.jsonl"
run bench --db n.sqlite --map "$PWD/noisy.jsonl" --no-html "$TASKS"
expect "a run with one noisy timing" 0 "timing noisy: 1"
base=$(requests)
run bench --db n.sqlite --map "$PWD/noisy.jsonl" --retime-noisy --jobs 1 --no-html "$TASKS"
expect "--retime-noisy: the noisy attempt runs again" 0 "" "1 correct attempt(s) with noisy timing run again"
assert "... one more request, for the noisy solution ($(requests) after $base)" \
    [ "$(requests)" = $((base + 1)) ] && tail -1 "$SOCK.log" | grep -q s_noisy.py
run bench --db n.sqlite --map "$PWD/noisy.jsonl" --retime-noisy --no-html "$TASKS"
expect "... its report is still the only noisy one, and the clean one is not run again" 0 "" \
    "1 correct attempt(s) with noisy timing run again"
assert "... one more request" [ "$(requests)" = $((base + 2)) ]
run bench --db a.sqlite --map "$MAP" --retime-noisy --no-html "$TASKS"
expect "--retime-noisy on a run without noisy timings: nothing runs" 0 "" \
    "0 correct attempt(s) with noisy timing run again"

# -- the metrics, by hand: l1_1 best of {reward 1 0.8x/0.5x, reward 3 2.0x/1.25x}; l1_2 1.0x/0.5x
# (a tie is not faster); l2_1 failed; l2_2 infrastructure (no verdict).
run "$CA" bench report --json "$PWD/a.sqlite"
expect "report --json" 0
M='J["metrics"]["overall"]'
assert "4 tasks, 3 with a verdict, 1 infrastructure" [ "$(j "[$M[k] for k in ('tasks','verdicts','infrastructure','pending')]")" = "[4, 3, 1, 0]" ]
assert "pass rate 2/3" [ "$(j "round($M['pass_rate'], 6)")" = 0.666667 ]
assert "faster than eager 1/3 (the 1.0x tie is not faster)" [ "$(j "round($M['faster_eager_rate'], 6)")" = 0.333333 ]
assert "faster than compile 1/3" [ "$(j "round($M['faster_compile_rate'], 6)")" = 0.333333 ]
assert "geomean vs eager sqrt(2.0 * 1.0): the best attempt's, correct tasks only" [ "$(j "round($M['geomean_speedup_eager'], 5)")" = 1.41421 ]
assert "geomean vs compile sqrt(1.25 * 0.5)" [ "$(j "round($M['geomean_speedup_compile'], 5)")" = 0.79057 ]
assert "reward histogram" [ "$(j "$M['reward_histogram']")" = "{'-1': 1, '1': 1, '2': 0, '3': 1}" ]
assert "peak fraction median of 0.4 and 0.2" [ "$(j "round($M['peak_fraction_median'], 6)")" = 0.3 ]
assert "fast_p at p=1: 1/3" [ "$(j "[round(f['eager'], 6) for f in J['fast_p'] if f['p'] == 1.0]")" = "[0.333333]" ]
assert "level 2: 1 verdict, pass 0" [ "$(j "[(l['verdicts'], l['pass_rate']) for l in J['metrics']['levels'] if l['level'] == 2]")" = "[(1, 0.0)]" ]
assert "the best attempt is the faster one" [ "$(j "[t['attempts'][t['best_attempt']]['key'] for t in J['tasks'] if t['name'] == 'l1_1_Swish']")" = "['map:s_fast.py']" ]
assert "the environment comes from the reports" [ "$(j "J['environment']['gpu']")" = "Fake GPU" ]
run "$CA" bench report "$PWD/a.sqlite"
expect "the text table" 0 "all       4       3   66.7%    33.3%     33.3%    1.414x    0.791x     1       0   0.300"

# -- selection: levels, a stratified sample, a label
run bench --db lv.sqlite --map "$MAP" --levels 2 --no-html --json "$TASKS"
expect "--levels 2" 0 '"attempts":2,'
run bench --db s.sqlite --map "$MAP" --sample 2 --seed 7 --no-html "$TASKS"
expect "--sample 2" 0
run "$CA" bench report --json "$PWD/s.sqlite"
assert "--sample 2: one task per level" [ "$(j "sorted(t['level'] for t in J['tasks'])")" = "[1, 2]" ]
run bench --db b.sqlite --map "$MAP" --label model-a --no-html "$TASKS"
expect "--label model-a" 0

printf '{"task": "l1_2_SwishWide", "solution": "%s"}\n' "$FIX/fake/s_tie.py" >"$PWD/one.jsonl"
run bench --db one.sqlite --map "$PWD/one.jsonl" --no-html "$TASKS"
expect "a JSONL map defines the suite: the tasks it does not name are left out" 0 "all       1       1  100.0%" "no solution for 3 of the 4 selected task(s)"

# -- compare: without model-b's solution, l1_1 is worse in B
run "$CA" bench compare "$PWD/a.sqlite" "$PWD/b.sqlite"
expect "compare: task by task" 0 "B better on 0 task(s), worse on 1"
assert "compare names the task" grep -q "^l1_1_Swish .*worse" "$OUT"
run "$CA" bench compare --json "$PWD/a.sqlite" "$PWD/b.sqlite"
expect "compare --json" 0 '"tasks"'

# -- the leaderboard corpus's data.json: tasks from its problems/, solutions from its solutions/
run bench --db lb.sqlite --map "$FIX/fake/leaderboard/data.json" --no-html --json
expect "leaderboard data.json" 0 '"attempts":4,' "no solution for 1 of 3 task(s): they count as failed"
run "$CA" bench report --json "$PWD/lb.sqlite"
assert "leaderboard: tasks named as KernelBench's" [ "$(j "[t['name'] for t in J['tasks']]")" = "['l1_1_Swish', 'l2_1_SwishScaled', 'l2_2_SwishMissing']" ]
assert "leaderboard: a problem without a solution failed" [ "$(j "[(t['verdict'], t['attempts'][0]['stage']) for t in J['tasks'] if t['name'] == 'l2_2_SwishMissing']")" = "[('failed', 'missing')]" ]
assert "leaderboard: labels and KernelBench's speedups kept" [ "$(j "sorted((a['label'], a['extra']['kernelbench_speedup']) for t in J['tasks'] for a in t['attempts'] if a['extra'])")" = "[('model-a', 0.9), ('model-a', 1.3), ('model-b', 2.1)]" ]
# bench/lb_disagreements.py over that store: agreement with KernelBench's verdicts (all correct
# there), the disagreement's class, the tasks to run again.
run "$PY" "$CA_REPO/bench/lb_disagreements.py" "$PWD/lb.sqlite" --json "$PWD/lbd.json" \
    --task-list "$PWD/lbd.txt"
expect "lb_disagreements: 3 solutions, 2 as KernelBench scored them" 0 \
    "3 solutions evaluated, 2 correct as KernelBench scored them (66.7%)"
assert "lb_disagreements: the failure's class and task" grep -q "verify.*: output mismatch" "$OUT"
assert "lb_disagreements: the task to run again" grep -q "^l2_1_SwishScaled" "$PWD/lbd.txt"
assert "lb_disagreements: JSON" "$PY" -c 'import json, sys; d = json.load(open(sys.argv[1]));
sys.exit(0 if d["solutions"] == 3 and d["correct"] == 2 and d["spearman"] is None else 1)' "$PWD/lbd.json"
# A rerun's store over the first: its verdict on a solution replaces the first store's (here a
# copy where the failing solution was made correct, as a fixed evaluator would say).
"$PY" - "$PWD/lb.sqlite" "$PWD/lb2.sqlite" <<'PYEOF'
import shutil, sqlite3, sys
shutil.copy(sys.argv[1], sys.argv[2])
db = sqlite3.connect(sys.argv[2])
db.execute("update reports set verdict = 'correct' where verdict != 'correct'")
db.commit()
PYEOF
run "$PY" "$CA_REPO/bench/lb_disagreements.py" "$PWD/lb.sqlite" "$PWD/lb2.sqlite"
expect "lb_disagreements: a later store's verdicts replace an earlier one's" 0 \
    "3 solutions evaluated, 3 correct as KernelBench scored them (100.0%)"
run "$PY" "$CA_REPO/bench/lb_disagreements.py" "$PWD/lb2.sqlite" "$PWD/lb.sqlite"
expect "lb_disagreements: in the order given" 0 \
    "3 solutions evaluated, 2 correct as KernelBench scored them (66.7%)"
cp "$PWD/lb.sqlite" "$PWD/lb3.sqlite"
run "$PY" "$CA_REPO/bench/lb_disagreements.py" --json "$PWD/lb3.sqlite" "$PWD/lb.sqlite"
expect "lb_disagreements: --json naming a store is refused" 2 "" \
    "--json $PWD/lb3.sqlite: that is an SQLite file"
assert "... and the store is left as it was" cmp -s "$PWD/lb.sqlite" "$PWD/lb3.sqlite"
run "$PY" "$CA_REPO/bench/lb_disagreements.py" "$PWD/lb.sqlite" "$PWD/missing.sqlite"
expect "lb_disagreements: a missing second store" 2 "" "missing.sqlite: no such file"
# bench/bench_leaderboard.sh itself, on a copy of the fake corpus where one correct solution was
# timed while the host was busy: the run, its summary and disagreements, and with
# RETIME_NOISY=1 that solution timed again alone (the fake says noisy again: still 1 noisy).
cp -r "$FIX/fake/leaderboard" "$PWD/lbcorpus"
sed -i '1s/"reward": 1,/"reward": 1, "timing_noisy": true,/' "$PWD/lbcorpus/solutions/bbbb2222.py"
base=$(requests)
run env BIN="$CA" CORPUS="$PWD/lbcorpus" JOBS=2 RETIME_NOISY=1 \
    BENCH_FLAGS="--evaluator $SOCK" bash "$CA_REPO/bench/bench_leaderboard.sh" "$PWD/lbrun"
expect "bench_leaderboard.sh on the fake corpus: 3 of 4 as KernelBench scored them" 0 \
    "3 solutions evaluated, 2 correct as KernelBench scored them" \
    "1 correct attempt(s) with noisy timing run again"
assert "... its summary (4 attempts, 3 evaluated by this call) and the disagreements' JSON" \
    "$PY" -c 'import json, sys; s = json.load(open(sys.argv[1] + "/summary.json"))
d = json.load(open(sys.argv[1] + "/disagreements.json"))
sys.exit(0 if s["attempts"] == 4 and s["evaluated_this_call"] == 3 and d["correct"] == 2 else 1)' \
    "$PWD/lbrun"
assert "... 3 evaluations, then the noisy one again ($(requests) after $base)" \
    [ "$(requests)" = $((base + 4)) ]
run "$PY" "$CA_REPO/bench/lb_disagreements.py" "$PWD/missing.sqlite"
expect "lb_disagreements: no such store" 2 "" "missing.sqlite: no such file"
: >"$PWD/empty.sqlite"
run "$PY" "$CA_REPO/bench/lb_disagreements.py" "$PWD/empty.sqlite"
expect "lb_disagreements: not a store" 2 "" "not a store of \`cuda-agent bench run\`"

# -- --solutions in the tree layout (levelL/N_Name.py); KernelBench's own is in it/bench_cpu
mkdir -p "$PWD/tree/level2"
cp "$FIX/fake/s_fast.py" "$PWD/tree/level2/1_SwishScaled.py"
run bench --db tree.sqlite --solutions "$PWD/tree" --levels 2 --no-html "$TASKS"
expect "--solutions DIR/levelL/N_Name.py" 0 "all       2       2   50.0%" "no solution file for 1 of 2 task(s)"

# -- workspaces: DIR/<task name>/ (the fake evaluator reads its FAKE file); a task without one fails
mkdir -p "$PWD/ws/l1_1_Swish"
cp "$FIX/fake/s_fast.py" "$PWD/ws/l1_1_Swish/FAKE"
run bench --db ws.sqlite --workspaces "$PWD/ws" --tasks l1_1_Swish,l2_1_SwishScaled --no-html "$TASKS"
expect "--workspaces" 0 "all       2       2   50.0%" "no workspace for 1 of 2 task(s)"
assert "the workspace went to the evaluator" grep -q "\"workspace\": \"$PWD/ws/l1_1_Swish\"" "$SOCK.log"

# -- replay: earlier episodes (`cuda-agent run --out` folders), each one's best snapshot
R=$PWD/runs
header() { # RUN TASK-JSON
    mkdir -p "$1"
    printf '{"type": "header", "format": 1, "task_ref": "x", "task": %s, "model": "m", "base_url": "u", "options": {}, "tools": [], "messages": []}\n{"type": "turn"}\n' "$2" >"$1/trajectory.jsonl"
}
header "$R/a" '{"name": "l1_1_Swish", "hash": "0000000000000000"}'
mkdir -p "$R/a/best_workspace" "$R/a/workspace"
cp "$FIX/fake/s_fast.py" "$R/a/best_workspace/FAKE"
cp "$FIX/fake/s_wrong.py" "$R/a/workspace/FAKE"
header "$R/b" '{"name": "l2_1_SwishScaled"}'
mkdir -p "$R/b/workspace"
cp "$FIX/fake/s_wrong.py" "$R/b/workspace/FAKE"
header "$R/c" '{"name": "not_in_this_suite"}'
mkdir -p "$R/c/workspace" "$R/notarun" "$R/e"
echo 'not json' >"$R/e/trajectory.jsonl"
run bench --db replay.sqlite --replay "$R" --tasks l1_1_Swish,l2_1_SwishScaled --no-html "$TASKS"
expect "--replay: the best snapshot, else the final workspace" 0 "all       2       2   50.0%" "1 episode(s) of tasks outside the selection"
assert "--replay: a trajectory without a header is named and left out" grep -q "runs/e/trajectory.jsonl: .*left out" "$ERR"
assert "--replay: episode a's best snapshot was evaluated" grep -q "\"workspace\": \"$R/a/best_workspace\"" "$SOCK.log"
assert "--replay: episode b, without a best, its final workspace" grep -q "\"workspace\": \"$R/b/workspace\"" "$SOCK.log"
assert "--replay: not a's final workspace" [ -z "$(grep "\"workspace\": \"$R/a/workspace\"" "$SOCK.log")" ]
assert "--replay: the report says where the episodes came from" grep -q "episodes replayed from $R" "$OUT"
run bench --db replay1.sqlite --replay "$R/a" --tasks l1_1_Swish,l2_1_SwishScaled --no-html "$TASKS"
expect "--replay of one episode's folder" 0 "all       2       2   50.0%" "no episode for 1 of 2 task(s)"
run bench --db replay2.sqlite --replay "$R/notarun" --no-html "$TASKS"
expect "--replay of a folder without episodes" 4 "" "no episode here"
run bench --db replay3.sqlite --replay "$R" --workspaces "$PWD/ws" --no-html "$TASKS"
expect "--replay is one source among the others" 2 "" "give one source of solutions"

# -- the HTML report in headless Chromium
"$PY" "$CA_REPO/tests/it/bench_html.py" a.html 4 "$PWD/a.png" >"$OUT" 2>"$ERR"
case $? in
0) ok "$(tail -1 "$OUT" | sed 's/^ok //')" ;;
77) skip chromium "the HTML report in Chromium" "$(tail -1 "$OUT")" ;;
*) bad "the HTML report in Chromium" "$(cat "$OUT")" ;;
esac
finish
