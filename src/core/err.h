/*
 * err.h - error codes and the caller-provided error buffer.
 *
 * Every fallible function returns 0 or a negative code: -errno for system
 * calls, or one of the CA_E* codes below (all below -4096, outside errno's
 * range). Details go into a struct ca_err the caller owns; functions accept
 * err == NULL when the caller only wants the code. Messages name the input
 * that was wrong and what to do about it.
 */
#ifndef CA_ERR_H
#define CA_ERR_H

#include "core/util.h"

enum {
    CA_EFIRST = -4200,
    CA_ETOOBIG,    /* input over a named limit (limits.h) */
    CA_EPARSE,     /* malformed input: JSON, task file, arguments */
    CA_EUTF8,      /* invalid UTF-8 */
    CA_EESCAPE,    /* path escapes its root (.., absolute, symlink) */
    CA_EDUP,       /* duplicate id or name */
    CA_ENOTFOUND,  /* a named thing (task, key, selector) does not exist */
    CA_EAMBIGUOUS, /* a selector matches several things */
    CA_ETIMEOUT,   /* a child or request ran past its time limit */
    CA_ECHILD,     /* a child process failed (exit status, signal, exec) */
    CA_EUSAGE,     /* bad command-line usage */
    CA_EUNAVAIL,   /* a needed component (python3, evaluator) is missing */
    CA_ELAST,
};

#define CA_ERR_MSG_MAX 256

struct ca_err {
    int code;
    char msg[CA_ERR_MSG_MAX];
};

/* A short static description of `code` (0, -errno or CA_E*). */
const char *ca_strerror(int code);

/*
 * Record code and message in *err (if err != NULL) and return code, so that
 * callers can write `return err_setf(err, CA_EPARSE, "...", ...);`.
 * A message longer than the buffer is cut, ending in "...".
 */
int err_setf(struct ca_err *err, int code, const char *fmt, ...) CA_PRINTF(3, 4);

/* Prefix the message already in *err with "<prefix>: " (for context). */
void err_prefix(struct ca_err *err, const char *fmt, ...) CA_PRINTF(2, 3);

void err_clear(struct ca_err *err);

#endif
