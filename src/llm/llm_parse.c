/*
 * llm_parse.c - Chat Completions bodies: the request we send and the reply
 * we get, including text-form tool calls.
 *
 * Everything here is pure (no I/O) so that it can be unit-tested and fuzzed
 * (tests/fuzz/fuzz_llm_reply.c). Invariants: a parsed reply always has a
 * normalised assistant message whose tool_calls (when present) each have an
 * id, type "function" and a string `arguments`, one per entry of r->calls, in
 * order; anything malformed in a call is an ->error for the model, never a
 * failure of the parse.
 */
#include "llm/llm.h"

#include <inttypes.h>
#include <string.h>

#include "core/json.h"
#include "core/limits.h"
#include "core/banned.h"

void llm_reply_init(struct llm_reply *r)
{
    memset(r, 0, sizeof(*r));
    r->prompt_tokens = r->completion_tokens = r->total_tokens = -1;
}

void llm_reply_release(struct llm_reply *r)
{
    for (size_t i = 0; i < r->ncalls; i++) {
        free(r->calls[i].id);
        free(r->calls[i].name);
        free(r->calls[i].arguments);
        free(r->calls[i].error);
        json_decref(r->calls[i].args);
    }
    free(r->calls);
    free(r->content);
    free(r->finish_reason);
    json_decref(r->message);
    json_decref(r->logprobs);
    json_decref(r->token_ids);
    json_decref(r->prompt_token_ids);
    json_decref(r->reasoning);
    llm_reply_init(r);
}

/* ---- request ---- */

int llm_build_request(const struct llm_opts *o, struct sv messages_json, struct sv tools_json,
                      struct buf *out)
{
    json_t *model = json_string(o->model ? o->model : "");
    if (!model)
        return CA_EUTF8;
    int rc = buf_addstr(out, "{\"model\":");
    rc = rc ? rc : jsonx_dump(model, 0, out);
    json_decref(model);
    rc = rc ? rc : buf_addstr(out, ",\"messages\":");
    rc = rc ? rc : buf_add(out, messages_json.p, messages_json.len);
    if (tools_json.len) {
        rc = rc ? rc : buf_addstr(out, ",\"tools\":");
        rc = rc ? rc : buf_add(out, tools_json.p, tools_json.len);
        rc = rc ? rc
                : buf_addf(out, ",\"tool_choice\":\"%s\"",
                           o->tool_choice && *o->tool_choice ? o->tool_choice : "auto");
    }
    if (o->temperature >= 0)
        rc = rc ? rc : buf_addf(out, ",\"temperature\":%.17g", o->temperature);
    if (o->top_p >= 0)
        rc = rc ? rc : buf_addf(out, ",\"top_p\":%.17g", o->top_p);
    if (o->max_tokens > 0)
        rc = rc ? rc : buf_addf(out, ",\"max_tokens\":%" PRId64, o->max_tokens);
    if (o->seed >= 0)
        rc = rc ? rc : buf_addf(out, ",\"seed\":%" PRId64, o->seed);
    if (o->logprobs)
        rc = rc ? rc : buf_addstr(out, ",\"logprobs\":true");
    if (o->token_ids)
        rc = rc ? rc : buf_addstr(out, ",\"return_token_ids\":true");
    rc = rc ? rc : buf_addch(out, '}');
    return rc;
}

/* ---- tool calls ---- */

static struct llm_tool_call *new_call(struct llm_reply *r, int64_t seq)
{
    ALLOC_GROW(r->calls, r->ncalls + 1, r->calls_alloc);
    struct llm_tool_call *c = &r->calls[r->ncalls];
    memset(c, 0, sizeof(*c));
    c->id = xstrfmt("call_%" PRId64 "_%zu", seq, r->ncalls);
    r->ncalls++;
    return c;
}

static void call_error(struct llm_tool_call *c, const char *fmt, ...) CA_PRINTF(2, 3);
static void call_error(struct llm_tool_call *c, const char *fmt, ...)
{
    if (c->error)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    c->error = xstrdup(msg);
}

