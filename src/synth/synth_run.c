/*
 * synth_run.c - the orchestration of `cuda-agent synth run`: the catalog, the worker pool, the
 * dispatch loop.
 *
 * One thread owns everything: --jobs worker processes (harness/synth_worker.py serve, each in its
 * own process group so a terminal's ^C reaches only us), one seed in flight per worker, and a
 * poll() loop over their stdout pipes with each task's deadline. An answer is recorded in the
 * store the moment it arrives. A worker that runs past the deadline is killed with its group and
 * the task recorded as rejected by "timeout"; one that dies (or writes something that is not an
 * answer) is recorded as "crash"; either way a fresh worker takes its place. On *stop the loop
 * ends, the workers are killed and the seeds in flight stay unrecorded, so a resumed run does
 * them: nothing recorded is lost or done twice.
 */
#include "synth/synth.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/hash.h"
#include "core/json.h"
#include "core/limits.h"
#include "core/log.h"
#include "core/proc.h"
#include "core/sv.h"
#include "core/util.h"
#include "eval/eval.h"
#include "llm/llm.h"
#include "synth/synth_internal.h"
#include "core/banned.h"

#define WORKER_SCRIPT "synth_worker.py"
#define READY_TIMEOUT_MS (300 * 1000)
#define CATALOG_TIMEOUT_MS (300 * 1000)
#define EXIT_NO_TORCH 3
#define EXIT_BAD_INPUT 2

void synth_opts_init(struct synth_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->seed_lo = 0;
    o->seed_hi = 99;
    o->jobs = 1;
    o->threads = 1;
    o->device = "auto";
    o->compile_backend = "inductor";
    o->min_ms = 1.0;
    o->max_ms = 100.0;
    o->max_similarity = 0.9;
    o->timeout_ms = 120 * 1000;
    o->timing_ms = 300;
    o->parquet = true;
}

struct worker {
    struct proc_child child;
    struct buf in; /* bytes read, not yet a whole line */
    int64_t seed;  /* in flight; -1: idle */
    int64_t deadline_us;
    bool drafting; /* LLM mode: the request in flight asks for the draft */
};

struct run {
    const struct synth_opts *o;
    struct synth_store *store;
    struct worker *w;
    int nw;
    char *script, *config_line;
    char stream[64];
    int log_fd;
    int64_t next_seed;
    struct synth_stats *st;
    struct llm_client *llm; /* LLM mode */
};

static int harness_script(struct buf *script, struct ca_err *err)
{
    struct buf cache, dir;
    buf_init(&cache, CA_LIMIT_PATH);
    buf_init(&dir, CA_LIMIT_PATH);
    int rc = fs_cache_dir(&cache, NULL, err);
    if (rc == 0)
        rc = eval_harness_dir(cache.data, &dir, err);
    if (rc == 0 && fs_join(script, dir.data, WORKER_SCRIPT))
        rc = err_setf(err, CA_ETOOBIG, "harness path too long");
    buf_release(&cache);
    buf_release(&dir);
    return rc;
}

/* The last non-empty line of b, for a message. */
static struct sv last_line(const struct buf *b)
{
    struct sv s = sv_rtrim(sv_from(b->data, b->len));
    size_t i = s.len;
    while (i > 0 && s.p[i - 1] != '\n')
        i--;
    return sv_trim(sv_sub(s, i, s.len - i));
}

