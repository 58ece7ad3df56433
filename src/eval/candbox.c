/*
 * candbox.c - the candidate process's sandbox (see candbox.h).
 *
 * Design and invariants:
 * - One sandbox per candidate process, built with src/sandbox (no second
 *   sandbox): the system directories, the spec's read-only paths, the
 *   scratch directory at /workspace, a private /tmp, /dev with the GPU nodes
 *   when asked; nothing else of the host. The trusted runner, the compile
 *   cache, the baselines and the reference's files are simply not there.
 * - Root callers map the sandbox to an unprivileged host user (61999 by
 *   default), so even a path that leaks into the mount tree is read with that
 *   user's rights; other callers keep their own uid (the mount tree is the
 *   barrier) and the report says so.
 * - The address space is not limited (CUDA reserves hundreds of GiB of it);
 *   host memory is bounded by the cgroup where one can be made, and the
 *   report says whether it was.
 * - This process stays the sandbox's host: it forwards the program's exit
 *   status as its own, tears everything down on SIGTERM/SIGINT/SIGHUP, and
 *   dies with its parent (PR_SET_PDEATHSIG), which closes the control socket
 *   and so ends every process inside.
 */
#include "eval/candbox.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/json.h"
#include "core/log.h"
#include "core/sv.h"
#include "core/util.h"
#include "sandbox/sandbox.h"
#include "core/banned.h"

#define DEF_MEMORY ((uint64_t)16 << 30)
#define DEF_TMP ((uint64_t)1 << 30)
#define DEF_CPU_SECONDS 3600
#define SPEC_MAX_BYTES ((size_t)256 * 1024)

static int get_u64(const json_t *o, const char *key, uint64_t *out, struct ca_err *err)
{
    int64_t v = -1;
    int rc = jsonx_get_int(o, key, false, &v, "sandbox spec", err);
    if (rc)
        return rc;
    if (v == -1)
        return 0;
    if (v < 0)
        return err_setf(err, CA_EPARSE, "sandbox spec: \"%s\" must not be negative", key);
    *out = (uint64_t)v;
    return 0;
}

static int get_fds(const json_t *o, struct candbox_spec *s, struct ca_err *err)
{
    json_t *fds = NULL;
    int rc = jsonx_get_array(o, "fds", false, &fds, "sandbox spec", err);
    if (rc || !fds)
        return rc;
    if (json_array_size(fds) > CANDBOX_MAX_FDS - 1)
        return err_setf(err, CA_EPARSE, "sandbox spec: at most %d \"fds\"", CANDBOX_MAX_FDS - 1);
    size_t i;
    json_t *v;
    json_array_foreach(fds, i, v)
    {
        if (!json_is_integer(v) || json_integer_value(v) < 3 || json_integer_value(v) > 1 << 20)
            return err_setf(err, CA_EPARSE, "sandbox spec: \"fds\" holds fd numbers >= 3");
        s->fds[s->nfds++] = (int)json_integer_value(v);
    }
    return 0;
}

