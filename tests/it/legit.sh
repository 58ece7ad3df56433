#!/usr/bin/env bash
# Legitimate but unusual KernelBench-format candidates (tests/legit/README.md) must build and pass
# the policy, including the object check on what they import, under the rule sets they name:
# `eval --compile-only` on each. Names that collide with torch operators and libc calls, launches
# without a stream, side streams and graphs are notes, never violations; torch::zeros_like is
# refused under the cuda-agent rules by the symbol the object imports (at::_ops::zeros_like), with
# the source line as a note, and allowed under the kernelbench rules. Needs nvcc and PyTorch (the
# builds parse the torch headers); the GPU half is tests/gpu/test_legit.py.
. "${CA_REPO:?run through tests/run.sh (make test), which sets CA_REPO}/tests/it/lib.sh"
require_cpu_evaluator
TASK=$CA_REPO/examples/tasks/swish_scale_bias.py
L=$CA_REPO/tests/legit
field() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$OUT" "$1"; }
build() { run "$CA" eval --json --compile-only --rules "$1" --task "$TASK" --kernelbench-file "$L/$2"; }

for rules in cuda-agent kernelbench; do
    for f in name_collisions.py side_stream_graph.py; do
        build "$rules" "$f"
        expect "$f ($rules): builds and passes the policy" 0 '"ok": true'
        assert "$f ($rules): the rule set is named" [ "$(field 'd["rules"]')" = "$rules" ]
        assert "$f ($rules): the objects were judged" [ "$(field 'd["policy_so"]["ok"]')" = True ]
        assert "$f ($rules): the names were seen, as notes" [ "$(field 'len(d["policy"]["notes"]) > 0')" = True ]
    done
done

build kernelbench zeros_default_stream.py
expect "zeros_like output, default stream (kernelbench): builds" 0 '"ok": true'
assert "zeros (kernelbench): torch-compute is a note of the object check" \
    [ "$(field 'any(n["rule"] == "torch-compute" and "zeros_like" in n["message"] for n in d["policy_so"]["notes"])')" = True ]
build cuda-agent zeros_default_stream.py
expect "zeros_like output (cuda-agent): refused" 1 '"reward": -1'
assert "zeros (cuda-agent): refused after the build, by the object" [ "$(field 'd["stage"], "compile" in d')" = "('policy', True)" ]
assert "zeros (cuda-agent): the symbol decides" \
    [ "$(field 'any(v["rule"] == "torch-compute" and "zeros_like" in v["message"] and v["file"].startswith("kernels/kb_") for v in d["policy_so"]["violations"])')" = True ]
line=$(grep -n 'torch::zeros_like' "$L/zeros_default_stream.py" | head -1 | cut -d: -f1)
assert "zeros (cuda-agent): the message points at the candidate's line $line (and the generated one)" \
    [ "$(field '"zeros_default_stream.py:'"$line"' (kernels/kb_" in d["message"] and ".cu:21): note: torch-compute: `torch::zeros_like`" in d["message"]')" = True ]
assert "zeros (cuda-agent): the default-stream launch is no violation" \
    [ "$(field 'all(v["rule"] != "stream" for v in d["policy"]["violations"] + d["policy_so"]["violations"])')" = True ]
finish
