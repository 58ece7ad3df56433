/*
 * llm.c - the Chat Completions client: options, the libcurl transport, and
 * the retry loop.
 *
 * One curl easy handle per client, reused so that keep-alive connections
 * survive between turns. The reply goes into a bounded buffer: the write
 * callback refuses bytes past the bound, which aborts the transfer
 * (CA_ETOOBIG, not retried). Every attempt has a total time limit, a connect
 * limit and an optional stall limit, all clipped to the caller's deadline; waits between attempts
 * are clipped the same way and sliced so that the cancel flag is seen within 50 ms.
 */
#include "llm/llm.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/limits.h"
#include "core/log.h"
#include "core/banned.h"

#define DEFAULT_TIMEOUT_MS 600000
#define DEFAULT_CONNECT_MS 10000
#define DEFAULT_RETRIES 4
#define DEFAULT_BACKOFF_MS 1000
#define DEFAULT_BACKOFF_MAX_MS 60000
#define ERROR_SNIPPET 300

void llm_opts_init(struct llm_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->temperature = -1;
    o->top_p = -1;
    o->seed = -1;
    o->retries = -1;
}

void llm_opts_from_env(struct llm_opts *o)
{
    const char *v;
    if (!o->base_url)
        o->base_url = (v = getenv("CUDA_AGENT_BASE_URL")) && *v ? v : getenv("OPENAI_BASE_URL");
    if (!o->api_key)
        o->api_key = (v = getenv("CUDA_AGENT_API_KEY")) && *v ? v : getenv("OPENAI_API_KEY");
    if (!o->model && (v = getenv("CUDA_AGENT_MODEL")) && *v)
        o->model = v;
}

struct llm_client {
    struct llm_opts o; /* strings below are our copies */
    char *base_url, *model, *api_key, *tool_choice;
    char *url;
    CURL *curl;
    struct curl_slist *headers;
    char curl_err[CURL_ERROR_SIZE];
    struct llm_transport transport;
    struct buf req, resp; /* kept between calls: no page faults on big conversations */
};

/* ---- libcurl transport ---- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

struct write_ctx {
    const struct llm_client *c;
    struct buf *b;
    bool too_big, stalled;
    curl_off_t last_dl;
    int64_t last_us; /* when bytes last arrived (or the attempt began) */
};

static size_t on_write(char *p, size_t size, size_t n, void *data)
{
    struct write_ctx *w = data;
    if (buf_add(w->b, p, size * n) != 0) {
        w->too_big = true;
        return 0; /* aborts the transfer with CURLE_WRITE_ERROR */
    }
    return size * n;
}

/* Cancel, and the stall limit: time since the last byte arrived (our own
 * clock rather than CURLOPT_LOW_SPEED_*, whose averaging window lets a silent
 * reply run several seconds past its limit). */
static int on_progress(void *data, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    struct write_ctx *w = data;
    if (w->c->o.cancel && *w->c->o.cancel)
        return 1;
    int64_t now = ca_now_us();
    if (dlnow != w->last_dl) {
        w->last_dl = dlnow;
        w->last_us = now;
    } else if (w->c->o.stall_ms > 0 && now - w->last_us > w->c->o.stall_ms * 1000) {
        w->stalled = true;
        return 1;
    }
    return 0;
}

/* A curl_easy_setopt result: an option this libcurl refuses (too old for it, or built without
 * the feature) fails the request rather than sending it without that setting. */
static int setopt_ok(CURLcode rc, const char *option, struct ca_err *err)
{
    if (rc == CURLE_OK)
        return 0;
    return err_setf(err, CA_EUNAVAIL, "libcurl refused %s: %s", option, curl_easy_strerror(rc));
}
#define SETOPT(k, opt, val, err) setopt_ok(curl_easy_setopt(k, opt, val), #opt, err)

/* The options that are the same for every request, set once on the client's handle (they
 * persist across curl_easy_perform). */
static int curl_setup(struct llm_client *c, struct ca_err *err)
{
    CURL *k = c->curl;
    int rc;
    /* Only HTTP(S), and no redirects (CURLOPT_FOLLOWLOCATION stays off): a model server URL
     * must never make the client read a file:// or talk another protocol. */
    if ((rc = SETOPT(k, CURLOPT_PROTOCOLS_STR, "http,https", err)) < 0 ||
        (rc = SETOPT(k, CURLOPT_POST, 1L, err)) < 0 ||
        (rc = SETOPT(k, CURLOPT_HTTPHEADER, c->headers, err)) < 0 ||
        (rc = SETOPT(k, CURLOPT_WRITEFUNCTION, on_write, err)) < 0 ||
        (rc = SETOPT(k, CURLOPT_NOSIGNAL, 1L, err)) < 0 ||
        (rc = SETOPT(k, CURLOPT_NOPROGRESS, 0L, err)) < 0 ||
        (rc = SETOPT(k, CURLOPT_XFERINFOFUNCTION, on_progress, err)) < 0 ||
        (rc = SETOPT(k, CURLOPT_ERRORBUFFER, c->curl_err, err)) < 0)
        return rc;
    /* Compressed replies are a saving, not a need: a libcurl built without zlib answers
     * CURLE_NOT_BUILT_IN, and the replies then come uncompressed. */
    (void)curl_easy_setopt(k, CURLOPT_ACCEPT_ENCODING, "");
    return 0;
}

