"""Tests of harness/policy_model_new.py, the static policy for model_new.py.

Every file under tests/eval/policy/model_new/ok/ and every reference solution's model_new.py must
pass; every file under tests/eval/policy/model_new/bad/ must report exactly the "rule:line" pairs
of its .expect file. The policy is run the way the evaluator runs it (python3 -I -S -B - PATH, with
the program policy_util.py builds on stdin) and needs nothing but the standard library: no torch.
"""

import ast
import json
import pathlib
import subprocess
import sys

import pytest

import policy_util

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "eval" / "policy" / "model_new"
OK = sorted((FIXTURES / "ok").glob("*.py")) + \
    sorted((ROOT / "examples" / "solutions").glob("*/model_new.py"))
BAD = sorted((FIXTURES / "bad").glob("*.py"))

# the ids the C side (src/eval/policy.c) knows; an unknown one fails the check there
RULES = {"syntax", "import", "builtin", "dunder", "fallback", "with", "decorator", "scope",
         "class", "state", "structure", "generator", "torch-compute", "stream", "file-size"}


def run(path, rules=None):
    extra = ["--rules", rules] if rules else []
    proc = subprocess.run([sys.executable, "-I", "-S", "-B", "-", *extra, str(path)],
                          input=policy_util.program(), capture_output=True, timeout=60)
    return proc


def verdict(path, rules=None):
    proc = run(path, rules)
    assert proc.returncode in (0, 2), proc.stderr.decode()
    data = json.loads(proc.stdout)
    for v in data["violations"]:
        assert set(v) == {"line", "rule", "message", "advisory"}
        # Under the default (cuda-agent) rules every finding decides.
        assert v["advisory"] is (False if rules in (None, "cuda-agent") else v["advisory"])
        assert v["rule"] in RULES, v
        assert isinstance(v["line"], int) and v["line"] >= 1
        assert v["message"]
    return proc.returncode, data


def pairs(data):
    return sorted({"%s:%d" % (v["rule"], v["line"]) for v in data["violations"]})


def test_enough_fixtures():
    assert len(OK) >= 5
    assert len(BAD) >= 20


@pytest.mark.parametrize("path", OK, ids=[str(p.relative_to(ROOT)) for p in OK])
def test_ok_passes(path):
    code, data = verdict(path)
    assert code == 0
    assert data["violations"] == [], data


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_bad_reports_expected(path):
    expect = path.with_suffix(".expect")
    want = sorted({line.strip() for line in expect.read_text().splitlines() if line.strip()})
    assert want, f"{expect} lists nothing"
    code, data = verdict(path)
    assert code == (2 if "syntax:" in " ".join(want) else 0)
    assert pairs(data) == want, json.dumps(data, indent=1)


def write(tmp_path, text, name="model_new.py"):
    p = tmp_path / name
    p.write_text(text)
    return p


HEADER = "import torch\nimport torch.nn as nn\nimport cuda_extension\n\n\n"


def check(tmp_path, body):
    return pairs(verdict(write(tmp_path, HEADER + body))[1])


def test_aliases_do_not_hide_torch(tmp_path):
    src = ("import torch as T\nfrom torch import nn as N\nimport cuda_extension as ext\n\n\n"
           "class ModelNew(N.Module):\n"
           "    def forward(self, x):\n"
           "        y = ext.f(x)\n"
           "        z = T.tanh(y)\n"
           "        return N.functional.relu(z)\n")
    assert pairs(verdict(write(tmp_path, src))[1]) == ["torch-compute:10", "torch-compute:9"]


def test_locals_named_like_builtins_are_fine(tmp_path):
    body = ("class ModelNew(nn.Module):\n"
            "    def forward(self, input, type=0):\n"
            "        id = cuda_extension.f(input, type)\n"
            "        return id\n")
    assert check(tmp_path, body) == []


def test_module_level_constants_may_be_unpacked(tmp_path):
    # KernelBench files (and models writing model_new.py after them) keep the task's sizes at
    # module level, often as `height, width = 32, 32`: constants into constants. Found on the
    # leaderboard corpus, where 21 solutions were refused for it.
    body = ("batch_size = 16\n"
            "height, width = 32, 32\n"
            "(D, H), W = (8, 16), 32\n"
            "SHAPE: tuple = (4, 4)\n\n\n"
            "class ModelNew(nn.Module):\n"
            "    def forward(self, x):\n"
            "        return cuda_extension.f(x, height * width, D + H + W, batch_size)\n")
    assert check(tmp_path, body) == []
    # Still refused: a starred name (binds a list), a value that is not constant, a store into
    # another object, and a subscript.
    bad = ("a, *rest = 1, 2, 3\n"       # line 6
           "h, w = [32, 32]\n"          # 7: a list
           "p, q = cuda_extension.f\n"  # 8: a call's or object's value
           "torch.x, y = 1, 2\n"        # 9
           "z = {}\n"                   # 10
           "z[0], t = 1, 2\n\n\n"      # 11
           "class ModelNew(nn.Module):\n"
           "    def forward(self, x):\n"
           "        return cuda_extension.f(x)\n")
    got = check(tmp_path, bad)
    for line in (6, 9, 11):
        assert "structure:%d" % line in got, got
    assert "state:7" in got and "structure:8" in got and "state:10" in got, got


