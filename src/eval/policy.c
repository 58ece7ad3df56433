/*
 * policy.c - the report of the static policy, the list of rule ids, and the small name helpers
 * the checks share. The rules on C-level names are policy_names.c.
 *
 * Invariants: a report never holds more than POLICY_MAX_VIOLATIONS items; every string in it is
 * owned by it; rule ids reported by any check appear in rule_list[] (the unit tests hold every
 * check to that).
 */
#include "eval/policy.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/json.h"
#include "core/util.h"
#include "eval/policy_internal.h"
#include "core/banned.h"

/* A message longer than this is cut; messages are ours, with one quoted name in them. */
#define MESSAGE_MAX 640

static const struct {
    const char *id;
    const char *summary;
} rule_list[] = {
    {"file-type", "only kernels/*.cu and kernels/*_binding.cpp are built and checked"},
    {"file-size", "a checked file is at most POLICY_MAX_SOURCE_BYTES"},
    {"lexer", "sources tokenize cleanly: no NUL bytes, unterminated comments or raw strings, "
              "universal character names or stray backslashes outside literals"},
    {"include", "#include only allowed CUDA, cuBLAS/cuDNN, C/C++ standard and (bindings) torch "
                "headers"},
    {"macro", "no token pasting and no macros that rename or hide the names the policy reads"},
    {"torch-compute", "no ATen/torch computation in C++ or model_new.py: tensor handling only"},
    {"python", "no Python C API, and pybind11 only for m.def and pybind11::arg"},
    {"process", "no processes, signals or raw system calls"},
    {"thread", "no threads"},
    {"file", "no files, file descriptors or memory-mapped files"},
    {"network", "no sockets or name lookups"},
    {"dlopen", "no run-time loading of code or lookup of symbols"},
    {"env", "no environment variables"},
    {"asm", "inline assembly only inside __device__/__global__ functions of .cu files"},
    {"stream", "(a note, never a violation) GPU work off the current stream: stream creation, "
               "launches without a stream, synchronous copies, other streams"},
    {"memory", "device memory comes from torch::empty*: no cudaMalloc/cudaFree, managed, pinned "
               "or IPC memory, no tensors over existing memory"},
    {"device", "no process-wide device settings (device, limits, caches, profiler)"},
    {"library", "only cuBLAS (GEMM) and cuDNN (convolutions); no other library, no driver API"},
    {"syntax", "model_new.py parses as Python 3"},
    {"import", "model_new.py imports only torch, torch.nn, cuda_extension, math and typing, at the "
               "top of the file"},
    {"builtin", "no exec/eval/compile/getattr/open and other introspection built-ins"},
    {"dunder", "no dunder names or attributes (except super().__init__), and no private "
               "attributes other than your own on self"},
    {"fallback", "no try/except: no fallbacks around the kernels"},
    {"with", "no with-blocks except torch.no_grad()/torch.inference_mode()"},
    {"decorator", "no decorators"},
    {"scope", "no global or nonlocal statements"},
    {"class", "one class ModelNew(nn.Module), plus nn.Module classes that only hold parameters"},
    {"state", "forward keeps no state: no assignments to self or module-level objects"},
    {"structure", "ModelNew.forward exists and calls a cuda_extension function; the module "
                  "level holds only imports, constants, functions and classes"},
    {"generator", "no generators, async functions or pattern matching"},
};

const char *policy_rule_summary(const char *id)
{
    for (size_t i = 0; i < ARRAY_SIZE(rule_list); i++)
        if (strcmp(rule_list[i].id, id) == 0)
            return rule_list[i].summary;
    return NULL;
}

/* ---- rule sets and what decides ---- */

const char *policy_rules_name(enum policy_rules rules)
{
    return rules == POLICY_RULES_KERNELBENCH ? "kernelbench" : "cuda-agent";
}

int policy_rules_parse(const char *s, enum policy_rules *out)
{
    if (!s || strcmp(s, "cuda-agent") == 0)
        *out = POLICY_RULES_CUDA_AGENT;
    else if (strcmp(s, "kernelbench") == 0)
        *out = POLICY_RULES_KERNELBENCH;
    else
        return CA_EUSAGE;
    return 0;
}

static bool rule_in(const char *rule, const char *const *set, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(rule, set[i]) == 0)
            return true;
    return false;
}