static int curl_post(void *data, struct llm_http *h, struct ca_err *err)
{
    struct llm_client *c = data;
    CURL *k = c->curl;
    struct write_ctx w = {.c = c, .b = h->resp, .last_us = ca_now_us()};
    long connect_ms =
        (long)(c->o.connect_timeout_ms < h->timeout_ms ? c->o.connect_timeout_ms : h->timeout_ms);
    int rc;
    if ((rc = SETOPT(k, CURLOPT_URL, h->url, err)) < 0 ||
        (rc = SETOPT(k, CURLOPT_POSTFIELDS, h->body, err)) < 0 ||
        (rc = SETOPT(k, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)h->len, err)) < 0 ||
        (rc = SETOPT(k, CURLOPT_WRITEDATA, &w, err)) < 0 ||
        (rc = SETOPT(k, CURLOPT_TIMEOUT_MS, (long)h->timeout_ms, err)) < 0 ||
        (rc = SETOPT(k, CURLOPT_CONNECTTIMEOUT_MS, connect_ms, err)) < 0 ||
        (rc = SETOPT(k, CURLOPT_XFERINFODATA, &w, err)) < 0)
        return rc;
    c->curl_err[0] = '\0';
    CURLcode cc = curl_easy_perform(k);
    long status = 0;
    /* Deliberately unchecked: it fails only when no response came, and status stays 0. */
    (void)curl_easy_getinfo(k, CURLINFO_RESPONSE_CODE, &status);
    h->status = status;
    curl_off_t ra = -1;
    h->retry_after_ms = -1;
    if (curl_easy_getinfo(k, CURLINFO_RETRY_AFTER, &ra) == CURLE_OK && ra > 0)
        h->retry_after_ms = (int64_t)ra * 1000;
    if (cc == CURLE_OK)
        return 0;
    const char *why = c->curl_err[0] ? c->curl_err : curl_easy_strerror(cc);
    if (w.too_big || (cc == CURLE_WRITE_ERROR && h->resp->len >= h->resp->max))
        return err_setf(err, CA_ETOOBIG,
                        "the model's reply is over the limit of %zu bytes (cut off)", h->resp->max);
    if (cc == CURLE_OPERATION_TIMEDOUT)
        return err_setf(err, CA_ETIMEOUT, "the model server did not answer in time: %s", why);
    if (cc == CURLE_ABORTED_BY_CALLBACK && w.stalled)
        return err_setf(err, CA_ETIMEOUT,
                        "the model server did not answer in time: nothing received for %lld ms",
                        (long long)c->o.stall_ms);
    if (cc == CURLE_ABORTED_BY_CALLBACK)
        return err_setf(err, CA_ETIMEOUT, "the request was cancelled");
    if (cc == CURLE_UNSUPPORTED_PROTOCOL || cc == CURLE_URL_MALFORMAT)
        return err_setf(err, CA_EUSAGE, "bad model server URL %s: %s", h->url, why);
    return err_setf(err, CA_EUNAVAIL, "cannot reach the model server at %s: %s", h->url, why);
}

/* ---- client ---- */

/* curl_slist_append fails only when out of memory (it returns NULL and leaves the list as it
 * was): like xmalloc, that aborts rather than send a request without the header. */
static void header_add(struct llm_client *c, const char *header)
{
    struct curl_slist *l = curl_slist_append(c->headers, header);
    if (!l) {
        fputs("cuda-agent: out of memory (an HTTP header)\n", stderr);
        abort();
    }
    c->headers = l;
}