/* Parse c->arguments into c->args (an object); "" counts as {}. */
static void parse_arguments(struct llm_tool_call *c)
{
    struct sv a = sv_trim(sv_cstr(c->arguments));
    if (a.len == 0) {
        c->args = json_object();
        return;
    }
    struct ca_err e = {0};
    json_t *v = NULL;
    if (jsonx_parse(a, CA_LIMIT_MODEL_REPLY, "the arguments", &v, &e) != 0) {
        call_error(c,
                   "%s. Call the tool again with its arguments as one JSON object that matches "
                   "its schema.",
                   e.msg);
        return;
    }
    if (!json_is_object(v)) {
        json_decref(v);
        call_error(c, "the arguments must be a JSON object matching the tool's schema");
        return;
    }
    c->args = v;
}

/* Fill a call from {"name", "arguments"|"parameters"} (text form) or a
 * native {"id","function":{"name","arguments"}}. */
static void fill_call(struct llm_tool_call *c, const json_t *fn, size_t index)
{
    const json_t *name = json_object_get(fn, "name");
    const json_t *args = json_object_get(fn, "arguments");
    if (!args)
        args = json_object_get(fn, "parameters");
    c->name = xstrdup(json_is_string(name) ? json_string_value(name) : "");
    if (json_is_string(args)) {
        c->arguments = xstrdup(json_string_value(args));
    } else if (json_is_object(args)) {
        c->arguments = json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (!c->arguments)
            c->arguments = xstrdup("{}");
    } else {
        c->arguments = xstrdup(args && !json_is_null(args) ? "(not a JSON object)" : "");
    }
    if (!json_is_string(name) || !*c->name) {
        call_error(c, "tool call %zu has no function name; name one of the tools", index + 1);
        return;
    }
    if (args && !json_is_string(args) && !json_is_object(args) && !json_is_null(args)) {
        call_error(c, "the arguments must be a JSON object matching the tool's schema");
        return;
    }
    parse_arguments(c);
    if (index >= CA_LIMIT_TOOL_CALLS)
        call_error(c, "more than %d tool calls in one reply: this one was not run",
                   CA_LIMIT_TOOL_CALLS);
}

/* A JSON value in text form: one call object or an array of them. Returns
 * how many calls it gave; when `strict` a value that is no call becomes a
 * malformed call (inside <tool_call>), else it is ignored (a fenced block
 * that is just code). */
static size_t add_text_value(struct llm_reply *r, int64_t seq, struct sv text, bool strict)
{
    json_t *v = NULL;
    struct ca_err e = {0};
    if (jsonx_parse(sv_trim(text), CA_LIMIT_MODEL_REPLY, "the tool call", &v, &e) != 0) {
        if (!strict)
            return 0;
        struct llm_tool_call *c = new_call(r, seq);
        c->name = xstrdup("");
        c->arguments = sv_dup(sv_trim(text));
        call_error(c,
                   "%s. Write a tool call as <tool_call>{\"name\": TOOL, \"arguments\": "
                   "{...}}</tool_call>.",
                   e.msg);
        return 1;
    }
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    size_t got = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_is_array(v) ? json_array_get(v, i) : v;
        bool looks = json_is_object(o) && json_is_string(json_object_get(o, "name")) &&
                     (json_object_get(o, "arguments") || json_object_get(o, "parameters"));
        if (!looks && !strict)
            continue;
        struct llm_tool_call *c = new_call(r, seq);
        if (!json_is_object(o)) {
            c->name = xstrdup("");
            c->arguments = xstrdup("");
            call_error(c, "a tool call must be a JSON object {\"name\": TOOL, \"arguments\": "
                          "{...}}");
        } else {
            fill_call(c, o, r->ncalls - 1);
        }
        got++;
    }
    json_decref(v);
    return got;
}

/* Append to the leftover content; past rest's bound the text is cut (the
 * calls found are what matters). */
static void keep(struct buf *rest, const char *p, size_t n)
{
    if (buf_add(rest, p, n) != 0)
        return;
}

