"""kernelbench_extract.py - turns a KernelBench-style file into an evaluator snapshot.

Run by the evaluator (src/eval/eval_kernelbench.c), which feeds this script on stdin:
    python3 -I -S -B - FILE.py OUT_DIR
Standard library only; nothing of FILE.py is executed, torch is never imported.

A KernelBench candidate is one Python file whose ModelNew calls kernels that
torch.utils.cpp_extension.load_inline(name=..., cpp_sources=..., cuda_sources=...,
functions=[...]) builds at import time. The evaluator builds them itself, through the same compile
pool, cache and precompiled header as a workspace's kernels, so this script reads the file with
`ast` only and writes what load_inline would have compiled, as a workspace would hold it:

  OUT_DIR/kernels/kb_NAME.cu          the cuda_sources, after the includes load_inline adds
  OUT_DIR/kernels/kb_NAME_binding.cpp the cpp_sources, then one REGISTER_BINDING per function
                                      (what load_inline's generated PYBIND11_MODULE would define)
  OUT_DIR/model_new.py                FILE.py with each load_inline call replaced by the module
                                      cuda_extension and the cpp_extension import removed

Sources must be static: string literals (implicit concatenation included), f-strings without
placeholders, module-level names bound once to such values, `+` of them, or lists and tuples of
them. Anything else is refused with the line it is on, never guessed.

Prints one JSON object on stdout and exits 0:
    {"modules": [{"name", "line", "functions": [...], "cuda": bool, "ignored": {...}}],
     "functions": [...], "lines": {"kernels/kb_NAME.cu": [[LINE, FILE_LINE, COUNT], ...], ...}}
where "lines" says which lines of each generated kernels/ file were written on which lines of
FILE.py (COUNT lines from LINE on are FILE.py's from FILE_LINE on), so that what is found there is
shown where the candidate wrote it; model_new.py keeps FILE.py's lines.
or, when the file cannot be turned into a snapshot, exits 2 with
    {"error": {"line": N, "message": "..."}}
Any other exit is a bug in this script, which the evaluator reports as such.
"""
import ast
import json
import os
import re
import sys

EXIT_INPUT = 2
MAX_BYTES = 4 * 1024 * 1024
# Each generated file must fit the evaluator's snapshot limit (CA_LIMIT_TASK_BYTES).
MAX_OUTPUT_BYTES = 1024 * 1024
MAX_MODULES = 16
MAX_FUNCTIONS = 64
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}\Z")

CPP_EXTENSION = "torch.utils.cpp_extension"
LOAD_INLINE = CPP_EXTENSION + ".load_inline"
# load_inline's positional parameters that mean the same in every torch release (later ones moved
# when sycl_sources was added, so they must be passed by keyword).
POSITIONAL = ("name", "cpp_sources", "cuda_sources")
# Keywords that only steer torch's own build (directory, logging, caching): without effect here.
BUILD_ONLY = {"verbose", "build_directory", "keep_intermediates", "use_pch", "with_cuda",
              "extra_ldflags", "extra_include_paths"}
# Compiler flags are the evaluator's; the candidate's are reported as ignored.
FLAGS = {"extra_cflags", "extra_cuda_cflags"}
KNOWN = set(POSITIONAL) | BUILD_ONLY | FLAGS | {
    "functions", "sycl_sources", "extra_sycl_cflags", "is_python_module",
    "with_pytorch_error_handling", "no_implicit_headers"}

# What load_inline puts before the sources (torch/utils/cpp_extension.py).
CUDA_PRELUDE = "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n"


class ExtractError(Exception):
    def __init__(self, node, message):
        super().__init__(message)
        self.line = getattr(node, "lineno", 0) or 0
        self.message = message


UNRESOLVED = object()


class Text(str):
    """A static string that knows, for each of its lines, the line of FILE.py it was written on
    (0 where it was not written as that line: an escaped newline, an implicit concatenation of
    literals, a line this script adds)."""

    def __new__(cls, value, origins):
        text = super().__new__(cls, value)
        text.origins = tuple(origins)
        return text


def origins(s):
    return getattr(s, "origins", None) or (0,) * (s.count("\n") + 1)


def literal(node, value):
    """A string literal's value with its lines' places, where they are its source lines."""
    lines = value.count("\n") + 1
    first, last = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
    if first is not None and last is not None and last - first + 1 == lines:
        return Text(value, range(first, last + 1))
    return Text(value, (0,) * lines)


