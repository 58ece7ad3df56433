/*
 * main.c - runner linked into every unit-test binary. Each case runs in a
 * forked child (own scratch dir, alarm-based timeout) so that one crashing
 * or hanging case cannot take the others down. A case has three outcomes:
 * "ok", "FAIL" and "skip" (with the reason SKIP gave); the closing line is
 * "N passed, N failed, N skipped", which tests/run.sh counts.
 *
 * A skip travels as exit status TEST_EXIT_SKIP plus a flag and the reason in
 * a shared anonymous page the parent reads after the child is gone: the
 * status alone could come from a stray exit(77), and a skip without the flag
 * is a failure. The parent makes and removes the scratch dir, so it goes
 * away however the case ended.
 */
#include "test.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define TEST_EXIT_SKIP 77

enum outcome { OUTCOME_PASS, OUTCOME_FAIL, OUTCOME_SKIP };

struct test_case {
    const char *name;
    test_fn fn;
    const char *file;
};

/* Written by the case's process, read by the runner after it exits. */
struct skip_note {
    int skipped;
    char reason[480];
};

static struct test_case cases[1024];
static size_t ncases;
static int case_failures;
static pid_t case_pid;
static char tmpdir[4096];
static struct skip_note *note; /* shared with forked cases; NULL in process */
static const struct test_case *running;

void test__register(const char *name, test_fn fn, const char *file)
{
    if (ncases == sizeof(cases) / sizeof(cases[0])) {
        fprintf(stderr, "too many test cases\n");
        abort();
    }
    cases[ncases++] = (struct test_case){name, fn, file};
}

void test__fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "  %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    case_failures++;
}

void test__abort_case(void)
{
    fflush(NULL);
    _exit(1);
}

/* Is need one of the comma-separated words of $TEST_REQUIRE? */
static bool required(const char *need)
{
    const char *list = getenv("TEST_REQUIRE");
    size_t n = strlen(need);
    for (const char *p = list; p && *p;) {
        size_t len = strcspn(p, ",");
        if (len == n && strncmp(p, need, n) == 0)
            return true;
        p += len;
        p += *p == ',';
    }
    return false;
}

void test__skip(const char *file, int line, const char *need, const char *fmt, ...)
{
    char reason[sizeof(note->reason)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    if (getpid() != case_pid) {
        /* A child the case forked: its exit status is the case's to judge. */
        test__fail(file, line, "SKIP (%s) in a process the case forked: %s", need, reason);
        test__abort_case();
    }
    if (case_failures) {
        test__fail(file, line, "SKIP (%s) after a failure, which stands: %s", need, reason);
        test__abort_case();
    }
    if (required(need)) {
        test__fail(file, line,
                   "skipped for want of \"%s\", which TEST_REQUIRE says this host has: %s", need,
                   reason);
        test__abort_case();
    }
    if (note) {
        note->skipped = 1;
        snprintf(note->reason, sizeof(note->reason), "%s", reason);
    } else {
        printf("skip %s: %s\n", running->name, reason);
    }
    fflush(NULL);
    _exit(TEST_EXIT_SKIP); /* not exit: what the case holds now is no leak */
}

const char *test_tmpdir(void)
{
    return tmpdir;
}

const char *test_repo(void)
{
    const char *r = getenv("CA_REPO");
    return r && *r ? r : ".";
}

static int make_tmpdir(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof(tmpdir), "%s/ca-test-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        tmpdir[0] = '\0';
        return -1;
    }
    return 0;
}

static void rm_tmpdir(void)
{
    if (!tmpdir[0])
        return;
    pid_t pid = fork();
    if (pid == 0) {
        execlp("rm", "rm", "-rf", tmpdir, (char *)NULL);
        _exit(127);
    }
    if (pid > 0)
        waitpid(pid, NULL, 0);
    tmpdir[0] = '\0';
}

/* Run c in this process; returns its exit status (SKIP exits). */
static int run_case(const struct test_case *c)
{
    case_pid = getpid();
    case_failures = 0;
    running = c;
    c->fn();
    fflush(NULL);
    return case_failures ? 1 : 0;
}

static enum outcome run_forked(const struct test_case *c, int timeout)
{
    if (make_tmpdir() != 0)
        return OUTCOME_FAIL;
    *note = (struct skip_note){0};
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        rm_tmpdir();
        return OUTCOME_FAIL;
    }
    if (pid == 0) {
        setpgid(0, 0);
        alarm((unsigned)timeout);
        exit(run_case(c)); /* not _exit: LeakSanitizer checks at exit */
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    kill(-pid, SIGKILL); /* leftovers of the case */
    rm_tmpdir();
    if (WIFSIGNALED(st)) {
        if (WTERMSIG(st) == SIGALRM)
            fprintf(stderr, "  timed out after %d s\n", timeout);
        else
            fprintf(stderr, "  killed by signal %d (%s)\n", WTERMSIG(st), strsignal(WTERMSIG(st)));
        return OUTCOME_FAIL;
    }
    if (WEXITSTATUS(st) == TEST_EXIT_SKIP && note->skipped)
        return OUTCOME_SKIP;
    if (WEXITSTATUS(st) == TEST_EXIT_SKIP)
        fprintf(stderr, "  exited with %d without SKIP\n", TEST_EXIT_SKIP);
    return WEXITSTATUS(st) ? OUTCOME_FAIL : OUTCOME_PASS;
}

static void report(enum outcome o, const char *name)
{
    if (o == OUTCOME_SKIP)
        printf("skip %s: %s\n", name, note->reason);
    else
        printf("%s %s\n", o == OUTCOME_PASS ? "ok" : "FAIL", name);
    fflush(stdout);
}

/* Named cases, one after the other in this process (for gdb); a SKIP or
 * REQUIRE ends the run there, with its status. */
static int run_named(int argc, char **argv)
{
    int rc = 0;
    for (int a = 1; a < argc; a++) {
        size_t i;
        for (i = 0; i < ncases && strcmp(cases[i].name, argv[a]) != 0; i++)
            ;
        if (i == ncases) {
            fprintf(stderr, "no such case: %s\n", argv[a]);
            return 2;
        }
        if (make_tmpdir() != 0)
            return 1;
        int one = run_case(&cases[i]);
        rm_tmpdir();
        report(one ? OUTCOME_FAIL : OUTCOME_PASS, cases[i].name);
        rc |= one;
    }
    return rc;
}

int main(int argc, char **argv)
{
    int timeout = 20;
    const char *t = getenv("TEST_TIMEOUT");
    if (t && *t) {
        char *end;
        long v = strtol(t, &end, 10);
        if (*end || v <= 0 || v > 86400) {
            fprintf(stderr, "TEST_TIMEOUT=%s: want whole seconds, 1 to 86400\n", t);
            return 2;
        }
        timeout = (int)v;
    }
    if (argc > 1 && strcmp(argv[1], "--list") == 0) {
        for (size_t i = 0; i < ncases; i++)
            printf("%s\n", cases[i].name);
        return 0;
    }
    if (argc > 1)
        return run_named(argc, argv);
    void *page =
        mmap(NULL, sizeof(*note), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    note = page;
    int passed = 0, failed = 0, skipped = 0;
    for (size_t i = 0; i < ncases; i++) {
        enum outcome o = run_forked(&cases[i], timeout);
        report(o, cases[i].name);
        passed += o == OUTCOME_PASS;
        failed += o == OUTCOME_FAIL;
        skipped += o == OUTCOME_SKIP;
    }
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}
