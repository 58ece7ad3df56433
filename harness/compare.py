"""compare.py: judging the candidate (trusted side): outputs against the reference (values,
NaN/Inf positions, shapes, dtypes), inputs against their pristine copies, strict precision
against the float64 reference, and the launch evidence.
"""

from __future__ import annotations

import math
from typing import Any

import torch

import harness_util as hu
import memplan
import arena as ar
from evalbase import EvalError, count_changed
from job import arena_inputs, received_outputs
from inputs import InputSet
from shapes import derivation_label


MAX_FIRST_MISMATCHES = 5
# Strict precision (docs/internals/harness.md, "Precision"): on every input set, for every
# floating output, the candidate's RMS error against a float64 reference must not exceed
#   PRECISION_FACTOR * (RMS error of the float32 reference against the float64 one)
#   + PRECISION_REL_FLOOR_EPS * eps(dtype) * RMS(float64 reference) + PRECISION_ABS_FLOOR.
PRECISION_FACTOR = 10.0
PRECISION_REL_FLOOR_EPS = 128.0
PRECISION_ABS_FLOOR = 1e-12
# The timed-call check's precision rule (timed_call_precision) allows this many times the
# threshold: its set's float32 reference error is estimated from set 0's.
TIMED_PRECISION_MARGIN = 2.0
# The least share of the forward's GPU time that must run inside the extension's functions.
MIN_EXTENSION_SHARE = 0.25


def first_true(mask: torch.Tensor, k: int) -> list[int]:
    """Flat indices of the first k True elements of mask (chunked: no huge nonzero())."""
    flat = mask.reshape(-1)
    found: list[int] = []
    chunk = 1 << 22
    for start in range(0, flat.numel(), chunk):
        idx = torch.nonzero(flat[start:start + chunk]).flatten()
        if idx.numel():
            found.extend(int(i) + start for i in idx[: k - len(found)].tolist())
            if len(found) >= k:
                break
    return found


def unravel(flat_index: int, shape: tuple[int, ...]) -> list[int]:
    out = []
    for dim in reversed(shape):
        flat_index, r = divmod(flat_index, dim)
        out.append(r)
    return list(reversed(out))


def compare_tensor(j: int, got: torch.Tensor, exp: torch.Tensor, atol: float,
                   rtol: float) -> dict[str, Any]:
    """Per-output record: mismatches, nonfinite_mismatches, max_abs_diff, first_mismatches."""
    rec: dict[str, Any] = {"output": j, "shape": list(exp.shape), "dtype": str(exp.dtype),
                           "numel": exp.numel()}
    if exp.numel() == 0:
        rec.update(mismatches=0, nonfinite_mismatches=0, max_abs_diff=None,
                   first_mismatches=[])
        return rec
    floating = exp.is_floating_point() or exp.is_complex()
    if floating:
        close = torch.isclose(got, exp, rtol=rtol, atol=atol, equal_nan=True)
        nan_g, nan_e = torch.isnan(got), torch.isnan(exp)
        inf_g, inf_e = torch.isinf(got), torch.isinf(exp)
        nonfinite_bad = (nan_g != nan_e) | (inf_g != inf_e) | (inf_g & inf_e & (got != exp))
        both_finite = torch.isfinite(got) & torch.isfinite(exp)
        diff = torch.where(both_finite, (got.to(torch.complex128 if exp.is_complex()
                                                else torch.float64)
                                         - exp.to(torch.complex128 if exp.is_complex()
                                                  else torch.float64)).abs(),
                           torch.zeros((), dtype=torch.float64, device=exp.device))
        max_abs = float(diff.max()) if bool(both_finite.any()) else None
        nonfinite = int(nonfinite_bad.sum())
    else:
        close = got == exp
        diff = (got.to(torch.float64) - exp.to(torch.float64)).abs() \
            if exp.dtype != torch.bool else (got != exp).to(torch.float64)
        max_abs = float(diff.max())
        nonfinite = 0
    bad = ~close
    nbad = int(bad.sum())
    firsts = []
    if nbad:
        g_flat, e_flat = got.reshape(-1), exp.reshape(-1)
        for fi in first_true(bad, MAX_FIRST_MISMATCHES):
            g, e = g_flat[fi].item(), e_flat[fi].item()
            if isinstance(g, complex) or isinstance(e, complex):
                g, e = complex(g), complex(e)
                ad = abs(g - e) if math.isfinite(abs(g - e)) else None
                g, e = str(g), str(e)
            else:
                ad = abs(float(g) - float(e))
                ad = ad if math.isfinite(ad) else None
                g, e = hu.number_repr(g), hu.number_repr(e)
            firsts.append({"output": j, "index": unravel(fi, tuple(exp.shape)), "got": g,
                           "expected": e, "abs_diff": ad})
    rec.update(mismatches=nbad, nonfinite_mismatches=nonfinite, max_abs_diff=max_abs,
               first_mismatches=firsts)
    return rec


