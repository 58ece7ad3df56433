/*
 * test_sandbox.c - the sandbox's walls: the support probe, the options it refuses, the
 * workspace and its read-only paths, the read-only root and system dirs, the control dir and
 * extra read-only binds, namespaces (pid, hostname, network), the /tmp cap and rlimits (a fork
 * bomb included), dropped privileges and a threaded program under the seccomp filter,
 * unprivileged users, the legacy mount path, start time. Running programs in a sandbox
 * (output, timeouts, process trees, events, tear-down, insecure mode) is test_sandbox_run.c;
 * the escape attempts live in test_sandbox_escape.c.
 *
 * Every case needs user namespaces; where the host has none, each case
 * skips with the reason (TEST_REQUIRE=userns makes that a failure).
 */
#include "sandbox_fixture.h"

#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <sys/prctl.h>

#include "sandbox/sandbox_internal.h"

TEST(supported)
{
    struct ca_err why = {0};
    bool ok = sandbox_supported(&why);
    if (!ok)
        printf("  sandbox not supported here: %s\n", why.msg);
    else
        CHECK_EQ(why.code, 0);
    /* Cached: same answer again. */
    CHECK(sandbox_supported(NULL) == ok);
}

TEST(workspace_is_writable)
{
    need_sandbox();
    struct sandbox_opts o = make_ws();
    struct sandbox_run_result r;
    CHECK_EQ(sh(&o, "cd /workspace && echo kernel > kernels/a.cu && mkdir -p new/dir && pwd", &r),
             0);
    CHECK_EQ(exit_code(&r), 0);
    CHECK_STR(r.out.data, "/workspace\n");
    char p[4200];
    snprintf(p, sizeof(p), "%s/kernels/a.cu", ws);
    CHECK_STR(read_file(p), "kernel\n");
    snprintf(p, sizeof(p), "%s/new/dir", ws);
    struct stat st;
    CHECK(stat(p, &st) == 0 && S_ISDIR(st.st_mode));
    sandbox_run_result_release(&r);
}

TEST(read_only_paths_refuse_writes)
{
    need_sandbox();
    struct sandbox_opts o = make_ws();
    struct sandbox_run_result r;
    CHECK_EQ(sh(&o,
                "cd /workspace; echo x > MANIFEST; echo a=$?; echo x > tools/new; echo b=$?; "
                "rm -f MANIFEST; echo c=$?; mv tools tools2; echo d=$?; chmod 777 MANIFEST; "
                "echo e=$?; cat MANIFEST",
                &r),
             0);
    CHECK_CONTAINS(r.out.data, "a=1\nb=1\nc=1\nd=1\ne=1\n");
    CHECK_CONTAINS(r.out.data, "read_only");
    CHECK_CONTAINS(r.err.data, "Read-only file system");
    char p[4200];
    snprintf(p, sizeof(p), "%s/MANIFEST", ws);
    CHECK_CONTAINS(read_file(p), "read_only");
    snprintf(p, sizeof(p), "%s/tools/new", ws);
    CHECK(access(p, F_OK) != 0);
    sandbox_run_result_release(&r);
}

TEST(read_only_path_that_is_a_symlink_is_refused)
{
    need_sandbox();
    struct sandbox_opts o = make_ws();
    char p[4200];
    snprintf(p, sizeof(p), "%s/MANIFEST", ws);
    unlink(p);
    REQUIRE(symlink("/etc/passwd", p) == 0);
    struct sandbox *sb = NULL;
    struct ca_err err = {0};
    CHECK_EQ(sandbox_start(&o, &sb, &err), CA_EESCAPE);
    CHECK_CONTAINS(err.msg, "MANIFEST");
    CHECK_CONTAINS(err.msg, "symlink");
    CHECK(sb == NULL);
}

