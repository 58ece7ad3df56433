"""policy/check.py - the static policy for an agent's model_new.py (DESIGN §4 step 2).

harness/policy_model_new.py builds the package `policy` from the sources the evaluator embeds
and calls main(sys.argv) here, for
    python3 -I -S -B - [--rules cuda-agent|kernelbench] PATH/model_new.py
Standard library only; torch is not needed and never imported.

Prints one JSON object on stdout:
    {"violations": [{"line": N, "rule": "...", "message": "...", "advisory": bool}, ...],
     "truncated": K}
and exits 0 once the file was checked (violations or not), or 2 when it cannot be read or does
not parse (then with a "syntax" violation when there is a line to point at). Any other exit is a
bug in this script, and the evaluator treats it as a failed check, never as a pass.

The file is parsed with ast and checked in two passes:
  1. a context-free walk over every node: imports, dangerous built-ins, dunder and private
     attributes, try/except, with, decorators, global/nonlocal, generators, module-level code,
     classes, and torch names outside the known vocabulary;
  2. an analysis of ModelNew's methods that follows values: forward's arguments, results of
     cuda_extension calls, tensors created with torch.empty & co. and ModelNew's parameters are
     tensors; arithmetic, comparisons, indexing, truth tests, iteration and method calls on them
     are torch computation, while the same on shapes and Python numbers is fine. Helpers are
     analysed with the kinds of the arguments they are called with. Names are judged by what
     they were bound to, so renaming through imports or assignments does not hide anything;
     what cannot be judged statically (attribute access by computed name, exec, ...) is refused.
Rule ids and what each one is for: docs/internals/policy.md.

Two rule sets. `cuda-agent` (the default, SKILL.md's rules) runs both passes, and every finding
decides. `kernelbench` is what KernelBench accepts: torch computation, nn modules, helper
classes, decorators and fallbacks in ModelNew are allowed, so the value analysis (pass 2) is not
run and most context-free findings are notes ("advisory": true); what still decides is what
reaches beyond the model: importing modules other than torch and a few pure standard-library
ones, importing the reference, code or namespaces by computed names (exec, eval, compile,
globals, __import__...), files and the terminal, and the dunder attributes that reach Python's
internals (__globals__, __subclasses__, __builtins__...).
"""
import ast
import json
import sys

EXIT_INPUT = 2
MAX_BYTES = 4 * 1024 * 1024
MAX_VIOLATIONS = 200

ALLOWED_MODULES = ("torch", "torch.nn", "cuda_extension", "math", "typing", "__future__")
# kernelbench rules: top-level modules that compute or describe and reach nothing outside.
KB_MODULES = {"torch", "cuda_extension", "math", "typing", "__future__", "numpy", "functools",
              "itertools", "collections", "dataclasses", "numbers", "operator", "enum", "abc",
              "warnings", "einops"}
KB_BANNED_BUILTINS = {"exec", "eval", "compile", "globals", "locals", "vars", "open", "input",
                      "breakpoint", "exit", "quit", "memoryview", "__import__"}
KB_DUNDERS = {"__globals__", "__builtins__", "__subclasses__", "__code__", "__closure__",
              "__dict__", "__bases__", "__base__", "__mro__", "__import__", "__loader__",
              "__spec__", "__getattribute__", "__func__", "__self__", "__reduce__",
              "__reduce_ex__", "__class_getitem__", "__init_subclass__", "__set_name__",
              "__file__", "__defaults__", "__kwdefaults__", "__wrapped__"}
RULES = "cuda-agent"
ALLOWED_HINT = ("model_new.py may import only torch, torch.nn (as nn), cuda_extension, math and "
                "typing")

TORCH_DTYPES = {
    "float32", "float", "float16", "half", "bfloat16", "float64", "double", "int8", "int16",
    "short", "int32", "int", "int64", "long", "uint8", "uint16", "uint32", "uint64", "bool",
    "complex64", "complex128", "cfloat", "cdouble", "float8_e4m3fn", "float8_e5m2",
    "strided", "contiguous_format", "channels_last", "preserve_format",
}
# torch.X that are values or pure information (no computation)
TORCH_INFO = {"Size", "device", "dtype", "Tensor", "finfo", "iinfo", "is_tensor", "layout",
              "memory_format", "no_grad", "inference_mode"}
CREATE_FORWARD = {"empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones",
                  "ones_like", "full", "full_like", "arange"}
CREATE_INIT = CREATE_FORWARD | {"rand", "randn", "randint", "rand_like", "randn_like",
                                "randperm", "eye", "linspace", "logspace", "tensor", "as_tensor"}
TORCH_STREAMS = {"Stream", "stream", "StreamContext", "set_stream", "ExternalStream",
                 "current_stream", "default_stream", "graph", "CUDAGraph",
                 "make_graphed_callables", "Event"}
NN_CONTAINERS = {"Module", "Parameter", "ParameterList", "ParameterDict", "ModuleList",
                 "ModuleDict", "Buffer"}

TENSOR_PROPS = {"shape", "dtype", "device", "ndim", "is_cuda", "layout", "requires_grad",
                "is_leaf"}
TENSOR_INFO = {"size", "dim", "numel", "stride", "is_contiguous", "data_ptr", "element_size",
               "get_device", "nelement", "ndimension", "storage_offset", "is_floating_point",
               "is_complex"}
# metadata-only views: never copy, never launch work
TENSOR_VIEWS = {"view", "view_as", "unsqueeze", "squeeze", "expand", "expand_as"}
TENSOR_NEW = {"new_empty", "new_zeros", "new_ones", "new_full"}
COPYING_VIEWS = {"reshape", "flatten", "contiguous", "permute", "transpose", "t", "T", "mT",
                 "as_strided", "narrow", "unfold", "to", "float", "half", "bfloat16", "double",
                 "cuda", "cpu", "clone", "detach", "type", "type_as", "repeat", "expand_copy"}

# built-ins that are fine on Python values but compute (or copy to the host) on a tensor
TENSOR_SENSITIVE = {"sum", "min", "max", "abs", "round", "pow", "divmod", "float", "int", "bool",
                    "complex", "any", "all", "sorted", "reversed", "list", "tuple", "set",
                    "iter", "next", "enumerate", "zip", "str", "repr", "ascii", "print", "hex",
                    "oct", "bin", "dict", "frozenset"}
BUILTINS_OK = TENSOR_SENSITIVE | {"len", "range", "isinstance", "slice", "ValueError",
                                  "TypeError", "RuntimeError", "NotImplementedError",
                                  "AssertionError", "IndexError", "KeyError", "Exception",
                                  "None", "True", "False", "chr", "ord", "bytes", "issubclass"}