def cat(*parts):
    """The parts one after the other; a line made of two parts keeps the place of the first
    that has text on it."""
    text, where = "", (0,)
    for p in parts:
        o = origins(p)
        tail = text[text.rfind("\n") + 1:]
        joined = where[-1] if tail.strip() or not o[0] else o[0]
        text, where = text + p, where[:-1] + (joined,) + o[1:]
    return Text(text, where)


def join_lines(items):
    """"\n".join(items), keeping each line's place."""
    return cat(*[p for i, item in enumerate(items) for p in ((item,) if i == 0 else ("\n", item))])


class Env:
    """Module-level names bound to static values, in file order."""

    def __init__(self):
        self.values = {}     # name -> value (str, list, dict, bool, None) or UNRESOLVED

    def bind(self, name, value):
        # Each binding replaces the last: a dynamic one (in a loop, from a call) makes the name
        # unresolvable from there on, so a load_inline call after it is refused.
        self.values[name] = value


def static_value(node, env):
    """The value of node if it is static, else UNRESOLVED."""
    if isinstance(node, ast.Constant):
        if isinstance(node.value, str):
            return literal(node, node.value)
        if isinstance(node.value, bool) or node.value is None:
            return node.value
        return UNRESOLVED
    if isinstance(node, ast.JoinedStr):
        parts = []
        for v in node.values:
            if not (isinstance(v, ast.Constant) and isinstance(v.value, str)):
                return UNRESOLVED
            parts.append(v.value)
        return literal(node, "".join(parts))
    if isinstance(node, ast.Name):
        return env.values.get(node.id, UNRESOLVED)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        a, b = static_value(node.left, env), static_value(node.right, env)
        if isinstance(a, str) and isinstance(b, str):
            return cat(a, b)
        if isinstance(a, list) and isinstance(b, list):
            return a + b
        return UNRESOLVED
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [static_value(e, env) for e in node.elts]
        if any(i is UNRESOLVED or isinstance(i, (list, dict)) for i in items):
            return UNRESOLVED
        return items
    if isinstance(node, ast.Dict):
        out = {}
        for k, v in zip(node.keys, node.values):
            kv = static_value(k, env) if k is not None else UNRESOLVED
            vv = static_value(v, env)
            if not isinstance(kv, str) or not isinstance(vv, str):
                return UNRESOLVED
            out[kv] = vv
        return out
    return UNRESOLVED


def describe(node):
    try:
        text = ast.unparse(node)
    except Exception:
        text = type(node).__name__
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:57] + "..."


