#!/usr/bin/env python3
"""bench/kb_compile.py - KernelBench-format candidates through the evaluator, the two ways
their load_inline cuda source can be built, side by side on the same files in one run:

  whole  each cuda source is one nvcc unit with the torch headers (CUDA_AGENT_COMPILE_SPLIT=0)
  split  the source cut in two where the cut keeps its meaning: the torch functions by c++ with
         a precompiled header, the rest by nvcc without torch (docs/internals/compile.md)

For each file and each way, in a compile cache of the way's own: a new candidate (a fresh
comment in its cuda and cpp sources, so no object of it is cached; the precompiled headers are
made beforehand, by a warm-up build that is reported apart), the same candidate with only its
cuda source changed (the agent's next attempt), and the same again unchanged. Prints one line per
evaluation, then per case the median wall time of each way and their ratio, and writes every
JSON report under OUT_DIR.

  python3 bench/kb_compile.py [CUDA_AGENT_BINARY] [OUT_DIR] [--full] [--service] [--corpus N] [FILE:TASK...]

Run from the repository root, with $CUDA_AGENT_PYTHON (default python3) importing PyTorch.
Default files: examples/kernelbench/*.py against examples/tasks, and the first N (default 6) of
the leaderboard solutions in ../shared/corpora/kernelbench-leaderboard (sorted by file name) that
the static policy lets through, against their problems/ (skipped with a message where that
directory is absent). Without --full each evaluation stops after the compile stage
(--compile-only: no GPU needed); with it the whole evaluation runs (a GPU machine). Extra eval
flags come from $EVAL_FLAGS (e.g. --no-sandbox). Under the default rule set most leaderboard
solutions stop at the policy (launches without a stream, torch::zeros outputs): when the binary
has no --rules kernelbench, their copies get the current stream in each launch and torch::empty
for zeros, which changes what they compute but not what the compile costs.

With --service each way gets an evaluator service of its own (`cuda-agent evaluator`, its
cache, CUDA_AGENT_COMPILE_SPLIT set at its start) and every evaluation goes through it
(`eval --server`): the wall time an agent or a bench client sees, with the harness warm, rather
than a one-shot evaluation that starts PyTorch cold each time.
"""

import ast
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

CORPUS = "../shared/corpora/kernelbench-leaderboard"
CASES = ("new", "cuda-changed", "unchanged")
WAYS = (("whole", "0"), ("split", "1"))


