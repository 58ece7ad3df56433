#!/usr/bin/env python3
"""scripts/summarize.py - the main job's summary (scripts/setup.sh): what an episode workspace
holds, the evaluator's report on it and where to go next.

    summarize.py WORKSPACE REPORT.json

WORKSPACE is a directory `cuda-agent workspace create` made; REPORT.json what `cuda-agent eval
--json` printed for it (any stage: a failed evaluation is summarised too). Standard library
only: it runs before or without the virtual environment. Reads only, prints to stdout, exits 0
unless its arguments cannot be read (1); the evaluation's verdict is the caller's to act on.
"""

import json
import os
import sys
import textwrap

# What each read-only file of a workspace is for (README.md, "Workspaces").
READ_ONLY = [
    ("SKILL.md", "the agent's instructions: rules, workflow, helpers, the GPU"),
    ("model.py", "the task: class Model, get_inputs(), get_init_inputs()"),
    ("binding.cpp", "builds one module, cuda_extension, from every REGISTER_BINDING"),
    ("binding_registry.h", "REGISTER_BINDING and the CA_CHECK helpers"),
    ("compile", "./compile: build the kernels through the evaluator"),
    ("verify", "./verify: compile, then check against the reference"),
    ("profile", "./profile: verify, then time against eager and torch.compile"),
    ("MANIFEST.json", "the writable patterns and the read-only files' hashes"),
]


def get(d, path, default=None):
    for k in path.split("."):
        if not isinstance(d, dict) or k not in d:
            return default
        d = d[k]
    return default if d is None else d


def row(label, text):
    """One line of the report, wrapped under its label."""
    print(textwrap.fill(text, 100, initial_indent=f"  {label:<10}",
                        subsequent_indent=" " * 12, break_on_hyphens=False))


def ms(x):
    return "-" if x is None else f"{x:.4g} ms"


def workspace(ws):
    with open(os.path.join(ws, "MANIFEST.json")) as f:
        man = json.load(f)
    t = man.get("task", {})
    print(f"workspace {ws}")
    print(f"  task      {t.get('name')} ({t.get('id')}; operators: "
          f"{', '.join(t.get('ops') or []) or '-'})")
    print("  read-only (what the agent is given):")
    known = man.get("read_only", {})
    for name, what in READ_ONLY:
        if name in known:
            print(f"    {name:<19} {what}")
    for name in sorted(set(known) - {n for n, _ in READ_ONLY}):
        print(f"    {name}")
    print(f"  writable ({', '.join(man.get('writable', []))}), here a solution's:")
    files = ["model_new.py"] if os.path.isfile(os.path.join(ws, "model_new.py")) else []
    kdir = os.path.join(ws, "kernels")
    files += [f"kernels/{n}" for n in sorted(os.listdir(kdir)) if not n.startswith(".")] \
        if os.path.isdir(kdir) else []
    for name in files:
        with open(os.path.join(ws, name), errors="replace") as f:
            lines = sum(1 for _ in f)
        print(f"    {name:<36} {lines} lines")


def kernels_line(u):
    for k in u.get("kernels") or []:
        spill = k.get("spill_store_bytes", 0) + k.get("spill_load_bytes", 0)
        print(f"            kernel {k.get('name')}: {k.get('registers')} registers, "
              f"{k.get('shared_bytes')} B shared, {k.get('stack_bytes')} B stack, "
              f"{spill} B spilled")


def isolation(iso):
    if not iso:
        return "not reported (the evaluation stopped before the candidate ran)"
    if not iso.get("sandbox"):
        return f"NO sandbox: {iso.get('reason', 'no reason given')}"
    parts = [f"namespaces {', '.join(iso.get('namespaces', []))}",
             "its own uid" if iso.get("own_uid") else f"uid {iso.get('host_uid')}",
             f"seccomp: {iso.get('seccomp')}"]
    if "lockdown_installed" in iso:
        parts.append("lockdown installed" if iso["lockdown_installed"] else
                     "lockdown NOT installed")
    parts.append(f"capabilities: {iso.get('capabilities')}")
    devs = iso.get("devices") or []
    parts.append(f"devices: {', '.join(devs) if devs else 'none'}")
    if iso.get("limits"):
        parts.append(f"limits: {iso['limits']}")
    return "sandbox: " + "; ".join(parts)