int synth_catalog(const char *out_path, const char *const *extra, int nextra, bool transformers,
                  struct ca_err *err)
{
    struct buf script;
    buf_init(&script, CA_LIMIT_PATH);
    int rc = harness_script(&script, err);
    if (rc) {
        buf_release(&script);
        return rc;
    }
    const char **argv = xcalloc((size_t)nextra * 2 + 5, sizeof(*argv));
    int n = 0;
    argv[n++] = eval_python();
    argv[n++] = script.data;
    argv[n++] = "catalog";
    for (int i = 0; i < nextra; i++) {
        argv[n++] = "--extra";
        argv[n++] = extra[i];
    }
    if (!transformers)
        argv[n++] = "--no-transformers";
    struct proc_opts po = {
        .argv = argv, .out_max = SYNTH_LIMIT_CATALOG, .timeout_ms = CATALOG_TIMEOUT_MS};
    struct proc_result res;
    proc_result_init(&res);
    rc = proc_run(&po, &res, err);
    if (rc) {
        rc = err_setf(err, CA_EUNAVAIL,
                      "cannot run %s (set CUDA_AGENT_PYTHON to a python3 with "
                      "PyTorch): %s",
                      argv[0], err->msg);
        goto out;
    }
    struct sv why = last_line(&res.err);
    if (!proc_ok(&res)) {
        if (!res.signaled && res.exit_code == EXIT_NO_TORCH)
            rc = err_setf(err, CA_EUNAVAIL, "crawling the catalog: " SV_FMT, SV_ARG(why));
        else if (!res.signaled && res.exit_code == EXIT_BAD_INPUT)
            rc = err_setf(err, CA_EPARSE, SV_FMT, SV_ARG(why));
        else
            rc = err_setf(err, CA_ECHILD, "crawling the catalog failed: " SV_FMT, SV_ARG(why));
        goto out;
    }
    if (res.out_truncated) {
        rc = err_setf(err, CA_ETOOBIG, "the catalog is over %d MiB", SYNTH_LIMIT_CATALOG >> 20);
        goto out;
    }
    rc = fs_write_atomic(out_path, res.out.data, res.out.len, 0644, err);
out:
    proc_result_release(&res);
    free(argv);
    buf_release(&script);
    return rc;
}

/* Check --ops against the catalog file's operators (a clear error naming the unknown one);
 * fp receives a hash of the operators' entries (jansson, sorted keys: the same file gives the
 * same value on every machine), which the stream is made of. */
static int check_catalog(const char *path, const char *ops, json_t **ops_out, char *fp,
                         struct ca_err *err)
{
    struct buf text;
    buf_init(&text, SYNTH_LIMIT_CATALOG);
    json_t *cat = NULL;
    int rc = fs_read_file(path, SYNTH_LIMIT_CATALOG, &text, err);
    if (rc == 0)
        rc = jsonx_parse(sv_from(text.data, text.len), SYNTH_LIMIT_CATALOG, path, &cat, err);
    buf_release(&text);
    if (rc)
        return rc;
    json_t *known = json_object_get(cat, "ops");
    if (!json_is_object(known)) {
        json_decref(cat);
        return err_setf(err, CA_EPARSE, "%s: not a synth catalog (no \"ops\" object)", path);
    }
    char *canon = json_dumps(known, JSON_SORT_KEYS | JSON_COMPACT);
    hash64_hex(hash64(canon, strlen(canon)), fp);
    free(canon);
    *ops_out = json_null();
    if (ops) {
        json_t *list = json_array();
        struct sv rest = sv_from(ops, strlen(ops)), part;
        while (rest.len) {
            const char *comma = memchr(rest.p, ',', rest.len);
            size_t l = comma ? (size_t)(comma - rest.p) : rest.len;
            part = sv_trim(sv_sub(rest, 0, l));
            rest = comma ? sv_sub(rest, l + 1, rest.len - l - 1) : sv_from(rest.p, 0);
            if (!part.len)
                continue;
            char *name = xstrndup(part.p, part.len);
            if (!json_object_get(known, name)) {
                rc = err_setf(err, CA_ENOTFOUND,
                              "unknown operator \"%s\": not in the catalog %s (cuda-agent synth "
                              "catalog prints them)",
                              name, path);
                free(name);
                json_decref(list);
                json_decref(cat);
                return rc;
            }
            json_array_append_new(list, json_string(name));
            free(name);
        }
        if (json_array_size(list) == 0) {
            json_decref(list);
            json_decref(cat);
            return err_setf(err, CA_EUSAGE, "--ops names no operator");
        }
        json_decref(*ops_out);
        *ops_out = list;
    }
    json_decref(cat);
    return 0;
}

