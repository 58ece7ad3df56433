/*
 * cpuplan.c - the split of the host's cores between GPU runners' timing and everything else,
 * compile placement (affinity and nice, inherited by the compilers a placed thread starts)
 * and the timing windows that hold new compiler runs back.
 *
 * Invariants: the compile config is written once before any build and only read after; a
 * thread's placement is applied at most once (nice cannot be lowered again unprivileged, so
 * only threads that do nothing but start compilers are placed); the timing marks are guarded
 * by one mutex, and a waiter never waits past its own deadline.
 */
#include "eval/cpuplan.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/util.h"
#include "core/banned.h"

/* ---- the split ---- */

struct group {
    int core;
    int top; /* its highest CPU number */
    cpu_set_t cpus;
};

static int by_top_desc(const void *a, const void *b)
{
    const struct group *x = a, *y = b;
    return (x->top < y->top) - (x->top > y->top);
}

static void set_all(struct cpuplan *p, const cpu_set_t *all)
{
    p->compile = *all;
    for (size_t i = 0; i < p->nrunners; i++)
        p->runner[i] = *all;
}

int cpuplan_split(const int *cpus, const int *core, size_t ncpus, size_t nrunners, int per_runner,
                  struct cpuplan *out, struct ca_err *err)
{
    memset(out, 0, sizeof(*out));
    if (ncpus == 0)
        return err_setf(err, CA_EUSAGE, "no CPUs to split");
    if (nrunners == 0 || nrunners > CPUPLAN_MAX_RUNNERS)
        return err_setf(err, CA_EUSAGE, "a CPU plan has 1 to %d runners, not %zu",
                        CPUPLAN_MAX_RUNNERS, nrunners);
    out->nrunners = nrunners;
    cpu_set_t all;
    CPU_ZERO(&all);
    struct group *g = xcalloc(ncpus, sizeof(*g));
    size_t ng = 0;
    for (size_t i = 0; i < ncpus; i++) {
        if (cpus[i] < 0 || cpus[i] >= CPU_SETSIZE) {
            free(g);
            return err_setf(err, CA_EUSAGE, "CPU %d is out of range", cpus[i]);
        }
        CPU_SET(cpus[i], &all);
        size_t k = 0;
        while (k < ng && g[k].core != core[i])
            k++;
        if (k == ng) {
            g[ng].core = core[i];
            g[ng].top = -1;
            CPU_ZERO(&g[ng].cpus);
            ng++;
        }
        CPU_SET(cpus[i], &g[k].cpus);
        if (cpus[i] > g[k].top)
            g[k].top = cpus[i];
    }
    qsort(g, ng, sizeof(*g), by_top_desc);
    size_t per = per_runner > 0 ? (size_t)per_runner : ng >= 6 * nrunners ? 2 : 1;
    size_t half = (ng + 1) / 2;
    if (per_runner <= 0 && per > 1 && (per * nrunners > ng || ng - per * nrunners < half))
        per = 1;
    bool enough =
        per_runner > 0 ? per * nrunners < ng : per * nrunners <= ng && ng - per * nrunners >= half;
    if (!enough) {
        set_all(out, &all);
        snprintf(out->why, sizeof(out->why),
                 "not isolated: %zu physical core(s) for %zu runner(s) at %zu each would leave "
                 "the compile pool %s",
                 ng, nrunners, per, per * nrunners >= ng ? "nothing" : "under half of them");
        free(g);
        return 0;
    }
    for (size_t r = 0; r < nrunners; r++) {
        CPU_ZERO(&out->runner[r]);
        for (size_t k = r * per; k < (r + 1) * per; k++)
            CPU_OR(&out->runner[r], &out->runner[r], &g[k].cpus);
    }
    CPU_ZERO(&out->compile);
    for (size_t k = per * nrunners; k < ng; k++)
        CPU_OR(&out->compile, &out->compile, &g[k].cpus);
    out->isolated = true;
    snprintf(out->why, sizeof(out->why),
             "%zu physical core(s) per runner for timing, %zu of %zu for compiling", per,
             ng - per * nrunners, ng);
    free(g);
    return 0;
}

/* ---- CPU lists ---- */

void cpuplan_format(const cpu_set_t *set, char *buf, size_t size)
{
    size_t len = 0;
    if (size)
        buf[0] = '\0';
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, set))
            continue;
        int e = c;
        while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, set))
            e++;
        int n = e == c ? snprintf(buf + len, size - len, "%s%d", len ? "," : "", c)
                       : snprintf(buf + len, size - len, "%s%d-%d", len ? "," : "", c, e);
        if (n < 0 || (size_t)n >= size - len)
            return; /* truncated, still NUL-terminated */
        len += (size_t)n;
        c = e;
    }
}

static int parse_cpu(const char **s, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(*s, &end, 10);
    if (end == *s || errno || v < 0 || v >= CPU_SETSIZE)
        return -1;
    *out = (int)v;
    *s = end;
    return 0;
}

