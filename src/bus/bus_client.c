/*
 * bus_client.c - the client's side of the bus: upload a job's blobs, queue
 * the job unless its result exists or the queue is full, wait for the result.
 *
 * Queueing is one Lua script, so that "is it done already", "is the queue
 * full" and XADD are atomic: the bound on outstanding jobs (XLEN, since
 * workers delete what they acknowledge) holds however many clients race.
 * After queueing, the client survives a Redis restart: every step retries a
 * lost connection until the client's deadline, and a job queued twice (a
 * reply lost with the connection) still yields one result.
 */
#include "bus/bus_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/json.h"
#include "core/limits.h"
#include "core/log.h"
#include "core/banned.h"

/* A waiting client looks at the result at least this often (BLPOP wakes it sooner). */
#define BUS_POLL_S "1"
#define BUS_RETRY_US 200000
/* Beyond the candidate's own limit: compile, queueing, the reference's timing. */
#define BUS_CLIENT_SLACK_MS ((int64_t)30 * 60 * 1000)

static const char SUBMIT_LUA[] =
    "if redis.call('EXISTS', KEYS[2]) == 1 then return 'done' end\n"
    "local m = tonumber(redis.call('HGET', KEYS[3], 'max_queue') or ARGV[1])\n"
    "if redis.call('XLEN', KEYS[1]) >= m then return 'busy' end\n"
    "return redis.call('XADD', KEYS[1], '*', 'id', ARGV[2], 'job', ARGV[3])\n";

static int upload(struct bus_conn *c, const struct bus_job *job, struct ca_err *err)
{
    const char *data[BUS_MAX_FILES + 2], *shas[BUS_MAX_FILES + 2];
    size_t lens[BUS_MAX_FILES + 2];
    size_t n = bus__job_blobs(job, data, lens, shas);
    char ttl[24];
    snprintf(ttl, sizeof(ttl), "%d", BUS_TTL_S);
    for (size_t i = 0; i < n; i++) {
        char key[sizeof(BUS_KEY_BLOB) + SHA256_HEX_LEN];
        snprintf(key, sizeof(key), "%s%s", BUS_KEY_BLOB, shas[i]);
        /* Plain SET, not NX: whatever sits under the name is replaced by the content that
         * has it, so a poisoned key cannot make an honest job fail. */
        const char *argv[] = {"SET", key, data[i], "EX", ttl};
        size_t l[] = {3, strlen(key), lens[i], 2, strlen(ttl)};
        redisReply *r = NULL;
        int rc = bus__cmd(c, &r, err, 5, argv, l);
        if (rc)
            return rc;
        freeReplyObject(r);
    }
    return 0;
}

/* One queueing attempt: 0 with *done (a result exists), *busy (the queue is full) or queued. */
static int enqueue(struct bus_conn *c, const char *id, const struct buf *doc, bool *busy,
                   bool *done, struct ca_err *err)
{
    char rkey[sizeof(BUS_KEY_RESULT) + SHA256_HEX_LEN], maxq[24];
    snprintf(rkey, sizeof(rkey), "%s%s", BUS_KEY_RESULT, id);
    snprintf(maxq, sizeof(maxq), "%d", BUS_DEFAULT_MAX_QUEUE);
    const char *argv[] = {"EVAL",         SUBMIT_LUA, "3", BUS_STREAM, rkey,
                          BUS_KEY_CONFIG, maxq,       id,  doc->data};
    size_t l[ARRAY_SIZE(argv)];
    for (size_t i = 0; i < ARRAY_SIZE(argv); i++)
        l[i] = argv[i] == doc->data ? doc->len : strlen(argv[i]);
    redisReply *r = NULL;
    int rc = bus__cmd(c, &r, err, (int)ARRAY_SIZE(argv), argv, l);
    if (rc)
        return rc;
    *busy = r->type == REDIS_REPLY_STRING && strcmp(r->str, "busy") == 0;
    *done = r->type == REDIS_REPLY_STRING && strcmp(r->str, "done") == 0;
    freeReplyObject(r);
    return 0;
}

static int fetch_result(struct bus_conn *c, const char *id, json_t **result, struct ca_err *err)
{
    char rkey[sizeof(BUS_KEY_RESULT) + SHA256_HEX_LEN];
    snprintf(rkey, sizeof(rkey), "%s%s", BUS_KEY_RESULT, id);
    redisReply *r = NULL;
    int rc = bus__cmds(c, &r, err, "GET", rkey);
    if (rc)
        return rc;
    *result = NULL;
    if (r->type == REDIS_REPLY_STRING) {
        json_t *v = NULL;
        rc =
            jsonx_parse(sv_from(r->str, r->len), CA_LIMIT_REQUEST_BYTES, "a job's result", &v, err);
        const char *job = json_string_value(json_object_get(v, "job"));
        json_t *ok = json_object_get(v, "ok");
        if (rc == 0 && (!json_is_boolean(ok) || !job || strcmp(job, id) != 0 ||
                        (json_is_true(ok) && !json_is_object(json_object_get(v, "report"))))) {
            rc = err_setf(err, CA_EPARSE, "the result recorded for job %s is malformed (worker %s)",
                          id, json_string_value(json_object_get(v, "worker")) ?: "unknown");
            json_decref(v);
            v = NULL;
        }
        *result = v;
    }
    freeReplyObject(r);
    return rc;
}

