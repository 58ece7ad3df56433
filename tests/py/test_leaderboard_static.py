"""The evaluator's first stages on code real models wrote: the extraction and the static policy
(`cuda-agent eval --kernelbench-file F --policy-only`: nothing compiled, no GPU) over the 383
LLM-written KernelBench solutions of the shared leaderboard corpus (../shared/corpora/
kernelbench-leaderboard, README there), every one of which KernelBench scored correct.

- Under `--rules kernelbench` these stages let through every solution the GPU run over the whole
  corpus let through them (bench/results-leaderboard-h100.json): a policy change that refuses
  real, correct code fails here, in CI, without a GPU.
- SKILL.md's rules (`cuda-agent`, for RL rewards) refuse more, never less, and say why.
- Every finding points at the line of F the candidate wrote, not at a line of the files the
  extraction generates (which the candidate never sees).

Skipped, with the reason, where the corpus is absent.
"""
import collections
import concurrent.futures
import functools
import json
import os
import pathlib
import re
import shutil
import subprocess

import pytest

import corpora

REPO = pathlib.Path(__file__).resolve().parents[2]
CA = os.environ.get("CUDA_AGENT") or str(REPO / os.environ.get("BUILD", "build") / "cuda-agent")
CORPUS = corpora.find("kernelbench-leaderboard", "data.json")
RECORDED = REPO / "bench" / "results-leaderboard-h100.json"

pytestmark = pytest.mark.skipif(CORPUS is None, reason="no kernelbench-leaderboard corpus under "
                                + corpora.where())

Solution = collections.namedtuple("Solution", "label model problem path")


def solutions():
    """Every solution data.json lists: "l1_15 (gpt-o1)"-style label, model, task and file."""
    data = json.loads((CORPUS / "data.json").read_text())
    out = []
    for key, entries in data.items():
        m = re.fullmatch(r"Level (\d+): (\d+)_.*", key)
        assert m, key
        problem = CORPUS / "problems" / ("l%s_p%s.py" % m.groups())
        for e in entries:
            out.append(Solution("l%s_%s" % m.groups(), e["display_name"], problem,
                                CORPUS / "solutions" / (e["file"] + ".py")))
    return out