class Extractor:
    def __init__(self, tree):
        self.tree = tree
        self.env = Env()
        self.imports = {}            # local name -> dotted path
        self.cpp_ext_imports = []    # import statements to rewrite
        self.calls = []              # (call node, parent statement or None, Env snapshot)
        self.modules = []
        self.functions = {}          # function name -> module name

    # ---- reading the file ----

    def resolve_path(self, node):
        if isinstance(node, ast.Name):
            return self.imports.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.resolve_path(node.value)
            return base + "." + node.attr if base else None
        return None

    def note_import(self, node):
        touches = False
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    self.imports[a.asname] = a.name
                else:
                    root = a.name.split(".")[0]
                    self.imports[root] = root
                touches = touches or a.name == CPP_EXTENSION or \
                    a.name.startswith(CPP_EXTENSION + ".")
        elif isinstance(node, ast.ImportFrom) and not node.level:
            mod = node.module or ""
            for a in node.names:
                if a.name == "*" and mod == CPP_EXTENSION:
                    raise ExtractError(node, "`from %s import *`: import load_inline by name"
                                       % mod)
                self.imports[a.asname or a.name] = mod + "." + a.name
                full = mod + "." + a.name
                touches = touches or mod == CPP_EXTENSION or full == CPP_EXTENSION
        if touches:
            self.cpp_ext_imports.append(node)

    def is_load_inline(self, call):
        path = self.resolve_path(call.func)
        if path == LOAD_INLINE:
            return True
        if path and path.startswith(CPP_EXTENSION + "."):
            what = path[len(CPP_EXTENSION) + 1:]
            if what in ("load", "CUDAExtension", "CppExtension", "BuildExtension"):
                raise ExtractError(call, "`%s(...)` builds from files or a setup script: a "
                                   "KernelBench file must build its kernels with load_inline"
                                   % describe(call.func))
        return False

    def scan(self):
        for stmt in self.tree.body:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                self.note_import(stmt)
                continue
            for node in ast.walk(stmt):
                if isinstance(node, (ast.Import, ast.ImportFrom)) and node is not stmt:
                    self.note_import(node)
            calls = [n for n in ast.walk(stmt) if isinstance(n, ast.Call) and
                     self.is_load_inline(n)]
            snapshot = Env()
            snapshot.values = dict(self.env.values)
            for c in calls:
                self.calls.append((c, stmt, snapshot))
            self.bind_statics(stmt)
        # Calls inside functions and classes see the names as the module ends.
        for c, stmt, snap in self.calls:
            if not isinstance(stmt, (ast.Assign, ast.Expr, ast.AnnAssign)):
                snap.values = dict(self.env.values)

    def bind_statics(self, stmt):
        if isinstance(stmt, ast.Assign):
            value = static_value(stmt.value, self.env)
            for t in stmt.targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        single = isinstance(t, ast.Name)
                        self.env.bind(n.id, value if single else UNRESOLVED)
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            value = static_value(stmt.value, self.env) if stmt.value is not None else UNRESOLVED
            self.env.bind(stmt.target.id, value)
        elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
            old = self.env.values.get(stmt.target.id, UNRESOLVED)
            new = static_value(stmt.value, self.env)
            ok = isinstance(stmt.op, ast.Add) and (
                isinstance(old, str) and isinstance(new, str) or
                isinstance(old, list) and isinstance(new, list))
            value = (cat(old, new) if isinstance(old, str) else old + new) if ok else UNRESOLVED
            self.env.bind(stmt.target.id, value)
        else:
            # Names bound by anything else (loops, with, defs, classes) are not static.
            for n in ast.walk(stmt):
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                    self.env.bind(n.id, UNRESOLVED)
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.env.bind(stmt.name, UNRESOLVED)

    # ---- one load_inline call ----

    def arg(self, call, env, key, node, kinds, what):
        value = static_value(node, env)
        if value is UNRESOLVED:
            hint = ""
            if isinstance(node, ast.Name):
                hint = (" (`%s` is not bound once at module level to a string or a list of "
                        "strings)" % node.id)
            raise ExtractError(node, "load_inline %s=%s cannot be read without running the "
                               "file%s: use string literals or module-level string constants"
                               % (key, describe(node), hint))
        if not isinstance(value, kinds):
            raise ExtractError(node, "load_inline %s= must be %s, got %s"
                               % (key, what, describe(node)))
        return value

    def sources(self, call, env, key, node):
        value = self.arg(call, env, key, node, (str, list, type(None)),
                         "a string or a list of strings")
        if value is None:
            return []
        if isinstance(value, str):
            return [value]
        for item in value:
            if not isinstance(item, str):
                raise ExtractError(node, "load_inline %s= must hold strings only" % key)
        return value

    def module(self, call, env):
        if any(k.arg is None for k in call.keywords):
            raise ExtractError(call, "load_inline(**...): pass the arguments by name so they "
                               "can be read")
        if any(isinstance(a, ast.Starred) for a in call.args):
            raise ExtractError(call, "load_inline(*...): pass the arguments by name so they can "
                               "be read")
        if len(call.args) > len(POSITIONAL):
            raise ExtractError(call.args[len(POSITIONAL)], "load_inline: pass arguments after "
                               "cuda_sources by name (functions=[...])")
        args = {}
        for i, a in enumerate(call.args):
            args[POSITIONAL[i]] = a
        for k in call.keywords:
            if k.arg not in KNOWN:
                raise ExtractError(k.value, "load_inline: unknown argument %s=" % k.arg)
            if k.arg in args:
                raise ExtractError(k.value, "load_inline: %s given twice" % k.arg)
            args[k.arg] = k.value
        if "name" not in args:
            raise ExtractError(call, "load_inline without name=")
        if "cpp_sources" not in args:
            raise ExtractError(call, "load_inline without cpp_sources=")
        name = self.arg(call, env, "name", args["name"], str, "a string")
        if not IDENT.match(name):
            raise ExtractError(args["name"], "load_inline name=%r: use a name of letters, digits "
                               "and _ (at most 64), not starting with a digit" % name)
        for key in ("sycl_sources", "extra_sycl_cflags"):
            if key in args and static_value(args[key], env) is not None:
                raise ExtractError(args[key], "load_inline %s=: SYCL is not supported" % key)
        flags = {}
        for key in ("is_python_module", "with_pytorch_error_handling", "no_implicit_headers"):
            if key in args:
                flags[key] = self.arg(call, env, key, args[key], bool, "True or False")
        if flags.get("is_python_module") is False:
            raise ExtractError(args["is_python_module"], "load_inline is_python_module=False "
                               "loads the kernels as torch ops: ModelNew must call them through "
                               "the module load_inline returns")
        if "functions" not in args or static_value(args["functions"], env) is None:
            raise ExtractError(args.get("functions", call), "load_inline without functions=: "
                               "list the functions to expose (functions=[\"name\", ...]); a "
                               "PYBIND11_MODULE of your own in cpp_sources is not supported")
        functions = self.arg(call, env, "functions", args["functions"], (str, list, dict),
                             "a string, a list of strings or a dict of name to docstring")
        if isinstance(functions, str):
            functions = {functions: functions}
        elif isinstance(functions, list):
            for f in functions:
                if not isinstance(f, str):
                    raise ExtractError(args["functions"], "load_inline functions= must hold "
                                       "strings only")
            functions = {f: f for f in functions}
        if not functions:
            raise ExtractError(args["functions"], "load_inline functions= is empty")
        for f in functions:
            if not IDENT.match(f):
                raise ExtractError(args["functions"], "load_inline functions: %r is not a C++ "
                                   "function name" % f)
            if f == "_registered":
                raise ExtractError(args["functions"], "load_inline functions: the name "
                                   "_registered is reserved by the evaluator's module")
            if f in self.functions:
                raise ExtractError(args["functions"], "function %r is exposed by two load_inline "
                                   "modules (%s and %s): the evaluator builds all of them into "
                                   "one module, so names must be unique"
                                   % (f, self.functions[f], name))
        for m in self.modules:
            if m["name"] == name:
                raise ExtractError(args["name"], "two load_inline calls are named %r (lines %d "
                                   "and %d): give each its own name"
                                   % (name, m["line"], call.lineno))
        for f in functions:
            self.functions[f] = name
        ignored = {}
        for key in sorted(FLAGS | BUILD_ONLY):
            if key in args:
                value = static_value(args[key], env)
                if value is UNRESOLVED:
                    value = describe(args[key])
                if value not in (None, False, [], "", [""]):
                    ignored[key] = value
        return {
            "name": name,
            "line": call.lineno,
            "functions": list(functions),
            "docs": functions,
            "cpp": self.sources(call, env, "cpp_sources", args["cpp_sources"]),
            "cuda": self.sources(call, env, "cuda_sources", args["cuda_sources"])
            if "cuda_sources" in args else [],
            "implicit_headers": not flags.get("no_implicit_headers", False),
            "ignored": ignored,
        }

    def run(self):
        self.scan()
        if not any(isinstance(s, ast.ClassDef) and s.name == "ModelNew" for s in self.tree.body):
            raise ExtractError(self.tree.body[0] if self.tree.body else self.tree,
                               "no module-level `class ModelNew(nn.Module)`: a KernelBench "
                               "candidate defines ModelNew, whose forward calls the kernels "
                               "load_inline builds")
        if not self.calls:
            raise ExtractError(self.tree.body[0] if self.tree.body else self.tree,
                               "no call of torch.utils.cpp_extension.load_inline: a KernelBench "
                               "candidate builds its kernels with load_inline(name=..., "
                               "cpp_sources=..., cuda_sources=..., functions=[...])")
        if len(self.calls) > MAX_MODULES:
            raise ExtractError(self.calls[MAX_MODULES][0], "more than %d load_inline calls"
                               % MAX_MODULES)
        for call, _, env in self.calls:
            self.modules.append(self.module(call, env))
        if len(self.functions) > MAX_FUNCTIONS:
            raise ExtractError(self.calls[-1][0], "more than %d functions exposed"
                               % MAX_FUNCTIONS)
        return self.modules


