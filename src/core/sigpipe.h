/*
 * sigpipe.h - hold back the SIGPIPE that a write to a peer that is gone raises
 * at the writing thread, so that library code never kills a caller that did
 * not ignore the signal.
 *
 * sigpipe_block() blocks SIGPIPE in this thread and notes whether one was
 * already pending. The caller sets g->caused when its write failed (EPIPE, or
 * a library's I/O error); sigpipe_restore() then consumes the pending SIGPIPE
 * it caused, unless one was pending before (that one is not ours to take), and
 * restores the thread's mask. Use the pair in one thread, tightly around the
 * writes.
 */
#ifndef CA_SIGPIPE_H
#define CA_SIGPIPE_H

#include <signal.h>
#include <stdbool.h>

struct sigpipe_guard {
    sigset_t old;
    bool was_pending;
    bool caused;
};

void sigpipe_block(struct sigpipe_guard *g);
void sigpipe_restore(struct sigpipe_guard *g);

#endif
