"""Tests of harness/kernelbench_extract.py, which turns a KernelBench file (ModelNew + load_inline)
into the sources a workspace would hold.

The script is run the way the evaluator runs it (python3 -I -S -B - FILE OUT_DIR, the script on
stdin); it needs only the standard library, and these tests need no torch and no GPU. Each
generated model_new.py is also put through the model_new.py policy, which it must pass exactly as
a workspace's file would.
"""

import json
import pathlib
import subprocess
import sys
import textwrap

import pytest

import policy_util

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "harness" / "kernelbench_extract.py"
EXAMPLES = sorted((ROOT / "examples" / "kernelbench").glob("*.py"))

HEAD = """\
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline
"""

MODEL = """

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.f(x)
"""


def extract(tmp_path, text, name="cand.py"):
    src = tmp_path / name
    src.write_text(textwrap.dedent(text))
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.run([sys.executable, "-I", "-S", "-B", "-", str(src), str(out)],
                          input=SCRIPT.read_bytes(), capture_output=True, timeout=60)
    assert proc.returncode in (0, 2), proc.stderr.decode()
    data = json.loads(proc.stdout)
    return proc.returncode, data, out


def ok(tmp_path, text):
    rc, data, out = extract(tmp_path, text)
    assert rc == 0, data
    return data, out


def error(tmp_path, text):
    rc, data, out = extract(tmp_path, text)
    assert rc == 2, data
    assert set(data) == {"error"}
    assert not (out / "model_new.py").exists(), "nothing is written for a rejected file"
    return data["error"]["line"], data["error"]["message"]


