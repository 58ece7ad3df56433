"""Tests of template/binding.cpp and template/binding_registry.h.

Each case builds `cuda_extension` from binding.cpp and a few tiny bindings, then imports it in
a fresh process (the module name is fixed, so one process can import only one build). All cases
share one build directory, so binding.cpp is compiled once. Needs PyTorch, ninja and the CUDA
toolkit's headers, and a GPU or TORCH_CUDA_ARCH_LIST (for the architecture); skipped, with the
reason, where one is missing.
"""

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
from torch.utils import cpp_extension  # noqa: E402  (needs the importorskip above)

if cpp_extension.CUDA_HOME is None:
    pytest.skip("CUDA toolkit not found: torch.utils.cpp_extension.CUDA_HOME is unset",
                allow_module_level=True)
if not cpp_extension.is_ninja_available():
    pytest.skip("ninja not found: torch.utils.cpp_extension.load needs it",
                allow_module_level=True)
if not torch.cuda.is_available() and not os.environ.get("TORCH_CUDA_ARCH_LIST"):
    pytest.skip("no GPU to take the architecture from and TORCH_CUDA_ARCH_LIST unset: "
                "torch.utils.cpp_extension.load cannot choose one (set it, e.g. to 9.0, to run "
                "these builds on a machine without a GPU; minutes each on two cores)",
                allow_module_level=True)

TEMPLATE = pathlib.Path(__file__).resolve().parents[2] / "template"

BINDINGS = {
    "alpha": """
        static int64_t alpha(int64_t x) { return x + 1; }
        static void bind(pybind11::module_ &m) { m.def("alpha", &alpha); }
        REGISTER_BINDING("alpha", bind);
    """,
    "beta": """
        static void bind(pybind11::module_ &m)
        {
            m.def("beta", []() { return 2; });
            m.def("beta_helper", []() { return 3; });
        }
        REGISTER_BINDING("beta", bind);
    """,
    # Registers a name that alpha already registered.
    "alpha_again": """
        static void bind(pybind11::module_ &m) { m.def("alpha", []() { return 0; }); }
        REGISTER_BINDING("alpha", bind);
    """,
    # Registers one name but defines another.
    "misnamed": """
        static void bind(pybind11::module_ &m) { m.def("delta", []() { return 4; }); }
        REGISTER_BINDING("gamma", bind);
    """,
    # Defines, under its own name, also a function that beta defines (sorted after beta).
    "zeta": """
        static void bind(pybind11::module_ &m)
        {
            m.def("zeta", []() { return 5; });
            m.def("beta_helper", []() { return 6; });
        }
        REGISTER_BINDING("zeta", bind);
    """,
}

CHILD = """
import sys
from torch.utils.cpp_extension import load
sources, template, build_dir = sys.argv[1].split(","), sys.argv[2], sys.argv[3]
try:
    ext = load(name="cuda_extension", sources=sources, extra_include_paths=[template],
               build_directory=build_dir, with_cuda=True, verbose=False)
except ImportError as e:
    print("IMPORT-ERROR:", e)
    sys.exit(0)
print("REGISTERED:", ",".join(ext._registered()))
print("ALPHA:", ext.alpha(41) if hasattr(ext, "alpha") else None)
print("HELPER:", ext.beta_helper() if hasattr(ext, "beta_helper") else None)
print("MODULE:", ext.alpha.__module__ if hasattr(ext, "alpha") else None)
"""


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    src = tmp_path_factory.mktemp("bindings")
    for name, body in BINDINGS.items():
        (src / f"{name}_binding.cpp").write_text(
            '#include "binding_registry.h"\n' + textwrap.dedent(body))
    build_dir = tmp_path_factory.mktemp("build")

    def run(*names):
        sources = [str(TEMPLATE / "binding.cpp")] + [str(src / f"{n}_binding.cpp") for n in names]
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, ",".join(sources), str(TEMPLATE), str(build_dir)],
            capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, f"build failed:\n{proc.stdout}\n{proc.stderr[-6000:]}"
        return proc.stdout

    return run


def test_bindings_are_added_sorted(build):
    out = build("beta", "alpha")
    assert "REGISTERED: alpha,beta\n" in out
    assert "ALPHA: 42\n" in out
    assert "HELPER: 3\n" in out  # a binding may define more than its own name
    assert "MODULE: cuda_extension\n" in out


def test_duplicate_name_is_refused(build):
    out = build("alpha", "alpha_again")
    assert "IMPORT-ERROR:" in out
    assert 'REGISTER_BINDING("alpha", ...) appears more than once' in out


def test_binding_must_define_its_name(build):
    out = build("misnamed")
    assert "IMPORT-ERROR:" in out
    assert 'binding "gamma" was registered but defined no function' in out


def test_redefinition_is_refused(build):
    out = build("beta", "zeta")
    assert "IMPORT-ERROR:" in out
    assert 'binding "zeta" defines "beta_helper", which binding "beta" already defined' in out
