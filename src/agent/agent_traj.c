/*
 * agent_traj.c - the trajectory file: writing its lines, opening it new or for
 * `run --resume`, and reading it back into a conversation.
 *
 * The writer appends one JSON line per record and fsyncs it, so a
 * file cut by a crash ends in at most one torn line. Loading keeps every
 * complete line and reports where they end, so the resumer can cut the torn
 * tail off before appending; a complete line that is not JSON is an error
 * (the file was damaged some other way, and guessing would corrupt it more).
 */
#include "agent/agent_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <string.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/json.h"
#include "core/limits.h"
#include "core/log.h"
#include "core/util.h"
#include "core/banned.h"

int agent_traj_load(const char *path, json_t **lines, size_t *good_bytes, struct ca_err *err)
{
    *lines = NULL;
    *good_bytes = 0;
    struct buf b;
    buf_init(&b, CA_LIMIT_TRAJECTORY_BYTES);
    int rc = fs_read_file(path, CA_LIMIT_TRAJECTORY_BYTES, &b, err);
    if (rc) {
        buf_release(&b);
        return rc;
    }
    json_t *arr = json_array();
    struct sv s = sv_from(b.data, b.len), line;
    bool nl;
    size_t lineno = 0;
    while (sv_next_line(&s, &line, &nl)) {
        lineno++;
        if (!nl)
            break; /* torn by a crash: dropped */
        size_t end = (size_t)(s.p - b.data);
        if (sv_trim(line).len == 0) {
            *good_bytes = end;
            continue;
        }
        char what[64];
        snprintf(what, sizeof(what), "line %zu", lineno);
        json_t *v;
        rc = jsonx_parse(line, CA_LIMIT_TRAJECTORY_LINE, what, &v, err);
        if (rc == 0 && !json_is_object(v)) {
            json_decref(v);
            rc = err_setf(err, CA_EPARSE, "line %zu is not a JSON object", lineno);
        }
        if (rc) {
            err_prefix(err, "%s", path);
            json_decref(arr);
            buf_release(&b);
            return rc;
        }
        json_array_append_new(arr, v);
        *good_bytes = end;
    }
    buf_release(&b);
    *lines = arr;
    return 0;
}

int agent__traj_append(struct agent__run *r, json_t *line, struct ca_err *err)
{
    struct buf b;
    buf_init(&b, CA_LIMIT_TRAJECTORY_LINE);
    int rc = jsonx_dump(line, 0, &b);
    if (rc) {
        /* Logprobs can be large; the line is still worth having without them. */
        json_object_del(line, "logprobs");
        json_object_del(line, "token_ids");
        buf_reset(&b);
        rc = jsonx_dump(line, 0, &b);
        if (rc == 0)
            LOG_WARN("trajectory line of turn %" PRId64 " written without logprobs: over %zu bytes",
                     r->turn, (size_t)CA_LIMIT_TRAJECTORY_LINE);
    }
    rc = rc ? rc : buf_addch(&b, '\n');
    if (rc) {
        buf_release(&b);
        return err_setf(err, CA_ETOOBIG, "a trajectory line is over %zu bytes",
                        (size_t)CA_LIMIT_TRAJECTORY_LINE);
    }
    const char *p = b.data;
    size_t n = b.len;
    while (n) {
        ssize_t w = write(r->traj_fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            rc = err_setf(err, -errno, "cannot write %s: %s", r->traj_path, strerror(errno));
            break;
        }
        p += w;
        n -= (size_t)w;
    }
    int64_t t0 = ca_now_us();
    if (rc == 0 && fdatasync(r->traj_fd) != 0)
        rc = err_setf(err, -errno, "cannot sync %s: %s", r->traj_path, strerror(errno));
    r->last_sync_us = ca_now_us() - t0;
    buf_release(&b);
    return rc;
}

int agent__append_msg(struct agent__run *r, json_t *msg, struct ca_err *err)
{
    if (agent_conv_append(r->conv, msg))
        return err_setf(err, CA_ETOOBIG, "the conversation is over %zu bytes",
                        (size_t)CA_LIMIT_MODEL_REQUEST);
    return 0;
}

