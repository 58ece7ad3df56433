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
 * A failure the light torch headers may have caused: a name or header the real ones would have
 * brought (gcc's and EDG's words), with a torch, ATen, c10 or pybind11 name on the error's line
 * or on the source lines the compiler quotes after it. Any other error fails the same way twice,
 * so it is not retried: a broken binding costs one compile, not two. A unit the heuristic
 * misjudges costs its author time, never a wrong verdict.
 */
bool compile__light_failure(const struct buf *out)
{
    static const char *const words[] = {"is undefined",
                                        "has no member",
                                        "was not declared",
                                        "is not a member of",
                                        "incomplete type",
                                        "no instance of",
                                        "no matching",
                                        "cannot open source file",
                                        "No such file",
                                        "not a class, namespace",
                                        "must be a class or namespace",
                                        "has not been declared",
                                        "does not name a type",
                                        "is not a namespace"};
    /* scalar_t and AT_*: the names AT_DISPATCH_* macros bring (found on leaderboard code). */
    static const char *const names[] = {"torch",    "at::", "'at'",   "\"at\"",   "ATen", "c10",
                                        "pybind11", "py::", "Tensor", "scalar_t", "AT_"};
    const char *p = out->data, *end = out->data + out->len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *eol = nl ? nl : end;
        bool word = false;
        for (size_t i = 0; !word && i < ARRAY_SIZE(words); i++)
            word = memmem(p, (size_t)(eol - p), words[i], strlen(words[i])) != NULL;
        if (word) {
            /* This line and the two after it (gcc and EDG quote the source there). */
            const char *q = eol;
            for (int k = 0; k < 2 && q < end; k++) {
                const char *n2 = memchr(q + 1, '\n', (size_t)(end - q - 1));
                q = n2 ? n2 : end;
            }
            for (size_t i = 0; i < ARRAY_SIZE(names); i++)
                if (memmem(p, (size_t)(q - p), names[i], strlen(names[i])))
                    return true;
        }
        p = eol + 1;
    }
    return false;
}
