/*
 * reclaim.c - the cleanup policy for ended episodes: their workspaces and
 * snapshots go, their records and results stay.
 *
 * An episode ends when finish returns its result, or when it went idle past
 * its TTL and its supervisor ended itself (found by a pass: out of the table
 * and no supervisor answering). The server tracks every episode whose trees
 * are on disk in kept[] (under mu): started ones, and at server_new the
 * records it finds (a restarted server applies the policy to what the last
 * one left). A background thread runs a pass every RECLAIM_PERIOD_MS (less
 * for short TTLs) and after each finish: the keep_finished newest ended
 * episodes younger than finished_ttl_s keep their trees; every other ended
 * one loses <root>/workspaces/<id> and <state>/<id> (evaluation snapshots,
 * sockets), and its record gains "reclaimed_unix" (its result "reclaimed":
 * true), so finish still returns the result.
 *
 * Invariants: a live episode is never touched (it has not ended); an entry of
 * the table with a call in flight (busy) or a finish running is skipped until
 * a later pass; the paths removed are built from the server's own
 * directories and a checked id, never from a record's contents. Calls on a
 * finished episode read only its stored result, never its workspace.
 */
#include "server/server.h"
#include "server/server_internal.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/fs.h"
#include "core/json.h"
#include "core/limits.h"
#include "core/log.h"
#include "core/banned.h"

#define RECLAIM_PERIOD_MS (60 * 1000)
#define RECLAIM_PERIOD_MIN_MS 500

static struct server__kept *kept_find_locked(struct server *s, const char *id)
{
    for (size_t i = 0; i < s->nkept; i++)
        if (strcmp(s->kept[i].id, id) == 0)
            return &s->kept[i];
    return NULL;
}

void server__kept_ended_locked(struct server *s, const char *id, int64_t ended_unix)
{
    struct server__kept *k = kept_find_locked(s, id);
    if (!k) {
        ALLOC_GROW(s->kept, s->nkept + 1, s->kept_alloc);
        k = &s->kept[s->nkept++];
        snprintf(k->id, sizeof(k->id), "%s", id);
        k->ended_unix = 0;
    }
    if (ended_unix && !k->ended_unix) {
        k->ended_unix = ended_unix;
        k->order = ++s->kept_order;
    }
}

static void kept_drop_locked(struct server *s, const char *id)
{
    struct server__kept *k = kept_find_locked(s, id);
    if (k)
        *k = s->kept[--s->nkept];
}

static struct server__episode *table_find_locked(struct server *s, const char *id)
{
    struct server__episode *e = s->episodes;
    while (e && strcmp(e->id, id) != 0)
        e = e->next;
    return e;
}

static char *record_path(const struct server *s, const char *id)
{
    return xstrfmt("%s/%s.json", s->episodes_dir, id);
}

/* An episode's record (new reference), NULL when it cannot be read. */
static json_t *record_read(const char *path)
{
    struct buf b;
    buf_init(&b, CA_LIMIT_JSON_BYTES);
    json_t *rec = NULL;
    if (fs_read_file(path, CA_LIMIT_JSON_BYTES, &b, NULL) != 0 ||
        jsonx_parse(sv_from(b.data, b.len), CA_LIMIT_JSON_BYTES, path, &rec, NULL) != 0 ||
        !json_is_object(rec)) {
        json_decref(rec);
        rec = NULL;
    }
    buf_release(&b);
    return rec;
}

/* Note in the record that the episode was found expired, or that its trees went. */
static void record_mark(struct server *s, const char *id, int64_t expired_unix,
                        int64_t reclaimed_unix)
{
    char *path = record_path(s, id);
    json_t *rec = record_read(path);
    if (!rec) {
        LOG_WARN("episode %s: cannot read its record %s to update it", id, path);
        free(path);
        return;
    }
    if (expired_unix && !json_object_get(rec, "ended_unix")) {
        json_object_set_new(rec, "ended_unix", json_integer((json_int_t)expired_unix));
        json_object_set_new(rec, "end", json_string("expired"));
    }
    if (reclaimed_unix) {
        json_object_set_new(rec, "reclaimed_unix", json_integer((json_int_t)reclaimed_unix));
        json_t *res = json_object_get(rec, "result");
        if (json_is_object(res))
            json_object_set_new(res, "reclaimed", json_true());
    }
    struct buf b;
    buf_init(&b, CA_LIMIT_JSON_BYTES);
    struct ca_err err = {0};
    if (jsonx_dump(rec, 2, &b) || fs_write_atomic(path, b.data, b.len, 0600, &err))
        LOG_WARN("episode %s: cannot write its record %s: %s", id, path, err.msg);
    buf_release(&b);
    json_decref(rec);
    free(path);
}

static void remove_dir(const char *dir, const char *id)
{
    char *path = xstrfmt("%s/%s", dir, id);
    struct ca_err err = {0};
    if (fs_exists(path) && fs_remove_tree(path, &err))
        LOG_WARN("episode %s: cannot remove %s: %s", id, path, err.msg);
    free(path);
}

static void reclaim_one(struct server *s, const char *id, int64_t now)
{
    pthread_mutex_lock(&s->mu);
    struct server__episode *e = table_find_locked(s, id);
    if (e && (e->busy || e->finishing)) { /* a call in flight: a later pass */
        pthread_mutex_unlock(&s->mu);
        return;
    }
    kept_drop_locked(s, id);
    if (e && e->result)
        json_object_set_new(e->result, "reclaimed", json_true());
    s->episodes_reclaimed++;
    pthread_mutex_unlock(&s->mu);
    int64_t t0 = ca_now_us();
    remove_dir(s->ws_dir, id);
    remove_dir(s->state_dir, id);
    record_mark(s, id, 0, now);
    LOG_INFO("episode %s: workspace and snapshots removed (the cleanup policy)", id);
    if (log_events_on())
        log_event("serve.episode_reclaim", ca_now_us() - t0, json_pack("{s:s}", "episode", id));
}

