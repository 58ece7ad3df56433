/*
 * bus_worker.c - `cuda-agent worker --redis`: take jobs from the consumer group, evaluate each
 * with this machine's evaluator, record one result per job.
 *
 * Threads: one per slot (a consumer of the group, with its own connection) that takes, evaluates
 * and records jobs; one lease thread (its own connection) that renews the slots' claims on their
 * entries, publishes the heartbeat and notices quarantine; the caller's thread waits for a stop.
 *
 * Invariants:
 *   - An entry's result is written with SET NX in the same Lua script that acknowledges and
 *     deletes the entry: there is no moment where a result exists and the entry still waits,
 *     and a second writer (a stalled worker whose entry was taken over) loses quietly.
 *   - A slot renews its claim (XCLAIM JUSTID, which resets the idle time without counting a
 *     delivery) only while it still owns the entry and only until the job's deadline: a dead or
 *     hung worker stops renewing, and after --reclaim-ms of silence another worker takes the
 *     entry over, striking the owner it took it from.
 *   - Strikes count failed or abandoned jobs in a row per worker name; at --max-strikes the
 *     worker is quarantined (ca:quarantine), stops taking jobs and exits; a success clears them.
 *   - A consumer is deleted from the group (XGROUP DELCONSUMER, which would drop its pending
 *     entries) only inside the script that has just seen it own none: a dead worker's entries
 *     are taken over first, and a live consumer deleted by mistake is only re-created by its
 *     next read.
 */
#include "bus/bus_internal.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/json.h"
#include "core/limits.h"
#include "core/log.h"
#include "core/sv.h"
#include "eval/evald.h"
#include "core/banned.h"

#define BUS_BLOCK_MS "1000"
/* The consumer that holds entries handed back by a worker that failed on them. */
#define BUS_RETURNED "returned"
#define BUS_RETRY_US 250000
#define BUS_DONE_TTL "120"
/* A job's lease is renewed this long beyond twice its candidate limit (compile, baselines). */
#define BUS_DEADLINE_SLACK_MS ((int64_t)15 * 60 * 1000)
/* The lease thread's wake-up step. */
#define BUS_LEASE_STEP_US 50000
/* Dead consumers deleted per pass, at most (a pass reads the group's consumer list once). */
#define BUS_FORGET_MAX 16
/* How long a finished result is retried while Redis is away. */
#define BUS_RECORD_RETRY_MS ((int64_t)10 * 60 * 1000)

/* Take over the oldest entry idle for ARGV[2] ms: its owner (to strike), delivery, entry. */
static const char RECLAIM_LUA[] =
    "local p = redis.call('XPENDING', KEYS[1], ARGV[1], 'IDLE', tonumber(ARGV[2]), '-', '+', 16)\n"
    "for _, e in ipairs(p) do\n"
    "  local c = redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], tonumber(ARGV[2]), e[1])\n"
    "  if #c > 0 and c[1] then return {e[2], e[4] + 1, c[1]} end\n"
    "end\n"
    "return false\n";

/* Hand an entry back if this consumer still owns it: to ARGV[4], idle ARGV[5] ms. */
static const char GIVEBACK_LUA[] =
    "local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)\n"
    "if #p == 1 and p[1][2] == ARGV[3] then\n"
    "  redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[4], 0, ARGV[2], 'IDLE', tonumber(ARGV[5]), "
    "'JUSTID')\n"
    "  return 1\n"
    "end\n"
    "return 0\n";

/* Renew a claim if this consumer still owns the entry. */
static const char RENEW_LUA[] =
    "local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)\n"
    "if #p == 1 and p[1][2] == ARGV[3] then\n"
    "  redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], 0, ARGV[2], 'JUSTID')\n"
    "  return 1\n"
    "end\n"
    "return 0\n";

/* Record the result (first writer wins), wake waiters, acknowledge and delete the entry. */
static const char RECORD_LUA[] =
    "local set = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', tonumber(ARGV[2]))\n"
    "redis.call('LPUSH', KEYS[2], '1')\n"
    "redis.call('LTRIM', KEYS[2], 0, 0)\n"
    "redis.call('EXPIRE', KEYS[2], tonumber(ARGV[5]))\n"
    "redis.call('XACK', KEYS[3], ARGV[3], ARGV[4])\n"
    "redis.call('XDEL', KEYS[3], ARGV[4])\n"
    "if set then return 1 end\n"
    "return 0\n";

