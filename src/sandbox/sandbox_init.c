/*
 * sandbox_init.c - the clone child: it applies the plan, then serves as the
 * sandbox's init (pid 1 of its pid namespace).
 *
 * Design and invariants:
 * - The child is a fork-style copy (clone without CLONE_VM) of one thread of
 *   a possibly multi-threaded host. Locks held by other host threads stay
 *   held here forever, so from the first instruction to _exit this file
 *   makes only async-signal-safe calls: raw syscalls, no malloc, no stdio,
 *   no glibc fork() (its atfork handlers take malloc's locks); programs are
 *   started with a raw clone(SIGCHLD) as well.
 * - Order (bubblewrap's): fds closed, no-new-privs, wait for the host's
 *   uid/gid maps, new session, the mount ops of the plan in order (tmpfs
 *   root, pivot_root, binds, /proc, /tmp, /dev, old root detached, root
 *   read-only), hostname, capabilities dropped, seccomp filter last.
 * - Every failure is reported as {step, op index, errno} on the control
 *   socket; the host, which holds the plan, turns it into a message.
 * - init is single-threaded: one poll loop over the control socket and a
 *   signalfd for SIGCHLD. It reaps every child; exits of programs it started
 *   become EXIT events, orphans are reaped silently. When the control socket
 *   closes, init exits, and the kernel kills the rest of the pid namespace.
 *   In insecure mode (no pid namespace) init is a child subreaper and kills
 *   its descendants itself before it exits.
 * - Resource limits are set in each program between fork and exec, never in
 *   init: init keeps working (it can still fork to start a program) when a
 *   runaway program has used up what the limits allow.
 * - The state (sandbox__init_st, and what each file keeps for itself) is
 *   global on purpose: it exists only in this child's private copy of
 *   memory, and it is too big for the stack of a host thread.
 *
 * The parts, one idea each: this file (the set-up, in the order above, and
 * the capabilities dropped), sandbox_init_mount.c (the plan's mount ops),
 * sandbox_init_loop.c (pid 1: the poll loop, reaping, requests),
 * sandbox_init_exec.c (starting programs), sandbox_init_kill.c (killing
 * process trees) and sandbox_init_safe.c (the async-signal-safe helpers they
 * share).
 */
#include "sandbox/sandbox_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/banned.h"

struct sandbox__init_state sandbox__init_st;

/* ---- capabilities and seccomp ---- */

static int drop_caps(void)
{
    for (unsigned long cap = 0; cap < 64; cap++)
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL)
            return errno;
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); /* EINVAL before 4.3: none */
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct d[2];
    memset(d, 0, sizeof(d));
    return syscall(SYS_capset, &h, d) == 0 ? 0 : errno;
}

/* ---- set-up ---- */

/* Keep only ctl (moved above 2), and /dev/null on 0, 1, 2 and one more fd. */
static void setup_fds(void)
{
    if (sandbox__init_st.ctl < 3) {
        int moved = fcntl(sandbox__init_st.ctl, F_DUPFD_CLOEXEC, 3);
        if (moved < 0)
            _exit(1); /* cannot report: the socket is the report channel */
        sandbox__init_st.ctl = moved;
    }
    sandbox__init_close_from(0, (unsigned)sandbox__init_st.ctl - 1, 0);
    sandbox__init_close_from((unsigned)sandbox__init_st.ctl + 1, ~0U, 0);
    int fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (fd < 0)
        sandbox__init_setup_fail(SANDBOX__STEP_FDS, 0, errno);
    for (int i = 0; i < 3; i++)
        if (fd != i && dup2(fd, i) < 0)
            sandbox__init_setup_fail(SANDBOX__STEP_FDS, 0, errno);
    sandbox__init_st.devnull = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (sandbox__init_st.devnull < 0)
        sandbox__init_setup_fail(SANDBOX__STEP_FDS, 0, errno);
    if (fd > 2)
        close(fd);
}

static void wait_go(void)
{
    struct sandbox__msg m;
    ssize_t n;
    do
        n = recv(sandbox__init_st.ctl, &m, sizeof(m), 0);
    while (n < 0 && errno == EINTR);
    if (n != (ssize_t)sizeof(m) || m.type != SANDBOX__MSG_GO)
        _exit(1); /* the host gave up on us */
}

void sandbox__child_main(const struct sandbox__plan *plan, int ctl)
{
    sandbox__init_st.plan = plan;
    sandbox__init_st.ctl = ctl;
    sandbox__init_st.sigfd = sandbox__init_st.devnull = -1;

    /* The host blocked every signal around clone; its handlers must never
     * run here. SIGCHLD stays blocked for the signalfd. */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++)
        sigaction(sig, &dfl, NULL);

    setup_fds();
    prctl(PR_SET_NAME, "sandbox-init", 0, 0, 0); /* what ps shows, inside and out */
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        sandbox__init_setup_fail(SANDBOX__STEP_NNP, 0, errno);
    wait_go();
    /* Mapped to another host user (a root caller): become it, without the
     * supplementary groups the caller had. Our own ids need nothing. Raw
     * system calls: glibc's wrappers would signal the caller's other threads,
     * which do not exist in this copy. */
    if (plan->foreign_ids && !plan->insecure) {
        sandbox__init_preopen_binds(plan);
        if (syscall(SYS_setgroups, 0, NULL) != 0 || syscall(SYS_setresgid, 0, 0, 0) != 0 ||
            syscall(SYS_setresuid, 0, 0, 0) != 0)
            sandbox__init_setup_fail(SANDBOX__STEP_IDS, 0, errno);
    }
    setsid(); /* no controlling terminal: TIOCSTI and job-control signals */

    if (!plan->insecure) {
        for (size_t i = 0; i < plan->nops; i++) {
            int e = sandbox__init_apply_op(&plan->ops[i], i);
            if (e && !(e == ENOENT && plan->ops[i].optional))
                sandbox__init_setup_fail(SANDBOX__STEP_OP, (int)i, e);
        }
        if (sethostname(plan->hostname, sandbox__init_str_len(plan->hostname)) != 0)
            sandbox__init_setup_fail(SANDBOX__STEP_HOSTNAME, 0, errno);
        if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) /* keeps /proc/1/fd and mem private */
            sandbox__init_setup_fail(SANDBOX__STEP_CAPS, 0, errno);
        int e = drop_caps();
        if (e)
            sandbox__init_setup_fail(SANDBOX__STEP_CAPS, 0, e);
    } else if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) {
        sandbox__init_setup_fail(SANDBOX__STEP_SUBREAPER, 0, errno);
    }

    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    if (sigprocmask(SIG_SETMASK, &chld, NULL) != 0)
        sandbox__init_setup_fail(SANDBOX__STEP_SIGNALS, 0, errno);
    sandbox__init_st.sigfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sandbox__init_st.sigfd < 0)
        sandbox__init_setup_fail(SANDBOX__STEP_SIGNALS, 0, errno);

    if (plan->seccomp && prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, plan->seccomp, 0, 0) != 0)
        sandbox__init_setup_fail(SANDBOX__STEP_SECCOMP, 0, errno);

    struct sandbox__msg ready = {.type = SANDBOX__MSG_READY};
    if (sandbox__init_send_msg(&ready) != 0)
        _exit(1);
    sandbox__init_serve();
}
