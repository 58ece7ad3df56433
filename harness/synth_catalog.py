"""synth_catalog.py - the operator catalog of `cuda-agent synth`: crawled from the installed torch
(and transformers when it is installed), kept as JSON.

What introspection can tell (which nn modules and functional ops exist, their signatures and
constructor arguments with defaults) comes from torch itself. What it cannot tell (the input
ranks an operator accepts, how it maps an input shape to an output shape, which constructor
arguments are sizes tied to the input, whether it is stochastic) comes from RULES below, a
checked-in table. An operator torch has but RULES does not cover is listed under "uncovered" with
the reason, so the catalog says exactly what it left out. A rule that names a constructor argument
the installed torch does not have is an error, never a silent guess.

The catalog is deterministic: entries sorted by name, signatures as inspect prints them, no
addresses, and a fingerprint (sha256 of the canonical JSON of the entries) that the store keys
compositions by. Users extend it with entries of the same form (validate_entry() checks them).
"""
import hashlib
import importlib
import inspect
import json

SCHEMA = "cuda-agent-synth-catalog/1"

# Shape rules the composer knows (synth_compose.apply_rule): an entry picks one by name.
SHAPE_RULES = {
    "same": "output shape = input shape (elementwise, normalisation, softmax over a dim)",
    "last": "last dim becomes the value of the constructor argument named by 'out'",
    "conv": "N-d convolution: channels -> out_channels, spatial (s + 2p - k) // stride + 1",
    "convT": "N-d transposed convolution: spatial (s - 1) * stride - 2p + k",
    "pool": "N-d pooling: spatial (s - k) // stride + 1 (stride defaults to k)",
    "adaptive": "N-d adaptive pooling: spatial dims become output_size",
    "reduce": "the dim named by 'dim' is removed (keepdim=False)",
    "flatten": "dims 1.. are merged into one",
}

# Size templates for constructor arguments: "@channels" (dim 1 of the input), "@last" (last
# dim), "@groups" (a divisor of dim 1), "~channels"/"~features" (a new size the composer picks),
# "~kernel" (an odd kernel size that fits the spatial dims); anything else is a literal.
SIZE_TEMPLATES = ("@channels", "@last", "@groups", "~channels", "~features", "~kernel")

ALL_RANKS = [2, 3, 4, 5]


def _act(cost=1):
    return {"kind": "module", "ranks": ALL_RANKS, "rule": "same", "init": {}, "cost": cost}


def _fn(call, ranks=None, rule="same", cost=1, **extra):
    e = {"kind": "function", "call": call, "ranks": ranks or ALL_RANKS, "rule": rule,
         "cost": cost}
    e.update(extra)
    return e


def _conv(n, transposed=False):
    init = {"in_channels": "@channels", "out_channels": "~channels", "kernel_size": "~kernel"}
    if transposed:
        init["stride"] = 2
    return {"kind": "module", "ranks": [n + 2], "rule": "convT" if transposed else "conv",
            "spatial": n, "init": init, "cost": "conv"}


def _pool(n, kind):
    if kind == "adaptive":
        return {"kind": "module", "ranks": [n + 2], "rule": "adaptive", "spatial": n,
                "init": {"output_size": 4}, "cost": 1}
    return {"kind": "module", "ranks": [n + 2], "rule": "pool", "spatial": n,
            "init": {"kernel_size": 2}, "cost": 1}