def compare_tensor_sliced(j: int, got: torch.Tensor, exp: torch.Tensor, atol: float,
                          rtol: float) -> dict[str, Any]:
    """compare_tensor, on flat slices of memplan.SLICE_ELEMS elements when the output is
    larger (the temporaries stay bounded whatever the output's size; the same record: counts
    summed, the largest difference, the first mismatches in row-major order)."""
    chunk = memplan.SLICE_ELEMS
    n = exp.numel()
    if n <= chunk:
        return compare_tensor(j, got, exp.to(got.device), atol, rtol)
    g_flat, e_flat = got.reshape(-1), exp.reshape(-1)
    rec: dict[str, Any] = {"output": j, "shape": list(exp.shape), "dtype": str(exp.dtype),
                           "numel": n, "mismatches": 0, "nonfinite_mismatches": 0,
                           "max_abs_diff": None, "first_mismatches": []}
    for start in range(0, n, chunk):
        part = compare_tensor(j, g_flat[start:start + chunk],
                              e_flat[start:start + chunk].to(got.device), atol, rtol)
        rec["mismatches"] += part["mismatches"]
        rec["nonfinite_mismatches"] += part["nonfinite_mismatches"]
        if part["max_abs_diff"] is not None:
            rec["max_abs_diff"] = part["max_abs_diff"] if rec["max_abs_diff"] is None else \
                max(rec["max_abs_diff"], part["max_abs_diff"])
        for m in part["first_mismatches"]:
            if len(rec["first_mismatches"]) < MAX_FIRST_MISMATCHES:
                m["index"] = unravel(start + m["index"][0], tuple(exp.shape))
                rec["first_mismatches"].append(m)
    return rec


def compare_number(j: int, got: Any, exp: Any, atol: float, rtol: float) -> dict[str, Any]:
    if isinstance(exp, bool) or isinstance(exp, int):
        ok = got == exp
    elif got is None or isinstance(got, bool):  # job.number_value lets null through: no number
        ok = False
    else:
        g, e = float(got), float(exp)
        ok = (math.isnan(g) and math.isnan(e)) or g == e or \
            (math.isfinite(g) and math.isfinite(e) and abs(g - e) <= atol + rtol * abs(e))
    ad = None
    try:
        ad = abs(float(got) - float(exp))
        ad = ad if math.isfinite(ad) else None
    except (TypeError, ValueError):
        pass
    firsts = [] if ok else [{"output": j, "index": [], "got": hu.number_repr(got),
                             "expected": hu.number_repr(exp), "abs_diff": ad}]
    return {"output": j, "shape": [], "dtype": type(exp).__name__, "numel": 1,
            "mismatches": 0 if ok else 1, "nonfinite_mismatches": 0, "max_abs_diff": ad,
            "first_mismatches": firsts}