size_t llm_text_tool_calls(struct sv content, int64_t seq, struct llm_reply *r, struct buf *rest)
{
    static const struct sv open = SV_LIT("<tool_call>"), close = SV_LIT("</tool_call>");
    size_t found = 0;
    struct sv s = content;
    bool tagged = sv_find(s, open) >= 0;
    while (s.len) {
        if (tagged) {
            long at = sv_find(s, open);
            if (at < 0)
                break;
            keep(rest, s.p, (size_t)at);
            s = sv_sub(s, (size_t)at + open.len, SIZE_MAX);
            long end = sv_find(s, close);
            struct sv inner = sv_sub(s, 0, end < 0 ? s.len : (size_t)end);
            found += add_text_value(r, seq, inner, true);
            s = end < 0 ? sv_sub(s, s.len, 0) : sv_sub(s, (size_t)end + close.len, SIZE_MAX);
            continue;
        }
        long at = sv_find(s, SV_LIT("```"));
        if (at < 0)
            break;
        struct sv after = sv_sub(s, (size_t)at + 3, SIZE_MAX);
        long nl = sv_find_ch(after, '\n');
        if (nl < 0)
            break;
        struct sv lang = sv_trim(sv_sub(after, 0, (size_t)nl));
        struct sv body = sv_sub(after, (size_t)nl + 1, SIZE_MAX);
        long end = sv_find(body, SV_LIT("```"));
        if (end < 0)
            break;
        size_t before = r->ncalls;
        bool maybe = lang.len == 0 || sv_eq_cstr(lang, "json") || sv_eq_cstr(lang, "tool_call") ||
                     sv_eq_cstr(lang, "tool_code") || sv_eq_cstr(lang, "tool");
        size_t n = maybe ? add_text_value(r, seq, sv_sub(body, 0, (size_t)end), false) : 0;
        size_t block_end = (size_t)(body.p - s.p) + (size_t)end + 3;
        if (n == 0 || r->ncalls == before)
            keep(rest, s.p, block_end);
        else
            keep(rest, s.p, (size_t)at);
        found += n;
        s = sv_sub(s, block_end, SIZE_MAX);
    }
    keep(rest, s.p, s.len);
    return found;
}

/* ---- reply ---- */

static char *dup_str(const json_t *v)
{
    return json_is_string(v) ? xstrdup(json_string_value(v)) : NULL;
}

static int64_t get_count(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    return json_is_integer(v) && json_integer_value(v) >= 0 ? (int64_t)json_integer_value(v) : -1;
}

/* Content as text: a string, or an array of {"type":"text","text"} parts. */
static char *content_text(const json_t *c, size_t max)
{
    if (json_is_string(c))
        return xstrdup(json_string_value(c));
    if (!json_is_array(c))
        return NULL;
    struct buf b;
    buf_init(&b, max);
    size_t i;
    const json_t *part;
    json_array_foreach(c, i, part)
    {
        const json_t *t = json_object_get(part, "text");
        if (json_is_string(t) && buf_addstr(&b, json_string_value(t)))
            break;
    }
    return buf_detach(&b, NULL);
}

static json_t *normalised_message(const struct llm_reply *r, const char *content)
{
    json_t *m = json_pack("{s:s}", "role", "assistant");
    json_t *c = content && *content ? json_string(content) : json_null();
    json_object_set_new(m, "content", c ? c : json_string(""));
    if (!r->ncalls)
        return m;
    json_t *calls = json_array();
    for (size_t i = 0; i < r->ncalls; i++) {
        const struct llm_tool_call *tc = &r->calls[i];
        json_t *name = json_string(tc->name), *args = json_string(tc->arguments);
        json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:o, s:o}}", "id", tc->id, "type",
                                               "function", "function", "name",
                                               name ? name : json_string(""), "arguments",
                                               args ? args : json_string("")));
    }
    json_object_set_new(m, "tool_calls", calls);
    return m;
}

