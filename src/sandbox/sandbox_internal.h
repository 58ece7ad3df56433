/*
 * sandbox_internal.h - what the files of src/sandbox share: the plan that
 * sandbox.c builds before clone and sandbox_init*.c applies inside, the
 * control-socket protocol between the host side and init, the seccomp
 * program (sandbox_seccomp.c) and the cgroup helpers (sandbox_cgroup.c).
 *
 * The plan lives in the host's memory; the child gets a copy-on-write image
 * of it through clone (no CLONE_VM) and only reads it. Everything the child
 * does is async-signal-safe (no malloc, no stdio, no locks): the host may be
 * multi-threaded, and the child is a fork-style copy of one of its threads.
 */
#ifndef CA_SANDBOX_INTERNAL_H
#define CA_SANDBOX_INTERNAL_H

#include <linux/filter.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/err.h"
#include "sandbox/sandbox.h"

/* Defaults of struct sandbox_limits (see sandbox.h). */
#define SANDBOX__DEF_CPU_SECONDS 600
#define SANDBOX__DEF_ADDRESS_SPACE ((uint64_t)8 << 30)
#define SANDBOX__DEF_NPROC 256
#define SANDBOX__DEF_NOFILE 1024
#define SANDBOX__DEF_FSIZE ((uint64_t)1 << 30)
#define SANDBOX__DEF_TMP_BYTES ((uint64_t)512 << 20)
#define SANDBOX__DEF_MEMORY ((uint64_t)4 << 30)
#define SANDBOX__DEF_HOSTNAME "sandbox"

/* Sizes of the small tmpfs mounts we make. */
#define SANDBOX__ROOT_TMPFS "size=1m,nr_inodes=4096,mode=0755"
#define SANDBOX__DEV_TMPFS "size=64k,nr_inodes=256,mode=0755"
#define SANDBOX__SHM_TMPFS "size=64m,nr_inodes=4096,mode=1777"
/* Inodes of the private /tmp (its bytes come from the limits). */
#define SANDBOX__TMP_INODES 65536

/* Where the old root sits between pivot_root and its detach. */
#define SANDBOX__OLDROOT "/.oldroot"
/* The host directory the new root tmpfs is first mounted on. */
#define SANDBOX__STAGING "/tmp"

/* Largest EXEC request (argv, env, cwd): one SOCK_SEQPACKET message. */
#define SANDBOX__REQ_MAX ((size_t)128 * 1024)
/* Strings (argv + env entries) in one EXEC request. */
#define SANDBOX__REQ_MAX_STRINGS 4096
/* Programs init tracks at once (started and not yet reaped). */
#define SANDBOX__MAX_TRACKED 4096
/* How long sandbox_start waits for init to apply the plan. */
#define SANDBOX__SETUP_TIMEOUT_MS 10000

/* ---- the plan ---- */

enum sandbox__op_kind {
    SANDBOX__OP_MOUNT,     /* mount(src, dst, fstype, flags, data) */
    SANDBOX__OP_PIVOT,     /* pivot_root(dst, dst + SANDBOX__OLDROOT); chdir("/") */
    SANDBOX__OP_MKDIR,     /* mkdir(dst, mode); an existing directory is fine */
    SANDBOX__OP_FILE,      /* create an empty file dst (a mount point for a file) */
    SANDBOX__OP_SYMLINK,   /* symlink(src, dst) */
    SANDBOX__OP_BIND,      /* bind src (recursively) on dst, then apply attr */
    SANDBOX__OP_BIND_SELF, /* bind dst on itself read-only, never following a symlink */
    SANDBOX__OP_SETATTR,   /* apply attr to the mount at dst (not recursive) */
    SANDBOX__OP_UMOUNT,    /* umount2(dst, MNT_DETACH) and rmdir(dst) */
};

/* Mount attributes, as MOUNT_ATTR_* of mount_setattr(2). */
enum sandbox__attr {
    SANDBOX__ATTR_RDONLY = 0x1,
    SANDBOX__ATTR_NOSUID = 0x2,
    SANDBOX__ATTR_NODEV = 0x4,
    SANDBOX__ATTR_NOEXEC = 0x8,
};

struct sandbox__op {
    enum sandbox__op_kind kind;
    const char *src; /* owned by the plan's string pool */
    const char *dst;
    const char *fstype;
    const char *data;
    unsigned long flags; /* MS_* for SANDBOX__OP_MOUNT */
    unsigned attr;       /* enum sandbox__attr */
    unsigned mode;       /* for MKDIR and FILE */
    bool optional;       /* a missing dst (ENOENT) is skipped, not an error */
    const char *what;    /* for messages: "mount tmpfs on /tmp" */
};

