/*
 * compile_run.c - running one compiler, directly or in a sandbox whose workspace is
 * the directory it works in, its output and how it ended kept in a struct compile__run.
 *
 * Safe to call from any thread: a run touches only its own struct and the build's
 * read-only context.
 */
#include "eval/compile_internal.h"
#include "eval/cpuplan.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "core/log.h"
#include "core/proc.h"
#include "sandbox/sandbox.h"
#include "core/banned.h"

#define ENV_BIN "/usr/bin/env"
/* Per compiler process (RLIMIT_AS) and per sandbox (cgroup memory). */
#define SANDBOX_COMPILE_AS ((uint64_t)16 << 30)
#define SANDBOX_COMPILE_MEMORY ((uint64_t)8 << 30)

void compile__run_init(struct compile__run *r)
{
    *r = (struct compile__run){0};
    buf_init(&r->out, 2 * COMPILE__RUN_OUTPUT_MAX + 64);
}

void compile__run_release(struct compile__run *r)
{
    buf_release(&r->out);
}

static void run_direct(const struct compile__ctx *c, const char *dir, char *const *argv,
                       struct compile__run *r)
{
    struct proc_opts o = {.argv = (const char *const *)argv,
                          .env = (const char *const *)c->env.v,
                          .cwd = dir,
                          .out_max = COMPILE__RUN_OUTPUT_MAX,
                          .merge_stderr = true,
                          .timeout_ms = c->timeout_ms};
    struct proc_result pr;
    proc_result_init(&pr);
    r->rc = proc_run(&o, &pr, &r->err);
    if (!r->rc) {
        r->ok = proc_ok(&pr);
        r->timed_out = pr.timed_out;
        struct buf how;
        buf_init(&how, sizeof(r->how) - 1);
        if (proc_describe(&pr, c->timeout_ms, &how) == 0)
            snprintf(r->how, sizeof(r->how), "%s", how.data);
        buf_release(&how);
        if (buf_add(&r->out, pr.out.data, pr.out.len) ||
            (pr.out_truncated && buf_addstr(&r->out, "\n[output truncated]\n")))
            BUG("run output over its bound");
    }
    r->elapsed_us = pr.elapsed_us;
    proc_result_release(&pr);
}

/* strsignal is not thread-safe; these are the signals a compiler dies of. */
static const char *signal_name(int sig)
{
    switch (sig) {
    case SIGKILL:
        return "SIGKILL";
    case SIGSEGV:
        return "SIGSEGV";
    case SIGABRT:
        return "SIGABRT";
    case SIGBUS:
        return "SIGBUS";
    case SIGTERM:
        return "SIGTERM";
    case SIGXCPU:
        return "SIGXCPU (CPU time limit)";
    case SIGXFSZ:
        return "SIGXFSZ (file size limit)";
    }
    return "a signal";
}

