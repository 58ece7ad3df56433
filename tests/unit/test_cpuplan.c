/*
 * test_cpuplan.c - the split of a host's cores between GPU runners' timing and the compile
 * pool (made-up hosts), CPU lists, explicit splits against this process's affinity, thread
 * placement as seen by the thread and by a child it starts (/proc/<pid>/status), and the
 * bounded wait of a compiler run behind an open timing window.
 */
#include "test.h"

#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/proc.h"
#include "core/util.h"
#include "eval/cpuplan.h"

static char *list_of(const cpu_set_t *set)
{
    static char buf[1024];
    cpuplan_format(set, buf, sizeof(buf));
    return buf;
}

/* A host of n CPUs; with smt, CPU i and i + n/2 are siblings of one core. */
static void host(int n, bool smt, int *cpus, int *core)
{
    for (int i = 0; i < n; i++) {
        cpus[i] = i;
        core[i] = smt ? i % (n / 2) : i;
    }
}

TEST(split_16_cores_one_runner_reserves_the_top_two)
{
    int cpus[16], core[16];
    host(16, false, cpus, core);
    struct cpuplan p;
    struct ca_err err = {0};
    REQUIRE(cpuplan_split(cpus, core, 16, 1, 0, &p, &err) == 0);
    CHECK(p.isolated);
    CHECK_STR(list_of(&p.runner[0]), "14-15");
    CHECK_STR(list_of(&p.compile), "0-13");
    CHECK_CONTAINS(p.why, "2 physical core(s) per runner");
}

TEST(split_keeps_hyperthread_siblings_together)
{
    int cpus[16], core[16];
    host(16, true, cpus, core); /* 8 cores: {0,8}, {1,9}, ... {7,15} */
    struct cpuplan p;
    struct ca_err err = {0};
    REQUIRE(cpuplan_split(cpus, core, 16, 1, 0, &p, &err) == 0);
    CHECK(p.isolated);
    CHECK_STR(list_of(&p.runner[0]), "6-7,14-15");
    CHECK_STR(list_of(&p.compile), "0-5,8-13");
}

TEST(split_many_runners_one_core_each_and_too_few_cores)
{
    int cpus[16], core[16];
    host(16, false, cpus, core);
    struct cpuplan p;
    struct ca_err err = {0};
    REQUIRE(cpuplan_split(cpus, core, 16, 4, 0, &p, &err) == 0); /* 16 < 6 * 4: one each */
    CHECK(p.isolated);
    CHECK_STR(list_of(&p.runner[0]), "15");
    CHECK_STR(list_of(&p.runner[3]), "12");
    CHECK_STR(list_of(&p.compile), "0-11");

    REQUIRE(cpuplan_split(cpus, core, 8, 8, 0, &p, &err) == 0); /* 8 cores, 8 runners */
    CHECK(!p.isolated);
    CHECK_STR(list_of(&p.runner[5]), "0-7");
    CHECK_STR(list_of(&p.compile), "0-7");
    CHECK_CONTAINS(p.why, "not isolated");

    REQUIRE(cpuplan_split(cpus, core, 2, 1, 0, &p, &err) == 0); /* the 2-core VM */
    CHECK(p.isolated);
    CHECK_STR(list_of(&p.runner[0]), "1");
    CHECK_STR(list_of(&p.compile), "0");
}

TEST(split_with_cores_per_runner_given)
{
    int cpus[4], core[4];
    host(4, false, cpus, core);
    struct cpuplan p;
    struct ca_err err = {0};
    REQUIRE(cpuplan_split(cpus, core, 4, 1, 3, &p, &err) == 0);
    CHECK(p.isolated);
    CHECK_STR(list_of(&p.runner[0]), "1-3");
    CHECK_STR(list_of(&p.compile), "0");
    REQUIRE(cpuplan_split(cpus, core, 4, 1, 4, &p, &err) == 0); /* nothing left to compile */
    CHECK(!p.isolated);
    CHECK_EQ(cpuplan_split(cpus, core, 0, 1, 0, &p, &err), CA_EUSAGE);
    CHECK_EQ(cpuplan_split(cpus, core, 4, 0, 0, &p, &err), CA_EUSAGE);
}

TEST(cpu_lists_parse_and_format)
{
    cpu_set_t s;
    struct ca_err err = {0};
    REQUIRE(cpuplan_parse_list("0-3,6,8-9", &s, &err) == 0);
    CHECK_EQ(CPU_COUNT(&s), 7);
    CHECK_STR(list_of(&s), "0-3,6,8-9");
    CHECK_EQ(cpuplan_parse_list("3-1", &s, &err), CA_EUSAGE);
    CHECK_EQ(cpuplan_parse_list("1,x", &s, &err), CA_EUSAGE);
    CHECK_EQ(cpuplan_parse_list("", &s, &err), CA_EUSAGE);
    CHECK_CONTAINS(err.msg, "empty");
}

/* This process's CPUs, at least two, or the case is skipped. */
static int two_cpus(int *lo, int *hi)
{
    cpu_set_t s;
    REQUIRE(sched_getaffinity(0, sizeof(s), &s) == 0);
    *lo = *hi = -1;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &s)) {
            if (*lo < 0)
                *lo = c;
            *hi = c;
        }
    if (*lo == *hi)
        SKIP("cpus", "this process may run on one CPU only");
    return CPU_COUNT(&s);
}