RULES = {
    # activations: elementwise
    **{f"nn.{n}": _act() for n in (
        "ReLU", "ReLU6", "GELU", "SiLU", "Mish", "Tanh", "Sigmoid", "LeakyReLU", "ELU", "SELU",
        "CELU", "Hardswish", "Hardsigmoid", "Hardtanh", "Softplus", "Softsign", "Tanhshrink",
        "Hardshrink", "Softshrink", "LogSigmoid")},
    "nn.Softmax": {**_act(4), "init": {"dim": -1}},
    "nn.LogSoftmax": {**_act(4), "init": {"dim": -1}},
    "nn.Softmin": {**_act(4), "init": {"dim": -1}},
    "nn.GLU": {"kind": "module", "ranks": ALL_RANKS, "rule": "same", "init": {"dim": 1},
               "cost": 1, "halves": 1, "note": "halves dim 1; the composer keeps it even"},
    # normalisation
    "nn.LayerNorm": {"kind": "module", "ranks": [2, 3, 4], "rule": "same",
                     "init": {"normalized_shape": "@last"}, "cost": 5},
    "nn.RMSNorm": {"kind": "module", "ranks": [2, 3, 4], "rule": "same",
                   "init": {"normalized_shape": "@last"}, "cost": 4},
    "nn.BatchNorm1d": {"kind": "module", "ranks": [2, 3], "rule": "same",
                       "init": {"num_features": "@channels"}, "cost": 2},
    "nn.BatchNorm2d": {"kind": "module", "ranks": [4], "rule": "same",
                       "init": {"num_features": "@channels"}, "cost": 2},
    "nn.BatchNorm3d": {"kind": "module", "ranks": [5], "rule": "same",
                       "init": {"num_features": "@channels"}, "cost": 2},
    "nn.InstanceNorm2d": {"kind": "module", "ranks": [4], "rule": "same",
                          "init": {"num_features": "@channels"}, "cost": 5},
    "nn.GroupNorm": {"kind": "module", "ranks": [3, 4, 5], "rule": "same",
                     "init": {"num_groups": "@groups", "num_channels": "@channels"}, "cost": 5},
    # linear and convolution
    "nn.Linear": {"kind": "module", "ranks": [2, 3], "rule": "last", "out": "out_features",
                  "init": {"in_features": "@last", "out_features": "~features"},
                  "cost": "linear"},
    "nn.Conv1d": _conv(1), "nn.Conv2d": _conv(2), "nn.Conv3d": _conv(3),
    "nn.ConvTranspose1d": _conv(1, True), "nn.ConvTranspose2d": _conv(2, True),
    "nn.ConvTranspose3d": _conv(3, True),
    # pooling
    "nn.MaxPool1d": _pool(1, "max"), "nn.MaxPool2d": _pool(2, "max"),
    "nn.MaxPool3d": _pool(3, "max"), "nn.AvgPool1d": _pool(1, "avg"),
    "nn.AvgPool2d": _pool(2, "avg"), "nn.AvgPool3d": _pool(3, "avg"),
    "nn.AdaptiveAvgPool1d": _pool(1, "adaptive"), "nn.AdaptiveAvgPool2d": _pool(2, "adaptive"),
    "nn.AdaptiveMaxPool2d": _pool(2, "adaptive"), "nn.AdaptiveAvgPool3d": _pool(3, "adaptive"),
    "nn.Flatten": {"kind": "module", "ranks": [3, 4, 5], "rule": "flatten", "init": {},
                   "cost": 0},
    # stochastic: in the catalog so that the determinism filter has something to reject, never
    # composed unless asked for (--allow-stochastic)
    "nn.Dropout": {**_act(), "init": {"p": 0.1}, "stochastic": True},
    "nn.AlphaDropout": {**_act(), "init": {"p": 0.1}, "stochastic": True},
    # functional ops
    **{f"F.{n}": _fn(f"F.{n}({{x}})") for n in (
        "relu", "gelu", "silu", "mish", "elu", "selu", "leaky_relu", "hardswish", "hardsigmoid",
        "softplus", "softsign", "tanhshrink", "relu6", "logsigmoid", "hardtanh")},
    "F.softmax": _fn("F.softmax({x}, dim=-1)", cost=4),
    "F.log_softmax": _fn("F.log_softmax({x}, dim=-1)", cost=4),
    "F.normalize": _fn("F.normalize({x}, dim=1)", cost=3),
    "F.dropout": _fn("F.dropout({x}, p=0.1, training=True)", stochastic=True),
    # torch functions
    **{f"torch.{n}": _fn(f"torch.{n}({{x}})") for n in (
        "tanh", "sigmoid", "abs", "sin", "cos", "erf", "square", "neg", "relu", "floor")},
    "torch.clamp": _fn("torch.clamp({x}, min=-0.5, max=0.5)"),
    "torch.cumsum": _fn("torch.cumsum({x}, dim=-1)", cost=2),
    "torch.sum": _fn("torch.sum({x}, dim=-1)", rule="reduce", dim=-1),
    "torch.mean": _fn("torch.mean({x}, dim=-1)", rule="reduce", dim=-1),
    "torch.amax": _fn("torch.amax({x}, dim=-1)", rule="reduce", dim=-1),
    "torch.logsumexp": _fn("torch.logsumexp({x}, dim=-1)", rule="reduce", dim=-1, cost=4),
    "torch.argmax": _fn("torch.argmax({x}, dim=-1)", rule="reduce", dim=-1, integer=True,
                        note="integer output: ends a chain"),
}