int cpuplan_parse_list(const char *text, cpu_set_t *set, struct ca_err *err)
{
    CPU_ZERO(set);
    const char *s = text;
    while (*s) {
        int lo, hi;
        if (parse_cpu(&s, &lo))
            return err_setf(err, CA_EUSAGE, "'%s' is not a CPU list such as 0-3,6", text);
        hi = lo;
        if (*s == '-') {
            s++;
            if (parse_cpu(&s, &hi) || hi < lo)
                return err_setf(err, CA_EUSAGE, "'%s' is not a CPU list such as 0-3,6", text);
        }
        for (int c = lo; c <= hi; c++)
            CPU_SET(c, set);
        if (*s == ',')
            s++;
        else if (*s)
            return err_setf(err, CA_EUSAGE, "'%s' is not a CPU list such as 0-3,6", text);
    }
    if (CPU_COUNT(set) == 0)
        return err_setf(err, CA_EUSAGE, "the CPU list '%s' is empty", text);
    return 0;
}

json_t *cpuplan_to_json(const struct cpuplan *p)
{
    char buf[1024];
    json_t *runners = json_array();
    for (size_t i = 0; i < p->nrunners; i++) {
        cpuplan_format(&p->runner[i], buf, sizeof(buf));
        json_array_append_new(runners, json_string(buf));
    }
    cpuplan_format(&p->compile, buf, sizeof(buf));
    return json_pack("{s:b, s:s, s:s, s:o}", "isolated", p->isolated, "why", p->why, "compile", buf,
                     "runners", runners);
}

/* ---- this host ---- */

static int read_int_file(const char *path, int *out)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    int ok = fscanf(f, "%d", out) == 1;
    fclose(f);
    return ok ? 0 : -1;
}

/* "T0/T1/...:C" */
static int explicit_split(const char *spec, const cpu_set_t *allowed, size_t nrunners,
                          struct cpuplan *out, struct ca_err *err)
{
    const char *colon = strchr(spec, ':');
    if (!colon)
        return err_setf(err, CA_EUSAGE,
                        "CPU split '%s': want auto, off, N (cores per runner) or "
                        "TIMING/TIMING...:COMPILE such as 15/14:0-13",
                        spec);
    char *timing = xstrfmt("%.*s", (int)(colon - spec), spec);
    int rc = cpuplan_parse_list(colon + 1, &out->compile, err);
    size_t n = 0;
    for (char *s = timing; rc == 0 && s; n++) {
        char *slash = strchr(s, '/');
        if (slash)
            *slash = '\0';
        if (n >= nrunners) {
            rc =
                err_setf(err, CA_EUSAGE, "CPU split '%s': more timing lists than the %zu runner(s)",
                         spec, nrunners);
            break;
        }
        rc = cpuplan_parse_list(s, &out->runner[n], err);
        s = slash ? slash + 1 : NULL;
    }
    if (rc == 0 && n != nrunners)
        rc = err_setf(err, CA_EUSAGE, "CPU split '%s': %zu timing list(s) for %zu runner(s)", spec,
                      n, nrunners);
    for (size_t i = 0; rc == 0 && i < nrunners; i++) {
        cpu_set_t x;
        CPU_AND(&x, &out->runner[i], &out->compile);
        if (CPU_COUNT(&x))
            rc = err_setf(err, CA_EUSAGE,
                          "CPU split '%s': runner %zu's cores are also compile cores", spec, i);
        for (size_t j = 0; rc == 0 && j < i; j++) {
            CPU_AND(&x, &out->runner[i], &out->runner[j]);
            if (CPU_COUNT(&x))
                rc = err_setf(err, CA_EUSAGE, "CPU split '%s': runners %zu and %zu share cores",
                              spec, j, i);
        }
        CPU_AND(&x, &out->runner[i], allowed);
        if (rc == 0 && !CPU_EQUAL(&x, &out->runner[i]))
            rc = err_setf(err, CA_EUSAGE,
                          "CPU split '%s': runner %zu's cores are not all in this process's "
                          "affinity",
                          spec, i);
    }
    cpu_set_t x;
    CPU_AND(&x, &out->compile, allowed);
    if (rc == 0 && !CPU_EQUAL(&x, &out->compile))
        rc = err_setf(err, CA_EUSAGE,
                      "CPU split '%s': the compile cores are not all in this process's affinity",
                      spec);
    free(timing);
    if (rc == 0) {
        out->isolated = true;
        snprintf(out->why, sizeof(out->why), "given: %s", spec);
    }
    return rc;
}

