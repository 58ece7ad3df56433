/*
 * err.c - error codes to text, and the caller-provided error buffer.
 */
#include "core/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/banned.h"

const char *ca_strerror(int code)
{
    switch (code) {
    case 0:
        return "success";
    case CA_ETOOBIG:
        return "input over a size limit";
    case CA_EPARSE:
        return "malformed input";
    case CA_EUTF8:
        return "invalid UTF-8";
    case CA_EESCAPE:
        return "path escapes its root";
    case CA_EDUP:
        return "duplicate";
    case CA_ENOTFOUND:
        return "not found";
    case CA_EAMBIGUOUS:
        return "ambiguous";
    case CA_ETIMEOUT:
        return "timed out";
    case CA_ECHILD:
        return "child process failed";
    case CA_EUSAGE:
        return "bad usage";
    case CA_EUNAVAIL:
        return "component unavailable";
    default:
        break;
    }
    if (code < 0 && code > -4096)
        return strerror(-code);
    return "unknown error";
}

static void set_cut(char *msg, int n)
{
    /* vsnprintf cut the message: say so rather than end mid-word silently. */
    if (n >= CA_ERR_MSG_MAX)
        memcpy(msg + CA_ERR_MSG_MAX - 4, "...", 4);
}

int err_setf(struct ca_err *err, int code, const char *fmt, ...)
{
    if (!err)
        return code;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
    set_cut(err->msg, n);
    err->code = code;
    return code;
}

void err_prefix(struct ca_err *err, const char *fmt, ...)
{
    if (!err)
        return;
    char prefix[CA_ERR_MSG_MAX], old[CA_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof(old));
    int n = snprintf(err->msg, sizeof(err->msg), "%s: %s", prefix, old);
    set_cut(err->msg, n);
}

void err_clear(struct ca_err *err)
{
    if (!err)
        return;
    err->code = 0;
    err->msg[0] = '\0';
}