/*
 * Forget dead consumers: of the group's consumers named NAME/PID.SLOT, delete (at most ARGV[4])
 * those that own no pending entry, have not touched the group for ARGV[3] ms, and whose worker's
 * heartbeat (KEYS[2], NAME -> {"pid", "seen" in wall-clock seconds}) is of another process or
 * older than ARGV[3] ms at ARGV[2] (wall-clock ms). Other consumers (`returned`) are left alone.
 * Then delete (at most ARGV[4]) the heartbeats themselves that are that old, or not one (no
 * number "seen"; a heartbeat is whole seconds, published each second, so 2 s of slack keep a
 * live worker's own): a worker name seen once would otherwise stay in KEYS[2] for ever. The
 * consumers are looked at first, while the heartbeats they are judged by are still there.
 * Returns {consumers deleted, heartbeats deleted}.
 */
static const char FORGET_LUA[] =
    "local gone = {}\n"
    "local now, after, max = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])\n"
    "for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do\n"
    "  if #gone >= max then break end\n"
    "  local f = {}\n"
    "  for i = 1, #c, 2 do f[c[i]] = c[i + 1] end\n"
    "  local w, pid = string.match(f['name'], '^(.+)/(%d+)%.%d+$')\n"
    "  if w and f['pending'] == 0 and f['idle'] >= after then\n"
    "    local hb = redis.call('HGET', KEYS[2], w)\n"
    "    local live = false\n"
    "    if hb then\n"
    "      local ok, j = pcall(cjson.decode, hb)\n"
    "      live = ok and type(j) == 'table' and tostring(j['pid']) == pid and\n"
    "             type(j['seen']) == 'number' and now - j['seen'] * 1000 < after\n"
    "    end\n"
    "    if not live then\n"
    "      redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], f['name'])\n"
    "      gone[#gone + 1] = f['name']\n"
    "    end\n"
    "  end\n"
    "end\n"
    "local stale = {}\n"
    "local hs = redis.call('HGETALL', KEYS[2])\n"
    "for i = 1, #hs, 2 do\n"
    "  if #stale >= max then break end\n"
    "  local ok, j = pcall(cjson.decode, hs[i + 1])\n"
    "  if not (ok and type(j) == 'table' and type(j['seen']) == 'number' and\n"
    "          now - (j['seen'] + 2) * 1000 < after) then\n"
    "    redis.call('HDEL', KEYS[2], hs[i])\n"
    "    stale[#stale + 1] = hs[i]\n"
    "  end\n"
    "end\n"
    "return {gone, stale}\n";

/* A strike against a worker; quarantine at ARGV[2]. */
static const char STRIKE_LUA[] = "local n = redis.call('HINCRBY', KEYS[1], ARGV[1], 1)\n"
                                 "if n >= tonumber(ARGV[2]) then\n"
                                 "  redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[3])\n"
                                 "  return {n, 1}\n"
                                 "end\n"
                                 "return {n, 0}\n";

struct slot {
    struct worker *w;
    int idx;
    char consumer[192];
    pthread_t thread;
    pthread_mutex_t mu;
    char entry[64];      /* the entry being worked on; "" when idle */
    int64_t lease_until; /* renew the claim until then (ca_now_us) */
};

struct worker {
    const struct bus_worker_opts *o;
    struct bus_url url;
    char name[128];
    char own_prefix[160]; /* "name/pid." : this process's consumers are own_prefix + slot */
    char job_root[CA_LIMIT_PATH];
    volatile sig_atomic_t *stop;
    atomic_int quit;
    atomic_int quarantined;
    atomic_llong done, failed;
    pthread_mutex_t mu;
    char why[CA_ERR_MSG_MAX];
    struct slot *slots;
};

static bool stopping(struct worker *w)
{
    return *w->stop || atomic_load(&w->quit);
}

static void sleep_us(struct worker *w, int64_t us)
{
    for (int64_t t = 0; t < us && !stopping(w); t += 50000)
        usleep(50000);
}

/* Open a connection, retrying while Redis is away, until stopped. */
static struct bus_conn *connect_retry(struct worker *w)
{
    struct bus_conn *c = NULL;
    struct ca_err err = {0};
    bool said = false;
    while (!stopping(w)) {
        if (bus_conn_open(&w->url, &c, &err) == 0)
            return c;
        if (!said)
            LOG_WARN("worker %s: %s; retrying", w->name, err.msg);
        said = true;
        sleep_us(w, BUS_RETRY_US);
    }
    return NULL;
}

static int ensure_group(struct bus_conn *c, struct ca_err *err)
{
    redisReply *r = NULL;
    int rc = bus__cmds(c, &r, err, "XGROUP", "CREATE", BUS_STREAM, BUS_GROUP, "0", "MKSTREAM");
    if (rc == 0)
        freeReplyObject(r);
    if (rc == -EPROTO && strstr(err->msg, "BUSYGROUP"))
        rc = 0;
    return rc;
}