static int newest_first(const void *a, const void *b)
{
    const struct server__kept *x = a, *y = b;
    if (x->ended_unix != y->ended_unix)
        return x->ended_unix < y->ended_unix ? 1 : -1;
    return x->order < y->order ? 1 : x->order > y->order ? -1 : 0;
}

static void reclaim_pass(struct server *s)
{
    int64_t now = time(NULL);
    pthread_mutex_lock(&s->mu);
    server__expire_locked(s);
    size_t n = s->nkept;
    struct server__kept *snap = n ? xmalloc(n * sizeof(*snap)) : NULL;
    if (n)
        memcpy(snap, s->kept, n * sizeof(*snap));
    pthread_mutex_unlock(&s->mu);
    /* Out of the table and no supervisor: ended by its idle TTL (or the supervisor died).
     * Neither can come back: pin re-attaches only a running or finished episode. */
    for (size_t i = 0; i < n; i++) {
        if (snap[i].ended_unix)
            continue;
        pthread_mutex_lock(&s->mu);
        bool in_table = table_find_locked(s, snap[i].id) != NULL;
        pthread_mutex_unlock(&s->mu);
        struct episode_opts eo = server__ep_opts(s, snap[i].id, NULL);
        if (in_table || episode_running(&eo))
            continue;
        record_mark(s, snap[i].id, now, 0);
        pthread_mutex_lock(&s->mu);
        server__kept_ended_locked(s, snap[i].id, now);
        struct server__kept *k = kept_find_locked(s, snap[i].id);
        if (k)
            snap[i] = *k;
        pthread_mutex_unlock(&s->mu);
    }
    if (n)
        qsort(snap, n, sizeof(*snap), newest_first); /* the live (0) sort last */
    for (size_t i = 0; i < n && snap[i].ended_unix; i++) {
        bool young = s->finished_ttl_s == 0 || now - snap[i].ended_unix <= s->finished_ttl_s;
        if ((int64_t)i < s->keep_finished && young)
            continue;
        reclaim_one(s, snap[i].id, now);
    }
    free(snap);
}

static void *reclaimer_main(void *arg)
{
    struct server *s = arg;
    int64_t period = RECLAIM_PERIOD_MS;
    if (s->finished_ttl_s && s->finished_ttl_s * 1000 / 2 < period)
        period = s->finished_ttl_s * 1000 / 2;
    if (s->o.ttl_ms / 2 < period)
        period = s->o.ttl_ms / 2;
    if (period < RECLAIM_PERIOD_MIN_MS)
        period = RECLAIM_PERIOD_MIN_MS;
    pthread_mutex_lock(&s->mu);
    while (!s->reclaim_stop) {
        s->reclaim_kick = false;
        pthread_mutex_unlock(&s->mu);
        reclaim_pass(s);
        pthread_mutex_lock(&s->mu);
        if (s->reclaim_stop || s->reclaim_kick)
            continue;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += period / 1000;
        ts.tv_nsec += (period % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        while (!s->reclaim_stop && !s->reclaim_kick &&
               pthread_cond_timedwait(&s->reclaim_cv, &s->mu, &ts) == 0)
            ;
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* What the records on disk say: every episode whose trees were not removed yet. */
static void scan_records(struct server *s)
{
    DIR *d = opendir(s->episodes_dir);
    if (!d) {
        LOG_WARN("cannot list %s: %s", s->episodes_dir, strerror(errno));
        return;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t len = strlen(de->d_name);
        if (len <= 5 || len - 5 > EPISODE_ID_MAX || strcmp(de->d_name + len - 5, ".json") != 0)
            continue;
        char id[EPISODE_ID_MAX + 1];
        snprintf(id, sizeof(id), "%.*s", (int)(len - 5), de->d_name);
        if (episode_check_id(id, NULL))
            continue;
        char *path = record_path(s, id);
        json_t *rec = record_read(path);
        struct stat st;
        if (rec && !json_object_get(rec, "reclaimed_unix")) {
            int64_t ended = json_integer_value(json_object_get(rec, "ended_unix"));
            /* A finished record written before ended_unix existed: written at finish. */
            if (!ended && json_is_object(json_object_get(rec, "result")))
                ended = stat(path, &st) == 0 ? (int64_t)st.st_mtime : (int64_t)time(NULL);
            pthread_mutex_lock(&s->mu);
            server__kept_ended_locked(s, id, ended);
            pthread_mutex_unlock(&s->mu);
        }
        json_decref(rec);
        free(path);
    }
    closedir(d);
}

int server__reclaim_start(struct server *s, struct ca_err *err)
{
    scan_records(s);
    int rc = pthread_create(&s->reclaimer, NULL, reclaimer_main, s);
    if (rc)
        return err_setf(err, -rc, "cannot start the cleanup thread: %s", strerror(rc));
    s->reclaimer_on = true;
    return 0;
}

void server__reclaim_kick(struct server *s)
{
    pthread_mutex_lock(&s->mu);
    s->reclaim_kick = true;
    pthread_cond_signal(&s->reclaim_cv);
    pthread_mutex_unlock(&s->mu);
}

void server__reclaim_stop(struct server *s)
{
    if (!s->reclaimer_on)
        return;
    pthread_mutex_lock(&s->mu);
    s->reclaim_stop = true;
    pthread_cond_signal(&s->reclaim_cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->reclaimer, NULL);
    s->reclaimer_on = false;
}
