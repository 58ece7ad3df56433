#!/usr/bin/env bash
# Black-box tests of `cuda-agent tool`: the per-episode supervisor, the
# persistent shell, background shells, file tools through the CLI, bad
# input, and an episode that stays usable after hostile commands.
. "${CA_REPO:?run through tests/run.sh (make test), which sets CA_REPO}/tests/it/lib.sh"
export CUDA_AGENT_STATE_DIR=$PWD/state
W=$PWD/ws
E=it-$$
"$CA" workspace create --task "$CA_REPO/examples/tasks/softmax_last_dim.py" "$W" >/dev/null
tool() { run "$CA" tool --workspace "$W" --episode "$E" "$@"; }
field() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d.get(sys.argv[2]))' "$OUT" "$1"; }
cleanup() { "$CA" tool --episode "$E" --close >/dev/null 2>&1; }
trap 'cleanup; rm -f "$OUT" "$ERR"' EXIT

if ! "$CA" tool --workspace "$W" --episode probe-$$ Bash '{"command":"true"}' >/dev/null 2>"$ERR"; then
    if grep -q "namespaces" "$ERR"; then
        skip_all userns "no sandbox on this host: $(cat "$ERR")"
    fi
fi
"$CA" tool --episode probe-$$ --close >/dev/null 2>&1

run "$CA" tool --schemas;  expect "schemas" 0 '"name": "Bash"'
assert "eleven tools" [ "$(grep -c '"name":' "$OUT")" -ge 11 ]

tool Bash '{"command":"echo hello; pwd"}'
expect "first call starts the episode" 0 "hello"
assert "cwd is /workspace" grep -q '/workspace' "$OUT"
tool Bash '{"command":"cd kernels && export FOO=bar && x=42"}'
expect "cd and export" 0
tool Bash '{"command":"pwd; echo $FOO $x"}'
expect "cwd and variables persist" 0 "/workspace/kernels"
assert "variables persist" grep -q 'bar 42' "$OUT"
tool Bash '{"command":"cd /workspace; exit 3"}'
expect "exit in the shell" 0
assert "exit code reported" [ "$(field exit_code)" = 3 ]
tool Bash '{"command":"pwd"}'
expect "a new shell after exit" 0 "new shell"
tool Bash '{"command":"false"}'
expect "non-zero exit is reported" 0 "[exit code 1]"
tool Bash '{"command":"echo \"unclosed"}'
expect "syntax error does not break framing" 0
tool Bash '{"command":"echo still-alive"}'
expect "shell usable after a syntax error" 0 "still-alive"
tool Bash '{"command":"sleep 100", "timeout": 500}'
expect "timeout" 1 "timed out after 500 ms"
tool Bash '{"command":"echo after-timeout"}'
expect "shell usable after a timeout" 0 "after-timeout"
tool Bash '{"command":"yes | head -c 50000000"}'
expect "huge output is capped" 0 "bytes of output omitted"
assert "truncated flag" [ "$(field truncated)" = True ]
assert "reply stays small" [ "$(wc -c <"$OUT")" -lt 200000 ]
tool Bash '{"command":"head -c 3000 /dev/urandom"}'
expect "binary output is returned as text" 0
tool Bash '{"command":"cat"}'
expect "stdin is empty (no hang)" 0
tool Bash '{"command":"bash -c \":(){ :|:& };:\" 2>/dev/null; sleep 1; echo bomb-done", "timeout": 15000}'
[ "$RC" -le 1 ]; assert "fork bomb is contained" [ $? -eq 0 ]
tool Bash '{"command":"echo after-bomb"}'
expect "shell usable after a fork bomb" 0 "after-bomb"
tool Bash '{"command":"echo hi > /dev/tcp/127.0.0.1/22 2>&1 || echo no-network"}'
expect "no network" 0 "no-network"
tool Bash '{"command":"echo x > /workspace/model.py || echo refused"}'
expect "read-only file refused in the shell" 0 "refused"
tool Bash '{"command":"dd if=/dev/zero of=/tmp/fill bs=1M count=4096 2>&1 | grep -o \"No space left\"; rm -f /tmp/fill"}'
expect "filling /tmp is bounded" 0 "No space left"

