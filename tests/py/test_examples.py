"""Checks of the example tasks in examples/tasks/ (KernelBench format).

The structural checks read each file's syntax tree and need nothing but Python. The runtime
checks run each Model on the CPU at the task's own sizes and skip, with the reason, where
PyTorch is not installed.
"""

import ast
import importlib.util
import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TASKS = sorted((ROOT / "examples" / "tasks").glob("*.py"))
IDS = [p.stem for p in TASKS]


def test_enough_tasks():
    assert len(TASKS) >= 6, f"expected at least 6 tasks in {ROOT / 'examples/tasks'}"


def _imports(tree):
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names.update((a.name, a.asname) for a in node.names)
    return names


@pytest.mark.parametrize("path", TASKS, ids=IDS)
def test_task_structure(path):
    assert re.fullmatch(r"[a-z][a-z0-9_]*", path.stem), f"{path.name}: name not snake_case"
    source = path.read_text()
    tree = ast.parse(source, filename=str(path))

    imports = _imports(tree)
    assert ("torch", None) in imports, f"{path.name}: missing `import torch`"
    assert ("torch.nn", "nn") in imports, f"{path.name}: missing `import torch.nn as nn`"

    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    assert "Model" in classes, f"{path.name}: no class Model"
    methods = {n.name for n in classes["Model"].body if isinstance(n, ast.FunctionDef)}
    assert {"__init__", "forward"} <= methods, f"{path.name}: Model needs __init__ and forward"

    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    for name in ("get_inputs", "get_init_inputs"):
        assert name in funcs, f"{path.name}: no module-level {name}()"

    constants = [n for n in tree.body if isinstance(n, ast.Assign)
                 and isinstance(n.value, ast.Constant)]
    assert constants, f"{path.name}: sizes should be module-level constants"

    # The evaluator moves inputs to the device; tasks must not pick one, nor be stochastic.
    inputs_src = ast.get_source_segment(source, funcs["get_inputs"])
    assert not re.search(r"\.cuda\(|device\s*=|\.to\(", inputs_src), \
        f"{path.name}: get_inputs() must create CPU tensors"
    forward = next(n for n in classes["Model"].body
                   if isinstance(n, ast.FunctionDef) and n.name == "forward")
    assert not re.search(r"[Dd]ropout|bernoulli|multinomial|rand\w*\(",
                         ast.get_source_segment(source, forward)), \
        f"{path.name}: forward must be deterministic"

@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch", reason="PyTorch is not installed")


def _load(path):
    name = f"example_task_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", TASKS, ids=IDS)
def test_task_runs_on_cpu(torch, path):
    task = _load(path)
    for name in ("Model", "get_inputs", "get_init_inputs"):
        assert hasattr(task, name), f"{path.name}: missing {name}"

    torch.manual_seed(0)
    init = task.get_init_inputs()
    assert isinstance(init, list), f"{path.name}: get_init_inputs() must return a list"
    model = task.Model(*init).eval()
    for pname, p in model.state_dict().items():
        assert p.dtype == torch.float32, f"{path.name}: {pname} is {p.dtype}, tasks are fp32"

    inputs = task.get_inputs()
    assert isinstance(inputs, list) and inputs, f"{path.name}: get_inputs() must return a list"
    for i, t in enumerate(inputs):
        if isinstance(t, torch.Tensor):
            assert t.device.type == "cpu", f"{path.name}: input {i} is on {t.device}"
            assert t.dtype == torch.float32, f"{path.name}: input {i} is {t.dtype}"

    with torch.no_grad():
        first = model(*inputs)
        second = model(*inputs)
        other = model(*task.get_inputs())

    assert isinstance(first, torch.Tensor), f"{path.name}: forward must return a tensor"
    assert first.numel() > 1, f"{path.name}: output has {first.numel()} elements"
    assert torch.isfinite(first).all(), f"{path.name}: output has NaN or Inf"
    assert first.min() != first.max(), f"{path.name}: output is constant"
    assert torch.equal(first, second), f"{path.name}: forward is not deterministic"
    assert not torch.equal(first, other), f"{path.name}: output does not depend on the input"