int candbox_spec_parse(const char *text, struct candbox_spec *s, json_t **json_out,
                       struct ca_err *err)
{
    memset(s, 0, sizeof(*s));
    s->report_fd = -1;
    s->uid = s->gid = -1;
    *json_out = NULL;
    json_t *o = NULL;
    int rc = jsonx_parse(sv_from(text, strlen(text)), SPEC_MAX_BYTES, "sandbox spec", &o, err);
    if (rc)
        return rc;
    if (!json_is_object(o)) {
        json_decref(o);
        return err_setf(err, CA_EPARSE, "sandbox spec: not a JSON object");
    }
    int64_t report = -1, uid = -1, gid = -1, cpu = 0;
    json_t *ro = NULL, *env = NULL;
    rc = jsonx_get_str(o, "scratch", true, &s->scratch, "sandbox spec", err);
    if (!rc)
        rc = jsonx_get_array(o, "ro", false, &ro, "sandbox spec", err);
    if (!rc)
        rc = jsonx_get_bool(o, "gpu", false, &s->gpu, "sandbox spec", err);
    if (!rc)
        rc = jsonx_get_bool(o, "lockdown", false, &s->lockdown, "sandbox spec", err);
    if (!rc)
        rc = get_u64(o, "memory_bytes", &s->memory_bytes, err);
    if (!rc)
        rc = get_u64(o, "tmp_bytes", &s->tmp_bytes, err);
    if (!rc)
        rc = jsonx_get_int(o, "cpu_seconds", false, &cpu, "sandbox spec", err);
    if (!rc)
        rc = get_fds(o, s, err);
    if (!rc)
        rc = jsonx_get_int(o, "report_fd", false, &report, "sandbox spec", err);
    if (!rc)
        rc = jsonx_get_int(o, "uid", false, &uid, "sandbox spec", err);
    if (!rc)
        rc = jsonx_get_int(o, "gid", false, &gid, "sandbox spec", err);
    if (!rc)
        rc = jsonx_get_str(o, "cwd", false, &s->cwd, "sandbox spec", err);
    if (!rc)
        rc = jsonx_get_array(o, "env", false, &env, "sandbox spec", err);
    size_t i;
    json_t *v;
    if (!rc && ro) {
        if (json_array_size(ro) > CANDBOX_MAX_RO)
            rc = err_setf(err, CA_EPARSE, "sandbox spec: at most %d \"ro\" paths", CANDBOX_MAX_RO);
        json_array_foreach(ro, i, v)
        {
            if (rc)
                break;
            if (!json_is_string(v) || json_string_value(v)[0] != '/')
                rc = err_setf(err, CA_EPARSE, "sandbox spec: \"ro\" holds absolute paths");
            else
                s->ro[s->nro++] = json_string_value(v);
        }
    }
    if (!rc && env) {
        json_array_foreach(env, i, v)
        {
            if (!json_is_string(v) || !strchr(json_string_value(v), '=')) {
                rc = err_setf(err, CA_EPARSE, "sandbox spec: \"env\" holds K=V strings");
                break;
            }
        }
        s->env = env;
    }
    if (!rc && cpu < 0)
        rc = err_setf(err, CA_EPARSE, "sandbox spec: \"cpu_seconds\" must not be negative");
    if (!rc && (uid < -1 || uid > 0x7fffffff || gid < -1 || gid > 0x7fffffff))
        rc = err_setf(err, CA_EPARSE, "sandbox spec: \"uid\"/\"gid\" out of range");
    if (!rc && report != -1) {
        bool found = false;
        for (size_t k = 0; k < s->nfds; k++)
            found |= s->fds[k] == report;
        if (!found)
            rc = err_setf(err, CA_EPARSE, "sandbox spec: \"report_fd\" must be one of \"fds\"");
    }
    if (rc) {
        json_decref(o);
        return rc;
    }
    s->report_fd = (int)report;
    s->uid = uid;
    s->gid = gid;
    s->cpu_seconds = cpu;
    *json_out = o;
    return 0;
}

/* ---- the GPU's device nodes ---- */

static bool nvidia_node(const char *name)
{
    if (strcmp(name, "nvidiactl") == 0 || strcmp(name, "nvidia-uvm") == 0 ||
        strcmp(name, "nvidia-uvm-tools") == 0)
        return true;
    if (strncmp(name, "nvidia", 6) != 0 || !name[6])
        return false;
    for (const char *c = name + 6; *c; c++)
        if (*c < '0' || *c > '9')
            return false;
    return true;
}

/* The NVIDIA nodes under /dev, sorted; *n of them (strings owned by paths). */
static int gpu_devices(char *paths[SANDBOX_MAX_DEVICES], size_t *n, struct ca_err *err)
{
    *n = 0;
    DIR *d = opendir("/dev");
    if (!d)
        return err_setf(err, -errno, "candidate sandbox: /dev: %s", strerror(errno));
    struct dirent *e;
    while ((e = readdir(d)) && *n < SANDBOX_MAX_DEVICES - 1) {
        if (!nvidia_node(e->d_name))
            continue;
        char *p = xstrfmt("/dev/%s", e->d_name);
        struct stat st;
        if (stat(p, &st) == 0 && S_ISCHR(st.st_mode))
            paths[(*n)++] = p;
        else
            free(p);
    }
    closedir(d);
    for (size_t i = 1; i < *n; i++) /* insertion sort: a handful of names */
        for (size_t j = i; j > 0 && strcmp(paths[j - 1], paths[j]) > 0; j--) {
            char *t = paths[j];
            paths[j] = paths[j - 1];
            paths[j - 1] = t;
        }
    bool ctl = false;
    for (size_t i = 0; i < *n; i++)
        ctl |= strcmp(paths[i], "/dev/nvidiactl") == 0;
    if (!ctl)
        return err_setf(err, CA_EUNAVAIL,
                        "candidate sandbox: no /dev/nvidiactl: the NVIDIA driver's device nodes "
                        "are not on this host");
    return 0;
}

