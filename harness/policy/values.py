"""policy/values.py - the second pass: following values through ModelNew's methods.

forward's arguments, results of cuda_extension calls, tensors created with torch.empty & co. and
ModelNew's parameters are tensors; arithmetic, comparisons, indexing, truth tests, iteration and
method calls on them are torch computation, while the same on shapes and Python numbers is fine.
Helpers are analysed with the kinds of the arguments they are called with (memoised per kinds,
and cut at recursion). Names are judged by what they were bound to, so renaming through imports
or assignments does not hide anything. A mixin of policy.check.Checker, run only under the
cuda-agent rules, after policy/structure.py has gathered the file's facts.
"""
import ast

from policy.answer import src
from policy.vocab import (BANNED_BUILTINS, BUILTINS_OK, CONTAINER_BUILTINS, CONTAINER_METHODS,
                          COPYING_VIEWS, CREATE_FORWARD, NN_MODULE_METHODS, TENSOR_INFO,
                          TENSOR_NEW, TENSOR_PROPS, TENSOR_SENSITIVE, TENSOR_VIEWS, M, O, R, S,
                          T, U, join, path_kind, sequence, tag, tensorish)


class Ctx:
    """One method being analysed: its mode, the kinds of its local names, what it returns."""

    def __init__(self, mode, fn_name):
        self.mode = mode          # "init" or "forward"
        self.fn_name = fn_name
        self.env = {}
        self.returns = None


class ValueRules:
    """Pass 2 (policy.check.Checker mixes it in)."""

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
            return path_kind(self.imports[name])
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
            return path_kind(path)
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
