/*
 * Unit tests of the model client (src/llm): reply parsing, native and
 * text-form tool calls, the request body, and the retry loop through an
 * in-memory transport (status codes, Retry-After, deadlines, cancel).
 */
#include "test.h"

#include "core/limits.h"
#include "llm/llm.h"

static struct llm_reply R;

static int parse(const char *body, unsigned flags)
{
    llm_reply_release(&R);
    llm_reply_init(&R);
    struct ca_err err = {0};
    int rc = llm_parse_reply(sv_cstr(body), flags, 7, &R, &err);
    if (rc)
        printf("parse: %s\n", err.msg);
    return rc;
}

static const char *msg_content(void)
{
    return json_string_value(json_object_get(R.message, "content"));
}

static const json_t *msg_call(size_t i)
{
    return json_array_get(json_object_get(R.message, "tool_calls"), i);
}

#define REPLY(msg) "{\"choices\":[{\"index\":0,\"message\":" msg ",\"finish_reason\":\"stop\"}]}"

TEST(llm_native_tool_calls_usage_logprobs)
{
    const char *body =
        "{\"id\":\"x\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
        "\"content\":\"Let me look.\",\"tool_calls\":[{\"id\":\"call_a\",\"type\":\"function\","
        "\"function\":{\"name\":\"Bash\",\"arguments\":\"{\\\"command\\\":\\\"ls\\\"}\"}},"
        "{\"id\":\"call_b\",\"type\":\"function\",\"function\":{\"name\":\"Read\","
        "\"arguments\":{\"file_path\":\"model.py\"}}}]},\"finish_reason\":\"tool_calls\","
        "\"logprobs\":{\"content\":[{\"token\":\"L\",\"logprob\":-0.5}]},\"token_ids\":[1,2,3]}],"
        "\"usage\":{\"prompt_tokens\":1200,\"completion_tokens\":34,\"total_tokens\":1234},"
        "\"prompt_token_ids\":[9,9]}";
    REQUIRE(parse(body, 0) == 0);
    REQUIRE(R.ncalls == 2);
    CHECK_STR(R.calls[0].id, "call_a");
    CHECK_STR(R.calls[0].name, "Bash");
    CHECK(R.calls[0].error == NULL);
    CHECK_STR(json_string_value(json_object_get(R.calls[0].args, "command")), "ls");
    CHECK_STR(R.calls[1].name, "Read");
    CHECK(R.calls[1].args && json_is_object(R.calls[1].args));
    CHECK(!R.text_form);
    CHECK_STR(R.finish_reason, "tool_calls");
    CHECK_EQ(R.prompt_tokens, 1200);
    CHECK_EQ(R.completion_tokens, 34);
    CHECK_EQ(R.total_tokens, 1234);
    CHECK(json_array_size(R.token_ids) == 3);
    CHECK(json_array_size(R.prompt_token_ids) == 2);
    CHECK(json_is_object(R.logprobs));
    CHECK_STR(msg_content(), "Let me look.");
    /* Arguments in the normalised message are always strings. */
    const json_t *fn = json_object_get(msg_call(1), "function");
    CHECK(json_is_string(json_object_get(fn, "arguments")));
    CHECK_STR(json_string_value(json_object_get(msg_call(1), "type")), "function");
    llm_reply_release(&R);
}

TEST(llm_malformed_calls_carry_errors)
{
    const char *body = REPLY(
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":["
        "{\"id\":\"1\",\"function\":{\"name\":\"Bash\",\"arguments\":\"{\\\"command\\\": \"}},"
        "{\"id\":\"2\",\"function\":{\"name\":\"Bash\",\"arguments\":\"[1]\"}},"
        "{\"id\":\"3\",\"function\":{\"arguments\":\"{}\"}},"
        "{\"id\":\"4\",\"type\":\"function\"},"
        "{\"function\":{\"name\":\"Glob\",\"arguments\":\"\"}},"
        "{\"id\":\"6\",\"function\":{\"name\":\"Bash\",\"arguments\":5}}]}");
    REQUIRE(parse(body, 0) == 0);
    REQUIRE(R.ncalls == 6);
    CHECK_CONTAINS(R.calls[0].error, "invalid JSON");
    CHECK_CONTAINS(R.calls[1].error, "JSON object");
    CHECK_CONTAINS(R.calls[2].error, "no function name");
    CHECK_CONTAINS(R.calls[3].error, "no \"function\"");
    CHECK(R.calls[4].error == NULL); /* "" arguments are {} */
    CHECK(json_object_size(R.calls[4].args) == 0);
    CHECK_STR(R.calls[4].id, "call_7_4"); /* synthesised from seq and index */
    CHECK_CONTAINS(R.calls[5].error, "JSON object");
    /* Every call, malformed or not, is in the message with an id. */
    CHECK(json_array_size(json_object_get(R.message, "tool_calls")) == 6);
    CHECK(json_is_null(json_object_get(R.message, "content")));
    llm_reply_release(&R);
}

