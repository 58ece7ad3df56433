/*
 * libFuzzer target: arbitrary bytes as a model server's reply body, through
 * llm_parse_reply (native tool calls, usage, logprobs) with and without
 * text-form tool calls, and the content alone through
 * llm_text_tool_calls. Checks the parser's invariants: a parsed reply has a
 * normalised message whose tool_calls match r->calls one to one (id, name,
 * string arguments), every call either has an args object or an error, and
 * the message serialises as JSON.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/limits.h"
#include "llm/llm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const struct llm_reply *r)
{
    if (!r->message)
        __builtin_trap();
    const json_t *calls = json_object_get(r->message, "tool_calls");
    if (json_array_size(calls) != r->ncalls)
        __builtin_trap();
    for (size_t i = 0; i < r->ncalls; i++) {
        const struct llm_tool_call *c = &r->calls[i];
        if (!c->id || !c->name || !c->arguments)
            __builtin_trap();
        if ((c->args == NULL) == (c->error == NULL))
            __builtin_trap();
        if (c->args && !json_is_object(c->args))
            __builtin_trap();
        const json_t *m = json_array_get(calls, i);
        if (strcmp(json_string_value(json_object_get(m, "id")), c->id) != 0)
            __builtin_trap();
        if (!json_is_string(json_object_get(json_object_get(m, "function"), "arguments")))
            __builtin_trap();
    }
    char *d = json_dumps(r->message, JSON_COMPACT);
    if (!d)
        __builtin_trap();
    free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sv body = sv_from((const char *)data, size);
    for (unsigned flags = 0; flags < 2; flags++) {
        struct llm_reply r;
        llm_reply_init(&r);
        struct ca_err err;
        if (llm_parse_reply(body, flags ? LLM_PARSE_NO_TEXT_TOOLS : 0, 1, &r, &err) == 0)
            check(&r);
        llm_reply_release(&r);
    }
    if (utf8_valid(body.p, body.len, NULL)) {
        struct llm_reply r;
        llm_reply_init(&r);
        struct buf rest;
        buf_init(&rest, CA_LIMIT_MODEL_REPLY);
        size_t n = llm_text_tool_calls(body, 2, &r, &rest);
        if (n > r.ncalls || rest.len > body.len)
            __builtin_trap();
        buf_release(&rest);
        llm_reply_release(&r);
    }
    return 0;
}
