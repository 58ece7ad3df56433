"""policy/structure.py - the first pass: rules that need no values, over every node.

Imports and the names they bind, module-level code, dangerous built-ins, dunder and private
attributes, try/except, with, decorators, global/nonlocal, generators and async code, stores
into module state, classes and their methods, and torch names outside the vocabulary
(policy/vocab.py). A mixin of policy.check.Checker: it reads and fills the Checker's facts about
the file (imports, functions, constants, classes, ModelNew's methods) that the second pass
(policy/values.py) then uses, and reports through self.add.
"""
import ast

from policy.answer import src
from policy.vocab import (ALLOWED_HINT, ALLOWED_MODULES, BANNED_BUILTINS, CREATE_INIT,
                          KB_BANNED_BUILTINS, KB_DUNDERS, KB_MODULES, NN_CONTAINERS,
                          NN_MODULE_METHODS, TORCH_DTYPES, TORCH_INFO, O, dunder, path_kind, tag,
                          torch_path_problem)


def target_names(target):
    """The names an assignment target binds when it is a name or a tuple of them (nested
    tuples included: `H, W = 32, 32` unpacks constants into constants), else None (a starred
    name would bind a list, an attribute or subscript stores into another object)."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Tuple):
        names = [target_names(e) for e in target.elts]
        return None if None in names else [n for group in names for n in group]
    return None


class StructureRules:
    """Pass 1 (policy.check.Checker mixes it in)."""

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
        if self.rules == "kernelbench":
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
            problem = torch_path_problem(mod) if mod.startswith("torch.") else None
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
        problem = torch_path_problem(full)
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
                names = [target_names(t) for t in targets]
                if node.value is None or None in names:
                    self.add(node, "structure", "module-level `%s`: only constants (NAME = "
                             "number, string, tuple; NAME, NAME = numbers...) may be assigned "
                             "at module level" % src(node))
                    continue
                if not self.constant_expr(node.value):
                    rule = "state" if isinstance(node.value, (ast.List, ast.Dict, ast.Set,
                                                              ast.ListComp, ast.DictComp,
                                                              ast.SetComp)) else "structure"
                    self.add(node, rule, "module-level `%s`: only constants (numbers, strings, "
                             "tuples, torch dtypes) may be assigned at module level; mutable "
                             "module state could carry results across calls" % src(node))
                for group in names:
                    self.constants.update(group)
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
            return bool(path) and tag(path_kind(path)) == O     # torch.float32
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
            problem = torch_path_problem(path)
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
