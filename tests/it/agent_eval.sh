#!/usr/bin/env bash
# `cuda-agent run` with the evaluator for real (CPU mode: PyTorch and nvcc needed, no GPU): a
# scripted model writes the CPU-mode fixture's solution (tests/eval/cpu), runs ./compile,
# ./verify and ./profile through Bash -- which reach the evaluator from inside the sandbox and
# are recorded by the episode -- then breaks model_new.py and answers. Best of trajectory must
# score the recorded good snapshot above the broken final workspace.
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

python3 "$CA_REPO/tests/it/solve_turns.py" "$FIX/sol" --bash-timeout 600000 \
    --done "Done (the last change was a mistake)." \
    './compile; echo compile-exit=$?' './verify; echo verify-exit=$?' \
    './profile; echo profile-exit=$?' \
    "sed -i 's/float(self.scale))/2.0)/' model_new.py && ./verify; echo broken-exit=\$?" \
    >script.json
serve script
run "$CA" run --task "$FIX/task.py" --model test-model --base-url "$URL" --out "$PWD/out" \
    --device cpu --request-timeout 60 --json
expect "scored episode" 0 '"stop_reason": "answer"'
T=$PWD/out/trajectory.jsonl
assert "./verify passed inside the episode" grep -q 'verify-exit=0' "$T"
assert "the broken ./verify failed" grep -q 'broken-exit=1' "$T"
assert "evaluations recorded" [ "$(py "$OUT" 'J["evals_recorded"] >= 4')" = True ]
assert "records in the turn lines" [ "$(py "$T" '[e["command"] for x in L if x["type"] == "turn" for e in x["evals"]]')" = "['compile', 'verify', 'profile', 'verify']" ]
assert "our numbering, the episode's kept" [ "$(py "$T" '[(e["seq"], e["episode_seq"]) for x in L if x["type"] == "turn" for e in x["evals"]][-1]')" = "(4, 4)" ]
assert "snapshots kept in OUT" [ -f "$PWD/out/evals/3/model_new.py" ]
assert "final workspace is wrong" [ "$(py "$OUT" 'J["rewards"]["final"]["reward"]')" = -1 ]
assert "best snapshot is correct" [ "$(py "$OUT" 'J["rewards"]["best"]["reward"] >= 1')" = True ]
assert "best is the profiled one" [ "$(py "$OUT" 'J["rewards"]["best"]["command"]')" = profile ]
assert "episode reward is the best" [ "$(py "$OUT" 'J["rewards"]["reward"] == J["rewards"]["best"]["reward"]')" = True ]
assert "best workspace holds the good model_new.py" cmp -s "$FIX/sol/model_new.py" "$PWD/out/best_workspace/model_new.py"
assert "final report kept" [ -f "$PWD/out/eval_final.json" ]
assert "best report kept" [ -f "$PWD/out/eval_best.json" ]
stop_server
finish
