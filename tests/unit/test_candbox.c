/*
 * test_candbox.c - the candidate's sandbox (src/eval/candbox.c) and what it
 * added to src/sandbox: extra descriptors for a program, device nodes, a
 * root caller's unprivileged host user, the lockdown filter, the spec and
 * the isolation report. The escapes tried from a real candidate are in
 * tests/py/test_candbox_escape.py.
 */
#include "test.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/buf.h"
#include "eval/candbox.h"
#include "sandbox/sandbox.h"

#define ARGV(...) ((const char *const[]){__VA_ARGS__, NULL})

static void need_sandbox(void)
{
    struct ca_err why = {0};
    if (!sandbox_supported(&why))
        SKIP("userns", "no sandbox here: %s", why.msg);
}

static char *scratch(void)
{
    static char dir[4096];
    snprintf(dir, sizeof(dir), "%s/scratch", test_tmpdir());
    REQUIRE(mkdir(dir, 0777) == 0);
    REQUIRE(chmod(dir, 0777) == 0); /* the sandbox's user may be another one */
    return dir;
}

static size_t read_all(int fd, char *buf, size_t cap)
{
    size_t n = 0;
    for (;;) {
        ssize_t got = read(fd, buf + n, cap - 1 - n);
        if (got <= 0)
            break;
        n += (size_t)got;
    }
    buf[n] = '\0';
    return n;
}

/* Run script in a sandbox with opts and the given extra fds; wait status back. */
static int run_in(struct sandbox_opts *o, const char *script, const int *extra, size_t n)
{
    struct sandbox *sb;
    struct ca_err err = {0};
    REQUIRE(sandbox_start(o, &sb, &err) == 0);
    struct sandbox_cmd c = {.argv = ARGV("/bin/sh", "-c", script),
                            .stdin_fd = -1,
                            .stdout_fd = -1,
                            .stderr_fd = -1,
                            .extra_fds = extra,
                            .n_extra_fds = n};
    int pid, status = -1;
    int rc = sandbox_exec(sb, &c, &pid, &err);
    if (rc)
        printf("  exec: %s\n", err.msg);
    REQUIRE(rc == 0);
    REQUIRE(sandbox_wait(sb, pid, 10000, &status, &err) == 0);
    sandbox_free(sb);
    return status;
}

TEST(extra_fds_reach_the_program_as_3_and_up)
{
    need_sandbox();
    int a[2], b[2];
    REQUIRE(pipe(a) == 0 && pipe(b) == 0);
    for (int i = 0; i < 2; i++) { /* out of the way of 5 and 6 first */
        int *ends[] = {&a[i], &b[i]};
        for (int k = 0; k < 2; k++) {
            int moved = fcntl(*ends[k], F_DUPFD_CLOEXEC, 40);
            REQUIRE(moved >= 40);
            close(*ends[k]);
            *ends[k] = moved;
        }
    }
    /* The sources sit on numbers the program is to get (6 -> 3, 5 -> 4, and the sandbox's
     * own descriptors in between): the placement must not clobber one with another. */
    REQUIRE(dup2(a[1], 6) == 6 && dup2(b[1], 5) == 5);
    close(a[1]);
    close(b[1]);
    struct sandbox_opts o = {.workspace = scratch()};
    int extra[] = {6, 5};
    int st = run_in(&o, "echo three >&3; echo four >&4; test ! -e /proc/self/fd/5", extra, 2);
    close(5);
    close(6);
    char got[256];
    read_all(a[0], got, sizeof(got));
    CHECK_STR(got, "three\n");
    read_all(b[0], got, sizeof(got));
    CHECK_STR(got, "four\n");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0); /* nothing else is open beyond them */
}

