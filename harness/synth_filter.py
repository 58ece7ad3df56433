"""synth_filter.py - the filters a synthesised task must pass (the paper's list), in the order
cheap to expensive; the first that fails rejects the task with its reason:

  static       parses; defines Model/get_inputs/get_init_inputs; no stochastic operator
               (dropout, rand*, bernoulli, multinomial, ...) anywhere in the code
  similarity   AST similarity to every task of the decontamination tree <= max (0.9)
  eager        runs in eager mode; outputs are finite
  deterministic  two runs on the same inputs give bit-identical outputs
  informative  output not constant; outputs for two different input sets differ
  runtime      eager median in [min_ms, max_ms]
  compile      runs under torch.compile and agrees with eager (atol = rtol = 1e-2)

Exact duplicates (dedup_key in synth_compose) are caught by the store, which sees every task.

AST similarity: each file becomes a multiset of features (node types, parent/child type pairs,
attribute and torch names; variable names and constants dropped, so renaming or resizing does not
hide a copy); the score is the Dice coefficient 2|A & B| / (|A| + |B|) of two multisets, 1.0 for
the same structure. The paper does not define its measure; this one is cheap (a Counter per
corpus file, built once per worker) and rates a renamed copy 1.0.

The code runs in this process: the C side runs each worker in its own process group with a
per-task timeout, so a hang or a crash rejects that task ("timeout", "crashed") and the worker is
restarted.
"""
import ast
import os
import statistics
import time
from collections import Counter

STOCHASTIC = {"dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
              "feature_alpha_dropout", "Dropout", "Dropout1d", "Dropout2d", "Dropout3d",
              "AlphaDropout", "FeatureAlphaDropout", "rand", "randn", "rand_like", "randn_like",
              "randint", "randint_like", "randperm", "bernoulli", "bernoulli_", "multinomial",
              "normal", "normal_", "uniform_", "exponential_", "geometric_", "cauchy_",
              "log_normal_", "random_", "poisson", "rrelu", "RReLU", "gumbel_softmax"}
TORCH_NAMES = {"torch", "nn", "F", "functional"}


class Reject(Exception):
    def __init__(self, filt, msg):
        super().__init__(f"{filt}: {msg}")
        self.filt, self.msg = filt, msg


def static_check(code):
    """The parsed tree; Reject when the task lacks a piece or uses a stochastic operator:
    anywhere in forward and module-level code, as a module class in __init__ (random
    parameter initialisation is fine); get_inputs and get_init_inputs are not scanned."""
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        raise Reject("static", f"syntax error at line {e.lineno}: {e.msg}") from None
    top = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    for need in ("Model", "get_inputs", "get_init_inputs"):
        if need not in top:
            raise Reject("static", f"no top-level {need}")
    def scan(node, modules_only):
        for sub in ast.walk(node):
            name = sub.attr if isinstance(sub, ast.Attribute) else (
                sub.id if isinstance(sub, ast.Name) else None)
            if name in STOCHASTIC and (not modules_only or name[:1].isupper()):
                raise Reject("static", f"stochastic operator {name} (line {sub.lineno})")

    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in ("get_inputs", "get_init_inputs"):
            continue  # random inputs belong there
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                # Random parameter initialisation in __init__ is seeded and fine; a stochastic
                # module built there (nn.Dropout) is not.
                init = isinstance(item, ast.FunctionDef) and item.name == "__init__"
                scan(item, init)
            continue
        scan(node, False)
    return tree


def ast_features(tree):
    feats = Counter()

    def label(n):
        if isinstance(n, ast.Attribute):
            return "." + n.attr
        if isinstance(n, ast.Name):
            return n.id if n.id in TORCH_NAMES else "Name"
        return type(n).__name__

    for node in ast.walk(tree):
        if isinstance(node, (ast.Load, ast.Store, ast.Del)):
            continue
        me = label(node)
        feats[me] += 1
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.Load, ast.Store, ast.Del)):
                feats[(me, label(child))] += 1
    return feats


def dice(a, b):
    total = sum(a.values()) + sum(b.values())
    if not total:
        return 0.0
    return 2.0 * sum((a & b).values()) / total


class Corpus:
    """The decontamination tree: every .py file under root, as feature multisets."""

    def __init__(self, root):
        self.root, self.items = root, []
        if not root:
            return
        if not os.path.isdir(root):
            raise ValueError(f"{root}: no such directory (the tree to decontaminate against)")
        for dirpath, dirs, files in os.walk(root):
            dirs.sort()
            for f in sorted(files):
                if not f.endswith(".py"):
                    continue
                path = os.path.join(dirpath, f)
                try:
                    with open(path, encoding="utf-8", errors="replace") as fh:
                        tree = ast.parse(fh.read())
                except (SyntaxError, ValueError, OSError):
                    continue
                self.items.append((os.path.relpath(path, root), ast_features(tree)))

    def nearest(self, tree):
        """(score, relative path) of the most similar file, (0.0, None) for an empty corpus."""
        feats = ast_features(tree)
        best = (0.0, None)
        for rel, f in self.items:
            s = dice(feats, f)
            if s > best[0]:
                best = (s, rel)
        return best


