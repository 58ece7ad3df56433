"""policy/check.py - the static policy for an agent's model_new.py (DESIGN §4 step 2): its entry.

harness/policy_model_new.py builds the package `policy` from the sources the evaluator embeds
and calls main(sys.argv) here, for
    python3 -I -S -B - [--rules cuda-agent|kernelbench] PATH/model_new.py
Standard library only; torch is not needed and never imported.

main() prints one JSON object on stdout (policy/answer.py) and exits 0 once the file was checked
(violations or not), or 2 when it cannot be read or does not parse (then with a "syntax"
violation when there is a line to point at). Any other exit is a bug in the policy, and the
evaluator treats it as a failed check, never as a pass.

The file is parsed with ast and checked in two passes, each a mixin of Checker:
  1. policy/structure.py, a context-free walk over every node: imports, dangerous built-ins,
     dunder and private attributes, try/except, with, decorators, global/nonlocal, generators,
     module-level code, classes, and torch names outside the known vocabulary (policy/vocab.py);
  2. policy/values.py, an analysis of ModelNew's methods that follows values, so that what is
     done to tensors (torch computation) is told apart from what is done to shapes and Python
     numbers; what cannot be judged statically (attribute access by computed name, exec, ...)
     is refused.
Rule ids and what each one is for: docs/internals/policy.md.

Two rule sets. `cuda-agent` (the default, SKILL.md's rules) runs both passes, and every finding
decides. `kernelbench` is what KernelBench accepts: torch computation, nn modules, helper
classes, decorators and fallbacks in ModelNew are allowed, so the value analysis (pass 2) is not
run and most context-free findings are notes ("advisory": true); what still decides is what
reaches beyond the model: importing modules other than torch and a few pure standard-library
ones, importing the reference, code or namespaces by computed names (exec, eval, compile,
globals, __import__...), files and the terminal, and the dunder attributes that reach Python's
internals (__globals__, __subclasses__, __builtins__...).
"""
import ast
import sys

from policy.answer import Violations, emit
from policy.structure import StructureRules
from policy.values import ValueRules

EXIT_INPUT = 2
MAX_BYTES = 4 * 1024 * 1024


class Checker(StructureRules, ValueRules):
    """One check of one file: the facts both passes share, and the findings."""

    def __init__(self, tree, rules):
        self.tree = tree
        self.rules = rules
        self.v = Violations(rules)
        self.imports = {}        # alias -> dotted path
        self.functions = {}      # module-level def name -> node
        self.constants = set()   # module-level constant names
        self.module_names = set()
        self.classes = {}
        self.model = None
        self.methods = {}        # ModelNew method name -> node
        self.self_kinds = {}     # ModelNew attribute -> kind, from __init__
        self.param_names = set()   # parameters and buffers declared by helper classes
        self.memo = {}
        self.bound_cache = {}
        self.active = set()
        self.cuda_calls = 0

    def add(self, node, rule, message, strong=False):
        self.v.add(node, rule, message, strong)

    def resolve(self, node):
        """Dotted path of a name or attribute chain rooted at an import, else None."""
        if isinstance(node, ast.Name):
            return self.imports.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            return base + "." + node.attr if base else None
        return None

    def run(self):
        self.user_attrs = set()
        self.check_imports()
        self.check_module_level()
        self.mark_super_init()
        self.check_classes()
        for node in self.tree.body:
            self.walk(node, [set()])
        if self.model is not None and self.rules != "kernelbench":
            self.analyze_model()
        return self.v.items


def main(argv):
    rules = "cuda-agent"
    args = argv[1:]
    if len(args) == 3 and args[0] == "--rules" and args[1] in ("cuda-agent", "kernelbench"):
        rules = args[1]
        args = args[2:]
    if len(args) != 1:
        print("usage: python3 - [--rules cuda-agent|kernelbench] MODEL_NEW.py", file=sys.stderr)
        sys.exit(EXIT_INPUT)
    path = args[0]
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as e:
        print("cannot read %s: %s" % (path, e.strerror or e), file=sys.stderr)
        sys.exit(EXIT_INPUT)
    if len(data) > MAX_BYTES:
        emit([{"line": 1, "rule": "file-size",
               "message": "model_new.py is over %d bytes: keep it to ModelNew and its helpers"
                          % MAX_BYTES}], 0)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        emit([{"line": line, "rule": "syntax",
               "message": "model_new.py is not valid UTF-8 (byte %d)" % e.start}], EXIT_INPUT)
    sys.setrecursionlimit(20000)
    try:
        tree = ast.parse(text, filename="model_new.py")
    except SyntaxError as e:
        emit([{"line": e.lineno or 1, "rule": "syntax",
               "message": "invalid Python: %s (line %d%s)" %
                          (e.msg, e.lineno or 1, ", column %d" % e.offset if e.offset else "")}],
             EXIT_INPUT)
    except (ValueError, RecursionError, MemoryError) as e:
        emit([{"line": 1, "rule": "syntax",
               "message": "model_new.py cannot be parsed: %s" % (str(e) or type(e).__name__)}],
             EXIT_INPUT)
    try:
        items = Checker(tree, rules).run()
    except RecursionError:
        emit([{"line": 1, "rule": "syntax",
               "message": "model_new.py is nested too deeply for the policy check: simplify "
                          "its expressions"}], EXIT_INPUT)
    emit(items, 0)