def test_tensor_values_and_python_values(tmp_path):
    body = ("class ModelNew(nn.Module):\n"
            "    def __init__(self, k):\n"
            "        super().__init__()\n"
            "        self.k = k\n"
            "        self.w = nn.Parameter(torch.randn(k, k) * 0.02)\n"
            "    def forward(self, x):\n"
            "        n = x.shape[0] * self.k + len(x) - x.numel() // 2\n"   # line 12: fine
            "        out = cuda_extension.f(x, self.w, n)\n"
            "        print(x.shape, n)\n"                                   # 14: fine
            "        print(out)\n"                                          # 15: host copy
            "        s = f'{out}'\n"                                        # 16: host copy
            "        a, b = out\n"                                          # 17: tuple result
            "        return x.T, self.w @ out\n")                           # 18: two computes
    assert check(tmp_path, body) == ["torch-compute:15", "torch-compute:16", "torch-compute:18"]


def test_results_in_containers_stay_tensors(tmp_path):
    body = ("class ModelNew(nn.Module):\n"
            "    def forward(self, x):\n"
            "        outs = []\n"
            "        outs.append(cuda_extension.f(x))\n"
            "        total = sum(outs)\n"                                   # 10: adds tensors
            "        d = {'a': x}\n"
            "        return d['a'] * 2, total\n")                           # 12
    assert check(tmp_path, body) == ["torch-compute:10", "torch-compute:12"]


def test_functions_passed_as_values_are_checked(tmp_path):
    body = ("def twice(t):\n"
            "    return t + t\n"                                            # 7
            "\n\n"
            "class ModelNew(nn.Module):\n"
            "    def forward(self, *xs):\n"
            "        ys = sorted(xs, key=twice)\n"                          # 12: compares
            "        return cuda_extension.f(*ys)\n")
    assert check(tmp_path, body) == ["torch-compute:12", "torch-compute:7"]


def test_unreachable_helpers_are_not_judged_as_forward(tmp_path):
    body = ("def get_inputs():\n"
            "    return [torch.randn(4, 4) * 2]\n"
            "\n\n"
            "class ModelNew(nn.Module):\n"
            "    def forward(self, x):\n"
            "        return cuda_extension.f(x)\n")
    assert check(tmp_path, body) == []


def test_syntax_errors_and_bad_encoding(tmp_path):
    code, data = verdict(write(tmp_path, "def f(:\n    pass\n"))
    assert code == 2 and pairs(data) == ["syntax:1"]
    p = tmp_path / "enc.py"
    p.write_bytes(b"x = 1\ny = '\xff'\n")
    code, data = verdict(p)
    assert code == 2 and pairs(data) == ["syntax:2"]
    p = tmp_path / "nul.py"
    p.write_bytes(b"x = 1\0\n")
    code, data = verdict(p)
    assert code == 2 and [v["rule"] for v in data["violations"]] == ["syntax"]


def test_unreadable_file_is_exit_2_without_json(tmp_path):
    proc = run(tmp_path / "missing.py")
    assert proc.returncode == 2
    assert proc.stdout == b""
    assert b"cannot read" in proc.stderr


def test_many_violations_are_capped(tmp_path):
    lines = "".join("        exec('%d')\n" % i for i in range(250))
    body = "class ModelNew(nn.Module):\n    def forward(self, x):\n" + lines + \
        "        return cuda_extension.f(x)\n"
    code, data = verdict(write(tmp_path, HEADER + body))
    assert code == 0
    assert len(data["violations"]) == 200
    assert data["truncated"] == 50


def nested(expr):
    return HEADER + "class ModelNew(nn.Module):\n    def forward(self, x):\n" + \
        "        return cuda_extension.f(" + expr + ")\n"


def test_parentheses_do_not_nest_the_tree(tmp_path):
    # Redundant parentheses leave no node in the tree: 150 of them are an ordinary, clean file.
    code, data = verdict(write(tmp_path, nested("(" * 150 + "x" + ")" * 150)))
    assert code == 0 and data["violations"] == []


@pytest.mark.parametrize("expr, message", [
    # past the tokenizer's 200 levels of brackets
    ("(" * 250 + "x" + ")" * 250, "invalid Python: too many nested parentheses"),
    # parses, but the checker's walk runs out of stack
    ("+".join(["1"] * 10000), "model_new.py is nested too deeply for the policy check"),
    # too deep for the parser's own tree construction
    ("+".join(["x"] * 100000), "model_new.py cannot be parsed: "),
], ids=["brackets", "checker", "parser"])
def test_deep_nesting_is_an_input_error_not_a_crash(tmp_path, expr, message):
    proc = run(write(tmp_path, nested(expr)))
    assert proc.returncode == 2, proc.stderr.decode()
    assert proc.stderr == b""
    data = json.loads(proc.stdout)
    assert [v["rule"] for v in data["violations"]] == ["syntax"], data
    assert data["violations"][0]["message"].startswith(message), data


