/*
 * episodes.c - the episode table and the records on disk.
 *
 * Invariants: the table is under the server's mu, never held across a call
 * to an episode. An episode in the table is pinned by `busy` while calls run
 * on it, so expiry never frees it under a caller. An episode's record
 * (<root>/episodes/<id>.json) is written at start and at finish; it is what a
 * restarted server re-attaches from.
 */
#include "server/server.h"
#include "server/server_internal.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/fs.h"
#include "core/json.h"
#include "core/limits.h"
#include "core/log.h"
#include "core/banned.h"

/* ---- the episode table ---- */

struct episode_opts server__ep_opts(const struct server *s, const char *id, const char *workspace)
{
    return (struct episode_opts){
        .state_dir = s->state_dir,
        .id = id,
        .workspace = workspace,
        .sandbox_flags = s->o.sandbox_flags,
        .idle_timeout_ms = s->o.ttl_ms,
        .evaluator = s->o.evaluator,
        .eval_device = s->o.eval_device,
        .eval = s->o.eval,
        .eval_ctx = s->o.eval_ctx,
    };
}

/* Drop entries idle past their TTL (their supervisors have ended themselves). Under mu. */
void server__expire_locked(struct server *s)
{
    int64_t now = ca_now_us();
    for (struct server__episode **pp = &s->episodes; *pp;) {
        struct server__episode *e = *pp;
        if (e->busy == 0 && (now - e->last_us) / 1000 > e->ttl_ms) {
            *pp = e->next;
            if (!e->result) {
                s->live--;
                s->episodes_expired++;
            }
            LOG_INFO("episode %s: idle past its TTL, dropped", e->id);
            server__episode_free(e);
            continue;
        }
        pp = &e->next;
    }
}

static json_t *record_of(const struct server__episode *e)
{
    json_t *rec =
        json_pack("{s:s, s:s, s:s?, s:I, s:I, s:I, s:I, s:O?}", "episode_id", e->id, "workspace",
                  e->workspace, "task_id", e->task_id, "seed", (json_int_t)e->seed, "created_unix",
                  (json_int_t)time(NULL) - (ca_now_us() - e->created_us) / 1000000, "wall_ms",
                  (json_int_t)e->wall_ms, "ttl_ms", (json_int_t)e->ttl_ms, "result", e->result);
    if (e->ended_unix)
        json_object_set_new(rec, "ended_unix", json_integer((json_int_t)e->ended_unix));
    return rec;
}

void server__save_record(struct server *s, const struct server__episode *e)
{
    json_t *rec = record_of(e);
    char *path = xstrfmt("%s/%s.json", s->episodes_dir, e->id);
    struct buf b;
    buf_init(&b, CA_LIMIT_JSON_BYTES);
    struct ca_err err = {0};
    if (jsonx_dump(rec, 2, &b) || fs_write_atomic(path, b.data, b.len, 0600, &err))
        LOG_WARN("episode %s: cannot write its record %s: %s", e->id, path, err.msg);
    buf_release(&b);
    free(path);
    json_decref(rec);
}

/* An episode a restarted server left: its record, if its supervisor still answers or it
 * finished. NULL when there is none. */
static struct server__episode *load_record(struct server *s, const char *id)
{
    if (episode_check_id(id, NULL))
        return NULL;
    char *path = xstrfmt("%s/%s.json", s->episodes_dir, id);
    struct buf b;
    buf_init(&b, CA_LIMIT_JSON_BYTES);
    json_t *rec = NULL;
    struct server__episode *e = NULL;
    if (fs_read_file(path, CA_LIMIT_JSON_BYTES, &b, NULL) == 0 &&
        jsonx_parse(sv_from(b.data, b.len), CA_LIMIT_JSON_BYTES, path, &rec, NULL) == 0) {
        const char *ws = json_string_value(json_object_get(rec, "workspace"));
        json_t *result = json_object_get(rec, "result");
        struct episode_opts eo = server__ep_opts(s, id, NULL);
        /* A removed episode's supervisor is gone (and episode_running would make its
         * state directory again). */
        bool gone = json_object_get(rec, "reclaimed_unix") != NULL;
        if (ws && (json_is_object(result) || (!gone && episode_running(&eo)))) {
            e = xcalloc(1, sizeof(*e));
            snprintf(e->id, sizeof(e->id), "%s", id);
            e->workspace = xstrdup(ws);
            const char *tid = json_string_value(json_object_get(rec, "task_id"));
            e->task_id = tid ? xstrdup(tid) : NULL;
            e->seed = json_integer_value(json_object_get(rec, "seed"));
            e->created_us = e->last_us = ca_now_us();
            e->wall_ms = json_integer_value(json_object_get(rec, "wall_ms"));
            e->ttl_ms = json_integer_value(json_object_get(rec, "ttl_ms"));
            if (e->ttl_ms <= 0)
                e->ttl_ms = s->o.ttl_ms;
            e->result = json_is_object(result) ? json_incref(result) : NULL;
            e->ended_unix = json_integer_value(json_object_get(rec, "ended_unix"));
        }
    }
    json_decref(rec);
    buf_release(&b);
    free(path);
    return e;
}

/* Find and server__pin an episode (busy++); NULL with a message in *why. */
struct server__episode *server__pin(struct server *s, const json_t *args, json_t **why)
{
    const char *id = json_string_value(json_object_get(args, "episode_id"));
    if (!id) {
        *why = server__tool_errorf("episode_id is required: a string, as start_episode "
                                   "returned it");
        return NULL;
    }
    pthread_mutex_lock(&s->mu);
    server__expire_locked(s);
    struct server__episode *e = s->episodes;
    while (e && strcmp(e->id, id) != 0)
        e = e->next;
    if (!e) {
        pthread_mutex_unlock(&s->mu);
        struct server__episode *found = load_record(s, id);
        pthread_mutex_lock(&s->mu);
        for (e = s->episodes; e && strcmp(e->id, id) != 0; e = e->next)
            ;
        if (!e && found) {
            found->next = s->episodes;
            s->episodes = e = found;
            if (!found->result)
                s->live++;
            found = NULL;
            LOG_INFO("episode %s: re-attached from its record", id);
        }
        server__episode_free(found);
    }
    if (!e) {
        pthread_mutex_unlock(&s->mu);
        *why = server__tool_errorf("no episode '%.80s' (unknown, or it ended after its idle TTL): "
                                   "start one with start_episode",
                                   id);
        return NULL;
    }
    e->busy++;
    e->calls++;
    e->last_us = ca_now_us();
    pthread_mutex_unlock(&s->mu);
    return e;
}

void server__unpin(struct server *s, struct server__episode *e)
{
    pthread_mutex_lock(&s->mu);
    e->busy--;
    e->last_us = ca_now_us();
    pthread_mutex_unlock(&s->mu);
}

bool server__past_wall(const struct server__episode *e)
{
    return e->wall_ms > 0 && (ca_now_us() - e->created_us) / 1000 > e->wall_ms;
}

void server__episode_free(struct server__episode *e)
{
    if (!e)
        return;
    free(e->workspace);
    free(e->task_id);
    json_decref(e->result);
    free(e);
}