/* Where in the child something failed, after the mount ops. */
enum sandbox__step {
    SANDBOX__STEP_OP = 1, /* mount op number `index` */
    SANDBOX__STEP_SYNC,   /* reading the host's go-ahead */
    SANDBOX__STEP_FDS,    /* setting up init's own fds */
    SANDBOX__STEP_HOSTNAME,
    SANDBOX__STEP_NNP,
    SANDBOX__STEP_CAPS,
    SANDBOX__STEP_SECCOMP,
    SANDBOX__STEP_SIGNALS,
    SANDBOX__STEP_SUBREAPER,
    SANDBOX__STEP_IDS,
};

struct sandbox__plan {
    bool insecure;
    uid_t uid; /* outer ids, for the maps */
    gid_t gid;
    bool foreign_ids; /* uid/gid are not the caller's: init takes them (setres[ug]id) */
    struct sandbox__op *ops;
    size_t nops, ops_alloc;
    char **strings; /* every string the ops point to */
    size_t nstrings, strings_alloc;
    const char *hostname;
    /* Limits set in every program before exec (0 = leave as is). */
    uint64_t cpu_seconds, address_space, nproc, nofile, fsize, data;
    const struct sock_fprog *seccomp; /* NULL when insecure */
};

void sandbox__plan_release(struct sandbox__plan *p);

/* ---- the control protocol (one SOCK_SEQPACKET socket pair) ---- */

enum sandbox__msg_type {
    SANDBOX__MSG_GO = 1,     /* host -> child: maps and cgroup done, go on */
    SANDBOX__MSG_READY,      /* child -> host: plan applied, init serving */
    SANDBOX__MSG_SETUP_FAIL, /* child -> host: step, index, err */
    SANDBOX__MSG_EXEC,       /* host -> init: argc, envc, fd_mask, flags + strings, fds */
    SANDBOX__MSG_EXEC_REPLY, /* init -> host: pid, or stage + err */
    SANDBOX__MSG_KILL,       /* host -> init: pid, sig, flags */
    SANDBOX__MSG_KILL_REPLY, /* init -> host: err */
    SANDBOX__MSG_EXIT,       /* init -> host: pid, status of a started program */
};

enum sandbox__exec_stage {
    SANDBOX__EXEC_REQUEST = 1, /* the request was malformed */
    SANDBOX__EXEC_FORK,
    SANDBOX__EXEC_FDS,
    SANDBOX__EXEC_CHDIR,
    SANDBOX__EXEC_RLIMIT,
    SANDBOX__EXEC_EXEC,
    SANDBOX__EXEC_TOO_MANY, /* init's table of running programs is full */
};

#define SANDBOX__EXEC_NEW_PGROUP 0x1
/* Descriptors an EXEC request can carry: 0-2 and the extra ones. */
#define SANDBOX__EXEC_NFDS (3 + SANDBOX_MAX_EXTRA_FDS)
#define SANDBOX__KILL_INCLUDE_ROOT 0x1

/* Every message starts with this header; only EXEC carries a payload (the
 * NUL-terminated strings cwd, argv..., env...). */
struct sandbox__msg {
    uint32_t type;
    uint32_t seq;
    int32_t pid;
    int32_t status; /* EXIT: wait status */
    int32_t err;    /* errno (positive) or 0 */
    int32_t stage;  /* SETUP_FAIL: enum sandbox__step; EXEC_REPLY: enum sandbox__exec_stage */
    int32_t index;  /* SETUP_FAIL: op index */
    int32_t sig;    /* KILL */
    uint32_t flags; /* EXEC: SANDBOX__EXEC_*; KILL: SANDBOX__KILL_* */
    uint32_t argc, envc;
    uint32_t fd_mask; /* EXEC: bit i set when fd i (0..SANDBOX__EXEC_NFDS-1) is passed */
    uint32_t len;     /* EXEC: payload bytes */
};

/* ---- the child ---- */

/*
 * Run in the clone child: apply the plan, report READY or SETUP_FAIL on
 * ctl, then serve as init until ctl closes. Never returns.
 */
CA_NORETURN void sandbox__child_main(const struct sandbox__plan *plan, int ctl);

