"""policy_model_new.py - runs the static policy for model_new.py from sources held in memory.

The policy is the package harness/policy/ (entry: policy/check.py). policy_check_model_new()
(src/eval/policy_py.c) feeds python3 this file followed by one line,
    run({b"harness/policy/check.py": b"...", ...})
whose dict holds every file of harness/policy/ as the binary embeds it, and runs
    python3 -I -S -B - [--rules cuda-agent|kernelbench] PATH/model_new.py
run() makes those sources the package `policy` through an import finder placed first on
sys.meta_path, and calls policy.check.main.

Why from memory and not from a directory the files are written to: the policy's code then comes
only from the binary, as when it was one script on stdin. Nothing on disk can stand in for a
module or be swapped between a write and an import, no directory has to be made private,
cleaned after a crash or shared between checks that run at once, and -I -S -B keep their whole
meaning (no path entry beyond the standard library's, no bytecode written). Each file is
compiled once per run, as the single script was, so the check takes the same time.

A source that does not compile or import is the evaluator's fault, not the candidate's: its
traceback goes to stderr, ending with one line that names the file and line, and the exit status
is EXIT_BROKEN, which the evaluator turns into an error (only 0 and 2 carry a verdict).
"""
import importlib.util
import sys

PACKAGE = "policy"
PREFIX = "harness/"
EXIT_BROKEN = 3


def module_name(path):
    """harness/policy/check.py -> policy.check; harness/policy/__init__.py -> policy."""
    if not path.startswith(PREFIX + PACKAGE + "/") or not path.endswith(".py"):
        return None
    name = path[len(PREFIX):-len(".py")].replace("/", ".")
    return name[:-len(".__init__")] if name.endswith(".__init__") else name


class EmbeddedModules:
    """A finder and loader for the modules whose sources run() was given, and only those."""

    def __init__(self, sources):
        self.sources = sources      # module name -> (path, bytes)

    def find_spec(self, name, path=None, target=None):
        if name != PACKAGE and name not in self.sources:
            return None
        origin = self.sources[name][0] if name in self.sources else PREFIX + PACKAGE
        return importlib.util.spec_from_loader(name, self, origin=origin,
                                               is_package=name == PACKAGE)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        if module.__name__ not in self.sources:
            return          # the package itself, when it has no __init__.py
        path, text = self.sources[module.__name__]
        exec(compile(text, path, "exec", dont_inherit=True), module.__dict__)


def broken(paths, exc):
    """Report a policy source that does not load: its traceback, then one line naming the
    deepest line of the policy's own files it reached (the line the evaluator quotes)."""
    import traceback
    traceback.print_exception(type(exc), exc, exc.__traceback__)
    where = "while loading the policy"
    if isinstance(exc, SyntaxError) and exc.filename in paths:
        where = "%s line %s" % (exc.filename, exc.lineno)
    else:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename in paths]
        if frames:
            where = "%s line %s" % (frames[-1].filename, frames[-1].lineno)
    what = traceback.format_exception_only(type(exc), exc)[-1].strip()
    print("%s: %s" % (where, what), file=sys.stderr)
    sys.exit(EXIT_BROKEN)


def run(files):
    """files: {path: source bytes} for every file of harness/policy/."""
    sources = {}
    for path, text in files.items():
        path = path.decode()
        name = module_name(path)
        if name is None:
            print("%s: not a file of %s%s/, the policy's package" % (path, PREFIX, PACKAGE),
                  file=sys.stderr)
            sys.exit(EXIT_BROKEN)
        sources[name] = (path, text)
    sys.meta_path.insert(0, EmbeddedModules(sources))
    try:
        from policy import check
    except Exception as e:
        broken({path for path, _ in sources.values()}, e)
    check.main(sys.argv)
