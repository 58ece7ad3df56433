/*
 * bus_admin.c - what an operator asks of the bus (`cuda-agent worker --redis URL --status` and
 * `--release NAME`): the queue, the workers' heartbeats, strikes and quarantine, and lifting a
 * quarantine.
 */
#include "bus/bus_internal.h"

#include "core/json.h"
#include "core/sv.h"
#include "core/banned.h"

/* A reply that should hold an integer: the integer, or the string itself where it does not (a
 * value someone else wrote into Redis), so that the operator sees it as it is. */
static json_t *int_value(const redisReply *v)
{
    if (v->type == REDIS_REPLY_INTEGER)
        return json_integer(v->integer);
    if (v->type != REDIS_REPLY_STRING)
        return json_null();
    int64_t n;
    struct ca_err e = {0};
    if (sv_parse_i64(sv_from(v->str, v->len), &n, "value", &e) == 0)
        return json_integer(n);
    return json_stringn(v->str, v->len);
}

static json_t *hash_json(struct bus_conn *c, const char *key, bool values_json, struct ca_err *err,
                         int *rc)
{
    redisReply *r = NULL;
    json_t *o = json_object();
    if (*rc || (*rc = bus__cmds(c, &r, err, "HGETALL", key)) != 0)
        return o;
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
        const redisReply *k = r->element[i], *v = r->element[i + 1];
        json_t *val = NULL;
        if (!values_json)
            val = int_value(v);
        else if (v->type == REDIS_REPLY_STRING && !(val = json_loadb(v->str, v->len, 0, NULL)))
            val = json_stringn(v->str, v->len);
        if (k->type == REDIS_REPLY_STRING)
            json_object_set_new(o, k->str, val ? val : json_null());
        else
            json_decref(val);
    }
    freeReplyObject(r);
    return o;
}

int bus_status(const char *url, json_t **out, struct ca_err *err)
{
    struct bus_conn *c = NULL;
    char shown[BUS_URL_SHOWN];
    int rc = bus_conn_open_url(url, &c, shown, err);
    if (rc)
        return rc;
    redisReply *r = NULL;
    long long queued = 0, pending = 0;
    json_t *consumers = json_object();
    if ((rc = bus__cmds(c, &r, err, "XLEN", BUS_STREAM)) == 0) {
        queued = r->integer;
        freeReplyObject(r);
    }
    if (rc == 0 && bus__cmds(c, &r, err, "XPENDING", BUS_STREAM, BUS_GROUP) == 0) {
        /* [count, min, max, [[consumer, n], ...]] */
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 4) {
            pending = r->element[0]->integer;
            const redisReply *l = r->element[3];
            for (size_t i = 0; l->type == REDIS_REPLY_ARRAY && i < l->elements; i++) {
                const redisReply *e = l->element[i];
                if (e->type == REDIS_REPLY_ARRAY && e->elements == 2 &&
                    e->element[0]->type == REDIS_REPLY_STRING)
                    json_object_set_new(consumers, e->element[0]->str, int_value(e->element[1]));
            }
        }
        freeReplyObject(r);
    }
    json_t *workers = hash_json(c, BUS_KEY_WORKERS, true, err, &rc);
    json_t *strikes = hash_json(c, BUS_KEY_STRIKES, false, err, &rc);
    json_t *quarantine = hash_json(c, BUS_KEY_QUARANTINE, true, err, &rc);
    json_t *maxq = NULL; /* unset: the default */
    if (rc == 0 && bus__cmds(c, &r, err, "HGET", BUS_KEY_CONFIG, "max_queue") == 0) {
        if (r->type == REDIS_REPLY_STRING)
            maxq = int_value(r);
        freeReplyObject(r);
    }
    bus_conn_free(c);
    json_t *j = json_pack("{s:s, s:I, s:I, s:o, s:o, s:o, s:o, s:o}", "redis", shown, "queued",
                          (json_int_t)queued, "pending", (json_int_t)pending, "max_queue",
                          maxq ? maxq : json_integer(BUS_DEFAULT_MAX_QUEUE), "consumers", consumers,
                          "workers", workers, "strikes", strikes, "quarantine", quarantine);
    if (rc) {
        json_decref(j);
        return rc;
    }
    *out = j;
    return 0;
}

int bus_release(const char *url, const char *name, struct ca_err *err)
{
    struct bus_conn *c = NULL;
    int rc = bus_conn_open_url(url, &c, NULL, err);
    redisReply *r = NULL;
    if (rc == 0 && (rc = bus__cmds(c, &r, err, "HDEL", BUS_KEY_QUARANTINE, name)) == 0) {
        if (r->integer == 0)
            rc = err_setf(err, CA_ENOTFOUND, "worker %s is not quarantined", name);
        freeReplyObject(r);
    }
    if (rc == 0 && bus__cmds(c, &r, err, "HDEL", BUS_KEY_STRIKES, name) == 0)
        freeReplyObject(r);
    bus_conn_free(c);
    return rc;
}