int llm_client_new(const struct llm_opts *o, struct llm_client **out, struct ca_err *err)
{
    *out = NULL;
    if (!o->base_url || !*o->base_url)
        return err_setf(err, CA_EUSAGE,
                        "no model server: give --base-url URL or set OPENAI_BASE_URL "
                        "(e.g. http://127.0.0.1:8000/v1)");
    if (!o->model || !*o->model)
        return err_setf(err, CA_EUSAGE, "no model name: give --model NAME or set CUDA_AGENT_MODEL");
    if (strncmp(o->base_url, "http://", 7) != 0 && strncmp(o->base_url, "https://", 8) != 0)
        return err_setf(err, CA_EUSAGE,
                        "the model server URL %s must start with http:// or https://", o->base_url);
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK)
        return err_setf(err, CA_EUNAVAIL, "libcurl cannot start: %s",
                        curl_easy_strerror(curl_init_rc));
    struct llm_client *c = xcalloc(1, sizeof(*c));
    buf_init(&c->req, 0);
    buf_init(&c->resp, 0);
    c->o = *o;
    c->base_url = xstrdup(o->base_url);
    c->model = xstrdup(o->model);
    c->api_key = o->api_key && *o->api_key ? xstrdup(o->api_key) : NULL;
    c->tool_choice = xstrdup(o->tool_choice && *o->tool_choice ? o->tool_choice : "auto");
    c->o.base_url = c->base_url;
    c->o.model = c->model;
    c->o.api_key = c->api_key;
    c->o.tool_choice = c->tool_choice;
    if (c->o.timeout_ms <= 0)
        c->o.timeout_ms = DEFAULT_TIMEOUT_MS;
    if (c->o.connect_timeout_ms <= 0)
        c->o.connect_timeout_ms = DEFAULT_CONNECT_MS;
    if (c->o.retries < 0)
        c->o.retries = DEFAULT_RETRIES;
    if (c->o.backoff_ms <= 0)
        c->o.backoff_ms = DEFAULT_BACKOFF_MS;
    if (c->o.backoff_max_ms <= 0)
        c->o.backoff_max_ms = DEFAULT_BACKOFF_MAX_MS;
    if (c->o.max_reply == 0)
        c->o.max_reply = CA_LIMIT_MODEL_REPLY;
    size_t n = strlen(c->base_url);
    while (n && c->base_url[n - 1] == '/')
        n--;
    c->url = xstrfmt("%.*s/chat/completions", (int)n, c->base_url);
    c->curl = curl_easy_init();
    if (!c->curl) {
        llm_client_free(c);
        return err_setf(err, CA_EUNAVAIL, "libcurl cannot create a handle");
    }
    header_add(c, "Content-Type: application/json");
    header_add(c, "Accept: application/json");
    header_add(c, "Expect:");
    if (c->api_key) {
        char *h = xstrfmt("Authorization: Bearer %s", c->api_key);
        header_add(c, h);
        explicit_bzero(h, strlen(h));
        free(h);
    }
    char *ua = xstrfmt("User-Agent: cuda-agent/%s", CA_VERSION);
    header_add(c, ua);
    free(ua);
    int rc = curl_setup(c, err);
    if (rc < 0) {
        llm_client_free(c);
        return rc;
    }
    c->transport = (struct llm_transport){c, curl_post};
    buf_init(&c->req, CA_LIMIT_MODEL_REQUEST);
    buf_init(&c->resp, c->o.max_reply);
    *out = c;
    return 0;
}

void llm_client_free(struct llm_client *c)
{
    if (!c)
        return;
    if (c->curl)
        curl_easy_cleanup(c->curl);
    curl_slist_free_all(c->headers);
    buf_release(&c->req);
    buf_release(&c->resp);
    if (c->api_key)
        explicit_bzero(c->api_key, strlen(c->api_key));
    free(c->api_key);
    free(c->base_url);
    free(c->model);
    free(c->tool_choice);
    free(c->url);
    free(c);
}

void llm_client_set_transport(struct llm_client *c, const struct llm_transport *t)
{
    c->transport = t ? *t : (struct llm_transport){c, curl_post};
}

const struct llm_opts *llm_client_opts(const struct llm_client *c)
{
    return &c->o;
}

/* ---- retries ---- */

static bool cancelled(const struct llm_client *c)
{
    return c->o.cancel && *c->o.cancel;
}

/* Sleep ms (sliced, so a cancel is seen quickly). False when cancelled. */
static bool wait_ms(const struct llm_client *c, int64_t ms)
{
    int64_t end = ca_now_us() + ms * 1000;
    for (;;) {
        if (cancelled(c))
            return false;
        int64_t left = end - ca_now_us();
        if (left <= 0)
            return true;
        if (left > 50000)
            left = 50000;
        struct timespec ts = {0, (long)left * 1000L};
        nanosleep(&ts, NULL);
    }
}