int cpuplan_from_host(size_t nrunners, const char *spec, struct cpuplan *out, struct ca_err *err)
{
    if (!spec)
        spec = getenv("CUDA_AGENT_CPU_SPLIT");
    if (!spec || !*spec)
        spec = "auto";
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    if (sched_getaffinity(0, sizeof(allowed), &allowed))
        return err_setf(err, -errno, "sched_getaffinity: %s", strerror(errno));
    int cpus[CPU_SETSIZE], core[CPU_SETSIZE];
    size_t n = 0;
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, &allowed))
            continue;
        char path[128];
        int id = c, pkg = 0;
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/topology/core_id", c);
        if (read_int_file(path, &id))
            id = c;
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/topology/physical_package_id",
                 c);
        if (read_int_file(path, &pkg))
            pkg = 0;
        cpus[n] = c;
        core[n] = pkg * 65536 + id;
        n++;
    }
    if (strcmp(spec, "off") == 0) {
        int rc = cpuplan_split(cpus, core, n, nrunners, 0, out, err);
        if (rc)
            return rc;
        set_all(out, &allowed);
        out->isolated = false;
        snprintf(out->why, sizeof(out->why), "not isolated: CPU split off");
        return 0;
    }
    if (strcmp(spec, "auto") == 0)
        return cpuplan_split(cpus, core, n, nrunners, 0, out, err);
    char *end;
    errno = 0;
    long per = strtol(spec, &end, 10);
    if (end != spec && !*end && !errno) {
        if (per < 1 || per > 64)
            return err_setf(err, CA_EUSAGE, "CPU split '%s': 1 to 64 cores per runner", spec);
        return cpuplan_split(cpus, core, n, nrunners, (int)per, out, err);
    }
    memset(out, 0, sizeof(*out));
    if (nrunners == 0 || nrunners > CPUPLAN_MAX_RUNNERS)
        return err_setf(err, CA_EUSAGE, "a CPU plan has 1 to %d runners, not %zu",
                        CPUPLAN_MAX_RUNNERS, nrunners);
    out->nrunners = nrunners;
    return explicit_split(spec, &allowed, nrunners, out, err);
}

/* ---- compile placement ---- */

static cpu_set_t compile_cpus;
static bool have_compile_cpus;
static int compile_nice;
static int64_t compile_defer_ms;
static _Thread_local int placed; /* 0 not yet, 1 placed, < 0 the error */

void cpuplan_compile_config(const cpu_set_t *cpus, int nice, int64_t defer_ms)
{
    have_compile_cpus = cpus != NULL;
    if (cpus)
        compile_cpus = *cpus;
    compile_nice = nice;
    compile_defer_ms = defer_ms > 0 ? defer_ms : 0;
}

bool cpuplan_thread_unplaced(void)
{
    return (have_compile_cpus || compile_nice) && placed == 0;
}

int cpuplan_place_thread(void)
{
    if (placed)
        return placed < 0 ? placed : 0;
    placed = 1;
    pid_t tid = (pid_t)syscall(SYS_gettid);
    if (have_compile_cpus && sched_setaffinity(tid, sizeof(compile_cpus), &compile_cpus))
        placed = -errno;
    /* Per thread on Linux; never lowered again (that needs CAP_SYS_NICE). */
    if (compile_nice > 0) {
        errno = 0;
        int now = getpriority(PRIO_PROCESS, (id_t)tid);
        if (errno == 0 && now < compile_nice &&
            setpriority(PRIO_PROCESS, (id_t)tid, compile_nice) && placed == 1)
            placed = -errno;
    }
    return placed < 0 ? placed : 0;
}

/* ---- timing windows ---- */

static pthread_mutex_t tw_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t tw_closed = PTHREAD_COND_INITIALIZER;
static bool tw_marks[CPUPLAN_MAX_RUNNERS];
static int tw_open;

void cpuplan_timing_mark(size_t runner, bool on)
{
    if (runner >= CPUPLAN_MAX_RUNNERS)
        return;
    pthread_mutex_lock(&tw_mu);
    if (tw_marks[runner] != on) {
        tw_marks[runner] = on;
        tw_open += on ? 1 : -1;
        if (tw_open == 0)
            pthread_cond_broadcast(&tw_closed);
    }
    pthread_mutex_unlock(&tw_mu);
}

int cpuplan_timing_open(void)
{
    pthread_mutex_lock(&tw_mu);
    int n = tw_open;
    pthread_mutex_unlock(&tw_mu);
    return n;
}

int64_t cpuplan_defer_compile(void)
{
    if (compile_defer_ms <= 0)
        return 0;
    int64_t t0 = ca_now_us(), deadline = t0 + compile_defer_ms * 1000;
    pthread_mutex_lock(&tw_mu);
    while (tw_open > 0) {
        int64_t now = ca_now_us();
        if (now >= deadline)
            break;
        /* The condition variable's clock is CLOCK_REALTIME: wait in short slices of it, the
         * deadline itself is on the monotonic clock. */
        int64_t slice = deadline - now < 50000 ? deadline - now : 50000;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (long)(slice % 1000000) * 1000;
        ts.tv_sec += (time_t)(slice / 1000000) + ts.tv_nsec / 1000000000;
        ts.tv_nsec %= 1000000000;
        pthread_cond_timedwait(&tw_closed, &tw_mu, &ts);
    }
    pthread_mutex_unlock(&tw_mu);
    return (ca_now_us() - t0) / 1000;
}