TEST(bad_options_are_refused)
{
    need_sandbox();
    struct sandbox_opts o = make_ws();
    struct sandbox *sb = NULL;
    struct ca_err err = {0};

    const char *const missing[] = {"nope", NULL};
    o.ro_paths = missing;
    CHECK(sandbox_start(&o, &sb, &err) < 0);
    CHECK_CONTAINS(err.msg, "read-only path 'nope'");
    CHECK_CONTAINS(err.msg, "does not exist");

    const char *const dotdot[] = {"../etc", NULL};
    o.ro_paths = dotdot;
    CHECK_EQ(sandbox_start(&o, &sb, &err), CA_EESCAPE);
    o.ro_paths = ro_paths;

    o.hostname = "bad host";
    CHECK_EQ(sandbox_start(&o, &sb, &err), CA_EUSAGE);
    CHECK_CONTAINS(err.msg, "hostname");
    o.hostname = NULL;

    o.control_dir = "/nonexistent/dir";
    CHECK_EQ(sandbox_start(&o, &sb, &err), -ENOENT);
    CHECK_CONTAINS(err.msg, "control directory");
    o.control_dir = NULL;

    o.workspace = "/nonexistent/ws";
    CHECK_EQ(sandbox_start(&o, &sb, &err), -ENOENT);
    CHECK_CONTAINS(err.msg, "/nonexistent/ws");
    o.workspace = "/";
    CHECK_EQ(sandbox_start(&o, &sb, &err), CA_EUSAGE);
    CHECK(sb == NULL);
}

TEST(root_and_system_dirs_are_read_only)
{
    need_sandbox();
    struct sandbox_opts o = make_ws();
    struct sandbox_run_result r;
    CHECK_EQ(sh(&o,
                "touch /x; echo a=$?; mkdir /y; echo b=$?; touch /usr/x; echo c=$?; "
                "touch /etc/x; echo d=$?; echo >> /etc/passwd; echo e=$?",
                &r),
             0);
    CHECK_STR(r.out.data, "a=1\nb=1\nc=1\nd=1\ne=1\n");
    sandbox_run_result_release(&r);
}

TEST(pid_namespace)
{
    need_sandbox();
    struct sandbox_opts o = make_ws();
    struct sandbox_run_result r;
    /* bash, and cat or ls: only a handful of pids, all small; init is 1. */
    CHECK_EQ(sh(&o,
                "read -r pid rest < /proc/self/stat; echo self=$pid; "
                "echo n=$(ls /proc | grep -c '^[0-9]'); cat /proc/1/comm >/dev/null; "
                "echo ppid=$PPID",
                &r),
             0);
    int self = -1, n = -1, ppid = -1;
    const char *s = strstr(r.out.data, "self=");
    if (s)
        self = (int)strtol(s + 5, NULL, 10);
    s = strstr(r.out.data, "n=");
    if (s)
        n = (int)strtol(s + 2, NULL, 10);
    s = strstr(r.out.data, "ppid=");
    if (s)
        ppid = (int)strtol(s + 5, NULL, 10);
    CHECK(self > 1 && self < 20);
    CHECK(n >= 2 && n <= 5);
    CHECK_EQ(ppid, 1);
    sandbox_run_result_release(&r);
}

TEST(hostname)
{
    need_sandbox();
    struct sandbox_opts o = make_ws();
    struct sandbox_run_result r;
    CHECK_EQ(sh(&o, "cat /proc/sys/kernel/hostname", &r), 0);
    CHECK_STR(r.out.data, "sandbox\n");
    sandbox_run_result_release(&r);
    o.hostname = "episode-42";
    CHECK_EQ(sh(&o, "cat /proc/sys/kernel/hostname", &r), 0);
    CHECK_STR(r.out.data, "episode-42\n");
    sandbox_run_result_release(&r);
}

TEST(no_network)
{
    need_sandbox();
    struct sandbox_opts o = make_ws();
    struct sandbox_run_result r;
    CHECK_EQ(sh(&o,
                "grep -c ':' /proc/net/dev; grep -o 'lo:' /proc/net/dev; "
                "echo > /dev/tcp/127.0.0.1/80; echo tcp=$?; echo > /dev/udp/127.0.0.1/53; "
                "echo udp=$?",
                &r),
             0);
    /* Only the loopback device (and it is down: nothing listens anyway). */
    CHECK_STR(r.out.data, "1\nlo:\ntcp=1\nudp=1\n");
    CHECK_CONTAINS(r.err.data, "Operation not permitted");
    sandbox_run_result_release(&r);
}