static int strike(struct bus_conn *c, struct worker *w, const char *who, const char *why,
                  struct ca_err *err)
{
    char max[16];
    snprintf(max, sizeof(max), "%d", w->o->max_strikes);
    json_t *j = json_pack("{s:s, s:s, s:I}", "reason", why, "by", w->name, "at",
                          (json_int_t)(bus__wall_us() / 1000000));
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    redisReply *r = NULL;
    int rc = bus__cmds(c, &r, err, "EVAL", STRIKE_LUA, "2", BUS_KEY_STRIKES, BUS_KEY_QUARANTINE,
                       who, max, text);
    free(text);
    if (rc)
        return rc;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2) {
        LOG_WARN("worker %s: strike %lld against %s: %s", w->name, r->element[0]->integer, who,
                 why);
        if (r->element[1]->integer) {
            LOG_ERROR("worker %s: %s is quarantined after %lld failed or abandoned jobs in a row "
                      "(last: %s)",
                      w->name, who, r->element[0]->integer, why);
            if (strcmp(who, w->name) == 0) { /* stop before taking another job */
                pthread_mutex_lock(&w->mu);
                snprintf(w->why, sizeof(w->why), "%.200s", why);
                pthread_mutex_unlock(&w->mu);
                atomic_store(&w->quarantined, 1);
                atomic_store(&w->quit, 1);
            }
        }
    }
    freeReplyObject(r);
    return 0;
}

/* Run the record script until it succeeds or the retry window closes. 1: ours was recorded. */
static int record(struct bus_conn *c, struct worker *w, const char *entry, const char *job,
                  json_t *result)
{
    json_object_set_new(result, "job", json_string(job));
    json_object_set_new(result, "worker", json_string(w->name));
    json_object_set_new(result, "entry", json_string(entry));
    char *text = json_dumps(result, JSON_COMPACT);
    char rkey[sizeof(BUS_KEY_RESULT) + SHA256_HEX_LEN], dkey[sizeof(BUS_KEY_DONE) + SHA256_HEX_LEN];
    char ttl[24];
    snprintf(rkey, sizeof(rkey), "%s%s", BUS_KEY_RESULT, job);
    snprintf(dkey, sizeof(dkey), "%s%s", BUS_KEY_DONE, job);
    snprintf(ttl, sizeof(ttl), "%d", BUS_TTL_S);
    int64_t until = ca_now_us() + BUS_RECORD_RETRY_MS * 1000;
    int out = -1;
    struct ca_err err = {0};
    while (out < 0 && ca_now_us() < until) {
        redisReply *r = NULL;
        int rc = bus__cmds(c, &r, &err, "EVAL", RECORD_LUA, "3", rkey, dkey, BUS_STREAM, text, ttl,
                           BUS_GROUP, entry, BUS_DONE_TTL);
        if (rc == 0) {
            out = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
            freeReplyObject(r);
            break;
        }
        if (rc != CA_EUNAVAIL) {
            LOG_ERROR("worker %s: cannot record the result of job %.16s: %s", w->name, job,
                      err.msg);
            break;
        }
        usleep(BUS_RETRY_US); /* Redis restarting: the result is kept until it is back */
    }
    free(text);
    if (out == 0)
        LOG_INFO("worker %s: job %.16s already had a result (taken over, or delivered twice); "
                 "ours is dropped",
                 w->name, job);
    return out;
}

static json_t *failure(int code, const char *msg)
{
    return json_pack("{s:b, s:s, s:i}", "ok", 0, "error", msg, "code", code);
}

static int cmp_sha(const void *key, const void *elem)
{
    return strcmp(key, *(const char *const *)elem);
}

static bool task_allowed(const struct bus_worker_opts *o, const char *sha)
{
    return bsearch(sha, o->task_shas, o->n_task_shas, sizeof(*o->task_shas), cmp_sha) != NULL;
}

static bool job_fault(int rc)
{
    return rc == CA_EUSAGE || rc == CA_EPARSE || rc == CA_ETOOBIG || rc == CA_ENOTFOUND ||
           rc == CA_EESCAPE || rc == CA_EDUP || rc == -ENOENT;
}

static const char *field(const redisReply *kv, const char *name, size_t *len)
{
    for (size_t i = 0; kv && kv->type == REDIS_REPLY_ARRAY && i + 1 < kv->elements; i += 2)
        if (kv->element[i]->type == REDIS_REPLY_STRING && strcmp(kv->element[i]->str, name) == 0 &&
            kv->element[i + 1]->type == REDIS_REPLY_STRING) {
            if (len)
                *len = kv->element[i + 1]->len;
            return kv->element[i + 1]->str;
        }
    return NULL;
}