/* ---- the isolation report ---- */

static void report_line(int fd, json_t *msg)
{
    if (fd < 0) {
        json_decref(msg);
        return;
    }
    char *text = msg ? json_dumps(msg, JSON_COMPACT) : NULL;
    if (!text) /* never silent: the trusted side must not take silence for isolation */
        text = xstrdup("{\"type\":\"isolation\",\"ok\":false,\"error\":\"the isolation "
                       "report could not be written\"}");
    json_decref(msg);
    size_t len = strlen(text);
    text[len] = '\n'; /* json_dumps' NUL becomes the line end */
    size_t off = 0;
    while (off <= len) {
        ssize_t w = write(fd, text + off, len + 1 - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    free(text);
}

static void report_failure(int fd, const struct ca_err *e)
{
    report_line(fd, json_pack("{s:s, s:b, s:s}", "type", "isolation", "ok", 0, "error", e->msg));
}

static void report_isolation(const struct candbox_spec *s, const struct sandbox *sb, bool mapped,
                             uid_t uid, char *const *devs, size_t ndevs)
{
    json_t *ns =
        json_pack("[s,s,s,s,s,s,s]", "user", "mount", "pid", "net", "ipc", "uts", "cgroup");
    json_t *d = json_array();
    for (size_t i = 0; i < ndevs; i++)
        json_array_append_new(d, json_string(devs[i]));
    json_t *ro = json_array();
    for (size_t i = 0; i < s->nro; i++)
        json_array_append_new(ro, json_string(s->ro[i]));
    uint64_t mem = s->memory_bytes ? s->memory_bytes : DEF_MEMORY;
    json_t *msg = json_object();
    json_object_set_new(msg, "type", json_string("isolation"));
    json_object_set_new(msg, "ok", json_true());
    json_object_set_new(msg, "sandbox", json_true());
    json_object_set_new(msg, "namespaces", ns);
    json_object_set_new(msg, "host_uid", json_integer((json_int_t)uid));
    json_object_set_new(msg, "own_uid", json_boolean(mapped));
    json_object_set_new(
        msg, "seccomp",
        json_string(s->lockdown ? "sandbox filter + lockdown after start-up" : "sandbox filter"));
    json_object_set_new(msg, "capabilities", json_string("none (no_new_privs)"));
    json_object_set_new(msg, "devices", d);
    json_object_set_new(msg, "read_only", ro);
    json_object_set_new(msg, "scratch", json_string(s->scratch));
    json_object_set_new(msg, "tmp_bytes",
                        json_integer((json_int_t)(s->tmp_bytes ? s->tmp_bytes : DEF_TMP)));
    json_object_set_new(msg, "memory_cgroup", json_string(sandbox_limits_desc(sb)));
    json_object_set_new(msg, "data_bytes", json_integer((json_int_t)mem));
    report_line(s->report_fd, msg);
}

/* ---- running ---- */

/* A memfd holding the lockdown filter, positioned at its start. */
static int lockdown_fd(struct ca_err *err)
{
    struct buf bpf;
    buf_init(&bpf, 1 << 20);
    int rc = sandbox_lockdown_bpf(&bpf, err);
    int fd = -1;
    if (!rc) {
        fd = memfd_create("ca-lockdown", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (fd < 0 || write(fd, bpf.data, bpf.len) != (ssize_t)bpf.len ||
            fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) ||
            lseek(fd, 0, SEEK_SET) != 0)
            rc = err_setf(err, -errno, "candidate sandbox: the lockdown filter's memfd: %s",
                          strerror(errno));
    }
    buf_release(&bpf);
    if (rc) {
        if (fd >= 0)
            close(fd);
        return rc;
    }
    return fd;
}

static int wait_program(struct sandbox *sb, int pid, int sigfd, int *status, struct ca_err *err)
{
    for (;;) {
        struct pollfd pfd[2] = {{.fd = sandbox_event_fd(sb), .events = POLLIN},
                                {.fd = sigfd, .events = POLLIN}};
        if (poll(pfd, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            return err_setf(err, -errno, "candidate sandbox: poll: %s", strerror(errno));
        }
        if (pfd[1].revents) {
            struct signalfd_siginfo si;
            ssize_t n = read(sigfd, &si, sizeof(si));
            return err_setf(err, CA_ECHILD, "candidate sandbox: stopped by signal %d",
                            n == (ssize_t)sizeof(si) ? (int)si.ssi_signo : 0);
        }
        struct sandbox_event ev;
        int rc;
        while ((rc = sandbox_read_event(sb, &ev, err)) == 0)
            if (ev.pid == pid) {
                *status = ev.status;
                return 0;
            }
        if (rc != CA_ENOTFOUND)
            return rc;
    }
}

int candbox_run(const struct candbox_spec *s, const char *const *argv, int *status,
                struct ca_err *err)
{
    *status = -1;
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 || getppid() == 1)
        return err_setf(err, CA_ECHILD, "candidate sandbox: the parent is gone");
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGHUP);
    if (sigprocmask(SIG_BLOCK, &stop, NULL) != 0)
        return err_setf(err, -errno, "candidate sandbox: sigprocmask: %s", strerror(errno));
    int sigfd = signalfd(-1, &stop, SFD_CLOEXEC);
    if (sigfd < 0)
        return err_setf(err, -errno, "candidate sandbox: signalfd: %s", strerror(errno));

    char *devs[SANDBOX_MAX_DEVICES] = {0};
    size_t ndevs = 0;
    int lock = -1, rc = 0;
    struct sandbox *sb = NULL;
    bool root = geteuid() == 0;
    uid_t uid = root ? (uid_t)(s->uid >= 0 ? s->uid : CANDBOX_DEFAULT_UID) : geteuid();
    gid_t gid = root ? (gid_t)(s->gid >= 0 ? s->gid : CANDBOX_DEFAULT_GID) : getegid();
    if (s->gpu)
        rc = gpu_devices(devs, &ndevs, err);
    if (!rc && s->lockdown) {
        lock = lockdown_fd(err);
        rc = lock < 0 ? lock : 0;
    }
    if (!rc) {
        struct sandbox_opts o = {
            .workspace = s->scratch,
            .hostname = "candidate",
            .devices = (const char *const *)devs,
            .set_outer_ids = root,
            .outer_uid = uid,
            .outer_gid = gid,
            .limits = {.cpu_seconds =
                           s->cpu_seconds > 0 ? (uint64_t)s->cpu_seconds : DEF_CPU_SECONDS,
                       .address_space = SANDBOX_UNLIMITED,
                       .nproc = 4096,
                       .nofile = 4096,
                       .fsize = (uint64_t)64 << 30,
                       .tmp_bytes = s->tmp_bytes ? s->tmp_bytes : DEF_TMP,
                       .memory_bytes = s->memory_bytes ? s->memory_bytes : DEF_MEMORY,
                       /* Also where no memory cgroup can be made: private writable memory
                        * (heaps, anonymous maps; not the GPU's mappings) of the process. */
                       .data_bytes = s->memory_bytes ? s->memory_bytes : DEF_MEMORY},
        };
        const char *ro[CANDBOX_MAX_RO + 1];
        memcpy(ro, s->ro, s->nro * sizeof(ro[0]));
        ro[s->nro] = NULL;
        o.extra_ro_binds = ro;
        rc = sandbox_start(&o, &sb, err);
        if (rc)
            err_prefix(err, "the candidate sandbox");
    }
    int extra[CANDBOX_MAX_FDS];
    size_t nextra = 0;
    for (size_t i = 0; i < s->nfds; i++)
        extra[nextra++] = s->fds[i];
    if (lock >= 0)
        extra[nextra++] = lock;
    const char **env = NULL;
    if (!rc && s->env) {
        env = xcalloc(json_array_size(s->env) + 1, sizeof(*env));
        for (size_t i = 0; i < json_array_size(s->env); i++)
            env[i] = json_string_value(json_array_get(s->env, i));
    }
    int pid = -1;
    if (!rc) {
        report_isolation(s, sb, root, uid, devs, ndevs);
        struct sandbox_cmd c = {.argv = argv,
                                .env = env,
                                .cwd = s->cwd,
                                .stdin_fd = 0,
                                .stdout_fd = 1,
                                .stderr_fd = 2,
                                .extra_fds = extra,
                                .n_extra_fds = nextra,
                                .new_pgroup = true};
        rc = sandbox_exec(sb, &c, &pid, err);
    } else {
        report_failure(s->report_fd, err);
    }
    if (lock >= 0)
        close(lock);
    if (!rc)
        rc = wait_program(sb, pid, sigfd, status, err);
    sandbox_free(sb); /* returns once every process inside is gone */
    free(env);
    for (size_t i = 0; i < ndevs; i++)
        free(devs[i]);
    close(sigfd);
    return rc;
}