TEST(tmp_size_cap)
{
    need_sandbox();
    struct sandbox_opts o = make_ws();
    o.limits.tmp_bytes = 1 << 20;
    struct sandbox_run_result r;
    CHECK_EQ(sh(&o,
                "head -c 2000000 /dev/zero > /tmp/big; echo rc=$?; stat -c %s /tmp/big; "
                "stat -f -c %a /tmp >/dev/null; ls -ld /tmp | cut -c1-10",
                &r),
             0);
    CHECK_CONTAINS(r.out.data, "rc=1\n1048576\n");
    CHECK_CONTAINS(r.out.data, "drwxrwxrwt");
    CHECK_CONTAINS(r.err.data, "No space left on device");
    sandbox_run_result_release(&r);
}

TEST(file_size_limit)
{
    need_sandbox();
    struct sandbox_opts o = make_ws();
    o.limits.fsize = 1 << 20;
    struct sandbox_run_result r;
    CHECK_EQ(sh(&o,
                "head -c 2000000 /dev/zero > /workspace/big; echo rc=$?; "
                "stat -c %s /workspace/big",
                &r),
             0);
    /* SIGXFSZ ends head: 128 + 25. */
    CHECK_STR(r.out.data, "rc=153\n1048576\n");
    sandbox_run_result_release(&r);
}

TEST(rlimits_are_set_and_cannot_be_raised)
{
    need_sandbox();
    struct sandbox_opts o = make_ws();
    o.limits.nofile = 64;
    o.limits.cpu_seconds = 30;
    struct sandbox_run_result r;
    CHECK_EQ(sh(&o,
                "ulimit -n; ulimit -Hn; ulimit -t; ulimit -u; ulimit -c; ulimit -v; "
                "ulimit -n 100000 2>/dev/null; echo raise=$?",
                &r),
             0);
    CHECK_STR(r.out.data, "64\n64\n30\n256\n0\n8388608\nraise=1\n");
    sandbox_run_result_release(&r);
}

TEST(cpu_time_limit_kills)
{
    need_sandbox();
    struct sandbox_opts o = make_ws();
    o.limits.cpu_seconds = 1;
    struct sandbox_run_result r;
    CHECK_EQ(sh(&o, "while :; do :; done", &r), 0);
    CHECK(!r.timed_out);
    CHECK(WIFSIGNALED(r.status));
    CHECK(WTERMSIG(r.status) == SIGKILL || WTERMSIG(r.status) == SIGXCPU);
    sandbox_run_result_release(&r);
}