TEST(explicit_and_off_splits_from_the_host)
{
    int lo, hi;
    two_cpus(&lo, &hi);
    struct cpuplan p;
    struct ca_err err = {0};
    char *spec = xstrfmt("%d:%d", hi, lo);
    REQUIRE(cpuplan_from_host(1, spec, &p, &err) == 0);
    CHECK(p.isolated);
    char want[16];
    snprintf(want, sizeof(want), "%d", hi);
    CHECK_STR(list_of(&p.runner[0]), want);
    free(spec);

    REQUIRE(cpuplan_from_host(2, "off", &p, &err) == 0);
    CHECK(!p.isolated);
    CHECK(CPU_EQUAL(&p.runner[1], &p.compile));

    spec = xstrfmt("%d:%d", lo, lo); /* timing on a compile core */
    CHECK_EQ(cpuplan_from_host(1, spec, &p, &err), CA_EUSAGE);
    CHECK_CONTAINS(err.msg, "also compile cores");
    free(spec);
    spec = xstrfmt("%d/%d:%d", hi, hi, lo); /* two lists for one runner */
    CHECK_EQ(cpuplan_from_host(1, spec, &p, &err), CA_EUSAGE);
    free(spec);
    spec = xstrfmt("%d:%d", CPU_SETSIZE - 1, lo); /* not in the affinity */
    CHECK_EQ(cpuplan_from_host(1, spec, &p, &err), CA_EUSAGE);
    CHECK_CONTAINS(err.msg, "affinity");
    free(spec);
    CHECK_EQ(cpuplan_from_host(1, "many", &p, &err), CA_EUSAGE);
    setenv("CUDA_AGENT_CPU_SPLIT", "off", 1);
    REQUIRE(cpuplan_from_host(1, NULL, &p, &err) == 0);
    CHECK(!p.isolated);
    json_t *j = cpuplan_to_json(&p);
    CHECK(json_is_false(json_object_get(j, "isolated")));
    CHECK(json_array_size(json_object_get(j, "runners")) == 1);
    json_decref(j);
}

struct seen {
    char allowed[512], child[512];
    int nice;
};

static void *placed_thread(void *arg)
{
    struct seen *s = arg;
    CHECK(cpuplan_thread_unplaced());
    CHECK_EQ(cpuplan_place_thread(), 0);
    CHECK(!cpuplan_thread_unplaced());
    s->nice = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
    FILE *f = fopen("/proc/thread-self/status", "r");
    char line[512];
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, "Cpus_allowed_list:", 18) == 0)
            snprintf(s->allowed, sizeof(s->allowed), "%s", line + 19);
    if (f)
        fclose(f);
    /* A child it starts: what every compiler of the pool inherits. */
    const char *argv[] = {
        "sh", "-c", "grep Cpus_allowed_list /proc/self/status; cut -d' ' -f19 /proc/self/stat",
        NULL};
    struct proc_opts po = {.argv = argv, .timeout_ms = 10000};
    struct proc_result r;
    proc_result_init(&r);
    struct ca_err err = {0};
    if (proc_run(&po, &r, &err) == 0)
        snprintf(s->child, sizeof(s->child), "%s", r.out.data);
    proc_result_release(&r);
    return NULL;
}

TEST(a_placed_thread_and_its_children_run_on_the_compile_cores_niced)
{
    int lo, hi;
    two_cpus(&lo, &hi);
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(lo, &one);
    CHECK(!cpuplan_thread_unplaced()); /* nothing configured yet */
    cpuplan_compile_config(&one, 7, 0);
    struct seen s = {{0}};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, placed_thread, &s) == 0);
    pthread_join(th, NULL);
    char want[32];
    snprintf(want, sizeof(want), "%d\n", lo);
    CHECK_STR(s.allowed, want);
    CHECK_EQ(s.nice, 7);
    char *child = xstrfmt("Cpus_allowed_list:\t%d\n7\n", lo);
    CHECK_STR(s.child, child);
    free(child);
    /* The thread that configured it is untouched: it still has both CPUs. */
    cpu_set_t mine;
    REQUIRE(sched_getaffinity(0, sizeof(mine), &mine) == 0);
    CHECK(CPU_ISSET(hi, &mine));
    CHECK_EQ(getpriority(PRIO_PROCESS, 0), 0);
}

static void *close_later(void *arg)
{
    (void)arg;
    usleep(60 * 1000);
    cpuplan_timing_mark(0, false);
    return NULL;
}

TEST(compiler_runs_wait_for_an_open_timing_window_bounded)
{
    cpuplan_compile_config(NULL, 0, 300);
    CHECK_EQ(cpuplan_defer_compile(), 0); /* nothing open */
    cpuplan_timing_mark(0, true);
    cpuplan_timing_mark(0, true);                   /* idempotent */
    cpuplan_timing_mark(CPUPLAN_MAX_RUNNERS, true); /* out of range: ignored */
    CHECK_EQ(cpuplan_timing_open(), 1);
    int64_t t0 = ca_now_us();
    int64_t waited = cpuplan_defer_compile(); /* never closed: the bound */
    int64_t took = (ca_now_us() - t0) / 1000;
    CHECK(waited >= 290 && took < 1000);
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, close_later, NULL) == 0);
    t0 = ca_now_us();
    waited = cpuplan_defer_compile(); /* closed after ~60 ms: goes at once */
    took = (ca_now_us() - t0) / 1000;
    pthread_join(th, NULL);
    CHECK(waited >= 40 && took < 250);
    CHECK_EQ(cpuplan_timing_open(), 0);
    cpuplan_timing_mark(0, true);
    cpuplan_compile_config(NULL, 0, 0); /* defer 0: never waits */
    CHECK_EQ(cpuplan_defer_compile(), 0);
}