def report(r):
    h = r.get("harness") or {}
    v = h.get("verification") or {}
    print(f"evaluation: rules {r.get('rules')}, precision {get(v, 'precision', '-')}, "
          f"device {get(h, 'device.name', '-')}")
    pol = r.get("policy")
    if pol is not None:
        n = len(pol.get("violations") or [])
        print(f"  policy    {'ok' if pol.get('ok') else 'FAILED'}"
              f"{f' ({n} violations)' if n else ''}")
    c = r.get("compile")
    if c is not None:
        units = c.get("units") or []
        cached = sum(1 for u in units if u.get("cached"))
        print(f"  compile   {'ok' if c.get('ok') else 'FAILED'} in "
              f"{get(r, 'stage_ms.compile', 0) / 1000:.1f} s: {len(units)} units "
              f"({cached} from the cache), "
              f"{'linked' if get(c, 'link.ok') else 'not linked'}")
        for u in units:
            kernels_line(u)
    sets = v.get("sets") or []
    if sets:
        bad = [s for s in sets if not s.get("ok")]
        kinds = {}
        for s in sets:
            kinds[s.get("kind")] = kinds.get(s.get("kind"), 0) + 1
        worst = max((s.get("max_abs_diff") or 0) for s in sets)
        print(f"  verify    {'ok' if not bad else 'FAILED'}: {len(sets) - len(bad)} of "
              f"{len(sets)} input sets ({', '.join(f'{n} {k}' for k, n in kinds.items())})")
        print(f"            max abs diff {worst:.3g} (atol {v.get('atol')}, rtol "
              f"{v.get('rtol')}); computed at {v.get('precision_observed', '-')}")
    t = h.get("timing")
    if t:
        print(f"  timing    medians: eager {ms(get(t, 'eager.median_ms'))}, torch.compile "
              f"{ms(get(t, 'compile.median_ms'))}, candidate "
              f"{ms(get(t, 'candidate.median_ms'))} ({t.get('mode')})")
    if r.get("message"):
        print(f"  {r.get('stage'):<9} FAILED: {r['message'].rstrip()}")
        tail = get(h, "failure.details.output_tail", "").strip()
        if tail:
            print("            " + tail.splitlines()[-1])
    rw = r.get("reward")
    if rw:
        sp = ""
        if rw.get("reward", -1) > 0:
            sp = (f"; {rw.get('speedup_eager', 0):.2f}x vs eager, "
                  f"{rw.get('speedup_compile', 0):.2f}x vs torch.compile")
        row("reward", f"{rw.get('reward')}: {rw.get('reason')}{sp}")
    row("isolation", isolation(h.get("isolation")))


def next_steps(ws, r):
    dev = " --device cpu" if get(r, "harness.device.type") == "cpu" else ""
    print("where to go next (README.md, \"A short tour\"):")
    for cmd, what in [
        ("build/cuda-agent --help", "commands and exit codes"),
        ("build/cuda-agent data list examples/tasks", "the bundled tasks"),
        (f"build/cuda-agent workspace check {ws}", "what would be evaluated"),
        (f"build/cuda-agent eval{dev} {ws}", "evaluate again (--json: the full report)"),
        ("build/cuda-agent eval --doctor", "nvcc, compiler, PyTorch, GPU"),
        ("build/cuda-agent run --task examples/tasks/softmax_last_dim.py --model M "
         "--base-url URL --out runs/x", "let a model solve a task"),
        ("make test", "the tests"),
    ]:
        print(f"  {cmd}\n      {what}")
    print("  docs: README.md, docs/security.md (what a candidate may and may not do),")
    print("        docs/internals/ (one page per module), docs/BENCHMARKS.md")


def main(argv):
    if len(argv) != 3:
        print("usage: summarize.py WORKSPACE REPORT.json", file=sys.stderr)
        return 2
    try:
        with open(argv[2]) as f:
            r = json.load(f)
        workspace(argv[1])
    except (OSError, ValueError) as e:
        print(f"summarize.py: {e}", file=sys.stderr)
        return 1
    print()
    report(r)
    print()
    next_steps(argv[1], r)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
