/*
 * bus_internal.h - shared between the files of the job bus (bus_conn.c: the connection and
 * command helpers; bus_job.c: jobs; bus_client.c; bus_worker.c; bus_fake.c: the test double).
 * Also used by the unit tests. Not part of the module's interface.
 */
#ifndef CA_BUS_INTERNAL_H
#define CA_BUS_INTERNAL_H

#include <hiredis/hiredis.h>
#include <stdatomic.h>

#include "bus/bus.h"
#include "core/limits.h"

struct bus__tls;

struct bus_conn {
    redisContext *ctx;    /* NULL or broken: reconnect before the next command */
    struct bus__tls *tls; /* rediss://: the relay under ctx (bus_tls.c), or NULL */
    struct bus_url url;
};

/*
 * rediss:// (bus_tls.c): a TCP connection to u's host and port, the TLS handshake (the server's
 * certificate and name verified) within timeout_ms, and a thread relaying between it and one
 * end of a socketpair; *plain_fd, the other end, is for redisConnectFd (which owns it after).
 * -1 with the reason in why. bus__tls_close once hiredis closed *plain_fd (redisFree).
 */
int bus__tls_open(const struct bus_url *u, int timeout_ms, struct bus__tls **out, int *plain_fd,
                  char *why, size_t cap) WARN_UNUSED_RESULT;
void bus__tls_close(struct bus__tls *t);
/* Why the relay's TLS connection ended ("TLS: ..."), once it has and OpenSSL said; else "". */
const char *bus__tls_why(const struct bus__tls *t);

/*
 * One command (binary-safe arguments); *reply is new (freeReplyObject) and never an error
 * reply. A lost connection or refusal is CA_EUNAVAIL (callers that outlive a restart retry);
 * a "LOADING" reply (Redis replaying its AOF) too; another error reply is -EPROTO.
 */
int bus__cmd(struct bus_conn *c, redisReply **reply, struct ca_err *err, int argc,
             const char **argv, const size_t *lens) WARN_UNUSED_RESULT;
/* Same with NUL-terminated string arguments: bus__cmds(c, &reply, err, "GET", key). The macro
 * ends the list with a typed NULL, so no call can forget it or pass an untyped one. */
int bus__cmds_(struct bus_conn *c, redisReply **reply, struct ca_err *err, ...) WARN_UNUSED_RESULT;
#define bus__cmds(c, reply, err, ...)                                                              \
    bus__cmds_((c), (reply), (err), __VA_ARGS__, (const char *)NULL)

/* Wall-clock microseconds (entries carry enqueue times that other machines read). */
int64_t bus__wall_us(void);

/* The blobs a client uploads (at most BUS_MAX_FILES + 2): data, length, digest; the count. */
size_t bus__job_blobs(const struct bus_job *job, const char **data, size_t *lens,
                      const char **shas);

/* ---- jobs as a worker reads them ---- */

struct bus__ref {
    char path[CA_LIMIT_PATH]; /* workspace-relative; "" for the task and KernelBench file */
    char sha[SHA256_HEX_LEN + 1];
    size_t size;
};

struct bus__spec {
    bool kernelbench;
    struct bus__ref files[BUS_MAX_FILES];
    size_t n_files;
    struct bus__ref task, kb;
    json_t *opts; /* checked request fields */
};

/*
 * Parse and check a job document whose SHA-256 the caller verified: version, kind, paths
 * (fs_check_relpath and workspace_path_writable, no duplicates), digests, sizes, options
 * (the allow-listed request fields only). CA_EPARSE naming what is wrong.
 */
int bus__spec_parse(const char *text, size_t len, struct bus__spec *spec,
                    struct ca_err *err) WARN_UNUSED_RESULT;
void bus__spec_release(struct bus__spec *spec);
/* Fetch every blob, check its size and SHA-256, write the job directory: dir/ws/..., dir/task.py
 * and dir/kernelbench.py. *req: the evaluator request for it (absolute paths under dir). */
int bus__materialise(struct bus_conn *c, const struct bus__spec *spec, const char *dir,
                     json_t **req, struct ca_err *err) WARN_UNUSED_RESULT;

/* Allowed option keys of a job (the evaluator request's, minus paths and keep_dir). */
extern const char *const bus__opt_keys[];

/* The test double's evaluation (bus_fake.c): spec "MS[:ok|garbage|hang]". */
int bus__fake_eval(const char *spec, const char *job_id, atomic_int *quit, json_t **report,
                   struct ca_err *err) WARN_UNUSED_RESULT;
int bus__fake_check(const char *spec, struct ca_err *err) WARN_UNUSED_RESULT;

#endif
