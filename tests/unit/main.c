/*
 * main.c - runner linked into every unit-test binary. Each case runs in a
 * forked child (own scratch dir, alarm-based timeout) so that one crashing
 * or hanging case cannot take the others down; the parent reports
 * "ok"/"FAIL" per case and a closing "N passed, N failed" line.
 */
#include "test.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <unistd.h>

struct test_case {
    const char *name;
    test_fn fn;
    const char *file;
};

static struct test_case cases[1024];
static size_t ncases;
static int case_failures;
static char tmpdir[4096];

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

const char *test_tmpdir(void)
{
    return tmpdir;
}

const char *test_repo(void)
{
    const char *r = getenv("CA_REPO");
    return r && *r ? r : ".";
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
}

static int run_case(const struct test_case *c)
{
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof(tmpdir), "%s/ca-test-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    case_failures = 0;
    c->fn();
    fflush(NULL);
    return case_failures ? 1 : 0;
}

static int run_forked(const struct test_case *c, int timeout)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        setpgid(0, 0);
        alarm((unsigned)timeout);
        int rc = run_case(c);
        rm_tmpdir();
        exit(rc); /* not _exit: LeakSanitizer checks at exit */
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    kill(-pid, SIGKILL); /* leftovers of the case */
    if (WIFSIGNALED(st)) {
        if (WTERMSIG(st) == SIGALRM)
            fprintf(stderr, "  timed out after %d s\n", timeout);
        else
            fprintf(stderr, "  killed by signal %d (%s)\n", WTERMSIG(st), strsignal(WTERMSIG(st)));
        return 1;
    }
    return WEXITSTATUS(st);
}

int main(int argc, char **argv)
{
    int timeout = 20;
    const char *t = getenv("TEST_TIMEOUT");
    if (t && *t)
        timeout = (int)strtol(t, NULL, 10);
    if (argc > 1 && strcmp(argv[1], "--list") == 0) {
        for (size_t i = 0; i < ncases; i++)
            printf("%s\n", cases[i].name);
        return 0;
    }
    if (argc > 1) {
        int rc = 0;
        for (int a = 1; a < argc; a++) {
            size_t i;
            for (i = 0; i < ncases && strcmp(cases[i].name, argv[a]) != 0; i++)
                ;
            if (i == ncases) {
                fprintf(stderr, "no such case: %s\n", argv[a]);
                return 2;
            }
            rc |= run_case(&cases[i]);
            rm_tmpdir();
            printf("%s %s\n", rc ? "FAIL" : "ok", cases[i].name);
        }
        return rc;
    }
    int passed = 0, failed = 0;
    for (size_t i = 0; i < ncases; i++) {
        int rc = run_forked(&cases[i], timeout);
        printf("%s %s\n", rc ? "FAIL" : "ok", cases[i].name);
        fflush(stdout);
        if (rc)
            failed++;
        else
            passed++;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
