/*
 * shell.h - an episode's shells inside its sandbox: one persistent bash
 * (cwd, variables and functions persist between calls) and any number of
 * background shells started with run_in_background.
 *
 * Each foreground command is written to a file in the episode's control
 * directory (read-only inside the sandbox at /run/cuda-agent) and sourced by
 * the persistent shell with stdin from /dev/null and stderr merged into
 * stdout, followed by an end marker carrying a per-call random nonce and the
 * exit status. Sourcing a file (rather than typing the command into the
 * shell) keeps framing intact whatever the command contains: an unclosed
 * quote or a heredoc is a syntax error of that file, not of the session.
 *
 * Output is captured up to a cap; past it the head and the tail are kept
 * with a visible marker in between, and the rest is read and discarded so
 * the command never blocks on a full pipe. On timeout every process the
 * shell started is killed (the shell itself survives, state intact). If the
 * shell dies (`exit`, a crash), the next call starts a new one and says so.
 * When a command returns, whatever it left running (`cmd &`, orphans) is
 * killed too: long-running jobs belong in background shells.
 *
 * Background shells run `bash -c CMD` with output drained continuously into
 * a bounded buffer (oldest output dropped first, counted); BashOutput
 * returns what is new since the last read. All pipes are drained by whichever
 * call is waiting, so a background shell never stalls while the foreground
 * one runs.
 *
 * A struct shells belongs to one thread (the episode supervisor).
 */
#ifndef CA_SHELL_H
#define CA_SHELL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/buf.h"
#include "core/err.h"
#include "sandbox/sandbox.h"

struct shells;

/* control_dir_host is the host path of the directory bound at /run/cuda-agent. */
int shells_new(struct sandbox *sb, const char *control_dir_host, struct shells **out,
               struct ca_err *err) WARN_UNUSED_RESULT;
void shells_free(struct shells *sh);

struct shell_result {
    int exit_code; /* the command's $? (128+N when killed by signal N) */
    bool timed_out;
    bool truncated;       /* output over the cap: head and tail kept */
    bool shell_restarted; /* the persistent shell had died and was started again */
    size_t output_bytes;  /* everything the command printed, kept or not */
    struct buf output;    /* stdout and stderr, interleaved as written */
    int64_t elapsed_us;
};
void shell_result_init(struct shell_result *r);
void shell_result_release(struct shell_result *r);

/* Run cmd in the persistent shell. timeout_ms <= 0: no limit. */
int shells_run(struct shells *sh, const char *cmd, int64_t timeout_ms, size_t out_max,
               struct shell_result *r, struct ca_err *err) WARN_UNUSED_RESULT;

/* Start a background shell; *id receives its id ("bash_1", ...). */
int shells_start_bg(struct shells *sh, const char *cmd, char *id, size_t id_len,
                    struct ca_err *err) WARN_UNUSED_RESULT;

struct shell_bg_status {
    bool running;
    int exit_code;  /* when !running */
    size_t dropped; /* bytes dropped from the buffer since the last read */
};
/* New output of a background shell since the last read (appended to out,
 * at most out_max bytes, the rest kept for the next read). */
int shells_bg_output(struct shells *sh, const char *id, struct buf *out, size_t out_max,
                     struct shell_bg_status *st, struct ca_err *err) WARN_UNUSED_RESULT;
int shells_bg_kill(struct shells *sh, const char *id, struct ca_err *err) WARN_UNUSED_RESULT;

/* Read whatever output is pending without blocking (call when idle). */
void shells_drain(struct shells *sh);
/* fds to poll for pending output (for an outer event loop); returns count. */
size_t shells_poll_fds(const struct shells *sh, int *fds, size_t max);

#endif
