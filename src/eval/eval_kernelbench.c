/*
 * eval_kernelbench.c - KernelBench single files: from one Python file whose ModelNew calls
 * kernels built by torch.utils.cpp_extension.load_inline, the sources a workspace would hold.
 *
 * The evaluator never lets the candidate run load_inline (torch's own JIT build: slow, unsandboxed
 * and outside the compile cache). The embedded harness/kernelbench_extract.py reads the file as a
 * syntax tree and writes the load_inline sources out as kernels/ files and model_new.py; the
 * normal pipeline (policy, compile pool, harness) then treats them as a workspace's. The script
 * comes from the binary and runs as `python3 -I -S -B - FILE OUT_DIR`, like the model_new.py
 * policy: isolated from PYTHON* variables and site-packages, standard library only. Its verdict
 * is one JSON line; anything else (a crash, a timeout, other output) is an error here, never an
 * empty extraction.
 */
#include "eval/eval_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/embed.h"
#include "core/fs.h"
#include "core/json.h"
#include "core/limits.h"
#include "core/proc.h"
#include "core/sv.h"
#include "core/util.h"
#include "core/banned.h"

#define SCRIPT "harness/kernelbench_extract.py"
#define TIMEOUT_MS 30000
#define OUT_MAX (1 * CA_MIB)
#define ERR_MAX (64 * CA_KIB)
/* Exit status of the script for a file that cannot be extracted. */
#define EXIT_INPUT 2

static struct sv last_line(const struct buf *b)
{
    struct sv s = sv_rtrim(sv_from(b->data, b->len));
    size_t i = s.len;
    while (i > 0 && s.p[i - 1] != '\n')
        i--;
    return sv_trim(sv_sub(s, i, s.len - i));
}

static int read_answer(const struct proc_result *res, json_t **summary, json_t **problem,
                       struct ca_err *err)
{
    json_t *root = NULL;
    int rc =
        jsonx_parse(last_line(&res->out), OUT_MAX, "kernelbench_extract.py's answer", &root, err);
    if (rc)
        return rc;
    json_t *e = json_object_get(root, "error");
    if (res->exit_code == EXIT_INPUT) {
        int64_t line = 0;
        const char *msg = NULL;
        if (!json_is_object(e) ||
            jsonx_get_int(e, "line", true, &line, "an extraction error", err) ||
            jsonx_get_str(e, "message", true, &msg, "an extraction error", err)) {
            json_decref(root);
            return err_setf(err, CA_EPARSE, "kernelbench_extract.py failed without saying why");
        }
        *problem = json_pack("{s:I, s:s}", "line", (json_int_t)line, "message", msg);
        json_decref(root);
        return 0;
    }
    json_t *modules = NULL, *functions = NULL;
    rc = jsonx_get_array(root, "modules", true, &modules, "kernelbench_extract.py's answer", err);
    if (!rc)
        rc = jsonx_get_array(root, "functions", true, &functions, "kernelbench_extract.py's answer",
                             err);
    if (!rc && json_array_size(modules) == 0)
        rc = err_setf(err, CA_EPARSE, "kernelbench_extract.py extracted no module");
    if (!rc && !json_is_object(json_object_get(root, "lines")))
        rc = err_setf(err, CA_EPARSE, "kernelbench_extract.py's answer has no \"lines\" object");
    if (rc) {
        json_decref(root);
        return rc;
    }
    *summary = root;
    return 0;
}

