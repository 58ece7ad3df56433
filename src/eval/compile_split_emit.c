/*
 * compile_split_emit.c - the two halves of a cut (compile_split.c) written out: each item as
 * written, blanked, declared or deleted, as placed; launches in the host half lowered as
 * cudafe++ lowers them; the gaps between items copied to both, so that every line stays where
 * it was in the source.
 */
#include "eval/compile_internal.h"

#include <string.h>

#include "core/util.h"
#include "core/banned.h"

static int add_newlines(struct buf *out, struct sv text)
{
    for (size_t i = 0; i < text.len; i++)
        if (text.p[i] == '\n' && buf_addch(out, '\n'))
            return CA_ETOOBIG;
    return 0;
}

static struct sv span(const struct compile__cut *s, size_t from_off, size_t to_off)
{
    return sv_from(s->src.p + from_off, to_off - from_off);
}

/*
 * Tokens [a, b) as written, with each launch lowered as cudafe++ lowers it:
 *   k<<<cfg>>>(args)  ->  ((::__cudaPushCallConfiguration(cfg)) ? (void)0 : k(args))
 * Lines are kept: what is dropped keeps its newlines.
 */
static int add_lowered(struct compile__cut *s, size_t a, size_t b, struct buf *out)
{
    size_t pos = s->t[a].off;
    for (size_t i = a; i < b; i++) {
        if (!compile__cut_launch_at(s, i))
            continue;
        /* The kernel's name and its qualifiers: [::][ns::]...k */
        size_t callee = i - 1;
        while (callee >= a + 2 && compile__cut_scope_op(s, callee - 2)) {
            if (callee >= a + 3 && s->t[callee - 3].kind == COMPILE__TK_IDENT) {
                callee -= 3;
            } else {
                callee -= 2;
                break;
            }
        }
        size_t cfg = i + 3, close = SIZE_MAX;
        for (size_t j = cfg; j < b; j++) {
            if (compile__cut_is_punct(s, j, '(') || compile__cut_is_punct(s, j, '[') ||
                compile__cut_is_punct(s, j, '{')) {
                size_t e = compile__cut_match(s, j);
                if (e == SIZE_MAX || e >= b)
                    break;
                j = e;
            } else if (compile__cut_triple(s, j, '>')) {
                close = j;
                break;
            } else if (compile__cut_launch_at(s, j) || compile__cut_is_punct(s, j, ';')) {
                break;
            }
        }
        if (close == SIZE_MAX || close == cfg || !compile__cut_is_punct(s, close + 3, '('))
            return compile__cut_decline(s, "a launch whose configuration the cut cannot read");
        size_t lp = close + 3, rp = compile__cut_match(s, lp);
        if (rp == SIZE_MAX || rp >= b)
            return compile__cut_decline(s, "a launch whose arguments the cut cannot read");
        for (size_t j = lp; j < rp; j++)
            if (compile__cut_launch_at(s, j))
                return compile__cut_decline(s, "a launch inside a launch's arguments");
        if (buf_add(out, s->src.p + pos, s->t[callee].off - pos) ||
            buf_addstr(out, "((::__cudaPushCallConfiguration(") ||
            buf_add(out, s->src.p + s->t[cfg].off,
                    compile__cut_tok_end(s, close - 1) - s->t[cfg].off) ||
            buf_addstr(out, ")) ? (void)0 : ") ||
            buf_add(out, s->src.p + s->t[callee].off, s->t[i].off - s->t[callee].off) ||
            add_newlines(out, span(s, compile__cut_tok_end(s, close + 2), s->t[lp].off)) ||
            buf_add(out, s->src.p + s->t[lp].off, compile__cut_tok_end(s, rp) - s->t[lp].off) ||
            buf_addch(out, ')'))
            return compile__cut_decline(s, "the halves are too large");
        pos = compile__cut_tok_end(s, rp);
        i = rp;
    }
    if (buf_add(out, s->src.p + pos, compile__cut_tok_end(s, b - 1) - pos))
        return compile__cut_decline(s, "the halves are too large");
    return 0;
}