# ---- writing the snapshot ----

# The generated files name the module, never the candidate's file: the same sources submitted
# under another file name (a new temporary file per candidate) hit the compile cache.
def cuda_file(m):
    head = "// Generated by cuda-agent: the cuda_sources of load_inline(name=\"%s\").\n" \
        % m["name"]
    prelude = CUDA_PRELUDE if m["implicit_headers"] else ""
    return cat(head, prelude, join_lines(m["cuda"]), "\n")


def binding_file(m):
    out = ["// Generated by cuda-agent: the cpp_sources of load_inline(name=\"%s\")," % m["name"],
           "// then the functions load_inline's PYBIND11_MODULE would define, registered with",
           "// the evaluator's module cuda_extension.",
           "#include \"binding_registry.h\""]
    if m["implicit_headers"]:
        out.append("#include <torch/extension.h>")
    out.extend(m["cpp"])
    out.append("")
    out.append("namespace {")
    for i, f in enumerate(m["functions"]):
        doc = "".join(c for c in m["docs"][f] if " " <= c <= "~" and c not in "\\\"?")
        out.append("void kb_bind_%d_%s(pybind11::module_ &m) { m.def(\"%s\", %s, \"%s\"); }"
                   % (i, f, f, f, doc[:200]))
    out.append("} // namespace")
    for i, f in enumerate(m["functions"]):
        out.append("REGISTER_BINDING(\"%s\", kb_bind_%d_%s);" % (f, i, f))
    return cat(join_lines(out), "\n")


