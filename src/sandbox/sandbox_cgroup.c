/*
 * sandbox_cgroup.c - memory and process-count limits through cgroups, where
 * the host lets us have them.
 *
 * Design and invariants:
 * - Runs on the host side, between clone and the child's go-ahead, so that
 *   every process of the sandbox starts inside the cgroup.
 * - cgroup v2 (a cgroup2 file system at /sys/fs/cgroup): a child of our own
 *   cgroup with memory.max and pids.max, when that cgroup is writable to us
 *   (root, or a delegated subtree) and the controllers are enabled for it.
 * - cgroup v1 (hybrid or legacy hosts): a child in the pids and memory
 *   hierarchies with pids.max and memory.limit_in_bytes, when writable. This
 *   matters when we run as root: RLIMIT_NPROC does not bind uid 0 (the
 *   kernel exempts the global root user), so without a pids cgroup a fork
 *   bomb would only be stopped by the wall-clock timeout.
 * - Nothing here is fatal: what could not be applied is recorded in the
 *   description (and logged at debug); rlimits still apply.
 */
#include "sandbox/sandbox_internal.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/fs.h"
#include "core/limits.h"
#include "core/log.h"
#include "core/sv.h"
#include "core/banned.h"

#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif
#ifndef CGROUP_SUPER_MAGIC
#define CGROUP_SUPER_MAGIC 0x27e0eb
#endif

#define CG_ROOT "/sys/fs/cgroup"
#define CG_PREFIX "cuda-agent-sb-"

static bool fs_type_is(const char *path, long magic)
{
    struct statfs sf;
    return statfs(path, &sf) == 0 && (long)sf.f_type == magic;
}

static int write_str(const char *dir, const char *file, const char *s)
{
    char path[CA_LIMIT_PATH];
    int n = snprintf(path, sizeof(path), "%s/%s", dir, file);
    if (n < 0 || (size_t)n >= sizeof(path))
        return -ENAMETOOLONG;
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t len = strlen(s);
    ssize_t w = write(fd, s, len);
    int rc = w == (ssize_t)len ? 0 : w < 0 ? -errno : -EIO;
    close(fd);
    return rc;
}

static bool has_file(const char *dir, const char *file)
{
    char path[CA_LIMIT_PATH];
    int n = snprintf(path, sizeof(path), "%s/%s", dir, file);
    return n > 0 && (size_t)n < sizeof(path) && access(path, F_OK) == 0;
}

/*
 * Our own cgroup path in the hierarchy with `controller` (v1), or the
 * unified one (controller NULL): from /proc/self/cgroup.
 */
static char *own_path(const char *controller)
{
    struct buf b;
    buf_init(&b, 64 * CA_KIB);
    char *found = NULL;
    if (fs_read_file("/proc/self/cgroup", 64 * CA_KIB, &b, NULL) != 0)
        goto out;
    struct sv s = sv_from(b.data, b.len), line;
    while (!found && sv_next_line(&s, &line, NULL)) {
        struct sv rest = line;
        sv_split(&rest, ':'); /* hierarchy id */
        struct sv ctrls = sv_split(&rest, ':');
        if (!controller) {
            if (ctrls.len == 0)
                found = sv_dup(rest);
            continue;
        }
        while (ctrls.len) {
            struct sv c = sv_split(&ctrls, ',');
            if (sv_eq_cstr(c, controller)) {
                found = sv_dup(rest);
                break;
            }
        }
    }
out:
    buf_release(&b);
    return found;
}

/*
 * Remove cgroups left by sandboxes whose host process died before
 * sandbox_free: their name holds init's host pid, and init is gone. The
 * cgroup of a live sandbox is never touched: its init lives from before the
 * mkdir until the sandbox is torn down, and after that it is empty anyway
 * (rmdir fails on a cgroup that holds processes).
 */
static void collect_stale(const char *parent)
{
    DIR *d = opendir(parent);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        struct sv name = sv_cstr(e->d_name);
        uint64_t pid;
        if (!sv_chop_prefix(&name, SV_LIT(CG_PREFIX)) ||
            sv_parse_u64(name, &pid, "pid", NULL) != 0 || pid == 0 || pid > INT32_MAX)
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        char *dir = xstrfmt("%s/%s", parent, e->d_name);
        if (rmdir(dir) == 0)
            LOG_DEBUG("sandbox: removed stale cgroup %s", dir);
        free(dir);
    }
    closedir(d);
}

/* mkdir base/<name>; a stale one from a crashed run with the same pid goes first. */
static int make_dir(const char *dir)
{
    if (mkdir(dir, 0755) == 0)
        return 0;
    if (errno != EEXIST)
        return -errno;
    if (rmdir(dir) != 0 || mkdir(dir, 0755) != 0)
        return -errno;
    return 0;
}

static void remember(struct sandbox__cgroup *cg, char *dir)
{
    ASSERT(cg->ndirs < (int)ARRAY_SIZE(cg->dirs));
    cg->dirs[cg->ndirs++] = dir;
}

