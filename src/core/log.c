/*
 * log.c - one sink for human log lines, one (optional) for JSON-lines
 * events. Each line is formatted into a stack buffer and written with one
 * write(2), so concurrent writers never interleave within a line. Lines
 * longer than the buffer are cut, never split.
 */
#include "core/log.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/banned.h"

enum log_level log__level = LOG_LEVEL_WARN;
static int log_fd = 2;
static int event_fd = -1;

static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};

void log_set_level(enum log_level level)
{
    log__level = level;
}

int log_level_parse(const char *name)
{
    for (size_t i = 0; i < ARRAY_SIZE(level_names); i++)
        if (strcmp(name, level_names[i]) == 0)
            return (int)i;
    return -1;
}

void log_set_fd(int fd)
{
    log_fd = fd;
}

void log_set_event_fd(int fd)
{
    event_fd = fd;
}

bool log_events_on(void)
{
    return event_fd >= 0;
}

static void write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return; /* a broken log sink must not take the program down */
        p += w;
        n -= (size_t)w;
    }
}

static size_t fmt_time(char *out, size_t n)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t k = strftime(out, n, "%Y-%m-%dT%H:%M:%S", &tm);
    int m = snprintf(out + k, n - k, ".%03ldZ", ts.tv_nsec / 1000000);
    return k + (m > 0 ? (size_t)m : 0);
}

void log__write(enum log_level level, const char *file, int line, const char *fmt, ...)
{
    char msg[2048];
    size_t n = fmt_time(msg, sizeof(msg));
    int k = snprintf(msg + n, sizeof(msg) - n, " %-5s ", level_names[level]);
    n += (size_t)k;
    if (log__level >= LOG_LEVEL_DEBUG) {
        const char *base = strrchr(file, '/');
        k = snprintf(msg + n, sizeof(msg) - n, "%s:%d: ", base ? base + 1 : file, line);
        n += (size_t)k;
    }
    va_list ap;
    va_start(ap, fmt);
    k = vsnprintf(msg + n, sizeof(msg) - n, fmt, ap);
    va_end(ap);
    n = (k < 0 || (size_t)k >= sizeof(msg) - n - 1) ? sizeof(msg) - 2 : n + (size_t)k;
    msg[n++] = '\n';
    write_all(log_fd, msg, n);
}

void log_event(const char *name, int64_t elapsed_us, json_t *fields)
{
    if (event_fd < 0) {
        json_decref(fields);
        return;
    }
    json_t *ev = json_object();
    char ts[64];
    fmt_time(ts, sizeof(ts));
    json_object_set_new(ev, "ts", json_string(ts));
    json_object_set_new(ev, "event", json_string(name));
    if (elapsed_us >= 0)
        json_object_set_new(ev, "elapsed_us", json_integer(elapsed_us));
    if (json_is_object(fields))
        json_object_update(ev, fields);
    json_decref(fields);
    char *line = json_dumps(ev, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(ev);
    if (!line)
        return;
    size_t len = strlen(line);
    char *withnl = xmalloc(len + 2);
    memcpy(withnl, line, len);
    withnl[len] = '\n';
    write_all(event_fd, withnl, len + 1);
    free(withnl);
    free(line);
}
