#!/usr/bin/env bash
# The whole evaluator in CPU mode (no GPU needed, PyTorch needed): one-shot `cuda-agent eval
# --device cpu`, the evaluator service (`cuda-agent evaluator --device cpu`) with correct,
# wrong, crashing and hanging candidates, a runner killed under it, and an episode whose
# ./compile, ./verify and ./profile reach the evaluator from inside the sandbox and are
# recorded. The candidate is a C++ extension whose "kernel" is host code in a .cu
# (tests/eval/cpu).
. "${CA_REPO:?run through tests/run.sh (make test), which sets CA_REPO}/tests/it/lib.sh"
require_cpu_evaluator
export CUDA_AGENT_STATE_DIR=$PWD/state
FIX=$CA_REPO/tests/eval/cpu
SOCK=$PWD/ev.sock
field() { "$PY" -c 'import json,sys
d = json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."):
    d = d.get(k) if isinstance(d, dict) else None
print(d)' "$OUT" "$1"; }
mk() { # NAME [sed expression for the .cu]
    "$CA" workspace create --task "$FIX/task.py" "$PWD/$1" >/dev/null || exit 1
    cp "$FIX"/sol/kernels/* "$PWD/$1/kernels/"
    cp "$FIX/sol/model_new.py" "$PWD/$1/"
    [ -z "${2:-}" ] || sed -i "$2" "$PWD/$1/kernels/swish_cpu.cu"
}
svc_pid=
cleanup() {
    [ -n "$svc_pid" ] && kill "$svc_pid" 2>/dev/null && wait "$svc_pid" 2>/dev/null
    "$CA" tool --episode cpu-$$ --close >/dev/null 2>&1
    rm -f "$OUT" "$ERR"
}
trap cleanup EXIT

mk good
mk wrong 's/\* scale + bias\[c\]/* scale + bias[c] + 0.5f/'
mk crash 's/float v = x\[r \* cols + c\];/float v = x[r * cols + c]; if (r == 3) *(volatile int *)0 = 1;/'
mk hang 's/float v = x\[r \* cols + c\];/float v = x[r * cols + c]; for (volatile int spin = 1; spin;) {}/'
mk slow 's/float v = x\[r \* cols + c\];/float v = x[r * cols + c]; for (volatile int k = 0; k < 2000; k++) {}/'
mk hog
# Memory-hungry: a 64 TiB allocation in the binding fails in the candidate's process only.
sed -i 's/torch::Tensor out = torch::empty_like(x);/torch::Tensor out = torch::empty_like(x);\n    torch::Tensor hog = torch::empty({(int64_t)1 << 44}, x.options());/' \
    "$PWD/hog/kernels/swish_cpu_binding.cpp"

# -- one-shot, in this process
run "$CA" eval --device cpu --json "$PWD/good"
expect "one-shot CPU evaluation passes" 0 '"stage": "done"'
assert "a reward of at least 1" [ "$(field reward.reward)" -ge 1 ]
assert "the candidate was timed" [ "$(field harness.timing.candidate.median_ms)" != None ]
assert "on the CPU the default method is events (the wall clock; no note)" \
    [ "$(field harness.timing.mode)" = events ]
# scripts/setup.sh's main job prints this report through scripts/summarize.py.
cp "$OUT" "$PWD/good.json"
run "$PY" "$CA_REPO/scripts/summarize.py" "$PWD/good" "$PWD/good.json"
expect "the main job's summary: the workspace, verification passed" 0 "  verify    ok: "
assert "the main job's summary: reward, isolation, where to go next" \
    grep -qzE 'MANIFEST.json.*  reward    [123]: .*  isolation (sandbox|NO sandbox): .*where to go next' "$OUT"

# A relative cache directory (the test cache named from its parent): the harness runs in a
# directory of its own, so the evaluator must make the path absolute (the GPU suite found
# "can't open file 'runs/gpu/work/cache/harness-.../evaluate.py'" with CA_GPU_WORK=runs/gpu/work).
cache_parent=$(dirname "$CUDA_AGENT_CACHE_DIR") cache_name=$(basename "$CUDA_AGENT_CACHE_DIR")
run env -C "$cache_parent" CUDA_AGENT_CACHE_DIR="$cache_name" "$CA" eval --device cpu --json "$PWD/good"
expect "a relative CUDA_AGENT_CACHE_DIR: the evaluation passes" 0 '"stage": "done"'
run env -C "$cache_parent" "$CA" eval --device cpu --cache-dir "./$cache_name" --json "$PWD/good"
expect "a relative --cache-dir: the evaluation passes" 0 '"stage": "done"'

# --timing device (the lead kernel; CUDA only): accepted, and on the CPU the wall clock with a note
run "$CA" eval --device cpu --timing device --json "$PWD/good"
expect "--timing device is accepted" 0 '"mode": "device"'
assert "--timing device on the CPU: wall-clock time, said so" grep -q 'device timing needs CUDA' "$OUT"
run "$CA" eval --device cpu --timing lead "$PWD/good"
expect "a bad --timing: usage" 2 "" "--timing must be events, kernel or device"

# -- the service
run "$CA" evaluator --device cpu --gpus 0;        expect "--gpus needs cuda" 2 "" "--gpus"
run "$CA" evaluator --device tpu;                  expect "bad --device" 2 "" "--device"
run "$CA" eval --server "$PWD/none.sock" "$PWD/good"
expect "no service: exit 69" 69 "" "no evaluator service answers"

"$CA" evaluator --device cpu --prewarm 1 --socket "$SOCK" 2>"$PWD/svc.log" &
svc_pid=$!
for _ in $(seq 3000); do [ -S "$SOCK" ] && break; sleep 0.1; done
assert "the service listens" [ -S "$SOCK" ]

# Issue 21: the runner on its timing cores, the service (and the compilers it starts) on the
# compile cores, as the status reply says and /proc shows.
"$PY" - "$SOCK" "$svc_pid" >"$PWD/cpus.txt" 2>&1 <<'PYEOF'
import json, socket, struct, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
b = json.dumps({"op": "status"}).encode()
s.sendall(struct.pack(">I", len(b)) + b)
n = struct.unpack(">I", s.recv(4))[0]
d = b""
while len(d) < n:
    d += s.recv(n - len(d))
st = json.loads(d)
def allowed(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
cpus, runner = st["cpus"], st["pool"]["runners"][0]
print(json.dumps(cpus))
if cpus["isolated"]:
    assert allowed(runner["pid"]) == cpus["runners"][0], (allowed(runner["pid"]), cpus)
    assert allowed(sys.argv[2]) == cpus["compile"], (allowed(sys.argv[2]), cpus)
    assert not set(cpus["runners"][0].split(",")) & set(cpus["compile"].split(","))
print("ok")
PYEOF
assert "status names the CPU split and /proc agrees ($(head -1 "$PWD/cpus.txt"))" \
    grep -qx ok "$PWD/cpus.txt"

run "$CA" eval --server "$SOCK" --json "$PWD/good"
expect "correct candidate through the service" 0 '"stage": "done"'
assert "its candidate was pre-warmed" [ "$(field harness.candidate.prewarmed)" = True ]
assert "the reward says whether it rests on a noisy timing (as the harness's flags do)" "$PY" -c '
import json, sys
r = json.load(open(sys.argv[1]))
flagged = any(f["kind"] == "noisy_timing" for f in r["harness"]["flags"])
assert r["reward"]["timing_noisy"] is flagged, r["reward"]
c = r["harness"]["timing"]["candidate"]
assert c["noisy"] == bool(c["noise"]) and 1 <= len(c["attempts"]) <= 3, c
assert c["host"]["own_cpus"], c' "$OUT"
run "$CA" eval --server "$SOCK" --json "$PWD/good"
expect "again" 0
assert "everything came from the cache" [ "$(field compile.link.cached)" = True ]

run "$CA" eval --server "$SOCK" --json --policy-only "$PWD/wrong"
expect "--policy-only through the service: the static policy only" 0 '"stage": "policy"'
assert "... nothing compiled or run" [ "$(field compile):$(field harness)" = None:None ]

run "$CA" eval --server "$SOCK" --json "$PWD/wrong"
expect "wrong output: reward -1" 1 '"kind": "mismatch"'
assert "stage verify" [ "$(field stage)" = verify ]
assert "in CPU mode the tensors travel through a memfd handed to the candidate" \
    [ "$(field harness.verification.transport.kind)" = memfd ]
assert "the candidate ran in its sandbox, with the lockdown filter" \
    [ "$(field harness.isolation.sandbox):$(field harness.isolation.lockdown_installed)" = True:True ]
run "$CA" eval --server "$SOCK" "$PWD/wrong"
expect "the text report names the check that failed" 1 "check that failed: mismatch"

run "$CA" eval --server "$SOCK" --json "$PWD/crash"
expect "segfault in the candidate is its own failure" 1 '"kind": "crash"'

run "$CA" eval --server "$SOCK" --timeout 5 --json "$PWD/hang"
expect "a hang is a timeout" 1 '"kind": "timeout"'

run "$CA" eval --server "$SOCK" --json "$PWD/hog"
expect "a memory-hungry candidate fails as out of memory" 1 '"kind": "oom"'

# A task whose reference fails is no verdict on the candidate: no reward, exit 75.
sed 's/return \[torch.randn(64, 256)\]/raise RuntimeError("the reference is broken")/' \
    "$FIX/task.py" >"$PWD/broken_task.py"
"$CA" workspace create --task "$PWD/broken_task.py" "$PWD/badtask" >/dev/null || exit 1
cp "$FIX"/sol/kernels/* "$PWD/badtask/kernels/"
cp "$FIX/sol/model_new.py" "$PWD/badtask/"
run "$CA" eval --server "$SOCK" --json "$PWD/badtask"
expect "a broken task: no verdict, exit 75" 75 '"stage": "task"'
assert "a broken task: no reward in the report" "$PY" -c '
import json, sys
r = json.load(open(sys.argv[1]))
assert r["infrastructure_error"] is True and "reward" not in r, r
assert r["harness"]["failure"]["kind"] == "task_error", r["harness"]["failure"]' "$OUT"
run "$CA" eval --server "$SOCK" "$PWD/badtask"
expect "the text report says the task failed" 75 "task error (its reference failed)"
run "$CA" eval --server "$SOCK" --json "$PWD/slow"
expect "a correct but slow candidate passes" 0 '"stage": "done"'
assert "... with reward 1 (slower than eager)" [ "$(field reward.reward)" = 1 ]
assert "... and its speedup below 1" "$PY" -c 'import json,sys; r=json.load(open(sys.argv[1]))["reward"]; assert r["speedup_eager"] < 1, r' "$OUT"

run "$CA" eval --server "$SOCK" --verify-only "$PWD/good"
expect "the service still serves after crash, hang and out-of-memory" 0

# A runner killed under the service is restarted for the next job.
wpid=$(pgrep -f "worker.py --device cpu" | head -1)
assert "a runner process exists" [ -n "$wpid" ]
kill -9 "$wpid"
sleep 0.2
run "$CA" eval --server "$SOCK" --verify-only "$PWD/good"
expect "a killed runner is replaced" 0

# -- an episode: the workspace's commands reach the service from inside the sandbox
if "$CA" tool --workspace "$PWD/good" --episode probe-$$ Bash '{"command":"true"}' >/dev/null 2>"$ERR"; then
    "$CA" tool --episode probe-$$ --close >/dev/null 2>&1
    export CUDA_AGENT_EVALUATOR=$SOCK
    tool() { run "$CA" tool --workspace "$PWD/good" --episode cpu-$$ Bash "{\"command\":\"$1\"}"; }
    tool "./compile"
    expect "./compile inside the sandbox" 0 '"exit_code": 0' 
    tool "./verify"
    expect "./verify inside the sandbox" 0 "verify: ok"
    tool "./profile"
    expect "./profile inside the sandbox" 0 "reward"
    tool "sed -i 's/return cuda_extension.swish_cpu(x, self.bias, float(self.scale))/return cuda_extension.swish_cpu(x, self.bias, 2.0)/' model_new.py && ./verify"
    expect "a wrong change fails ./verify" 0 "\"exit_code\": 1"
    tool "printf '\\\\000\\\\000\\\\000\\\\002{}' | python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(\\\"/run/cuda-agent/eval.sock\\\"); s.sendall(sys.stdin.buffer.read()); print(s.recv(4096))'"
    expect "a request without a command is refused" 0 "command"
    run "$CA" tool --episode cpu-$$ --evals
    expect "evaluations are recorded" 0 '"command": "profile"'
    assert "four records (compile, verify, profile, verify)" [ "$("$PY" -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["evals"]))' "$OUT")" = 4 ]
    assert "the failed verify kept its files" "$PY" -c '
import json, os, sys
r = json.load(open(sys.argv[1]))["evals"][-1]
assert r["command"] == "verify" and r["ok"] is False, r
d = r["snapshot_dir"]
assert "2.0)" in open(os.path.join(d, "model_new.py")).read()
assert os.path.exists(os.path.join(d, "model.py")) and os.path.exists(os.path.join(d, "report.json"))' "$OUT"
    unset CUDA_AGENT_EVALUATOR
elif grep -q "namespaces" "$ERR"; then
    skip userns "the evaluator service from inside a sandbox" "no sandbox on this host: $(cat "$ERR")"
else
    bad "a tool call in the sandbox, before the evaluator's" "it failed, and not for want of namespaces"
fi

kill "$svc_pid"
wait "$svc_pid"
assert "the service stops on SIGTERM and removes its socket" [ ! -e "$SOCK" ]
svc_pid=
finish