BANNED_BUILTINS = {
    "exec": "runs code built at run time",
    "eval": "runs code built at run time",
    "compile": "builds code at run time",
    "getattr": "reaches attributes by computed names, which the policy cannot check",
    "setattr": "sets attributes by computed names, which the policy cannot check",
    "delattr": "deletes attributes by computed names, which the policy cannot check",
    "hasattr": "probes attributes by computed names, which the policy cannot check",
    "globals": "reaches the module's namespace",
    "locals": "reaches a frame's namespace",
    "vars": "reaches an object's namespace",
    "dir": "introspects objects",
    "help": "introspects objects",
    "type": "introspects or builds classes",
    "object": "is the root of class introspection",
    "id": "gives object identities, which make caching results across calls possible",
    "hash": "hashes objects, which makes caching results across calls possible",
    "memoryview": "reaches raw memory",
    "open": "opens files",
    "input": "reads the terminal",
    "breakpoint": "starts a debugger",
    "exit": "ends the process",
    "quit": "ends the process",
    "classmethod": "changes how methods bind",
    "staticmethod": "changes how methods bind",
    "property": "runs code on attribute access",
    "format": "can read attributes of its arguments through the format string",
    "map": "calls a function on each element out of the policy's sight",
    "filter": "calls a function on each element out of the policy's sight",
    "callable": "introspects objects",
    "super": "is allowed only as super().__init__() in __init__",
}
# nn.Module methods a subclass must not override (they run around forward or load the weights)
NN_MODULE_METHODS = {
    "__call__", "_call_impl", "_wrapped_call_impl", "state_dict", "load_state_dict",
    "_load_from_state_dict", "_save_to_state_dict", "named_parameters", "parameters", "buffers",
    "named_buffers", "children", "named_children", "modules", "named_modules", "to", "cuda",
    "cpu", "eval", "train", "apply", "_apply", "half", "float", "double", "bfloat16", "type",
    "share_memory", "requires_grad_", "zero_grad", "register_buffer", "register_parameter",
    "add_module", "register_module", "get_parameter", "get_buffer", "get_submodule",
    "register_forward_hook", "register_forward_pre_hook", "register_full_backward_hook",
    "register_backward_hook", "extra_repr", "__getattr__", "__setattr__", "__delattr__",
    "__getstate__", "__setstate__", "__dir__", "__repr__", "compile",
}

# methods of Python containers that may hold tensors without touching their values
CONTAINER_METHODS = {"append", "extend", "insert", "add", "update", "setdefault", "index",
                     "count", "get", "pop", "remove", "copy", "items", "values", "keys"}

# Kinds of values: a tensor; a cuda_extension result (a tensor, or a tuple of them: indexing,
# unpacking and iterating it are fine, computing on it is not); a container of tensors; any other
# Python value (numbers, shapes, dtypes, devices); an nn module; unknown.
T, R, S, O, M, U = "T", "R", "S", "O", "M", "U"
RANK = {T: 6, R: 5, S: 4, M: 3, O: 1, U: 0}
# built-ins that only walk a container: fine on a cuda_extension result
CONTAINER_BUILTINS = {"list", "tuple", "iter", "next", "enumerate", "zip", "reversed", "set",
                      "frozenset", "dict"}


def tag(kind):
    return kind[0]


def tensorish(kind):
    return tag(kind) in ("T", "R")


def sequence(kind):
    """Holds tensors that indexing, unpacking or iterating hands out."""
    return tag(kind) in ("S", "R")


def join(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return a if RANK.get(tag(a), 2) >= RANK.get(tag(b), 2) else b


def dunder(name):
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


class Violations:
    def __init__(self):
        self.items = []
        self.seen = set()

    def add(self, node, rule, message, strong=False):
        """strong: the finding decides under the kernelbench rules too."""
        line = getattr(node, "lineno", 1) or 1
        key = (line, getattr(node, "col_offset", 0), rule, message)
        if key in self.seen:
            return
        self.seen.add(key)
        advisory = RULES == "kernelbench" and not strong
        self.items.append({"line": line, "rule": rule, "message": message,
                           "advisory": advisory})


def src(node):
    """A short source rendering of node for messages."""
    try:
        text = ast.unparse(node)
    except Exception:  # ast.unparse is missing before Python 3.9
        text = type(node).__name__
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:57] + "..."


class Ctx:
    def __init__(self, mode, fn_name):
        self.mode = mode          # "init" or "forward"
        self.fn_name = fn_name
        self.env = {}
        self.returns = None