def leftmost_string(node, assigns):
    """The string constant a load_inline source argument starts with (following names)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node
    if isinstance(node, ast.JoinedStr):
        return node
    if isinstance(node, ast.Name) and node.id in assigns:
        return leftmost_string(assigns[node.id], assigns)
    if isinstance(node, ast.BinOp):
        return leftmost_string(node.left, assigns)
    if isinstance(node, (ast.List, ast.Tuple)) and node.elts:
        return leftmost_string(node.elts[0], assigns)
    return None


def source_args(text):
    """(cuda node, cpp node) of the first load_inline call of a KernelBench file."""
    tree = ast.parse(text)
    assigns = {}
    for st in tree.body:
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
            assigns[st.targets[0].id] = st.value
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name == "load_inline":
                kw = {k.arg: k.value for k in node.keywords}
                cuda = leftmost_string(kw["cuda_sources"], assigns) if "cuda_sources" in kw else None
                cpp = leftmost_string(kw["cpp_sources"], assigns) if "cpp_sources" in kw else None
                return cuda, cpp
    return None, None


def insert_after_quote(text, node, comment):
    """text with comment inserted at the start of the string literal node."""
    lines = text.split("\n")
    line = lines[node.lineno - 1]
    col = len(line.encode()[: node.col_offset].decode())
    m = re.match(r"[rRbBuUfF]*(\"\"\"|'''|\"|')", line[col:])
    if not m:
        raise ValueError("no string literal at line %d" % node.lineno)
    at = col + m.end()
    lines[node.lineno - 1] = line[:at] + comment + line[at:]
    return "\n".join(lines)


def stamped(text, cuda_stamp, cpp_stamp):
    """The file with a comment in its cuda source and, when cpp_stamp, in its cpp source."""
    cuda, cpp = source_args(text)
    if cuda is None:
        raise ValueError("no cuda_sources string")
    edits = [(cuda, "/* bench %s */" % cuda_stamp)]
    if cpp_stamp and cpp is not None and (cpp.lineno, cpp.col_offset) != (cuda.lineno, cuda.col_offset):
        edits.append((cpp, "/* bench %s */" % cpp_stamp))
    # From the end of the file, so that earlier offsets stay valid.
    for node, comment in sorted(edits, key=lambda e: (e[0].lineno, e[0].col_offset), reverse=True):
        text = insert_after_quote(text, node, comment)
    return text


def policy_clean(text):
    """Launches on the current stream and empty outputs: what the cuda-agent rules accept."""

    def launch(m):
        args = [a.strip() for a in m.group(1).split(",")]
        if len(args) == 2:
            args.append("0")
        if len(args) == 3:
            args.append("at::cuda::getCurrentCUDAStream()")
        return "<<<" + ", ".join(args) + ">>>"

    text = re.sub(r"<<<([^<>]*?)>>>", launch, text)
    text = text.replace("torch::zeros_like", "torch::empty_like").replace("torch::zeros(", "torch::empty(")
    if "getCurrentCUDAStream" in text and "ATen/cuda/CUDAContext.h" not in text:
        text = text.replace("#include <torch/extension.h>", "#include <torch/extension.h>\n#include <ATen/cuda/CUDAContext.h>", 1)
    return text


class Bench:
    def __init__(self, binary, out, full):
        self.binary, self.out, self.full = binary, out, full
        self.sockets = {}  # way -> the socket of its evaluator service (--service)
        self.services = []
        self.extra = shlex.split(os.environ.get("EVAL_FLAGS", ""))
        self.rules = self.has_kernelbench_rules()
        self.work = tempfile.mkdtemp(prefix="kb-compile-")
        self.results = {}  # (file, way, case) -> wall seconds
        self.counter = 0

    def way_env(self, way, split):
        env = dict(os.environ)
        env["CUDA_AGENT_COMPILE_SPLIT"] = split
        env["CUDA_AGENT_CACHE_DIR"] = os.path.join(self.out, "cache-" + way)
        return env

    def start_service(self, way, split):
        """One evaluator service for this way; returns once its socket is up."""
        sock = os.path.join(tempfile.mkdtemp(prefix="kb-svc-"), "eval.sock")
        log = open(os.path.join(self.out, "service-%s.log" % way), "w")
        cmd = [self.binary, "evaluator", "--socket", sock, "--prewarm", "2"] + shlex.split(os.environ.get("EVAL_SERVICE_FLAGS", ""))
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=log, stderr=log, env=self.way_env(way, split))
        self.services.append(proc)
        while not os.path.exists(sock):
            if proc.poll() is not None:
                raise SystemExit("the %s evaluator service did not start (exit %d): see %s" % (way, proc.returncode, log.name))
            if time.monotonic() - t0 > 300:
                raise SystemExit("the %s evaluator service did not start within 300 s: see %s" % (way, log.name))
            time.sleep(0.1)
        print("service %-5s ready in %.1f s" % (way, time.monotonic() - t0))
        self.sockets[way] = sock

    def stop(self):
        for proc in self.services:
            proc.terminate()
        for proc in self.services:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()

    def has_kernelbench_rules(self):
        help_text = subprocess.run([self.binary, "eval", "--help"], capture_output=True, text=True).stdout
        return "--rules" in help_text

    def stamp(self):
        self.counter += 1
        return "%d-%d" % (time.time_ns(), self.counter)

    def evaluate(self, label, way, split, task, path):
        env = self.way_env(way, split)
        cmd = [self.binary, "eval", "--json"] + self.extra
        if way in self.sockets:
            cmd += ["--server", self.sockets[way]]
        if not self.full:
            cmd.append("--compile-only")
        if self.rules:
            cmd += ["--rules", "kernelbench"]
        cmd += ["--task", task, "--kernelbench-file", path]
        t0 = time.monotonic()
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        wall = time.monotonic() - t0
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", label)
        with open(os.path.join(self.out, safe + ".json"), "w") as f:
            f.write(p.stdout)
        try:
            r = json.loads(p.stdout)
        except ValueError:
            print("%-44s %-5s rc=%d wall=%6.2fs no report: %s" % (label, way, p.returncode, wall, p.stderr[-300:].strip()))
            return None, wall
        c = r.get("compile") or {}
        units = c.get("units") or []
        cu = [u for u in units if u.get("role") == "cu-torch"]
        cu_s = sum(u.get("elapsed_us", 0) for u in cu) / 1e6
        misses = sum(1 for u in units if not u.get("cached"))
        print(
            "%-44s %-5s rc=%d wall=%6.2fs stage=%s compile=%6.2fs cu-torch=%6.2fs split=%s misses=%d/%d%s"
            % (
                label,
                way,
                p.returncode,
                wall,
                r.get("stage"),
                (r.get("stage_ms") or {}).get("compile", 0) / 1e3,
                cu_s,
                ",".join("y" if u.get("split") else "n" for u in cu) or "-",
                misses,
                len(units),
                "" if r.get("stage") in ("compile", "harness", "reward", None) or c else " msg=%r" % (r.get("message") or "")[:120],
            )
        )
        return r, wall

    def passes_policy(self, task, path):
        """Whether a file gets past extraction and policy (its compile is then measured)."""
        r, _ = self.evaluate("probe " + os.path.basename(path), "split", "1", task, path)
        return r is not None and r.get("stage") not in ("extract", "policy")

    def run_file(self, name, task, text):
        for way, split in WAYS:
            path = os.path.join(self.work, "%s.%s.py" % (name, way))
            cpp = self.stamp()  # the same cpp source in all three cases: only the cuda one changes
            for case in CASES:
                if case != "unchanged":
                    with open(path, "w") as f:
                        f.write(stamped(text, self.stamp(), cpp))
                _, wall = self.evaluate("%s %s" % (name, case), way, split, task, path)
                self.results[(name, way, case)] = wall

    def warm_up(self, task, text):
        """The precompiled headers of each way, made before anything is timed."""
        for way, split in WAYS:
            path = os.path.join(self.work, "warm-up.%s.py" % way)
            with open(path, "w") as f:
                f.write(stamped(text, self.stamp(), self.stamp()))
            _, wall = self.evaluate("warm-up (precompiled headers)", way, split, task, path)
            self.results[("warm-up", way, "first")] = wall

    def summary(self, names):
        print("\nmedian wall time over %d files, seconds (whole = one nvcc unit, split = cut in two):" % len(names))
        print("%-14s %8s %8s %8s" % ("case", "whole", "split", "ratio"))
        for case in CASES:
            w = [self.results[(n, "whole", case)] for n in names if (n, "whole", case) in self.results]
            s = [self.results[(n, "split", case)] for n in names if (n, "split", case) in self.results]
            if w and s:
                mw, ms = statistics.median(w), statistics.median(s)
                print("%-14s %8.2f %8.2f %7.2fx" % (case, mw, ms, mw / ms if ms else float("nan")))
        print("\nper file, new candidate (whole / split):")
        for n in names:
            w, s = self.results.get((n, "whole", "new")), self.results.get((n, "split", "new"))
            if w and s:
                print("  %-40s %7.2f / %6.2f = %5.2fx" % (n, w, s, w / s))


def corpus_files(n, bench):
    """The first n leaderboard solutions (by file name) that get past the policy."""
    root = os.path.join(CORPUS, "solutions")
    if not os.path.isdir(root):
        print("skip: %s not found: corpus files not measured" % CORPUS)
        return []
    with open(os.path.join(CORPUS, "data.json")) as f:
        data = json.load(f)
    task_of = {}
    for key, entries in data.items():
        m = re.match(r"Level (\d+): (\d+)_", key)
        if m:
            for e in entries:
                task_of[e["file"]] = os.path.join(CORPUS, "problems", "l%s_p%s.py" % m.groups())
    picked = []
    for fn in sorted(os.listdir(root)):
        stem = fn[:-3]
        if len(picked) == n or not fn.endswith(".py") or stem not in task_of:
            continue
        with open(os.path.join(root, fn)) as f:
            text = f.read()
        if not bench.rules:
            text = policy_clean(text)
        try:
            probe = os.path.join(bench.work, "probe-" + fn)
            with open(probe, "w") as f:
                f.write(stamped(text, bench.stamp(), bench.stamp()))
        except (ValueError, SyntaxError) as e:
            print("skip %s: %s" % (fn, e))
            continue
        if bench.passes_policy(task_of[stem], probe):
            picked.append(("lb-" + stem[:8], task_of[stem], text))
    return picked


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    full = "--full" in argv
    n = 6
    if "--corpus" in argv:
        n = int(argv[argv.index("--corpus") + 1])
        args.remove(str(n))
    binary = os.path.abspath(args[0]) if args else os.path.abspath("build/cuda-agent")
    out = os.path.abspath(args[1]) if len(args) > 1 else "/tmp/kb-compile"
    os.makedirs(out, exist_ok=True)
    bench = Bench(binary, out, full)
    try:
        if "--service" in argv:
            for way, split in WAYS:
                bench.start_service(way, split)
        run(bench, args, n)
    finally:
        bench.stop()


def run(bench, args, corpus_n):
    files = []
    for spec in args[2:]:
        path, task = spec.split(":", 1)
        with open(path) as f:
            files.append((os.path.basename(path)[:-3], task, f.read()))
    if not files:
        for fn in sorted(os.listdir("examples/kernelbench")):
            if fn.endswith(".py"):
                with open(os.path.join("examples/kernelbench", fn)) as f:
                    files.append((fn[:-3], os.path.join("examples/tasks", fn), f.read()))
        print("rules: %s; mode: %s%s; machine: %d CPUs" % ("kernelbench" if bench.rules else "cuda-agent (corpus copies made policy-clean)", "full evaluation" if bench.full else "--compile-only", " through an evaluator service per way" if bench.sockets else " (one-shot)", os.cpu_count()))
        files += corpus_files(corpus_n, bench)
    bench.warm_up(files[0][1], files[0][2])
    for name, task, text in files:
        bench.run_file(name, task, text)
    bench.summary([f[0] for f in files])
    print("\nreports: %s" % bench.out)


if __name__ == "__main__":
    main(sys.argv[1:])