# Why a crawled operator is not in RULES, by name pattern (the first match wins).
UNCOVERED_REASONS = (
    (("Loss",), "a loss: takes a target, not one tensor"),
    (("Module", "Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict",
      "Container", "Identity"), "a container, not an operator"),
)


def _uncovered_reason(name):
    short = name.split(".", 1)[1]
    for pats, why in UNCOVERED_REASONS:
        if any(p in short for p in pats):
            return why
    return "no shape rule in the checked-in table (add an entry with synth catalog --extra)"


def _signature(obj, init):
    target = obj.__init__ if init else obj
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        doc = (getattr(obj, "__doc__", None) or "").strip().splitlines()
        return (doc[0] if doc else ""), None
    params = [p for p in sig.parameters.values() if p.name != "self"]
    args = []
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        a = {"name": p.name}
        if p.default is not p.empty:
            d = p.default
            a["default"] = d if isinstance(d, (int, float, bool, str, type(None))) else repr(d)
        args.append(a)
    return str(sig.replace(parameters=params)), args


def validate_entry(name, e, args=None):
    """Raise ValueError naming the entry and the field when e is not a usable entry."""
    def bad(msg):
        raise ValueError(f"catalog entry {name!r}: {msg}")
    if not isinstance(e, dict):
        bad("must be a JSON object")
    kind = e.get("kind")
    if kind not in ("module", "function"):
        bad(f"kind must be \"module\" or \"function\", not {kind!r}")
    if e.get("rule") not in SHAPE_RULES:
        bad(f"rule must be one of {', '.join(sorted(SHAPE_RULES))}, not {e.get('rule')!r}")
    ranks = e.get("ranks")
    if (not isinstance(ranks, list) or not ranks
            or not all(isinstance(r, int) and 1 <= r <= 5 for r in ranks)):
        bad("ranks must be a non-empty list of integers 1..5")
    if kind == "function":
        call = e.get("call")
        if not isinstance(call, str) or "{x}" not in call:
            bad("a function needs \"call\", a template holding {x}, e.g. \"torch.erf({x})\"")
    else:
        if not name.startswith("nn.") and "module" not in e:
            bad("a module entry is named nn.<Class> or gives \"module\" (the class to import)")
        init = e.get("init", {})
        if not isinstance(init, dict):
            bad("init must be an object of constructor argument -> value or size template")
        if args is not None:
            known = {a["name"] for a in args}
            for k in init:
                if k not in known:
                    bad(f"init names {k!r}, which the installed constructor does not take")
    if e.get("rule") in ("conv", "convT", "pool", "adaptive") and e.get("spatial") not in (1, 2, 3):
        bad(f"rule {e['rule']} needs \"spatial\": 1, 2 or 3")
    if e.get("rule") == "last" and e.get("out") not in e.get("init", {}):
        bad("rule last needs \"out\", a constructor argument named in init")


