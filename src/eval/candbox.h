/*
 * candbox.h - the sandbox a candidate process runs in (the untrusted side of
 * an evaluation: harness/candidate.py with the candidate's extension and
 * model_new.py loaded).
 *
 * The trusted harness starts `cuda-agent candidate-sandbox SPEC -- ARGV`;
 * this module does the work: a sandbox (src/sandbox: user, mount, pid, net,
 * ipc, uts and cgroup namespaces, no capabilities, no_new_privs, the seccomp
 * filter) whose only host paths are the system directories, the read-only
 * paths of the spec (the interpreter, PyTorch, the harness, the job's files)
 * and a private writable scratch directory; with the GPU's device nodes when
 * the spec asks for them; run as an unprivileged host user when the caller is
 * root; with a second, stricter filter handed to the program to install on
 * itself once it has started up (no new processes, no programs, no sockets).
 *
 * Before the program starts, one JSON line {"type": "isolation", ...}
 * describing what is in force (or {"type": "isolation", "ok": false,
 * "error": ...} when the sandbox could not be built) is written on the
 * spec's report fd, so the trusted side records exactly what held.
 */
#ifndef CA_CANDBOX_H
#define CA_CANDBOX_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/err.h"

#define CANDBOX_MAX_RO 64
#define CANDBOX_MAX_FDS 4

/* The unprivileged host user a candidate runs as when the evaluator is root. */
#define CANDBOX_DEFAULT_UID 61999
#define CANDBOX_DEFAULT_GID 61999

struct candbox_spec {
    const char *scratch;            /* host directory, writable at /workspace */
    const char *ro[CANDBOX_MAX_RO]; /* host paths bound read-only at the same path */
    size_t nro;
    bool gpu;                 /* bind the NVIDIA device nodes */
    uint64_t memory_bytes;    /* cgroup memory.max; 0: 16 GiB */
    uint64_t tmp_bytes;       /* the private /tmp; 0: 1 GiB */
    int64_t cpu_seconds;      /* RLIMIT_CPU; 0: 3600 */
    int fds[CANDBOX_MAX_FDS]; /* host fds given to the program as 3, 4, ... */
    size_t nfds;
    int report_fd;    /* one of fds: where the isolation line goes; -1 none */
    bool lockdown;    /* hand over the lockdown filter as the next fd */
    int64_t uid, gid; /* outer ids when root; -1: CANDBOX_DEFAULT_* */
    const char *cwd;  /* inside; NULL: /workspace */
    json_t *env;      /* array of "K=V" strings (borrowed), or NULL */
};

/* Parse the JSON spec ({"scratch": DIR, "ro": [...], "gpu": bool, "memory_bytes": N,
 * "tmp_bytes": N, "cpu_seconds": N, "fds": [N...], "report_fd": N, "lockdown": bool,
 * "uid": N, "gid": N, "cwd": PATH, "env": [...]}). *json_out owns what *spec points to. */
int candbox_spec_parse(const char *text, struct candbox_spec *spec, json_t **json_out,
                       struct ca_err *err) WARN_UNUSED_RESULT;

/*
 * Run argv in the candidate sandbox and wait for it. *status: its wait status.
 * A SIGTERM, SIGINT or SIGHUP to this process tears the sandbox down (every
 * process in it gone) and returns CA_ECANCELED. Errors building the sandbox
 * are reported on the report fd too.
 */
int candbox_run(const struct candbox_spec *spec, const char *const *argv, int *status,
                struct ca_err *err) WARN_UNUSED_RESULT;

#endif
