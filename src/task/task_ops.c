/*
 * task_ops.c - which operators a task's code calls, read from the code
 * itself (dataset labels are often wrong), and how a label is compared.
 *
 * The scan looks at code bytes only (strings and comments blanked, see
 * task__scan_init) for dotted names followed by '(':
 *   torch.nn.functional.X / nn.functional.X / F.X  -> "F.X"
 *   torch.nn.X / nn.X                              -> "nn.X"
 *   torch.linalg.X, torch.fft.X, torch.special.X   -> kept as written
 *   torch.X                                        -> "torch.X"
 *   <expr>.X with X a tensor compute method        -> "Tensor.X"
 * minus the helpers in the tables below (tensor creation, seeding, dtypes,
 * containers), which are not operators a kernel implements. The result is
 * deduplicated in order of first use and capped at CA_LIMIT_TASK_OPS.
 */
#include "task/task.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/buf.h"
#include "core/limits.h"
#include "core/sv.h"
#include "task/task_internal.h"
#include "core/banned.h"

/* torch.X that create, seed or describe tensors instead of computing on
 * them. Names starting with an upper-case letter (torch.Tensor,
 * torch.Size, torch.FloatTensor, ...) are types and skipped as well. */
static const char *const torch_skip[] = {
    /* creation */
    "arange", "as_strided", "as_tensor", "empty", "empty_like", "empty_strided", "eye",
    "from_numpy", "full", "full_like", "linspace", "logspace", "ones", "ones_like", "tensor",
    "tril_indices", "triu_indices", "zeros", "zeros_like",
    /* random numbers (tasks are deterministic; these only make inputs) */
    "bernoulli", "manual_seed", "multinomial", "normal", "poisson", "rand", "rand_like", "randint",
    "randint_like", "randn", "randn_like", "randperm", "seed", "initial_seed", "get_rng_state",
    "set_rng_state",
    /* autograd, modes, settings, introspection */
    "autocast", "compile", "device", "enable_grad", "finfo", "get_default_dtype",
    "get_default_device", "iinfo", "inference_mode", "is_complex", "is_floating_point",
    "is_grad_enabled", "is_tensor", "load", "no_grad", "numel", "promote_types", "result_type",
    "save", "set_default_device", "set_default_dtype", "set_grad_enabled", "set_printoptions",
    "use_deterministic_algorithms", "broadcast_shapes", "can_cast",
    /* dtypes, should one be called */
    "bfloat16", "bool", "cdouble", "cfloat", "complex128", "complex64", "double", "float",
    "float16", "float32", "float64", "half", "int", "int16", "int32", "int64", "int8", "long",
    "short", "uint8"};

/* nn.X that hold or arrange modules rather than compute. */
static const char *const nn_skip[] = {"Module",     "ModuleDict",    "ModuleList",
                                      "Parameter",  "ParameterDict", "ParameterList",
                                      "Sequential", "Identity",      "Buffer"};

/* Tensor methods that compute. Shape and memory helpers (view, reshape,
 * permute, transpose, contiguous, to, cuda, clone, size, expand, ...) are
 * deliberately absent. In-place forms ("relu_") map to the plain name. */
static const char *const tensor_methods[] = {
    "abs",         "acos",       "acosh",      "add",          "addcdiv",      "addcmul",
    "addmm",       "addmv",      "all",        "amax",         "amin",         "any",
    "argmax",      "argmin",     "argsort",    "asin",         "asinh",        "atan",
    "atan2",       "atanh",      "baddbmm",    "bmm",          "ceil",         "clamp",
    "clamp_max",   "clamp_min",  "clip",       "cos",          "cosh",         "cummax",
    "cummin",      "cumprod",    "cumsum",     "diff",         "div",          "divide",
    "dot",         "eq",         "erf",        "erfc",         "erfinv",       "exp",
    "exp2",        "expm1",      "floor",      "floor_divide", "fmod",         "frac",
    "ge",          "gt",         "hardshrink", "le",           "lerp",         "log",
    "log10",       "log1p",      "log2",       "log_softmax",  "logcumsumexp", "logical_and",
    "logical_not", "logical_or", "logsumexp",  "lt",           "masked_fill",  "matmul",
    "max",         "maximum",    "mean",       "median",       "min",          "minimum",
    "mm",          "mul",        "multiply",   "mv",           "nan_to_num",   "ne",
    "neg",         "negative",   "norm",       "outer",        "pow",          "prod",
    "reciprocal",  "relu",       "remainder",  "round",        "rsqrt",        "sigmoid",
    "sign",        "sin",        "sinh",       "softmax",      "sort",         "sqrt",
    "square",      "std",        "sub",        "subtract",     "sum",          "tan",
    "tanh",        "topk",       "trace",      "tril",         "triu",         "trunc",
    "var",         "where"};