class Checker:
    def __init__(self, tree):
        self.tree = tree
        self.v = Violations()
        self.imports = {}        # alias -> dotted path
        self.functions = {}      # module-level def name -> node
        self.constants = set()   # module-level constant names
        self.module_names = set()
        self.classes = {}
        self.model = None
        self.methods = {}        # ModelNew method name -> node
        self.self_kinds = {}     # ModelNew attribute -> kind, from __init__
        self.param_names = set()   # parameters and buffers declared by helper classes
        self.memo = {}
        self.bound_cache = {}
        self.active = set()
        self.cuda_calls = 0

    # ---- helpers ----

    def add(self, node, rule, message, strong=False):
        self.v.add(node, rule, message, strong)

    def resolve(self, node):
        """Dotted path of a name or attribute chain rooted at an import, else None."""
        if isinstance(node, ast.Name):
            return self.imports.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            return base + "." + node.attr if base else None
        return None

    def torch_path_problem(self, path):
        """(rule, message) when a torch path is outside the known vocabulary, else None."""
        parts = path.split(".")
        if parts[0] != "torch" or len(parts) == 1:
            return None
        head = parts[1]
        if head == "nn":
            if len(parts) == 2:
                return None
            sub = parts[2]
            if sub == "functional":
                return ("torch-compute", "`%s` is torch computation: model_new.py may not run "
                        "torch operations; do this in your CUDA kernel" % path)
            if sub == "init" or sub in NN_CONTAINERS or sub[:1].isupper():
                if sub == "init" and len(parts) > 4:
                    return ("torch-compute", "`%s` is not part of nn.init" % path)
                return None
            return ("torch-compute", "`%s` is not available in model_new.py: nn is for "
                    "declaring parameters and submodules in __init__" % path)
        if head == "cuda":
            if len(parts) >= 3 and parts[2] in TORCH_STREAMS:
                return ("stream", "`%s`: streams, events and graphs belong to the evaluator; "
                        "forward runs on the current stream, and your kernels launch on the "
                        "stream the binding passes" % path)
            return ("torch-compute", "`%s` is not available in model_new.py: call your kernels "
                    "through cuda_extension" % path)
        if head in TORCH_DTYPES or head in TORCH_INFO or head in CREATE_INIT:
            if len(parts) > 2 and head not in TORCH_DTYPES:
                return ("torch-compute", "`%s` is not available in model_new.py" % path)
            return None
        return ("torch-compute", "`%s` is torch API beyond tensor creation: model_new.py runs "
                "no torch computation, in __init__ or forward (__init__ creates parameters and "
                "nn modules; forward calls cuda_extension functions, may create tensors such as "
                "torch.empty and read .shape/.device); do the computation in your kernel" % path)

    def path_kind(self, path):
        parts = path.split(".")
        root = parts[0]
        if self.torch_path_problem(path):
            return ("DENIED",)      # reported by the context-free pass
        if root == "cuda_extension":
            return ("F", path) if len(parts) > 1 else ("MOD", path)
        if root == "math":
            return ("X", path) if len(parts) > 1 else ("MOD", path)
        if root in ("typing", "__future__"):
            return (O,)
        if root == "torch":
            if len(parts) == 1:
                return ("MOD", path)
            head = parts[1]
            if head == "nn":
                if len(parts) == 2:
                    return ("MOD", path)
                if parts[2] == "init":
                    return ("I", path) if len(parts) > 3 else ("MOD", path)
                return ("N", parts[2])
            if head in TORCH_DTYPES:
                return (O,)
            if head in CREATE_INIT and len(parts) == 2:
                return ("C", head)
            if head in TORCH_INFO:
                return ("INFO", head)
        return (U,)

    # ---- pass 1: context-free rules ----

    def check_imports(self):
        for node in self.tree.body:
            if isinstance(node, ast.Import):
                for a in node.names:
                    if self.import_ok(node, a.name, None):
                        if a.asname:
                            self.imports[a.asname] = a.name
                        else:
                            root = a.name.split(".")[0]
                            self.imports[root] = root
            elif isinstance(node, ast.ImportFrom):
                mod = node.module or ""
                if node.level:
                    self.add(node, "import", "relative import `from %s%s import ...`: %s"
                             % ("." * node.level, mod, ALLOWED_HINT))
                    continue
                for a in node.names:
                    if a.name == "*":
                        self.add(node, "import", "`from %s import *` hides which names are "
                                 "used: import the names you need" % mod)
                        continue
                    if self.import_ok(node, mod, a.name):
                        self.imports[a.asname or a.name] = mod + "." + a.name

    def import_ok(self, node, mod, name):
        full = mod + "." + name if name else mod
        if mod in ("model", "reference") or mod.startswith("model."):
            self.add(node, "import", "importing the reference (`%s`): ModelNew must compute "
                     "with your kernels, not call or subclass Model" % full, strong=True)
            return False
        if RULES == "kernelbench":
            root = mod.split(".")[0]
            private = any(part.startswith("_") for part in mod.split(".")[1:])
            if root in KB_MODULES and not private and full != "torch.multiprocessing":
                return True
            self.add(node, "import", "`import %s`: under the kernelbench rules model_new.py may "
                     "import torch and its public modules, cuda_extension, numpy, einops and "
                     "pure standard-library modules (math, typing, functools, itertools, "
                     "collections, dataclasses, numbers, operator, enum, abc, warnings)" % full,
                     strong=True)
            return False
        if mod not in ALLOWED_MODULES:
            problem = self.torch_path_problem(mod) if mod.startswith("torch.") else None
            self.add(node, problem[0] if problem else "import", "`import %s`: %s" %
                     (mod, problem[1] if problem else ALLOWED_HINT))
            return False
        if name is None:
            return True
        if mod == "torch":
            if name == "nn" or name in TORCH_DTYPES or name in TORCH_INFO or \
                    name in CREATE_INIT:
                return True
        elif mod == "torch.nn":
            if name == "init" or name in NN_CONTAINERS or name[:1].isupper():
                return True
        else:
            return True
        problem = self.torch_path_problem(full)
        self.add(node, problem[0] if problem else "import",
                 "`from %s import %s`: %s" % (mod, name,
                                              problem[1] if problem else ALLOWED_HINT))
        return False

    def check_module_level(self):
        for node in self.tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            if isinstance(node, ast.FunctionDef):
                self.functions[node.name] = node
                continue
            if isinstance(node, ast.ClassDef):
                self.classes[node.name] = node
                continue
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and \
                    isinstance(node.value.value, str):
                continue
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if node.value is None or not all(isinstance(t, ast.Name) for t in targets):
                    self.add(node, "structure", "module-level `%s`: only constants (NAME = "
                             "number, string, tuple) may be assigned at module level" % src(node))
                    continue
                if not self.constant_expr(node.value):
                    rule = "state" if isinstance(node.value, (ast.List, ast.Dict, ast.Set,
                                                              ast.ListComp, ast.DictComp,
                                                              ast.SetComp)) else "structure"
                    self.add(node, rule, "module-level `%s`: only constants (numbers, strings, "
                             "tuples, torch dtypes) may be assigned at module level; mutable "
                             "module state could carry results across calls" % src(node))
                for t in targets:
                    self.constants.add(t.id)
                continue
            if isinstance(node, ast.If) and "__name__" in ast.dump(node.test):
                self.add(node, "structure", "`if __name__ == ...` block: model_new.py is "
                         "imported, never run; remove it")
                continue
            self.add(node, "structure", "module-level `%s`: code at module level runs at import; "
                     "model_new.py holds only imports, constants, functions and classes"
                     % src(node))
        self.module_names = set(self.imports) | set(self.functions) | set(self.classes) | \
            self.constants

    def constant_expr(self, node):
        if isinstance(node, ast.Constant):
            return True
        if isinstance(node, ast.Tuple):
            return all(self.constant_expr(e) for e in node.elts)
        if isinstance(node, ast.UnaryOp):
            return self.constant_expr(node.operand)
        if isinstance(node, ast.BinOp):
            return self.constant_expr(node.left) and self.constant_expr(node.right)
        if isinstance(node, ast.Name) and node.id in self.constants:
            return True
        if isinstance(node, (ast.Attribute, ast.Name)):
            path = self.resolve(node)
            return bool(path) and tag(self.path_kind(path)) == O     # torch.float32
        return False

    def bound_names(self, fn):
        """Names bound in a function's own scope (params and assignments)."""
        cached = self.bound_cache.get(id(fn))
        if cached is not None:
            return cached
        names = set()
        self.bound_cache[id(fn)] = names
        a = fn.args
        for p in getattr(a, "posonlyargs", []) + a.args + a.kwonlyargs:
            names.add(p.arg)
        for p in (a.vararg, a.kwarg):
            if p:
                names.add(p.arg)
        body = fn.body if isinstance(fn.body, list) else [fn.body]
        stack = list(body)
        while stack:
            n = stack.pop()
            if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
                names.add(n.id)
            elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(n.name)
                continue
            elif isinstance(n, ast.Lambda):
                continue
            elif isinstance(n, ast.arg):
                names.add(n.arg)
            elif isinstance(n, ast.ExceptHandler) and n.name:
                names.add(n.name)
            stack.extend(ast.iter_child_nodes(n))
        return names

    def walk(self, node, scopes, fn=None, cls=None):
        """The context-free rules, over every node."""
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for d in getattr(node, "decorator_list", []):
                self.add(d, "decorator", "decorator `@%s`: decorators change what a function "
                         "does out of the policy's sight; remove it" % src(d))
                self.walk(d, scopes, fn, cls)
            if isinstance(node, ast.AsyncFunctionDef):
                self.add(node, "generator", "async def: forward must finish its work when it "
                         "returns; write a plain def")
            if not isinstance(node, ast.Lambda) and fn is not None:
                self.add(node, "structure", "nested function `%s`: define helpers as methods "
                         "of ModelNew or at module level" % node.name)
            a = node.args
            for d in a.defaults + [d for d in a.kw_defaults if d is not None]:
                self.walk(d, scopes, fn, cls)
            for p in getattr(a, "posonlyargs", []) + a.args + a.kwonlyargs + \
                    [x for x in (a.vararg, a.kwarg) if x]:
                if p.arg in self.imports:
                    self.add(p, "import", "parameter `%s` shadows the import of the same name: "
                             "rename it" % p.arg)
                if p.annotation is not None:
                    self.walk(p.annotation, scopes, fn, cls)
            if getattr(node, "returns", None) is not None:
                self.walk(node.returns, scopes, fn, cls)
            inner = scopes + [self.bound_names(node)]
            body = node.body if isinstance(node.body, list) else [node.body]
            for b in body:
                self.walk(b, inner, node, cls)
            return
        if isinstance(node, ast.ClassDef):
            for d in node.decorator_list:
                self.add(d, "decorator", "decorator `@%s` on a class: remove it" % src(d))
                self.walk(d, scopes, fn, cls)
            if fn is not None or cls is not None:
                self.add(node, "structure", "nested class `%s`: define classes at module "
                         "level" % node.name)
            for b in node.bases:
                self.walk(b, scopes, fn, cls)
            for b in node.body:
                self.walk(b, scopes, fn, node)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if fn is not None or cls is not None:
                self.add(node, "import", "import inside a function or class: imports go at the "
                         "top of the file (%s)" % ALLOWED_HINT)
            return
        if isinstance(node, ast.Name):
            self.check_name(node, scopes)
        elif isinstance(node, ast.Attribute):
            if self.check_attribute(node, fn, cls):
                return          # reported: the inner prefixes would only repeat it
        elif isinstance(node, ast.Call):
            self.check_call_shape(node, fn)
        elif isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try))):
            self.add(node, "fallback", "try/except: no fallbacks around your kernels; a "
                     "failing kernel must fail verification, not switch to another path")
        elif isinstance(node, ast.With):
            self.check_with(node)
        elif isinstance(node, (ast.AsyncWith, ast.AsyncFor, ast.Await, ast.Yield,
                               ast.YieldFrom)):
            words = {"Yield": "yield", "YieldFrom": "yield from", "Await": "await",
                     "AsyncFor": "async for", "AsyncWith": "async with"}
            self.add(node, "generator", "`%s`: generators and async code defer work past the "
                     "call; forward must return finished tensors" % words[type(node).__name__])
        elif isinstance(node, getattr(ast, "Match", ())) and getattr(ast, "Match", None):
            self.add(node, "generator", "match statement: write if/elif on Python values")
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            self.add(node, "scope", "`%s %s`: module and enclosing state must not change; keep "
                     "values local or on self in __init__"
                     % ("global" if isinstance(node, ast.Global) else "nonlocal",
                        ", ".join(node.names)))
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            self.check_store(node, fn)
        for child in ast.iter_child_nodes(node):
            self.walk(child, scopes, fn, cls)

    def check_name(self, node, scopes):
        name = node.id
        if dunder(name):
            self.add(node, "dunder", "`%s`: dunder names reach Python's internals; remove it"
                     % name, strong=name in KB_DUNDERS)
            return
        if isinstance(node.ctx, ast.Store) and name in self.imports:
            self.add(node, "import", "`%s` is assigned, shadowing the import of the same name: "
                     "use another name" % name)
            return
        if not isinstance(node.ctx, ast.Load) or name not in BANNED_BUILTINS:
            return
        if any(name in s for s in scopes) or name in self.module_names:
            return          # a local or module-level name, not the built-in
        if name == "super":
            return          # judged with its call (check_call_shape)
        self.add(node, "builtin", "`%s` %s: not allowed in model_new.py" %
                 (name, BANNED_BUILTINS[name]), strong=name in KB_BANNED_BUILTINS)

    def check_attribute(self, node, fn, cls):
        attr = node.attr
        if dunder(attr):
            ok = attr == "__init__" and isinstance(node.value, ast.Call) and \
                isinstance(node.value.func, ast.Name) and node.value.func.id == "super"
            if not ok:
                self.add(node, "dunder", "`.%s`: dunder attributes reach Python's internals; "
                         "only super().__init__() is allowed" % attr, strong=attr in KB_DUNDERS)
                return True
            return False
        if attr.startswith("_"):
            own = isinstance(node.value, ast.Name) and node.value.id == "self" and \
                attr in self.user_attrs
            if not own:
                self.add(node, "dunder", "`.%s`: private attributes reach torch's or Python's "
                         "internals; use the public API (your own self._name attributes are "
                         "fine)" % attr)
                return True
        if attr == "format" and isinstance(node.ctx, ast.Load):
            self.add(node, "builtin", "`.format`: format strings can read attributes of their "
                     "arguments; use an f-string")
            return True
        path = self.resolve(node)
        if path:
            problem = self.torch_path_problem(path)
            if problem:
                self.add(node, problem[0], problem[1])
                return True
            return True     # an allowed path: its prefixes are allowed too
        return False

    def check_call_shape(self, node, fn):
        f = node.func
        if isinstance(f, ast.Name) and f.id == "super":
            ok = fn is not None and fn.name == "__init__"
            parent_ok = getattr(node, "_super_init", False)
            if not (ok and parent_ok):
                self.add(node, "builtin", "`super()` is allowed only as super().__init__() in "
                         "__init__")

    def check_with(self, node):
        for item in node.items:
            e = item.context_expr
            path = self.resolve(e.func) if isinstance(e, ast.Call) else self.resolve(e)
            if path in ("torch.no_grad", "torch.inference_mode"):
                continue
            if path and path.startswith("torch.cuda"):
                continue    # reported as a stream by the attribute rule
            self.add(node, "with", "`with %s`: only `with torch.no_grad():` and "
                     "`with torch.inference_mode():` are allowed" % src(e))

    def store_root(self, target):
        while isinstance(target, (ast.Attribute, ast.Subscript)):
            target = target.value
        return target.id if isinstance(target, ast.Name) else None

    def check_store(self, node, fn):
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = list(node.targets)
        else:
            targets = [node.target]
        flat = []
        while targets:
            t = targets.pop()
            if isinstance(t, (ast.Tuple, ast.List)):
                targets.extend(t.elts)
            elif isinstance(t, ast.Starred):
                targets.append(t.value)
            else:
                flat.append(t)
        for t in flat:
            if not isinstance(t, (ast.Attribute, ast.Subscript)):
                continue
            root = self.store_root(t)
            if root is None or root == "self":
                continue        # self is judged per method in pass 2
            local = fn is not None and root in self.bound_names(fn) and \
                root not in self.module_names
            if root in self.module_names and not local:
                self.add(t, "state", "`%s` changes module-level or library state: ModelNew "
                         "keeps its state in attributes set in __init__" % src(t))

    # ---- classes ----

    def check_classes(self):
        self.user_attrs = set()
        for cls in self.classes.values():
            for n in ast.walk(cls):
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and \
                        n.value.id == "self" and isinstance(n.ctx, ast.Store):
                    self.user_attrs.add(n.attr)
                elif isinstance(n, ast.FunctionDef):
                    self.user_attrs.add(n.name)
                elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and \
                        n.func.attr.startswith("register_") and n.args and \
                        isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str):
                    self.user_attrs.add(n.args[0].value)
                    if cls.name != "ModelNew":
                        self.param_names.add(n.args[0].value)
                if cls.name != "ModelNew" and isinstance(n, ast.Assign) and \
                        isinstance(n.value, ast.Call) and \
                        (self.resolve(n.value.func) or "").endswith((".Parameter", ".Buffer")):
                    for t in n.targets:
                        if isinstance(t, ast.Attribute):
                            self.param_names.add(t.attr)
        model = self.classes.get("ModelNew")
        if model is None:
            self.add(self.tree.body[0] if self.tree.body else self.tree, "structure",
                     "no `class ModelNew(nn.Module)`: model_new.py must define it, with the "
                     "same __init__ arguments as Model and a forward that calls your kernels "
                     "through cuda_extension")
        for name, cls in self.classes.items():
            is_model = name == "ModelNew"
            if len(cls.bases) != 1 or self.resolve(cls.bases[0]) not in ("torch.nn.Module",):
                self.add(cls, "class", "`class %s(%s)`: %s must subclass nn.Module directly "
                         "(subclassing the reference Model, or anything else, brings in code "
                         "the policy does not check)"
                         % (name, ", ".join(src(b) for b in cls.bases), name))
            if cls.keywords:
                self.add(cls, "class", "`class %s(..., %s)`: metaclasses and class keywords are "
                         "not allowed" % (name, src(cls.keywords[0])))
            for item in cls.body:
                if isinstance(item, ast.FunctionDef):
                    if is_model:
                        self.methods[item.name] = item
                    allowed = item.name == "__init__" or (
                        is_model and item.name == "forward") or (
                        is_model and not dunder(item.name) and
                        item.name not in NN_MODULE_METHODS)
                    if not allowed:
                        what = ("helper classes may only hold parameters: define __init__ only "
                                "(their forward would run torch)" if not is_model else
                                "it overrides nn.Module behaviour or is a special method; "
                                "give helpers plain names")
                        self.add(item, "class", "method `%s.%s`: %s" % (name, item.name, what))
                elif isinstance(item, ast.Expr) and isinstance(item.value, ast.Constant):
                    continue
                elif isinstance(item, (ast.Pass, ast.AsyncFunctionDef)):
                    continue        # async def: reported as a generator
                elif isinstance(item, (ast.Assign, ast.AnnAssign)) and \
                        item.value is not None and self.constant_expr(item.value):
                    continue
                else:
                    self.add(item, "class", "`%s` in the body of class %s: a class body holds "
                             "methods and constants only" % (src(item), name))
        if model is not None:
            self.model = model
            if "forward" not in self.methods:
                self.add(model, "structure", "ModelNew has no forward method: define "
                         "forward(self, ...) with Model's inputs, calling cuda_extension")

    def mark_super_init(self):
        for n in ast.walk(self.tree):
            if isinstance(n, ast.Attribute) and n.attr == "__init__" and \
                    isinstance(n.value, ast.Call) and isinstance(n.value.func, ast.Name) and \
                    n.value.func.id == "super":
                n.value._super_init = True

    # ---- pass 2: following values through ModelNew ----

    def analyze_model(self):
        init = self.methods.get("__init__")
        if init is not None:
            self.analyze(init, "init", None, is_method=True)
        forward = self.methods.get("forward")
        if forward is None:
            return
        self.cuda_calls = 0
        self.analyze(forward, "forward", None, is_method=True)
        if self.cuda_calls == 0:
            self.add(forward, "structure", "forward calls no cuda_extension function: the "
                     "computation must happen in your kernels, called as "
                     "cuda_extension.NAME(...)")

    def param_kinds_forward(self, fn):
        a = fn.args
        params = getattr(a, "posonlyargs", []) + a.args
        defaults = [None] * (len(params) - len(a.defaults)) + list(a.defaults)
        kinds = {}
        for p, d in zip(params, defaults):
            kinds[p.arg] = self.annotation_kind(p.annotation, d)
        for p, d in zip(a.kwonlyargs, a.kw_defaults):
            kinds[p.arg] = self.annotation_kind(p.annotation, d)
        return kinds

    def annotation_kind(self, ann, default):
        if ann is not None:
            text = src(ann)
            if text in ("int", "float", "bool", "str") or text.startswith(("Tuple[int",
                                                                            "List[int",
                                                                            "tuple[int",
                                                                            "list[int")):
                return (O,)
            return (T,)
        if default is not None and isinstance(default, ast.Constant) and \
                default.value is not None:
            return (O,)
        return (T,)

    def analyze(self, fn, mode, arg_kinds, is_method, kwarg_kinds=None):
        key = (id(fn), mode, tuple(tag(k) for k in arg_kinds or ()),
               tuple(sorted((k, tag(v)) for k, v in (kwarg_kinds or {}).items())))
        if key in self.memo:
            return self.memo[key]
        if key in self.active:
            return (U,)
        self.active.add(key)
        ctx = Ctx(mode, fn.name)
        a = fn.args
        params = getattr(a, "posonlyargs", []) + a.args
        if is_method and params:
            ctx.env[params[0].arg] = ("SELF",)
            params = params[1:]
        if arg_kinds is None:       # forward (or __init__): from the signature
            if mode == "forward":
                kinds = self.param_kinds_forward(fn)
                for p in params + a.kwonlyargs:
                    ctx.env[p.arg] = kinds.get(p.arg, (T,))
                if a.vararg:
                    ctx.env[a.vararg.arg] = (S,)
            else:
                for p in params + a.kwonlyargs:
                    ctx.env[p.arg] = (U,)
                if a.vararg:
                    ctx.env[a.vararg.arg] = (U,)
        else:
            for i, p in enumerate(params):
                if i < len(arg_kinds):
                    ctx.env[p.arg] = arg_kinds[i]
                elif kwarg_kinds and p.arg in kwarg_kinds:
                    ctx.env[p.arg] = kwarg_kinds[p.arg]
                else:
                    ctx.env[p.arg] = (O,)
            for p in a.kwonlyargs:
                ctx.env[p.arg] = (kwarg_kinds or {}).get(p.arg, (O,))
            if a.vararg:
                extra = arg_kinds[len(params):]
                ctx.env[a.vararg.arg] = (S,) if any(tag(k) in ("T", "S", "R") for k in extra) \
                    else (O,)
        if a.kwarg:
            ctx.env[a.kwarg.arg] = (S,)
        ctx.returns = None
        self.block(fn.body, ctx)
        self.active.discard(key)
        result = ctx.returns or (O,)
        self.memo[key] = result
        return result

    # statements

    def block(self, stmts, ctx):
        for s in stmts:
            self.stmt(s, ctx)

    def stmt(self, s, ctx):
        if isinstance(s, ast.Assign):
            kind = self.ev(s.value, ctx)
            for t in s.targets:
                self.bind(t, kind, ctx, s)
        elif isinstance(s, ast.AnnAssign):
            if s.value is not None:
                self.bind(s.target, self.ev(s.value, ctx), ctx, s)
        elif isinstance(s, ast.AugAssign):
            value = self.ev(s.value, ctx)
            target = self.ev_target_load(s.target, ctx)
            if ctx.mode == "forward" and (tensorish(value) or tensorish(target)):
                self.add(s, "torch-compute", "`%s`: arithmetic on tensors is torch computation; "
                         "do it in your kernel" % src(s))
            self.bind(s.target, join(value, target) if tag(target) != O else value, ctx, s,
                      aug=True)
        elif isinstance(s, ast.Expr):
            self.ev(s.value, ctx)
        elif isinstance(s, ast.Return):
            kind = self.ev(s.value, ctx) if s.value is not None else (O,)
            ctx.returns = join(ctx.returns, kind)
        elif isinstance(s, (ast.If, ast.While)):
            self.truth(s.test, ctx)
            self.block(s.body, ctx)
            self.block(s.orelse, ctx)
        elif isinstance(s, (ast.For, ast.AsyncFor)):
            it = self.ev(s.iter, ctx)
            self.iterate(s.iter, it, ctx)
            self.bind(s.target, (T,) if sequence(it) else (O,), ctx, s)
            self.block(s.body, ctx)
            self.block(s.orelse, ctx)
        elif isinstance(s, (ast.With, ast.AsyncWith)):
            for item in s.items:
                self.ev(item.context_expr, ctx)
                if item.optional_vars is not None:
                    self.bind(item.optional_vars, (O,), ctx, s)
            self.block(s.body, ctx)
        elif isinstance(s, ast.Raise):
            if s.exc is not None:
                self.ev(s.exc, ctx)
        elif isinstance(s, ast.Assert):
            self.truth(s.test, ctx)
            if s.msg is not None:
                self.ev(s.msg, ctx)
        elif isinstance(s, (ast.Try, getattr(ast, "TryStar", ast.Try))):
            self.block(s.body, ctx)
            for h in s.handlers:
                self.block(h.body, ctx)
            self.block(s.orelse, ctx)
            self.block(s.finalbody, ctx)
        elif isinstance(s, ast.Delete):
            for t in s.targets:
                if isinstance(t, (ast.Attribute, ast.Subscript)) and \
                        self.store_root(t) == "self" and ctx.mode != "init":
                    self.add(t, "state", "`del %s` in %s changes ModelNew's state: forward "
                             "keeps no state between calls" % (src(t), ctx.fn_name))

    def truth(self, test, ctx):
        kind = self.ev(test, ctx)
        if ctx.mode == "forward" and tensorish(kind):
            self.add(test, "torch-compute", "`%s` tests a tensor's truth value, which reads it "
                     "back from the GPU (torch computation): branch on shapes or arguments, "
                     "not on tensor values" % src(test))

    def iterate(self, node, kind, ctx):
        if ctx.mode == "forward" and tensorish(kind) and not sequence(kind):
            self.add(node, "torch-compute", "iterating over the tensor `%s` slices it with "
                     "torch operations: pass the whole tensor to your kernel" % src(node))

    def ev_target_load(self, target, ctx):
        if isinstance(target, ast.Name):
            return ctx.env.get(target.id, (O,))
        if isinstance(target, ast.Subscript):
            return self.ev_Subscript(target, ctx, store=True)
        return self.ev(target, ctx)

    def bind(self, target, kind, ctx, stmt, aug=False):
        if isinstance(target, ast.Name):
            old = ctx.env.get(target.id)
            ctx.env[target.id] = kind if old is None or aug else join(old, kind)
        elif isinstance(target, (ast.Tuple, ast.List)):
            if ctx.mode == "forward" and tensorish(kind) and not sequence(kind):
                self.add(stmt, "torch-compute", "unpacking the tensor in `%s` slices it with "
                         "torch operations" % src(stmt))
            elem = (T,) if tag(kind) in ("S", "T", "R") else (O,)
            for e in target.elts:
                if isinstance(e, ast.Starred):
                    self.bind(e.value, (S,) if sequence(kind) else (O,), ctx, stmt)
                else:
                    self.bind(e, elem, ctx, stmt)
        elif isinstance(target, ast.Starred):
            self.bind(target.value, kind, ctx, stmt)
        elif isinstance(target, ast.Attribute):
            root = self.store_root(target)
            if root == "self" and isinstance(target.value, ast.Name):
                if ctx.mode == "init":
                    self.self_kinds[target.attr] = join(self.self_kinds.get(target.attr), kind)
                else:
                    self.add(stmt, "state", "`%s` in %s stores state on the module: forward "
                             "must compute every output from its inputs, with no caching "
                             "across calls; set attributes only in __init__"
                             % (src(target), ctx.fn_name))
                return
            base = self.ev(target.value, ctx)
            if root == "self" and ctx.mode != "init":
                self.add(stmt, "state", "`%s` in %s changes ModelNew's state: forward keeps no "
                         "state between calls" % (src(target), ctx.fn_name))
            elif ctx.mode == "forward" and tensorish(base):
                self.add(stmt, "torch-compute", "`%s` changes a tensor's attributes: torch "
                         "computation" % src(target))
        elif isinstance(target, ast.Subscript):
            base = self.ev(target.value, ctx)
            self.ev(target.slice, ctx)
            root = self.store_root(target)
            if root == "self" and ctx.mode != "init":
                self.add(stmt, "state", "`%s` in %s changes ModelNew's state: forward keeps no "
                         "state between calls" % (src(target), ctx.fn_name))
            elif ctx.mode == "forward" and tensorish(base):
                self.add(stmt, "torch-compute", "`%s = ...` writes into a tensor with a torch "
                         "operation: write outputs in your kernel" % src(target))
            elif tag(base) == O and isinstance(target.value, ast.Name) and \
                    tag(kind) in ("T", "S", "R"):
                ctx.env[target.value.id] = (S,)

    # expressions

    def ev(self, node, ctx):
        if node is None:
            return (O,)
        method = getattr(self, "ev_" + type(node).__name__, None)
        if method is not None:
            return method(node, ctx)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self.ev(child, ctx)
        return (O,)

    def ev_Constant(self, node, ctx):
        return (O,)

    def ev_Name(self, node, ctx):
        name = node.id
        if name in ctx.env:
            return ctx.env[name]
        if name in self.imports:
            return self.path_kind(self.imports[name])
        if name in self.functions:
            return ("FUNC", name)
        if name in self.constants:
            return (O,)
        if name in BUILTINS_OK:
            return ("B", name)
        if name in BANNED_BUILTINS:
            return ("BANNED",)  # reported by the first pass
        return (U,)

    def ev_Attribute(self, node, ctx):
        path = self.resolve(node)
        if path and not (isinstance(node.value, ast.Name) and node.value.id in ctx.env):
            return self.path_kind(path)
        base = self.ev(node.value, ctx)
        b, attr = tag(base), node.attr
        if b == "SELF":
            if attr in self.methods:
                return ("METH", attr)
            if attr in self.self_kinds:
                return self.self_kinds[attr]
            if attr == "training":
                return (O,)
            return ("SA", attr)
        if attr.startswith("_"):
            return (U,)         # private and dunder attributes: reported by the first pass
        if b in ("T", "R"):
            if attr in TENSOR_PROPS:
                return (O,)
            if attr in TENSOR_INFO or attr in TENSOR_VIEWS or attr in TENSOR_NEW:
                return ("TM", attr)
            if ctx.mode == "forward":
                self.report_tensor_attr(node, attr)
            return ("TM", attr)
        if b == "M":
            if attr in self.param_names or attr.startswith(("weight", "bias", "running_")):
                return (T,)     # a parameter or buffer of a submodule
            return ("MA", attr)     # a method or setting (stride, padding, ...)
        if b == "MA":
            return ("MA", attr)
        if b == "SUPER":
            return ("SUPER",)
        return ("OM", attr, node.value)

    def report_tensor_attr(self, node, attr):
        if attr in ("contiguous",):
            why = ("copies the tensor; require contiguous inputs in the binding "
                   "(CA_CHECK_INPUT) or handle strides in the kernel")
        elif attr in COPYING_VIEWS:
            why = ("can copy or convert the tensor; use .view(...) for shape changes, or handle "
                   "the layout or dtype in your kernel")
        else:
            why = "is a torch operation on a tensor; do it in your kernel"
        self.add(node, "torch-compute", "`%s` %s" % (src(node), why))

    def ev_Subscript(self, node, ctx, store=False):
        """store: the subscript is written (bind reports that), not read."""
        base = self.ev(node.value, ctx)
        self.ev(node.slice, ctx)
        b = tag(base)
        if sequence(base):
            return (T,)
        if tensorish(base):
            if ctx.mode == "forward" and not store:
                self.add(node, "torch-compute", "`%s` indexes a tensor, a torch operation: pass "
                         "the whole tensor and offsets to your kernel" % src(node))
            return (T,)
        if b == M:
            return (M,)
        return (O,)

    def ev_BinOp(self, node, ctx):
        left, right = self.ev(node.left, ctx), self.ev(node.right, ctx)
        if tensorish(left) or tensorish(right):
            if ctx.mode == "forward":
                self.add(node, "torch-compute", "`%s` is arithmetic on tensors (torch "
                         "computation): do it in your kernel" % src(node))
            return (T,)
        if tag(left) == S or tag(right) == S:
            return (S,)
        return (O,)

    def ev_UnaryOp(self, node, ctx):
        kind = self.ev(node.operand, ctx)
        if tensorish(kind):
            if ctx.mode == "forward":
                self.add(node, "torch-compute", "`%s` on a tensor is torch computation: do it "
                         "in your kernel" % src(node))
            return (T,)
        return (O,)

    def ev_BoolOp(self, node, ctx):
        result = None
        for v in node.values:
            kind = self.ev(v, ctx)
            if ctx.mode == "forward" and tensorish(kind):
                self.add(v, "torch-compute", "`%s` takes a tensor's truth value, which reads "
                         "it back from the GPU: test shapes or arguments instead" % src(v))
            result = join(result, kind)
        return result or (O,)

    def ev_Compare(self, node, ctx):
        kinds = [self.ev(node.left, ctx)] + [self.ev(c, ctx) for c in node.comparators]
        value_ops = [op for op in node.ops if not isinstance(op, (ast.Is, ast.IsNot))]
        if ctx.mode == "forward" and value_ops and any(tensorish(k) for k in kinds):
            self.add(node, "torch-compute", "`%s` compares tensors (torch computation); compare "
                     "shapes, or `is None`" % src(node))
        return (O,)

    def ev_IfExp(self, node, ctx):
        self.truth(node.test, ctx)
        return join(self.ev(node.body, ctx), self.ev(node.orelse, ctx))

    def container(self, kinds):
        return (S,) if any(tag(k) in ("T", "S", "MA") for k in kinds) else (O,)

    def ev_Tuple(self, node, ctx):
        return self.container([self.ev(e, ctx) for e in node.elts])

    ev_List = ev_Tuple
    ev_Set = ev_Tuple

    def ev_Dict(self, node, ctx):
        for k in node.keys:
            if k is not None:
                self.ev(k, ctx)
        return self.container([self.ev(v, ctx) for v in node.values])

    def ev_Starred(self, node, ctx):
        return self.ev(node.value, ctx)

    def ev_NamedExpr(self, node, ctx):
        kind = self.ev(node.value, ctx)
        self.bind(node.target, kind, ctx, node)
        return kind

    def ev_JoinedStr(self, node, ctx):
        for v in node.values:
            if isinstance(v, ast.FormattedValue):
                kind = self.ev(v.value, ctx)
                if ctx.mode == "forward" and tensorish(kind):
                    self.add(v, "torch-compute", "formatting the tensor `%s` copies it to the "
                             "host: format shapes instead" % src(v.value))
        return (O,)

    def comprehension(self, node, ctx, elts):
        saved = dict(ctx.env)
        for g in node.generators:
            it = self.ev(g.iter, ctx)
            self.iterate(g.iter, it, ctx)
            self.bind(g.target, (T,) if sequence(it) else (O,), ctx, node)
            for cond in g.ifs:
                self.truth(cond, ctx)
        kinds = [self.ev(e, ctx) for e in elts]
        ctx.env = saved
        return self.container(kinds)

    def ev_ListComp(self, node, ctx):
        return self.comprehension(node, ctx, [node.elt])

    ev_SetComp = ev_ListComp
    ev_GeneratorExp = ev_ListComp

    def ev_DictComp(self, node, ctx):
        return self.comprehension(node, ctx, [node.key, node.value])

    def ev_Lambda(self, node, ctx):
        return ("L", node, dict(ctx.env))

    def ev_Call(self, node, ctx):
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "__init__" and \
                isinstance(f.value, ast.Call) and isinstance(f.value.func, ast.Name) and \
                f.value.func.id == "super":
            for a in node.args:
                self.ev(a, ctx)
            return (O,)
        callee = self.ev(f, ctx)
        args = [self.ev(a, ctx) for a in node.args]
        kwargs = {}
        for kw in node.keywords:
            k = self.ev(kw.value, ctx)
            if kw.arg is not None:
                kwargs[kw.arg] = k
            else:
                args.append(k)
        for k in args + list(kwargs.values()):
            self.escape(k, ctx)
        return self.call(node, callee, args, kwargs, ctx)

    def escape(self, kind, ctx):
        """A function passed as a value may be called with anything: check it with tensors."""
        t = tag(kind)
        if t == "METH" and kind[1] in self.methods:
            fn = self.methods[kind[1]]
            n = len(fn.args.args) - 1
            self.analyze(fn, ctx.mode, [(T,)] * max(n, 0), is_method=True)
        elif t == "FUNC":
            fn = self.functions[kind[1]]
            self.analyze(fn, ctx.mode, [(T,)] * len(fn.args.args), is_method=False)
        elif t == "L":
            self.call_lambda(kind, [(T,)] * len(kind[1].args.args), ctx)

    def call_lambda(self, kind, args, ctx):
        lam, env = kind[1], kind[2]
        saved = ctx.env
        ctx.env = dict(env)
        for i, p in enumerate(lam.args.args):
            ctx.env[p.arg] = args[i] if i < len(args) else (O,)
        result = self.ev(lam.body, ctx)
        ctx.env = saved
        return result

    def call(self, node, callee, args, kwargs, ctx):
        t = tag(callee)
        forward = ctx.mode == "forward"
        any_tensor = any(tensorish(k) for k in args + list(kwargs.values()))
        if t == "F":
            if forward:
                self.cuda_calls += 1
            return (R,)
        if t == "C":
            name = callee[1]
            if forward and name not in CREATE_FORWARD:
                self.add(node, "torch-compute", "`torch.%s` in forward: forward may create "
                         "tensors only with torch.empty/zeros/ones/full/arange and their "
                         "_like forms" % name)
            first_ok = name.endswith("_like")
            bad = [k for i, k in enumerate(args) if tensorish(k) and not (first_ok and i == 0)]
            if forward and bad:
                self.add(node, "torch-compute", "`%s` builds a tensor from another tensor's "
                         "values (a copy): create outputs with torch.empty_like(x) or "
                         "torch.empty(x.shape, ...) and fill them in your kernel" % src(node))
            return (T,)
        if t == "N":
            name = callee[1]
            if ctx.mode != "init":
                self.add(node, "torch-compute", "`%s` in %s: parameters and submodules are "
                         "created in __init__ only" % (src(node.func), ctx.fn_name))
            if name in ("Parameter", "Buffer"):
                return (T,)
            if name in ("ParameterList", "ParameterDict"):
                return (S,)
            return (M,)
        if t == "I":
            if ctx.mode != "init":
                self.add(node, "torch-compute", "`%s` in %s: initialisation belongs in "
                         "__init__ (and the evaluator loads Model's weights anyway)"
                         % (src(node.func), ctx.fn_name))
            return (O,)
        if t == "X":
            if forward and any_tensor:
                self.add(node, "torch-compute", "`%s` on a tensor turns it into a Python number "
                         "(a copy back from the GPU): use it on shapes and arguments only"
                         % src(node))
            return (O,)
        if t == "INFO":
            if callee[1] == "Tensor" and forward:
                self.add(node, "torch-compute", "`torch.Tensor(...)` builds a tensor from data: "
                         "use torch.empty")
                return (T,)
            return (O,)
        if t == "TM":
            name = callee[1]
            if name in TENSOR_INFO:
                return (O,)
            if name in TENSOR_NEW:
                if forward and any_tensor:
                    self.add(node, "torch-compute", "`%s` builds a tensor from another tensor's "
                             "values: pass sizes, not tensors" % src(node))
                return (T,)
            return (T,)
        if t in ("MA", "M"):
            if ctx.mode != "init":
                what = src(node.func)
                self.add(node, "torch-compute", "calling `%s` runs an nn module (torch "
                         "computation): pass its parameters (e.g. .weight and .bias) to your "
                         "kernel instead" % what)
            return (T,)
        if t == "T":
            if forward:
                self.add(node, "torch-compute", "`%s` calls a tensor" % src(node))
            return (T,)
        if t == "METH":
            name = callee[1]
            if name == "forward" or name == "__init__":
                self.add(node, "structure", "`%s` calls %s from inside ModelNew: call helpers, "
                         "not forward or __init__" % (src(node), name))
                return (U,)
            mode = "init" if ctx.mode == "init" else "forward"
            return self.analyze(self.methods[name], mode, args, True, kwargs)
        if t == "FUNC":
            mode = "init" if ctx.mode == "init" else "forward"
            return self.analyze(self.functions[callee[1]], mode, args, False, kwargs)
        if t == "L":
            return self.call_lambda(callee, args, ctx)
        if t == "SA":
            name = callee[1]
            if name in ("register_buffer", "register_parameter", "add_module",
                        "register_module") and ctx.mode == "init":
                if node.args and isinstance(node.args[0], ast.Constant) and \
                        isinstance(node.args[0].value, str) and len(args) > 1:
                    attr = node.args[0].value
                    self.self_kinds[attr] = (T,) if name != "add_module" and \
                        name != "register_module" else (M,)
                    self.user_attrs.add(attr)
                return (O,)
            self.add(node, "torch-compute" if ctx.mode != "init" or name in NN_MODULE_METHODS
                     else "state",
                     "`%s` calls nn.Module's own `%s`: ModelNew creates its parameters in "
                     "__init__ and calls only cuda_extension functions in forward"
                     % (src(node), name))
            return (U,)
        if t == "B":
            name = callee[1]
            # a container of tensors counts too: sum(), max() and print() touch its tensors
            flagged = [k for k in args + list(kwargs.values())
                       if (tensorish(k) or sequence(k)) and
                       not (name in CONTAINER_BUILTINS and sequence(k))]
            if forward and name in TENSOR_SENSITIVE and flagged:
                self.add(node, "torch-compute", "`%s` on a tensor runs torch operations or copies "
                         "it to the host: use it on shapes and Python values only" % src(node))
            if name in ("list", "tuple", "sorted", "reversed", "set", "frozenset", "zip",
                        "enumerate", "dict", "iter"):
                return self.container(args + list(kwargs.values()))
            if name == "next":
                return (T,) if any(sequence(k) for k in args) else (O,)
            return (O,)
        if t == "OM":
            name, base_node = callee[1], callee[2]
            if name in ("append", "extend", "insert", "add", "update", "setdefault") and \
                    isinstance(base_node, ast.Name) and base_node.id in ctx.env and \
                    any(tag(k) in ("T", "S", "R") for k in args):
                ctx.env[base_node.id] = (S,)
            base_kind = ctx.env.get(base_node.id) if isinstance(base_node, ast.Name) else None
            if base_kind is not None and tag(base_kind) == S and \
                    name in ("values", "items", "pop", "get", "copy"):
                return (S,)
            if forward and any_tensor and name not in CONTAINER_METHODS and name != "format":
                self.add(node, "torch-compute", "`%s` passes tensors to a method the policy "
                         "cannot identify: call cuda_extension functions or your helpers "
                         "directly" % src(node))
            return (O,)
        if t == "SUPER":
            return (O,)
        if t == "DENIED":
            return (T,)
        if t == "BANNED":
            return ("BANNED",)
        if any_tensor and forward:
            self.add(node, "torch-compute", "`%s` passes tensors to something the policy cannot "
                     "identify: call cuda_extension functions, your helpers, or the allowed "
                     "tensor-creation functions directly" % src(node))
        return (U,)

    # ---- entry ----

    def run(self):
        self.user_attrs = set()
        self.check_imports()
        self.check_module_level()
        self.mark_super_init()
        self.check_classes()
        for node in self.tree.body:
            self.walk(node, [set()])
        if self.model is not None and RULES != "kernelbench":
            self.analyze_model()
        return self.v.items