/* A copy of the catalog in DIR/catalogs/<fp>.json: the first part of every row's stream names
 * it, so a set can be traced back to the operator entries that made it. */
static int keep_catalog(const char *dir, const char *path, const char *fp, struct ca_err *err)
{
    struct buf sub, dst, text;
    buf_init(&sub, CA_LIMIT_PATH);
    buf_init(&dst, CA_LIMIT_PATH);
    buf_init(&text, SYNTH_LIMIT_CATALOG);
    int rc = fs_join(&sub, dir, "catalogs") ? CA_ETOOBIG : 0;
    if (rc == 0 && buf_addf(&dst, "%s/%s.json", sub.data, fp))
        rc = CA_ETOOBIG;
    if (rc)
        rc = err_setf(err, rc, "%s: path too long", dir);
    if (rc == 0 && !fs_is_file(dst.data)) {
        rc = fs_mkdirs(sub.data, 0755, err);
        if (rc == 0)
            rc = fs_read_file(path, SYNTH_LIMIT_CATALOG, &text, err);
        if (rc == 0)
            rc = fs_write_atomic(dst.data, text.data, text.len, 0644, err);
    }
    buf_release(&sub);
    buf_release(&dst);
    buf_release(&text);
    return rc;
}

static int write_line(int fd, const char *line, struct ca_err *err)
{
    int rc = fs_write_all(fd, line, strlen(line));
    if (rc == 0)
        rc = fs_write_all(fd, "\n", 1);
    return rc ? err_setf(err, rc, "writing to a synth worker: %s", ca_strerror(rc)) : 0;
}

/* Read what is there into w->in: bytes read, 0 at EOF, CA_ETOOBIG past the answer limit, or
 * -errno. */
static ssize_t read_some(struct worker *w)
{
    char chunk[65536];
    ssize_t n;
    do
        n = read(w->child.out_fd, chunk, sizeof(chunk));
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    if (n > 0 && buf_add(&w->in, chunk, (size_t)n))
        return CA_ETOOBIG; /* an answer past SYNTH_LIMIT_ANSWER */
    return n;
}

/* Pop one whole line from w->in into a heap string, or NULL. */
static char *pop_line(struct worker *w)
{
    char *nl = memchr(w->in.data, '\n', w->in.len);
    if (!nl)
        return NULL;
    size_t l = (size_t)(nl - w->in.data);
    char *line = xstrndup(w->in.data, l);
    buf_remove_prefix(&w->in, l + 1);
    return line;
}

static void worker_stop(struct worker *w)
{
    if (w->child.pid > 0)
        proc_child_kill(&w->child);
    w->child.pid = -1;
    w->seed = -1;
    buf_reset(&w->in);
}

/* Start a worker and send it the configuration; its ready line is read by worker_ready. */
static int worker_spawn(struct run *r, struct worker *w, struct ca_err *err)
{
    const char *argv[] = {eval_python(), r->script, "serve", NULL};
    struct proc_opts po = {.argv = argv};
    w->seed = -1;
    buf_reset(&w->in);
    int rc = proc_spawn(&po, r->log_fd, &w->child, err);
    if (rc)
        return err_setf(err, CA_EUNAVAIL,
                        "cannot start a synth worker (%s; set CUDA_AGENT_PYTHON "
                        "to a python3 with PyTorch): %s",
                        argv[0], err->msg);
    if ((rc = write_line(w->child.in_fd, r->config_line, err)))
        worker_stop(w);
    return rc;
}