static int add_item_text(struct compile__cut *s, const struct compile__item *it,
                         enum compile__place pl, bool host, struct buf *out)
{
    size_t start = s->t[it->t0].off, end = compile__cut_tok_end(s, it->t1 - 1);
    int rc = 0;
    switch (pl) {
    case COMPILE__PL_TEXT:
        if (host && it->launches)
            return add_lowered(s, it->t0, it->t1, out);
        rc = buf_add(out, s->src.p + start, end - start);
        break;
    case COMPILE__PL_BLANK:
        rc = add_newlines(out, span(s, start, end));
        break;
    case COMPILE__PL_PROTO:
    case COMPILE__PL_DELETED: {
        /* The head, without the blanks before the body, then ";" or " = delete;". */
        size_t head = s->t[it->body].off;
        while (head > start && (s->src.p[head - 1] == ' ' || s->src.p[head - 1] == '\t'))
            head--;
        rc = buf_add(out, s->src.p + start, head - start);
        if (!rc)
            rc = buf_addstr(out, pl == COMPILE__PL_PROTO ? ";" : " = delete;");
        if (!rc)
            rc = add_newlines(out, span(s, head, end));
        break;
    }
    }
    return rc ? compile__cut_decline(s, "the halves are too large") : 0;
}

/*
 * The C library headers torch/types.h (and so torch/extension.h) includes, light or real:
 * code written against torch uses FLT_MAX, INT_MAX, assert... without including them. The nvcc
 * half gets them where torch was included first; they cost nvcc next to nothing, unlike the
 * C++ library headers torch also brings (<algorithm> alone adds a quarter to a small unit).
 */
static const char torch_c_headers[] = "#include <cassert>\n#include <cfloat>\n#include <climits>\n"
                                      "#include <cmath>\n#include <cstddef>\n#include <cstdint>\n"
                                      "#include <cstdio>\n#include <cstdlib>\n#include <cstring>\n";

/* Whether the source includes torch/types.h or torch/extension.h first, before any code. */
static bool includes_torch_first(const struct compile__cut *s)
{
    for (size_t i = 0; i < s->ni && s->it[i].kind == COMPILE__IT_DIRECTIVE; i++) {
        struct sv h = compile__cut_system_include(s, i);
        if (sv_eq_cstr(h, "<torch/types.h>") || sv_eq_cstr(h, "<torch/extension.h>"))
            return true;
    }
    return false;
}

int compile__cut_write_halves(struct compile__cut *s, const char *name, bool torch_functions,
                              struct compile__split *out)
{
    if ((includes_torch_first(s) && buf_addstr(&out->dev, torch_c_headers)) ||
        buf_addf(&out->dev, "#line 1 \"%s\"\n", name))
        return compile__cut_decline(s, "the halves are too large");
    /* What nvcc's host pass has and g++ lacks: the launch's entry point into the CUDA runtime,
     * and the CUDA qualifiers cuda_runtime.h defines only for nvcc (host_defines.h), as nvcc
     * defines them for host code. */
    if (torch_functions &&
        buf_addf(&out->host,
                 "/* cuda-agent: the torch functions of %s, for g++; the rest is built by "
                 "nvcc. */\n"
                 "extern \"C\" unsigned __cudaPushCallConfiguration(dim3, dim3, size_t = 0, "
                 "struct CUstream_st * = 0);\n"
                 "#ifndef __launch_bounds__\n#define __launch_bounds__(...)\n#endif\n"
                 "#ifndef __noinline__\n#define __noinline__ __attribute__((noinline))\n#endif\n"
                 "#ifndef __nv_register_params__\n#define __nv_register_params__\n#endif\n"
                 "#line 1 \"%s\"\n",
                 name, name))
        return compile__cut_decline(s, "the halves are too large");
    size_t pos = 0;
    for (size_t n = 0; n < s->ni; n++) {
        const struct compile__item *it = &s->it[n];
        struct sv gap = span(s, pos, s->t[it->t0].off);
        if (buf_add(&out->dev, gap.p, gap.len) ||
            (torch_functions && buf_add(&out->host, gap.p, gap.len)))
            return compile__cut_decline(s, "the halves are too large");
        if (add_item_text(s, it, it->dev, false, &out->dev) ||
            (torch_functions && add_item_text(s, it, it->host, true, &out->host)))
            return 1;
        pos = compile__cut_tok_end(s, it->t1 - 1);
    }
    struct sv tail = span(s, pos, s->src.len);
    if (buf_add(&out->dev, tail.p, tail.len) ||
        (torch_functions && buf_add(&out->host, tail.p, tail.len)))
        return compile__cut_decline(s, "the halves are too large");
    return 0;
}