static void run_sandboxed(const struct compile__ctx *c, const char *dir, char *const *argv,
                          const char *const *ro, const struct compile__argv *binds,
                          struct compile__run *r)
{
    /* The sandbox starts programs with its own minimal environment: set ours through env -i. */
    struct compile__argv full;
    compile__argv_init(&full);
    compile__argv_push(&full, ENV_BIN);
    compile__argv_push(&full, "-i");
    compile__argv_pushv(&full, &c->env);
    for (size_t i = 0; argv[i]; i++)
        compile__argv_push(&full, argv[i]);
    struct sandbox_opts so = {
        .workspace = dir,
        .ro_paths = ro,
        .extra_ro_binds = (const char *const *)binds->v,
        .hostname = "compile",
        /* Compilers are hungry: cicc on a large kernel, cc1plus on the torch headers. */
        .limits = {.cpu_seconds = (uint64_t)(c->timeout_ms / 1000) + 30,
                   .address_space = SANDBOX_COMPILE_AS,
                   .memory_bytes = SANDBOX_COMPILE_MEMORY},
    };
    struct sandbox_run_result sr;
    sandbox_run_result_init(&sr);
    int64_t t0 = ca_now_us();
    r->rc = sandbox_run(&so, (const char *const *)full.v, c->timeout_ms, COMPILE__RUN_OUTPUT_MAX,
                        &sr, &r->err);
    r->elapsed_us = ca_now_us() - t0;
    if (!r->rc) {
        r->timed_out = sr.timed_out;
        r->ok = !sr.timed_out && WIFEXITED(sr.status) && WEXITSTATUS(sr.status) == 0;
        if (sr.timed_out)
            snprintf(r->how, sizeof(r->how), "timed out after %lld ms", (long long)c->timeout_ms);
        else if (WIFSIGNALED(sr.status))
            snprintf(r->how, sizeof(r->how), "killed by %s", signal_name(WTERMSIG(sr.status)));
        else
            snprintf(r->how, sizeof(r->how), "exit %d", WEXITSTATUS(sr.status));
        if (buf_add(&r->out, sr.out.data, sr.out.len) ||
            buf_add(&r->out, sr.err.data, sr.err.len) ||
            ((sr.out_truncated || sr.err_truncated) &&
             buf_addstr(&r->out, "\n[output truncated]\n")))
            BUG("run output over its bound");
    }
    sandbox_run_result_release(&sr);
    compile__argv_release(&full);
}

static void run_tool_here(const struct compile__ctx *c, const char *dir,
                          const struct compile__argv *argv, const char *const *ro,
                          const struct compile__argv *binds, struct compile__run *r)
{
    /* A timed section on a GPU runner: the new compiler waits for it (bounded, cpuplan.h). */
    int64_t waited = cpuplan_defer_compile();
    if (waited > 0)
        LOG_DEBUG("compile: waited %lld ms for a timed section", (long long)waited);
    buf_reset(&r->out);
    r->rc = 0;
    r->ok = r->timed_out = false;
    r->how[0] = '\0';
    err_clear(&r->err);
    if (log__level >= LOG_LEVEL_DEBUG) {
        struct buf cmd;
        buf_init(&cmd, 8192);
        for (size_t i = 0; i < argv->n; i++)
            if (buf_addf(&cmd, "%s%s", i ? " " : "", argv->v[i]))
                break;
        LOG_DEBUG("compile: %s%s (in %s)", c->sandbox ? "[sandbox] " : "", cmd.data, dir);
        buf_release(&cmd);
    }
    if (c->sandbox)
        run_sandboxed(c, dir, argv->v, ro, binds, r);
    else
        run_direct(c, dir, argv->v, r);
}

/* One compiler run on a thread of its own, placed for compiling (cpuplan.h). */
struct tool_call {
    const struct compile__ctx *c;
    const char *dir;
    const struct compile__argv *argv, *binds;
    const char *const *ro;
    struct compile__run *r;
};

static void *tool_call_run(void *arg)
{
    struct tool_call *t = arg;
    (void)cpuplan_place_thread();
    run_tool_here(t->c, t->dir, t->argv, t->ro, t->binds, t->r);
    return NULL;
}

/*
 * Every compiler starts here. It inherits its affinity and nice value from the thread that
 * forks it: the pool's workers are placed for compiling once (cpuplan_place_thread); a thread
 * that is not (the build's own, for the precompiled header and the link) hands the run to a
 * short-lived placed thread, since its nice value could not be lowered again afterwards.
 */
void compile__run_tool(const struct compile__ctx *c, const char *dir,
                       const struct compile__argv *argv, const char *const *ro,
                       const struct compile__argv *binds, struct compile__run *r)
{
    if (cpuplan_thread_unplaced()) {
        struct tool_call t = {c, dir, argv, binds, ro, r};
        pthread_t th;
        if (pthread_create(&th, NULL, tool_call_run, &t) == 0) {
            pthread_join(th, NULL);
            return;
        }
        LOG_WARN("compile: no thread for a placed compiler run; running it unplaced");
    }
    run_tool_here(c, dir, argv, ro, binds, r);
}
