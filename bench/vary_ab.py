#!/usr/bin/env python3
"""bench/vary_ab.py - does varying the timed inputs per value change what is timed? (issue 21)

The harness's timed calls get inputs made fresh for each call (timing.varied_copies). Until
METHOD_VERSION 8 each call's inputs were the timing set times one factor ("scale": one
multiply); since then each value is also multiplied by a factor picked by the sum of its
indices from a vector of the call's own: made for each call ("percall": about eight small
launches, then one multiply), or a block of calls at a time (timing.FactorBlocks, "block": one
multiply on most calls). All happen before the call's start event, behind the lead under
timing="device", so none should be timed. This measures it: small memory-bound forwards (the size of load_rewards.py's
kb-swish-s, 27 us on an H100) timed with harness/timing.measure() under each way of making the
inputs, alternately (ABBA) in one process, in several fresh processes one after the other,
so that what differs between processes (allocations, clocks) and what differs between the
input makers are told apart. A maker NAME+write times the same with an L2 flush that zeroes
its buffer (the harness's until METHOD_VERSION 9, which reads it): the zeroing leaves the L2
full of dirty lines, which the timed call then writes back.

    python3 bench/vary_ab.py [--out OUT] [--procs 8] [--rounds 4] [--budget-ms 500]
        [--timing device] [--rows 2048] [--cols 4096] [--compile] [--device cpu]
        [--makers scale,percall,block,block+write] [--no-eager]

Prints, per forward and input maker, the processes' medians (each the median of its rounds'
medians), their spread (max / min across processes) and each maker's ratio to "scale" in
each process; writes OUT/vary_ab.json. Needs CUDA (exit status 77 without it), unless --device cpu
(wall-clock times; a check of the script, not a measurement).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAKERS = ("scale", "percall", "block")
# A maker's "+write" variant: the L2 flush zeroes its buffer instead of reading it (the
# harness's flush before METHOD_VERSION 9: dirty lines left for the timed call to write back).


def scale_only(inputs, timing):
    """The input maker before METHOD_VERSION 8: each call's inputs times that call's factor."""
    import torch

    state = {"k": 0}

    def make():
        state["k"] += 1
        f = timing.vary_factor(state["k"])
        return [torch.mul(x, f) if x.is_floating_point() else x.clone() for x in inputs]

    return make


def per_call(inputs, timing):
    """METHOD_VERSION 8 as first shipped: each call's factor vectors made for that call alone."""
    state = {"k": 0}

    def make():
        state["k"] += 1
        return timing.varied_inputs(inputs, state["k"])

    return make


def child(args) -> dict:
    sys.path.insert(0, os.path.join(ROOT, "harness"))
    import torch
    import timing  # harness/timing.py

    dev = torch.device(args.device)
    gen = torch.Generator(device=dev).manual_seed(1234)
    x = torch.randn(args.rows, args.cols, device=dev, generator=gen)
    bias = torch.randn(args.cols, device=dev, generator=gen)

    def swish(t):
        return t * torch.sigmoid(t) * 2.0 + bias

    fns = {"sigmoid": torch.sigmoid}
    if not args.no_eager:
        fns["swish_eager"] = swish
    if args.compile:
        fns["swish_compile"] = torch.compile(swish)
        fns["swish_compile"](x)
    read_flush = timing.L2Flusher.__call__

    def zero_flush(self):
        self._buf.zero_()  # a write of the whole buffer: the L2 ends full of dirty lines

    makers = args.makers.split(",")
    out: dict = {fn: {m: [] for m in makers} for fn in fns}
    for r in range(args.rounds):
        order = makers if r % 2 == 0 else makers[::-1]  # ABC CBA
        for name, fn in fns.items():
            for m in order:
                maker = {"scale": scale_only, "percall": per_call,
                         "block": lambda inputs, _t: timing.varied_copies(inputs)}
                make = maker[m.split("+")[0]]([x], timing)
                timing.L2Flusher.__call__ = zero_flush if m.endswith("+write") else read_flush
                st = timing.measure(fn, make, dev, args.budget_ms, args.timing)
                out[name][m].append({k: st.get(k) for k in (
                    "median_ms", "cv", "n", "lead_ms", "host_median_ms", "lead_short_fraction",
                    "noisy")})
    return out


