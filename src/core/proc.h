/*
 * proc.h - running child processes: argv/env/cwd/fds prepared before fork,
 * a wall-clock timeout, capped capture of stdout and stderr, and a kill of
 * the child's whole process group when it is done or out of time.
 *
 * The child runs in a new process group (setpgid(0, 0)). Everything it
 * needs is built before fork; the child only calls async-signal-safe
 * functions, closes every fd except 0/1/2 and the keep list, and reports an
 * exec failure to the parent through a close-on-exec pipe (so "no such
 * program" is an error from proc_run, not an exit code 127).
 *
 * Output past the cap is read and discarded (the child never blocks on a full
 * pipe) and the result says it was truncated. When the direct child exits,
 * anything left in its process group is killed with SIGKILL, so a background
 * grandchild cannot outlive the call or hold the pipes open forever.
 *
 * proc_run blocks the calling thread; it is thread-safe (no shared state),
 * but it does install nothing process-wide: callers that use SIGCHLD for
 * other purposes are unaffected because we wait on the pid.
 */
#ifndef CA_PROC_H
#define CA_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "core/err.h"

struct proc_opts {
    const char *const *argv; /* argv[0] looked up in PATH if it has no '/' */
    const char *const *env;  /* NULL: inherit the parent's environment */
    const char *cwd;         /* NULL: inherit */
    const void *stdin_data;  /* bytes written to the child's stdin, then closed; */
    size_t stdin_len;        /*   NULL: stdin is /dev/null */
    size_t out_max;          /* stdout capture cap; 0 means CA_LIMIT_CHILD_OUTPUT */
    size_t err_max;          /* stderr capture cap; 0 means CA_LIMIT_CHILD_OUTPUT */
    bool merge_stderr;       /* send stderr into the stdout capture */
    bool inherit_stderr;     /* leave stderr as the parent's (not captured) */
    int64_t timeout_ms;      /* <= 0: no timeout */
    const int *keep_fds;     /* extra fds the child keeps open (not CLOEXEC'd) */
    size_t nkeep_fds;
};

struct proc_result {
    int exit_code;   /* valid when !signaled */
    int term_signal; /* signal that ended the child, when signaled */
    bool signaled;
    bool timed_out; /* we killed it at the timeout */
    bool out_truncated, err_truncated;
    struct buf out, err; /* captured output (NUL-terminated) */
    int64_t elapsed_us;
    int pid;
};

void proc_result_init(struct proc_result *r);
void proc_result_release(struct proc_result *r);

/*
 * Run the child to completion. Returns 0 when the child was started and
 * reaped (look at *r for how it ended, including timeouts and signals), or a
 * negative code when it could not be started (exec failure: -errno with a
 * message naming argv[0]). *r must be initialised with proc_result_init.
 */
int proc_run(const struct proc_opts *opts, struct proc_result *r,
             struct ca_err *err) WARN_UNUSED_RESULT;

/* True when r says the child exited with status 0 in time. */
bool proc_ok(const struct proc_result *r);
/* "exit 3", "killed by SIGKILL", "timed out after 5000 ms" into b. */
int proc_describe(const struct proc_result *r, int64_t timeout_ms,
                  struct buf *b) WARN_UNUSED_RESULT;

/*
 * A long-lived child: started like proc_run's (new process group, prepared
 * argv/env/cwd, exec failures reported as errors), with a pipe to its stdin
 * (in_fd, ours to write) and one from its stdout (out_fd, ours to read);
 * its stderr goes to stderr_fd (< 0: inherited). opts' capture, stdin and
 * timeout fields are ignored. The caller owns the child: proc_child_kill
 * ends it (SIGKILL to its process group), reaps it and closes the fds.
 */
struct proc_child {
    int pid; /* -1: none */
    int in_fd, out_fd;
};
int proc_spawn(const struct proc_opts *opts, int stderr_fd, struct proc_child *child,
               struct ca_err *err) WARN_UNUSED_RESULT;
void proc_child_kill(struct proc_child *child);

/* ---- pipe plumbing shared with the sandbox's one-shot runner ---- */

/* Close *fd when open and set it to -1. */
void proc_fd_close(int *fd);
/* fd itself, or (when it is 0, 1 or 2) a close-on-exec duplicate above them with fd closed:
 * our pipe ends stay off stdio when the caller runs with those closed. -1 with errno. */
int proc_fd_above_stdio(int fd);
/* A close-on-exec pipe with both ends above stdio; 0 or -errno. */
int proc_pipe(int p[2]) WARN_UNUSED_RESULT;

/* A capped capture of one pipe into b: reads past cap are dropped and *truncated set. */
#define PROC_IO_CHUNK ((size_t)64 * 1024)
struct proc_capture {
    int fd; /* -1 once closed (end of file or a read error) */
    struct buf *b;
    size_t cap;
    bool *truncated;
};
/* One read of up to PROC_IO_CHUNK bytes through scratch; closes the fd at end of file. */
void proc_capture_read(struct proc_capture *c, char *scratch);

/* Look up a program in PATH; returns a heap path or NULL. */
char *proc_which(const char *name);

#endif
