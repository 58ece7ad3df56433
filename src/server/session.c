/*
 * session.c - MCP sessions: reference-counted, in a list under the server's
 * mu, the least recently used dropped beyond max_sessions. A session that
 * ends (DELETE, eviction) while a request still holds it is freed at the
 * last release.
 */
#include "server/server.h"
#include "server/server_internal.h"

#include <string.h>

#include "core/log.h"
#include "core/banned.h"

/* ---- sessions ---- */

/* Take *pp out of the list; free it unless someone still holds it. Under mu. */
static void unlink_session_locked(struct server *s, struct server_session **pp)
{
    struct server_session *gone = *pp;
    *pp = gone->next;
    gone->next = NULL;
    gone->ended = true;
    s->nsessions--;
    if (gone->refs == 0)
        free(gone);
}

void server_session_release(struct server *s, struct server_session *sess)
{
    if (!sess)
        return;
    pthread_mutex_lock(&s->mu);
    bool gone = --sess->refs == 0 && sess->ended;
    pthread_mutex_unlock(&s->mu);
    if (gone)
        free(sess);
}

struct server_session *server_session_new(struct server *s)
{
    struct server_session *n = xcalloc(1, sizeof(*n));
    server__random_hex(n->id, SERVER_SESSION_ID_LEN);
    n->last_us = ca_now_us();
    n->refs = 1;
    pthread_mutex_lock(&s->mu);
    if (s->nsessions >= s->o.max_sessions) {
        /* Drop the least recently used: a client that comes back gets 404 and
         * initializes again, as the transport specifies. */
        struct server_session **pp = &s->sessions, **oldest = pp;
        for (; *pp; pp = &(*pp)->next)
            if ((*pp)->last_us < (*oldest)->last_us)
                oldest = pp;
        unlink_session_locked(s, oldest);
    }
    n->next = s->sessions;
    s->sessions = n;
    s->nsessions++;
    pthread_mutex_unlock(&s->mu);
    return n;
}

struct server_session *server_session_find(struct server *s, const char *id)
{
    pthread_mutex_lock(&s->mu);
    struct server_session *p = s->sessions;
    for (; p; p = p->next)
        if (strcmp(p->id, id) == 0) {
            p->last_us = ca_now_us();
            p->refs++;
            break;
        }
    pthread_mutex_unlock(&s->mu);
    return p;
}

const char *server_session_id(const struct server_session *sess)
{
    return sess->id;
}

const char *server_session_version(const struct server_session *sess)
{
    return sess->version;
}

int server_session_end(struct server *s, const char *id)
{
    int rc = CA_ENOTFOUND;
    pthread_mutex_lock(&s->mu);
    for (struct server_session **pp = &s->sessions; *pp; pp = &(*pp)->next)
        if (strcmp((*pp)->id, id) == 0) {
            unlink_session_locked(s, pp);
            rc = 0;
            break;
        }
    pthread_mutex_unlock(&s->mu);
    return rc;
}