TEST(fork_bomb_is_contained)
{
    need_sandbox();
    struct sandbox_opts o = make_ws();
    o.limits.nproc = 64;
    struct sandbox *sb = start(&o);
    printf("  cgroup: %s\n", sandbox__cgroup_desc(sb));
    if (geteuid() == 0 && strncmp(sandbox__cgroup_desc(sb), "none", 4) == 0) {
        /* RLIMIT_NPROC does not bind root: a real bomb would take the host down. */
        sandbox_free(sb);
        SKIP("pids-cgroup", "running as root without a writable pids cgroup");
    }
    struct ca_err err = {0};
    int pid;
    struct sandbox_cmd bomb = {.argv = ARGV("bash", "-c", ":(){ :|:& };:"),
                               .stdin_fd = -1,
                               .stdout_fd = -1,
                               .stderr_fd = -1,
                               .new_pgroup = true};
    REQUIRE(sandbox_exec(sb, &bomb, &pid, &err) == 0);
    sleep_ms(1500);
    CHECK_EQ(sandbox_kill_tree(sb, pid, SIGKILL, true, &err), 0);
    /* Usable again once the bomb is gone: an exec succeeds within a few tries. */
    struct sandbox_cmd echo = {
        .argv = ARGV("true"), .stdin_fd = -1, .stdout_fd = -1, .stderr_fd = -1};
    int ok_pid = -1, status = -1;
    for (int i = 0; i < 50 && ok_pid < 0; i++) {
        if (sandbox_exec(sb, &echo, &ok_pid, &err) != 0) {
            if (sandbox_kill_tree(sb, pid, SIGKILL, true, &err) != 0)
                printf("  kill_tree: %s\n", err.msg);
            sleep_ms(100);
        }
    }
    REQUIRE(ok_pid > 0);
    CHECK_EQ(sandbox_wait(sb, ok_pid, 5000, &status, &err), 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    sandbox_free(sb);

    /* Through sandbox_run: the run ends at its timeout. */
    struct sandbox_run_result r;
    sandbox_run_result_init(&r);
    int64_t t0 = ca_now_us();
    CHECK_EQ(sandbox_run(&o, ARGV("bash", "-c", ":(){ :|:& };: ; sleep 100"), 1500, 0, &r, &err),
             0);
    CHECK(r.timed_out);
    CHECK(ca_now_us() - t0 < 5 * 1000 * 1000);
    sandbox_run_result_release(&r);
}

TEST(privileges_are_dropped)
{
    need_sandbox();
    struct sandbox_opts o = make_ws();
    struct sandbox_run_result r;
    CHECK_EQ(sh(&o,
                "grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' "
                "/proc/self/status | tr -d '\\t'",
                &r),
             0);
    CHECK_STR(r.out.data, "CapInh:0000000000000000\nCapPrm:0000000000000000\n"
                          "CapEff:0000000000000000\nCapBnd:0000000000000000\n"
                          "CapAmb:0000000000000000\nNoNewPrivs:1\nSeccomp:2\n");
    sandbox_run_result_release(&r);
}

TEST(control_dir_is_read_only)
{
    need_sandbox();
    struct sandbox_opts o = make_ws();
    char ctl[4200], p[4300];
    snprintf(ctl, sizeof(ctl), "%s/control", test_tmpdir());
    REQUIRE(mkdir(ctl, 0755) == 0);
    snprintf(p, sizeof(p), "%s/token", ctl);
    write_file(p, "ctl\n");
    o.control_dir = ctl;
    struct sandbox_run_result r;
    CHECK_EQ(sh(&o, "cat /run/cuda-agent/token; touch /run/cuda-agent/x; echo rc=$?", &r), 0);
    CHECK_STR(r.out.data, "ctl\nrc=1\n");
    CHECK_CONTAINS(r.err.data, "Read-only file system");
    sandbox_run_result_release(&r);
}

TEST(unprivileged_user)
{
    need_sandbox();
    if (geteuid() != 0)
        SKIP("root", "not root, cannot switch to nobody (this run is unprivileged already)");
    struct sandbox_opts o = make_ws();
    REQUIRE(chmod(test_tmpdir(), 0711) == 0);
    REQUIRE(chown(ws, 65534, 65534) == 0);
    char p[4200];
    snprintf(p, sizeof(p), "%s/kernels", ws);
    REQUIRE(chown(p, 65534, 65534) == 0);
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        if (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0)
            _exit(10);
        /* setuid cleared "dumpable"; a normal login would have it set. */
        prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
        struct ca_err err = {0};
        struct sandbox *sb = NULL;
        int rc = sandbox_start(&o, &sb, &err);
        if (rc == CA_EUNAVAIL) {
            printf("  sandbox_start as nobody: %s\n", err.msg);
            fflush(stdout);
            _exit(77);
        }
        if (rc) {
            fprintf(stderr, "  sandbox_start as nobody: %s\n", err.msg);
            _exit(11);
        }
        printf("  cgroup as nobody: %s\n", sandbox__cgroup_desc(sb));
        sandbox_free(sb);
        struct sandbox_run_result r;
        sandbox_run_result_init(&r);
        rc = sandbox_run(&o,
                         ARGV("bash", "-c",
                              "id -u; echo hi > /workspace/kernels/n.cu && echo wrote; "
                              "echo x > /workspace/MANIFEST 2>/dev/null || echo ro; "
                              "ulimit -u; (for i in $(seq 400); do sleep 2 & done) 2>/dev/null; "
                              "echo n=$(ls /proc | grep -c '^[0-9]')"),
                         20000, 0, &r, &err);
        if (rc) {
            fprintf(stderr, "  sandbox_run as nobody: %s\n", err.msg);
            _exit(12);
        }
        printf("  as nobody: %s", r.out.data);
        fflush(stdout);
        /* RLIMIT_NPROC counts uid 0 of this user namespace: at most 256. */
        const char *n = strstr(r.out.data, "n=");
        int procs = n ? (int)strtol(n + 2, NULL, 10) : -1;
        bool ok =
            strncmp(r.out.data, "0\nwrote\nro\n256\n", 15) == 0 && procs > 100 && procs <= 257;
        _exit(ok ? 0 : 13);
    }
    int status;
    REQUIRE(waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status));
    if (WEXITSTATUS(status) == 77)
        SKIP("userns", "no sandbox for nobody here (the reason above)");
    CHECK_EQ(WEXITSTATUS(status), 0);
    snprintf(p, sizeof(p), "%s/kernels/n.cu", ws);
    struct stat st;
    CHECK(stat(p, &st) == 0 && st.st_uid == 65534);
}