TEST(llm_duplicate_ids_are_renamed)
{
    REQUIRE(parse(REPLY("{\"tool_calls\":["
                        "{\"id\":\"same\",\"function\":{\"name\":\"Glob\",\"arguments\":\"{}\"}},"
                        "{\"id\":\"same\",\"function\":{\"name\":\"Grep\",\"arguments\":\"{}\"}},"
                        "{\"id\":\"\",\"function\":{\"name\":\"Read\",\"arguments\":\"{}\"}}]}"),
                  0) == 0);
    REQUIRE(R.ncalls == 3);
    CHECK_STR(R.calls[0].id, "same");
    CHECK_STR(R.calls[1].id, "call_7_1");
    CHECK_STR(R.calls[2].id, "call_7_2");
    CHECK_STR(json_string_value(json_object_get(msg_call(1), "id")), "call_7_1");
    llm_reply_release(&R);
}

TEST(llm_too_many_calls)
{
    struct buf b;
    buf_init(&b, 1 << 20);
    REQUIRE(buf_addstr(&b, "{\"choices\":[{\"message\":{\"tool_calls\":[") == 0);
    for (int i = 0; i < CA_LIMIT_TOOL_CALLS + 2; i++)
        REQUIRE(buf_addf(&b,
                         "%s{\"id\":\"c%d\",\"function\":{\"name\":\"Glob\",\"arguments\":"
                         "\"{}\"}}",
                         i ? "," : "", i) == 0);
    REQUIRE(buf_addstr(&b, "]}}]}") == 0);
    REQUIRE(parse(b.data, 0) == 0);
    CHECK_EQ(R.ncalls, CA_LIMIT_TOOL_CALLS + 2);
    CHECK(R.calls[CA_LIMIT_TOOL_CALLS - 1].error == NULL);
    CHECK_CONTAINS(R.calls[CA_LIMIT_TOOL_CALLS].error, "not run");
    buf_release(&b);
    llm_reply_release(&R);
}

