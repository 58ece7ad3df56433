/*
 * bus_admin.c - what an operator asks of the bus (`cuda-agent worker --redis URL --status` and
 * `--release NAME`): the queue, the workers' heartbeats, strikes and quarantine, and lifting a
 * quarantine.
 */
#include "bus/bus_internal.h"

#include <stdlib.h>

#include "core/json.h"
#include "core/banned.h"

static json_t *hash_json(struct bus_conn *c, const char *key, bool values_json, struct ca_err *err,
                         int *rc)
{
    redisReply *r = NULL;
    json_t *o = json_object();
    if (*rc || (*rc = bus__cmds(c, &r, err, "HGETALL", key, NULL)) != 0)
        return o;
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
        const redisReply *k = r->element[i], *v = r->element[i + 1];
        json_t *val = NULL;
        if (values_json)
            val = json_loadb(v->str, v->len, 0, NULL);
        if (!val)
            val = v->type == REDIS_REPLY_STRING ? json_stringn(v->str, v->len) : json_null();
        if (!values_json && v->type == REDIS_REPLY_STRING) {
            json_decref(val);
            val = json_integer(strtoll(v->str, NULL, 10));
        }
        json_object_set_new(o, k->str, val);
    }
    freeReplyObject(r);
    return o;
}

int bus_status(const char *url, json_t **out, struct ca_err *err)
{
    struct bus_url u;
    struct bus_conn *c = NULL;
    int rc = bus_url_parse(url, &u, err);
    if (rc == 0)
        rc = bus_conn_open(&u, &c, err);
    if (rc)
        return rc;
    redisReply *r = NULL;
    long long queued = 0, pending = 0;
    json_t *consumers = json_object();
    if ((rc = bus__cmds(c, &r, err, "XLEN", BUS_STREAM, NULL)) == 0) {
        queued = r->integer;
        freeReplyObject(r);
    }
    if (rc == 0 && bus__cmds(c, &r, err, "XPENDING", BUS_STREAM, BUS_GROUP, NULL) == 0) {
        /* [count, min, max, [[consumer, n], ...]] */
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 4) {
            pending = r->element[0]->integer;
            const redisReply *l = r->element[3];
            for (size_t i = 0; l->type == REDIS_REPLY_ARRAY && i < l->elements; i++)
                json_object_set_new(
                    consumers, l->element[i]->element[0]->str,
                    json_integer(strtoll(l->element[i]->element[1]->str, NULL, 10)));
        }
        freeReplyObject(r);
    }
    json_t *workers = hash_json(c, BUS_KEY_WORKERS, true, err, &rc);
    json_t *strikes = hash_json(c, BUS_KEY_STRIKES, false, err, &rc);
    json_t *quarantine = hash_json(c, BUS_KEY_QUARANTINE, true, err, &rc);
    long long maxq = BUS_DEFAULT_MAX_QUEUE;
    if (rc == 0 && bus__cmds(c, &r, err, "HGET", BUS_KEY_CONFIG, "max_queue", NULL) == 0) {
        if (r->type == REDIS_REPLY_STRING)
            maxq = strtoll(r->str, NULL, 10);
        freeReplyObject(r);
    }
    bus_conn_free(c);
    json_t *j = json_pack("{s:s, s:I, s:I, s:I, s:o, s:o, s:o, s:o}", "redis", u.shown, "queued",
                          (json_int_t)queued, "pending", (json_int_t)pending, "max_queue",
                          (json_int_t)maxq, "consumers", consumers, "workers", workers, "strikes",
                          strikes, "quarantine", quarantine);
    if (rc) {
        json_decref(j);
        return rc;
    }
    *out = j;
    return 0;
}

int bus_release(const char *url, const char *name, struct ca_err *err)
{
    struct bus_url u;
    struct bus_conn *c = NULL;
    int rc = bus_url_parse(url, &u, err);
    if (rc == 0)
        rc = bus_conn_open(&u, &c, err);
    redisReply *r = NULL;
    if (rc == 0 && (rc = bus__cmds(c, &r, err, "HDEL", BUS_KEY_QUARANTINE, name, NULL)) == 0) {
        if (r->integer == 0)
            rc = err_setf(err, CA_ENOTFOUND, "worker %s is not quarantined", name);
        freeReplyObject(r);
    }
    if (rc == 0 && bus__cmds(c, &r, err, "HDEL", BUS_KEY_STRIKES, name, NULL) == 0)
        freeReplyObject(r);
    bus_conn_free(c);
    return rc;
}
