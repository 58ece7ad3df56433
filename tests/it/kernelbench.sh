#!/usr/bin/env bash
# Black-box tests of `cuda-agent eval --task T --kernelbench-file F` that need no GPU: usage
# errors, files the extraction refuses (stage "extract", reward -1, F:LINE: message), the policy
# on the extracted sources (with the candidate's own line numbers in model_new.py), and, where
# nvcc is installed, a --compile-only build of examples/kernelbench (which needs PyTorch for the
# bindings: without it, exit 69 and a clear message). The GPU path is tests/gpu/test_kernelbench.py.
. "${CA_REPO:?run through tests/run.sh (make test), which sets CA_REPO}/tests/it/lib.sh"
# Shared across runs (content-addressed), and generous compiler limits: with PyTorch installed
# the builds below parse the torch headers, minutes on a busy two-core machine.
export CUDA_AGENT_CACHE_DIR=${CUDA_AGENT_TEST_CACHE_DIR:-$CA_REPO/.test-cache}
export CUDA_AGENT_COMPILE_TIMEOUT=${CUDA_AGENT_COMPILE_TIMEOUT:-900}
TASK=$CA_REPO/examples/tasks/swish_scale_bias.py
KB=$CA_REPO/examples/kernelbench/swish_scale_bias.py
field() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$OUT" "$1"; }
kbeval() { "$CA" eval --json --task "$TASK" --kernelbench-file "$@"; }

run "$CA" eval --kernelbench-file "$KB";                 expect "needs --task" 2 "" "needs --task"
run "$CA" eval --task "$TASK" --kernelbench-file "$KB" ws; expect "no workspace with it" 2 "" "takes no WORKSPACE"
run "$CA" eval --task "$TASK" --kernelbench-file "$PWD/none.py"
expect "missing file" 4 "" "none.py: no such file"
run "$CA" eval --help;                                   expect "--help names it" 0 "--kernelbench-file FILE"

cat >syntax.py <<'EOF'
import torch

