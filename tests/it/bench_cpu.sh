#!/usr/bin/env bash
# `cuda-agent bench run --solutions` with the real evaluator in CPU mode (PyTorch and nvcc
# needed, no GPU): four tiny tasks (tests/bench/cpu/tasks: one kernel source for all, so one
# compile), KernelBench's generate_samples layout, a correct, a correct, a wrong and a missing
# solution, --rules kernelbench; the evaluator service started by bench itself. Interrupted
# with SIGINT after its first result and resumed: the run ends with every task scored once,
# the metrics as the reports say, and the service stopped.
. "${CA_REPO:?run through tests/run.sh (make test), which sets CA_REPO}/tests/it/lib.sh"
require_cpu_evaluator
unset CUDA_AGENT_EVALUATOR
export CUDA_AGENT_STATE_DIR=$PWD/state
FIX=$CA_REPO/tests/bench/cpu
args=(--db "$PWD/cpu.sqlite" --device cpu --rules kernelbench --no-compile-baseline --jobs 1
      --solutions "$FIX/solutions" "$FIX/tasks")
j() { "$PY" -c 'import json,sys; J=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$OUT" "$1"; }

"$CA" bench run --json "${args[@]}" >"$PWD/r1.jsonl" 2>"$PWD/r1.err" &
pid=$!
for _ in $(seq 6000); do grep -q '"event":"done","task":"l1' "$PWD/r1.jsonl" 2>/dev/null && break; sleep 0.1; done
kill -INT $pid
wait $pid
RC=$?
assert "SIGINT: exit 130 ($RC; $(tail -2 "$PWD/r1.err" | tr '\n' ' '))" [ "$RC" = 130 ]
n1=$(grep -c '"event":"done"' "$PWD/r1.jsonl")
assert "stopped early: $n1 of 4 attempts finished" [ "$n1" -ge 1 ] && [ "$n1" -lt 4 ]
assert "the evaluator it started is gone" [ ! -S "$PWD/cpu.files/evaluator.sock" ]
assert "no evaluator left running" bash -c "! pgrep -f '[e]valuator --socket $PWD/cpu.files' >/dev/null"

run "$CA" bench run "${args[@]}"
expect "resumed to the end" 0 "all       4       4   50.0%"
assert "... with the rest only ($(grep -c '^bench: ' "$ERR") evaluated)" [ "$(grep -c '^bench: l' "$ERR")" = $((4 - n1)) ]
run "$CA" bench report --json "$PWD/cpu.sqlite"
expect "report --json" 0
assert "verdicts: the two good ones correct, the wrong one and the missing one failed" \
    [ "$(j "[(t['name'], t['verdict']) for t in J['tasks']]")" = "[('l1_1_Swish', 'correct'), ('l1_2_SwishWide', 'correct'), ('l2_1_SwishScaled', 'failed'), ('l2_2_SwishMissing', 'failed')]" ]
assert "the wrong one failed verification" [ "$(j "[t['attempts'][0]['stage'] for t in J['tasks'] if t['name'] == 'l2_1_SwishScaled']")" = "['verify']" ]
assert "speedups vs eager measured, none vs torch.compile (KernelBench's baseline)" \
    [ "$(j "[(t['speedup_eager'] > 0, t['speedup_compile']) for t in J['tasks'] if t['verdict'] == 'correct']")" = "[(True, None), (True, None)]" ]
assert "the geomean is over the correct tasks' speedups ($(j "J['metrics']['overall']['geomean_speedup_eager']"))" "$PY" -c '
import json, math, sys
J = json.load(open(sys.argv[1]))
s = [t["speedup_eager"] for t in J["tasks"] if t["verdict"] == "correct"]
g = J["metrics"]["overall"]["geomean_speedup_eager"]
assert abs(g / math.exp(sum(map(math.log, s)) / len(s)) - 1) < 1e-4, (g, s)  # 6 digits shown' "$OUT"
assert "the environment: device and torch from the evaluator" [ "$(j "J['environment']['device_type'] + ' ' + str('torch' in J['environment'])")" = "cpu True" ]
assert "the HTML report" grep -q 'id="chart-fastp"' "$PWD/cpu.html"
finish
