/*
 * msg.h - length-prefixed JSON messages over unix stream sockets: the framing
 * of every local request/reply protocol (episode supervisors, the evaluator
 * service, the workspace commands' evaluator socket).
 *
 * A message is a 4-byte big-endian length and that many bytes of JSON, at
 * most CA_LIMIT_REQUEST_BYTES. Deadlines are absolute ca_now_us() times;
 * INT64_MAX waits forever. Stateless and thread-safe.
 */
#ifndef CA_MSG_H
#define CA_MSG_H

#include <jansson.h>
#include <stdint.h>

#include "core/err.h"

/* Wait until fd is ready for events (POLLIN/POLLOUT): 0, CA_ETIMEOUT or -errno. */
int msg_wait(int fd, short events, int64_t deadline_us);

int msg_send(int fd, const json_t *msg, int64_t deadline_us, struct ca_err *err) WARN_UNUSED_RESULT;
/* *msg is a new reference on success. */
int msg_recv(int fd, json_t **msg, int64_t deadline_us, struct ca_err *err) WARN_UNUSED_RESULT;

/* A listening socket at path (a stale socket file there is replaced), mode 0600. */
int msg_listen(const char *path, int backlog, struct ca_err *err) WARN_UNUSED_RESULT;
/* A connected socket to path, or a negative code (-ENOENT, -ECONNREFUSED, ...). */
int msg_connect(const char *path, struct ca_err *err) WARN_UNUSED_RESULT;
/* Connect, send req, receive *reply, close: one request per connection. */
int msg_request(const char *path, const json_t *req, int64_t timeout_ms, json_t **reply,
                struct ca_err *err) WARN_UNUSED_RESULT;

#endif