static void set_lease(struct slot *s, const char *entry, int64_t until)
{
    pthread_mutex_lock(&s->mu);
    snprintf(s->entry, sizeof(s->entry), "%s", entry ? entry : "");
    s->lease_until = until;
    pthread_mutex_unlock(&s->mu);
}

/* Hand an entry back at once: moved to the BUS_RETURNED consumer with its idle time at the
 * reclaim threshold, so that any worker takes it over next, without a strike against us
 * (we counted our own). */
static void give_back(struct bus_conn *c, struct slot *s, const char *entry)
{
    char idle[24];
    snprintf(idle, sizeof(idle), "%lld", (long long)s->w->o->reclaim_ms);
    redisReply *r = NULL;
    struct ca_err err = {0};
    set_lease(s, NULL, 0);
    if (bus__cmds(c, &r, &err, "EVAL", GIVEBACK_LUA, "1", BUS_STREAM, BUS_GROUP, entry, s->consumer,
                  BUS_RETURNED, idle) == 0)
        freeReplyObject(r);
}

static int64_t deadline_ms(const struct worker *w, const json_t *opts)
{
    if (w->o->job_deadline_ms > 0)
        return w->o->job_deadline_ms;
    json_int_t t = json_integer_value(json_object_get(opts, "timeout_ms"));
    return (t > 0 ? t : 120000) * 2 + BUS_DEADLINE_SLACK_MS;
}

static bool report_valid(const json_t *rep)
{
    return json_is_object(rep) && json_is_boolean(json_object_get(rep, "ok")) &&
           json_is_string(json_object_get(rep, "stage"));
}

static int evaluate(struct worker *w, const json_t *req, const char *job, json_t **report,
                    struct ca_err *err)
{
    if (w->o->fake)
        return bus__fake_eval(w->o->fake, job, &w->quit, report, err);
    return evald_host_eval(w->o->host, req, report, err);
}

/*
 * How long entry `eid` waited to be taken, in ms, by Redis's own clock: the entry id's first
 * part is the server's time when it was queued, TIME its time now (one clock, whatever the
 * client's and this host's say). -1 when either cannot be read.
 */
static double queued_ms(struct bus_conn *c, const char *eid)
{
    char *end;
    errno = 0;
    long long added = strtoll(eid, &end, 10);
    if (errno || end == eid || *end != '-' || added <= 0)
        return -1;
    redisReply *r = NULL;
    struct ca_err err = {0};
    if (bus__cmds(c, &r, &err, "TIME"))
        return -1;
    double ms = -1;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[0]->type == REDIS_REPLY_STRING && r->element[1]->type == REDIS_REPLY_STRING) {
        double now = (double)strtoll(r->element[0]->str, NULL, 10) * 1000.0 +
                     (double)strtoll(r->element[1]->str, NULL, 10) / 1000.0;
        ms = now >= (double)added ? now - (double)added : 0;
    }
    freeReplyObject(r);
    return ms;
}