int llm_parse_reply(struct sv body, unsigned flags, int64_t seq, struct llm_reply *r,
                    struct ca_err *err)
{
    json_t *root = NULL;
    int rc = jsonx_parse(body, CA_LIMIT_MODEL_REPLY, "the model's reply", &root, err);
    if (rc)
        return rc == CA_ETOOBIG ? rc : CA_EPARSE;
    const json_t *e = json_object_get(root, "error");
    const json_t *choices = json_object_get(root, "choices");
    if (e && !json_is_null(e)) {
        const char *msg = json_string_value(json_object_get(e, "message"));
        if (!msg)
            msg = json_string_value(e);
        rc = err_setf(err, CA_EPARSE, "the model server reported an error: %s",
                      msg ? msg : "(no message)");
        goto out;
    }
    if (!json_is_array(choices) || json_array_size(choices) == 0) {
        rc = err_setf(err, CA_EPARSE, "the model's reply has no \"choices\"");
        goto out;
    }
    const json_t *ch = json_array_get(choices, 0);
    const json_t *msg = json_object_get(ch, "message");
    if (!json_is_object(msg)) {
        rc = err_setf(err, CA_EPARSE, "the model's reply has no choices[0].message object");
        goto out;
    }
    r->finish_reason = dup_str(json_object_get(ch, "finish_reason"));
    r->content = content_text(json_object_get(msg, "content"), CA_LIMIT_MODEL_REPLY);
    const json_t *reasoning = json_object_get(msg, "reasoning_content");
    if (!reasoning)
        reasoning = json_object_get(msg, "reasoning");
    if (json_is_string(reasoning))
        r->reasoning = json_incref((json_t *)reasoning);

    const json_t *tcs = json_object_get(msg, "tool_calls");
    if (json_is_array(tcs)) {
        size_t i;
        const json_t *tc;
        json_array_foreach(tcs, i, tc)
        {
            struct llm_tool_call *c = new_call(r, seq);
            const char *id = json_string_value(json_object_get(tc, "id"));
            bool dup = false; /* every tool message must answer one call: ids are unique */
            for (size_t k = 0; id && k + 1 < r->ncalls; k++)
                dup = dup || strcmp(r->calls[k].id, id) == 0;
            if (id && *id && !dup && strlen(id) <= CA_LIMIT_ID &&
                utf8_valid(id, strlen(id), NULL)) {
                free(c->id);
                c->id = xstrdup(id);
            }
            const json_t *fn = json_object_get(tc, "function");
            if (!json_is_object(fn)) {
                c->name = xstrdup("");
                c->arguments = xstrdup("");
                call_error(c, "tool call %zu has no \"function\" object", i + 1);
                continue;
            }
            fill_call(c, fn, i);
        }
    }
    struct buf rest;
    buf_init(&rest, CA_LIMIT_MODEL_REPLY);
    const char *content = r->content;
    if (!r->ncalls && r->content && !(flags & LLM_PARSE_NO_TEXT_TOOLS) &&
        llm_text_tool_calls(sv_cstr(r->content), seq, r, &rest) > 0) {
        r->text_form = true;
        buf_rtrim(&rest);
        content = rest.data;
    }
    r->message = normalised_message(r, content);
    buf_release(&rest);

    const json_t *usage = json_object_get(root, "usage");
    if (json_is_object(usage)) {
        r->prompt_tokens = get_count(usage, "prompt_tokens");
        r->completion_tokens = get_count(usage, "completion_tokens");
        r->total_tokens = get_count(usage, "total_tokens");
    }
    const json_t *lp = json_object_get(ch, "logprobs");
    if (lp && !json_is_null(lp))
        r->logprobs = json_incref((json_t *)lp);
    const json_t *ids = json_object_get(ch, "token_ids");
    if (json_is_array(ids))
        r->token_ids = json_incref((json_t *)ids);
    ids = json_object_get(root, "prompt_token_ids");
    if (!ids)
        ids = json_object_get(ch, "prompt_token_ids");
    if (json_is_array(ids))
        r->prompt_token_ids = json_incref((json_t *)ids);
    rc = 0;
out:
    json_decref(root);
    return rc;
}