def emit(items, code):
    items = sorted(({"advisory": False, **v} for v in items), key=lambda v: v["line"])
    out = {"violations": items[:MAX_VIOLATIONS]}
    if len(items) > MAX_VIOLATIONS:
        out["truncated"] = len(items) - MAX_VIOLATIONS
    sys.stdout.write(json.dumps(out, ensure_ascii=True) + "\n")
    sys.stdout.flush()
    sys.exit(code)


def main(argv):
    global RULES
    args = argv[1:]
    if len(args) == 3 and args[0] == "--rules" and args[1] in ("cuda-agent", "kernelbench"):
        RULES = args[1]
        args = args[2:]
    if len(args) != 1:
        print("usage: python3 - [--rules cuda-agent|kernelbench] MODEL_NEW.py", file=sys.stderr)
        sys.exit(EXIT_INPUT)
    path = args[0]
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as e:
        print("cannot read %s: %s" % (path, e.strerror or e), file=sys.stderr)
        sys.exit(EXIT_INPUT)
    if len(data) > MAX_BYTES:
        emit([{"line": 1, "rule": "file-size",
               "message": "model_new.py is over %d bytes: keep it to ModelNew and its helpers"
                          % MAX_BYTES}], 0)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        emit([{"line": line, "rule": "syntax",
               "message": "model_new.py is not valid UTF-8 (byte %d)" % e.start}], EXIT_INPUT)
    sys.setrecursionlimit(20000)
    try:
        tree = ast.parse(text, filename="model_new.py")
    except SyntaxError as e:
        emit([{"line": e.lineno or 1, "rule": "syntax",
               "message": "invalid Python: %s (line %d%s)" %
                          (e.msg, e.lineno or 1, ", column %d" % e.offset if e.offset else "")}],
             EXIT_INPUT)
    except (ValueError, RecursionError, MemoryError) as e:
        emit([{"line": 1, "rule": "syntax",
               "message": "model_new.py cannot be parsed: %s" % (str(e) or type(e).__name__)}],
             EXIT_INPUT)
    try:
        items = Checker(tree).run()
    except RecursionError:
        emit([{"line": 1, "rule": "syntax",
               "message": "model_new.py is nested too deeply for the policy check: simplify "
                          "its expressions"}], EXIT_INPUT)
    emit(items, 0)