static void process(struct bus_conn *c, struct slot *s, const redisReply *entry, long long n,
                    const char *prev_owner)
{
    struct worker *w = s->w;
    struct ca_err err = {0};
    const char *eid = entry->element[0]->str;
    const redisReply *kv = entry->elements > 1 ? entry->element[1] : NULL;
    size_t doc_len = 0;
    const char *job = field(kv, "id", NULL), *doc = field(kv, "job", &doc_len);
    double waited_ms = queued_ms(c, eid);
    int64_t t0 = ca_now_us();
    if (prev_owner && n > 1 && strcmp(prev_owner, BUS_RETURNED) != 0) {
        char why[200], who[128];
        snprintf(who, sizeof(who), "%.*s", (int)strcspn(prev_owner, "/"), prev_owner);
        snprintf(why, sizeof(why), "entry %s abandoned (no lease renewal for %lld ms)", eid,
                 (long long)w->o->reclaim_ms);
        if (strike(c, w, who, why, &err))
            LOG_WARN("worker %s: %s", w->name, err.msg);
    }
    char sha[SHA256_HEX_LEN + 1] = "";
    if (doc)
        sha256_hex(doc, doc_len, sha);
    if (!job || !doc || strcmp(sha, job) != 0) {
        /* No trustworthy key to answer under: drop it (a client will time out). */
        LOG_WARN("worker %s: entry %s is not a job (missing fields or its digest does not match "
                 "its id); dropped",
                 w->name, eid);
        redisReply *r = NULL;
        if (bus__cmds(c, &r, &err, "XACK", BUS_STREAM, BUS_GROUP, eid) == 0)
            freeReplyObject(r);
        if (bus__cmds(c, &r, &err, "XDEL", BUS_STREAM, eid) == 0)
            freeReplyObject(r);
        return;
    }
    json_t *result = NULL;
    char rkey[sizeof(BUS_KEY_RESULT) + SHA256_HEX_LEN];
    snprintf(rkey, sizeof(rkey), "%s%s", BUS_KEY_RESULT, job);
    redisReply *ex = NULL;
    if (bus__cmds(c, &ex, &err, "EXISTS", rkey) == 0) {
        bool dup = ex->type == REDIS_REPLY_INTEGER && ex->integer == 1;
        freeReplyObject(ex);
        if (dup) { /* delivered twice: the record script acknowledges it, keeping the result */
            result = failure(CA_ECHILD, "duplicate");
            record(c, w, eid, job, result);
            json_decref(result);
            return;
        }
    }
    if (n > w->o->max_deliveries) {
        char msg[200];
        snprintf(msg, sizeof(msg),
                 "the job was delivered %lld times without a result (workers died, hung or "
                 "failed on it); given up",
                 n);
        result = failure(CA_ECHILD, msg);
        json_object_set_new(result, "deliveries", json_integer(n));
        record(c, w, eid, job, result);
        json_decref(result);
        return;
    }
    struct bus__spec spec;
    int rc = bus__spec_parse(doc, doc_len, &spec, &err);
    if (rc) {
        result = failure(rc, err.msg);
        record(c, w, eid, job, result);
        json_decref(result);
        return;
    }
    if (w->o->task_shas && !task_allowed(w->o, spec.task.sha)) {
        char msg[CA_ERR_MSG_MAX];
        snprintf(msg, sizeof(msg),
                 "the job's task (sha256 %.16s...) is not one of worker %s's tasks (--tasks): "
                 "it runs no reference code it does not hold",
                 spec.task.sha, w->name);
        result = failure(CA_ENOTFOUND, msg);
        json_object_set_new(result, "deliveries", json_integer(n));
        record(c, w, eid, job, result);
        json_decref(result);
        bus__spec_release(&spec);
        return;
    }
    set_lease(s, eid, t0 + deadline_ms(w, spec.opts) * 1000);
    struct buf base, dir;
    buf_init(&base, CA_LIMIT_PATH);
    buf_init(&dir, CA_LIMIT_PATH);
    json_t *req = NULL, *report = NULL;
    rc = buf_addf(&base, "%s/job", w->job_root) ? CA_ETOOBIG : 0;
    if (rc == 0)
        rc = fs_mkdtemp_beside(base.data, &dir, &err);
    while (rc == 0 || rc == CA_EUNAVAIL) { /* Redis restarting: wait for it */
        rc = bus__materialise(c, &spec, dir.data, &req, &err);
        if (rc != CA_EUNAVAIL || stopping(w))
            break;
        sleep_us(w, BUS_RETRY_US);
    }
    if (rc == 0)
        rc = evaluate(w, req, job, &report, &err);
    bool ours = rc == 0 || job_fault(rc);
    if (rc == 0 && !report_valid(report)) {
        rc = err_setf(&err, CA_EPARSE, "the evaluator returned a malformed report");
        ours = false;
    }
    if (!ours) {
        /* The worker's failure, not the job's: give it back and count a strike. */
        LOG_WARN("worker %s: job %.16s failed here (%s); handing it back", w->name, job, err.msg);
        give_back(c, s, eid);
        atomic_fetch_add(&w->failed, 1);
        struct ca_err e2 = {0};
        if (strike(c, w, w->name, err.msg, &e2))
            LOG_WARN("worker %s: %s", w->name, e2.msg);
    } else {
        if (rc == 0)
            result = json_pack("{s:b, s:O}", "ok", 1, "report", report);
        else
            result = failure(rc, err.msg);
        json_object_set_new(result, "deliveries", json_integer(n));
        if (waited_ms >= 0)
            json_object_set_new(result, "queue_ms", json_real(waited_ms));
        json_object_set_new(result, "eval_ms", json_real((double)(ca_now_us() - t0) / 1000.0));
        if (record(c, w, eid, job, result) >= 0) {
            atomic_fetch_add(&w->done, 1);
            redisReply *r = NULL;
            if (bus__cmds(c, &r, &err, "HDEL", BUS_KEY_STRIKES, w->name) == 0)
                freeReplyObject(r);
        }
        json_decref(result);
        set_lease(s, NULL, 0);
    }
    if (dir.len && !getenv("CUDA_AGENT_KEEP_RUNS")) {
        struct ca_err ignored;
        if (fs_remove_tree(dir.data, &ignored))
            LOG_WARN("could not remove %s: %s", dir.data, ignored.msg);
    }
    json_decref(req);
    json_decref(report);
    bus__spec_release(&spec);
    buf_release(&base);
    buf_release(&dir);
}