def _outputs(out):
    import torch
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _outputs(o)]
    return []


def _sync(device):
    import torch
    if device == "cuda":
        torch.cuda.synchronize()


def _time_ms(fn, device, budget_s=0.3, max_reps=50):
    """Median wall time of fn in ms: 2 warm-ups, then repeats until budget_s or max_reps."""
    for _ in range(2):
        fn()
    _sync(device)
    times, t_end = [], time.perf_counter() + budget_s
    while len(times) < 3 or (len(times) < max_reps and time.perf_counter() < t_end):
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def load_task(code):
    ns = {"__name__": "synth_task"}
    exec(compile(code, "<synth task>", "exec"), ns)  # our own composed code (see the header)
    return ns


def _inputs(ns, seed, device):
    import torch
    torch.manual_seed(seed)
    return [x.to(device) if isinstance(x, torch.Tensor) else x for x in ns["get_inputs"]()]


def run_filters(code, cfg, corpus):
    """Run every filter on code. Returns a result dict: "filters" {name: {ok, ...}} in order,
    "ok", "reason" (the first failure), "eager_ms", "compile_ms". Never raises for a bad task."""
    import torch
    device = cfg.get("device", "cpu")
    res = {"filters": {}, "ok": False, "reason": None, "eager_ms": None, "compile_ms": None}
    F = res["filters"]
    try:
        tree = static_check(code)
        F["static"] = {"ok": True}
        if corpus is not None and corpus.items:
            score, near = corpus.nearest(tree)
            F["similarity"] = {"ok": score <= cfg.get("max_similarity", 0.9),
                               "max": round(score, 4), "nearest": near}
            if not F["similarity"]["ok"]:
                raise Reject("similarity", f"AST similarity {score:.3f} to {near} > "
                             f"{cfg.get('max_similarity', 0.9)}")
        try:
            ns = load_task(code)
            torch.manual_seed(0)
            model = ns["Model"](*ns["get_init_inputs"]()).to(device).eval()
            x1 = _inputs(ns, 1, device)
            with torch.no_grad():
                out1 = _outputs(model(*x1))
        except Exception as e:
            raise Reject("eager", f"{type(e).__name__}: {str(e)[:300]}") from None
        if not out1:
            raise Reject("eager", "forward returned no tensor")
        if not all(torch.isfinite(o).all() for o in out1 if o.is_floating_point()):
            raise Reject("eager", "non-finite output (NaN or Inf)")
        F["eager"] = {"ok": True, "shape": [list(o.shape) for o in out1]}
        with torch.no_grad():
            again = _outputs(model(*[t.clone() if isinstance(t, torch.Tensor) else t
                                     for t in _inputs(ns, 1, device)]))
        if len(again) != len(out1) or not all(torch.equal(a, b) for a, b in zip(out1, again)):
            raise Reject("deterministic", "two runs on the same inputs disagree")
        F["deterministic"] = {"ok": True}
        for o in out1:
            if o.numel() > 1 and torch.equal(o.max(), o.min()):
                raise Reject("informative", "constant output")
        x2 = _inputs(ns, 2, device)
        with torch.no_grad():
            out2 = _outputs(model(*x2))
        if all(torch.allclose(a.double(), b.double(), rtol=1e-5, atol=1e-6)
               for a, b in zip(out1, out2)):
            raise Reject("informative", "outputs indistinguishable across input sets")
        F["informative"] = {"ok": True}
        budget = cfg.get("timing_ms", 300) / 1e3
        with torch.no_grad():
            eager = _time_ms(lambda: model(*x1), device, budget)
        res["eager_ms"] = round(eager, 4)
        lo, hi = cfg.get("min_ms", 1.0), cfg.get("max_ms", 100.0)
        F["runtime"] = {"ok": lo <= eager <= hi, "eager_ms": res["eager_ms"]}
        if eager < lo:
            raise Reject("runtime", f"too fast: eager {eager:.3f} ms < {lo} ms")
        if eager > hi:
            raise Reject("runtime", f"too slow: eager {eager:.3f} ms > {hi} ms")
        try:
            torch._dynamo.reset()
            cmodel = torch.compile(model, backend=cfg.get("compile_backend", "inductor"))
            with torch.no_grad():
                cout = _outputs(cmodel(*x1))
                ctime = _time_ms(lambda: cmodel(*x1), device, budget)
        except Exception as e:
            raise Reject("compile", f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}") from None
        if len(cout) != len(out1) or not all(
                torch.allclose(a.float(), b.float(), rtol=1e-2, atol=1e-2, equal_nan=True)
                for a, b in zip(out1, cout)):
            raise Reject("compile", "torch.compile output differs from eager")
        res["compile_ms"] = round(ctime, 4)
        F["compile"] = {"ok": True, "compile_ms": res["compile_ms"]}
        res["ok"] = True
    except Reject as r:
        F.setdefault(r.filt, {})
        F[r.filt].update({"ok": False, "reason": r.msg})
        res["reason"] = str(r)
    return res