/*
 * The decision table. A source's name rules read names, which a local helper, variable or field
 * may share (`__device__ float gelu()`, `cudaGraphExec_t exec`, `ly.relu`): they advise, and the
 * same rules applied to the built object's undefined symbols decide. The syntax rules (lexer,
 * include, macro, asm, file-type, file-size) read constructs no collision produces and decide.
 * Which stream work runs on never decides: the harness orders the candidate's current stream
 * with the legacy default stream and times work on every stream. Under the kernelbench rules,
 * torch computation and other libraries are allowed (their share of the GPU time is reported).
 */
static bool is_advisory(const struct policy_report *rep, const char *rule)
{
    static const char *const source_names[] = {
        "torch-compute", "python", "process", "thread", "file",   "network",
        "dlopen",        "env",    "stream",  "memory", "device", "library",
    };
    static const char *const kernelbench_allows[] = {"torch-compute", "library"};
    if (strcmp(rule, "stream") == 0)
        return true;
    if (rep->basis == POLICY_BASIS_SOURCE_NAME &&
        rule_in(rule, source_names, ARRAY_SIZE(source_names)))
        return true;
    return rep->rules == POLICY_RULES_KERNELBENCH &&
           rule_in(rule, kernelbench_allows, ARRAY_SIZE(kernelbench_allows));
}

/* ---- the report ---- */

void policy_report_init(struct policy_report *rep)
{
    memset(rep, 0, sizeof(*rep));
}

void policy_report_release(struct policy_report *rep)
{
    for (size_t i = 0; i < rep->n; i++) {
        free(rep->items[i].file);
        free(rep->items[i].rule);
        free(rep->items[i].message);
        free(rep->items[i].origin_file);
    }
    free(rep->items);
    enum policy_rules rules = rep->rules;
    policy_report_init(rep);
    rep->rules = rules;
}

bool policy_report_ok(const struct policy_report *rep)
{
    return rep->n == rep->notes && rep->dropped == 0;
}

bool policy_report_has(const struct policy_report *rep, const char *rule)
{
    for (size_t i = 0; i < rep->n; i++)
        if (!rep->items[i].advisory && strcmp(rep->items[i].rule, rule) == 0)
            return true;
    return false;
}

static bool same_as_last(const struct policy_report *rep, const char *file, unsigned line,
                         const char *rule, const char *msg)
{
    if (rep->n == 0)
        return false;
    const struct policy_violation *v = &rep->items[rep->n - 1];
    return v->line == line && strcmp(v->file, file) == 0 && strcmp(v->rule, rule) == 0 &&
           strcmp(v->message, msg) == 0;
}

static void add(struct policy_report *rep, bool advisory, const char *file, unsigned line,
                const char *rule, const char *msg)
{
    if (same_as_last(rep, file, line, rule, msg))
        return;
    size_t kept = advisory ? rep->notes : rep->n - rep->notes;
    if (kept >= POLICY_MAX_VIOLATIONS) {
        if (advisory)
            rep->notes_dropped++;
        else
            rep->dropped++;
        return;
    }
    ALLOC_GROW(rep->items, rep->n + 1, rep->alloc);
    struct policy_violation *v = &rep->items[rep->n++];
    v->file = xstrdup(file);
    v->line = line;
    v->rule = xstrdup(rule);
    v->message = xstrdup(msg);
    v->advisory = advisory;
    v->origin_file = NULL;
    v->origin_line = 0;
    rep->notes += advisory;
}

void policy_report_set_origins(struct policy_report *rep, const char *origin_file,
                               unsigned (*origin)(void *ctx, const char *file, unsigned line),
                               void *ctx)
{
    for (size_t i = 0; i < rep->n; i++) {
        struct policy_violation *v = &rep->items[i];
        unsigned at = v->line ? origin(ctx, v->file, v->line) : 0;
        if (!at || v->origin_file)
            continue;
        v->origin_file = xstrdup(origin_file);
        v->origin_line = at;
    }
}