def precision_record(j: int, got: torch.Tensor, ref: torch.Tensor,
                     ref64: torch.Tensor) -> dict[str, Any] | None:
    """The strict-precision numbers of one floating output (None: not applicable)."""
    if not ref.is_floating_point() or ref.dtype == torch.float64 or ref.numel() == 0:
        return None
    if not isinstance(ref64, torch.Tensor) or ref64.shape != ref.shape:
        return None
    g, r = got.to(torch.float64), ref.to(torch.float64)
    r64 = r if ref64 is ref else ref64.to(torch.float64)  # timed_call_precision: the same
    mask = torch.isfinite(g) & torch.isfinite(r) & torch.isfinite(r64)
    n = int(mask.sum())
    if n == 0:
        return None
    zero = torch.zeros((), dtype=torch.float64, device=g.device)

    def rms(t: torch.Tensor) -> float:
        return math.sqrt(float(torch.where(mask, t * t, zero).sum()) / n)

    cand_err = rms(g - r64)
    ref_err = rms(r - r64)
    scale = rms(r64)
    eps = torch.finfo(ref.dtype).eps
    threshold = PRECISION_FACTOR * ref_err + PRECISION_REL_FLOOR_EPS * eps * scale \
        + PRECISION_ABS_FLOOR
    return {"output": j, "candidate_rms_err": cand_err, "reference_rms_err": ref_err,
            "scale_rms": scale, "threshold": threshold,
            "ratio": cand_err / ref_err if ref_err > 0 else None, "ok": cand_err <= threshold}


def precision_record_sliced(j: int, got: torch.Tensor, ref: torch.Tensor,
                            ref64: Any) -> dict[str, Any] | None:
    """precision_record, with references (float32 and float64) that may live in host memory
    (moved to the candidate output's device a slice at a time) and on flat slices of
    memplan.SLICE_ELEMS elements when the output is larger (the RMS sums added up slice by
    slice)."""
    chunk = memplan.SLICE_ELEMS
    if not isinstance(ref64, torch.Tensor) or ref.numel() <= chunk:
        same = ref64 is ref  # timed_call_precision: moved (and made float64) once
        ref = ref.to(got.device)
        if isinstance(ref64, torch.Tensor):
            ref64 = ref if same else ref64.to(got.device)
        return precision_record(j, got, ref, ref64)
    if not ref.is_floating_point() or ref.dtype == torch.float64 or ref64.shape != ref.shape:
        return None
    g_flat, r_flat, r64_flat = got.reshape(-1), ref.reshape(-1), ref64.reshape(-1)
    n = 0
    cand_sq = ref_sq = scale_sq = 0.0
    for start in range(0, ref.numel(), chunk):
        g = g_flat[start:start + chunk].to(torch.float64)
        r = r_flat[start:start + chunk].to(got.device, torch.float64)
        r64 = r if ref64 is ref else r64_flat[start:start + chunk].to(got.device, torch.float64)
        mask = torch.isfinite(g) & torch.isfinite(r) & torch.isfinite(r64)
        zero = torch.zeros((), dtype=torch.float64, device=g.device)
        n += int(mask.sum())
        cand_sq += float(torch.where(mask, (g - r64) ** 2, zero).sum())
        ref_sq += float(torch.where(mask, (r - r64) ** 2, zero).sum())
        scale_sq += float(torch.where(mask, r64 * r64, zero).sum())
        del g, r, r64, mask
    if n == 0:
        return None
    cand_err, ref_err, scale = (math.sqrt(x / n) for x in (cand_sq, ref_sq, scale_sq))
    eps = torch.finfo(ref.dtype).eps
    threshold = PRECISION_FACTOR * ref_err + PRECISION_REL_FLOOR_EPS * eps * scale \
        + PRECISION_ABS_FLOOR
    return {"output": j, "candidate_rms_err": cand_err, "reference_rms_err": ref_err,
            "scale_rms": scale, "threshold": threshold,
            "ratio": cand_err / ref_err if ref_err > 0 else None, "ok": cand_err <= threshold}


