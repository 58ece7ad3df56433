"""The program the evaluator runs to check model_new.py, built as src/eval/policy_py.c builds it:
harness/policy_model_new.py, then one line run({path: source, ...}) with every file of
harness/policy/. The tests/py files run the policy through it, the way the evaluator does:
    python3 -I -S -B - [--rules R] PATH    with the program on stdin.
"""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
LOADER = ROOT / "harness" / "policy_model_new.py"
PACKAGE = ROOT / "harness" / "policy"


def sources():
    """{path: bytes} for every file of harness/policy/, as the binary embeds them."""
    return {str(p.relative_to(ROOT)).encode(): p.read_bytes()
            for p in sorted(PACKAGE.glob("*.py"))}


def program(files=None):
    """The program's bytes; files replaces the sources (to run an altered or broken policy)."""
    files = sources() if files is None else files
    return LOADER.read_bytes() + b"\nrun(%s)\n" % repr(files).encode("ascii")


def run(args, files=None, timeout=60):
    return subprocess.run([sys.executable, "-I", "-S", "-B", "-", *map(str, args)],
                          input=program(files), capture_output=True, timeout=timeout)