/*
 * What the files of the clone child share (sandbox_init*.c). Only the child
 * touches any of it, in its own copy of memory, and only with
 * async-signal-safe calls (sandbox_init.c says why).
 */
struct sandbox__init_state {
    const struct sandbox__plan *plan;
    int ctl, sigfd, devnull;
    int tracked[SANDBOX__MAX_TRACKED];
    size_t ntracked;
    /* One EXEC request: header + strings (+1 for a guard NUL). */
    union {
        struct sandbox__msg msg;
        char bytes[sizeof(struct sandbox__msg) + SANDBOX__REQ_MAX + 1];
    } req;
};
extern struct sandbox__init_state sandbox__init_st;

/* Helpers (sandbox_init_safe.c). */
size_t sandbox__init_str_len(const char *s);
void sandbox__init_put_str(char *buf, size_t cap, size_t *pos, const char *s);
/* One message on the control socket: 0, or -1 when it is gone. */
int sandbox__init_send_msg(const struct sandbox__msg *m);
/* SETUP_FAIL {step, index, e} to the host, then _exit(1). */
CA_NORETURN void sandbox__init_setup_fail(int step, int index, int e);
void sandbox__init_close_from(unsigned lo, unsigned hi, int flags);

/* The plan's mount ops (sandbox_init_mount.c): 0 or a positive errno. */
void sandbox__init_preopen_binds(const struct sandbox__plan *p);
int sandbox__init_apply_op(const struct sandbox__op *op, size_t index);

/* The loop (sandbox_init_loop.c). */
CA_NORETURN void sandbox__init_serve(void);

/* Starting programs (sandbox_init_exec.c). */
void sandbox__init_reply_exec(uint32_t seq, int pid, int stage, int e);
void sandbox__init_handle_exec(size_t got, int fds[SANDBOX__EXEC_NFDS]);

/* Killing process trees (sandbox_init_kill.c). */
int sandbox__init_kill_tree(int root, int sig, bool include_root);
void sandbox__init_handle_kill(void);

/* ---- seccomp ---- */

/* The filter program, built once per process (thread-safe); NULL and *err
 * filled when libseccomp cannot build it. */
const struct sock_fprog *sandbox__seccomp_prog(struct ca_err *err);
/* Whether the kernel accepts seccomp filters with errno actions (cached). */
bool sandbox__seccomp_available(void);

/* ---- cgroups ---- */

struct sandbox__cgroup {
    char *dirs[2]; /* cgroups we made (removed by release) */
    int ndirs;
    char desc[160]; /* what was applied, or why nothing was */
};

/* Put pid into a fresh child cgroup with the memory and pids limits, where
 * a writable cgroup v2 (or v1 pids/memory) hierarchy allows it. Never fails:
 * what was possible is recorded in cg->desc. */
void sandbox__cgroup_setup(struct sandbox__cgroup *cg, pid_t pid, uint64_t memory_bytes,
                           uint64_t pids);
/* Remove the cgroups (call after the processes in them are gone). */
void sandbox__cgroup_release(struct sandbox__cgroup *cg);

/* ---- for tests ---- */

/* What sandbox_start recorded about cgroup limits for sb. */
const char *sandbox__cgroup_desc(const struct sandbox *sb);
/* Use classic mount(2) binds and remounts instead of open_tree/mount_setattr
 * (the path taken on kernels before 5.12). */
void sandbox__force_legacy_mounts(bool on);

/* ---- the host side's handle (sandbox.c; sandbox_run.c reads it too) ---- */

struct sandbox {
    pid_t init_pid; /* host pid */
    int ctl;        /* our end of the control socket */
    int evfd;       /* eventfd: non-zero while queue holds events */
    int epfd;       /* epoll over ctl and evfd: sandbox_event_fd() */
    uint32_t seq;
    bool insecure;
    bool gone;   /* init exited or the socket broke */
    bool reaped; /* init waited for */
    int init_status;
    char *ws; /* the workspace's host path (insecure mode maps cwd onto it) */
    struct sandbox_event *q;
    size_t qlen, qalloc;
    struct sandbox__cgroup cg;
};

/* From the options, the whole plan (sandbox_plan.c); *ws_out: the workspace's host path. */
int sandbox__plan_build(const struct sandbox_opts *o, struct sandbox__plan *p, char **ws_out,
                        struct ca_err *err);
/* Kill everything inside and reap init (sandbox_free does this and frees). */
void sandbox__teardown(struct sandbox *sb);

#endif
