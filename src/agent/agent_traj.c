/*
 * agent_traj.c - reading a trajectory back for `run --resume`.
 *
 * The writer (agent.c) appends one JSON line per record and fsyncs it, so a
 * file cut by a crash ends in at most one torn line. Loading keeps every
 * complete line and reports where they end, so the resumer can cut the torn
 * tail off before appending; a complete line that is not JSON is an error
 * (the file was damaged some other way, and guessing would corrupt it more).
 */
#include "agent/agent_internal.h"

#include <string.h>

#include "core/fs.h"
#include "core/json.h"
#include "core/limits.h"
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