void policy_report_addf(struct policy_report *rep, const char *file, unsigned line,
                        const char *rule, const char *fmt, ...)
{
    char msg[MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (n < 0)
        msg[0] = '\0';
    else if ((size_t)n >= sizeof(msg))
        memcpy(msg + sizeof(msg) - 4, "...", 4);
    add(rep, is_advisory(rep, rule), file, line, rule, msg);
}

void policy_report_add_note(struct policy_report *rep, const char *file, unsigned line,
                            const char *rule, const char *message)
{
    char msg[MESSAGE_MAX];
    size_t n = strlen(message);
    if (n >= sizeof(msg)) {
        memcpy(msg, message, sizeof(msg) - 4);
        memcpy(msg + sizeof(msg) - 4, "...", 4);
    } else {
        memcpy(msg, message, n + 1);
    }
    add(rep, true, file, line, rule, msg);
}

static json_t *items_to_json(const struct policy_report *rep, bool advisory)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < rep->n; i++) {
        const struct policy_violation *v = &rep->items[i];
        if (v->advisory != advisory)
            continue;
        json_t *o = json_object();
        json_object_set_new(o, "file", json_string(v->file));
        json_object_set_new(o, "line", json_integer(v->line));
        json_object_set_new(o, "rule", json_string(v->rule));
        /* Messages quote names from the agent's files, which may not be valid UTF-8. */
        json_t *m = jsonx_string(sv_cstr(v->message));
        json_object_set_new(o, "message", m ? m : json_string("(message not valid UTF-8)"));
        if (v->origin_file) {
            json_t *f = jsonx_string(sv_cstr(v->origin_file));
            json_object_set_new(o, "origin",
                                json_pack("{s:o, s:I}", "file", f ? f : json_string("?"), "line",
                                          (json_int_t)v->origin_line));
        }
        json_array_append_new(arr, o);
    }
    return arr;
}

json_t *policy_report_to_json(const struct policy_report *rep)
{
    json_t *root = json_object();
    json_object_set_new(root, "ok", json_boolean(policy_report_ok(rep)));
    json_object_set_new(root, "rules", json_string(policy_rules_name(rep->rules)));
    json_object_set_new(root, "violations", items_to_json(rep, false));
    json_object_set_new(root, "notes", items_to_json(rep, true));
    json_object_set_new(root, "dropped", json_integer((json_int_t)rep->dropped));
    json_object_set_new(root, "notes_dropped", json_integer((json_int_t)rep->notes_dropped));
    return root;
}

static int format_item(const struct policy_violation *v, const char *tag, struct buf *out)
{
    if (v->origin_file)
        return buf_addf(out, "%s:%u (%s:%u): %s%s: %s\n", v->origin_file, v->origin_line, v->file,
                        v->line, tag, v->rule, v->message);
    if (v->line)
        return buf_addf(out, "%s:%u: %s%s: %s\n", v->file, v->line, tag, v->rule, v->message);
    return buf_addf(out, "%s: %s%s: %s\n", v->file, tag, v->rule, v->message);
}

int policy_report_format(const struct policy_report *rep, struct buf *out)
{
    int rc = 0;
    size_t shown = 0, total = rep->n - rep->notes;
    for (size_t i = 0; i < rep->n && rc == 0 && shown < POLICY_FORMAT_LINES; i++) {
        if (rep->items[i].advisory)
            continue;
        rc = format_item(&rep->items[i], "", out);
        shown++;
    }
    size_t more = total - shown + rep->dropped;
    if (rc == 0 && more)
        rc = buf_addf(out, "... and %zu more violation%s\n", more, more == 1 ? "" : "s");
    return rc;
}

int policy_report_format_notes(const struct policy_report *rep, const char *rule, struct buf *out)
{
    int rc = 0;
    size_t shown = 0;
    for (size_t i = 0; i < rep->n && rc == 0 && shown < POLICY_FORMAT_LINES; i++) {
        const struct policy_violation *v = &rep->items[i];
        if (!v->advisory || (rule && strcmp(v->rule, rule) != 0))
            continue;
        rc = format_item(v, "note: ", out);
        shown++;
    }
    return rc;
}

/* ---- helpers ---- */

int policy__eq(const char *name, size_t len, const char *s)
{
    size_t n = strlen(s);
    return n == len && memcmp(name, s, n) == 0;
}

int policy__starts(const char *name, size_t len, const char *prefix)
{
    size_t n = strlen(prefix);
    return n <= len && memcmp(name, prefix, n) == 0;
}

const char *policy__basename(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

void policy__add_hit(struct policy_report *rep, const char *file, unsigned line, const char *name,
                     size_t len, const struct policy__hit *hit)
{
    int n = len > 120 ? 120 : (int)len;
    policy_report_addf(rep, file, line, hit->rule, "`%.*s` %s. %s", n, name, hit->what,
                       hit->instead);
}