/* Receivers whose methods are not tensor methods (x.sum() counts, np.sum()
 * and math.exp() do not). */
static const char *const foreign_modules[] = {"math",     "np",        "numpy",    "random",
                                              "os",       "sys",       "time",     "functools",
                                              "operator", "itertools", "builtins", "einops"};

static bool in_table(const char *const *table, size_t n, const char *p, size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(table[i]) == len && memcmp(table[i], p, len) == 0)
            return true;
    return false;
}

#define IN(table, p, len) in_table(table, ARRAY_SIZE(table), p, len)

static bool is_ident(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c >= 0x80;
}

static bool is_ident_start(unsigned char c)
{
    return is_ident(c) && !(c >= '0' && c <= '9');
}

#define MAX_PARTS 8

struct chain {
    struct sv part[MAX_PARTS];
    size_t n;
    bool on_expr; /* ".X" right after an expression: "f(x).relu()" */
};

static bool part_is(const struct chain *c, size_t i, const char *s)
{
    return i < c->n && sv_eq_cstr(c->part[i], s);
}

struct ops_out {
    char **ops;
    size_t n, alloc;
};

static void add_op(struct ops_out *o, const char *ns, struct sv name)
{
    if (o->n >= CA_LIMIT_TASK_OPS)
        return;
    char *op = xstrfmt("%s." SV_FMT, ns, SV_ARG(name));
    for (size_t i = 0; i < o->n; i++) {
        if (strcmp(o->ops[i], op) == 0) {
            free(op);
            return;
        }
    }
    ALLOC_GROW(o->ops, o->n + 2, o->alloc);
    o->ops[o->n++] = op;
    o->ops[o->n] = NULL;
}

static void add_tensor_method(struct ops_out *o, struct sv name)
{
    /* "relu_" is the in-place relu; "__add__" stays as it is (not listed) */
    if (name.len > 1 && name.p[name.len - 1] == '_' && name.p[name.len - 2] != '_')
        name.len--;
    if (IN(tensor_methods, name.p, name.len))
        add_op(o, "Tensor", name);
}

static void classify(const struct chain *c, struct ops_out *o)
{
    struct sv last = c->part[c->n - 1];
    if (c->on_expr) {
        add_tensor_method(o, last);
        return;
    }
    if (c->n < 2)
        return;
    bool functional = (c->n == 4 && part_is(c, 0, "torch") && part_is(c, 1, "nn") &&
                       part_is(c, 2, "functional")) ||
                      (c->n == 3 && part_is(c, 0, "nn") && part_is(c, 1, "functional")) ||
                      (c->n == 2 && part_is(c, 0, "F"));
    if (functional) {
        add_op(o, "F", last);
        return;
    }
    if ((c->n == 3 && part_is(c, 0, "torch") && part_is(c, 1, "nn")) ||
        (c->n == 2 && part_is(c, 0, "nn"))) {
        if (!IN(nn_skip, last.p, last.len))
            add_op(o, "nn", last);
        return;
    }
    if (c->n == 3 && part_is(c, 0, "torch") &&
        (part_is(c, 1, "linalg") || part_is(c, 1, "fft") || part_is(c, 1, "special"))) {
        char ns[16];
        snprintf(ns, sizeof(ns), "torch." SV_FMT, SV_ARG(c->part[1]));
        add_op(o, ns, last);
        return;
    }
    if (c->n == 2 && part_is(c, 0, "torch")) {
        if (!(last.p[0] >= 'A' && last.p[0] <= 'Z') && !IN(torch_skip, last.p, last.len))
            add_op(o, "torch", last);
        return;
    }
    /* anything else under torch/nn/F (torch.cuda.*, nn.init.*) is not an op */
    if (part_is(c, 0, "torch") || part_is(c, 0, "nn") || part_is(c, 0, "F"))
        return;
    if (IN(foreign_modules, c->part[0].p, c->part[0].len))
        return;
    /* self.relu(x) calls a submodule; self.weight.sum() is a tensor method */
    if (c->n == 2 && part_is(c, 0, "self"))
        return;
    add_tensor_method(o, last);
}

