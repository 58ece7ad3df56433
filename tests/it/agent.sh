#!/usr/bin/env bash
# Black-box tests of `cuda-agent run` against a scripted OpenAI-compatible server on loopback
# (tests/it/fake_llm.py, real HTTP): a full episode that writes the softmax example's reference
# solution, text-form and malformed tool calls, server errors and retries, timeouts, replies
# that never end, the context budget, the turn and wall-clock limits, and resume after a kill.
. "${CA_REPO:?run through tests/run.sh (make test), which sets CA_REPO}/tests/it/lib.sh"
export CUDA_AGENT_STATE_DIR=$PWD/state CUDA_AGENT_CACHE_DIR=$PWD/cache
unset OPENAI_BASE_URL CUDA_AGENT_BASE_URL CUDA_AGENT_MODEL
export OPENAI_API_KEY=sk-secret-$$
TASK=$CA_REPO/examples/tasks/softmax_last_dim.py
SOL=$CA_REPO/examples/solutions/softmax_last_dim

# The episodes' tools run in the sandbox; where the host cannot build one, unconfined (what is
# tested here is the loop, not the isolation: tests/unit/test_sandbox*.c do that).
SANDBOX=()
if [ -n "${CA_TEST_UNCONFINED:-}" ]; then
    SANDBOX=(--insecure-no-sandbox)
elif ! "$CA" tool --workspace "$("$CA" workspace create --task "$TASK" "$PWD/probe" >/dev/null &&
    echo "$PWD/probe")" --episode probe-$$ Bash '{"command":"true"}' >/dev/null 2>"$ERR"; then
    echo "note: no sandbox on this host, running the episodes unconfined: $(head -c 300 "$ERR")"
    SANDBOX=(--insecure-no-sandbox)
fi
"$CA" tool --episode probe-$$ --close >/dev/null 2>&1

. "$CA_REPO/tests/it/fake_llm.bash"
agent() { run "$CA" run --task "$TASK" --model test-model --base-url "$URL" "${SANDBOX[@]}" "$@"; }

# ---- usage ----
run "$CA" run --model m --base-url http://127.0.0.1:1/v1;  expect "no --task" 2 "" "--task"
run "$CA" run --task "$TASK" --device gpu;                expect "bad --device" 2 "" "--device"
run "$CA" run --task "$TASK" --temperature hot;          expect "bad --temperature" 2 "" "--temperature"
run "$CA" run --task "$TASK" --model m --out "$PWD/nourl" --no-eval
expect "no server URL" 2 "" "OPENAI_BASE_URL"
run "$CA" run --task "$TASK" --model m --base-url ftp://x/v1 --out "$PWD/ftp" --no-eval
expect "bad URL scheme" 2 "" "http://"
run "$CA" run --resume "$PWD/nothing-here"; expect "resume without a trajectory" 4 "" "no trajectory"
run "$CA" run --help;                       expect "help" 0 "--max-turns"