TEST(llm_not_a_reply)
{
    struct ca_err err = {0};
    llm_reply_init(&R);
    CHECK_EQ(llm_parse_reply(sv_cstr("nope"), 0, 1, &R, &err), CA_EPARSE);
    llm_reply_release(&R);
    CHECK_EQ(llm_parse_reply(sv_cstr("{\"choices\":[]}"), 0, 1, &R, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "choices");
    llm_reply_release(&R);
    CHECK_EQ(
        llm_parse_reply(sv_cstr("{\"error\":{\"message\":\"model overloaded\"}}"), 0, 1, &R, &err),
        CA_EPARSE);
    CHECK_CONTAINS(err.msg, "model overloaded");
    llm_reply_release(&R);
    CHECK_EQ(llm_parse_reply(sv_cstr("{\"choices\":[{\"message\":\"hi\"}]}"), 0, 1, &R, &err),
             CA_EPARSE);
    llm_reply_release(&R);
}

TEST(llm_content_parts_and_reasoning)
{
    REQUIRE(parse(REPLY("{\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\","
                        "\"text\":\"b\"}],\"reasoning_content\":\"thinking\"}"),
                  0) == 0);
    CHECK_STR(R.content, "ab");
    CHECK_STR(json_string_value(R.reasoning), "thinking");
    CHECK_EQ(R.ncalls, 0);
    CHECK_EQ(R.prompt_tokens, -1);
    llm_reply_release(&R);
}

TEST(llm_text_form_tagged)
{
    REQUIRE(parse(REPLY("{\"content\":\"Checking.\\n<tool_call>\\n{\\\"name\\\": \\\"Bash\\\", "
                        "\\\"arguments\\\": {\\\"command\\\": \\\"ls\\\"}}\\n</tool_call>\\n"
                        "<tool_call>{\\\"name\\\": \\\"Read\\\", \\\"parameters\\\": "
                        "{\\\"file_path\\\": \\\"a\\\"}}</tool_call>\"}"),
                  0) == 0);
    REQUIRE(R.ncalls == 2);
    CHECK(R.text_form);
    CHECK_STR(R.calls[0].name, "Bash");
    CHECK_STR(R.calls[1].name, "Read");
    CHECK_STR(json_string_value(json_object_get(R.calls[1].args, "file_path")), "a");
    CHECK_STR(R.calls[0].id, "call_7_0");
    CHECK_STR(msg_content(), "Checking.");
    CHECK_CONTAINS(R.content, "<tool_call>"); /* the raw text is kept */
    llm_reply_release(&R);

    /* Disabled: the text stays text. */
    REQUIRE(parse(REPLY("{\"content\":\"<tool_call>{\\\"name\\\":\\\"Bash\\\",\\\"arguments\\\":"
                        "{}}</tool_call>\"}"),
                  LLM_PARSE_NO_TEXT_TOOLS) == 0);
    CHECK_EQ(R.ncalls, 0);
    CHECK(!R.text_form);
    llm_reply_release(&R);
}

static size_t text_calls(const char *content, struct buf *rest)
{
    llm_reply_release(&R);
    llm_reply_init(&R);
    buf_reset(rest);
    return llm_text_tool_calls(sv_cstr(content), 3, &R, rest);
}

TEST(llm_text_form_variants)
{
    struct buf rest;
    buf_init(&rest, 1 << 20);
    /* Unclosed at the end (the model ran out of tokens or forgot). */
    CHECK_EQ(
        text_calls("x <tool_call>{\"name\":\"Glob\",\"arguments\":{\"pattern\":\"*\"}}", &rest), 1);
    CHECK(R.calls[0].error == NULL);
    CHECK_STR(rest.data, "x ");
    /* An array of calls in one block. */
    CHECK_EQ(text_calls("<tool_call>[{\"name\":\"Glob\",\"arguments\":{}},{\"name\":\"Grep\","
                        "\"arguments\":\"{\\\"pattern\\\":\\\"x\\\"}\"}]</tool_call>",
                        &rest),
             2);
    CHECK_STR(R.calls[1].name, "Grep");
    CHECK(R.calls[1].error == NULL);
    /* Broken JSON in a tag is a malformed call, not silence. */
    CHECK_EQ(text_calls("<tool_call>{name: Bash}</tool_call>", &rest), 1);
    CHECK_CONTAINS(R.calls[0].error, "invalid JSON");
    CHECK_EQ(text_calls("<tool_call>42</tool_call>", &rest), 1);
    CHECK_CONTAINS(R.calls[0].error, "JSON object");
    /* Fenced JSON that is a call; code that is not. */
    CHECK_EQ(text_calls("Plan:\n```json\n{\"name\":\"Bash\",\"arguments\":{\"command\":\"pwd\"}}\n"
                        "```\nthen\n```python\nprint({\"name\": 1})\n```\n",
                        &rest),
             1);
    CHECK_STR(R.calls[0].name, "Bash");
    CHECK_CONTAINS(rest.data, "print(");
    CHECK(strstr(rest.data, "pwd") == NULL);
    CHECK_EQ(text_calls("```json\n{\"a\": 1}\n```", &rest), 0);
    CHECK_STR(rest.data, "```json\n{\"a\": 1}\n```");
    CHECK_EQ(text_calls("```\n{\"name\":\"Glob\",\"arguments\":{}}\n```", &rest), 1);
    CHECK_EQ(text_calls("```json\n{\"name\":\"Glob\",\"arguments\":{}}", &rest), 0); /* unclosed */
    CHECK_EQ(text_calls("no calls here", &rest), 0);
    CHECK_STR(rest.data, "no calls here");
    CHECK_EQ(text_calls("", &rest), 0);
    buf_release(&rest);
    llm_reply_release(&R);
}

TEST(llm_request_body)
{
    struct llm_opts o;
    llm_opts_init(&o);
    o.model = "m\"odel";
    struct buf b;
    buf_init(&b, 1 << 20);
    REQUIRE(llm_build_request(&o, sv_cstr("[{\"role\":\"user\",\"content\":\"hi\"}]"),
                              sv_cstr("[{\"type\":\"function\"}]"), &b) == 0);
    json_error_t je;
    json_t *v = json_loads(b.data, 0, &je);
    REQUIRE(v);
    CHECK_STR(json_string_value(json_object_get(v, "model")), "m\"odel");
    CHECK_STR(json_string_value(json_object_get(v, "tool_choice")), "auto");
    CHECK(json_array_size(json_object_get(v, "tools")) == 1);
    CHECK(json_object_get(v, "temperature") == NULL);
    CHECK(json_object_get(v, "max_tokens") == NULL);
    CHECK(json_object_get(v, "logprobs") == NULL);
    json_decref(v);

    buf_reset(&b);
    o.temperature = 0.7;
    o.top_p = 0.95;
    o.max_tokens = 512;
    o.seed = 3;
    o.logprobs = o.token_ids = true;
    o.tool_choice = "required";
    REQUIRE(llm_build_request(&o, sv_cstr("[]"), sv_cstr(""), &b) == 0);
    v = json_loads(b.data, 0, &je);
    REQUIRE(v);
    CHECK(json_real_value(json_object_get(v, "temperature")) == 0.7);
    CHECK(json_real_value(json_object_get(v, "top_p")) == 0.95);
    CHECK_EQ(json_integer_value(json_object_get(v, "max_tokens")), 512);
    CHECK_EQ(json_integer_value(json_object_get(v, "seed")), 3);
    CHECK(json_is_true(json_object_get(v, "logprobs")));
    CHECK(json_is_true(json_object_get(v, "return_token_ids")));
    CHECK(json_object_get(v, "tools") == NULL); /* no tools: no tool_choice either */
    CHECK(json_object_get(v, "tool_choice") == NULL);
    json_decref(v);
    buf_release(&b);
}

/* ---- the retry loop over an in-memory transport ---- */

struct fake {
    int n;
    struct {
        int rc;
        long status;
        int64_t retry_after_ms;
        const char *body;
    } steps[8];
    int64_t at_us[8];
    size_t last_len;
    volatile sig_atomic_t *cancel_on_call;
};

static int fake_post(void *data, struct llm_http *h, struct ca_err *err)
{
    struct fake *f = data;
    int i = f->n++;
    f->at_us[i] = ca_now_us();
    f->last_len = h->len;
    if (f->cancel_on_call)
        *f->cancel_on_call = 1;
    if (f->steps[i].rc)
        return err_setf(err, f->steps[i].rc, "scripted failure %d", i);
    h->status = f->steps[i].status;
    h->retry_after_ms = f->steps[i].retry_after_ms ? f->steps[i].retry_after_ms : -1;
    return buf_addstr(h->resp, f->steps[i].body ? f->steps[i].body : "");
}

static int chat(struct fake *f, struct llm_opts *o, struct ca_err *err)
{
    o->base_url = "http://127.0.0.1:1/v1";
    o->model = "m";
    struct llm_client *c;
    REQUIRE(llm_client_new(o, &c, err) == 0);
    struct llm_transport t = {f, fake_post};
    llm_client_set_transport(c, &t);
    llm_reply_release(&R);
    llm_reply_init(&R);
    int rc = llm_chat(c, sv_cstr("[]"), sv_cstr("[]"), 1, &R, err);
    llm_client_free(c);
    return rc;
}

static const char ok_body[] = REPLY("{\"role\":\"assistant\",\"content\":\"hi\"}");

TEST(llm_retries_then_succeeds)
{
    struct fake f = {.steps = {{.status = 500, .body = "{\"error\":\"boom\"}"},
                               {.rc = CA_EUNAVAIL},
                               {.status = 429, .retry_after_ms = 120},
                               {.status = 200, .body = ok_body}}};
    struct llm_opts o;
    llm_opts_init(&o);
    o.backoff_ms = 5;
    struct ca_err err = {0};
    REQUIRE(chat(&f, &o, &err) == 0);
    CHECK_EQ(f.n, 4);
    CHECK_EQ(R.attempts, 4);
    CHECK_EQ(R.status, 200);
    CHECK_STR(R.content, "hi");
    CHECK(f.at_us[3] - f.at_us[2] >= 120000); /* Retry-After honoured */
    CHECK(f.at_us[1] - f.at_us[0] < 100000);  /* backoff from 5 ms */
    CHECK(R.http_us >= 120000);
    llm_reply_release(&R);
}

TEST(llm_gives_up_and_classifies)
{
    struct llm_opts o;
    llm_opts_init(&o);
    o.backoff_ms = 1;
    o.retries = 2;
    struct ca_err err = {0};
    struct fake f = {.steps = {{.status = 503}, {.status = 502}, {.status = 500}, {.status = 200}}};
    CHECK_EQ(chat(&f, &o, &err), CA_EUNAVAIL);
    CHECK_EQ(f.n, 3);
    CHECK_CONTAINS(err.msg, "HTTP 500");

    struct fake f2 = {.steps = {{.status = 401, .body = "{\"error\":{\"message\":\"bad key\"}}"}}};
    CHECK_EQ(chat(&f2, &o, &err), CA_EUSAGE);
    CHECK_EQ(f2.n, 1);
    CHECK_CONTAINS(err.msg, "bad key");

    struct fake f3 = {.steps = {{.status = 400,
                                 .body = "{\"error\":{\"message\":\"This model's maximum context "
                                         "length is 8192 tokens\"}}"}}};
    CHECK_EQ(chat(&f3, &o, &err), CA_ETOOBIG);
    CHECK_CONTAINS(err.msg, "context");

    struct fake f4 = {.steps = {{.rc = CA_ETOOBIG}}};
    CHECK_EQ(chat(&f4, &o, &err), CA_ETOOBIG);
    CHECK_EQ(f4.n, 1);

    struct fake f5 = {.steps = {{.status = 200, .body = "<html>"}}};
    CHECK_EQ(chat(&f5, &o, &err), CA_EPARSE);
    llm_reply_release(&R);
}

TEST(llm_deadline_and_cancel)
{
    struct llm_opts o;
    llm_opts_init(&o);
    o.backoff_ms = 10000; /* the wait would pass the deadline */
    o.deadline_us = ca_now_us() + 200000;
    struct ca_err err = {0};
    struct fake f = {.steps = {{.status = 503}, {.status = 200, .body = ok_body}}};
    int64_t t0 = ca_now_us();
    CHECK_EQ(chat(&f, &o, &err), CA_ETIMEOUT);
    CHECK_EQ(f.n, 1);
    CHECK(ca_now_us() - t0 < 150000);
    CHECK(R.deadline_hit);

    o.deadline_us = ca_now_us() - 1;
    struct fake f2 = {.steps = {{.status = 200, .body = ok_body}}};
    CHECK_EQ(chat(&f2, &o, &err), CA_ETIMEOUT);
    CHECK_EQ(f2.n, 0);
    CHECK(R.deadline_hit);

    /* An attempt whose timeout was clipped to the deadline and timed out: the deadline ended
     * it, even when the clock has not quite reached the deadline yet (no retry either). */
    o.backoff_ms = 1;
    o.deadline_us = ca_now_us() + 5000000;
    struct fake f4 = {.steps = {{.rc = CA_ETIMEOUT}, {.status = 200, .body = ok_body}}};
    CHECK_EQ(chat(&f4, &o, &err), CA_ETIMEOUT);
    CHECK_EQ(f4.n, 1);
    CHECK(R.deadline_hit);

    /* The server's own timeout (the per-request limit, under the deadline) is retried and is
     * not the deadline's doing. */
    o.deadline_us = ca_now_us() + 600000000;
    o.timeout_ms = 1000;
    o.retries = 1;
    struct fake f5 = {.steps = {{.rc = CA_ETIMEOUT}, {.rc = CA_ETIMEOUT}}};
    CHECK_EQ(chat(&f5, &o, &err), CA_ETIMEOUT);
    CHECK_EQ(f5.n, 2);
    CHECK(!R.deadline_hit);

    volatile sig_atomic_t cancel = 0;
    llm_opts_init(&o);
    o.backoff_ms = 10000;
    o.cancel = &cancel;
    struct fake f3 = {.steps = {{.status = 503}}, .cancel_on_call = &cancel};
    t0 = ca_now_us();
    CHECK_EQ(chat(&f3, &o, &err), CA_ETIMEOUT);
    CHECK(ca_now_us() - t0 < 1000000);
    llm_reply_release(&R);
}

TEST(llm_client_needs_url_and_model)
{
    struct llm_opts o;
    llm_opts_init(&o);
    struct llm_client *c = NULL;
    struct ca_err err = {0};
    CHECK_EQ(llm_client_new(&o, &c, &err), CA_EUSAGE);
    CHECK_CONTAINS(err.msg, "--base-url");
    o.base_url = "http://x/v1";
    CHECK_EQ(llm_client_new(&o, &c, &err), CA_EUSAGE);
    CHECK_CONTAINS(err.msg, "--model");
    o.model = "m";
    o.base_url = "file:///etc/passwd";
    CHECK_EQ(llm_client_new(&o, &c, &err), CA_EUSAGE);
    CHECK(c == NULL);
    o.base_url = "http://x/v1/";
    o.api_key = "sk-unit";
    REQUIRE(llm_client_new(&o, &c, &err) == 0);
    CHECK_STR(llm_client_opts(c)->api_key, "sk-unit");
    CHECK(llm_client_opts(c)->api_key != o.api_key); /* copied */
    llm_client_free(c);
    llm_client_free(NULL);
}