TEST(too_many_extra_fds_are_refused)
{
    need_sandbox();
    struct sandbox_opts o = {.workspace = scratch()};
    struct sandbox *sb;
    struct ca_err err = {0};
    REQUIRE(sandbox_start(&o, &sb, &err) == 0);
    int extra[SANDBOX_MAX_EXTRA_FDS + 1] = {0, 0, 0, 0, 0};
    struct sandbox_cmd c = {.argv = ARGV("/bin/true"),
                            .stdin_fd = -1,
                            .stdout_fd = -1,
                            .stderr_fd = -1,
                            .extra_fds = extra,
                            .n_extra_fds = SANDBOX_MAX_EXTRA_FDS + 1};
    int pid;
    CHECK_EQ(sandbox_exec(sb, &c, &pid, &err), CA_EUSAGE);
    CHECK(strstr(err.msg, "extra fds") != NULL);
    sandbox_free(sb);
}

TEST(devices_are_checked_and_bound)
{
    need_sandbox();
    static const char *const bad[][2] = {
        {"/etc/passwd", "not a node directly under /dev"},
        {"/dev/../etc/passwd", "not a node directly under /dev"},
        {"/dev/shm", "not a node directly under /dev"},
        {"/dev/nope-not-here", "No such file"},
        {"/dev", "not a node directly under /dev"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *devs[] = {bad[i][0], NULL};
        struct sandbox_opts o = {.workspace = scratch(), .devices = devs};
        struct sandbox *sb = NULL;
        struct ca_err err = {0};
        CHECK(sandbox_start(&o, &sb, &err) != 0);
        if (!strstr(err.msg, bad[i][1]))
            test__fail(__FILE__, __LINE__, "%s: %s", bad[i][0], err.msg);
        sandbox_free(sb);
        char dir[4200];
        snprintf(dir, sizeof(dir), "%s/scratch", test_tmpdir());
        rmdir(dir);
    }
    struct stat st;
    if (stat("/dev/ptmx", &st) != 0 || !S_ISCHR(st.st_mode))
        SKIP("userns", "no /dev/ptmx character device to bind on this host");
    const char *devs[] = {"/dev/ptmx", "/dev/null", "/dev/ptmx", NULL}; /* repeats are fine */
    struct sandbox_opts o = {.workspace = scratch(), .devices = devs};
    int status =
        run_in(&o, "test -c /dev/ptmx && test -c /dev/null && ! test -e /dev/sda", NULL, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST(a_root_caller_runs_the_sandbox_as_another_user)
{
    need_sandbox();
    if (geteuid() != 0)
        SKIP("root", "mapping another host user needs root");
    char *ws = scratch();
    /* A file in a directory only root may enter, bound read-only: still readable inside
     * (the bind is made before the ids change), though the user could not reach it. */
    char secret_dir[4200], file[4300];
    snprintf(secret_dir, sizeof(secret_dir), "%s/private", test_tmpdir());
    REQUIRE(mkdir(secret_dir, 0700) == 0);
    snprintf(file, sizeof(file), "%s/lib.txt", secret_dir);
    FILE *f = fopen(file, "w");
    REQUIRE(f);
    fputs("library\n", f);
    fclose(f);
    REQUIRE(chmod(file, 0644) == 0);
    const char *ro[] = {file, NULL};
    struct sandbox_opts o = {.workspace = ws,
                             .extra_ro_binds = ro,
                             .set_outer_ids = true,
                             .outer_uid = 61998,
                             .outer_gid = 61998};
    char script[8800];
    snprintf(script, sizeof(script),
             "test \"$(id -u):$(id -g)\" = 0:0 && touch /workspace/made && grep -q library %s "
             "&& test -z \"$(id -G | tr -d 0)\"",
             file);
    int status = run_in(&o, script, NULL, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    char made[4200];
    snprintf(made, sizeof(made), "%s/made", ws);
    struct stat st;
    REQUIRE(stat(made, &st) == 0);
    CHECK_EQ(st.st_uid, 61998); /* on the host: the sandbox's own user, not root */
    CHECK_EQ(st.st_gid, 61998);
}

/* In a forked child: install the lockdown filter, then try each thing; a byte per try. */
static void *thread_fn(void *arg)
{
    return arg;
}

TEST(lockdown_filter_refuses_processes_programs_and_sockets)
{
    struct buf bpf;
    buf_init(&bpf, 1 << 20);
    struct ca_err err = {0};
    REQUIRE(sandbox_lockdown_bpf(&bpf, &err) == 0);
    REQUIRE(bpf.len > 0 && bpf.len % sizeof(struct sock_filter) == 0);
    int p[2];
    REQUIRE(pipe(p) == 0);
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        close(p[0]);
        struct sock_fprog prog = {.len = (unsigned short)(bpf.len / sizeof(struct sock_filter)),
                                  .filter = (struct sock_filter *)bpf.data};
        char r[6] = {'-', '-', '-', '-', '-', '-'};
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
            syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog) == 0)
            r[0] = 'i';
        pid_t f = fork();
        if (f == 0)
            _exit(0);
        r[1] = f < 0 && errno == EPERM ? 'F' : 'f';
        execl("/bin/true", "true", (char *)NULL);
        r[2] = errno == EPERM ? 'E' : 'e';
        int s = socket(AF_UNIX, SOCK_STREAM, 0);
        r[3] = s < 0 && errno == EPERM ? 'S' : 's';
        pthread_t t;
        r[4] = pthread_create(&t, NULL, thread_fn, NULL) == 0 && pthread_join(t, NULL) == 0 ? 'T'
                                                                                            : 't';
        r[5] = getpid() > 0 ? 'G' : 'g'; /* ordinary calls still work */
        if (write(p[1], r, sizeof(r)) != (ssize_t)sizeof(r))
            _exit(2);
        _exit(0);
    }
    close(p[1]);
    char got[16];
    size_t n = read_all(p[0], got, sizeof(got));
    close(p[0]);
    int status;
    REQUIRE(waitpid(child, &status, 0) == child);
    CHECK_EQ(n, 6);
    /* installed; fork, exec and socket refused with EPERM; threads and the rest work */
    CHECK_STR(got, "iFESTG");
    buf_release(&bpf);
}

TEST(spec_parse_refuses_bad_specs)
{
    static const char *const bad[][2] = {
        {"", "sandbox spec"},
        {"[]", "not a JSON object"},
        {"{}", "scratch"},
        {"{\"scratch\": 3}", "scratch"},
        {"{\"scratch\": \"/s\", \"ro\": [\"relative\"]}", "absolute"},
        {"{\"scratch\": \"/s\", \"fds\": [2]}", ">= 3"},
        {"{\"scratch\": \"/s\", \"fds\": [3, 4, 5, 6]}", "at most 3"},
        {"{\"scratch\": \"/s\", \"fds\": [3], \"report_fd\": 4}", "one of \"fds\""},
        {"{\"scratch\": \"/s\", \"env\": [\"NOEQUALS\"]}", "K=V"},
        {"{\"scratch\": \"/s\", \"memory_bytes\": -5}", "negative"},
        {"{\"scratch\": \"/s\", \"uid\": 99999999999}", "out of range"},
        {"{\"scratch\": \"/s\", \"gpu\": \"yes\"}", "gpu"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct candbox_spec s;
        json_t *own = NULL;
        struct ca_err err = {0};
        int rc = candbox_spec_parse(bad[i][0], &s, &own, &err);
        CHECK(rc != 0);
        CHECK(own == NULL);
        if (!strstr(err.msg, bad[i][1]))
            test__fail(__FILE__, __LINE__, "spec %s: message %s", bad[i][0], err.msg);
    }
}

TEST(spec_parse_reads_every_field)
{
    struct candbox_spec s;
    json_t *own = NULL;
    struct ca_err err = {0};
    REQUIRE(candbox_spec_parse("{\"scratch\": \"/s\", \"ro\": [\"/a\", \"/b\"], \"gpu\": true, "
                               "\"fds\": [7, 9], \"report_fd\": 9, \"lockdown\": true, "
                               "\"memory_bytes\": 1024, \"tmp_bytes\": 2048, \"cpu_seconds\": 30, "
                               "\"uid\": 5, \"gid\": 6, \"cwd\": \"/workspace\", "
                               "\"env\": [\"A=1\"]}",
                               &s, &own, &err) == 0);
    CHECK_STR(s.scratch, "/s");
    CHECK_EQ(s.nro, 2);
    CHECK_STR(s.ro[1], "/b");
    CHECK(s.gpu && s.lockdown);
    CHECK_EQ(s.nfds, 2);
    CHECK_EQ(s.fds[1], 9);
    CHECK_EQ(s.report_fd, 9);
    CHECK_EQ(s.memory_bytes, 1024);
    CHECK_EQ(s.tmp_bytes, 2048);
    CHECK_EQ(s.cpu_seconds, 30);
    CHECK_EQ(s.uid, 5);
    CHECK_EQ(s.gid, 6);
    CHECK_STR(s.cwd, "/workspace");
    CHECK_EQ(json_array_size(s.env), 1);
    json_decref(own);
}

/* candbox_run in a child (it sets PDEATHSIG and blocks signals): status in the exit code. */
static int candbox_in_child(const char *spec_text, const char *script, int report_w)
{
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        struct candbox_spec s;
        json_t *own = NULL;
        struct ca_err err = {0};
        if (candbox_spec_parse(spec_text, &s, &own, &err))
            _exit(100);
        int status = 0;
        if (candbox_run(&s, ARGV("/bin/sh", "-c", script), &status, &err)) {
            fprintf(stderr, "candbox_run: %s\n", err.msg);
            _exit(101);
        }
        _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    }
    close(report_w);
    int status;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(candbox_reports_its_isolation_first_and_forwards_the_status)
{
    need_sandbox();
    int p[2];
    REQUIRE(pipe(p) == 0);
    REQUIRE(dup2(p[1], 9) == 9);
    close(p[1]);
    char spec[4600];
    snprintf(spec, sizeof(spec),
             "{\"scratch\": \"%s\", \"fds\": [9], \"report_fd\": 9, \"lockdown\": true}",
             scratch());
    /* The program sees the report pipe as fd 3 and the lockdown filter as fd 4. */
    int code = candbox_in_child(spec,
                                "echo '{\"from\":\"program\"}' >&3; test -s /proc/self/fd/4;"
                                " exit 7",
                                9);
    CHECK_EQ(code, 7);
    char got[8192];
    read_all(p[0], got, sizeof(got));
    close(p[0]);
    char *nl = strchr(got, '\n');
    REQUIRE(nl);
    *nl = '\0';
    json_error_t je;
    json_t *first = json_loads(got, 0, &je);
    REQUIRE(first);
    CHECK_STR(json_string_value(json_object_get(first, "type")), "isolation");
    CHECK(json_is_true(json_object_get(first, "ok")));
    CHECK(json_is_true(json_object_get(first, "sandbox")));
    CHECK_EQ(json_array_size(json_object_get(first, "namespaces")), 7);
    CHECK(json_object_get(first, "memory_cgroup") != NULL);
    if (geteuid() == 0)
        CHECK_EQ(json_integer_value(json_object_get(first, "host_uid")), CANDBOX_DEFAULT_UID);
    json_decref(first);
    CHECK_STR(nl + 1, "{\"from\":\"program\"}\n");
}

TEST(candbox_reports_a_sandbox_it_cannot_build)
{
    need_sandbox();
    int p[2];
    REQUIRE(pipe(p) == 0);
    REQUIRE(dup2(p[1], 9) == 9);
    close(p[1]);
    const char *spec = "{\"scratch\": \"/nonexistent/scratch\", \"fds\": [9], \"report_fd\": 9}";
    CHECK_EQ(candbox_in_child(spec, "exit 0", 9), 101);
    char got[8192];
    read_all(p[0], got, sizeof(got));
    close(p[0]);
    CHECK(strstr(got, "\"type\":\"isolation\",\"ok\":false") != NULL);
    CHECK(strstr(got, "not a directory") != NULL);
}