def line_runs(text):
    """[[LINE, FILE_LINE, COUNT], ...]: the runs of text's lines that are FILE.py's lines in
    order."""
    runs = []
    for line, origin in enumerate(origins(text), 1):
        if not origin:
            continue
        if runs and runs[-1][0] + runs[-1][2] == line and runs[-1][1] + runs[-1][2] == origin:
            runs[-1][2] += 1
        else:
            runs.append([line, origin, 1])
    return runs


def self_aliases(tree, ex, aliases):
    """Edits that read `self.A` as the module it holds.

    KernelBench files often keep the module on the model (`self.ext = ext` or
    `self.ext = load_inline(...)` in __init__) and call `self.ext.f(x)` in forward. The static
    policy follows calls only through names bound to cuda_extension, so each `self.A` read that
    can only be the module is written as the module's name; `self.A = ...` itself stays.
    """
    calls = set(id(c) for c, _, _ in ex.calls)
    holds = {}
    for cls in tree.body:
        if not isinstance(cls, ast.ClassDef):
            continue
        for n in ast.walk(cls):
            if not isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                continue
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            for t in targets:
                for a in ast.walk(t):
                    if not (isinstance(a, ast.Attribute) and isinstance(a.value, ast.Name) and
                            a.value.id == "self" and isinstance(a.ctx, ast.Store)):
                        continue
                    value = None
                    if isinstance(n, ast.Assign) and t is a:
                        if id(n.value) in calls:
                            value = "cuda_extension"
                        elif isinstance(n.value, ast.Name) and n.value.id in aliases:
                            value = n.value.id
                    # Assigned anything else, or two different modules: left as written.
                    holds[a.attr] = value if holds.get(a.attr, value) == value else None
    edits = []
    for cls in tree.body:
        if not isinstance(cls, ast.ClassDef):
            continue
        for a in ast.walk(cls):
            if isinstance(a, ast.Attribute) and isinstance(a.ctx, ast.Load) and \
                    isinstance(a.value, ast.Name) and a.value.id == "self" and holds.get(a.attr):
                edits.append((a, holds[a.attr]))
    return edits