# ---- a full episode: the model writes the reference solution ----
python3 - "$SOL" >full.json <<'EOF'
import json, sys
sol = sys.argv[1]
cu = open(sol + "/kernels/softmax_last_dim.cu").read()
bind = open(sol + "/kernels/softmax_last_dim_binding.cpp").read()
mn = open(sol + "/model_new.py").read()
print(json.dumps([
    {"content": "I will read the skeleton first.",
     "tool_calls": [{"name": "Read", "arguments": {"file_path": "/workspace/model_new.py"}},
                    {"name": "Read", "arguments": {"file_path": "model.py"}}]},
    {"content": "Writing the kernel, the binding and ModelNew.",
     "tool_calls": [{"name": "Write", "arguments": {"file_path": "kernels/softmax_last_dim.cu", "content": cu}},
                    {"name": "Write", "arguments": {"file_path": "kernels/softmax_last_dim_binding.cpp", "content": bind}},
                    {"name": "Write", "arguments": {"file_path": "model_new.py", "content": mn}}],
     "logprobs": {"content": [{"token": "Writing", "logprob": -0.25}]}, "token_ids": [101, 102, 103]},
    {"tool_calls": [{"name": "Bash", "arguments": {"command": "ls kernels && wc -c model_new.py; echo bash-exit=$?"}}]},
    {"content": "Done: kernels/softmax_last_dim.cu holds a one-pass online softmax."},
]))
EOF
serve full
agent --out "$PWD/full" --no-eval --logprobs --temperature 0.6 --max-tokens 4096
expect "full episode runs to the answer" 0 "stop: answer after 4 turn(s)"
T=$PWD/full/trajectory.jsonl
assert "six trajectory lines" [ "$(wc -l <"$T")" -eq 6 ]
assert "header, 4 turns, final" [ "$(py "$T" '",".join(x["type"] for x in L)')" = "header,turn,turn,turn,turn,final" ]
assert "kernel written" cmp -s "$SOL/kernels/softmax_last_dim.cu" "$PWD/full/workspace/kernels/softmax_last_dim.cu"
assert "binding written" cmp -s "$SOL/kernels/softmax_last_dim_binding.cpp" "$PWD/full/workspace/kernels/softmax_last_dim_binding.cpp"
assert "model_new.py written" cmp -s "$SOL/model_new.py" "$PWD/full/workspace/model_new.py"
assert "no tool failed" [ "$(py "$T" 'sum(r["is_error"] for x in L if x["type"]=="turn" for r in x["tool_results"])')" = 0 ]
assert "Bash ran in the workspace" grep -q 'softmax_last_dim_binding.cpp.*bash-exit=0' "$T"
assert "logprobs recorded" [ "$(py "$T" 'L[2]["logprobs"]["content"][0]["logprob"]')" = -0.25 ]
assert "token ids recorded" [ "$(py "$T" 'L[2]["token_ids"]')" = "[101, 102, 103]" ]
assert "usage recorded" [ "$(py "$T" 'L[1]["usage"]["completion_tokens"]')" = 17 ]
assert "timings recorded" py "$T" 'all(x["timings"]["overhead_us"] >= 0 for x in L if x["type"]=="turn")' >/dev/null
assert "four requests" [ "$(reqs)" -eq 4 ]
assert "system prompt is SKILL.md" [ "$(py "$LOG" '"# Writing CUDA kernels" in L[0]["body"]["messages"][0]["content"]')" = True ]
assert "user prompt holds the task" [ "$(py "$LOG" '"torch.softmax" in L[0]["body"]["messages"][1]["content"]')" = True ]
assert "eleven tool schemas sent" [ "$(py "$LOG" 'len(L[0]["body"]["tools"])')" = 11 ]
assert "tool_choice auto" [ "$(py "$LOG" 'L[0]["body"]["tool_choice"]')" = auto ]
assert "sampling sent" [ "$(py "$LOG" '(L[0]["body"]["temperature"], L[0]["body"]["max_tokens"], L[0]["body"]["logprobs"])')" = "(0.6, 4096, True)" ]
assert "model name sent" [ "$(py "$LOG" 'L[0]["body"]["model"]')" = test-model ]
assert "API key sent as a bearer token" [ "$(py "$LOG" 'L[0]["authorization"]')" = "Bearer $OPENAI_API_KEY" ]
assert "tool results appended in order" [ "$(py "$LOG" '[(m["role"], m.get("tool_call_id")) for m in L[1]["body"]["messages"][2:]]')" = "[('assistant', None), ('tool', 'call_1_0'), ('tool', 'call_1_1')]" ]
assert "conversation grows by turn" [ "$(py "$LOG" '[len(x["body"]["messages"]) for x in L]')" = "[2, 5, 9, 11]" ]
assert "API key in no file" [ -z "$(grep -rl "$OPENAI_API_KEY" "$PWD/full" 2>/dev/null)" ]
assert "API key not printed" [ -z "$(grep -l "$OPENAI_API_KEY" "$OUT" "$ERR")" ]
assert "not scored" grep -q 'not scored (--no-eval)' "$T"
run "$CA" run --resume "$PWD/full";  expect "a finished episode is not resumed" 2 "" "already finished"
run python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$CA_REPO/docs/trajectory.schema.json"
expect "trajectory schema is JSON" 0
if python3 -c 'import jsonschema' 2>/dev/null; then
    run python3 -c '
import json, sys, jsonschema
s = json.load(open(sys.argv[1]))
for line in open(sys.argv[2]): jsonschema.validate(json.loads(line), s)' "$CA_REPO/docs/trajectory.schema.json" "$T"
    expect "trajectory matches its schema" 0
else
    skip jsonschema "trajectory matches its schema" "python3 jsonschema is not installed"
fi

# The same episode with the final scoring on: without PyTorch and nvcc here the evaluator's
# absence is reported in the result, not a failure (tests/it/agent_eval.sh scores for real). With
# them, the build goes through the suite's shared, content-addressed compile cache (as the other
# evaluator tiers do) rather than a cold one: the torch headers' build is minutes on two cores.
serve full
CUDA_AGENT_CACHE_DIR=${CUDA_AGENT_TEST_CACHE_DIR:-$CA_REPO/.test-cache} \
    agent --out "$PWD/scored" --device cpu --json
expect "scored episode runs" 0 '"stop_reason": "answer"'
assert "final workspace scored or why not" [ "$(py "$OUT" '"error" in J["rewards"]["final"] or "reward" in J["rewards"]["final"]')" = True ]
assert "no evaluations recorded, no best" [ "$(py "$OUT" 'J["rewards"]["best"]')" = None ]

# ---- text-form tool calls ----
cat >text.json <<'EOF'
[{"content": "I'll check.\n<tool_call>\n{\"name\": \"Bash\", \"arguments\": {\"command\": \"echo tagged-call\"}}\n</tool_call>"},
 {"content": "Next:\n```json\n{\"name\": \"Write\", \"arguments\": {\"file_path\": \"kernels/note.cu\", \"content\": \"// fenced\\n\"}}\n```\nand some code that is not a call:\n```python\nprint(1)\n```"},
 {"content": "<tool_call>{\"name\": \"Bash\", \"arguments\": {\"command\": \"cat kernels/note.cu\"}}</tool_call>\n<tool_call>{not json}</tool_call>"},
 {"content": "All done."}]
EOF
serve text
agent --out "$PWD/text" --no-eval
expect "text-form episode" 0 "stop: answer after 4 turn(s)"
T=$PWD/text/trajectory.jsonl
assert "tagged call ran" [ "$(py "$T" '"tagged-call" in L[1]["messages"][1]["content"]')" = True ]
assert "fenced call wrote the file" [ "$(cat "$PWD/text/workspace/kernels/note.cu")" = "// fenced" ]
assert "text_form flagged, raw kept" [ "$(py "$T" '(L[1]["text_form"], "<tool_call>" in L[1]["raw_content"])')" = "(True, True)" ]
assert "calls become tool_calls" [ "$(py "$LOG" 'L[1]["body"]["messages"][2]["tool_calls"][0]["function"]["name"]')" = Bash ]
assert "blocks removed from content" [ "$(py "$LOG" 'L[1]["body"]["messages"][2]["content"]')" = "I'll check." ]
assert "python block is no call" [ "$(py "$T" 'len(L[2]["tool_results"])')" = 1 ]
assert "malformed text call answered" [ "$(py "$T" '[r["is_error"] for r in L[3]["tool_results"]]')" = "[False, True]" ]
assert "malformed text call explained" [ "$(py "$T" '"invalid JSON" in L[3]["messages"][2]["content"]')" = True ]

# ---- malformed native tool calls ----
cat >bad.json <<'EOF'
[{"tool_calls": [{"name": "Bash", "arguments": "{\"command\": \"echo unterminated"},
                 {"name": "NoSuchTool", "arguments": {}},
                 {"name": "Bash", "arguments": "[1, 2]"},
                 {"name": "Bash", "arguments": {"command": 42}},
                 {"raw": {"id": "weird", "type": "function"}},
                 {"raw": {"type": "function", "function": {"arguments": "{}"}}},
                 {"name": "Read", "arguments": {"file_path": "/etc/passwd"}},
                 {"name": "Bash", "arguments": {"command": "echo still-fine"}}]},
 {"content": "ok"}]
EOF
serve bad
agent --out "$PWD/bad" --no-eval
expect "malformed calls do not crash" 0 "stop: answer after 2 turn(s)"
T=$PWD/bad/trajectory.jsonl
assert "each call answered" [ "$(py "$T" '[r["is_error"] for r in L[1]["tool_results"]]')" = "[True, True, True, True, True, True, True, False]" ]
assert "bad JSON explained" [ "$(py "$T" '"not valid JSON" in L[1]["messages"][1]["content"] or "invalid JSON" in L[1]["messages"][1]["content"]')" = True ]
assert "unknown tool named" grep -q 'NoSuchTool' "$T"
assert "missing name explained" [ "$(py "$T" '"no function name" in L[1]["messages"][6]["content"]')" = True ]
assert "server ids kept" [ "$(py "$LOG" 'L[1]["body"]["messages"][2]["tool_calls"][4]["id"]')" = weird ]
assert "every call has a result" [ "$(py "$LOG" 'len([m for m in L[1]["body"]["messages"] if m["role"]=="tool"])')" = 8 ]
assert "the last call ran" [ "$(py "$T" '"still-fine" in L[1]["messages"][8]["content"]')" = True ]

# ---- server errors, retries, Retry-After ----
cat >retry.json <<'EOF'
[{"status": 500}, {"status": 503, "body": "upstream busy"}, {"status": 429, "headers": {"Retry-After": "1"}},
 {"content": "fine"}]
EOF
serve retry
t0=$(date +%s.%N)
agent --out "$PWD/retry" --no-eval --retry-backoff-ms 50
t1=$(date +%s.%N)
expect "retries reach the answer" 0 "stop: answer after 1 turn(s)"
assert "four attempts" [ "$(reqs)" -eq 4 ]
assert "attempts recorded" [ "$(py "$PWD/retry/trajectory.jsonl" 'L[1]["timings"]["attempts"]')" = 4 ]
assert "same request every attempt" [ "$(py "$LOG" 'len(set(json.dumps(x["body"]) for x in L))')" = 1 ]
assert "Retry-After honoured" python3 -c "import sys; sys.exit(0 if $t1 - $t0 >= 1.0 else 1)"

cat >fail.json <<'EOF'
[{"status": 502}, {"status": 502}, {"status": 502}]
EOF
serve fail
agent --out "$PWD/fail" --no-eval --retries 1 --retry-backoff-ms 10
expect "server failing for good" 1 "stop: model_error" 
assert "two attempts" [ "$(reqs)" -eq 2 ]
assert "error line" [ "$(py "$PWD/fail/trajectory.jsonl" '[x["type"] for x in L]')" = "['header', 'error', 'final']" ]
assert "error names the status" grep -q 'HTTP 502' "$PWD/fail/trajectory.jsonl"
echo '[{"tool_calls": [{"name": "Bash", "arguments": {"command": "true"}}]}, {"content": "back"}]' >back.json
serve back
run "$CA" run --resume "$PWD/fail" --base-url "$URL" "${SANDBOX[@]}"
expect "an episode the server stopped resumes" 0 "stop: answer after 2 turn(s)"
assert "resumed after the error" [ "$(py "$PWD/fail/trajectory.jsonl" '[x["type"] for x in L]')" = "['header', 'error', 'final', 'resume', 'turn', 'turn', 'final']" ]

cat >refused.json <<'EOF'
[{"status": 401, "body": "{\"error\": {\"message\": \"invalid api key\"}}"}]
EOF
serve refused
agent --out "$PWD/refused" --no-eval --retry-backoff-ms 10
expect "4xx is not retried" 1 "invalid api key"
assert "one attempt" [ "$(reqs)" -eq 1 ]

stop_server
run "$CA" run --task "$TASK" --model m --base-url http://127.0.0.1:9/v1 "${SANDBOX[@]}" --out "$PWD/conn" --no-eval --retries 2 --retry-backoff-ms 10
expect "connection refused" 1 "cannot reach the model server"

# ---- timeouts and replies that never end ----
# Each bound below sits far under how long the server would make the agent wait (a 30 s delay, an
# hour's hang, a reply without end), and far over the agent's limit: what it shows is that the
# limit cut the request, not how fast a process starts. A sanitizer build on a loaded machine has
# taken 5 s to start and stop the agent and its sandbox, so a tight bound here is only a flake.
echo '[{"delay": 30, "content": "late"}]' >slow.json
serve slow
t0=$(date +%s)
agent --out "$PWD/slow" --no-eval --request-timeout 1 --retries 0
expect "request timeout" 1 "did not answer in time"
assert "cut long before the 30 s reply" [ $(($(date +%s) - t0)) -le 15 ]

echo '[{"hang": true}]' >hang.json
serve hang
t0=$(date +%s)
agent --out "$PWD/hang" --no-eval --stall-timeout 1 --retries 0
expect "stalled reply is cut" 1 "did not answer in time"
assert "stall cut" [ $(($(date +%s) - t0)) -le 15 ]

echo '[{"endless": true}, {"endless": true}]' >endless.json
serve endless
t0=$(date +%s)
agent --out "$PWD/endless" --no-eval --request-timeout 3 --retries 0
expect "a reply that never ends is cut" 1 "stop: model_error"
assert "cut by size or time" grep -Eq 'over the limit of|did not answer in time' "$OUT"
assert "endless reply cut" [ $(($(date +%s) - t0)) -le 15 ]

echo '[{"raw": "this is not json"}]' >garbage.json
serve garbage
agent --out "$PWD/garbage" --no-eval --retries 0
expect "garbage reply" 1 "invalid JSON"

# ---- the turn limit ----
echo '[{"repeat": true, "tool_calls": [{"name": "Bash", "arguments": {"command": "true"}}]}]' >loop.json
serve loop
agent --out "$PWD/loop" --no-eval --max-turns 3
expect "turn limit" 0 "stop: max_turns after 3 turn(s)"
assert "three requests" [ "$(reqs)" -eq 3 ]
run "$CA" run --resume "$PWD/loop" --base-url "$URL" "${SANDBOX[@]}"
expect "the turn limit is final" 2 "" "higher --max-turns"
run "$CA" run --resume "$PWD/loop" --base-url "$URL" --max-turns 4 "${SANDBOX[@]}"
expect "a higher turn limit goes on" 0 "stop: max_turns after 4 turn(s)"
assert "limit told to the model" [ "$(py "$LOG" '"at most 3 turns" in L[0]["body"]["messages"][0]["content"]')" = True ]

# ---- the wall clock ----
echo '[{"tool_calls": [{"name": "Bash", "arguments": {"command": "true"}}]}, {"delay": 30, "content": "late"}]' >wall.json
serve wall
t0=$(date +%s)
agent --out "$PWD/wall" --no-eval --wall-clock 2
expect "wall-clock budget" 0 "stop: wall_clock after 1 turn(s)"
assert "stopped long before the 30 s reply" [ $(($(date +%s) - t0)) -le 15 ]
# the agent's own clock: the 2 s budget, not the process around it
assert "budget kept by the agent's clock" [ "$(sed -n 's/.*after 1 turn(s) (\([0-9]*\)\.[0-9] s:.*/\1/p' "$OUT")" -le 3 ]

# ---- the context budget: trimming, elision, overflow ----
python3 - >ctx.json <<'EOF'
import json
step = {"repeat": True, "tool_calls": [{"name": "Bash", "arguments": {"command": "for i in $(seq 3000); do echo line-$i; done"}}]}
print(json.dumps([step]))
EOF
serve ctx
agent --out "$PWD/ctx" --no-eval --max-turns 12 --context-tokens 24000 --tool-output-max 6000
expect "long episode within the budget" 0 "stop: max_turns after 12 turn(s)"
assert "long outputs trimmed with a marker" [ "$(py "$LOG" '"bytes trimmed from this tool output" in L[1]["body"]["messages"][-1]["content"]')" = True ]
assert "oldest outputs elided" [ "$(py "$LOG" 'L[-1]["body"]["messages"][3]["content"].startswith("[elided to stay within the context budget:")')" = True ]
assert "latest output kept" [ "$(py "$LOG" '"line-1" in L[-1]["body"]["messages"][-1]["content"]')" = True ]
assert "requests stay under the budget" [ "$(py "$LOG" 'max(len(json.dumps(x["body"])) for x in L) // 4 < 24000')" = True ]
assert "elisions recorded" [ "$(py "$PWD/ctx/trajectory.jsonl" 'sum(x["context"]["elided"] for x in L if x["type"]=="turn") > 0')" = True ]

echo '[{"prompt_tokens": 500000, "tool_calls": [{"name": "Bash", "arguments": {"command": "true"}}]}]' >over.json
serve over
agent --out "$PWD/over" --no-eval
expect "context overflow stops the episode" 0 "stop: context after 1 turn(s)"
assert "one request" [ "$(reqs)" -eq 1 ]

cat >over400.json <<'EOF'
[{"status": 400, "body": "{\"error\": {\"message\": \"This model's maximum context length is 32768 tokens\"}}"}]
EOF
serve over400
agent --out "$PWD/over400" --no-eval
expect "server-side context overflow" 0 "stop: context after 0 turn(s)"

# ---- resume after a kill ----
cat >kill1.json <<'EOF'
[{"tool_calls": [{"name": "Bash", "arguments": {"command": "echo one > kernels/one.txt"}}]},
 {"tool_calls": [{"name": "Bash", "arguments": {"command": "echo two > kernels/two.txt"}}]},
 {"delay": 60, "content": "never seen"}]
EOF
serve kill1
"$CA" run --task "$TASK" --model test-model --base-url "$URL" "${SANDBOX[@]}" --out "$PWD/killed" --no-eval >/dev/null 2>&1 &
AGENT_PID=$!
for _ in $(seq 200); do [ "$(reqs)" -ge 3 ] && break; sleep 0.05; done
kill -9 "$AGENT_PID"
wait "$AGENT_PID" 2>/dev/null
T=$PWD/killed/trajectory.jsonl
assert "two turns survived the kill" [ "$(py "$T" '[x["type"] for x in L]')" = "['header', 'turn', 'turn']" ]
printf '{"type": "turn", "turn": 3, "mess' >>"$T" # a line torn by the crash
echo '[{"content": "resumed and done"}]' >kill2.json
serve kill2
run "$CA" run --resume "$PWD/killed" --base-url "$URL" "${SANDBOX[@]}"
expect "resume continues the episode" 0 "stop: answer after 3 turn(s)"
assert "torn line dropped" [ "$(py "$T" '[x["type"] for x in L]')" = "['header', 'turn', 'turn', 'resume', 'turn', 'final']" ]
assert "conversation rebuilt" [ "$(py "$LOG" '[m["role"] for m in L[0]["body"]["messages"]]')" = "['system', 'user', 'assistant', 'tool', 'assistant', 'tool', 'user']" ]
assert "resume note sent" [ "$(py "$LOG" '"resumed" in L[0]["body"]["messages"][-1]["content"]')" = True ]
assert "model from the trajectory" [ "$(py "$LOG" 'L[0]["body"]["model"]')" = test-model ]
assert "files survived" [ -f "$PWD/killed/workspace/kernels/two.txt" ]

# ---- SIGTERM: the request in flight is abandoned, the episode ends resumable ----
echo '[{"delay": 60, "content": "too late"}]' >term.json
serve term
"$CA" run --task "$TASK" --model test-model --base-url "$URL" "${SANDBOX[@]}" --out "$PWD/term" --no-eval >"$OUT" 2>"$ERR" &
AGENT_PID=$!
for _ in $(seq 200); do [ "$(reqs)" -ge 1 ] && break; sleep 0.05; done
t0=$(date +%s)
kill -TERM "$AGENT_PID"
wait "$AGENT_PID"
RC=$?
expect "SIGTERM stops the run" 1 "stop: interrupted"
assert "stopped long before the 60 s reply" [ $(($(date +%s) - t0)) -le 15 ]
assert "final line written" [ "$(py "$PWD/term/trajectory.jsonl" 'L[-1]["stop_reason"]')" = interrupted ]
echo '[{"content": "after the signal"}]' >term2.json
serve term2
run "$CA" run --resume "$PWD/term" --base-url "$URL" "${SANDBOX[@]}"
expect "an interrupted episode resumes" 0 "stop: answer after 1 turn(s)"

# ---- the live display on a terminal ----
if command -v script >/dev/null; then
    echo '[{"tool_calls": [{"name": "Bash", "arguments": {"command": "sleep 0.2"}}]}, {"content": "ok"}]' >tty.json
    serve tty
    run script -qec "$CA run --task $TASK --model test-model --base-url $URL ${SANDBOX[*]} --out $PWD/tty --no-eval" /dev/null
    expect "runs on a terminal" 0 "stop: answer"
    assert "status line shows turn and tool" grep -q '\[turn 1/200\] Bash' "$OUT"
    assert "status line rewritten in place" grep -q $'\r\033\[K' "$OUT"
    serve tty
    agent --out "$PWD/notty" --no-eval
    expect "runs without a terminal" 0 "stop: answer"
    # (unconfined, the only lines are the loud warnings about it)
    assert "quiet without a terminal" [ -z "$(grep -v -e '--insecure-no-sandbox' "$ERR")" ]
else
    skip script "live display" "script(1) is not installed"
fi

stop_server
finish