/* Wait for a spawned worker's ready line; *ready gets it (caller frees). */
static int worker_ready(struct run *r, struct worker *w, json_t **ready, struct ca_err *err)
{
    int rc = 0;
    int64_t deadline = ca_now_us() + (int64_t)READY_TIMEOUT_MS * 1000;
    char *line = NULL;
    while (!(line = pop_line(w))) {
        if (r->o->stop && *r->o->stop) {
            rc = err_setf(err, -EINTR, "interrupted while a worker started");
            goto fail;
        }
        int64_t left = (deadline - ca_now_us()) / 1000;
        if (left <= 0) {
            rc = err_setf(err, CA_ETIMEOUT,
                          "a synth worker did not start in %d s (see %s/worker.log)",
                          READY_TIMEOUT_MS / 1000, r->o->out_dir);
            goto fail;
        }
        struct pollfd p = {.fd = w->child.out_fd, .events = POLLIN};
        int pr = poll(&p, 1, (int)(left < 200 ? left : 200));
        if (pr > 0 && read_some(w) <= 0) {
            rc = err_setf(err, CA_ECHILD, "a synth worker exited at start (see %s/worker.log)",
                          r->o->out_dir);
            goto fail;
        }
    }
    json_t *v = NULL;
    rc = jsonx_parse(sv_from(line, strlen(line)), SYNTH_LIMIT_ANSWER, "worker", &v, err);
    free(line);
    if (rc)
        goto fail;
    const char *msg = json_string_value(json_object_get(v, "error"));
    if (msg || !json_is_true(json_object_get(v, "ready"))) {
        bool torch = msg && strstr(msg, "torch is not importable");
        rc = err_setf(err, torch ? CA_EUNAVAIL : CA_EPARSE, "synth worker: %s%s",
                      msg ? msg : "no ready line",
                      torch ? " (install PyTorch, or set CUDA_AGENT_PYTHON)" : "");
        json_decref(v);
        goto fail;
    }
    *ready = v;
    return 0;
fail:
    worker_stop(w);
    return rc;
}

static int worker_start(struct run *r, struct worker *w, json_t **ready, struct ca_err *err)
{
    int rc = worker_spawn(r, w, err);
    return rc ? rc : worker_ready(r, w, ready, err);
}

/* The next seed of the range that the store does not hold, or -1. */
static int64_t next_seed(struct run *r)
{
    while (r->next_seed <= r->o->seed_hi) {
        int64_t s = r->next_seed++;
        bool busy = false;
        for (int i = 0; i < r->nw; i++)
            busy |= r->w[i].seed == s;
        if (!busy && !synth__store_has(r->store, r->stream, s))
            return s;
    }
    return -1;
}

static int record(struct run *r, json_t *answer, struct ca_err *err)
{
    bool dup;
    int rc = synth__store_record(r->store, r->stream, answer, &dup, err);
    if (rc)
        return rc;
    r->st->done++;
    r->st->duplicates += dup;
    if (!dup && json_is_true(json_object_get(answer, "ok")))
        r->st->accepted++;
    if (r->o->progress)
        fprintf(stderr, "\rsynth: %lld done, %lld accepted, %lld left   ", (long long)r->st->done,
                (long long)r->st->accepted, (long long)(r->st->planned - r->st->done));
    return 0;
}

static int record_failure(struct run *r, int64_t seed, const char *reason, struct ca_err *err)
{
    json_t *a = json_pack("{s:I, s:b, s:s, s:{}}", "seed", (json_int_t)seed, "ok", 0, "reason",
                          reason, "filters");
    int rc = record(r, a, err);
    json_decref(a);
    return rc;
}

/* A dead, hung or babbling worker: record its task, start another. */
static int replace_worker(struct run *r, struct worker *w, const char *why, struct ca_err *err)
{
    int64_t seed = w->seed;
    worker_stop(w);
    int rc = seed >= 0 ? record_failure(r, seed, why, err) : 0;
    json_t *ready = NULL;
    if (rc == 0)
        rc = worker_start(r, w, &ready, err);
    json_decref(ready);
    return rc;
}

static int dispatch(struct run *r, struct worker *w, struct ca_err *err)
{
    if (r->o->want > 0 && synth__store_count(r->store, true) >= r->o->want)
        return 0;
    int64_t seed = next_seed(r);
    if (seed < 0)
        return 0;
    char line[64];
    snprintf(line, sizeof(line), "{\"seed\": %lld%s}", (long long)seed,
             r->llm ? ", \"draft\": true" : "");
    w->drafting = r->llm != NULL;
    w->seed = seed;
    w->deadline_us = ca_now_us() + r->o->timeout_ms * 1000;
    int rc = write_line(w->child.in_fd, line, err);
    if (rc)
        return replace_worker(r, w, "crash: the worker closed its input", err);
    return 0;
}