def test_script_needs_only_the_standard_library():
    imported = set()
    for path in [policy_util.LOADER, *sorted(policy_util.PACKAGE.glob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                imported.add(node.module)
    own = {m for m in imported if m == "policy" or m.startswith("policy.")}
    assert own, imported
    assert imported - own <= {"ast", "json", "sys", "importlib.util", "traceback"}, imported


# ---- the kernelbench rules ----

def deciding(data):
    return sorted((v["rule"], v["line"]) for v in data["violations"] if not v["advisory"])


@pytest.mark.parametrize("path", OK, ids=[p.stem for p in OK])
def test_ok_stays_ok_under_kernelbench_rules(path):
    rc, data = verdict(path, "kernelbench")
    assert rc == 0 and deciding(data) == [], data


def test_kernelbench_rules_allow_torch_and_keep_what_reaches_beyond(tmp_path):
    f = tmp_path / "model_new.py"
    f.write_text(
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
        "import numpy as np\nimport cuda_extension\n\n\n"
        "class Block(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return F.relu(x)\n\n\n"
        "class ModelNew(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.block = Block()\n\n"
        "    @staticmethod\n"
        "    def helper(x):\n"
        "        return x * 2\n\n"
        "    def forward(self, x):\n"
        "        try:\n"
        "            return cuda_extension.f(self.block(x).contiguous())\n"
        "        except RuntimeError:\n"
        "            return torch.cat([x, x])\n")
    rc, data = verdict(f, "kernelbench")
    assert rc == 0 and deciding(data) == [], data
    assert {v["rule"] for v in data["violations"]} >= {"fallback", "decorator", "class"}
    rc, data = verdict(f, "cuda-agent")
    assert {r for r, _ in deciding(data)} >= {"fallback", "decorator", "class", "import"}
    for code, rule in [("import os\n", "import"), ("import ctypes\n", "import"),
                       ("from model import Model\n", "import"),
                       ("import torch._dynamo\n", "import"),
                       ("x = eval('1')\n", "builtin"), ("g = globals()\n", "builtin"),
                       ("import torch\nb = torch.nn.Module.__subclasses__()\n", "dunder")]:
        f.write_text(code)
        rc, data = verdict(f, "kernelbench")
        assert rule in {r for r, _ in deciding(data)}, (code, data)


def test_unknown_rule_set_is_a_usage_error(tmp_path):
    f = tmp_path / "model_new.py"
    f.write_text("import torch\n")
    proc = run(f, "pytorch")
    assert proc.returncode == 2 and b"usage" in proc.stderr


# ---- the policy is several files, run from memory ----

def test_a_second_file_is_what_runs(tmp_path):
    """The import rule (policy/structure.py) words its message with policy/vocab.py's hint: an
    altered vocab.py in the program changes it, so the files run are the program's own."""
    files = policy_util.sources()
    key = b"harness/policy/vocab.py"
    files[key] += b'\nALLOWED_HINT = "the hint of the second file"\n'
    f = write(tmp_path, "import os\n")
    proc = policy_util.run([f], files)
    assert proc.returncode == 0, proc.stderr.decode()
    messages = [v["message"] for v in json.loads(proc.stdout)["violations"]
                if v["rule"] == "import"]
    assert messages == ["`import os`: the hint of the second file"]


@pytest.mark.parametrize("name,source,what", [
    ("values.py", b"def broken(:\n", "SyntaxError"),
    ("structure.py", b"raise RuntimeError('no structure today')\n", "no structure today"),
])
def test_a_broken_policy_file_is_not_a_verdict(tmp_path, name, source, what):
    files = policy_util.sources()
    files[b"harness/policy/" + name.encode()] = source
    proc = policy_util.run([write(tmp_path, HEADER)], files)
    assert proc.returncode == 3 and proc.stdout == b"", proc
    err = proc.stderr.decode().strip().splitlines()[-1]
    assert err.startswith("harness/policy/%s line 1: " % name), err
    assert what in err


def test_the_working_directory_holds_no_policy(tmp_path, monkeypatch):
    """Files named like the policy's, in the directory python3 starts in, are never imported."""
    fake = tmp_path / "policy"
    fake.mkdir()
    for name in ("__init__.py", "check.py", "vocab.py"):
        (fake / name).write_text("raise SystemExit(0)\n")
    monkeypatch.chdir(tmp_path)
    code, data = verdict(write(tmp_path, "import os\n"))
    assert code == 0 and "import:1" in pairs(data), data
