/*
 * compile_retry.c - which failures of a unit built with the accelerators (the
 * precompiled header, the light torch headers) are worth a second run without them.
 *
 * Decided by reading the compiler's words: a guess that costs at most one more
 * compile, never a wrong verdict (the second run decides).
 */
#include "eval/compile_internal.h"

#include <string.h>

#include "core/banned.h"

/*
 * A PCH-specific failure: gcc names the .gch ("pch.h.gch: created by a
 * different GCC executable"), PCH ("had to relocate PCH", "one or more PCH
 * files were found, but they were invalid") or the missing header itself.
 */
bool compile__pch_failure(const struct buf *out)
{
    return strstr(out->data, ".gch") || strstr(out->data, "PCH") ||
           strstr(out->data, "precompiled header") || strstr(out->data, "pch/pch.h: No such file");
}

/*
 * A failure the light torch headers may have caused: an error (gcc's and EDG's "error", "fatal
 * error") with a torch, ATen, c10 or pybind11 name on its line or on the two lines the compiler
 * quotes after it. What the compiler says about the name does not matter: a missing header, an
 * undeclared name, an operator or a conversion the light headers do not bring are all worded
 * differently (a list of phrases missed ATen's operators on real code). An error that names
 * none of them fails the same way twice, so it is not retried: a broken kernel costs one
 * compile, not two. A unit the heuristic misjudges costs its author time, never a wrong verdict.
 */
bool compile__light_failure(const struct buf *out)
{
    /* scalar_t and AT_*: the names AT_DISPATCH_* macros bring (found on leaderboard code). */
    static const char *const names[] = {"torch",    "at::", "'at'",   "\"at\"",   "ATen", "c10",
                                        "pybind11", "py::", "Tensor", "scalar_t", "AT_"};
    const char *p = out->data, *end = out->data + out->len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *eol = nl ? nl : end;
        /* From the word on: the unit's own name (kernels/kb_torch_ops.cu) says nothing. */
        const char *e = memmem(p, (size_t)(eol - p), "error", 5);
        if (e && !memmem(p, (size_t)(eol - p), "detected in the compilation of", 30)) {
            /* This line and the two after it (gcc and EDG quote the source there). */
            const char *q = eol;
            for (int k = 0; k < 2 && q < end; k++) {
                const char *n2 = memchr(q + 1, '\n', (size_t)(end - q - 1));
                q = n2 ? n2 : end;
            }
            for (size_t i = 0; i < ARRAY_SIZE(names); i++)
                if (memmem(e, (size_t)(q - e), names[i], strlen(names[i])))
                    return true;
        }
        p = eol + 1;
    }
    return false;
}
