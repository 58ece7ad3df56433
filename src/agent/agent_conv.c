/*
 * agent_conv.c - the conversation sent to the model, kept serialised.
 *
 * Invariant: c->json always holds "[" + the compact dump of every message,
 * comma-separated, + "]", and c->spans[i] says where message i lies in it.
 * Appending a message dumps only that message (O(message), not O(history));
 * eliding dumps only the messages it changed and copies every other one
 * from the old cache (jansson's encoder is slow enough that re-dumping a
 * long conversation costs milliseconds; memcpy costs microseconds). Token estimates are scaled from
 * the server's own count of the last request (prompt_tokens / request bytes), which tracks the
 * tokenizer's bytes-per-token ratio; before the first reply with usage, 4 bytes count as one token.
 */
#include "agent/agent_internal.h"

#include <inttypes.h>
#include <string.h>

#include "core/json.h"
#include "core/limits.h"
#include "core/banned.h"

#define BYTES_PER_TOKEN 4

struct span {
    size_t off, len;
    bool dirty; /* changed since it was serialised */
};

struct agent_conv {
    json_t *msgs;    /* array of message objects */
    struct buf json; /* serialised msgs */
    struct span *spans;
    size_t spans_alloc;
    int64_t usage_tokens;
    size_t usage_bytes;
};

struct agent_conv *agent_conv_new(void)
{
    struct agent_conv *c = xcalloc(1, sizeof(*c));
    c->msgs = json_array();
    buf_init(&c->json, CA_LIMIT_MODEL_REQUEST);
    if (buf_addstr(&c->json, "[]"))
        BUG("empty conversation over its limit");
    return c;
}

void agent_conv_free(struct agent_conv *c)
{
    if (!c)
        return;
    json_decref(c->msgs);
    buf_release(&c->json);
    free(c->spans);
    free(c);
}

int agent_conv_append(struct agent_conv *c, json_t *msg)
{
    size_t before = c->json.len;
    buf_truncate(&c->json, before - 1); /* drop "]" */
    size_t n = json_array_size(c->msgs);
    int rc = 0;
    if (n)
        rc = buf_addch(&c->json, ',');
    size_t off = c->json.len;
    rc = rc ? rc : jsonx_dump(msg, 0, &c->json);
    size_t len = c->json.len - off;
    rc = rc ? rc : buf_addch(&c->json, ']');
    if (rc) {
        buf_truncate(&c->json, before - 1);
        if (buf_addch(&c->json, ']'))
            BUG("cannot restore the conversation's closing bracket");
        json_decref(msg);
        return CA_ETOOBIG;
    }
    ALLOC_GROW(c->spans, n + 1, c->spans_alloc);
    c->spans[n] = (struct span){off, len, false};
    json_array_append_new(c->msgs, msg);
    return 0;
}

size_t agent_conv_count(const struct agent_conv *c)
{
    return json_array_size(c->msgs);
}

const json_t *agent_conv_get(const struct agent_conv *c, size_t i)
{
    return json_array_get(c->msgs, i);
}

struct sv agent_conv_json(const struct agent_conv *c)
{
    return sv_from(c->json.data, c->json.len);
}

void agent_conv_note_usage(struct agent_conv *c, int64_t prompt_tokens, size_t request_bytes)
{
    if (prompt_tokens <= 0 || request_bytes == 0)
        return;
    c->usage_tokens = prompt_tokens;
    c->usage_bytes = request_bytes;
}

static int64_t tokens_for(const struct agent_conv *c, size_t bytes)
{
    if (c->usage_tokens > 0)
        return (int64_t)((double)bytes * (double)c->usage_tokens / (double)c->usage_bytes + 0.5);
    return (int64_t)((bytes + BYTES_PER_TOKEN / 2) / BYTES_PER_TOKEN);
}

int64_t agent_conv_tokens(const struct agent_conv *c, size_t extra_bytes)
{
    return tokens_for(c, c->json.len + extra_bytes);
}

/* Re-serialise: dirty messages are dumped, the others copied from the old cache. */
static int rebuild(struct agent_conv *c)
{
    struct buf old = c->json;
    buf_init(&c->json, old.max);
    int rc = buf_reserve(&c->json, old.len);
    rc = rc ? rc : buf_addch(&c->json, '[');
    size_t i;
    json_t *m;
    json_array_foreach(c->msgs, i, m)
    {
        struct span *sp = &c->spans[i];
        if (i)
            rc = rc ? rc : buf_addch(&c->json, ',');
        size_t off = c->json.len;
        if (rc == 0)
            rc = sp->dirty ? jsonx_dump(m, 0, &c->json)
                           : buf_add(&c->json, old.data + sp->off, sp->len);
        *sp = (struct span){off, c->json.len - off, false};
    }
    rc = rc ? rc : buf_addch(&c->json, ']');
    buf_release(&old);
    return rc;
}

size_t agent_conv_elide(struct agent_conv *c, int64_t target_tokens, size_t extra_bytes,
                        size_t keep_from)
{
    size_t n = 0, count = json_array_size(c->msgs);
    if (keep_from > count)
        keep_from = count;
    /* Track the bytes saved instead of re-serialising after each change; the
     * raw content length undercounts what escaping saves, so this errs on
     * the side of eliding one output too many, never too few. */
    size_t bytes = c->json.len + extra_bytes;
    for (size_t i = 0; i < keep_from && tokens_for(c, bytes) > target_tokens; i++) {
        json_t *m = json_array_get(c->msgs, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        const char *content = json_string_value(json_object_get(m, "content"));
        if (!role || strcmp(role, "tool") != 0 || !content ||
            strncmp(content, AGENT_ELIDED_MARKER, strlen(AGENT_ELIDED_MARKER)) == 0)
            continue;
        size_t len = strlen(content);
        char *marker = xstrfmt(AGENT_ELIDED_MARKER " this older tool output of %zu bytes was "
                                                   "removed]",
                               len);
        size_t mlen = strlen(marker);
        bytes -= mlen < len ? len - mlen : 0;
        json_object_set_new(m, "content", json_string(marker));
        c->spans[i].dirty = true;
        free(marker);
        n++;
    }
    if (n && rebuild(c))
        BUG("conversation grew while eliding");
    return n;
}

int agent_trim_output(struct sv text, size_t max, struct buf *out)
{
    if (text.len <= max)
        return buf_add(out, text.p, text.len);
    char marker[128];
    size_t budget = max > 200 ? max - 100 : max / 2;
    size_t head = budget * 2 / 3, tail = budget - head;
    while (head && ((unsigned char)text.p[head] & 0xC0) == 0x80)
        head--;
    size_t tail_start = text.len - tail;
    while (tail_start < text.len && ((unsigned char)text.p[tail_start] & 0xC0) == 0x80)
        tail_start++;
    snprintf(marker, sizeof(marker), "\n[... %zu " AGENT_TRIM_MARKER " ...]\n", tail_start - head);
    int rc = buf_add(out, text.p, head);
    rc = rc ? rc : buf_addstr(out, marker);
    rc = rc ? rc : buf_add(out, text.p + tail_start, text.len - tail_start);
    return rc;
}