def broken(:
    pass
EOF
run kbeval syntax.py
expect "syntax error: reward -1" 1 '"reward": -1'
assert "syntax error: stage extract" [ "$(field 'd["stage"]')" = extract ]
assert "syntax error: file and line" [ "$(field 'd["message"]')" = "syntax.py:3: invalid Python: invalid syntax (line 3)" ]
assert "syntax error: reason" [ "$(field 'd["reward"]["reason"]')" = "the KernelBench file's load_inline sources could not be read" ]

cat >nomodel.py <<'EOF'
import torch
from torch.utils.cpp_extension import load_inline
ext = load_inline(name="x", cpp_sources="", functions=["f"])
EOF
run kbeval nomodel.py
expect "no ModelNew" 1 "no module-level \`class ModelNew(nn.Module)\`"
assert "no ModelNew: stage extract" [ "$(field 'd["stage"]')" = extract ]

cat >noinline.py <<'EOF'
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x
EOF
run kbeval noinline.py;                  expect "no load_inline" 1 "no call of torch.utils.cpp_extension.load_inline"

cat >dynamic.py <<'EOF'
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA = open("kernel.cu").read()
ext = load_inline(name="dyn", cpp_sources="", cuda_sources=CUDA, functions=["f"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.f(x)
EOF
run kbeval dynamic.py
expect "dynamic sources are refused" 1 "dynamic.py:6: load_inline cuda_sources=CUDA cannot be read without running the file"
assert "the report names the file" [ "$(field 'd["kernelbench"]["file"]')" = dynamic.py ]

# Extracted, then refused by the policy for torch compute in forward; the launch on the legacy
# stream is a note (it is ordered with the current stream and timed), never a violation.
python3 - "$KB" <<'EOF'
import sys
src = open(sys.argv[1]).read()
src = src.replace(", 0, stream>>>", ">>>", 1)
src = src.replace("return swish_ext.swish_scale_bias(", "return torch.sigmoid(x) * swish_ext.swish_scale_bias(", 1)
open("policy.py", "w").write(src)
EOF
line=$(grep -n "return torch.sigmoid" policy.py | cut -d: -f1)
run kbeval policy.py
expect "policy violations: reward -1" 1 '"reason": "the static policy refused the code"'
assert "policy: stage" [ "$(field 'd["stage"]')" = policy ]
assert "policy: the launch without a stream is a note" [ "$(field '[(n["rule"], n["file"]) for n in d["policy"]["notes"] if n["rule"] == "stream"]')" = "[('stream', 'kernels/kb_swish_scale_bias_ext.cu')]" ]
assert "policy: and no violation" [ "$(field '[v for v in d["policy"]["violations"] if v["rule"] == "stream"]')" = "[]" ]
assert "policy: the finding is placed in the candidate's file (model_new.py keeps its lines)" \
    grep -q "policy.py:$line (model_new.py:$line): torch-compute" "$OUT"
launch=$(grep -n ">>>(" policy.py | head -1 | cut -d: -f1)
assert "policy: a note in the generated .cu is placed on the candidate's line ($launch)" \
    [ "$(field '[(n["origin"]["file"], n["origin"]["line"]) for n in d["policy"]["notes"] if n["rule"] == "stream"]')" = "[('policy.py', $launch)]" ]
assert "policy: kernelbench section" [ "$(field '(d["kernelbench"]["name"], d["kernelbench"]["functions"])')" = "('swish_scale_bias_ext', ['swish_scale_bias'])" ]
assert "policy: extracted files listed" [ "$(field 'sorted(d["files"])')" = "['kernels/kb_swish_scale_bias_ext.cu', 'kernels/kb_swish_scale_bias_ext_binding.cpp', 'model_new.py']" ]
run "$CA" eval --task "$TASK" --kernelbench-file policy.py
expect "human report names the file and functions" 1 "kernelbench: policy.py (functions: swish_scale_bias)"
run "$CA" eval --json --policy-only --task "$TASK" --kernelbench-file policy.py
expect "--policy-only: the same refusal" 1 '"reason": "the static policy refused the code"'
run "$CA" eval --json --policy-only --task "$TASK" --kernelbench-file "$KB"
expect "--policy-only: a clean file stops after the policy, nothing compiled" 0 '"stage": "policy"'
assert "... no compile report" [ "$(field '"compile" in d')" = False ]
run "$CA" eval --policy-only --verify-only --task "$TASK" --kernelbench-file "$KB"
expect "--policy-only with another stop is a usage error" 2 "" "exclude each other"

if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
    for f in "$CA_REPO"/examples/kernelbench/*.py; do
        name=$(basename "$f" .py)
        run "$CA" eval --json --compile-only --task "$CA_REPO/examples/tasks/$name.py" --kernelbench-file "$f"
        if python3 -c 'import torch' 2>/dev/null; then
            expect "$name: --compile-only builds" 0 '"ok": true'
            assert "$name: the cuda source is a cu-torch unit" grep -q '"role": "cu-torch"' "$OUT"
            # Built, or cached from a build, as two halves (compile.md "Split cu-torch units").
            assert "$name: the cuda source is cut in two or cached" python3 -c '
import json, sys
units = json.load(open(sys.argv[1]))["compile"]["units"]
cu = [u for u in units if u["role"] == "cu-torch"]
sys.exit(0 if cu and all(u["split"] or u["cached"] for u in cu) else 1)' "$OUT"
        else
            expect "$name: passes the policy, then needs PyTorch (exit 69)" 69 "" "PyTorch is not importable"
            skip torch "$name: --compile-only builds" "PyTorch is not importable by python3 (set CUDA_AGENT_PYTHON)"
        fi
    done
    if python3 -c 'import torch' 2>/dev/null; then
        # The baseline: CUDA_AGENT_COMPILE_SPLIT=0 builds the cuda source as one nvcc unit. A
        # comment of its own in the source, so that the object is not the cut one's, cached.
        sed -e "s|^#include <cuda_runtime.h>$|#include <cuda_runtime.h>\n// whole $(date +%s%N)|" "$KB" >whole.py
        CUDA_AGENT_COMPILE_SPLIT=0 run "$CA" eval --json --compile-only --task "$TASK" --kernelbench-file whole.py
        expect "CUDA_AGENT_COMPILE_SPLIT=0: still builds" 0 '"ok": true'
        assert "CUDA_AGENT_COMPILE_SPLIT=0: one nvcc unit, not cut" python3 -c '
import json, sys
units = json.load(open(sys.argv[1]))["compile"]["units"]
cu = [u for u in units if u["role"] == "cu-torch"]
sys.exit(0 if cu and not any(u["split"] or u["cached"] for u in cu) else 1)' "$OUT"
        # A compiler error in the kernel source: named where the candidate wrote it, beside the
        # generated file's line (the compiler's own).
        python3 - "$KB" <<'EOF'
import sys
lines = open(sys.argv[1]).read().split("\n")
at = next(i for i, l in enumerate(lines) if l.startswith("__global__ void swish_scale_bias_vec4"))
at += next(k for k, l in enumerate(lines[at:]) if l == "{") + 1
lines.insert(at, "    int broken = not_declared_here;")
open("broken.py", "w").write("\n".join(lines))
EOF
        line=$(grep -n "not_declared_here" broken.py | cut -d: -f1)
        run "$CA" eval --compile-only --task "$TASK" --kernelbench-file broken.py
        expect "a compile error: reward -1" 1 "compilation failed"
        assert "... placed on the candidate's line $line, beside the generated file's" \
            grep -Eq "^broken.py:$line \\(kernels/kb_swish_scale_bias_ext.cu:[0-9]+\\): error: identifier \"not_declared_here\" is undefined" "$OUT"
    fi
else
    skip nvcc "--compile-only cases" "nvcc not found"
fi
# KernelBench's semantics under --rules kernelbench, end to end in CPU mode (found on the whole
# leaderboard corpus): the candidate's file runs in the namespace the task's ran in (a name only
# the task defines), and a ModelNew with parameter names of its own is built from Model's seed.
if command -v nvcc >/dev/null 2>&1 && python3 -c 'import torch' 2>/dev/null; then
    BT="$CA_REPO/tests/bench/cpu"
    cp "$BT/tasks/level1/1_Swish.py" gain_task.py
    printf '\n\nGAIN = 1.0\n' >>gain_task.py
    python3 - "$BT/solutions/level_1_problem_1_sample_0_kernel.py" <<'PYEOF'
import sys
s = open(sys.argv[1]).read()
use = s.replace("float(self.scale))", "float(self.scale * GAIN))")
open("gain_names.py", "w").write(use)  # the task's GAIN, Model's parameter names
own = use.replace("self.bias = nn.Parameter(torch.zeros(features))",
                  "self.b = nn.Parameter(torch.randn(features) * 0.1)").replace(
    "ext.swish(x, self.bias,", "ext.swish(x, self.b,")
assert own != use and "self.b," in own
open("gain_own.py", "w").write(own)  # and parameters of its own, drawn as Model draws them
open("gain_wrong.py", "w").write(own.replace("GAIN))", "GAIN * 2))"))
PYEOF
    kbcpu() { "$CA" eval --device cpu --json --no-compile-baseline --budget-ms 20 --task gain_task.py --kernelbench-file "$@"; }
    run kbcpu gain_own.py --rules kernelbench
    expect "kernelbench rules: the task's names and Model's seed (correct)" 0 '"stage": "done"'
    run kbcpu gain_wrong.py --rules kernelbench
    expect "kernelbench rules: a wrong answer is still wrong" 1 'differ beyond'
    run kbcpu gain_names.py
    expect "cuda-agent rules: the task's names are not the candidate's" 1 "NameError: name 'GAIN'"
    run kbcpu gain_own.py
    expect "cuda-agent rules: Model's state_dict keys are required" 1 "state_dict keys differ"
else
    skip torch "KernelBench semantics in CPU mode" "needs nvcc and a python3 that imports torch"
fi
finish
