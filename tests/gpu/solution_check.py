"""Build one reference solution's extension and check its ModelNew against the task's Model.

Run as a script, one solution per process: the extension module is always named
`cuda_extension`, and a process can import only one module of that name.

    python3 tests/gpu/solution_check.py examples/solutions/<task> [--shapes JSON]

--shapes is a JSON list of {module constant: value} overrides; each one is set on the task
module, then Model/ModelNew are rebuilt from get_init_inputs() and compared on get_inputs(),
so kernels are tried on sizes other than the ones in the task (odd widths, tiny and long
rows). Exits 0 when every check passes; otherwise prints what differed and exits 1.
"""

import argparse
import importlib.util
import json
import pathlib
import sys
import tempfile

import torch
from torch.utils.cpp_extension import load

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template"
TASKS = ROOT / "examples" / "tasks"
ATOL = RTOL = 1e-2
SEEDS = range(5)


def import_file(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def build(solution, build_dir):
    kernels = solution / "kernels"
    sources = [str(TEMPLATE / "binding.cpp")]
    sources += sorted(str(p) for p in kernels.glob("*.cpp"))
    sources += sorted(str(p) for p in kernels.glob("*.cu"))
    ext = load(
        name="cuda_extension",
        sources=sources,
        extra_include_paths=[str(TEMPLATE)],
        extra_cuda_cflags=["-O3"],
        build_directory=build_dir,
        verbose=False,
    )
    # load() imports the module without registering it; model_new.py does `import cuda_extension`.
    sys.modules["cuda_extension"] = ext
    return ext


def to_device(inputs):
    return [t.cuda() if isinstance(t, torch.Tensor) else t for t in inputs]


def misaligned_copy(t):
    """A contiguous copy of t whose data starts 4 bytes past a 16-byte boundary."""
    if not isinstance(t, torch.Tensor) or t.numel() == 0:
        return t
    storage = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
    out = storage[1:].view(t.shape)
    out.copy_(t)
    return out


def with_special_values(inputs):
    """Put NaN, +inf and -inf into separate rows of the first input, and a row of only -inf.

    Rows are along the last dim, which is what the solutions reduce over; the outputs must
    then agree with Model's, NaN for NaN and inf for inf.
    """
    x = inputs[0]
    if not isinstance(x, torch.Tensor) or x.dim() < 2 or x.numel() // x.shape[-1] < 4 \
            or x.shape[-1] < 3:
        return None
    rows = x.view(-1, x.shape[-1])
    rows[0, 0] = float("nan")
    rows[1, 1] = float("inf")
    rows[2, 2] = float("-inf")
    rows[3, :] = float("-inf")
    return inputs


def same_values(a, b):
    """torch.equal, except that NaN equals NaN (inputs may hold NaN on purpose)."""
    return a.shape == b.shape and bool(((a == b) | (a.isnan() & b.isnan())).all())


def compare(label, ref_out, new_out, equal_nan=False):
    if not isinstance(new_out, torch.Tensor):
        return f"{label}: ModelNew returned {type(new_out).__name__}, not a tensor"
    if new_out.shape != ref_out.shape or new_out.dtype != ref_out.dtype:
        return (f"{label}: ModelNew returned {tuple(new_out.shape)} {new_out.dtype}, "
                f"Model {tuple(ref_out.shape)} {ref_out.dtype}")
    if new_out.device != ref_out.device:
        return f"{label}: ModelNew returned a tensor on {new_out.device}, Model on {ref_out.device}"
    if torch.allclose(new_out, ref_out, atol=ATOL, rtol=RTOL, equal_nan=equal_nan):
        return None
    diff = (new_out.double() - ref_out.double()).abs()
    bad = ~torch.isclose(new_out, ref_out, atol=ATOL, rtol=RTOL, equal_nan=equal_nan)
    first = bad.nonzero()[0].tolist()
    return (f"{label}: {int(bad.sum())} of {bad.numel()} elements differ; max |diff| "
            f"{diff.nan_to_num(float('inf')).max().item():.3g}; first at {first}: "
            f"ModelNew {new_out[tuple(first)].item()!r} vs Model {ref_out[tuple(first)].item()!r}")


def run_case(task, new_cls, label, seed, configs, misalign=False, special=False):
    """Fresh models and inputs from the task module's current constants; returns errors."""
    errors = []
    torch.manual_seed(seed)
    ref = task.Model(*task.get_init_inputs()).cuda().eval()
    new = new_cls(*task.get_init_inputs()).cuda().eval()
    ref_keys, new_keys = set(ref.state_dict()), set(new.state_dict())
    if ref_keys != new_keys:
        return [f"{label}: state_dict keys differ: Model {sorted(ref_keys)}, "
                f"ModelNew {sorted(new_keys)}"]
    new.load_state_dict(ref.state_dict())

    inputs = to_device(task.get_inputs())
    if misalign:
        inputs = [misaligned_copy(t) for t in inputs]
    if special:
        inputs = with_special_values(inputs)
        if inputs is None:
            return []
    with torch.no_grad():
        ref_out = ref(*[t.clone() if isinstance(t, torch.Tensor) else t for t in inputs])
    for config in configs:
        if config is not None:
            new.kernel_config = config
        given = [t.clone() if isinstance(t, torch.Tensor) else t for t in inputs]
        with torch.no_grad():
            new_out = new(*given)
        torch.cuda.synchronize()
        tag = label if config is None else f"{label} config={config}"
        for i, (a, b) in enumerate(zip(given, inputs)):
            if isinstance(a, torch.Tensor) and not same_values(a, b):
                errors.append(f"{tag}: ModelNew modified input {i}")
        err = compare(tag, ref_out, new_out, equal_nan=special)
        if err:
            errors.append(err)
    return errors


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("solution", type=pathlib.Path)
    parser.add_argument("--shapes", default="[]", help="JSON list of constant overrides")
    parser.add_argument("--build-dir", type=pathlib.Path,
                        help="build the extension here and keep it (default: a temporary "
                        "directory); ninja rebuilds nothing when the sources are unchanged")
    args = parser.parse_args()

    solution = args.solution.resolve()
    task_path = TASKS / f"{solution.name}.py"
    if not task_path.is_file():
        print(f"no task {task_path} for solution {solution}", file=sys.stderr)
        return 1

    with tempfile.TemporaryDirectory(prefix="cuda_agent_solution_") as tmp:
        build_dir = str(args.build_dir) if args.build_dir else tmp
        ext = build(solution, build_dir)
        print(f"{solution.name}: built; registered {ext._registered()}")
        task = import_file("task_model", task_path)
        model_new = import_file("model_new", solution / "model_new.py")
        new_cls = model_new.ModelNew

        # Whether ModelNew exposes a kernel_config to switch launch variants.
        torch.manual_seed(0)
        probe = new_cls(*task.get_init_inputs())
        configs = [0, 1] if hasattr(probe, "kernel_config") else [None]

        errors = []
        # The task's own shapes: 5 seeds at the default config, then every config once.
        for seed in SEEDS:
            errors += run_case(task, new_cls, f"seed {seed}", seed, [configs[0]])
        errors += run_case(task, new_cls, "configs", 100, configs)
        errors += run_case(task, new_cls, "misaligned inputs", 101, configs, misalign=True)
        errors += run_case(task, new_cls, "NaN and inf inputs", 102, configs, special=True)

        overrides = json.loads(args.shapes)
        defaults = {k: getattr(task, k) for o in overrides for k in o if hasattr(task, k)}
        for n, override in enumerate(overrides):
            missing = [k for k in override if k not in defaults]
            if missing:
                errors.append(f"shape {override}: the task has no constant {missing}")
                continue
            for k, v in {**defaults, **override}.items():
                setattr(task, k, v)
            errors += run_case(task, new_cls, f"shape {override}", 200 + n, configs)
            errors += run_case(task, new_cls, f"shape {override} misaligned", 300 + n, configs,
                               misalign=True)

    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        return 1
    print(f"{solution.name}: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