TEST(legacy_mount_path)
{
    need_sandbox();
    sandbox__force_legacy_mounts(true);
    struct sandbox_opts o = make_ws();
    struct sandbox_run_result r;
    CHECK_EQ(sh(&o,
                "touch /x; echo a=$?; touch /usr/x; echo b=$?; echo > /workspace/MANIFEST; "
                "echo c=$?; touch /workspace/tools/x; echo d=$?; touch /workspace/ok; echo e=$?; "
                "grep -c ' /usr ro,nosuid,nodev' /proc/self/mountinfo",
                &r),
             0);
    CHECK_STR(r.out.data, "a=1\nb=1\nc=1\nd=1\ne=0\n1\n");
    sandbox_run_result_release(&r);
    sandbox__force_legacy_mounts(false);
}

TEST(start_time)
{
    need_sandbox();
    struct sandbox_opts o = make_ws();
    enum { N = 30 };
    int64_t t[N];
    struct ca_err err = {0};
    for (int i = 0; i < N; i++) {
        int64_t t0 = ca_now_us();
        struct sandbox *sb = start(&o);
        struct sandbox_cmd c = {
            .argv = ARGV("/bin/true"), .stdin_fd = -1, .stdout_fd = -1, .stderr_fd = -1};
        int pid, status;
        REQUIRE(sandbox_exec(sb, &c, &pid, &err) == 0);
        REQUIRE(sandbox_wait(sb, pid, 5000, &status, &err) == 0);
        t[i] = ca_now_us() - t0;
        sandbox_free(sb);
    }
    for (int i = 1; i < N; i++)
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            int64_t x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    printf("  start + exec /bin/true + wait: median %.2f ms, p90 %.2f ms, max %.2f ms (%d runs)\n",
           t[N / 2] / 1000.0, t[N * 9 / 10] / 1000.0, t[N - 1] / 1000.0, N);
    CHECK(t[N / 2] < 1000 * 1000); /* a loose bound: a unit test is no benchmark */
}

