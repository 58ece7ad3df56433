"""policy/answer.py - what the policy finds, and the one JSON answer it prints.

Violations collects findings (once per place, rule and message) and marks them advisory under
the kernelbench rules unless they are strong; emit() prints the answer the evaluator reads
(src/eval/policy_py.c) and exits:
    {"violations": [{"line": N, "rule": "...", "message": "...", "advisory": bool}, ...],
     "truncated": K}
"""
import ast
import json
import sys

MAX_VIOLATIONS = 200


class Violations:
    def __init__(self, rules):
        self.rules = rules
        self.items = []
        self.seen = set()

    def add(self, node, rule, message, strong=False):
        """strong: the finding decides under the kernelbench rules too."""
        line = getattr(node, "lineno", 1) or 1
        key = (line, getattr(node, "col_offset", 0), rule, message)
        if key in self.seen:
            return
        self.seen.add(key)
        advisory = self.rules == "kernelbench" and not strong
        self.items.append({"line": line, "rule": rule, "message": message,
                           "advisory": advisory})


def src(node):
    """A short source rendering of node for messages."""
    try:
        text = ast.unparse(node)
    except Exception:  # ast.unparse is missing before Python 3.9
        text = type(node).__name__
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:57] + "..."


def emit(items, code):
    items = sorted(({"advisory": False, **v} for v in items), key=lambda v: v["line"])
    out = {"violations": items[:MAX_VIOLATIONS]}
    if len(items) > MAX_VIOLATIONS:
        out["truncated"] = len(items) - MAX_VIOLATIONS
    sys.stdout.write(json.dumps(out, ensure_ascii=True) + "\n")
    sys.stdout.flush()
    sys.exit(code)