/* One attempt to get an entry: a takeover first, then a new one. */
static int next_entry(struct bus_conn *c, struct slot *s, struct ca_err *err)
{
    struct worker *w = s->w;
    char idle[24];
    snprintf(idle, sizeof(idle), "%lld", (long long)w->o->reclaim_ms);
    redisReply *r = NULL;
    int rc =
        bus__cmds(c, &r, err, "EVAL", RECLAIM_LUA, "1", BUS_STREAM, BUS_GROUP, idle, s->consumer);
    if (rc)
        return rc;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
        r->element[2]->type == REDIS_REPLY_ARRAY && r->element[2]->elements >= 1) {
        LOG_INFO("worker %s: took over entry %s from %s (delivery %lld)", w->name,
                 r->element[2]->element[0]->str, r->element[0]->str, r->element[1]->integer);
        process(c, s, r->element[2], r->element[1]->integer, r->element[0]->str);
        freeReplyObject(r);
        return 0;
    }
    freeReplyObject(r);
    r = NULL;
    rc = bus__cmds(c, &r, err, "XREADGROUP", "GROUP", BUS_GROUP, s->consumer, "COUNT", "1", "BLOCK",
                   BUS_BLOCK_MS, "STREAMS", BUS_STREAM, ">");
    if (rc == -EPROTO && strstr(err->msg, "NOGROUP")) /* the stream was lost: make it again */
        return ensure_group(c, err);
    if (rc)
        return rc;
    /* [[stream, [[id, [field, value, ...]]]]] or nil after the block */
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
        r->element[0]->type == REDIS_REPLY_ARRAY && r->element[0]->elements == 2) {
        const redisReply *entries = r->element[0]->element[1];
        for (size_t i = 0; entries->type == REDIS_REPLY_ARRAY && i < entries->elements; i++)
            if (entries->element[i]->type == REDIS_REPLY_ARRAY &&
                entries->element[i]->elements == 2)
                process(c, s, entries->element[i], 1, NULL);
    }
    freeReplyObject(r);
    return 0;
}

static void *slot_main(void *arg)
{
    struct slot *s = arg;
    struct worker *w = s->w;
    struct bus_conn *c = NULL;
    struct ca_err err = {0};
    while (!stopping(w)) {
        if (!c && !(c = connect_retry(w)))
            break;
        int rc = next_entry(c, s, &err);
        if (rc == CA_EUNAVAIL) {
            LOG_WARN("worker %s: %s; retrying", w->name, err.msg);
            sleep_us(w, BUS_RETRY_US);
        } else if (rc) {
            LOG_WARN("worker %s: %s", w->name, err.msg);
            sleep_us(w, BUS_RETRY_US);
        }
    }
    bus_conn_free(c);
    return NULL;
}

static void heartbeat(struct bus_conn *c, struct worker *w)
{
    char host[256] = "?";
    (void)gethostname(host, sizeof(host) - 1);
    json_t *j =
        json_pack("{s:s, s:i, s:i, s:s, s:I, s:I, s:I}", "host", host, "pid", (int)getpid(),
                  "slots", w->o->slots, "backend", w->o->fake ? "fake (test double)" : "evaluator",
                  "seen", (json_int_t)(bus__wall_us() / 1000000), "done",
                  (json_int_t)atomic_load(&w->done), "failed", (json_int_t)atomic_load(&w->failed));
    /* What the worker runs as trusted reference code: "any", or how many tasks it holds. */
    json_object_set_new(j, "tasks",
                        w->o->task_shas ? json_integer((json_int_t)w->o->n_task_shas)
                                        : json_string("any"));
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    redisReply *r = NULL;
    struct ca_err err = {0};
    if (bus__cmds(c, &r, &err, "HSET", BUS_KEY_WORKERS, w->name, text) == 0)
        freeReplyObject(r);
    free(text);
}

/* Is this worker quarantined? Sets quit and the reason. */
static void check_quarantine(struct bus_conn *c, struct worker *w)
{
    redisReply *r = NULL;
    struct ca_err err = {0};
    if (bus__cmds(c, &r, &err, "HGET", BUS_KEY_QUARANTINE, w->name) != 0)
        return;
    if (r->type == REDIS_REPLY_STRING) {
        pthread_mutex_lock(&w->mu);
        snprintf(w->why, sizeof(w->why), "%.200s", r->str);
        pthread_mutex_unlock(&w->mu);
        atomic_store(&w->quarantined, 1);
        atomic_store(&w->quit, 1);
    }
    freeReplyObject(r);
}

