/*
 * sigpipe.c - see sigpipe.h.
 */
#include "core/sigpipe.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "core/banned.h"

void sigpipe_block(struct sigpipe_guard *g)
{
    sigset_t set, pending;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    (void)pthread_sigmask(SIG_BLOCK, &set, &g->old); /* fails only for a bad `how` */
    g->was_pending = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE);
    g->caused = false;
}

void sigpipe_restore(struct sigpipe_guard *g)
{
    if (g->caused && !g->was_pending) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGPIPE);
        struct timespec zero = {0, 0};
        /* EAGAIN: none pending (the write failed another way); EINTR: try again. */
        while (sigtimedwait(&set, NULL, &zero) < 0 && errno == EINTR)
            ;
    }
    (void)pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}