/* LLM mode: the draft of w's seed arrived; ask the model, then have w filter its code. The
 * call blocks the loop, so every other task's deadline moves by the time it took. */
static int llm_step(struct run *r, struct worker *w, const json_t *a, struct ca_err *err)
{
    int64_t t0 = ca_now_us();
    char *code = NULL;
    struct ca_err lerr = {0};
    int rc = synth__llm_rewrite(r->llm, json_string_value(json_object_get(a, "draft")),
                                json_object_get(a, "ops"), w->seed, &code, &lerr);
    int64_t spent = ca_now_us() - t0;
    for (int i = 0; i < r->nw; i++)
        if (&r->w[i] != w && r->w[i].seed >= 0)
            r->w[i].deadline_us += spent;
    w->drafting = false;
    if (rc && r->o->stop && *r->o->stop) {
        w->seed = -1; /* cancelled by the stop: left unrecorded, so a resumed run does it */
        return 0;
    }
    if (rc) {
        char *why = xstrfmt("llm: %s", lerr.msg);
        int64_t seed = w->seed;
        w->seed = -1;
        rc = record_failure(r, seed, why, err);
        free(why);
        return rc;
    }
    json_t *ops = synth__ops_of(code);
    json_t *req = json_pack("{s:I, s:s, s:o, s:I}", "seed", (json_int_t)w->seed, "code", code,
                            "ops", ops, "depth", (json_int_t)json_array_size(ops));
    free(code);
    char *line = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    w->deadline_us = ca_now_us() + r->o->timeout_ms * 1000;
    rc = write_line(w->child.in_fd, line, err);
    free(line);
    if (rc)
        return replace_worker(r, w, "crash: the worker closed its input", err);
    return 0;
}

static int on_answer(struct run *r, struct worker *w, char *line, struct ca_err *err)
{
    json_t *a = NULL;
    struct ca_err perr = {0};
    int rc = jsonx_parse(sv_from(line, strlen(line)), SYNTH_LIMIT_ANSWER, "answer", &a, &perr);
    json_t *seed = a ? json_object_get(a, "seed") : NULL;
    if (rc || !json_is_integer(seed) || json_integer_value(seed) != w->seed) {
        json_decref(a);
        r->st->crashes++;
        return replace_worker(r, w, "crash: the worker wrote something that is not an answer", err);
    }
    if (w->drafting && json_is_string(json_object_get(a, "draft"))) {
        rc = llm_step(r, w, a, err);
        json_decref(a);
        return rc;
    }
    rc = record(r, a, err);
    json_decref(a);
    w->seed = -1;
    return rc;
}