def policy(path):
    proc = subprocess.run([sys.executable, "-I", "-S", "-B", "-", str(path)],
                          input=policy_util.program(), capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()
    return json.loads(proc.stdout)["violations"]


def test_literal_sources(tmp_path):
    data, out = ok(tmp_path, HEAD + """
ext = load_inline(name="add", cpp_sources="torch::Tensor f(torch::Tensor x);",
                  cuda_sources="__global__ void k() {}", functions=["f"])
""" + MODEL)
    assert data["functions"] == ["f"]
    (m,) = data["modules"]
    assert m["name"] == "add" and m["functions"] == ["f"] and m["cuda"] and m["line"] == 5
    cu = (out / "kernels" / "kb_add.cu").read_text()
    # load_inline's own prelude, then the source
    assert cu.index("#include <torch/types.h>") < cu.index("#include <cuda_runtime.h>") < \
        cu.index("__global__ void k() {}")
    binding = (out / "kernels" / "kb_add_binding.cpp").read_text()
    assert '#include "binding_registry.h"' in binding
    assert "torch::Tensor f(torch::Tensor x);" in binding
    assert 'm.def("f", f, "f")' in binding
    assert binding.count("REGISTER_BINDING(") == 1 and 'REGISTER_BINDING("f",' in binding
    assert sorted(p.name for p in (out / "kernels").iterdir()) == ["kb_add.cu",
                                                                   "kb_add_binding.cpp"]


def test_model_new_rewritten_and_policy_clean(tmp_path):
    text = HEAD + """
ext = load_inline(
    name="add",
    cpp_sources="torch::Tensor f(torch::Tensor x);",
    cuda_sources="__global__ void k() {}",
    functions=["f"],
)
""" + MODEL
    _, out = ok(tmp_path, text)
    new = (out / "model_new.py").read_text()
    assert "load_inline" not in new and "cpp_extension" not in new
    assert "import cuda_extension as ext" in new
    # lines keep their numbers, so policy messages point at the candidate's own lines
    assert len(new.splitlines()) == len(text.splitlines())
    assert new.splitlines()[-1] == text.splitlines()[-1]
    assert policy(out / "model_new.py") == []


def test_module_constants_concatenation_and_fstrings(tmp_path):
    data, out = ok(tmp_path, HEAD + '''
PART1 = "__global__ void k1() {}\\n"
PART2 = ("__global__ void k2() {}"
         "\\n")
PART3 = f"__global__ void k3() {{}}\\n"
PART3 += "// added\\n"
CUDA = PART1 + PART2
DECLS: str = "torch::Tensor f(torch::Tensor x);"
FUNCS = ["f"]
ext = load_inline("cat", DECLS, [CUDA, PART3], functions=FUNCS)
''' + MODEL)
    cu = (out / "kernels" / "kb_cat.cu").read_text()
    for piece in ("void k1()", "void k2()", "void k3() {}", "// added"):
        assert piece in cu
    assert cu.index("k1") < cu.index("k2") < cu.index("k3")
    assert data["modules"][0]["name"] == "cat"


def placed(data, out, rel):
    """{generated line number: (its text, the candidate's line it says it was written on)}."""
    lines = (out / rel).read_text().split("\n")
    where = {}
    for at, origin, count in data["lines"][rel]:
        assert at >= 1 and origin >= 1 and count >= 1
        for k in range(count):
            assert at + k not in where, "runs overlap"
            where[at + k] = (lines[at + k - 1], origin + k)
    return where


def test_generated_lines_say_where_the_candidate_wrote_them(tmp_path):
    text = HEAD + '''
TOP = """
__global__ void k1(float *y) {  // k1
    y[0] = 1.f;                 // k1 body
}
"""
ONE = "__global__ void k2() {}  // k2"
ESCAPED = "// e1\\n// e2\\n"
IMPLICIT = ("// i1\\n"
            "// i2\\n")
TAIL = """// t1
"""
TAIL += """// t2
"""
CUDA = TOP + ONE
ext = load_inline(name="map", cpp_sources=["torch::Tensor f(torch::Tensor x);  // decl",
                                           """
torch::Tensor g(torch::Tensor x);  // decl2
"""],
                  cuda_sources=[CUDA, ESCAPED, IMPLICIT, TAIL], functions=["f", "g"])
''' + MODEL
    data, out = ok(tmp_path, text)
    src = textwrap.dedent(text).split("\n")
    assert set(data["lines"]) == {"kernels/kb_map.cu", "kernels/kb_map_binding.cpp"}
    for rel in data["lines"]:
        where = placed(data, out, rel)
        for at, (line, origin) in where.items():
            # What the candidate wrote on that line (a `+` of a part ending in a newline and
            # the next: the joined line is the next part's first).
            assert line in src[origin - 1], (rel, at, line, src[origin - 1])
        placed_text = [line for line, _ in where.values()]
        generated = (out / rel).read_text().split("\n")
        unplaced = [g for i, g in enumerate(generated, 1) if i not in where and g.strip()]
        if rel.endswith(".cu"):
            for mark in ("// k1", "// k1 body", "// k2", "// t1", "// t2"):
                assert any(mark in t for t in placed_text), mark
            # Escaped newlines and implicit concatenation: not lines the candidate wrote as
            # such, so not placed (the finding keeps the generated file's line).
            for mark in ("// e1", "// e2", "// i1", "// i2", "#include <cuda.h>",
                         "// Generated by cuda-agent"):
                assert any(mark in u for u in unplaced), mark
        else:
            assert any("// decl" in t for t in placed_text)
            assert any("// decl2" in t for t in placed_text)
            assert any("REGISTER_BINDING" in u for u in unplaced)
    # `TOP + ONE`: the last line of TOP is empty, so the joined line is ONE's own line.
    cu = placed(data, out, "kernels/kb_map.cu")
    k2 = [origin for line, origin in cu.values() if "// k2" in line]
    assert k2 == [src.index('ONE = "__global__ void k2() {}  // k2"') + 1]


def test_multiple_functions_and_docstrings(tmp_path):
    data, out = ok(tmp_path, HEAD + """
ext = load_inline(name="two", cpp_sources=["torch::Tensor f(torch::Tensor x);",
                                           "torch::Tensor g(torch::Tensor x);"],
                  cuda_sources="", functions={"f": "first \\"one\\"", "g": "second"})
""" + MODEL)
    assert data["functions"] == ["f", "g"]
    binding = (out / "kernels" / "kb_two_binding.cpp").read_text()
    assert 'REGISTER_BINDING("f",' in binding and 'REGISTER_BINDING("g",' in binding
    assert 'm.def("g", g, "second")' in binding
    assert 'm.def("f", f, "first one")' in binding   # quotes cannot break out of the literal


def test_binding_only_module(tmp_path):
    data, out = ok(tmp_path, HEAD + """
ext = load_inline(name="cpu", cpp_sources="torch::Tensor f(torch::Tensor x) { return x; }",
                  functions="f")
""" + MODEL)
    assert data["modules"][0]["cuda"] is False
    assert not (out / "kernels" / "kb_cpu.cu").exists()
    assert (out / "kernels" / "kb_cpu_binding.cpp").exists()


def test_two_load_inline_calls(tmp_path):
    data, out = ok(tmp_path, HEAD + """
a = load_inline(name="first", cpp_sources="torch::Tensor f(torch::Tensor x);",
                cuda_sources="// one", functions=["f"])
b = load_inline(name="second", cpp_sources="torch::Tensor g(torch::Tensor x);",
                cuda_sources="// two", functions=["g"])


class ModelNew(nn.Module):
    def forward(self, x):
        return b.g(a.f(x))
""")
    assert [m["name"] for m in data["modules"]] == ["first", "second"]
    assert data["functions"] == ["f", "g"]
    names = sorted(p.name for p in (out / "kernels").iterdir())
    assert names == ["kb_first.cu", "kb_first_binding.cpp", "kb_second.cu",
                     "kb_second_binding.cpp"]
    new = (out / "model_new.py").read_text()
    assert "import cuda_extension as a" in new and "import cuda_extension as b" in new
    assert policy(out / "model_new.py") == []


def test_module_kept_on_self(tmp_path):
    """self.ext = ext in __init__ and self.ext.f(x) in forward: the policy follows the module."""
    _, out = ok(tmp_path, HEAD + """
ext = load_inline(name="m", cpp_sources="torch::Tensor f(torch::Tensor x);",
                  cuda_sources="", functions=["f"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ext = ext

    def forward(self, x):
        return self.ext.f(x)
""")
    new = (out / "model_new.py").read_text()
    assert "self.ext = ext" in new and "return ext.f(x)" in new
    assert policy(out / "model_new.py") == []


def test_load_inline_inside_init(tmp_path):
    _, out = ok(tmp_path, """\
import torch
import torch.nn as nn
import torch.utils.cpp_extension

SRC = "torch::Tensor f(torch::Tensor x);"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ext = torch.utils.cpp_extension.load_inline(name="init", cpp_sources=SRC,
                                                         functions=["f"])

    def forward(self, x):
        return self.ext.f(x)
""")
    new = (out / "model_new.py").read_text()
    assert "cpp_extension" not in new
    assert "self.ext = cuda_extension" in new and "return cuda_extension.f(x)" in new
    assert policy(out / "model_new.py") == []


def test_ignored_build_flags_are_reported(tmp_path):
    data, _ = ok(tmp_path, HEAD + """
ext = load_inline(name="f", cpp_sources="", cuda_sources="", functions=["f"],
                  extra_cuda_cflags=["-O3", "--use_fast_math"], extra_cflags=["-O3"],
                  verbose=True, extra_ldflags=[""])
""" + MODEL)
    ignored = data["modules"][0]["ignored"]
    assert ignored["extra_cuda_cflags"] == ["-O3", "--use_fast_math"]
    assert ignored["extra_cflags"] == ["-O3"]
    assert "extra_ldflags" not in ignored


@pytest.mark.parametrize("body, line, words", [
    ("ext = load_inline(name='x', cpp_sources=make(), functions=['f'])\n", 5, "cpp_sources"),
    ("S = open('a').read()\next = load_inline(name='x', cpp_sources=S, functions=['f'])\n", 6,
     "`S` is not bound once"),
    ("for S in ['a']:\n    pass\next = load_inline(name='x', cpp_sources=S, functions=['f'])\n",
     7, "`S` is not bound once"),
    ("N = 3\next = load_inline(name='x', cpp_sources=f'{N}', functions=['f'])\n", 6,
     "cannot be read without running"),
    ("ext = load_inline(name='x', cpp_sources='', cuda_sources=['a', 1], functions=['f'])\n", 5,
     "cuda_sources"),
    ("ext = load_inline(**{'name': 'x'})\n", 5, "by name"),
    ("ext = load_inline(name='x', cpp_sources='')\n", 5, "without functions="),
    ("ext = load_inline(name='x', cpp_sources='', functions=['f', 'bad name'])\n", 5,
     "not a C++ function name"),
    ("ext = load_inline(name='no good', cpp_sources='', functions=['f'])\n", 5, "name="),
    ("ext = load_inline(name='x', cpp_sources='', functions=['f'], is_python_module=False)\n",
     5, "is_python_module"),
    ("ext = load_inline(name='x', cpp_sources='', functions=['f'], bogus=1)\n", 5,
     "unknown argument bogus="),
    ("ext = load_inline('x', '', '', None, ['f'])\n", 5, "by name"),
])
def test_rejected_dynamic_or_bad_arguments(tmp_path, body, line, words):
    got_line, message = error(tmp_path, HEAD + "\n" + body + MODEL)
    assert got_line == line, message
    assert words in message


def test_duplicate_function_across_modules(tmp_path):
    line, message = error(tmp_path, HEAD + """
a = load_inline(name="one", cpp_sources="", functions=["f"])
b = load_inline(name="two", cpp_sources="", functions=["f"])
""" + MODEL)
    assert line == 6
    assert "'f'" in message and "one" in message and "two" in message


def test_duplicate_module_name(tmp_path):
    line, message = error(tmp_path, HEAD + """
a = load_inline(name="same", cpp_sources="", functions=["f"])
b = load_inline(name="same", cpp_sources="", functions=["g"])
""" + MODEL)
    assert line == 6 and "lines 5 and 6" in message


def test_generated_file_over_the_snapshot_limit(tmp_path):
    line, message = error(tmp_path, HEAD + """
BIG = "// %s"
ext = load_inline(name="big", cpp_sources="", cuda_sources=BIG, functions=["f"])
""" % ("x" * (1024 * 1024)) + MODEL)
    # model_new.py keeps the constant, so it is the first file over the limit
    assert line == 0 and "model_new.py would be over 1048576 bytes" in message


def test_no_model_new(tmp_path):
    line, message = error(tmp_path, HEAD + """
ext = load_inline(name="x", cpp_sources="", functions=["f"])
""")
    assert line == 1 and "ModelNew" in message


def test_no_load_inline(tmp_path):
    line, message = error(tmp_path, "import torch\nimport torch.nn as nn\n" + MODEL)
    assert line == 1 and "load_inline" in message


def test_load_from_files_refused(tmp_path):
    line, message = error(tmp_path, """\
import torch.nn as nn
from torch.utils.cpp_extension import load

ext = load(name="x", sources=["x.cu"])
""" + MODEL)
    assert line == 4 and "load_inline" in message


def test_syntax_error(tmp_path):
    line, message = error(tmp_path, HEAD + "\n\ndef broken(:\n    pass\n")
    assert line == 6 and "invalid Python" in message


def test_missing_file(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.run([sys.executable, "-I", "-S", "-B", "-", str(tmp_path / "none.py"),
                           str(out)], input=SCRIPT.read_bytes(), capture_output=True, timeout=60)
    assert proc.returncode == 2
    assert "cannot read" in json.loads(proc.stdout)["error"]["message"]


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_examples(tmp_path, path):
    """examples/kernelbench/*.py extract, and their model_new.py passes the policy."""
    rc, data, out = extract(tmp_path, path.read_text(), name=path.name)
    assert rc == 0, data
    assert data["functions"] == [path.stem]
    assert policy(out / "model_new.py") == []
    (m,) = data["modules"]
    cu = (out / "kernels" / ("kb_%s.cu" % m["name"])).read_text()
    assert "%s_launch" % path.stem in cu and "getCurrentCUDAStream" in cu


def test_examples_exist():
    assert {p.stem for p in EXAMPLES} >= {"swish_scale_bias", "softmax_last_dim"}
