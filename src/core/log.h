/*
 * log.h - levelled logging to one sink (stderr by default) and JSON-lines
 * events for jobs and requests.
 *
 * The level and sink are the only global state; set them once at start-up
 * (from main) before threads start. The LOG_* macros do not evaluate their
 * arguments when the level is off. Writes are one write(2) per line, so
 * lines from several threads do not interleave.
 */
#ifndef CA_LOG_H
#define CA_LOG_H

#include <stdbool.h>
#include <stdint.h>

#include "core/util.h"

struct json_t;

enum log_level {
    LOG_LEVEL_ERROR = 0,
    LOG_LEVEL_WARN,
    LOG_LEVEL_INFO,
    LOG_LEVEL_DEBUG,
    LOG_LEVEL_TRACE,
};

extern enum log_level log__level;

void log_set_level(enum log_level level);
/* "error", "warn", "info", "debug", "trace" -> level; -1 if unknown. */
int log_level_parse(const char *name);
/* Where lines go (an fd we do not own); default 2. */
void log_set_fd(int fd);
/* Write events as JSON lines to fd (-1: off, the default). */
void log_set_event_fd(int fd);

void log__write(enum log_level level, const char *file, int line, const char *fmt, ...)
    CA_PRINTF(4, 5);

#define LOG__AT(lvl, ...)                                                                          \
    do {                                                                                           \
        if (log__level >= (lvl))                                                                   \
            log__write((lvl), __FILE__, __LINE__, __VA_ARGS__);                                    \
    } while (0)
#define LOG_ERROR(...) LOG__AT(LOG_LEVEL_ERROR, __VA_ARGS__)
#define LOG_WARN(...) LOG__AT(LOG_LEVEL_WARN, __VA_ARGS__)
#define LOG_INFO(...) LOG__AT(LOG_LEVEL_INFO, __VA_ARGS__)
#define LOG_DEBUG(...) LOG__AT(LOG_LEVEL_DEBUG, __VA_ARGS__)
#define LOG_TRACE(...) LOG__AT(LOG_LEVEL_TRACE, __VA_ARGS__)

bool log_events_on(void);
/*
 * Emit one event line {"ts":..., "event":name, "elapsed_us":..., ...fields}.
 * Takes ownership of `fields` (a JSON object, may be NULL). elapsed_us < 0
 * leaves that key out. No-op (but still frees fields) when events are off.
 */
void log_event(const char *name, int64_t elapsed_us, struct json_t *fields);

#endif