def timed_call_precision(outs: list[Any], refs: list[Any],
                         set0: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The strict-precision rule for the timed-call check (harness/session.py), whose set has no
    float64 reference: each floating output's RMS error against the float32 reference of the
    call's own inputs, within the rule's threshold with set 0's float32 reference error (scaled
    by the outputs' RMS) standing in for this set's, once more for the float32 reference's own
    distance to float64 (the triangle inequality), all times TIMED_PRECISION_MARGIN (the set's
    error is not set 0's, only like it). set0: set 0's precision records. A forward
    that answers with a result cached from other inputs, even inside the tolerance, errs by what
    the inputs moved (timing.vary_factor), far above it."""
    by_output = {p.get("output"): p for p in set0 if isinstance(p, dict)}
    recs = []
    for j, (g, r) in enumerate(zip(outs, refs)):
        p0 = by_output.get(j)
        if p0 is None or not isinstance(g, torch.Tensor) or not isinstance(r, torch.Tensor) \
                or g.device.type == "meta":
            continue
        p = precision_record_sliced(j, g, r, r)
        if p is None:
            continue
        ratio = p["scale_rms"] / p0["scale_rms"] if p0.get("scale_rms") else 1.0
        ref_err = p0.get("reference_rms_err") or 0.0
        p["reference_rms_err"] = ref_err * ratio  # set 0's, at this set's scale
        p["threshold"] = TIMED_PRECISION_MARGIN * (
            p["threshold"] + (PRECISION_FACTOR + 1.0) * p["reference_rms_err"])
        p["ratio"] = p["candidate_rms_err"] / p["reference_rms_err"] \
            if p["reference_rms_err"] > 0 else None
        p["ok"] = p["candidate_rms_err"] <= p["threshold"]
        recs.append(p)
    return recs


def set_label(s: InputSet) -> str:
    """How messages name a set: "random", "shape rows=3", "derived-shape batch_size=3",
    "value-stress, inputs x1000"."""
    if s.kind == "shape" and s.overrides:
        return "shape " + ", ".join(f"{k}={v}" for k, v in s.overrides.items())
    if s.derived:
        return "derived-shape " + derivation_label(s.derived)
    if s.scale:
        return f"value-stress, inputs x{s.scale:g}"
    return s.kind


def check_set(s: InputSet, meta: Any, outs: list[Any], after: list[Any], device: torch.device,
              atol: float, rtol: float, precision: str) -> dict[str, Any]:
    """Compares one set: outs, the candidate's outputs (received_outputs), and after, its
    inputs after the forward (arena_inputs). Returns the set's record; raises EvalError on the
    first failure."""
    record: dict[str, Any] = {"seed_index": s.index, "kind": s.kind, "ok": False,
                              **({"shape": s.overrides} if s.kind == "shape" else {}),
                              **({"derived": s.derived} if s.derived else {}),
                              **({"scale": s.scale, "atol_scale": s.atol_scale}
                                 if s.scale else {}),
                              **({"own_model": True} if s.model is not None else {}),
                              "max_abs_diff": None, "mismatches": 0, "first_mismatches": [],
                              "outputs": []}
    if len(outs) != len(s.ref):
        raise EvalError("output_type", f"input set {s.index}: ModelNew returned {len(outs)} "
                                       f"output(s), Model returns {len(s.ref)}",
                        {"set": s.index, "record": record})
    if isinstance(meta, list) and len(meta) == len(outs):
        for j, (m, r) in enumerate(zip(meta, s.ref)):
            if isinstance(m, dict) and isinstance(r, torch.Tensor) and \
                    m.get("kind") == "tensor" and m.get("device") != r.device.type:
                raise EvalError("device", f"input set {s.index}: output {j} is on "
                                          f"{m.get('device')}, Model's on {r.device.type}",
                                {"set": s.index, "output": j})
    got_leaves = []
    out_atol = s.atol_scale if s.atol_scale is not None else [1.0] * len(s.ref)
    for j, (g, r) in enumerate(zip(outs, s.ref)):
        if isinstance(r, torch.Tensor) != isinstance(g, torch.Tensor):
            raise EvalError("output_type",
                            f"input set {s.index}: output {j} is a {type(g).__name__}, "
                            f"Model's is a {type(r).__name__}", {"set": s.index, "output": j})
        if isinstance(r, torch.Tensor):
            if tuple(g.shape) != tuple(r.shape):
                raise EvalError("shape", f"input set {s.index}: output {j} has shape "
                                         f"{list(g.shape)}, Model's has {list(r.shape)}",
                                {"set": s.index, "output": j, "got": list(g.shape),
                                 "expected": list(r.shape)})
            if g.dtype != r.dtype:
                raise EvalError("dtype", f"input set {s.index}: output {j} has dtype {g.dtype},"
                                         f" Model's has {r.dtype}",
                                {"set": s.index, "output": j, "got": str(g.dtype),
                                 "expected": str(r.dtype)})
            g = g.to(device)
            rec = compare_tensor_sliced(j, g, r, atol * out_atol[j], rtol)
        else:
            rec = compare_number(j, g, r, atol * out_atol[j], rtol)
        got_leaves.append(g)
        record["outputs"].append(rec)
    diffs = [o["max_abs_diff"] for o in record["outputs"] if o["max_abs_diff"] is not None]
    record["max_abs_diff"] = max(diffs) if diffs else None
    record["mismatches"] = sum(o["mismatches"] for o in record["outputs"])
    record["first_mismatches"] = [m for o in record["outputs"]
                                  for m in o["first_mismatches"]][:MAX_FIRST_MISMATCHES]
    if record["mismatches"]:
        nonfinite = sum(o["nonfinite_mismatches"] for o in record["outputs"])
        first = record["first_mismatches"][0] if record["first_mismatches"] else None
        scaled = f" (x{max(out_atol):g} on this set)" if max(out_atol, default=1.0) > 1 else ""
        msg = (f"input set {s.index} ({set_label(s)}): {record['mismatches']} element(s) differ "
               f"beyond atol={atol:g}{scaled}, rtol={rtol:g}")
        if nonfinite:
            msg += f" ({nonfinite} with NaN/Inf where Model has none, or the reverse)"
        if record["max_abs_diff"] is not None:
            msg += f"; max |diff| {record['max_abs_diff']:.4g}"
        if first is not None:
            msg += (f"; first at output {first['output']} index {first['index']}: got "
                    f"{first['got']}, expected {first['expected']}")
        raise EvalError("mismatch", msg, {"set": s.index, "record": record})

    # Inputs: compared with this side's pristine copies.
    if len(after) != len(s.orig):
        raise EvalError("protocol", f"input set {s.index}: the candidate sent back "
                                    f"{len(after)} inputs, not {len(s.orig)}", {"set": s.index})
    for k, (a, o) in enumerate(zip(after, s.orig)):
        if not isinstance(o, torch.Tensor) or k in s.ref_mutated:
            continue
        if not isinstance(a, torch.Tensor) or tuple(a.shape) != tuple(o.shape) or \
                a.dtype != o.dtype:
            raise EvalError("input_mutated", f"input set {s.index}: ModelNew changed input "
                                             f"{k}'s shape or dtype in place",
                            {"set": s.index, "input": k})
        changed, fi = count_changed(a.to(device), o)
        if changed:
            assert fi is not None
            idx = unravel(fi, tuple(o.shape))
            raise EvalError("input_mutated",
                            f"input set {s.index}: ModelNew modified input {k} in place "
                            f"({changed} of {o.numel()} elements changed; first at {idx}: was "
                            f"{hu.number_repr(o.reshape(-1)[fi].item())}, now "
                            f"{hu.number_repr(a.reshape(-1)[fi].item())}); inputs must be "
                            "left as they are", {"set": s.index, "input": k, "changed": changed,
                                                 "first_index": idx})

    # Precision against the float64 reference.
    if s.ref64 is not None:
        precs = []
        for j, (g, r, r64) in enumerate(zip(got_leaves, s.ref, s.ref64)):
            if isinstance(r, torch.Tensor):
                p = precision_record_sliced(j, g, r, r64)
                if p is not None:
                    precs.append(p)
        record["precision"] = precs
        if not s.enforce_precision:
            record["precision_enforced"] = False
        worst = [p for p in precs if not p["ok"]]
        if worst and precision == "strict" and s.enforce_precision:
            p = worst[0]
            raise EvalError(
                "precision",
                f"input set {s.index}: output {p['output']} is inside the tolerance but its "
                f"RMS error against a float64 reference is {p['candidate_rms_err']:.3g}, above "
                f"the {p['threshold']:.3g} that fp32 arithmetic allows (10x the float32 "
                f"reference's {p['reference_rms_err']:.3g}, plus a floor): reduced precision "
                "(TF32/FP16/BF16 arithmetic or inputs?). Compute in fp32, or run with "
                "--precision tf32 where the task allows it.",
                {"set": s.index, "record": record})
    record["ok"] = True
    return record


def check_reported(arena: ar.Arena, s: InputSet, msg: dict[str, Any], device: torch.device,
                   atol: float, rtol: float, precision: str) -> dict[str, Any]:
    """check_set on what a "set" message reported: its outputs from the arena, its inputs in
    place."""
    if "refused" in msg:
        return refused_record(s, msg.get("refused"))
    meta = msg.get("outputs")
    return check_set(s, meta, received_outputs(arena, s, meta), arena_inputs(arena, s), device,
                     atol, rtol, precision)


def refused_record(s: InputSet, why: Any) -> dict[str, Any]:
    """The record of a set the candidate refused (its forward raised): allowed for derived
    shapes only (job.json's may_refuse), a protocol failure for any other set."""
    if not s.may_refuse:
        raise EvalError("protocol", f"input set {s.index} ({set_label(s)}): the candidate "
                                    "reported a refusal, which only a derived shape may get",
                        {"set": s.index})
    return {"seed_index": s.index, "kind": s.kind, "ok": True, "derived": s.derived,
            "refused": hu.cap(str(why), 1024), "max_abs_diff": None, "mismatches": 0,
            "first_mismatches": [], "outputs": []}


def check_launches(ev: Any, rules: str = "cuda-agent") -> str | None:
    """The launch-evidence defence: the candidate's own kernels must run (kernels that exist
    but never run fail under both rule sets) and, under the cuda-agent rules, carry at least
    MIN_EXTENSION_SHARE of the forward's GPU time; under the kernelbench rules torch operators
    may do the rest, and their share is only reported (raises EvalError "launch_evidence").
    Returns why the evidence is unavailable, or None when the check was made."""
    if not isinstance(ev, dict):
        raise EvalError("protocol", "the candidate sent no record of its kernel launches")
    nums = {}
    for key in ("extension_calls", "kernels", "extension_kernels", "total_us",
                "extension_us"):
        v = ev.get(key)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) \
                or v < 0:
            raise EvalError("protocol", f"the candidate's launch record has no valid {key}")
        nums[key] = float(v)
    if ev.get("error") or not ev.get("activities"):
        # The profiler saw nothing at all (no CUPTI on this machine, or a forward that did no
        # GPU work, which the output and post-timing checks judge): recorded, not a verdict.
        return "the profiler recorded no GPU activity in the forward" if not ev.get("error") \
            else f"the launch record is unusable: {hu.cap(str(ev['error']), 300)}"
    top = [t for t in ev.get("top") or [] if isinstance(t, dict)]
    outside = [f"{hu.cap(str(t.get('name')), 80)} ({t.get('us')} us)" for t in top
               if not t.get("in_extension")][:3]
    details = {"defence": "launch_evidence", "evidence": ev}
    if nums["extension_calls"] == 0:
        raise EvalError("launch_evidence", "the forward called no function of cuda_extension "
                                           "while it was recorded (call your kernels as "
                                           "cuda_extension.NAME(...) in forward)", details)
    if nums["extension_kernels"] == 0:
        what = f"{int(nums['kernels'])} kernel(s) ran outside it" + \
            (f": {', '.join(outside)}" if outside else "")
        raise EvalError("launch_evidence", f"no GPU kernel ran inside cuda_extension's "
                                           f"functions during the forward ({what}); the "
                                           "computation must be done by your kernels",
                        details)
    share = nums["extension_us"] / nums["total_us"] if nums["total_us"] > 0 else 1.0
    ev["torch_share"] = round(1.0 - share, 4)
    if share < MIN_EXTENSION_SHARE and rules != "kernelbench":
        raise EvalError("launch_evidence",
                        f"your kernels account for {100 * share:.1f}% of the forward's GPU "
                        f"time ({nums['extension_us']:.1f} of {nums['total_us']:.1f} us), less "
                        f"than {100 * MIN_EXTENSION_SHARE:.0f}%; the rest ran in PyTorch "
                        f"operators: {', '.join(outside) or '?'}", details)
    return None
