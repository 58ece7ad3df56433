"""bench/binding_opt.py - what a binding's optimisation level costs per call.

Bindings compile at -O1 (src/eval/compile.c: -O2 and -O3 cost a third of a binding's compile).
The time a binding adds to every timed call is its argument checks, pybind11's argument
casting and the output's allocation, all host code; this measures that host path at -O1 and at
-O2, side by side in one process: the same binding source (checks like the examples', an
empty_like, no kernel) built twice with torch.utils.cpp_extension.load on the CPU, then ROUNDS
rounds that each time CALLS calls of one module and then of the other, alternating which goes
first. Prints the median per-call time of each and their ratio.

    python3 bench/binding_opt.py [--calls 20000] [--rounds 15] [--build-dir DIR]

No GPU needed: the path measured is host code, the same on a GPU machine (only the allocation
differs there).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

SOURCE = r"""
#include <torch/extension.h>

static torch::Tensor checked(const torch::Tensor &x, const torch::Tensor &bias, double scale,
                             int64_t config)
{
    TORCH_CHECK(x.is_contiguous(), "x must be contiguous (sizes ", x.sizes(), ")");
    TORCH_CHECK(bias.is_contiguous(), "bias must be contiguous");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32, got ", x.scalar_type());
    TORCH_CHECK(bias.scalar_type() == torch::kFloat32, "bias must be float32");
    TORCH_CHECK(x.device() == bias.device(), "x and bias must be on one device");
    TORCH_CHECK(x.dim() >= 1, "x must have at least one dim");
    TORCH_CHECK(bias.dim() == 1 && bias.size(0) == x.size(-1), "bias must have shape [",
                x.size(-1), "], got ", bias.sizes());
    TORCH_CHECK(config >= 0 && config < 4, "config must be 0..3");
    torch::Tensor out = torch::empty_like(x);
    (void)scale;
    return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)
{
    m.def("checked", &checked, "argument checks and an allocation", pybind11::arg("x"),
          pybind11::arg("bias"), pybind11::arg("scale"), pybind11::arg("config") = 0);
}
"""


def build(level: str, build_dir: str):
    from torch.utils.cpp_extension import load
    src = os.path.join(build_dir, f"binding_{level}.cpp")
    with open(src, "w") as f:
        f.write(SOURCE)
    out = os.path.join(build_dir, level)
    os.makedirs(out, exist_ok=True)
    t0 = time.monotonic()
    mod = load(name=f"binding_opt_{level}", sources=[src], extra_cflags=[f"-{level}"],
               build_directory=out, verbose=False)
    return mod, time.monotonic() - t0


def per_call_us(fn, args, calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    return (time.perf_counter() - t0) / calls * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--build-dir", default=None)
    a = ap.parse_args()
    import torch
    build_dir = a.build_dir or tempfile.mkdtemp(prefix="binding-opt-")
    mods = {}
    for level in ("O1", "O2"):
        mods[level], secs = build(level, build_dir)
        print(f"built -{level} in {secs:.1f} s")
    x = torch.randn(4, 64)
    bias = torch.randn(64)
    args = (x, bias, 1.5, 0)
    for m in mods.values():  # warm-up
        per_call_us(m.checked, args, a.calls // 10)
    times: dict[str, list[float]] = {k: [] for k in mods}
    order = list(mods)
    for r in range(a.rounds):
        for level in (order if r % 2 == 0 else order[::-1]):
            times[level].append(per_call_us(mods[level].checked, args, a.calls))
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in med.items():
        print(f"-{k}: {v:.3f} us per call (median of {a.rounds} rounds of {a.calls} calls; "
              f"min {min(times[k]):.3f}, max {max(times[k]):.3f})")
    print(f"ratio -O1 / -O2: {med['O1'] / med['O2']:.3f}")


if __name__ == "__main__":
    main()
