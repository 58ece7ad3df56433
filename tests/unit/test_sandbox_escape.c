/*
 * test_sandbox_escape.c - the escape suite: each case is one attack run
 * from inside a sandbox (mostly as a bash script, with the tools a Debian
 * system has in /usr/bin), and each attack must fail. The workspace holds
 * planted symlinks; the host side holds a secret file, a listening TCP
 * port, an abstract unix socket, a process and an open fd, none of which
 * may be reached. The last cases check the seccomp filter syscall by
 * syscall, in a forked test process that loads it.
 *
 * Where the host has no user namespaces, each case skips with the reason
 * (TEST_REQUIRE=userns makes that a failure).
 */
#include "test.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/proc.h"
#include "core/util.h"
#include "sandbox/sandbox.h"
#include "sandbox/sandbox_internal.h"
#include "sandbox_guard.h"

#define SECRET "TOPSECRET-4f1e"

static char ws[4096], secret[4096], ctl[4096];
static const char *const ro_paths[] = {"MANIFEST", NULL};

/*
 * <tmp>/secret.txt (outside the workspace), <tmp>/ws with a read-only
 * MANIFEST and symlinks planted towards the secret and the host, and a
 * control directory.
 */
static struct sandbox_opts setup(void)
{
    snprintf(secret, sizeof(secret), "%s/secret.txt", test_tmpdir());
    write_file(secret, SECRET "\n");
    snprintf(ws, sizeof(ws), "%s/ws", test_tmpdir());
    REQUIRE(mkdir(ws, 0755) == 0);
    snprintf(ctl, sizeof(ctl), "%s/control", test_tmpdir());
    REQUIRE(mkdir(ctl, 0755) == 0);
    char p[4300];
    snprintf(p, sizeof(p), "%s/MANIFEST", ws);
    write_file(p, "manifest\n");
    snprintf(p, sizeof(p), "%s/abs_link", ws);
    REQUIRE(symlink(secret, p) == 0);
    snprintf(p, sizeof(p), "%s/rel_link", ws);
    REQUIRE(symlink("../secret.txt", p) == 0);
    snprintf(p, sizeof(p), "%s/shadow_link", ws);
    REQUIRE(symlink("/etc/shadow", p) == 0);
    snprintf(p, sizeof(p), "%s/root_link", ws);
    REQUIRE(symlink("/", p) == 0);
    return (struct sandbox_opts){.workspace = ws, .ro_paths = ro_paths, .control_dir = ctl};
}

/*
 * Run bash -c script inside; stdout and stderr together in r->out. A probe
 * whose program is missing exits 127 and tests nothing, while its status
 * would still not be 0: every program an attack names must be there.
 */
static void attack(const struct sandbox_opts *o, const char *script, struct sandbox_run_result *r)
{
    struct ca_err err = {0};
    sandbox_run_result_init(r);
    char *wrapped = xstrfmt("exec 2>&1; %s", script);
    int rc = sandbox_run(o, ARGV("bash", "-c", wrapped), 15000, 0, r, &err);
    free(wrapped);
    if (rc)
        fprintf(stderr, "  sandbox_run: %s\n", err.msg);
    REQUIRE(rc == 0);
    REQUIRE(!r->timed_out);
    if (strstr(r->out.data, "command not found"))
        test__fail(__FILE__, __LINE__, "a probe's program is missing, so it tested nothing:\n%s",
                   r->out.data);
}