def _crawl_torch(torch):
    nn, F = torch.nn, torch.nn.functional
    entries, uncovered = {}, {}
    for cname in sorted(dir(nn)):
        obj = getattr(nn, cname)
        if not (inspect.isclass(obj) and issubclass(obj, nn.Module)) or cname.startswith("_"):
            continue
        name = f"nn.{cname}"
        if name not in RULES:
            uncovered[name] = _uncovered_reason(name)
            continue
        sig, args = _signature(obj, True)
        e = dict(RULES[name], signature=sig, constructor_args=args or [], source="torch")
        validate_entry(name, e, args)
        entries[name] = e
    for fname in sorted(dir(F)):
        obj = getattr(F, fname)
        if fname.startswith("_") or not callable(obj) or inspect.isclass(obj) \
                or inspect.ismodule(obj):
            continue
        name = f"F.{fname}"
        if name not in RULES:
            uncovered[name] = _uncovered_reason(name)
            continue
        sig, _ = _signature(obj, False)
        entries[name] = dict(RULES[name], signature=sig, source="torch")
    for name, rule in sorted(RULES.items()):
        if name in entries or not name.startswith("torch."):
            continue
        obj = getattr(torch, name.split(".", 1)[1], None)
        if obj is None:
            uncovered[name] = f"not in torch {torch.__version__}"
            continue
        sig, _ = _signature(obj, False)
        entries[name] = dict(rule, signature=sig, source="torch")
    for name in sorted(RULES):
        if name not in entries and name not in uncovered:
            uncovered[name] = f"in the rule table but not in torch {torch.__version__}"
    return entries, uncovered


def _crawl_transformers():
    """transformers' activation modules (classes with __init__ and forward): single-op tasks,
    as in the paper. Returns (entries, skipped reason or None)."""
    try:
        acts = importlib.import_module("transformers.activations")
    except Exception as e:  # not installed, or broken
        return {}, f"transformers is not importable ({type(e).__name__}: {e})"
    import torch.nn as nn
    entries = {}
    for cname in sorted(dir(acts)):
        obj = getattr(acts, cname)
        if not (inspect.isclass(obj) and issubclass(obj, nn.Module)) or cname.startswith("_"):
            continue
        if obj.__module__ != acts.__name__:
            continue  # re-exported torch classes
        sig, args = _signature(obj, True)
        required = [a for a in (args or []) if "default" not in a]
        if required:
            continue  # needs constructor arguments we cannot size
        entries[f"transformers.{cname}"] = {
            "kind": "module", "module": f"transformers.activations.{cname}", "ranks": ALL_RANKS,
            "rule": "same", "init": {}, "cost": 2, "single": True, "signature": sig,
            "constructor_args": args or [], "source": "transformers"}
    return entries, None


def fingerprint(entries):
    canon = json.dumps(entries, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()[:16]


def crawl(extra=(), with_transformers=True):
    """The catalog as a dict. extra: user entry dicts ({name: entry}) merged over the crawl."""
    import torch
    entries, uncovered = _crawl_torch(torch)
    notes = []
    if with_transformers:
        tentries, why = _crawl_transformers()
        if why:
            notes.append(f"transformers skipped: {why}")
        entries.update(tentries)
    for user in extra:
        for name, e in sorted(user.items()):
            validate_entry(name, e)
            entries[name] = dict(e, source=e.get("source", "user"))
            uncovered.pop(name, None)
    entries = dict(sorted(entries.items()))
    return {"schema": SCHEMA, "torch": torch.__version__, "fingerprint": fingerprint(entries),
            "ops": entries, "uncovered": dict(sorted(uncovered.items())), "notes": notes}


def load(path):
    """A catalog file (as crawl() writes it), validated; ValueError naming the problem."""
    with open(path) as f:
        try:
            cat = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not JSON: {e}") from None
    if not isinstance(cat, dict) or cat.get("schema") != SCHEMA or not isinstance(
            cat.get("ops"), dict):
        raise ValueError(f"{path}: not a synth catalog (schema {SCHEMA!r} with \"ops\")")
    for name, e in cat["ops"].items():
        validate_entry(name, e)
    cat["fingerprint"] = fingerprint(dict(sorted(cat["ops"].items())))
    return cat
