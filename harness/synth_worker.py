"""synth_worker.py - the torch side of `cuda-agent synth` (src/synth drives it).

  synth_worker.py catalog [--extra FILE]... [--no-transformers]
      crawl the catalog (synth_catalog.crawl) and print it as JSON
  synth_worker.py serve
      JSON lines on stdin/stdout. The first line is the configuration; the worker answers
      {"ready": true, "fingerprint", "device", "torch"} or {"error": ...} and exits 3. Then one
      request per line, one answer per line: {"seed": N} composes and filters (the task and its
      filter results); {"seed": N, "draft": true} only composes ({"seed", "draft", "ops",
      "depth"}); {"seed": N, "code", "ops", "depth"} filters a task written elsewhere (by an
      LLM in LLM mode).

The protocol owns the real stdout: fd 1 is pointed at stderr as soon as the worker starts, so a
print() in a task (or a warning from torch) cannot corrupt an answer. Exit codes: 2 bad usage or
catalog, 3 torch missing.
"""
import argparse
import importlib.util
import json
import math
import os
import sys

import synth_catalog
import synth_compose
import synth_filter


def _proto():
    fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(fd, "w", buffering=1)


def _device(want):
    import torch
    if want in (None, "", "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    if want == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda, but torch sees no CUDA device")
    return want


def handle(req, cfg, catalog, corpus):
    seed = req["seed"]
    target = math.sqrt(cfg["min_ms"] * cfg["max_ms"])
    if req.get("draft"):
        # LLM mode, step 1: the composition only, for the model to rewrite (no filters).
        try:
            t = synth_compose.compose(catalog, seed, cfg.get("depths"), target, cfg["device"],
                                      1.0, cfg.get("allow_stochastic", False), cfg.get("ops"))
        except ValueError as e:
            return {"seed": seed, "ok": False, "reason": f"compose: {e}", "filters": {}}
        return {"seed": seed, "draft": t["code"], "ops": t["ops"], "depth": t["depth"]}
    if "code" in req:
        ops = req.get("ops", [])
        task = {"code": req["code"], "ops": ops, "depth": req.get("depth", len(ops)) or 1,
                "seed": seed}
    else:
        try:
            task = synth_compose.compose(catalog, seed, cfg.get("depths"), target, cfg["device"],
                                         1.0, cfg.get("allow_stochastic", False), cfg.get("ops"))
        except ValueError as e:
            return {"seed": seed, "ok": False, "reason": f"compose: {e}", "filters": {}}
    res = synth_filter.run_filters(task["code"], cfg, corpus)
    rt = res["filters"].get("runtime")
    if rt and not rt["ok"] and "code" not in req and res["eager_ms"]:
        # The size model was off: one re-sized composition, the same operators and shapes.
        scale = max(1 / 256, min(256.0, target / res["eager_ms"]))
        again = synth_compose.compose(catalog, seed, cfg.get("depths"), target, cfg["device"],
                                      scale, cfg.get("allow_stochastic", False), cfg.get("ops"))
        if again["batch_size"] != task["batch_size"]:
            first = res["reason"]
            task, res = again, synth_filter.run_filters(again["code"], cfg, corpus)
            res["resized"] = {"scale": round(scale, 4), "first": first}
    try:
        key = synth_compose.dedup_key(task["code"])
    except SyntaxError:
        key = None
    out = dict(task, key=key)
    out.update(res)
    return out


def serve():
    proto = _proto()
    line = sys.stdin.readline()
    try:
        cfg = json.loads(line)
        import torch
        cfg["device"] = _device(cfg.get("device"))
        torch.set_num_threads(max(1, int(cfg.get("threads", 1))))
        catalog = synth_catalog.load(cfg["catalog"])
        if cfg.get("depths"):
            cfg["depths"] = synth_compose.parse_depths(cfg["depths"])
        corpus = synth_filter.Corpus(cfg.get("corpus"))
    except ImportError as e:
        proto.write(json.dumps({"error": f"torch is not importable: {e}"}) + "\n")
        return 3
    except (ValueError, KeyError, OSError) as e:
        proto.write(json.dumps({"error": str(e)}) + "\n")
        return 2
    proto.write(json.dumps({"ready": True, "fingerprint": catalog["fingerprint"],
                            "device": cfg["device"], "torch": torch.__version__,
                            "corpus_files": len(corpus.items)}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        try:
            ans = handle(req, cfg, catalog, corpus)
        except Exception as e:  # a bug of ours or a catalog entry: this task, not the run
            ans = {"seed": req.get("seed"), "ok": False, "filters": {},
                   "reason": f"worker: {type(e).__name__}: {str(e)[:300]}"}
        if cfg["device"] == "cuda":
            torch.cuda.empty_cache()  # give back what the task cached: workers share the GPU
        proto.write(json.dumps(ans) + "\n")
    return 0


def main(argv):
    ap = argparse.ArgumentParser(prog="synth_worker.py")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("catalog")
    c.add_argument("--extra", action="append", default=[])
    c.add_argument("--no-transformers", action="store_true")
    sub.add_parser("serve")
    a = ap.parse_args(argv)
    if a.cmd == "serve":
        return serve()
    if importlib.util.find_spec("torch") is None:
        print("torch is not importable (install PyTorch, or set CUDA_AGENT_PYTHON)",
              file=sys.stderr)
        return 3
    extra = []
    for path in a.extra:
        try:
            with open(path) as f:
                user = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            print(f"{path}: {e}", file=sys.stderr)
            return 2
        if not isinstance(user, dict):
            print(f"{path}: must be a JSON object of name -> entry", file=sys.stderr)
            return 2
        extra.append(user.get("ops", user) if "schema" in user else user)
    try:
        cat = synth_catalog.crawl(extra, not a.no_transformers)
    except ValueError as e:
        print(str(e), file=sys.stderr)
        return 2
    json.dump(cat, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
