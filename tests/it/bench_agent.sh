#!/usr/bin/env bash
# `cuda-agent bench run --model` against the scripted model server (tests/it/fake_llm.py) with
# the real evaluator in CPU mode (PyTorch, nvcc and user namespaces needed, no GPU): the agent
# writes the CPU-mode fixture's solution (tests/eval/cpu) and answers; bench scores the
# episode, keeps its result and trajectory, and the HTML report shows the turns.
. "${CA_REPO:?run through tests/run.sh (make test), which sets CA_REPO}/tests/it/lib.sh"
require_cpu_evaluator
export CUDA_AGENT_STATE_DIR=$PWD/state
unset CUDA_AGENT_EVALUATOR CUDA_AGENT_EVAL_DEVICE OPENAI_BASE_URL CUDA_AGENT_BASE_URL
FIX=$CA_REPO/tests/eval/cpu
if ! "$CA" tool --workspace "$("$CA" workspace create --task "$FIX/task.py" "$PWD/probe" >/dev/null &&
    echo "$PWD/probe")" --episode probe-$$ Bash '{"command":"true"}' >/dev/null 2>"$ERR"; then
    grep -q "namespaces" "$ERR" || { echo "FAIL: a tool call in the sandbox: $(head -c 300 "$ERR")"; exit 1; }
    skip_all userns "no sandbox on this host: $(head -c 300 "$ERR")"
fi
"$CA" tool --episode probe-$$ --close >/dev/null 2>&1
. "$CA_REPO/tests/it/fake_llm.bash"
python3 "$CA_REPO/tests/it/solve_turns.py" "$FIX/sol" >script.json
serve script
# The server from the environment (the episodes' default), not --base-url.
OPENAI_BASE_URL=$URL run "$CA" bench run --db "$PWD/agent.sqlite" --model test-model --device cpu \
    --max-turns 5 --json "$FIX/task.py"
expect "the agent run is scored" 0 '"verdict":"correct"'
run "$CA" bench run --db "$PWD/x.sqlite" --model m --rules kernelbench "$FIX/task.py"
expect "episodes are scored under SKILL.md's rules only" 2 "" "--rules kernelbench"

run "$CA" bench report --json "$PWD/agent.sqlite"
J() { python3 -c 'import json,sys; J=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$OUT" "$1"; }
assert "one task, correct, reward >= 1" [ "$(J "[(t['verdict'], t['reward'] >= 1) for t in J['tasks']]")" = "[('correct', True)]" ]
assert "the episode's result is kept" [ "$(J "J['tasks'][0]['attempts'][0]['agent']['stop_reason']")" = answer ]
assert "the trajectory file is named" [ -s "$(J "J['tasks'][0]['attempts'][0]['agent']['trajectory']")" ]
assert "the HTML report holds the trajectory's turns" grep -q '"turns":\[{"turn":1,"tools":\[{"name":"Read".*"turn":2,"tools":\[{"name":"Write"' "$PWD/agent.html"
stop_server

# bench/bench_agent.sh (the GPU benchmark's script) in CPU mode on the fixture: it makes the
# task set and the scripted turns, runs bench, checks every episode and says so.
DEVICE=cpu SOLUTION_DIR=$FIX/sol TASK_FILE=$FIX/task.py run bash "$CA_REPO/bench/bench_agent.sh" \
    "$CA" "$PWD/ba"
expect "bench/bench_agent.sh: every episode correct" 0 "every episode correct, reward >= 1"
assert "its summary names the episode's turns" grep -q "task: correct, reward [1-3] .* 6 turns" \
    "$PWD/ba/summary.txt"
TASKS=nope run bash "$CA_REPO/bench/bench_agent.sh" "$CA" "$PWD/ba2"
expect "bench/bench_agent.sh: an unknown example is a usage error" 2 "" "no example nope"
finish
