"""policy/vocab.py - the names model_new.py may use, and the kinds of values they stand for.

What torch, torch.nn, Python's built-ins and tensors offer, sorted by what the policy makes of
them (information, tensor creation, views, computation, streams, things that reach Python's
internals), the value kinds the second pass follows (see T, R, S, O, M, U below), and
torch_path_problem() / path_kind(), which judge a dotted name that an import resolved.
Data and pure functions only: the rules that use them are in policy/structure.py and
policy/values.py.
"""

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


def torch_path_problem(path):
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


def path_kind(path):
    parts = path.split(".")
    root = parts[0]
    if torch_path_problem(path):
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