/* One pass over the group's consumers (FORGET_LUA): at most BUS_FORGET_MAX deleted. */
static void forget_dead(struct bus_conn *c, struct worker *w)
{
    char now[24], after[24], max[24];
    snprintf(now, sizeof(now), "%lld", (long long)(bus__wall_us() / 1000));
    snprintf(after, sizeof(after), "%lld", (long long)w->o->forget_ms);
    snprintf(max, sizeof(max), "%d", BUS_FORGET_MAX);
    redisReply *r = NULL;
    struct ca_err err = {0};
    if (bus__cmds(c, &r, &err, "EVAL", FORGET_LUA, "2", BUS_STREAM, BUS_KEY_WORKERS, BUS_GROUP, now,
                  after, max) != 0) {
        LOG_DEBUG("worker %s: forgetting dead consumers: %s", w->name, err.msg);
        return;
    }
    for (size_t k = 0; r->type == REDIS_REPLY_ARRAY && k < r->elements && k < 2; k++) {
        const redisReply *names = r->element[k];
        for (size_t i = 0; names->type == REDIS_REPLY_ARRAY && i < names->elements; i++) {
            const char *n =
                names->element[i]->type == REDIS_REPLY_STRING ? names->element[i]->str : "?";
            if (k == 0)
                LOG_INFO("worker %s: forgot consumer %s (its worker is gone, it owned no job)",
                         w->name, n);
            else
                LOG_INFO("worker %s: forgot worker %s's heartbeat (silent past --forget-ms)",
                         w->name, n);
        }
    }
    freeReplyObject(r);
}

struct lease_arg {
    struct worker *w;
    atomic_int done;
};

static void *lease_main(void *arg)
{
    struct lease_arg *la = arg;
    struct worker *w = la->w;
    struct bus_conn *c = NULL;
    /* Leases every reclaim/4, the heartbeat and quarantine check each second, dead consumers
     * every forget/2 (within 1..60 s); the loop wakes every BUS_LEASE_STEP_US for whichever is
     * due. */
    int64_t renew_every = w->o->reclaim_ms * 1000 / 4;
    int64_t forget_every = w->o->forget_ms * 1000 / 2;
    if (forget_every < 1000000)
        forget_every = 1000000;
    if (forget_every > 60000000)
        forget_every = 60000000;
    int64_t last_renew = 0, last_beat = 0, last_forget = ca_now_us();
    while (!atomic_load(&la->done)) {
        if (*w->stop)
            atomic_store(&w->quit, 1);
        struct ca_err err = {0};
        if (!c && bus_conn_open(&w->url, &c, &err) != 0) {
            usleep(BUS_RETRY_US);
            continue;
        }
        int64_t now = ca_now_us();
        for (int i = 0; now - last_renew >= renew_every && i < w->o->slots; i++) {
            struct slot *s = &w->slots[i];
            char entry[64];
            pthread_mutex_lock(&s->mu);
            snprintf(entry, sizeof(entry), "%s", now < s->lease_until ? s->entry : "");
            pthread_mutex_unlock(&s->mu);
            if (!entry[0])
                continue;
            redisReply *r = NULL;
            if (bus__cmds(c, &r, &err, "EVAL", RENEW_LUA, "1", BUS_STREAM, BUS_GROUP, entry,
                          s->consumer) != 0)
                continue;
            if (r->type == REDIS_REPLY_INTEGER && r->integer == 0) {
                LOG_WARN("worker %s: entry %s was taken over by another worker; its result will "
                         "count, not ours",
                         w->name, entry);
                set_lease(s, NULL, 0);
            }
            freeReplyObject(r);
        }
        if (now - last_renew >= renew_every)
            last_renew = now;
        if (now - last_beat >= 1000000) {
            heartbeat(c, w);
            check_quarantine(c, w);
            last_beat = now;
        }
        if (now - last_forget >= forget_every) {
            forget_dead(c, w);
            last_forget = now;
        }
        if (c && !c->ctx) { /* lost: reconnect next round */
            bus_conn_free(c);
            c = NULL;
        }
        usleep(BUS_LEASE_STEP_US);
    }
    if (c) {
        heartbeat(c, w);
        bus_conn_free(c);
    }
    return NULL;
}