int bus_submit_wait(struct bus_conn *c, const struct bus_job *job, const struct bus_client_opts *o,
                    json_t **result, struct ca_err *err)
{
    struct buf doc;
    buf_init(&doc, CA_LIMIT_REQUEST_BYTES);
    char id[SHA256_HEX_LEN + 1];
    int rc = bus_job_encode(job, &doc, id, err);
    if (rc) {
        buf_release(&doc);
        return rc;
    }
    int64_t start = ca_now_us();
    int64_t deadline = start + o->wait_ms * 1000;
    int64_t queue_deadline = start + o->queue_wait_ms * 1000;
    bool queued = false, busy = false, done = false;
    json_t *res = NULL;
    int64_t busy_since = 0;
    for (;;) {
        if (!queued) {
            rc = upload(c, job, err);
            if (rc == 0)
                rc = enqueue(c, id, &doc, &busy, &done, err);
            if (rc == 0 && busy) {
                if (!busy_since) {
                    busy_since = ca_now_us();
                    LOG_INFO("bus: every worker is busy (the queue is full); waiting up to "
                             "%lld s",
                             (long long)o->queue_wait_ms / 1000);
                }
                if (ca_now_us() >= queue_deadline) {
                    rc = err_setf(err, CA_ETIMEOUT,
                                  "busy: the job queue at %s stayed full for %lld s (every "
                                  "worker is busy); retry later, add workers, or wait longer "
                                  "(--queue-wait)",
                                  c->url.shown, (long long)o->queue_wait_ms / 1000);
                    break;
                }
                usleep(BUS_RETRY_US);
                continue;
            }
            queued = rc == 0;
        }
        if (queued) {
            rc = fetch_result(c, id, &res, err);
            if (rc == 0 && res)
                break;
            if (rc == CA_EPARSE)
                break;
            if (rc == 0) {
                char dkey[sizeof(BUS_KEY_DONE) + SHA256_HEX_LEN];
                snprintf(dkey, sizeof(dkey), "%s%s", BUS_KEY_DONE, id);
                redisReply *r = NULL;
                rc = bus__cmds(c, &r, err, "BLPOP", dkey, BUS_POLL_S);
                if (rc == 0)
                    freeReplyObject(r);
            }
        }
        if (rc && rc != CA_EUNAVAIL)
            break;
        if (ca_now_us() >= deadline) {
            rc = err_setf(err, CA_ETIMEOUT,
                          "no result for job %.16s after %lld s; see `cuda-agent worker "
                          "--status --redis URL` for the workers",
                          id, (long long)o->wait_ms / 1000);
            break;
        }
        if (rc == CA_EUNAVAIL) { /* Redis restarting: try again until the deadline */
            LOG_DEBUG("bus: %s; retrying", err->msg);
            usleep(BUS_RETRY_US);
        }
    }
    buf_release(&doc);
    if (rc) {
        json_decref(res);
        return rc;
    }
    /* A result that existed before this call queued anything: an earlier identical job's. */
    json_object_set_new(res, "stored", json_boolean(done));
    *result = res;
    return 0;
}

int bus_eval(const char *url, const struct eval_opts *o, const struct bus_client_opts *bo,
             json_t **report, struct ca_err *err)
{
    struct bus_url u;
    struct bus_conn *c = NULL;
    struct bus_job *job = NULL;
    json_t *res = NULL;
    int rc = bus_url_parse(url, &u, err);
    if (rc == 0) {
        rc = bus_job_from_eval(o, &job, err);
        if (rc && eval_refusal(rc)) {
            /* Files the evaluator refuses (an escaping link, a file past its limit): the same
             * verdict as a local evaluation, found here before anything is queued. */
            bus_job_free(job);
            return eval_refused_report(o, err->msg, report, err);
        }
    }
    if (rc == 0)
        rc = bus_conn_open(&u, &c, err);
    struct bus_client_opts co = *bo;
    if (co.wait_ms <= 0)
        co.wait_ms = (o->timeout_ms > 0 ? o->timeout_ms : 120000) * 2 + BUS_CLIENT_SLACK_MS;
    if (rc == 0)
        rc = bus_submit_wait(c, job, &co, &res, err);
    if (rc == 0 && json_is_true(json_object_get(res, "ok"))) {
        json_t *rep = json_incref(json_object_get(res, "report"));
        if (o->workspace) /* the worker's job directory means nothing here */
            json_object_set_new(rep, "workspace", json_string(o->workspace));
        json_object_set_new(
            rep, "bus",
            json_pack("{s:O?, s:O?, s:O?, s:O?}", "worker", json_object_get(res, "worker"), "job",
                      json_object_get(res, "job"), "queue_ms", json_object_get(res, "queue_ms"),
                      "stored", json_object_get(res, "stored")));
        *report = rep;
    } else if (rc == 0) {
        const char *msg = json_string_value(json_object_get(res, "error"));
        const char *w = json_string_value(json_object_get(res, "worker"));
        int64_t code = CA_ECHILD;
        if (jsonx_get_int(res, "code", false, &code, "result", NULL) || code >= 0 ||
            code <= CA_EFIRST || code >= CA_ELAST)
            code = CA_ECHILD;
        rc = err_setf(err, (int)code, "worker %s: %s", w ? w : "?", msg ? msg : "no message");
    }
    json_decref(res);
    bus_job_free(job);
    bus_conn_free(c);
    return rc;
}