/* The server's error message from a JSON error body, else the body's start. */
static void describe_body(const struct buf *b, char *out, size_t n)
{
    json_error_t je;
    json_t *v = json_loadb(b->data, b->len, 0, &je);
    const json_t *e = json_object_get(v, "error");
    const char *msg = json_string_value(json_object_get(e, "message"));
    if (!msg)
        msg = json_string_value(e);
    if (!msg)
        msg = json_string_value(json_object_get(v, "message"));
    if (msg)
        snprintf(out, n, "%s", msg);
    else
        snprintf(out, n, "%.*s", (int)(b->len < ERROR_SNIPPET ? b->len : ERROR_SNIPPET), b->data);
    json_decref(v);
    for (char *p = out; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
}

static bool context_overflow(const char *msg)
{
    return strcasestr(msg, "context length") || strcasestr(msg, "context window") ||
           strcasestr(msg, "maximum context") || strcasestr(msg, "too many tokens") ||
           strcasestr(msg, "prompt is too long");
}

int llm_chat(struct llm_client *c, struct sv messages_json, struct sv tools_json, int64_t seq,
             struct llm_reply *r, struct ca_err *err)
{
    struct buf *req = &c->req, *resp = &c->resp;
    buf_reset(req);
    int rc = llm_build_request(&c->o, messages_json, tools_json, req);
    if (rc)
        return err_setf(err, CA_ETOOBIG, "the request is over the limit of %zu bytes",
                        (size_t)CA_LIMIT_MODEL_REQUEST);
    r->http_us = 0;
    r->deadline_hit = false;
    for (int attempt = 0;; attempt++) {
        int64_t timeout = c->o.timeout_ms;
        bool clipped = false;
        if (c->o.deadline_us) {
            int64_t left = (c->o.deadline_us - ca_now_us()) / 1000;
            if (left <= 0) {
                r->deadline_hit = true;
                rc = err_setf(err, CA_ETIMEOUT, "out of time before the model answered");
                break;
            }
            if (left < timeout) {
                timeout = left;
                clipped = true;
            }
        }
        buf_reset(resp);
        struct llm_http h = {
            .url = c->url, .body = req->data, .len = req->len, .timeout_ms = timeout, .resp = resp};
        r->attempts = attempt + 1;
        int64_t p0 = ca_now_us();
        rc = c->transport.post(c->transport.data, &h, err);
        r->http_us += ca_now_us() - p0;
        r->status = h.status;
        bool retry = false;
        int64_t wait = -1;
        if (rc == 0 && h.status >= 200 && h.status < 300) {
            rc = llm_parse_reply(sv_from(resp->data, resp->len), c->o.no_text_tools ? 1 : 0, seq, r,
                                 err);
            break;
        }
        if (rc == 0) {
            char msg[CA_ERR_MSG_MAX];
            describe_body(resp, msg, sizeof(msg));
            if (h.status == 429 || h.status == 408 || h.status >= 500) {
                retry = true;
                wait = h.retry_after_ms;
                rc = err_setf(err, CA_EUNAVAIL, "the model server answered HTTP %ld: %s", h.status,
                              msg);
            } else if ((h.status == 400 || h.status == 413) && context_overflow(msg)) {
                rc = err_setf(err, CA_ETOOBIG, "the conversation is over the model's context: %s",
                              msg);
            } else {
                rc = err_setf(err, CA_EUSAGE, "the model server refused the request (HTTP %ld): %s",
                              h.status, msg);
            }
        } else {
            retry = rc == CA_EUNAVAIL || (rc == CA_ETIMEOUT && !cancelled(c));
            if (rc == CA_ETIMEOUT && clipped && !cancelled(c)) {
                r->deadline_hit = true; /* the time left, not the server's pace, ended it */
                break;
            }
        }
        if (retry && cancelled(c)) {
            rc = err_setf(err, CA_ETIMEOUT, "the request was cancelled");
            break;
        }
        if (!retry || attempt >= c->o.retries)
            break;
        if (wait < 0) {
            wait = c->o.backoff_ms << (attempt < 16 ? attempt : 16);
            wait += wait * (int64_t)(ca_now_us() % 250) / 1000; /* up to +25% jitter */
        }
        if (wait > c->o.backoff_max_ms)
            wait = c->o.backoff_max_ms;
        if (c->o.deadline_us && ca_now_us() + wait * 1000 >= c->o.deadline_us) {
            err_prefix(err, "out of time for another attempt");
            r->deadline_hit = true;
            rc = CA_ETIMEOUT;
            if (err)
                err->code = rc;
            break;
        }
        LOG_INFO("model request failed (%s); attempt %d of %d in %lld ms", err ? err->msg : "",
                 attempt + 2, c->o.retries + 1, (long long)wait);
        int64_t w0 = ca_now_us();
        bool waited = wait_ms(c, wait);
        r->http_us += ca_now_us() - w0;
        if (!waited) {
            rc = err_setf(err, CA_ETIMEOUT, "the request was cancelled");
            break;
        }
    }
    return rc;
}