tool Bash '{"command":"for i in 1 2 3; do echo tick $i; sleep 0.2; done", "run_in_background": true}'
expect "background shell" 0 "bash_1"
sleep 1
tool BashOutput '{"bash_id":"bash_1"}'
expect "background output" 0 "tick 3"
tool BashOutput '{"bash_id":"bash_1", "filter":"tick [12]"}'
expect "nothing new after a read" 0 "exited with code 0"
tool Bash '{"command":"sleep 1000", "run_in_background": true}'
expect "second background shell" 0 "bash_2"
tool KillBash '{"shell_id":"bash_2"}'
expect "kill a background shell" 0 "Killed"
tool BashOutput '{"bash_id":"bash_2"}'
expect "killed shell has exited" 0 "exited with code 137"
tool BashOutput '{"bash_id":"bash_9"}'
expect "unknown background shell" 1 "no background shell"
tool BashOutput '{"bash_id":"bash_1", "filter":"("}'
expect "bad filter regex" 1 "not a valid regular expression"

tool Read '{"file_path":"/workspace/model.py"}'
expect "Read through the CLI" 0 "class Model"
tool Write '{"file_path":"kernels/k.cu","content":"// kernel\n"}'
expect "Write a new file" 0
tool Bash '{"command":"cat /workspace/kernels/k.cu"}'
expect "the shell sees the written file" 0 "// kernel"
tool Write '{"file_path":"model.py","content":"x"}'
expect "Write to a read-only file is refused" 1 "read-only"
tool Read '{"file_path":"/etc/passwd"}'
expect "Read outside the workspace is refused" 1 "/workspace"
tool Frobnicate '{}'
expect "unknown tool" 1 "Frobnicate"
tool Bash '{"command": 3}'
expect "ill-typed argument" 1 "command"
tool Bash '{"command":"true","bogus":1}'
expect "extra argument" 1 "bogus"
tool Bash '{}'
expect "missing argument" 1 "command"
tool Bash 'not json'
expect "invalid JSON arguments" 2 "" "ARGS_JSON"
run "$CA" tool --episode "bad/id" Bash '{"command":"true"}'
expect "bad episode id" 2 "" "episode id"
run "$CA" tool --episode "nope-$$" Bash '{"command":"true"}'
expect "unknown episode without workspace" 4 "" "not running"
run "$CA" tool --episode "$E" --ping
expect "ping" 0 '"ok": true'

run "$CA" tool --episode "$E" --close
expect "close" 0 '"ok": true'
run "$CA" tool --episode "$E" --ping
expect "closed episode is gone" 4 "" "not running"

# Unconfined (--insecure-no-sandbox): the shell sources its commands from the host's control
# directory, and the workspace commands are told where the evaluator's socket is.
WI="$PWD/ws insecure's"
EI=it-insecure-$$
"$CA" workspace create --task "$CA_REPO/examples/tasks/softmax_last_dim.py" "$WI" >/dev/null
run "$CA" tool --insecure-no-sandbox --workspace "$WI" --episode "$EI" Bash \
    '{"command":"cd kernels && echo unconfined-$((6 * 7)); echo \"$CUDA_AGENT_EVAL_SOCKET\""}'
expect "Bash runs without the sandbox" 0 "unconfined-42" "WARNING"
assert "the socket is in the host's control directory" grep -q "/$EI/.*eval.sock" "$OUT"
run "$CA" tool --episode "$EI" Bash '{"command":"pwd"}'
expect "its state persists" 0 "kernels"
"$CA" tool --episode "$EI" --close >/dev/null 2>&1
finish