@functools.lru_cache(maxsize=None)
def verdicts(rules, tmp_root):
    """{solution: the JSON report of `eval --policy-only --rules RULES`}."""
    def one(s):
        r = subprocess.run([CA, "eval", "--json", "--policy-only", "--rules", rules,
                            "--cache-dir", tmp_root, "--task", str(s.problem),
                            "--kernelbench-file", str(s.path)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode in (0, 1), (s, r.returncode, r.stderr[-2000:])
        return s, json.loads(r.stdout)
    with concurrent.futures.ThreadPoolExecutor(max(2, os.cpu_count() or 2)) as pool:
        return dict(pool.map(one, solutions()))


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("lbcache"))


def findings(report):
    p = report.get("policy") or {}
    return p.get("violations", []) + p.get("notes", [])


def test_the_corpus_is_the_one_the_gpu_run_scored():
    recorded = json.loads(RECORDED.read_text())
    assert len(solutions()) == recorded["solutions"] == 383


def test_kernelbench_rules_let_through_what_the_gpu_run_let_through(cache):
    # The GPU run's verdicts after its fixes: what it refused before compiling, by stage. Its
    # one policy refusal came from the built object (cudaSetDevice), after these stages.
    recorded = json.loads(RECORDED.read_text())["rerun_state"]["disagreements"]
    refused = {}
    for why, names in recorded.items():
        for name in names:
            m = re.fullmatch(r"(l\d+_\d+)_.*-[0-9a-f]+ \((.+)\)", name)
            assert m, name
            refused[m.groups()] = why.split("/")[0]
    early = {k for k, stage in refused.items() if stage == "extract"}
    assert len(early) == 2 and "policy" in refused.values()
    got = verdicts("kernelbench", cache)
    for s, rep in got.items():
        if (s.label, s.model) in early:
            assert (rep["stage"], rep["ok"]) == ("extract", False), (s, rep.get("message"))
            assert "no call of torch.utils.cpp_extension.load_inline" in rep["message"]
            assert rep["message"].startswith(str(s.path) + ":")
        else:
            assert (rep["stage"], rep["ok"]) == ("policy", True), (s, rep.get("message"))
            assert rep["policy"]["violations"] == []
    assert sum(r["ok"] for r in got.values()) == 381


def test_skill_rules_refuse_more_never_less_and_say_why(cache):
    strict, lax = verdicts("cuda-agent", cache), verdicts("kernelbench", cache)
    rules = collections.Counter()
    for s, rep in strict.items():
        if rep["ok"]:
            assert lax[s]["ok"], s
            continue
        if rep["stage"] == "extract":
            assert lax[s]["stage"] == "extract", s
            continue
        assert rep["stage"] == "policy", (s, rep["stage"])
        violations = rep["policy"]["violations"]
        assert violations, s
        for v in violations:
            assert v["rule"] and v["message"] and v["file"], (s, v)
            rules[v["rule"]] += 1
        # The agent's message names the candidate's own file.
        assert str(s.path) in rep["message"], (s, rep["message"])
    passed = sum(r["ok"] for r in strict.values())
    print("\nSKILL.md's rules: %d of %d pass the static policy; violations by rule: %s"
          % (passed, len(strict), dict(rules.most_common())))
    assert 0 < passed < 381 and rules["torch-compute"] > 0


def last_name(quoted):
    names = re.findall(r"[A-Za-z_][A-Za-z_0-9]*", quoted)
    return names[-1] if names else None


def test_findings_point_at_the_line_the_candidate_wrote(cache):
    checked = collections.Counter()
    for rules in ("cuda-agent", "kernelbench"):
        for s, rep in verdicts(rules, cache).items():
            lines = s.path.read_text(encoding="utf-8").replace("\r\n", "\n").split("\n")
            for f in findings(rep):
                if not f["line"]:
                    continue
                # Every line of these files' kernels/ sources is a line of the candidate's own.
                assert "origin" in f, (s, f)
                assert f["origin"]["file"] == str(s.path), (s, f)
                at = f["origin"]["line"]
                assert 1 <= at <= len(lines), (s, f)
                if f["file"] == "model_new.py":
                    assert at == f["line"], (s, f)
                text = lines[at - 1]
                quoted = re.search(r"`([^`]+)`", f["message"])
                if "kernel launch" in f["message"]:
                    assert "<<<" in text, (s, f, text)
                    checked["launch"] += 1
                elif quoted and last_name(quoted.group(1)):
                    assert last_name(quoted.group(1)) in text, (s, f, text)
                    checked["name"] += 1
    print("\nfindings checked against the candidate's line: %s" % dict(checked))
    assert checked["launch"] > 100 and checked["name"] > 100


def need_compilers():
    """nvcc and PyTorch (the bindings' headers), or a skip; a failure where $TEST_REQUIRE says
    this host has them."""
    required = set(os.environ.get("TEST_REQUIRE", "").split(","))
    nvcc = shutil.which("nvcc") or os.path.exists("/usr/local/cuda/bin/nvcc")
    if not nvcc:
        (pytest.fail if "nvcc" in required else pytest.skip)("nvcc not found")
    pytest.importorskip("torch", reason="PyTorch is not installed (the bindings need it)")


# The GPU run's verdicts after compiling: a torch API the installed torch no longer has, and a
# call the built object's imports refuse; and two that build.
COMPILED = [("l1_49", "claude-3.5-sonnet", "compile", "DeprecatedTypeProperties"),
            ("l1_15", "gpt-o1", "policy", "cudaSetDevice"),
            ("l1_15", "deepseek-coder", None, None),
            ("l2_4", "gpt-o1", None, None)]


@pytest.mark.parametrize("label,model,stage,why", COMPILED,
                         ids=["%s-%s" % c[:2] for c in COMPILED])
def test_compile_verdicts_on_real_code(label, model, stage, why):
    need_compilers()
    (s,) = [s for s in solutions() if (s.label, s.model) == (label, model)]
    cache = os.environ.get("CUDA_AGENT_TEST_CACHE_DIR") or str(REPO / ".test-cache")
    r = subprocess.run([CA, "eval", "--json", "--compile-only", "--rules", "kernelbench",
                        "--arch", "sm_90", "--cache-dir", cache, "--task", str(s.problem),
                        "--kernelbench-file", str(s.path)],
                       capture_output=True, text=True, timeout=900)
    rep = json.loads(r.stdout)
    if stage is None:
        assert (r.returncode, rep["stage"], rep["ok"]) == (0, "compile", True), rep.get("message")
        return
    assert (r.returncode, rep["stage"], rep["ok"]) == (1, stage, False), rep.get("message")
    assert why in rep["message"], rep["message"]
    if stage == "compile":
        # The compiler's error, placed on the line of the file the candidate wrote.
        first = rep["message"].split("\n")[0]
        m = re.match(re.escape(str(s.path)) + r":(\d+) \(kernels/kb_\w+\.cu:\d+\): error:", first)
        assert m, first
        assert "AT_DISPATCH" in s.path.read_text().split("\n")[int(m.group(1)) - 1], first