int eval__kernelbench_extract(const char *file, const char *out_dir, json_t **summary,
                              json_t **problem, struct ca_err *err)
{
    *summary = *problem = NULL;
    const struct embedded_file *script = embed_find(SCRIPT);
    if (!script)
        BUG("%s is not embedded in the binary", SCRIPT);
    if (!fs_is_file(file))
        return err_setf(err, -ENOENT, "%s: no such file (--kernelbench-file names a Python file)",
                        file);
    char *python = proc_which("python3");
    if (!python)
        return err_setf(err, CA_EUNAVAIL,
                        "%s: reading a KernelBench file needs python3, which is not in PATH "
                        "(install python3; the extraction uses only its standard library)",
                        file);
    const char *argv[] = {python, "-I", "-S", "-B", "-", file, out_dir, NULL};
    struct proc_opts opts = {
        .argv = argv,
        .stdin_data = script->data,
        .stdin_len = script->len,
        .out_max = OUT_MAX,
        .err_max = ERR_MAX,
        .timeout_ms = TIMEOUT_MS,
    };
    struct proc_result res;
    proc_result_init(&res);
    int rc = proc_run(&opts, &res, err);
    if (rc) {
        err_prefix(err, "%s: cannot run python3", file);
        goto out;
    }
    if (res.timed_out) {
        rc = err_setf(err, CA_ETIMEOUT, "%s: the KernelBench extraction ran past %d s", file,
                      TIMEOUT_MS / 1000);
    } else if (res.signaled || (res.exit_code != 0 && res.exit_code != EXIT_INPUT) ||
               res.out_truncated || res.out.len == 0) {
        struct buf how;
        buf_init(&how, CA_ERR_MSG_MAX);
        if (proc_describe(&res, TIMEOUT_MS, &how))
            buf_reset(&how);
        struct sv why = last_line(&res.err);
        rc = err_setf(err, CA_ECHILD, "%s: the KernelBench extraction failed (%s): " SV_FMT, file,
                      how.data, SV_ARG(why));
        buf_release(&how);
    } else {
        rc = read_answer(&res, summary, problem, err);
        if (rc)
            err_prefix(err, "%s", file);
    }
out:
    proc_result_release(&res);
    free(python);
    return rc;
}

unsigned eval__kernelbench_origin(void *lines, const char *file, unsigned line)
{
    if (strcmp(file, "model_new.py") == 0)
        return line;
    size_t i;
    json_t *run;
    json_array_foreach(json_object_get(lines, file), i, run)
    {
        json_int_t at = json_integer_value(json_array_get(run, 0));
        json_int_t from = json_integer_value(json_array_get(run, 1));
        json_int_t count = json_integer_value(json_array_get(run, 2));
        if (at > 0 && from > 0 && line >= at && line - at < count && from + (line - at) <= UINT_MAX)
            return (unsigned)(from + (line - at));
    }
    return 0;
}

/* "kernels/NAME:LINE[:COL]:" at the start of `line`: *path "kernels/NAME", *at LINE, *col
 * ":COL" or empty, *rest from the colon that ends them on; else false. */
static bool log_place(struct sv line, struct sv *path, unsigned *at, struct sv *col,
                      struct sv *rest)
{
    if (!sv_starts_with(line, sv_cstr("kernels/")))
        return false;
    long colon = sv_find_ch(line, ':');
    if (colon <= 0)
        return false;
    *path = sv_sub(line, 0, (size_t)colon);
    for (size_t i = 0; i < path->len; i++)
        if (path->p[i] == ' ' || path->p[i] == '\t')
            return false;
    struct sv tail = sv_sub(line, (size_t)colon + 1, line.len - (size_t)colon - 1);
    long end = sv_find_ch(tail, ':');
    uint64_t n;
    struct ca_err ignored;
    if (end <= 0 || sv_parse_u64(sv_sub(tail, 0, (size_t)end), &n, "line", &ignored) || n == 0 ||
        n > UINT_MAX)
        return false;
    *at = (unsigned)n;
    *rest = sv_sub(tail, (size_t)end, tail.len - (size_t)end);
    size_t d = 1;
    while (d < rest->len && rest->p[d] >= '0' && rest->p[d] <= '9')
        d++;
    *col = sv_sub(*rest, 0, d > 1 && d < rest->len && rest->p[d] == ':' ? d : 0);
    *rest = sv_sub(*rest, col->len, rest->len - col->len);
    return true;
}

int eval__kernelbench_place_log(struct sv log, const char *file, json_t *lines, struct buf *out)
{
    struct sv line;
    bool nl;
    int rc = 0;
    while (rc == 0 && sv_next_line(&log, &line, &nl)) {
        struct sv path, col, rest;
        unsigned at = 0, from = 0;
        if (log_place(line, &path, &at, &col, &rest)) {
            char *name = sv_dup(path);
            from = eval__kernelbench_origin(lines, name, at);
            free(name);
        }
        if (from)
            rc = buf_addf(out, "%s:%u (" SV_FMT ":%u" SV_FMT ")" SV_FMT, file, from, SV_ARG(path),
                          at, SV_ARG(col), SV_ARG(rest));
        else
            rc = buf_add(out, line.p, line.len);
        if (rc == 0 && nl)
            rc = buf_addch(out, '\n');
    }
    return rc;
}