static void join(struct sandbox__cgroup *cg, char *dir, pid_t pid, const char *what)
{
    char num[32];
    snprintf(num, sizeof(num), "%d", (int)pid);
    int rc = write_str(dir, "cgroup.procs", num);
    if (rc) {
        LOG_DEBUG("sandbox: cannot move pid %d into %s: %s", (int)pid, dir, strerror(-rc));
        rmdir(dir);
        free(dir);
        return;
    }
    remember(cg, dir);
    size_t len = strlen(cg->desc);
    snprintf(cg->desc + len, sizeof(cg->desc) - len, "%s%s", len ? ", " : "", what);
}

static void setup_v2(struct sandbox__cgroup *cg, pid_t pid, uint64_t mem, uint64_t pids)
{
    char *own = own_path(NULL);
    if (!own) {
        snprintf(cg->desc, sizeof(cg->desc), "none: no cgroup v2 entry in /proc/self/cgroup");
        return;
    }
    char *base = xstrfmt("%s%s", CG_ROOT, strcmp(own, "/") == 0 ? "" : own);
    char *dir = xstrfmt("%s/" CG_PREFIX "%d", base, (int)pid);
    free(own);
    collect_stale(base);
    int rc = make_dir(dir);
    if (rc) {
        snprintf(cg->desc, sizeof(cg->desc), "none: cannot create a cgroup under %s: %s", base,
                 strerror(-rc));
        goto fail;
    }
    if (!has_file(dir, "memory.max") || !has_file(dir, "pids.max"))
        (void)write_str(base, "cgroup.subtree_control", "+memory +pids"); /* may be refused */
    char num[32];
    bool any = false;
    if (has_file(dir, "memory.max")) {
        snprintf(num, sizeof(num), "%llu", (unsigned long long)mem);
        any |= write_str(dir, "memory.max", num) == 0;
    }
    if (has_file(dir, "pids.max")) {
        snprintf(num, sizeof(num), "%llu", (unsigned long long)pids);
        any |= write_str(dir, "pids.max", num) == 0;
    }
    if (!any) {
        rmdir(dir);
        snprintf(cg->desc, sizeof(cg->desc),
                 "none: the memory and pids controllers are not enabled for %s", base);
        goto fail;
    }
    join(cg, dir, pid, "cgroup v2 memory.max+pids.max");
    free(base);
    return;
fail:
    free(base);
    free(dir);
}

static void setup_v1(struct sandbox__cgroup *cg, pid_t pid, const char *controller,
                     const char *file, uint64_t value)
{
    char *hier = xstrfmt("%s/%s", CG_ROOT, controller);
    if (!fs_type_is(hier, CGROUP_SUPER_MAGIC)) {
        free(hier);
        return;
    }
    char *own = own_path(controller);
    if (!own) {
        free(hier);
        return;
    }
    char *base = xstrfmt("%s%s", hier, strcmp(own, "/") == 0 ? "" : own);
    char *dir = xstrfmt("%s/" CG_PREFIX "%d", base, (int)pid);
    free(own);
    free(hier);
    collect_stale(base);
    free(base);
    int rc = make_dir(dir);
    if (rc) {
        LOG_DEBUG("sandbox: cannot create cgroup %s: %s", dir, strerror(-rc));
        free(dir);
        return;
    }
    char num[32];
    snprintf(num, sizeof(num), "%llu", (unsigned long long)value);
    rc = write_str(dir, file, num);
    if (rc) {
        LOG_DEBUG("sandbox: cannot set %s/%s: %s", dir, file, strerror(-rc));
        rmdir(dir);
        free(dir);
        return;
    }
    char what[64];
    snprintf(what, sizeof(what), "cgroup v1 %s", file);
    join(cg, dir, pid, what);
}

void sandbox__cgroup_setup(struct sandbox__cgroup *cg, pid_t pid, uint64_t memory_bytes,
                           uint64_t pids)
{
    memset(cg, 0, sizeof(*cg));
    if (fs_type_is(CG_ROOT, CGROUP2_SUPER_MAGIC)) {
        setup_v2(cg, pid, memory_bytes, pids);
    } else {
        setup_v1(cg, pid, "pids", "pids.max", pids);
        setup_v1(cg, pid, "memory", "memory.limit_in_bytes", memory_bytes);
        if (!cg->ndirs)
            snprintf(cg->desc, sizeof(cg->desc),
                     "none: no writable cgroup v2 at " CG_ROOT " nor v1 pids/memory hierarchy");
    }
    if (!cg->ndirs)
        LOG_DEBUG("sandbox: no cgroup limits (%s); rlimits only", cg->desc);
}

void sandbox__cgroup_release(struct sandbox__cgroup *cg)
{
    for (int i = 0; i < cg->ndirs; i++) {
        /* The last processes may still be on their way out of the cgroup. */
        int tries = 0;
        while (rmdir(cg->dirs[i]) != 0 && errno == EBUSY && tries++ < 50) {
            struct timespec ts = {0, 2 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        if (tries > 50) /* the next sandbox_start collects it */
            LOG_DEBUG("sandbox: cgroup %s still busy; left for later", cg->dirs[i]);
        free(cg->dirs[i]);
        cg->dirs[i] = NULL;
    }
    cg->ndirs = 0;
}