static int loop(struct run *r, struct ca_err *err)
{
    struct pollfd *pfd = xcalloc((size_t)r->nw, sizeof(*pfd));
    int rc = 0;
    for (;;) {
        if (r->o->stop && *r->o->stop) {
            r->st->interrupted = true;
            break;
        }
        int busy = 0;
        for (int i = 0; i < r->nw && rc == 0; i++)
            if (r->w[i].seed < 0)
                rc = dispatch(r, &r->w[i], err);
        if (rc)
            break;
        int64_t now = ca_now_us(), wait_ms = 200;
        for (int i = 0; i < r->nw; i++) {
            pfd[i].fd = r->w[i].seed >= 0 ? r->w[i].child.out_fd : -1;
            pfd[i].events = POLLIN;
            pfd[i].revents = 0;
            if (r->w[i].seed >= 0) {
                busy++;
                int64_t left = (r->w[i].deadline_us - now) / 1000;
                if (left < wait_ms)
                    wait_ms = left < 0 ? 0 : left;
            }
        }
        if (!busy)
            break;
        if (poll(pfd, (nfds_t)r->nw, (int)wait_ms) < 0 && errno != EINTR) {
            rc = err_setf(err, -errno, "poll: %s", strerror(errno));
            break;
        }
        for (int i = 0; i < r->nw && rc == 0; i++) {
            struct worker *w = &r->w[i];
            if (w->seed < 0 || !(pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            ssize_t n = read_some(w);
            if (n <= 0) {
                r->st->crashes++;
                rc = replace_worker(r, w,
                                    n == CA_ETOOBIG
                                        ? "crash: the answer is over the size limit"
                                        : "crash: the worker died while filtering this task "
                                          "(see worker.log)",
                                    err);
                continue;
            }
            char *line = pop_line(w);
            if (line) {
                rc = on_answer(r, w, line, err);
                free(line);
            }
        }
        now = ca_now_us();
        for (int i = 0; i < r->nw && rc == 0; i++) {
            struct worker *w = &r->w[i];
            if (w->seed >= 0 && now > w->deadline_us) {
                char why[128];
                snprintf(why, sizeof(why), "timeout: no answer in %lld ms",
                         (long long)r->o->timeout_ms);
                r->st->timeouts++;
                rc = replace_worker(r, w, why, err);
            }
        }
        if (rc)
            break;
    }
    free(pfd);
    return rc;
}

static int check_opts(const struct synth_opts *o, struct ca_err *err)
{
    if (!o->out_dir || !*o->out_dir)
        return err_setf(err, CA_EUSAGE, "give an output folder (--out DIR)");
    if (o->seed_lo < 0 || o->seed_hi < o->seed_lo || o->seed_hi - o->seed_lo >= SYNTH_MAX_SEEDS)
        return err_setf(err, CA_EUSAGE,
                        "bad seed range %lld-%lld: LO-HI with 0 <= LO <= HI and "
                        "at most %d seeds",
                        (long long)o->seed_lo, (long long)o->seed_hi, SYNTH_MAX_SEEDS);
    if (o->jobs < 1 || o->jobs > SYNTH_MAX_JOBS)
        return err_setf(err, CA_EUSAGE, "--jobs %d: 1..%d", o->jobs, SYNTH_MAX_JOBS);
    if (!(o->min_ms >= 0) || !(o->max_ms > o->min_ms))
        return err_setf(err, CA_EUSAGE, "bad runtime window [%g, %g] ms: need 0 <= MIN < MAX",
                        o->min_ms, o->max_ms);
    if (!(o->max_similarity >= 0 && o->max_similarity <= 1))
        return err_setf(err, CA_EUSAGE, "--max-similarity %g: 0..1", o->max_similarity);
    if (strcmp(o->device, "auto") && strcmp(o->device, "cpu") && strcmp(o->device, "cuda"))
        return err_setf(err, CA_EUSAGE, "--device %s: auto, cpu or cuda", o->device);
    if (o->corpus && !fs_is_dir(o->corpus))
        return err_setf(err, -ENOENT, "--decontaminate %s: no such directory", o->corpus);
    if (o->depths) {
        /* The worker parses them too; checking here gives the error before torch starts. */
        struct sv rest = sv_from(o->depths, strlen(o->depths));
        while (rest.len) {
            const char *comma = memchr(rest.p, ',', rest.len);
            size_t l = comma ? (size_t)(comma - rest.p) : rest.len;
            struct sv part = sv_trim(sv_sub(rest, 0, l));
            rest = comma ? sv_sub(rest, l + 1, rest.len - l - 1) : sv_from(rest.p, 0);
            char tmp[64];
            snprintf(tmp, sizeof(tmp), SV_FMT, SV_ARG(part));
            char *colon = strchr(tmp, ':'), *end = NULL;
            long d = colon ? strtol(tmp, &end, 10) : 0;
            double wgt = colon ? strtod(colon + 1, NULL) : -1;
            if (!colon || end != colon || d < 1 || d > 5 || !(wgt >= 0))
                return err_setf(err, CA_EUSAGE,
                                "bad --depths entry \"%s\": DEPTH:WEIGHT with "
                                "DEPTH 1..5 and WEIGHT >= 0, e.g. 2:83.8",
                                tmp);
        }
    }
    return 0;
}

int synth_run(const struct synth_opts *o, struct synth_stats *st, struct ca_err *err)
{
    memset(st, 0, sizeof(*st));
    int rc = check_opts(o, err);
    if (rc)
        return rc;
    int64_t t0 = ca_now_us();
    struct run r = {.o = o, .st = st, .log_fd = -1, .next_seed = o->seed_lo};
    struct buf script, catalog, logpath;
    buf_init(&script, CA_LIMIT_PATH);
    buf_init(&catalog, CA_LIMIT_PATH);
    buf_init(&logpath, CA_LIMIT_PATH);
    json_t *ops = NULL, *cfg = NULL, *ready = NULL, *settings = NULL;
    if ((rc = fs_mkdirs(o->out_dir, 0755, err)))
        goto out;
    if (access(o->out_dir, W_OK) != 0) {
        rc = err_setf(err, -errno, "%s: cannot write here (%s); give --out a writable folder",
                      o->out_dir, strerror(errno));
        goto out;
    }
    if (o->catalog) {
        char *abs = realpath(o->catalog, NULL);
        if (!abs) {
            rc = err_setf(err, -errno, "--catalog %s: %s", o->catalog, strerror(errno));
            goto out;
        }
        rc = buf_addstr(&catalog, abs);
        free(abs);
    } else {
        char *abs = realpath(o->out_dir, NULL);
        rc = abs ? fs_join(&catalog, abs, "catalog.json") : -errno;
        free(abs);
        if (rc == 0 && !fs_is_file(catalog.data))
            rc = synth_catalog(catalog.data, NULL, 0, true, err);
    }
    if (rc)
        goto out;
    char fp[HASH64_HEX_LEN + 1];
    if ((rc = check_catalog(catalog.data, o->ops, &ops, fp, err)))
        goto out;
    if ((rc = keep_catalog(o->out_dir, catalog.data, fp, err)))
        goto out;
    /* The stream: what decides the composition of a seed. */
    char *ops_text = json_dumps(ops, JSON_ENCODE_ANY | JSON_COMPACT);
    char *comp = xstrfmt("%s|%s|%d|%s", o->depths ? o->depths : "default", ops_text,
                         o->allow_stochastic, o->llm_model ? o->llm_model : "");
    free(ops_text);
    char hex[HASH64_HEX_LEN + 1];
    hash64_hex(hash64(comp, strlen(comp)), hex);
    free(comp);
    snprintf(r.stream, sizeof(r.stream), "%s-%.8s", fp, hex);
    char *corpus = o->corpus ? realpath(o->corpus, NULL) : NULL;
    settings = json_pack("{s:f, s:f, s:f, s:s, s:o}", "min_ms", o->min_ms, "max_ms", o->max_ms,
                         "max_similarity", o->max_similarity, "compile_backend", o->compile_backend,
                         "corpus", corpus ? json_string(corpus) : json_null());
    free(corpus);
    /* Plan before any worker starts (torch takes seconds to import): an existing store is
     * checked against the settings and tells which seeds are left. */
    int64_t have_accepted = 0;
    st->planned = o->seed_hi - o->seed_lo + 1;
    struct synth_store *s0 = NULL;
    struct ca_err e0 = {0};
    rc = synth__store_open(o->out_dir, NULL, &s0, &e0);
    if (rc == 0) {
        synth__store_free(s0);
        if ((rc = synth__store_open(o->out_dir, settings, &s0, err)))
            goto out;
        st->planned = 0;
        for (int64_t s = o->seed_lo; s <= o->seed_hi; s++)
            st->planned += !synth__store_has(s0, r.stream, s);
        have_accepted = synth__store_count(s0, true);
        synth__store_free(s0);
    } else if (rc != CA_ENOTFOUND) {
        *err = e0;
        goto out;
    }
    rc = 0;
    if (st->planned == 0 || (o->want > 0 && have_accepted >= o->want)) {
        if ((rc = synth__store_open(o->out_dir, settings, &r.store, err)))
            goto out;
        goto out;
    }
    if ((rc = harness_script(&script, err)))
        goto out;
    r.script = script.data;
    if ((rc = fs_join(&logpath, o->out_dir, "worker.log")))
        goto out;
    r.log_fd = open(logpath.data, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (r.log_fd < 0) {
        rc = err_setf(err, -errno, "%s: %s", logpath.data, strerror(errno));
        goto out;
    }
    cfg = json_pack("{s:s, s:s, s:s, s:f, s:f, s:f, s:O, s:s?, s:O, s:b, s:i, s:I}", "catalog",
                    catalog.data, "device", o->device, "compile_backend", o->compile_backend,
                    "min_ms", o->min_ms, "max_ms", o->max_ms, "max_similarity", o->max_similarity,
                    "corpus", json_object_get(settings, "corpus"), "depths", o->depths, "ops", ops,
                    "allow_stochastic", o->allow_stochastic, "threads", o->threads, "timing_ms",
                    (json_int_t)o->timing_ms);
    r.config_line = json_dumps(cfg, JSON_COMPACT);
    if (o->llm_model) {
        struct llm_opts lo;
        llm_opts_init(&lo);
        lo.model = o->llm_model;
        lo.base_url = o->llm_base_url;
        lo.temperature = 0.7;
        lo.cancel = o->stop;
        llm_opts_from_env(&lo);
        if (!lo.base_url) {
            rc = err_setf(err, CA_EUSAGE,
                          "--llm-model needs a server: --llm-base-url URL or "
                          "CUDA_AGENT_BASE_URL / OPENAI_BASE_URL");
            goto out;
        }
        if ((rc = llm_client_new(&lo, &r.llm, err)))
            goto out;
    }
    /* More workers than seeds to do would only cost start-up time. */
    r.nw = st->planned < o->jobs ? (int)st->planned : o->jobs;
    r.w = xcalloc((size_t)o->jobs, sizeof(*r.w));
    for (int i = 0; i < o->jobs; i++) {
        r.w[i].child.pid = -1;
        r.w[i].seed = -1;
        buf_init(&r.w[i].in, SYNTH_LIMIT_ANSWER);
    }
    /* Spawn them all, then wait: they import torch side by side. */
    for (int i = 0; i < r.nw && rc == 0; i++)
        rc = worker_spawn(&r, &r.w[i], err);
    for (int i = 0; i < r.nw && rc == 0; i++) {
        json_t *rd = NULL;
        rc = worker_ready(&r, &r.w[i], &rd, err);
        if (rc == 0 && !ready)
            ready = rd;
        else
            json_decref(rd);
    }
    if (rc)
        goto out;
    /* The device the workers resolved ("auto") is a filter setting too. */
    const char *device = json_string_value(json_object_get(ready, "device"));
    json_object_set_new(settings, "device", json_string(device ? device : o->device));
    if ((rc = synth__store_open(o->out_dir, settings, &r.store, err)))
        goto out;
    rc = loop(&r, err);
    if (o->progress)
        fputc('\n', stderr);
out:
    for (int i = 0; r.w && i < o->jobs; i++) {
        worker_stop(&r.w[i]);
        buf_release(&r.w[i].in);
    }
    free(r.w);
    llm_client_free(r.llm);
    bool have_store = r.store != NULL;
    if (r.store)
        st->total_accepted = synth__store_count(r.store, true);
    synth__store_free(r.store);
    if (rc == -EINTR && o->stop && *o->stop) {
        st->interrupted = true;
        rc = 0;
    }
    if (rc == 0 && have_store) { /* none when stopped before the workers were up */
        int64_t n;
        rc = synth_export(o->out_dir, o->parquet, &n, err);
    }
    if (r.log_fd >= 0)
        close(r.log_fd);
    free(r.config_line);
    json_decref(ops);
    json_decref(cfg);
    json_decref(ready);
    json_decref(settings);
    buf_release(&script);
    buf_release(&catalog);
    buf_release(&logpath);
    st->wall_s = (double)(ca_now_us() - t0) / 1e6;
    return rc;
}
