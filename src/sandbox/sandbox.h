/*
 * sandbox.h - per-episode sandboxes on Linux primitives.
 *
 * A sandbox is a tree of processes in fresh user, mount, pid, net, ipc and
 * uts namespaces. Its root filesystem is a private tmpfs holding read-only
 * binds of the system directories, the episode's workspace at /workspace
 * (writable, except the read-only paths named by the caller, which are bound
 * read-only on top), a size-capped private /tmp, a minimal /dev, a /proc of
 * its own pid namespace, and optionally a read-only control directory at
 * /run/cuda-agent. The network namespace is empty (loopback down). Nothing
 * else of the host is visible: not other episodes, not the evaluator's
 * state, caches or secrets.
 *
 * Set-up is plan-then-apply: sandbox_start() validates the options into a
 * plan, then the child applies it in a fixed order (uid/gid maps, mounts,
 * pivot_root, hostname, rlimits, no-new-privs, capabilities dropped, seccomp
 * filter last). The first process is our own small init (pid 1 inside): it
 * reaps orphans, starts programs on request (sandbox_exec: fds passed over a
 * unix socket) and reports their exits, and kills process trees on request.
 * Killing init (sandbox_free) kills everything inside.
 *
 * Where a primitive is missing (user namespaces disabled, no seccomp), start
 * fails with CA_EUNAVAIL and a message naming it; the sandbox never silently
 * runs unconfined. SANDBOX_INSECURE runs programs as plain children with only
 * rlimits (operator's explicit --insecure-no-sandbox; logged loudly).
 *
 * Threading: a struct sandbox is used by one thread. Its control fd may be
 * polled; call sandbox_read_event() when it is readable.
 */
#ifndef CA_SANDBOX_H
#define CA_SANDBOX_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/buf.h"
#include "core/err.h"

/* Where things appear inside the sandbox. */
#define SANDBOX_WORKSPACE "/workspace"
#define SANDBOX_CONTROL "/run/cuda-agent"

/* A limit of struct sandbox_limits that is not set at all (e.g. the address
 * space of a CUDA program, which reserves far more than it uses). */
#define SANDBOX_UNLIMITED UINT64_MAX
/* Descriptors a program can be given beyond 0-2 (struct sandbox_cmd). */
#define SANDBOX_MAX_EXTRA_FDS 4
/* Device nodes a sandbox can be given beyond the fixed set (sandbox_opts). */
#define SANDBOX_MAX_DEVICES 32

struct sandbox_limits {
    uint64_t cpu_seconds;   /* RLIMIT_CPU per process; 0 = default (600) */
    uint64_t address_space; /* RLIMIT_AS bytes; 0 = default (8 GiB); SANDBOX_UNLIMITED */
    uint64_t nproc;         /* max processes in the sandbox; 0 = default (256) */
    uint64_t nofile;        /* RLIMIT_NOFILE; 0 = default (1024) */
    uint64_t fsize;         /* RLIMIT_FSIZE bytes; 0 = default (1 GiB) */
    uint64_t tmp_bytes;     /* size of the private /tmp tmpfs; 0 = default (512 MiB) */
    uint64_t memory_bytes;  /* cgroup v2 memory.max where available; 0 = default (4 GiB) */
    uint64_t data_bytes;    /* RLIMIT_DATA bytes (private writable memory); 0 = not set */
};

enum sandbox_flags {
    SANDBOX_INSECURE = 1 << 0, /* no namespaces/seccomp: --insecure-no-sandbox only */
};

struct sandbox_opts {
    const char *workspace;       /* host directory, bound at /workspace */
    const char *const *ro_paths; /* workspace-relative paths bound read-only; NULL-terminated */
    const char *control_dir;     /* host directory bound read-only at /run/cuda-agent, or NULL */
    /* Host directories or files bound read-only at the same path inside (e.g. a Python
     * environment with PyTorch headers for sandboxed compilers); NULL-terminated. Paths under
     * the system directories are already visible and are skipped; paths that would cover
     * /workspace, /run, /tmp, /dev, /proc or /etc are refused. */
    const char *const *extra_ro_binds;
    const char *hostname; /* default "sandbox" */
    /* Host character devices bound at the same path under /dev (e.g. the GPU's nodes,
     * "/dev/nvidia0"); NULL-terminated, at most SANDBOX_MAX_DEVICES. A path that is not a
     * character device under /dev is refused. */
    const char *const *devices;
    /* Who the sandbox is on the host: its uid 0 maps to outer_uid (and gid 0 to outer_gid)
     * when set_outer_ids, else to the caller's own ids. Another uid can only be mapped by a
     * caller that holds CAP_SETUID (root): then the sandbox runs as that unprivileged user
     * and can read on the host only what that user may read. */
    bool set_outer_ids;
    uid_t outer_uid;
    gid_t outer_gid;
    struct sandbox_limits limits;
    unsigned flags;
};

