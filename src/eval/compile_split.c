/*
 * compile_split.c - a load_inline cuda source cut into two translation units: the host
 * functions that use torch, for g++ with a precompiled torch header, and everything else, for
 * nvcc without torch (docs/internals/compile.md, "Split cu-torch units").
 *
 * Why: nvcc parses every header three times (cudafe++, cicc, the host compiler) and a gcc
 * precompiled header serves none of them, so a cu-torch unit costs ten times a plain .cu. In a
 * load_inline source torch is used by host functions only (argument checks, allocation, the
 * launch); kernels and device helpers are plain CUDA. Cut there, nvcc compiles a plain .cu and
 * g++ compiles the torch functions against the precompiled header, each in a fraction of the
 * time, and at once.
 *
 * The cut is lexical: tokens (comments, strings, raw strings and directives recognised), then
 * the namespace-scope items (directives, namespace and extern "C" blocks, declarations, class
 * definitions, function definitions), then for each item what each half gets:
 *
 *   item                                     dev (nvcc)       host (g++)
 *   #include of torch, ATen, c10, pybind11   blank            as written
 *   other directives, types, prototypes,     as written       as written
 *     constexpr and const variables
 *   host function that uses torch            blank            as written, launches lowered
 *   __global__ kernel                        as written       its declaration
 *   __device__ function                      as written       its declaration, "= delete"
 *   other function                           as written       its declaration; its definition
 *                                                             when it is inline, a template or
 *                                                             internal and the host half uses it
 *   mutable or device variable               as written       blank
 *
 * A launch `k<<<g, b, s, st>>>(args)` in the host half becomes what cudafe++ makes of it,
 * `(__cudaPushCallConfiguration(g, b, s, st)) ? (void)0 : k(args)`: a call of the kernel's host
 * stub, which the dev half defines and registers. A deleted declaration keeps overload
 * resolution what it was and makes a call of device code from host code an error, as nvcc does.
 * Both halves keep the source's line numbers and name it with #line, so messages, __FILE__ and
 * __LINE__ are the same.
 *
 * Invariant: the cut is an accelerator, never a change of meaning. What it cannot show to be the
 * same program (device code or a type that uses torch, a template or internal kernel launched
 * from host code, a mutable variable both halves would see, a source that tests __CUDACC__, a
 * macro that makes declarations, anything the tokenizer does not recognise) is not split:
 * compile__split_source returns 1 and says why. A split whose halves do not compile, or whose
 * merged object leaves a name undefined that the dev half should define
 * (compile__split_check_object), is built again as one nvcc unit by the caller.
 *
 * The parts, one idea each: compile_split_lex.c (tokens), compile_split_items.c (macros and
 * the namespace-scope items), compile_split_place.c (what each half gets, and every reason not
 * to cut), compile_split_emit.c (the halves written); this file holds the order of those steps
 * and the interface; compile_split_object.c checks the merged object.
 *
 * Thread-safe: no global state.
 */
#include "eval/compile_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/limits.h"
#include "core/util.h"
#include "core/banned.h"

/* Either half: the source plus the lowered launches and a few lines. */
#define HALF_MAX (2 * CA_LIMIT_WRITE_BYTES + 4096)
#define NAMES_MAX ((size_t)1 << 20)

int compile__cut_decline(struct compile__cut *s, const char *fmt, ...)
{
    if (!s->why[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(s->why, s->why_len, fmt, ap);
        va_end(ap);
    }
    return 1;
}

void compile__split_init(struct compile__split *sp)
{
    buf_init(&sp->dev, HALF_MAX);
    buf_init(&sp->host, HALF_MAX);
    buf_init(&sp->dev_names, NAMES_MAX);
    sp->why[0] = '\0';
}

void compile__split_release(struct compile__split *sp)
{
    buf_release(&sp->dev);
    buf_release(&sp->host);
    buf_release(&sp->dev_names);
}

int compile__split_source(struct sv src, const char *name, struct compile__split *out)
{
    buf_reset(&out->dev);
    buf_reset(&out->host);
    buf_reset(&out->dev_names);
    out->why[0] = '\0';
    struct compile__cut s = {.src = src, .why = out->why, .why_len = sizeof(out->why)};
    bool *dev_only = NULL, torch_functions = false;
    int rc = compile__cut_lex(&s);
    if (!rc) {
        compile__cut_scan_macros(&s);
        dev_only = xcalloc(s.n + 1, sizeof(bool));
        s.host_names = xcalloc(s.n + 1, sizeof(bool));
        rc = compile__cut_parse_items(&s);
    }
    if (!rc)
        rc = compile__cut_classify(&s, dev_only);
    if (!rc)
        rc = compile__cut_place_items(&s, &torch_functions);
    if (!rc && torch_functions)
        rc = compile__cut_check_includes(&s);
    if (!rc && torch_functions)
        rc = compile__cut_check_host_refs(&s, dev_only, &out->dev_names);
    if (!rc)
        rc = compile__cut_write_halves(&s, name, torch_functions, out);
    if (rc) {
        buf_reset(&out->dev);
        buf_reset(&out->host);
        buf_reset(&out->dev_names);
    }
    free(dev_only);
    free(s.host_names);
    free(s.t);
    free(s.it);
    free(s.macros);
    free(s.macro_torch);
    free(s.macro_structural);
    return rc ? 1 : 0;
}