int bus_worker_run(const struct bus_worker_opts *o, volatile sig_atomic_t *stop, struct ca_err *err)
{
    if (o->slots < 1 || o->slots > 256 || o->reclaim_ms < 100 || o->max_deliveries < 1 ||
        o->max_strikes < 1 || o->forget_ms < 1000)
        return err_setf(err, CA_EUSAGE,
                        "bad worker options (slots 1..256, reclaim >= 100 ms, forget >= 1 s)");
    if (!o->fake && !o->host)
        BUG("a worker without an evaluator");
    int frc = o->fake ? bus__fake_check(o->fake, err) : 0;
    if (frc)
        return frc;
    struct worker *w = xcalloc(1, sizeof(*w));
    w->o = o;
    w->stop = stop;
    pthread_mutex_init(&w->mu, NULL);
    struct bus_conn *c = NULL;
    struct buf root;
    buf_init(&root, CA_LIMIT_PATH);
    int rc = bus_url_parse(o->url, &w->url, err);
    if (rc)
        goto out;
    if (o->name) {
        snprintf(w->name, sizeof(w->name), "%s", o->name);
    } else {
        char host[64] = "host";
        (void)gethostname(host, sizeof(host) - 1);
        snprintf(w->name, sizeof(w->name), "%s-%d", host, (int)getpid());
    }
    if (!w->name[0] || strpbrk(w->name, "/ \t\n")) {
        rc = err_setf(err, CA_EUSAGE, "a worker name has no '/' or spaces");
        goto out;
    }
    snprintf(w->own_prefix, sizeof(w->own_prefix), "%s/%d.", w->name, (int)getpid());
    struct eval_opts none = {0};
    rc = eval_cache_root(o->base ? o->base : &none, &root, err);
    if (rc == 0)
        rc = buf_addstr(&root, "/bus-jobs") ? err_setf(err, CA_ETOOBIG, "cache path too long")
                                            : fs_mkdirs(root.data, 0700, err);
    if (rc)
        goto out;
    snprintf(w->job_root, sizeof(w->job_root), "%s", root.data);
    if ((rc = bus_conn_open(&w->url, &c, err)) != 0)
        goto out;
    if ((rc = ensure_group(c, err)) != 0)
        goto out;
    check_quarantine(c, w);
    if (atomic_load(&w->quarantined)) {
        rc = err_setf(err, CA_ECHILD,
                      "worker %s is quarantined (%s); lift it with `cuda-agent worker --redis URL "
                      "--release %s` once the machine is fixed",
                      w->name, w->why, w->name);
        goto out;
    }
    if (o->max_queue > 0) {
        char mq[24];
        snprintf(mq, sizeof(mq), "%lld", (long long)o->max_queue);
        redisReply *r = NULL;
        if ((rc = bus__cmds(c, &r, err, "HSET", BUS_KEY_CONFIG, "max_queue", mq)) != 0)
            goto out;
        freeReplyObject(r);
    }
    heartbeat(c, w);
    LOG_INFO("worker %s: serving %s with %d slot(s)%s", w->name, w->url.shown, o->slots,
             o->fake ? " on the FAKE evaluation backend (a test double)" : "");
    if (o->task_shas)
        LOG_INFO("worker %s: evaluating the %zu task(s) of --tasks only", w->name, o->n_task_shas);
    else
        LOG_WARN("worker %s: evaluating any task a job brings; its task file runs as trusted "
                 "reference code here (--tasks SOURCE limits that)",
                 w->name);
    w->slots = xcalloc((size_t)o->slots, sizeof(*w->slots));
    struct lease_arg la = {.w = w};
    pthread_t lease;
    int started = 0;
    for (int i = 0; i < o->slots; i++) {
        struct slot *s = &w->slots[i];
        s->w = w;
        s->idx = i;
        pthread_mutex_init(&s->mu, NULL);
        snprintf(s->consumer, sizeof(s->consumer), "%s%d", w->own_prefix, i);
        if (pthread_create(&s->thread, NULL, slot_main, s) != 0) {
            rc = err_setf(err, -EAGAIN, "cannot start a worker thread");
            atomic_store(&w->quit, 1);
            break;
        }
        started++;
    }
    bool lease_on = pthread_create(&lease, NULL, lease_main, &la) == 0;
    while (!stopping(w))
        usleep(100000);
    atomic_store(&w->quit, 1);
    for (int i = 0; i < started; i++)
        pthread_join(w->slots[i].thread, NULL);
    atomic_store(&la.done, 1);
    if (lease_on)
        pthread_join(lease, NULL);
    for (int i = 0; i < o->slots; i++)
        pthread_mutex_destroy(&w->slots[i].mu);
    LOG_INFO("worker %s: stopped after %lld job(s) (%lld handed back)", w->name,
             (long long)atomic_load(&w->done), (long long)atomic_load(&w->failed));
    if (rc == 0 && atomic_load(&w->quarantined))
        rc = err_setf(err, CA_ECHILD,
                      "worker %s was quarantined (%s): it stopped taking jobs; see `cuda-agent "
                      "worker --redis URL --status`, lift it with --release %s",
                      w->name, w->why, w->name);
out:
    bus_conn_free(c);
    buf_release(&root);
    free(w->slots);
    pthread_mutex_destroy(&w->mu);
    free(w);
    return rc;
}