/* Read a dotted name starting at i into *c; returns the offset after it. */
static size_t read_chain(const char *m, size_t len, size_t i, struct chain *c)
{
    c->n = 0;
    c->on_expr = i > 0 && m[i - 1] == '.';
    for (;;) {
        size_t start = i;
        while (i < len && is_ident((unsigned char)m[i]))
            i++;
        /* a very long chain keeps its first parts and its last one */
        if (c->n < MAX_PARTS)
            c->n++;
        c->part[c->n - 1] = sv_from(m + start, i - start);
        if (i + 1 < len && m[i] == '.' && is_ident_start((unsigned char)m[i + 1]))
            i++;
        else
            return i;
    }
}

char **task__derive_ops_scanned(const struct task__scan *s, size_t *n)
{
    struct ops_out o = {0};
    const char *m = s->masked;
    size_t i = 0;
    while (i < s->len) {
        unsigned char ch = (unsigned char)m[i];
        if (!is_ident_start(ch) || (i > 0 && is_ident((unsigned char)m[i - 1]))) {
            i++;
            continue;
        }
        struct chain c;
        i = read_chain(m, s->len, i, &c);
        size_t k = i;
        while (k < s->len && (m[k] == ' ' || m[k] == '\t'))
            k++;
        if (k < s->len && m[k] == '(')
            classify(&c, &o);
    }
    if (!o.ops) {
        o.ops = xcalloc(1, sizeof(*o.ops));
    }
    *n = o.n;
    return o.ops;
}

char **task_derive_ops(const char *code, size_t len, size_t *n)
{
    struct task__scan s;
    task__scan_init(&s, code, len);
    char **ops = task__derive_ops_scanned(&s, n);
    task__scan_release(&s);
    return ops;
}

void task_free_ops(char **ops, size_t n)
{
    if (!ops)
        return;
    for (size_t i = 0; i < n; i++)
        free(ops[i]);
    free(ops);
}

/* ---- labels ---- */

static struct sv last_component(const char *op)
{
    const char *dot = strrchr(op, '.');
    return sv_cstr(dot ? dot + 1 : op);
}

static bool sv_eq_nocase(struct sv a, struct sv b)
{
    return a.len == b.len && strncasecmp(a.p, b.p, a.len) == 0;
}

/* Every last component of a occurs among those of b. */
static bool covered(char *const *a, size_t na, char *const *b, size_t nb)
{
    for (size_t i = 0; i < na; i++) {
        struct sv x = last_component(a[i]);
        bool found = false;
        for (size_t j = 0; j < nb && !found; j++)
            found = sv_eq_nocase(x, last_component(b[j]));
        if (!found)
            return false;
    }
    return true;
}

bool task__ops_agree(char *const *derived, size_t nderived, char *const *label, size_t nlabel)
{
    return covered(derived, nderived, label, nlabel) && covered(label, nlabel, derived, nderived);
}

char *task__name_from_ops(char *const *ops, size_t n)
{
    struct buf b;
    buf_init(&b, TASK__OPS_NAME_MAX);
    for (size_t i = 0; i < n; i++) {
        struct sv part = last_component(ops[i]);
        char low[TASK__OPS_NAME_MAX + 1];
        if (part.len == 0)
            continue;
        if (part.len > TASK__OPS_NAME_MAX)
            part.len = TASK__OPS_NAME_MAX;
        for (size_t k = 0; k < part.len; k++) {
            char ch = part.p[k];
            low[k] = ch >= 'A' && ch <= 'Z' ? (char)(ch - 'A' + 'a') : ch;
        }
        low[part.len] = '\0';
        /* "relu" from both F.relu and Tensor.relu appears once */
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++)
            seen = sv_eq_nocase(last_component(ops[j]), part);
        if (seen)
            continue;
        /* past the limit: stop at a whole component */
        size_t before = b.len;
        if ((b.len && buf_addch(&b, '_')) || buf_add(&b, low, part.len)) {
            buf_truncate(&b, before);
            break;
        }
    }
    if (b.len == 0) {
        buf_release(&b);
        return xstrdup("task");
    }
    char *raw = buf_detach(&b, NULL);
    char *name = task__sanitize_name(raw, strlen(raw));
    free(raw);
    return name;
}