/* The first line of out, from the line that starts at from on, that is exactly line. */
static const char *find_line(const char *from, const char *line)
{
    size_t n = strlen(line);
    for (const char *p = from; p && *p;) {
        if (strncmp(p, line, n) == 0 && (p[n] == '\n' || p[n] == '\0'))
            return p;
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return NULL;
}

/* "name=status", a probe's exit status as the scripts echo it. */
static bool is_status(const char *s)
{
    size_t name = strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789_");
    if (name == 0 || s[name] != '=')
        return false;
    s += name + 1;
    return *s && strspn(s, "0123456789") == strlen(s);
}

/*
 * The secret never shows, and each entry of want is there: a status
 * ("name=rc") as a whole line, so that "a=1" is not satisfied by "a=127";
 * anything else as a substring.
 */
static void expect_lines(const struct sandbox_run_result *r, const char *const *want)
{
    bool bad = strstr(r->out.data, SECRET) != NULL;
    CHECK(!bad);
    for (size_t i = 0; want[i]; i++) {
        bool found = is_status(want[i]) ? find_line(r->out.data, want[i]) != NULL
                                        : strstr(r->out.data, want[i]) != NULL;
        if (!found) {
            test__fail(__FILE__, __LINE__, "missing \"%s\"", want[i]);
            bad = true;
        }
    }
    if (bad)
        fprintf(stderr, "  output was:\n%s\n", r->out.data);
}

/* A probe of a script that echoes "name=$?" after each, in order: its status line and what it
 * must have printed before it, since the last probe's line. */
struct probe {
    const char *status;
    const char *said;
};

/* Each probe ended with its status and said why it was refused: a probe that never ran, or
 * failed for another reason than the one the case is about, does not pass for a refusal. */
static void expect_probes(const struct sandbox_run_result *r, const struct probe *want, size_t n)
{
    const char *from = r->out.data;
    bool bad = false;
    for (size_t i = 0; i < n; i++) {
        const char *line = find_line(from, want[i].status);
        if (!line) {
            test__fail(__FILE__, __LINE__, "no line \"%s\" after the previous probe's",
                       want[i].status);
            bad = true;
            continue;
        }
        if (!memmem(from, (size_t)(line - from), want[i].said, strlen(want[i].said))) {
            test__fail(__FILE__, __LINE__, "the probe ending with \"%s\" did not say \"%s\"",
                       want[i].status, want[i].said);
            bad = true;
        }
        from = line + strlen(want[i].status);
        from += *from == '\n';
    }
    if (bad)
        fprintf(stderr, "  output was:\n%s\n", r->out.data);
}

/* ---- host secrets ---- */

TEST(read_host_secret_by_absolute_path)
{
    need_sandbox();
    struct sandbox_opts o = setup();
    struct sandbox_run_result r;
    char *s = xstrfmt("cat '%s'; echo cat=$?; ls '%s'; echo ls=$?; cat /tmp/../'%s'; echo up=$?",
                      secret, test_tmpdir(), secret);
    attack(&o, s, &r);
    free(s);
    expect_lines(&r, ARGV("cat=1", "ls=2", "up=1"));
    sandbox_run_result_release(&r);
}

TEST(read_host_secret_via_proc_root)
{
    need_sandbox();
    struct sandbox_opts o = setup();
    struct sandbox_run_result r;
    char *s = xstrfmt("cat /proc/1/root'%s'; echo a=$?; cat /proc/self/root'%s'; echo b=$?; "
                      "cat /proc/self/cwd/..'%s'; echo c=$?; ls /proc/self/root/ | tr '\\n' ' '; "
                      "echo; cat /proc/1/root/etc/shadow; echo d=$?; ls /proc/1/root/; echo e=$?",
                      secret, secret, secret);
    attack(&o, s, &r);
    free(s);
    /* init's root is the sandbox's, and init is not even inspectable. */
    expect_lines(&r, ARGV("a=1", "b=1", "c=1", "d=1", "e=2",
                          "bin dev etc lib lib32 lib64 proc run sbin tmp usr workspace"));
    sandbox_run_result_release(&r);
}

TEST(read_host_secret_via_dotdot)
{
    need_sandbox();
    struct sandbox_opts o = setup();
    struct sandbox_run_result r;
    attack(&o,
           "cd /workspace; cat ../secret.txt; echo a=$?; cat ../../secret.txt; echo b=$?; "
           "cd ../../../..; pwd; ls; cat ws/../secret.txt 2>&1; echo c=$?",
           &r);
    expect_lines(&r, ARGV("a=1", "b=1", "c=1"));
    CHECK(strstr(r.out.data, "secret.txt") == NULL || strstr(r.out.data, "No such file"));
    sandbox_run_result_release(&r);
}

TEST(read_host_secret_via_planted_symlinks)
{
    need_sandbox();
    struct sandbox_opts o = setup();
    struct sandbox_run_result r;
    attack(&o,
           "cd /workspace; cat abs_link; echo a=$?; cat rel_link; echo b=$?; cat shadow_link; "
           "echo c=$?; ls root_link/ | tr '\\n' ' '; echo; ls root_link/root; echo d=$?; "
           "ln -s /proc/1/root/etc/shadow s2; cat s2; echo e=$?",
           &r);
    expect_lines(&r, ARGV("a=1", "b=1", "c=1", "d=2", "e=1"));
    sandbox_run_result_release(&r);
}

TEST(read_host_secrets_in_etc_and_homes)
{
    need_sandbox();
    struct sandbox_opts o = setup();
    struct sandbox_run_result r;
    attack(&o,
           "cat /etc/shadow; echo a=$?; ls /etc/ssh /etc/ssl/private; echo b=$?; ls /root; "
           "echo c=$?; ls /home; echo d=$?; ls /var /opt /srv /mnt /boot /sys; echo e=$?; "
           "ls /etc | tr '\\n' ' '",
           &r);
    expect_lines(&r, ARGV("a=1", "b=2", "c=2", "d=2", "e=2"));
    CHECK(strstr(r.out.data, "shadow ") == NULL);
    sandbox_run_result_release(&r);
}

TEST(see_other_episodes_tmp)
{
    need_sandbox();
    struct sandbox_opts o = setup();
    struct sandbox_run_result r;
    /* A file in one sandbox's /tmp is not in the next one's, nor on the host. */
    attack(&o, "echo mine > /tmp/episode-file; echo > /dev/shm/seg; ls /tmp", &r);
    CHECK_CONTAINS(r.out.data, "episode-file");
    sandbox_run_result_release(&r);
    attack(&o, "ls -A /tmp /dev/shm | tr '\\n' ' '; echo; cat /tmp/episode-file; echo a=$?", &r);
    expect_lines(&r, ARGV("a=1"));
    CHECK(access("/tmp/episode-file", F_OK) != 0);
    sandbox_run_result_release(&r);
}

/* ---- writing outside the workspace ---- */

TEST(write_outside_workspace)
{
    need_sandbox();
    struct sandbox_opts o = setup();
    struct sandbox_run_result r;
    attack(&o,
           "for f in /x /usr/x /usr/local/x /etc/x /bin/x /lib/x /run/cuda-agent/x /dev/x "
           "/proc/x /workspace/MANIFEST; do echo pwned > $f && echo WROTE $f; done; "
           "echo >> /etc/passwd && echo WROTE passwd; mkdir /usr/d && echo WROTE d; "
           "chmod 777 /usr/bin/env && echo WROTE chmod; touch /usr/bin/env && echo WROTE touch; "
           "echo 1 > /proc/sys/kernel/hostname && echo WROTE hostname; "
           "echo pwned > /proc/1/root/usr/x && echo WROTE via proc; echo done",
           &r);
    CHECK_CONTAINS(r.out.data, "done");
    CHECK(strstr(r.out.data, "WROTE") == NULL);
    if (strstr(r.out.data, "WROTE"))
        fprintf(stderr, "%s\n", r.out.data);
    CHECK(access("/usr/x", F_OK) != 0);
    CHECK(access("/x", F_OK) != 0);
    char p[4300];
    snprintf(p, sizeof(p), "%s/x", ctl);
    CHECK(access(p, F_OK) != 0);
    sandbox_run_result_release(&r);
}

TEST(write_read_only_paths)
{
    need_sandbox();
    struct sandbox_opts o = setup();
    struct sandbox_run_result r;
    attack(&o,
           "cd /workspace; echo x > MANIFEST; echo a=$?; truncate -s0 MANIFEST; echo b=$?; "
           "rm -f MANIFEST; echo c=$?; mv MANIFEST M2; echo d=$?; ln MANIFEST hard; echo e=$?; "
           "umount /workspace/MANIFEST; echo f=$?; umount -l /workspace/MANIFEST; echo g=$?; "
           "mount -o remount,rw /workspace/MANIFEST; echo h=$?; "
           "echo x > /proc/self/root/workspace/MANIFEST; echo i=$?; cat MANIFEST",
           &r);
    expect_lines(
        &r, ARGV("a=1", "b=1", "c=1", "d=1", "e=1", "f=32", "g=32", "h=32", "i=1", "manifest"));
    char p[4300];
    snprintf(p, sizeof(p), "%s/MANIFEST", ws);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    char buf[64] = {0};
    CHECK(fd >= 0 && read(fd, buf, sizeof(buf) - 1) > 0);
    CHECK_STR(buf, "manifest\n");
    if (fd >= 0)
        close(fd);
    sandbox_run_result_release(&r);
}

/* ---- the network ---- */

TEST(reach_network_tcp_loopback)
{
    need_sandbox();
    struct sandbox_opts o = setup();
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    REQUIRE(lfd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    REQUIRE(bind(lfd, (struct sockaddr *)&a, sizeof(a)) == 0);
    REQUIRE(listen(lfd, 8) == 0);
    socklen_t alen = sizeof(a);
    REQUIRE(getsockname(lfd, (struct sockaddr *)&a, &alen) == 0);
    int port = ntohs(a.sin_port);
    struct sandbox_run_result r;
    /* curl is no dependency: without it, bash's /dev/tcp and /dev/udp make the attempts. */
    bool curl = access("/usr/bin/curl", X_OK) == 0;
    char *s = xstrfmt("echo hi > /dev/tcp/127.0.0.1/%d; echo a=$?; "
                      "echo hi > /dev/tcp/localhost/%d; echo b=$?; "
                      "%s curl -s -m 2 http://127.0.0.1:%d/ >/dev/null; echo c=$?; "
                      "echo > /dev/udp/127.0.0.1/%d; echo d=$?",
                      port, port, curl ? "" : ":", port, port);
    attack(&o, s, &r);
    free(s);
    expect_lines(&r, ARGV("a=1", "b=1", "d=1", "Operation not permitted"));
    CHECK(!strstr(r.out.data, "c=0"));
    if (curl) /* 7: could not connect; 28: timed out */
        CHECK(find_line(r.out.data, "c=7") || find_line(r.out.data, "c=28"));
    else
        printf("  no /usr/bin/curl: bash made the attempts\n");
    /* Nothing ever connected. */
    int c = accept(lfd, NULL, NULL);
    CHECK(c < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
    close(lfd);
    sandbox_run_result_release(&r);
}

TEST(reach_network_abstract_unix_socket)
{
    need_sandbox();
    struct sandbox_opts o = setup();
    /* Abstract unix sockets belong to the network namespace. */
    int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    REQUIRE(lfd >= 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    char name[64];
    snprintf(name, sizeof(name), "ca-escape-%d", (int)getpid());
    memcpy(a.sun_path + 1, name, strlen(name));
    socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name));
    REQUIRE(bind(lfd, (struct sockaddr *)&a, alen) == 0);
    REQUIRE(listen(lfd, 8) == 0);
    if (access("/usr/bin/curl", X_OK) != 0) {
        close(lfd);
        SKIP("curl", "no /usr/bin/curl to connect with");
    }
    struct sandbox_run_result r;
    char *s =
        xstrfmt("curl -s -m 2 --abstract-unix-socket %s http://x/ >/dev/null; echo a=$?", name);
    attack(&o, s, &r);
    free(s);
    CHECK(!strstr(r.out.data, "a=0"));
    CHECK(find_line(r.out.data, "a=7") || find_line(r.out.data, "a=28"));
    int c = accept(lfd, NULL, NULL);
    CHECK(c < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
    close(lfd);
    sandbox_run_result_release(&r);
}

TEST(reach_network_interfaces)
{
    need_sandbox();
    struct sandbox_opts o = setup();
    struct sandbox_run_result r;
    attack(&o,
           "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; cat /proc/net/tcp | wc -l; "
           "cat /proc/net/unix | wc -l",
           &r);
    /* Only lo; no host TCP sockets; no host unix sockets (header lines only). */
    CHECK_STR(r.out.data, "lo\n1\n1\n");
    sandbox_run_result_release(&r);
}

/* ---- host processes ---- */

TEST(see_host_processes)
{
    need_sandbox();
    struct sandbox_opts o = setup();
    struct sandbox_run_result r;
    char *s = xstrfmt("ls /proc | grep -c '^[0-9]'; cat /proc/%d/cmdline; echo a=$?; "
                      "kill -0 %d; echo b=$?; cat /proc/[0-9]*/comm | sort -u | tr '\\n' ' '",
                      (int)getpid(), (int)getpid());
    attack(&o, s, &r);
    free(s);
    int n = (int)strtol(r.out.data, NULL, 10);
    CHECK(n >= 2 && n <= 6);
    expect_lines(&r, ARGV("a=1", "b=1"));
    CHECK(!strstr(r.out.data, "test_sandbox"));
    sandbox_run_result_release(&r);
}

TEST(signal_host_processes)
{
    need_sandbox();
    struct sandbox_opts o = setup();
    pid_t victim = fork();
    REQUIRE(victim >= 0);
    if (victim == 0) {
        pause();
        _exit(0);
    }
    struct sandbox_run_result r;
    char *s =
        xstrfmt("kill -9 %d; echo a=$?; kill -9 -1; echo b=$?; kill -9 1; echo c=$?", (int)victim);
    attack(&o, s, &r);
    free(s);
    /* -1 reaches nobody but the sandbox's init, which ignores SIGKILL from inside: the script
     * lives on to print c=0. */
    expect_lines(&r, ARGV("a=1", "b=1", "c=0"));
    CHECK_EQ(kill(victim, 0), 0); /* alive */
    kill(victim, SIGKILL);
    waitpid(victim, NULL, 0);
    sandbox_run_result_release(&r);
}

TEST(host_fds_and_environment_do_not_leak)
{
    need_sandbox();
    struct sandbox_opts o = setup();
    setenv("CA_SECRET_TOKEN", SECRET, 1);
    int fd = open(secret, O_RDONLY); /* deliberately not O_CLOEXEC */
    REQUIRE(fd >= 0);
    struct sandbox_run_result r;
    attack(&o,
           "env | grep -c CA_SECRET; ls /proc/self/fd | tr '\\n' ' '; echo; readlink /proc/1/fd/3; "
           "echo a=$?; cat /proc/1/fd/3 </dev/null; echo a2=$?; cat /proc/1/environ; echo b=$?; "
           "cat /proc/1/maps; echo c=$?; "
           "for f in /proc/[0-9]*/fd/*; do [ -f \"$f\" ] && grep -q TOPSECRET \"$f\" && "
           "echo LEAK $f; done; echo done",
           &r);
    expect_lines(&r, ARGV("0\n", "a=1", "a2=1", "b=1", "c=1", "done"));
    CHECK(!strstr(r.out.data, "LEAK"));
    close(fd);
    sandbox_run_result_release(&r);
}

/* ---- limits and privileges ---- */

TEST(raise_limits)
{
    need_sandbox();
    struct sandbox_opts o = setup();
    struct sandbox_run_result r;
    attack(&o,
           "ulimit -n 100000; echo a=$?; ulimit -u unlimited; echo b=$?; ulimit -v unlimited; "
           "echo c=$?; ulimit -t unlimited; echo d=$?; ulimit -f unlimited; echo e=$?; "
           "prlimit --pid $$ --nofile=100000:100000; echo f=$?; ulimit -n",
           &r);
    expect_lines(&r, ARGV("a=1", "b=1", "c=1", "d=1", "e=1", "f=1", "1024"));
    sandbox_run_result_release(&r);
}

TEST(ptrace_with_strace_and_gdb)
{
    need_sandbox();
    /* A host without strace and gdb proves nothing here; the seccomp case below still does. */
    static const char *const tools[] = {"strace", "gdb"};
    for (size_t i = 0; i < ARRAY_SIZE(tools); i++) {
        char *path = proc_which(tools[i]);
        if (!path)
            SKIP(tools[i], "no %s in PATH to attach with", tools[i]);
        free(path);
    }
    struct sandbox_opts o = setup();
    struct sandbox_run_result r;
    attack(&o,
           "strace -f true >/dev/null; echo a=$?; sleep 5 & timeout 3 strace -p $! >/dev/null; "
           "echo b=$?; gdb -batch -nx -p $! -ex 'info registers rip'; "
           "gdb -batch -nx -ex run --args /bin/true; echo c=$?; kill %1; "
           "grep Seccomp: /proc/self/status",
           &r);
    CHECK(!strstr(r.out.data, "a=0"));
    CHECK(!strstr(r.out.data, "b=0"));
    CHECK(!strstr(r.out.data, "b=124")); /* attached and waited */
    CHECK(!strstr(r.out.data, "c=0"));
    CHECK(!strstr(r.out.data, "rip "));
    CHECK_CONTAINS(r.out.data, "ptrace: Operation not permitted");
    expect_lines(&r, ARGV("a=1", "b=1")); /* strace ran and gave up */
    CHECK_CONTAINS(r.out.data, "Seccomp:\t2");
    sandbox_run_result_release(&r);
}

TEST(mount_and_namespaces)
{
    need_sandbox();
    struct sandbox_opts o = setup();
    struct sandbox_run_result r;
    attack(&o,
           "mkdir -p /tmp/m; mount -t tmpfs x /tmp/m; echo a=$?; mount --bind /workspace /tmp/m; "
           "echo b=$?; unshare -r true; echo c=$?; unshare -m true; echo d=$?; unshare -U true; "
           "echo e=$?; unshare -n true; echo f=$?; nsenter -t 1 -m true; echo g=$?; "
           "umount /proc; echo h=$?; mount -t proc proc /tmp/m; echo i=$?; "
           "mount -t cgroup2 none /tmp/m; echo j=$?; mount -t sysfs none /tmp/m; echo k=$?",
           &r);
    for (const char *k = "abcdefghijk"; *k; k++) {
        char ok[8];
        snprintf(ok, sizeof(ok), "%c=0\n", *k);
        if (strstr(r.out.data, ok))
            test__fail(__FILE__, __LINE__, "'%s' succeeded:\n%s", ok, r.out.data);
    }
    /* Not merely "did not succeed": each ran and was refused for want of privilege. mount and
     * umount exit 32 when the system call fails (1 is a usage error, 127 a missing program). */
    static const struct probe want[] = {
        {"a=32", "permission denied"},
        {"b=32", "permission denied"},
        {"c=1", "unshare failed: Operation not permitted"},
        {"d=1", "unshare failed: Operation not permitted"},
        {"e=1", "unshare failed: Operation not permitted"},
        {"f=1", "unshare failed: Operation not permitted"},
        {"g=1", "cannot open /proc/1/ns/mnt: Permission denied"},
        {"h=32", "must be superuser to unmount"},
        {"i=32", "permission denied"},
        {"j=32", "permission denied"},
        {"k=32", "permission denied"},
    };
    expect_probes(&r, want, ARRAY_SIZE(want));
    sandbox_run_result_release(&r);
}

TEST(chroot_dmesg_hostname_clock)
{
    need_sandbox();
    struct sandbox_opts o = setup();
    struct sandbox_run_result r;
    attack(&o,
           "chroot / true; echo a=$?; dmesg; echo b=$?; cat /proc/kmsg; echo c=$?; "
           "hostname evil; echo d=$?; date -s '2001-01-01'; echo e=$?; hostname",
           &r);
    expect_lines(&r, ARGV("a=125", "b=1", "c=1", "d=1", "e=1", "sandbox"));
    sandbox_run_result_release(&r);
}

TEST(device_nodes)
{
    need_sandbox();
    struct sandbox_opts o = setup();
    struct sandbox_run_result r;
    attack(&o,
           "ls /dev | tr '\\n' ' '; echo; ls /dev/nvidia* /dev/nvidiactl /dev/dri; echo a=$?; "
           "mknod /tmp/null c 1 3; echo b=$?; mknod /tmp/blk b 254 0; echo c=$?; "
           "mkfifo /tmp/fifo; echo fifo=$?; head -c 4 /dev/zero | wc -c; echo > /dev/null; "
           "echo null=$?; touch /dev/evil; echo d=$?",
           &r);
    expect_lines(&r, ARGV("fd full null random shm stderr stdin stdout tty urandom zero \n", "a=2",
                          "b=1", "c=1", "fifo=0", "4\n", "null=0", "d=1"));
    sandbox_run_result_release(&r);
}

TEST(setuid_binaries_gain_nothing)
{
    need_sandbox();
    struct sandbox_opts o = setup();
    struct sandbox_run_result r;
    attack(&o,
           "su -s /bin/sh nobody -c id; echo a=$?; "
           "if command -v sudo >/dev/null; then sudo -n id; echo b=$?; else echo b=1; fi; "
           "grep -c ' /usr ro,nosuid,nodev' /proc/self/mountinfo; "
           "setpriv --reuid=65534 id; echo c=$?; grep -E '^(CapEff|NoNewPrivs)' "
           "/proc/self/status | tr -d '\\t'",
           &r);
    CHECK(!strstr(r.out.data, "a=0"));
    CHECK(!strstr(r.out.data, "b=0"));
    CHECK(!strstr(r.out.data, "c=0"));
    CHECK(!strstr(r.out.data, "uid=65534"));
    expect_lines(&r, ARGV("\n1\n", "CapEff:0000000000000000", "NoNewPrivs:1"));
    /* su ran and gave up; setpriv ran and was refused (its 127 is a privilege error). */
    expect_lines(&r, ARGV("a=1", "setpriv: setresuid failed", "c=127"));
    sandbox_run_result_release(&r);
}

TEST(personality_changes)
{
    need_sandbox();
    struct sandbox_opts o = setup();
    struct sandbox_run_result r;
    attack(&o,
           "setarch x86_64 -R true; echo a=$?; setarch x86_64 --read-implies-exec true; "
           "echo b=$?; setarch x86_64 true; echo c=$?",
           &r);
    expect_lines(&r, ARGV("a=1", "b=1", "c=0"));
    sandbox_run_result_release(&r);
}

TEST(no_sysfs_or_cgroupfs)
{
    need_sandbox();
    struct sandbox_opts o = setup();
    struct sandbox_run_result r;
    attack(&o,
           "ls /sys; echo a=$?; cat /proc/self/cgroup >/dev/null; echo b=$?; "
           "echo 1 > /proc/sys/vm/drop_caches; echo c=$?",
           &r);
    expect_lines(&r, ARGV("a=2", "b=0", "c=1"));
    sandbox_run_result_release(&r);
}

/* ---- the seccomp filter, syscall by syscall ---- */

static int check_call(const char *name, long rc, int want_errno)
{
    if (rc == -1 && errno == want_errno)
        return 0;
    fprintf(stderr, "  %s: got %ld (errno %d %s), want errno %d\n", name, rc, rc < 0 ? errno : 0,
            rc < 0 ? strerror(errno) : "", want_errno);
    return 1;
}

static int check_allowed(const char *name, long rc)
{
    if (rc >= 0)
        return 0;
    fprintf(stderr, "  %s: refused (%s) but should pass the filter\n", name, strerror(errno));
    return 1;
}

TEST(seccomp_filter_denies_each_listed_syscall)
{
    need_sandbox();
    struct ca_err err = {0};
    const struct sock_fprog *prog = sandbox__seccomp_prog(&err);
    REQUIRE(prog != NULL);
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
            prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, prog, 0, 0) != 0)
            _exit(100);
        int bad = 0;
        bad += check_call("ptrace", syscall(SYS_ptrace, 0 /* PTRACE_TRACEME */, 0, 0, 0), EPERM);
        bad +=
            check_call("process_vm_readv", syscall(SYS_process_vm_readv, 1, 0, 0, 0, 0, 0), EPERM);
        bad += check_call("mount", syscall(SYS_mount, "x", "/tmp", "tmpfs", 0, 0), EPERM);
        bad += check_call("umount2", syscall(SYS_umount2, "/tmp", 0), EPERM);
        bad += check_call("pivot_root", syscall(SYS_pivot_root, "/", "/"), EPERM);
        bad += check_call("chroot", syscall(SYS_chroot, "/"), EPERM);
        bad += check_call("unshare", syscall(SYS_unshare, CLONE_NEWUSER), EPERM);
        bad += check_call("setns", syscall(SYS_setns, 0, 0), EPERM);
        bad += check_call("clone(NEWUSER)", syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0),
                          EPERM);
        bad += check_call("clone(NEWNET)", syscall(SYS_clone, CLONE_NEWNET | SIGCHLD, 0, 0, 0, 0),
                          EPERM);
        bad += check_call("clone3", syscall(SYS_clone3, NULL, 0), ENOSYS);
        bad += check_call("keyctl", syscall(SYS_keyctl, 0, 0, 0, 0, 0), EPERM);
        bad += check_call("add_key", syscall(SYS_add_key, "user", "x", "y", 1, 0), EPERM);
        bad += check_call("bpf", syscall(SYS_bpf, 0, NULL, 0), EPERM);
        bad +=
            check_call("perf_event_open", syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0), EPERM);
        bad += check_call("userfaultfd", syscall(SYS_userfaultfd, 0), EPERM);
        bad += check_call("io_uring_setup", syscall(SYS_io_uring_setup, 1, NULL), EPERM);
        bad += check_call("init_module", syscall(SYS_init_module, NULL, 0, ""), EPERM);
        bad += check_call("kexec_load", syscall(SYS_kexec_load, 0, 0, NULL, 0), EPERM);
        bad += check_call("reboot", syscall(SYS_reboot, 0, 0, 0, NULL), EPERM);
        bad += check_call("syslog", syscall(SYS_syslog, 3, NULL, 0), EPERM);
        bad += check_call("iopl", syscall(SYS_iopl, 3), EPERM);
        bad += check_call("open_by_handle_at", syscall(SYS_open_by_handle_at, 0, NULL, 0), EPERM);
        bad += check_call("settimeofday", syscall(SYS_settimeofday, NULL, NULL), EPERM);
        bad += check_call("personality(ADDR_NO_RANDOMIZE)",
                          syscall(SYS_personality, ADDR_NO_RANDOMIZE), EPERM);
        bad += check_call("personality(READ_IMPLIES_EXEC)",
                          syscall(SYS_personality, READ_IMPLIES_EXEC), EPERM);
        bad += check_call("mknod(chr)", syscall(SYS_mknod, "/tmp/x", S_IFCHR | 0600, 0x103), EPERM);
        bad += check_call("mknodat(blk)",
                          syscall(SYS_mknodat, AT_FDCWD, "/tmp/x", S_IFBLK | 0600, 0x103), EPERM);
        bad += check_call("socket(AF_INET)", syscall(SYS_socket, AF_INET, SOCK_STREAM, 0), EPERM);
        bad += check_call("socket(AF_INET6)", syscall(SYS_socket, AF_INET6, SOCK_DGRAM, 0), EPERM);
        bad +=
            check_call("socket(AF_NETLINK)", syscall(SYS_socket, AF_NETLINK, SOCK_RAW, 0), EPERM);
        bad += check_call("socket(AF_PACKET)", syscall(SYS_socket, AF_PACKET, SOCK_RAW, 0), EPERM);
        int sv[2];
        bad += check_call("socketpair(AF_INET)",
                          syscall(SYS_socketpair, AF_INET, SOCK_STREAM, 0, sv), EPERM);
        char c = 'x';
        bad += check_call("ioctl(TIOCSTI)", syscall(SYS_ioctl, 0, TIOCSTI, &c), EPERM);

        /* What builds need passes. */
        bad += check_allowed("personality(query)", syscall(SYS_personality, 0xffffffffUL));
        bad += check_allowed("personality(PER_LINUX)", syscall(SYS_personality, 0));
        bad += check_allowed("socket(AF_UNIX)", syscall(SYS_socket, AF_UNIX, SOCK_STREAM, 0));
        bad += check_allowed("socketpair(AF_UNIX)",
                             syscall(SYS_socketpair, AF_UNIX, SOCK_STREAM, 0, sv));
        char fifo[4200];
        snprintf(fifo, sizeof(fifo), "%s/fifo", test_tmpdir());
        bad += check_allowed("mknod(fifo)", syscall(SYS_mknod, fifo, S_IFIFO | 0600, 0));
        long pid = syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
        if (pid == 0)
            _exit(0);
        bad += check_allowed("clone(plain fork)", pid);
        if (pid > 0)
            waitpid((pid_t)pid, NULL, 0);
        _exit(bad);
    }
    int status;
    REQUIRE(waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status));
    CHECK_EQ(WEXITSTATUS(status), 0);
}