def summarise(procs: list[dict], makers: list[str]) -> dict:
    res: dict = {}
    for fn in procs[0]:
        row: dict = {}
        for m in makers:
            meds = [statistics.median(a["median_ms"] for a in p[fn][m]) for p in procs]
            row[m] = {"per_process_ms": meds, "median_ms": statistics.median(meds),
                      "spread": max(meds) / min(meds),
                      "cv_median": statistics.median(
                          a["cv"] for p in procs for a in p[fn][m]),
                      "host_median_ms": statistics.median(
                          a["host_median_ms"] or 0.0 for p in procs for a in p[fn][m]),
                      "lead_short_max": max(
                          a["lead_short_fraction"] or 0.0 for p in procs for a in p[fn][m])}
        for m in makers[1:]:
            row[f"{m}_over_{makers[0]}"] = [v / s for v, s in zip(
                row[m]["per_process_ms"], row[makers[0]]["per_process_ms"])]
        res[fn] = row
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="/tmp/vary-ab")
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--budget-ms", type=float, default=500.0)
    ap.add_argument("--timing", default="device", choices=("events", "device"))
    ap.add_argument("--rows", type=int, default=2048)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--compile", action="store_true", help="also time torch.compile's swish")
    ap.add_argument("--device", default="cuda", help="cpu checks the script without a GPU")
    ap.add_argument("--makers", default=",".join(MAKERS),
                    help="input makers to compare, the first the reference; NAME+write: the same "
                    "with an L2 flush that zeroes its buffer")
    ap.add_argument("--no-eager", action="store_true", help="leave eager swish out")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.procs < 1 or args.rounds < 1 or args.budget_ms <= 0:
        ap.error("--procs and --rounds must be at least 1, --budget-ms above 0")
    bad = [m for m in args.makers.split(",") if m.split("+")[0] not in MAKERS
           or m.count("+") > 1 or ("+" in m and not m.endswith("+write"))]
    if bad:
        ap.error(f"unknown makers: {', '.join(bad)} (known: {', '.join(MAKERS)}, NAME+write)")
    if args.child:
        json.dump(child(args), sys.stdout)
        return 0
    try:
        import torch
        if args.device != "cpu" and not torch.cuda.is_available():
            raise RuntimeError("no CUDA device")
    except Exception as e:  # noqa: BLE001 - any reason torch cannot reach a GPU
        print(f"vary_ab: skipped: {e}", file=sys.stderr)
        return 77
    os.makedirs(args.out, exist_ok=True)
    passthrough = [a for a in sys.argv[1:] if a != "--child"]
    procs = []
    t0 = time.monotonic()
    for i in range(args.procs):
        r = subprocess.run([sys.executable, os.path.abspath(__file__), *passthrough, "--child"],
                           capture_output=True, text=True, check=False)
        if r.returncode != 0:
            print(f"vary_ab: process {i} failed ({r.returncode}):\n{r.stderr[-2000:]}",
                  file=sys.stderr)
            return 1
        procs.append(json.loads(r.stdout))
    makers = args.makers.split(",")
    summary = summarise(procs, makers)
    doc = {"args": {k: v for k, v in vars(args).items() if k != "child"},
           "device": torch.cuda.get_device_name(0) if args.device != "cpu" else "cpu", "torch": torch.__version__,
           "wall_s": time.monotonic() - t0, "summary": summary, "processes": procs}
    with open(os.path.join(args.out, "vary_ab.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
    print(f"{doc['device']}, {args.rows}x{args.cols} float32, timing {args.timing}, "
          f"{args.procs} processes x {args.rounds} rounds, {doc['wall_s']:.0f} s")
    print("| forward | inputs | median ms | spread across processes | median CV | "
          "host ms | worst lead_short | per process ms |")
    print("|---|---|---|---|---|---|---|---|")
    for fn, row in summary.items():
        for m in makers:
            s = row[m]
            per = " ".join(f"{v:.4f}" for v in s["per_process_ms"])
            print(f"| {fn} | {m} | {s['median_ms']:.4f} | {s['spread']:.3f} | "
                  f"{100 * s['cv_median']:.2f}% | {s['host_median_ms']:.3f} | "
                  f"{s['lead_short_max']:.2f} | {per} |")
        for m in makers[1:]:
            ratios = row[f"{m}_over_{makers[0]}"]
            print(f"| {fn} | {m}/{makers[0]} | {statistics.median(ratios):.3f} | "
                  f"{min(ratios):.3f}-{max(ratios):.3f} | | | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