def rewrite(text, tree, ex):
    """FILE.py with the load_inline calls and cpp_extension imports replaced, same line count."""
    lines = text.encode("utf-8").split(b"\n")
    edits = []    # (line, col, end_line, end_col, replacement) with 1-based lines, byte columns
    first_import = True
    top = set(id(s) for s in tree.body)
    for node in ex.cpp_ext_imports:
        if isinstance(node, ast.ImportFrom):
            keep = [a for a in node.names
                    if node.module != CPP_EXTENSION and
                    (node.module or "") + "." + a.name != CPP_EXTENSION]
        else:
            keep = [a for a in node.names if not (a.name == CPP_EXTENSION or
                                                  a.name.startswith(CPP_EXTENSION + "."))]
        parts = []
        if id(node) not in top:
            # An import inside a function: the module-level `import cuda_extension` serves it.
            edits.append((node, "; ".join([ast.unparse(type(node)(**{
                **{f: getattr(node, f) for f in node._fields}, "names": keep}))] if keep
                else ["pass"])))
            continue
        if keep:
            clone = type(node)(**{**{f: getattr(node, f) for f in node._fields}, "names": keep})
            parts.append(ast.unparse(clone))
        if first_import:
            parts.append("import cuda_extension")
            first_import = False
        edits.append((node, "; ".join(parts) if parts else "import cuda_extension"))
    aliases = {"cuda_extension"}
    for call, stmt, _ in ex.calls:
        target = None
        if isinstance(stmt, ast.Assign) and stmt.value is call and len(stmt.targets) == 1 and \
                isinstance(stmt.targets[0], ast.Name):
            target = stmt.targets[0].id
        if target is not None:
            aliases.add(target)
            edits.append((stmt, "import cuda_extension as %s" % target))
        else:
            edits.append((call, "cuda_extension"))
    edits.extend(self_aliases(tree, ex, aliases))
    if first_import:
        # load_inline reached as torch.utils.cpp_extension.load_inline through `import torch`.
        body = ex.tree.body
        last = max((s for s in body if isinstance(s, (ast.Import, ast.ImportFrom))),
                   key=lambda s: s.end_lineno, default=None)
        if last is None:
            raise ExtractError(body[0], "no import statement to put `import cuda_extension` "
                               "after")
        edits.append((last, ast.get_source_segment(text, last) + "; import cuda_extension"))
    spans = []
    for node, new in edits:
        spans.append((node.lineno, node.col_offset, node.end_lineno, node.end_col_offset, new))
    spans.sort(reverse=True)
    for i in range(1, len(spans)):
        if spans[i][2:4] > spans[i - 1][0:2]:
            raise ExtractError(None, "overlapping load_inline calls at line %d" % spans[i][0])
    for line, col, end_line, end_col, new in spans:
        head = lines[line - 1][:col]
        tail = lines[end_line - 1][end_col:]
        lines[line - 1] = head + new.encode("utf-8") + tail
        for k in range(line, end_line):
            lines[k] = b""
    return b"\n".join(lines).decode("utf-8")


def fail(line, message):
    sys.stdout.write(json.dumps({"error": {"line": line, "message": message}},
                                ensure_ascii=True) + "\n")
    sys.stdout.flush()
    sys.exit(EXIT_INPUT)


def write(out_dir, rel, data):
    path = os.path.join(out_dir, rel)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(data)


def extract(path, out_dir):
    """Returns the JSON summary; raises ExtractError for files that cannot be extracted."""
    source_name = os.path.basename(path)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise ExtractError(None, "cannot read %s: %s" % (path, e.strerror or e))
    if len(data) > MAX_BYTES:
        raise ExtractError(None, "%s is over %d bytes" % (source_name, MAX_BYTES))
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ExtractError(None, "%s is not valid UTF-8 (byte %d)" % (source_name, e.start))
    text = text.replace("\r\n", "\n")
    try:
        tree = ast.parse(text, filename=source_name)
    except SyntaxError as e:
        err = ExtractError(None, "invalid Python: %s (line %d)" % (e.msg, e.lineno or 1))
        err.line = e.lineno or 1
        raise err
    except (ValueError, RecursionError, MemoryError) as e:
        raise ExtractError(None, "%s cannot be parsed: %s" % (source_name, e))
    ex = Extractor(tree)
    modules = ex.run()
    files = [("model_new.py", rewrite(text, tree, ex))]
    summary = []
    for m in modules:
        if m["cuda"]:
            files.append(("kernels/kb_%s.cu" % m["name"], cuda_file(m)))
        files.append(("kernels/kb_%s_binding.cpp" % m["name"], binding_file(m)))
        summary.append({"name": m["name"], "line": m["line"], "functions": m["functions"],
                        "cuda": bool(m["cuda"]), "ignored": m["ignored"]})
    # All or nothing: a refused file leaves nothing behind.
    for rel, data in files:
        if len(data.encode("utf-8")) > MAX_OUTPUT_BYTES:
            raise ExtractError(None, "%s would be over %d bytes: keep the load_inline sources "
                               "and the file smaller" % (rel, MAX_OUTPUT_BYTES))
    os.makedirs(os.path.join(out_dir, "kernels"), exist_ok=True)
    for rel, data in files:
        write(out_dir, rel, data)
    return {"modules": summary, "functions": [f for m in modules for f in m["functions"]],
            "lines": {rel: line_runs(data) for rel, data in files if rel != "model_new.py"}}


def main(argv):
    if len(argv) != 3:
        print("usage: python3 - FILE.py OUT_DIR", file=sys.stderr)
        sys.exit(64)
    sys.setrecursionlimit(20000)
    try:
        result = extract(argv[1], argv[2])
    except ExtractError as e:
        fail(e.line, e.message)
    except RecursionError:
        fail(0, "the file is nested too deeply to be read")
    sys.stdout.write(json.dumps(result, ensure_ascii=True) + "\n")


if __name__ == "__main__":
    main(sys.argv)