int agent__traj_replay(struct agent__run *r, const json_t *lines, struct ca_err *err)
{
    size_t i;
    const json_t *line;
    int rc = 0;
    json_array_foreach(lines, i, line)
    {
        const char *type = json_string_value(json_object_get(line, "type"));
        const json_t *msgs = NULL;
        if (type && strcmp(type, "header") == 0)
            msgs = json_object_get(line, "messages");
        else if (type && strcmp(type, "turn") == 0)
            msgs = json_object_get(line, "messages");
        else if (type && strcmp(type, "resume") == 0)
            msgs = json_object_get(line, "messages");
        else
            continue;
        if (!json_is_array(msgs))
            return err_setf(err, CA_EPARSE, "%s: line %zu has no \"messages\" array", r->traj_path,
                            i + 1);
        size_t j;
        const json_t *m;
        json_array_foreach(msgs, j, m)
        {
            if (!json_is_object(m) || !json_is_string(json_object_get(m, "role")))
                return err_setf(err, CA_EPARSE, "%s: line %zu: message %zu is not a message",
                                r->traj_path, i + 1, j + 1);
            rc = agent__append_msg(r, json_deep_copy(m), err);
            if (rc)
                return rc;
        }
        if (strcmp(type, "turn") != 0)
            continue;
        json_int_t t = json_integer_value(json_object_get(line, "turn"));
        if (t > r->turn)
            r->turn = t;
        const json_t *timings = json_object_get(line, "timings");
        r->model_us += (int64_t)(json_number_value(json_object_get(timings, "model_ms")) * 1000);
        r->tool_us += (int64_t)(json_number_value(json_object_get(timings, "tool_ms")) * 1000);
        const json_t *usage = json_object_get(line, "usage");
        json_int_t pt = json_integer_value(json_object_get(usage, "prompt_tokens"));
        if (pt > 0)
            r->prompt_tokens = pt;
        r->completion_tokens += json_integer_value(json_object_get(usage, "completion_tokens"));
        const json_t *ev = json_object_get(line, "evals");
        size_t k;
        const json_t *rec;
        json_array_foreach(ev, k, rec)
        {
            json_array_append(r->evals, (json_t *)rec);
            json_int_t seq = json_integer_value(json_object_get(rec, "seq"));
            if (seq > r->eval_seq)
                r->eval_seq = seq;
        }
    }
    return 0;
}

int agent__traj_open(struct agent__run *r, const json_t **header, json_t **lines,
                     struct ca_err *err)
{
    *lines = NULL;
    if (!r->o->resume) {
        if (fs_exists(r->traj_path))
            return err_setf(err, CA_EUSAGE,
                            "%s already holds a trajectory: continue it with --resume %s, or "
                            "choose another --out",
                            r->out_dir, r->out_dir);
        int rc = fs_mkdirs(r->out_dir, 0755, err);
        if (rc)
            return rc;
        r->traj_fd = open(r->traj_path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
        if (r->traj_fd < 0)
            return err_setf(err, -errno, "cannot create %s: %s", r->traj_path, strerror(errno));
        return 0;
    }
    size_t good;
    int rc = agent_traj_load(r->traj_path, lines, &good, err);
    if (rc == -ENOENT)
        return err_setf(err, CA_ENOTFOUND, "%s has no trajectory to resume (%s)", r->out_dir,
                        AGENT__TRAJ_FILE);
    if (rc)
        return rc;
    const json_t *first = json_array_get(*lines, 0);
    if (!first || !json_is_string(json_object_get(first, "type")) ||
        strcmp(json_string_value(json_object_get(first, "type")), "header") != 0)
        return err_setf(err, CA_EPARSE, "%s does not start with a header line", r->traj_path);
    /* An episode that ended for good is not resumed; one that the server, a
     * signal or the clock stopped is (its final line stays as a record). */
    const json_t *last = json_array_get(*lines, json_array_size(*lines) - 1);
    const char *type = json_string_value(json_object_get(last, "type"));
    const char *why = json_string_value(json_object_get(last, "stop_reason"));
    if (type && strcmp(type, "final") == 0 && why && strcmp(why, "model_error") != 0 &&
        strcmp(why, "interrupted") != 0 && strcmp(why, "wall_clock") != 0 &&
        !(strcmp(why, "max_turns") == 0 &&
          r->o->max_turns > json_integer_value(json_object_get(last, "turns"))))
        return err_setf(
            err, CA_EUSAGE, "the episode in %s already finished (%s); nothing to resume%s",
            r->out_dir, why,
            strcmp(why, "max_turns") == 0 ? " (give a higher --max-turns to go on)" : "");
    *header = first;
    r->traj_fd = open(r->traj_path, O_WRONLY | O_APPEND | O_CLOEXEC);
    if (r->traj_fd < 0)
        return err_setf(err, -errno, "cannot open %s: %s", r->traj_path, strerror(errno));
    if (ftruncate(r->traj_fd, (off_t)good) != 0) /* drop a line torn by the crash */
        return err_setf(err, -errno, "cannot truncate %s: %s", r->traj_path, strerror(errno));
    return 0;
}