struct sandbox;

/*
 * Create the namespaces and start init. Returns when init has applied the
 * whole plan and is ready for sandbox_exec, or with an error (CA_EUNAVAIL
 * when a primitive is missing, with its name).
 */
int sandbox_start(const struct sandbox_opts *opts, struct sandbox **out,
                  struct ca_err *err) WARN_UNUSED_RESULT;
/* Kill everything inside, reap init, free. NULL is a no-op. */
void sandbox_free(struct sandbox *sb);

struct sandbox_cmd {
    const char *const *argv; /* argv[0] resolved in the sandbox's PATH */
    const char *const *env; /* NULL: a minimal default (PATH, HOME=/tmp, LANG=C.UTF-8, TERM=dumb) */
    const char *cwd;        /* inside the sandbox; NULL: /workspace */
    int stdin_fd, stdout_fd, stderr_fd; /* host fds given to the program; -1: /dev/null */
    /* More host fds, given to the program as fds 3, 4, ... (at most SANDBOX_MAX_EXTRA_FDS). */
    const int *extra_fds;
    size_t n_extra_fds;
    bool new_pgroup; /* put the program in its own process group */
};

/*
 * Start a program inside. *pid gets its pid as seen inside the sandbox (use
 * it with sandbox_kill_tree and to match exit events). The fds are passed to
 * init and may be closed by the caller afterwards.
 */
int sandbox_exec(struct sandbox *sb, const struct sandbox_cmd *cmd, int *pid,
                 struct ca_err *err) WARN_UNUSED_RESULT;

/* Send sig to pid (inside pid) and all its descendants; include_root false
 * spares pid itself (kills what a shell started but keeps the shell). */
int sandbox_kill_tree(struct sandbox *sb, int pid, int sig, bool include_root,
                      struct ca_err *err) WARN_UNUSED_RESULT;

/* fd that becomes readable when init has an event (an exit) to report. */
int sandbox_event_fd(const struct sandbox *sb);

struct sandbox_event {
    int pid;    /* inside pid of a program started with sandbox_exec */
    int status; /* wait status (WIFEXITED etc.) */
};
/* Read one event; 0 and *ev filled, CA_ENOTFOUND when none is pending
 * (non-blocking), or an error when init died (the sandbox is gone). */
int sandbox_read_event(struct sandbox *sb, struct sandbox_event *ev,
                       struct ca_err *err) WARN_UNUSED_RESULT;
/* Block up to timeout_ms (<0: forever) for the exit of pid; 0 with *status. */
int sandbox_wait(struct sandbox *sb, int pid, int64_t timeout_ms, int *status,
                 struct ca_err *err) WARN_UNUSED_RESULT;

/* Host pid of init (for accounting and tests). */
pid_t sandbox_init_pid(const struct sandbox *sb);

/*
 * One-shot convenience: start a sandbox, run argv with stdout/stderr
 * captured (capped at out_max each, 0 = CA_LIMIT_CHILD_OUTPUT) and a wall
 * clock timeout that kills the whole sandbox, then tear it down.
 */
struct sandbox_run_result {
    int status; /* wait status of argv's process */
    bool timed_out;
    bool out_truncated, err_truncated;
    struct buf out, err;
    int64_t elapsed_us;
};
void sandbox_run_result_init(struct sandbox_run_result *r);
void sandbox_run_result_release(struct sandbox_run_result *r);
int sandbox_run(const struct sandbox_opts *opts, const char *const *argv, int64_t timeout_ms,
                size_t out_max, struct sandbox_run_result *r,
                struct ca_err *err) WARN_UNUSED_RESULT;

/*
 * The lockdown filter, as raw BPF (an array of struct sock_filter) appended
 * to *out: what a program that has finished starting up no longer needs and
 * must not do (new processes, program execution, sockets, ...; see
 * docs/internals/sandbox.md). A program installs it on itself with
 * prctl(PR_SET_SECCOMP) once it is ready to run untrusted code; it stacks on
 * the sandbox's own filter and cannot be removed.
 */
int sandbox_lockdown_bpf(struct buf *out, struct ca_err *err) WARN_UNUSED_RESULT;

/* What sandbox_start applied of the memory and process limits (cgroups), for reports. */
const char *sandbox_limits_desc(const struct sandbox *sb);

/* Whether this host can build sandboxes (user namespaces, seccomp); if not,
 * *why says what is missing. Cached. */
bool sandbox_supported(struct ca_err *why);

/* True when sb runs programs unconfined (SANDBOX_INSECURE): they see host paths, so the
 * control directory is not at SANDBOX_CONTROL for them. */
bool sandbox_is_insecure(const struct sandbox *sb);

#endif
