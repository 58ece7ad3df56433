#!/usr/bin/env bash
# Black-box tests of `cuda-agent eval` that need no GPU: usage errors, the snapshot and policy
# stages, compiler errors reported as the agent's result, and a clear "PyTorch missing" when
# bindings cannot be built. (The GPU path is tested by tests/gpu and bench/eval_loop.sh.)
. "${CA_REPO:?run through tests/run.sh (make test), which sets CA_REPO}/tests/it/lib.sh"
# Shared across runs (content-addressed): with PyTorch installed the bindings compile too,
# and a fresh cache would rebuild the precompiled header every time.
export CUDA_AGENT_CACHE_DIR=${CUDA_AGENT_TEST_CACHE_DIR:-$CA_REPO/.test-cache}
export CUDA_AGENT_COMPILE_TIMEOUT=${CUDA_AGENT_COMPILE_TIMEOUT:-900}
SOL=$CA_REPO/examples/solutions/swish_scale_bias
TASK=$CA_REPO/examples/tasks/swish_scale_bias.py
stage() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("stage"))' "$OUT"; }
mk() { # a workspace with the reference solution
    "$CA" workspace create --task "$TASK" "$1" >/dev/null || exit 1
    cp "$SOL"/kernels/* "$1/kernels/"
    cp "$SOL/model_new.py" "$1/"
}

run "$CA" eval;                          expect "no workspace" 2 "" "WORKSPACE"
run "$CA" eval --device gpu ws;          expect "bad --device" 2 "" "--device"
run "$CA" eval --atol -1 ws;             expect "bad --atol" 2 "" "--atol"
run "$CA" eval --seeds 0 ws;             expect "bad --seeds" 2 "" "--seeds"
run "$CA" eval "$PWD/none";              expect "missing workspace" 4 "" "none"
run "$CA" eval --doctor;                 expect "doctor" 0 '"nvcc"'

mk "$PWD/pol"
sed -i 's/return cuda_extension.*/return torch.sigmoid(x) * x/' "$PWD/pol/model_new.py"
printf '#include <thread>\nstatic void f() { std::thread t([]{}); t.join(); }\n' >>"$PWD/pol/kernels/swish_scale_bias_binding.cpp"
run "$CA" eval "$PWD/pol"
expect "policy violations fail with reward -1" 1 "reward: -1 (the static policy refused the code)"
assert "torch compute in model_new.py is named" grep -q "model_new.py:.*torch-compute" "$OUT"
# A name in a source only advises: the thread is a note (the built object decides, below).
assert "the thread is not a source violation" [ -z "$(grep "kernels/swish_scale_bias_binding.cpp:[0-9]*: thread" "$OUT")" ]
run "$CA" eval --json "$PWD/pol";         expect "policy --json" 1 '"violations"'
assert "stage is policy" [ "$(stage)" = policy ]
assert "the thread is a note with its line" python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert any(n["rule"] == "thread" and n["line"] > 0 and n["file"] == "kernels/swish_scale_bias_binding.cpp" for n in d["policy"]["notes"]), d["policy"]' "$OUT"
assert "the report names its rule set" python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["rules"] == d["policy"]["rules"] == "cuda-agent"' "$OUT"
run "$CA" eval --rules pytorch "$PWD/pol"; expect "bad --rules" 2 "" "--rules"

mk "$PWD/nomn"
rm "$PWD/nomn/model_new.py"
run "$CA" eval "$PWD/nomn";               expect "missing model_new.py" 1 "model_new.py is missing"

mk "$PWD/tamper"
chmod u+w "$PWD/tamper/model.py"; echo "# changed" >>"$PWD/tamper/model.py"
run "$CA" eval --json "$PWD/tamper";      expect "tampered model.py" 1 "read-only files were changed"
assert "stage is snapshot" [ "$(stage)" = snapshot ]

mk "$PWD/link"
rm "$PWD/link/kernels/swish_scale_bias.cu"
ln -s /etc/hostname "$PWD/link/kernels/swish_scale_bias.cu"
rm "$PWD/link/model_new.py" # ends the run at the policy stage, with the file list
run "$CA" eval --json "$PWD/link"
assert "symlinked sources are not evaluated" python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert "kernels/swish_scale_bias.cu" not in d.get("files", []), d.get("files")' "$OUT"

if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
    mk "$PWD/cerr"
    echo "this is not C++;" >>"$PWD/cerr/kernels/swish_scale_bias.cu"
    run "$CA" eval --json "$PWD/cerr"
    expect "compiler errors are the agent's result" 1 "kernels/swish_scale_bias.cu:"
    assert "stage is compile" [ "$(stage)" = compile ]
    # (a 2 s compiler limit: only the cache's layout matters here, not a full build)
    CUDA_AGENT_COMPILE_TIMEOUT=2 run "$CA" eval --cache-dir "$PWD/own-cache" "$PWD/cerr"
    assert "--cache-dir holds the compile cache too" [ -d "$PWD/own-cache/compile/objects" ]
    if python3 -c 'import torch' 2>/dev/null; then
        # The thread started in the binding: the object's import of std::thread decides, and the
        # message points at the source line with the note.
        mk "$PWD/thr"
        printf '#include <thread>\nstatic void spawn() { std::thread t([]{}); t.join(); }\nvoid (*ca_keep)() = spawn;\n' >>"$PWD/thr/kernels/swish_scale_bias_binding.cpp"
        run "$CA" eval --compile-only "$PWD/thr"
        expect "a real thread fails after the build" 1 "reward: -1 (the static policy refused the code)"
        assert "the object's symbol decides" grep -q "kernels/swish_scale_bias_binding.cpp: thread:" "$OUT"
        assert "the note gives the source line" grep -q "kernels/swish_scale_bias_binding.cpp:[0-9]*: note: thread" "$OUT"
    else
        mk "$PWD/good"
        run "$CA" eval "$PWD/good"
        expect "no PyTorch: a clear message and exit 69" 69 "" "PyTorch is not importable"
    fi
else
    echo "note: nvcc not found; compile cases not run"
fi
finish