TEST(build_and_run_a_threaded_program)
{
    need_sandbox();
    if (access("/usr/bin/cc", X_OK) != 0)
        SKIP("cc", "no /usr/bin/cc");
    struct sandbox_opts o = make_ws();
    struct sandbox_run_result r;
    /* glibc's pthread_create tries clone3 first: the filter's ENOSYS must
     * send it to clone. Compiling and running from /tmp must work. */
    CHECK_EQ(sh(&o,
                "cd /tmp && printf '%s\\n' '#include <pthread.h>' '#include <stdio.h>' "
                "'static void *f(void *a) { return a; }' "
                "'int main(void) { pthread_t t; int r = pthread_create(&t, 0, f, 0); "
                "pthread_join(t, 0); printf(\"threads=%d\\n\", r); return r; }' > t.c && "
                "cc -pthread -o t t.c && ./t",
                &r),
             0);
    CHECK_STR(r.out.data, "threads=0\n");
    CHECK_EQ(exit_code(&r), 0);
    sandbox_run_result_release(&r);
}

TEST(extra_read_only_binds)
{
    need_sandbox();
    struct sandbox_opts o = make_ws();
    /* A host directory outside the system dirs, e.g. a Python environment. */
    char dir[] = "/var/tmp/ca-extra-XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    char file[sizeof(dir) + 16];
    snprintf(file, sizeof(file), "%s/hdr.h", dir);
    write_file(file, "int from_host;\n");
    const char *extra[] = {dir, NULL};
    o.extra_ro_binds = extra;
    struct sandbox_run_result r;
    char script[256];
    snprintf(script, sizeof(script), "cat %s; echo x > %s/new 2>/dev/null || echo read-only", file,
             dir);
    REQUIRE(sh(&o, script, &r) == 0);
    CHECK_CONTAINS(r.out.data, "int from_host;");
    CHECK_CONTAINS(r.out.data, "read-only");
    sandbox_run_result_release(&r);
    /* Its siblings on the host stay invisible. */
    REQUIRE(sh(&o, "ls /var/tmp | wc -l", &r) == 0);
    CHECK_STR(r.out.data, "1\n");
    sandbox_run_result_release(&r);
    unlink(file);
    rmdir(dir);

    /* System paths are visible anyway; paths covering the sandbox's own mounts are refused. */
    const char *sys[] = {"/usr/include", NULL};
    o.extra_ro_binds = sys;
    REQUIRE(sh(&o, "test -d /usr/include && echo ok", &r) == 0);
    CHECK_STR(r.out.data, "ok\n");
    sandbox_run_result_release(&r);
    /* A tree under /tmp (a checkout in /tmp with its Python environment) is bound beneath
     * the sandbox's own /tmp, read-only; /tmp itself is refused. */
    char tdir[512], tfile[600], tscript[1400];
    snprintf(tdir, sizeof(tdir), "%s/extra-tree", test_tmpdir());
    REQUIRE(mkdir(tdir, 0755) == 0 || errno == EEXIST);
    snprintf(tfile, sizeof(tfile), "%s/hdr.h", tdir);
    FILE *tf = fopen(tfile, "w");
    REQUIRE(tf != NULL);
    fputs("int in_tmp;\n", tf);
    fclose(tf);
    const char *tmp_tree[] = {tdir, NULL};
    o.extra_ro_binds = tmp_tree;
    snprintf(tscript, sizeof(tscript),
             "cat %s; echo x > %s/new 2>/dev/null || echo read-only; "
             "echo y > /tmp/other && echo tmp-writable",
             tfile, tdir);
    REQUIRE(sh(&o, tscript, &r) == 0);
    CHECK_CONTAINS(r.out.data, "int in_tmp;");
    CHECK_CONTAINS(r.out.data, "read-only");
    CHECK_CONTAINS(r.out.data, "tmp-writable");
    sandbox_run_result_release(&r);
    unlink(tfile);
    rmdir(tdir);
    const char *bad[] = {"/tmp", NULL};
    o.extra_ro_binds = bad;
    struct sandbox *sb = NULL;
    struct ca_err err = {0};
    CHECK(sandbox_start(&o, &sb, &err) == CA_EUSAGE);
    CHECK_CONTAINS(err.msg, "would cover /tmp");
    const char *missing[] = {"/nonexistent/ca-path", NULL};
    o.extra_ro_binds = missing;
    CHECK(sandbox_start(&o, &sb, &err) == -ENOENT);
    CHECK_CONTAINS(err.msg, "does not exist");
}
