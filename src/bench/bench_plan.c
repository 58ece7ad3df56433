/*
 * bench_plan.c - which tasks a bench run scores and what it evaluates for each.
 *
 * Tasks come from src/task (a KernelBench tree, a JSONL set) or, for the leaderboard corpus,
 * from the problem files its data.json names. Every selected task's code is written to
 * FILES/tasks/<id>.py: the evaluator reads exactly the code the database holds. Solutions:
 *   --solutions DIR   KernelBench's generate_samples layout
 *                     (level_<L>_problem_<N>_sample_<S>_kernel.py, one attempt per sample) or
 *                     a tree like the tasks' (level<L>/<N>_<Name>.py); a task without a file
 *                     is a planned failure ("missing"), as KernelBench counts it;
 *   --map FILE        JSONL lines {"task", "solution", "label"?, "level"?} (paths relative to
 *                     FILE), or the leaderboard corpus's data.json ({"Level L: N_Name": [{file,
 *                     display_name, torch_speedup}]}); a named file that does not exist is an
 *                     error: a map is explicit;
 *   --workspaces DIR  DIR/<task name, id or file stem>/ (missing: a planned failure);
 *   --replay DIR      the outputs of `cuda-agent run` (DIR itself, or each DIR/<run>/, with a
 *                     trajectory.jsonl): each episode's best snapshot (best_workspace/, else
 *                     its final workspace/), its task named by the trajectory's header;
 *   --model M         one agent episode per task.
 * Selection is deterministic: --levels, --tasks, then --sample N --seed S, stratified by level
 * (each level in proportion to its share, at least one), by a seeded splitmix64 shuffle.
 */
#include "bench/bench.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fs.h"
#include "core/hash.h"
#include "core/json.h"
#include "core/limits.h"
#include "core/sv.h"
#include "core/util.h"
#include "task/task.h"
#include "core/banned.h"

/* A selected task, borrowing from the task sets. */
struct ptask {
    const struct task *t;
    char *id, *name, *stem; /* owned */
    int level;
    char *path; /* FILES/tasks/<id>.py */
};

struct planner {
    const struct bench_plan_opts *o;
    struct bench_store *store;
    struct bench_plan *plan;
    struct task_set set;
    struct ptask *tasks;
    size_t n, alloc;
    json_t *lb; /* the leaderboard's data.json, when --map is one */
    char *map_dir;
};

void bench_plan_release(struct bench_plan *p)
{
    for (size_t i = 0; i < p->n; i++)
        bench_attempt_release(&p->attempts[i]);
    free(p->attempts);
    for (size_t i = 0; i < p->nwarnings; i++)
        free(p->warnings[i]);
    free(p->warnings);
    memset(p, 0, sizeof(*p));
}

static void warn(struct bench_plan *p, char *msg)
{
    ALLOC_GROW(p->warnings, p->nwarnings + 1, p->warnings_alloc);
    p->warnings[p->nwarnings++] = msg;
}

static char *stem_of(const char *path)
{
    const char *b = fs_basename(path);
    size_t n = strlen(b);
    if (n > 3 && strcmp(b + n - 3, ".py") == 0)
        n -= 3;
    return xstrndup(b, n);
}

static char *abs_path(const char *rel_to, const char *p)
{
    char *joined = p[0] == '/' || !rel_to ? xstrdup(p) : xstrfmt("%s/%s", rel_to, p);
    char *r = realpath(joined, NULL);
    if (r) {
        free(joined);
        return r;
    }
    return joined; /* for the message; fs_is_file fails on it */
}

static struct ptask *add_ptask(struct planner *pl, const struct task *t, const char *name,
                               int level)
{
    ALLOC_GROW(pl->tasks, pl->n + 1, pl->alloc);
    struct ptask *p = &pl->tasks[pl->n++];
    memset(p, 0, sizeof(*p));
    char hex[17];
    hash64_hex(t->hash, hex);
    p->t = t;
    p->name = xstrdup(name);
    p->id = strcmp(name, t->name) == 0 ? xstrdup(t->id) : xstrfmt("%s-%.12s", name, hex);
    p->level = level;
    const char *colon = strrchr(t->origin, ':');
    p->stem = colon && strstr(t->origin, ".jsonl") ? xstrdup(t->name) : stem_of(t->origin);
    return p;
}

/* "1,2" -> mask; 0 on a bad list. */
static int parse_levels(const char *s, unsigned *mask)
{
    *mask = 0;
    for (const char *p = s; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > BENCH_MAX_LEVEL)
            return -1;
        *mask |= 1u << v;
        p = end;
        if (*p == ',')
            p++;
        else if (*p)
            return -1;
    }
    return *mask ? 0 : -1;
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int cmp_ptask(const void *a, const void *b)
{
    const struct ptask *x = a, *y = b;
    if (x->level != y->level)
        return x->level - y->level;
    return strcmp(x->name, y->name);
}

static void ptask_release(struct ptask *p)
{
    free(p->id);
    free(p->name);
    free(p->stem);
    free(p->path);
}

/* Keep the tasks with keep[i]; the others are released. */
static void filter(struct planner *pl, const bool *keep)
{
    size_t k = 0;
    for (size_t i = 0; i < pl->n; i++) {
        if (keep[i])
            pl->tasks[k++] = pl->tasks[i];
        else
            ptask_release(&pl->tasks[i]);
    }
    pl->n = k;
}

static void sample(struct planner *pl, size_t n, uint64_t seed)
{
    if (n >= pl->n)
        return;
    qsort(pl->tasks, pl->n, sizeof(*pl->tasks), cmp_ptask);
    bool *keep = xcalloc(pl->n ? pl->n : 1, sizeof(*keep));
    uint64_t state = seed;
    for (size_t lo = 0; lo < pl->n;) {
        size_t hi = lo;
        while (hi < pl->n && pl->tasks[hi].level == pl->tasks[lo].level)
            hi++;
        size_t len = hi - lo;
        size_t k = (size_t)llround((double)n * (double)len / (double)pl->n);
        k = k < 1 ? 1 : k > len ? len : k;
        size_t *idx = xmallocarray(len, sizeof(*idx));
        for (size_t i = 0; i < len; i++)
            idx[i] = lo + i;
        for (size_t i = 0; i < k; i++) { /* partial Fisher-Yates */
            size_t j = i + (size_t)(splitmix64(&state) % (len - i));
            size_t tmp = idx[i];
            idx[i] = idx[j];
            idx[j] = tmp;
            keep[idx[i]] = true;
        }
        free(idx);
        lo = hi;
    }
    filter(pl, keep);
    free(keep);
}

static int select_tasks(struct planner *pl, struct ca_err *err)
{
    const struct bench_plan_opts *o = pl->o;
    if (o->levels) {
        unsigned mask;
        if (parse_levels(o->levels, &mask))
            return err_setf(err, CA_EUSAGE, "--levels wants a list such as 1,2 (0-%d), not '%s'",
                            BENCH_MAX_LEVEL, o->levels);
        bool *keep = xcalloc(pl->n ? pl->n : 1, sizeof(*keep));
        for (size_t i = 0; i < pl->n; i++)
            keep[i] = (mask >> pl->tasks[i].level) & 1u;
        filter(pl, keep);
        free(keep);
    }
    if (o->tasks) {
        bool *keep = xcalloc(pl->n ? pl->n : 1, sizeof(*keep));
        char *copy = xstrdup(o->tasks);
        int rc = 0;
        for (char *p = copy, *sel; !rc && (sel = strsep(&p, ",")) != NULL;) {
            if (!*sel)
                continue;
            size_t hits = 0, plen = strlen(sel);
            for (size_t i = 0; i < pl->n; i++)
                if (strcmp(pl->tasks[i].id, sel) == 0 || strcmp(pl->tasks[i].name, sel) == 0 ||
                    strcmp(pl->tasks[i].stem, sel) == 0 ||
                    strncmp(pl->tasks[i].id, sel, plen) == 0) {
                    keep[i] = true;
                    hits++;
                }
            if (!hits)
                rc = err_setf(err, CA_ENOTFOUND,
                              "--tasks: no task '%s' in the selection (an id, id prefix, name "
                              "or file stem; see 'cuda-agent data list')",
                              sel);
        }
        free(copy);
        if (!rc)
            filter(pl, keep);
        free(keep);
        if (rc)
            return rc;
    }
    if (o->sample > 0)
        sample(pl, (size_t)o->sample, o->seed);
    if (pl->n == 0)
        return err_setf(err, CA_ENOTFOUND, "no task matches the selection (--levels/--tasks)");
    qsort(pl->tasks, pl->n, sizeof(*pl->tasks), cmp_ptask);
    return 0;
}

static struct bench_attempt *new_attempt(struct planner *pl, const struct ptask *t,
                                         enum bench_kind kind, const char *key, const char *source,
                                         const char *label)
{
    struct bench_plan *p = pl->plan;
    ALLOC_GROW(p->attempts, p->n + 1, p->alloc);
    struct bench_attempt *a = &p->attempts[p->n++];
    memset(a, 0, sizeof(*a));
    a->task_id = xstrdup(t->id);
    a->task_path = xstrdup(t->path);
    a->level = t->level;
    a->kind = kind;
    a->key = xstrdup(key);
    a->source = source ? xstrdup(source) : NULL;
    a->label = label ? xstrdup(label) : NULL;
    return a;
}

/* ---- the leaderboard corpus's data.json ---------------------------------------------------- */

static int parse_lb_key(const char *key, int *level, long *num, const char **rest)
{
    char *end;
    if (strncmp(key, "Level ", 6) != 0)
        return -1;
    *level = (int)strtol(key + 6, &end, 10);
    if (end == key + 6 || strncmp(end, ": ", 2) != 0 || *level < 0 || *level > BENCH_MAX_LEVEL)
        return -1;
    *rest = end + 2;
    *num = strtol(*rest, &end, 10);
    if (end == *rest || *end != '_')
        return -1;
    return 0;
}

static int load_leaderboard_tasks(struct planner *pl, struct ca_err *err)
{
    const char *key;
    json_t *sols;
    json_object_foreach(pl->lb, key, sols)
    {
        int level;
        long num;
        const char *rest;
        if (parse_lb_key(key, &level, &num, &rest) || !json_is_array(sols))
            return err_setf(err, CA_EPARSE,
                            "%s: key '%.60s' is not \"Level L: N_Name\" with a list of solutions",
                            pl->o->map, key);
        char *path = xstrfmt("%s/problems/l%d_p%ld.py", pl->map_dir, level, num);
        size_t before = pl->set.n;
        int rc = task_load_file(path, &pl->set, err);
        free(path);
        if (rc)
            return rc;
        if (pl->set.n == before)
            continue; /* an exact duplicate of another problem */
        char *name = xstrfmt("l%d_%s", level, rest);
        /* Later loads may move the array: the task pointer is fixed after loading (below). */
        struct ptask *p = add_ptask(pl, &pl->set.tasks[before], name, level);
        p->t = (const struct task *)(uintptr_t)before;
        free(p->stem);
        p->stem = xstrdup(rest);
        free(name);
    }
    for (size_t i = 0; i < pl->n; i++)
        pl->tasks[i].t = &pl->set.tasks[(uintptr_t)pl->tasks[i].t];
    return 0;
}

static int lb_attempts(struct planner *pl, const struct ptask *t, struct ca_err *err)
{
    char key[256];
    const char *k;
    json_t *sols;
    json_object_foreach(pl->lb, k, sols)
    {
        int level;
        long num;
        const char *rest;
        if (parse_lb_key(k, &level, &num, &rest) || level != t->level || strcmp(rest, t->stem))
            continue;
        size_t i;
        json_t *s;
        json_array_foreach(sols, i, s)
        {
            const char *file = json_string_value(json_object_get(s, "file"));
            const char *label = json_string_value(json_object_get(s, "display_name"));
            if (!file)
                return err_setf(err, CA_EPARSE, "%s: '%s'[%zu] has no \"file\"", pl->o->map, k, i);
            if (pl->o->label && (!label || strcmp(label, pl->o->label)))
                continue;
            char *rel = xstrfmt("solutions/%s.py", file);
            char *path = abs_path(pl->map_dir, rel);
            free(rel);
            if (!fs_is_file(path)) {
                int rc = err_setf(err, CA_ENOTFOUND, "%s: '%s' names %s: no such file", pl->o->map,
                                  k, path);
                free(path);
                return rc;
            }
            snprintf(key, sizeof(key), "lb:%s", file);
            struct bench_attempt *a = new_attempt(pl, t, BENCH_KIND_FILE, key, path, label);
            const json_t *sp = json_object_get(s, "torch_speedup");
            if (json_is_number(sp))
                a->extra = json_pack("{s:O}", "kernelbench_speedup", sp);
            free(path);
        }
    }
    return 0;
}

/* ---- JSONL maps ----------------------------------------------------------------------------- */

static const struct ptask *find_ptask(struct planner *pl, const char *sel)
{
    const struct ptask *hit = NULL;
    for (size_t i = 0; i < pl->n; i++)
        if (strcmp(pl->tasks[i].id, sel) == 0 || strcmp(pl->tasks[i].name, sel) == 0 ||
            strcmp(pl->tasks[i].stem, sel) == 0)
            hit = &pl->tasks[i];
    return hit;
}

/* Each line: {"task": selector (with a task source) or path, "solution", "label"?, "level"?}.
 * Without a task source, the map's task files are the tasks. pass 0 loads those tasks; pass 1
 * makes the attempts. */
static int jsonl_map(struct planner *pl, int pass, struct ca_err *err)
{
    struct buf b;
    buf_init(&b, BENCH_LIMIT_MAP_BYTES);
    int rc = fs_read_file(pl->o->map, BENCH_LIMIT_MAP_BYTES, &b, err);
    size_t lineno = 0;
    for (char *line = b.data, *next; !rc && line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        lineno++;
        struct sv l = sv_trim(sv_from(line, strlen(line)));
        if (l.len == 0 || l.p[0] == '#')
            continue;
        json_error_t je;
        json_t *j = json_loadb(l.p, l.len, 0, &je);
        const char *task = json_string_value(json_object_get(j, "task"));
        const char *sol = json_string_value(json_object_get(j, "solution"));
        const char *label = json_string_value(json_object_get(j, "label"));
        const json_t *lv = json_object_get(j, "level");
        if (!json_is_object(j) || !task || !sol || (lv && !json_is_integer(lv))) {
            rc = err_setf(err, CA_EPARSE,
                          "%s:%zu: expected {\"task\": ..., \"solution\": PATH, \"label\"?: ..., "
                          "\"level\"?: N}%s%s",
                          pl->o->map, lineno, j ? "" : ": ", j ? "" : je.text);
            json_decref(j);
            break;
        }
        if (pass == 0 && !pl->o->tasks_source) {
            char *path = abs_path(pl->map_dir, task);
            size_t before = pl->set.n;
            rc = task_load_file(path, &pl->set, err);
            if (!rc && pl->set.n > before) {
                char *stem = stem_of(path);
                int level = lv ? (int)json_integer_value(lv) : 0;
                char *name = level ? xstrfmt("l%d_%s", level, stem) : xstrdup(stem);
                struct ptask *p = add_ptask(pl, &pl->set.tasks[before], name, level);
                p->t = (const struct task *)(uintptr_t)before;
                free(p->stem);
                p->stem = xstrdup(task); /* the map's own name for it */
                free(name);
                free(stem);
            } else if (!rc) {
                warn(pl->plan,
                     xstrfmt("%s:%zu: %s duplicates an earlier task", pl->o->map, lineno, task));
            }
            free(path);
        } else if (pass == 1) {
            const struct ptask *t = find_ptask(pl, task);
            char *path = abs_path(pl->map_dir, sol);
            if (!t && pl->o->tasks_source)
                warn(pl->plan, xstrfmt("%s:%zu: task '%s' is not in the selection: skipped",
                                       pl->o->map, lineno, task));
            else if (!t)
                ; /* a duplicate task file, or one left out by --levels/--tasks/--sample */
            else if (!fs_is_file(path))
                rc = err_setf(err, CA_ENOTFOUND, "%s:%zu: solution %s: no such file", pl->o->map,
                              lineno, path);
            else if (!pl->o->label || (label && strcmp(label, pl->o->label) == 0)) {
                char *key = xstrfmt("map:%s", sol);
                new_attempt(pl, t, BENCH_KIND_FILE, key, path, label);
                free(key);
            }
            free(path);
        }
        json_decref(j);
    }
    buf_release(&b);
    if (!rc && pass == 0 && !pl->o->tasks_source)
        for (size_t i = 0; i < pl->n; i++)
            pl->tasks[i].t = &pl->set.tasks[(uintptr_t)pl->tasks[i].t];
    return rc;
}

/* ---- --solutions DIR ------------------------------------------------------------------------ */

/* Leading digits of "N_Name": the KernelBench problem number, or -1. */
static long problem_number(const char *stem)
{
    if (!isdigit((unsigned char)stem[0]))
        return -1;
    char *end;
    long n = strtol(stem, &end, 10);
    return *end == '_' ? n : -1;
}

struct sample_file {
    int level;
    long problem, sample;
    char *name;
};

static int cmp_sample(const void *a, const void *b)
{
    const struct sample_file *x = a, *y = b;
    return x->sample < y->sample ? -1 : x->sample > y->sample;
}

static int solutions_attempts(struct planner *pl, struct ca_err *err)
{
    const char *dir = pl->o->solutions;
    DIR *d = opendir(dir);
    if (!d)
        return err_setf(err, errno == ENOENT ? CA_ENOTFOUND : -errno, "--solutions %s: %s", dir,
                        strerror(errno));
    struct sample_file *files = NULL;
    size_t nfiles = 0, falloc = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        int level, used = 0;
        long problem, smp;
        if (sscanf(e->d_name, "level_%d_problem_%ld_sample_%ld_kernel.py%n", &level, &problem, &smp,
                   &used) == 3 &&
            used == (int)strlen(e->d_name)) {
            if (nfiles >= BENCH_LIMIT_ATTEMPTS)
                break;
            ALLOC_GROW(files, nfiles + 1, falloc);
            files[nfiles++] = (struct sample_file){level, problem, smp, xstrdup(e->d_name)};
        }
    }
    closedir(d);
    if (nfiles)
        qsort(files, nfiles, sizeof(*files), cmp_sample);
    int rc = 0;
    size_t missing = 0;
    for (size_t i = 0; i < pl->n && !rc; i++) {
        const struct ptask *t = &pl->tasks[i];
        long num = problem_number(t->stem);
        size_t found = 0;
        for (size_t f = 0; f < nfiles; f++) {
            if (files[f].level != t->level || files[f].problem != num)
                continue;
            char *path = abs_path(dir, files[f].name);
            char key[64];
            snprintf(key, sizeof(key), "sample:%ld", files[f].sample);
            new_attempt(pl, t, BENCH_KIND_FILE, key, path, NULL);
            free(path);
            found++;
        }
        if (!found) { /* the tree layout: level<L>/<stem>.py, or <stem>.py */
            char *rel =
                t->level ? xstrfmt("level%d/%s.py", t->level, t->stem) : xstrfmt("%s.py", t->stem);
            char *path = abs_path(dir, rel);
            if (fs_is_file(path)) {
                new_attempt(pl, t, BENCH_KIND_FILE, "file", path, NULL);
                found++;
            }
            free(path);
            free(rel);
        }
        if (!found) {
            new_attempt(pl, t, BENCH_KIND_MISSING, "missing", NULL, NULL);
            missing++;
        }
    }
    if (missing)
        warn(pl->plan, xstrfmt("--solutions %s: no solution file for %zu of %zu task(s): they "
                               "count as failed (KernelBench's layouts: "
                               "level_L_problem_N_sample_S_kernel.py or levelL/N_Name.py)",
                               dir, missing, pl->n));
    for (size_t f = 0; f < nfiles; f++)
        free(files[f].name);
    free(files);
    return rc;
}

static void workspace_attempts(struct planner *pl)
{
    size_t missing = 0;
    for (size_t i = 0; i < pl->n; i++) {
        const struct ptask *t = &pl->tasks[i];
        const char *names[] = {t->name, t->id, t->stem};
        bool found = false;
        for (size_t k = 0; k < ARRAY_SIZE(names) && !found; k++) {
            char *path = abs_path(pl->o->workspaces, names[k]);
            if (fs_is_dir(path)) {
                new_attempt(pl, t, BENCH_KIND_WORKSPACE, "workspace", path, NULL);
                found = true;
            }
            free(path);
        }
        if (!found) {
            new_attempt(pl, t, BENCH_KIND_MISSING, "missing", NULL, NULL);
            missing++;
        }
    }
    if (missing)
        warn(pl->plan, xstrfmt("--workspaces %s: no workspace for %zu of %zu task(s) (DIR/<task "
                               "name, id or file stem>/): they count as failed",
                               pl->o->workspaces, missing, pl->n));
}

/* ---- --replay: earlier episodes' best snapshots --------------------------------------------- */

/* The header line of RUN/trajectory.jsonl (docs/trajectory.schema.json), or NULL with why. */
static json_t *trajectory_header(const char *run, char **why)
{
    char *path = xstrfmt("%s/trajectory.jsonl", run);
    json_t *h = NULL;
    FILE *f = fopen(path, "re");
    if (!f) {
        *why = xstrfmt("%s: %s", path, strerror(errno));
        free(path);
        return NULL;
    }
    struct buf line;
    buf_init(&line, CA_LIMIT_JSON_BYTES);
    int c;
    while ((c = getc(f)) != EOF && c != '\n')
        if (buf_addch(&line, (char)c)) {
            *why = xstrfmt("%s: a header line over %zu bytes", path, (size_t)CA_LIMIT_JSON_BYTES);
            goto out;
        }
    struct ca_err e = {0};
    json_t *j = NULL;
    if (jsonx_parse(sv_from(line.data, line.len), CA_LIMIT_JSON_BYTES, "trajectory header", &j,
                    &e)) {
        *why = xstrfmt("%s: %s", path, e.msg);
        goto out;
    }
    const char *type = json_string_value(json_object_get(j, "type"));
    if (!type || strcmp(type, "header") != 0 || !json_is_object(json_object_get(j, "task"))) {
        *why = xstrfmt("%s: its first line is no trajectory header with a task", path);
        json_decref(j);
        goto out;
    }
    h = j;
out:
    buf_release(&line);
    (void)fclose(f); /* read-only: nothing is lost when close fails */
    free(path);
    return h;
}

/* The planned task a header's task names: by content hash first, then by id, then by name. */
static const struct ptask *replay_task(const struct planner *pl, const json_t *task)
{
    const char *hash = json_string_value(json_object_get(task, "hash"));
    const char *id = json_string_value(json_object_get(task, "id"));
    const char *name = json_string_value(json_object_get(task, "name"));
    for (int pass = 0; pass < 3; pass++)
        for (size_t i = 0; i < pl->n; i++) {
            const struct ptask *t = &pl->tasks[i];
            char hex[HASH64_HEX_LEN + 1];
            hash64_hex(t->t->hash, hex);
            if ((pass == 0 && hash && strcmp(hash, hex) == 0) ||
                (pass == 1 && id && (strcmp(id, t->id) == 0 || strcmp(id, t->t->id) == 0)) ||
                (pass == 2 && name && (strcmp(name, t->name) == 0 || strcmp(name, t->stem) == 0)))
                return t;
        }
    return NULL;
}

static int cmp_cstr(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* DIR itself when it holds a trajectory, else its subfolders that do, sorted. */
static int replay_runs(const char *dir, char ***runs, size_t *n, struct ca_err *err)
{
    size_t alloc = 0;
    *runs = NULL;
    *n = 0;
    char *own = xstrfmt("%s/trajectory.jsonl", dir);
    bool single = fs_is_file(own);
    free(own);
    if (single) {
        ALLOC_GROW(*runs, 1, alloc);
        (*runs)[(*n)++] = xstrdup(dir);
        return 0;
    }
    DIR *d = opendir(dir);
    if (!d)
        return err_setf(err, errno == ENOENT ? CA_ENOTFOUND : -errno, "--replay %s: %s", dir,
                        strerror(errno));
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        char *run = xstrfmt("%s/%s", dir, de->d_name);
        char *traj = xstrfmt("%s/trajectory.jsonl", run);
        if (fs_is_dir(run) && fs_is_file(traj)) {
            ALLOC_GROW(*runs, *n + 1, alloc);
            (*runs)[(*n)++] = run;
        } else {
            free(run);
        }
        free(traj);
    }
    (void)closedir(d); /* a directory stream: nothing to flush */
    if (*n > 1)
        qsort(*runs, *n, sizeof(**runs), cmp_cstr);
    return 0;
}

static int replay_attempts(struct planner *pl, struct ca_err *err)
{
    char **runs;
    size_t nruns;
    int rc = replay_runs(pl->o->replay, &runs, &nruns, err);
    if (rc)
        return rc;
    if (nruns == 0)
        rc =
            err_setf(err, CA_ENOTFOUND,
                     "--replay %s: no episode here (a folder with trajectory.jsonl, as `cuda-agent "
                     "run --out` writes it, or a folder of such folders)",
                     pl->o->replay);
    bool *has = xcalloc(pl->n ? pl->n : 1, sizeof(*has));
    size_t outside = 0;
    for (size_t r = 0; r < nruns && !rc; r++) {
        char *why = NULL;
        json_t *h = trajectory_header(runs[r], &why);
        if (!h) {
            warn(pl->plan, xstrfmt("--replay: %s: left out", why));
            free(why);
            continue;
        }
        const struct ptask *t = replay_task(pl, json_object_get(h, "task"));
        json_decref(h);
        if (!t) {
            outside++;
            continue;
        }
        char *best = xstrfmt("%s/best_workspace", runs[r]);
        char *final = xstrfmt("%s/workspace", runs[r]);
        const char *ws = fs_is_dir(best) ? best : fs_is_dir(final) ? final : NULL;
        if (ws) {
            char *key = xstrfmt("replay:%s", fs_basename(runs[r]));
            struct bench_attempt *a = new_attempt(pl, t, BENCH_KIND_WORKSPACE, key, ws, NULL);
            a->extra = json_pack("{s:s, s:s}", "replay", runs[r], "snapshot",
                                 ws == best ? "best" : "final");
            free(key);
            has[t - pl->tasks] = true;
        } else {
            warn(pl->plan, xstrfmt("--replay: %s has neither best_workspace/ nor workspace/: left "
                                   "out",
                                   runs[r]));
        }
        free(best);
        free(final);
    }
    size_t missing = 0;
    for (size_t i = 0; i < pl->n && !rc; i++)
        if (!has[i]) {
            new_attempt(pl, &pl->tasks[i], BENCH_KIND_MISSING, "missing", NULL, NULL);
            missing++;
        }
    if (!rc && outside)
        warn(pl->plan, xstrfmt("--replay %s: %zu episode(s) of tasks outside the selection: left "
                               "out",
                               pl->o->replay, outside));
    if (!rc && missing)
        warn(pl->plan, xstrfmt("--replay %s: no episode for %zu of %zu task(s): they count as "
                               "failed",
                               pl->o->replay, missing, pl->n));
    free(has);
    for (size_t r = 0; r < nruns; r++)
        free(runs[r]);
    free(runs);
    return rc;
}

/* ---- the whole plan ------------------------------------------------------------------------- */

static void drop_unmapped(struct planner *pl)
{
    bool *keep = xcalloc(pl->n ? pl->n : 1, sizeof(*keep));
    size_t dropped = 0;
    for (size_t i = 0; i < pl->n; i++) {
        for (size_t a = 0; a < pl->plan->n && !keep[i]; a++)
            keep[i] = strcmp(pl->plan->attempts[a].task_id, pl->tasks[i].id) == 0;
        dropped += !keep[i];
    }
    if (dropped)
        warn(pl->plan, xstrfmt("--map %s names no solution for %zu of the %zu selected task(s): "
                               "they are left out of the run",
                               pl->o->map, dropped, pl->n));
    filter(pl, keep);
    free(keep);
}

static int write_task_files(struct planner *pl, struct ca_err *err)
{
    char *dir = xstrfmt("%s/tasks", pl->o->files_dir);
    int rc = fs_mkdirs(dir, 0755, err);
    for (size_t i = 0; i < pl->n && !rc; i++) {
        struct ptask *t = &pl->tasks[i];
        t->path = xstrfmt("%s/%s.py", dir, t->id);
        struct buf old;
        buf_init(&old, CA_LIMIT_TASK_BYTES + 1);
        bool same = fs_is_file(t->path) &&
                    fs_read_file(t->path, CA_LIMIT_TASK_BYTES + 1, &old, NULL) == 0 &&
                    old.len == t->t->code_len && memcmp(old.data, t->t->code, old.len) == 0;
        buf_release(&old);
        if (!same)
            rc = fs_write_atomic(t->path, t->t->code, t->t->code_len, 0644, err);
    }
    free(dir);
    return rc;
}

int bench_plan_build(const struct bench_plan_opts *o, struct bench_store *s, struct bench_plan *p,
                     struct ca_err *err)
{
    memset(p, 0, sizeof(*p));
    struct planner pl = {.o = o, .store = s, .plan = p};
    task_set_init(&pl.set);
    int rc = 0;
    if (o->map) {
        char *abs = realpath(o->map, NULL);
        if (!abs) {
            rc = err_setf(err, CA_ENOTFOUND, "--map %s: %s", o->map, strerror(errno));
            goto out;
        }
        char *slash = strrchr(abs, '/');
        pl.map_dir = xstrndup(abs, (size_t)(slash - abs));
        free(abs);
        struct buf head;
        buf_init(&head, BENCH_LIMIT_MAP_BYTES);
        rc = fs_read_file(o->map, BENCH_LIMIT_MAP_BYTES, &head, err);
        struct sv t = sv_trim(sv_from(head.data ? head.data : "", head.len));
        /* One JSON object that is not a map line: the leaderboard's data.json. */
        if (!rc && t.len && t.p[0] == '{') {
            json_t *j = json_loadb(t.p, t.len, 0, NULL);
            if (json_is_object(j) && !json_object_get(j, "solution") && !json_object_get(j, "task"))
                pl.lb = j;
            else
                json_decref(j);
        }
        buf_release(&head);
        if (rc)
            goto out;
    }
    if (o->tasks_source) {
        if ((rc = task_load(o->tasks_source, &pl.set, err)))
            goto out;
        for (size_t i = 0; i < pl.set.n; i++)
            add_ptask(&pl, &pl.set.tasks[i], pl.set.tasks[i].name, pl.set.tasks[i].level);
    } else if (pl.lb) {
        if ((rc = load_leaderboard_tasks(&pl, err)))
            goto out;
    } else if (o->map) {
        if ((rc = jsonl_map(&pl, 0, err)))
            goto out;
    } else {
        rc = err_setf(err, CA_EUSAGE, "no tasks: give a task source (a KernelBench tree or JSONL)");
        goto out;
    }
    if ((rc = select_tasks(&pl, err)) || (rc = write_task_files(&pl, err)))
        goto out;
    p->ntasks = pl.n;
    if (o->model) {
        for (size_t i = 0; i < pl.n; i++)
            new_attempt(&pl, &pl.tasks[i], BENCH_KIND_AGENT, "agent", o->model, o->model);
    } else if (o->workspaces) {
        workspace_attempts(&pl);
    } else if (o->replay) {
        rc = replay_attempts(&pl, err);
    } else if (o->solutions) {
        rc = solutions_attempts(&pl, err);
    } else if (pl.lb) {
        /* data.json lists every problem; one without a (--label's) solution failed. */
        size_t missing = 0;
        for (size_t i = 0; i < pl.n && !rc; i++) {
            size_t before = p->n;
            rc = lb_attempts(&pl, &pl.tasks[i], err);
            if (!rc && p->n == before) {
                new_attempt(&pl, &pl.tasks[i], BENCH_KIND_MISSING, "missing", NULL, NULL);
                missing++;
            }
        }
        if (missing)
            warn(p, xstrfmt("--map %s: no solution%s%s for %zu of %zu task(s): they count as "
                            "failed",
                            o->map, o->label ? " labelled " : "", o->label ? o->label : "", missing,
                            pl.n));
    } else if (o->map) {
        /* A JSONL map defines the suite: the tasks it does not name are left out. */
        if (!(rc = jsonl_map(&pl, 1, err)))
            drop_unmapped(&pl);
        p->ntasks = pl.n;
    } else {
        rc = err_setf(err, CA_EUSAGE,
                      "no solutions: give --solutions, --map, --workspaces, --replay or --model");
    }
    if (rc)
        goto out;
    if (p->n == 0) {
        rc = err_setf(err, CA_ENOTFOUND, "nothing to evaluate: no solution matches the tasks%s",
                      o->label ? " and --label" : "");
        goto out;
    }
    /* Record it: every task has at least one attempt by now. */
    if ((rc = bench_store_begin(s, err)))
        goto out;
    for (size_t i = 0; i < pl.n && !rc; i++) {
        const struct ptask *t = &pl.tasks[i];
        rc = bench_store_add_task(s, t->id, t->name, t->level, t->t->origin, t->t->hash, t->t->code,
                                  err);
    }
    for (size_t i = 0; i < p->n && !rc; i++)
        rc = bench_store_plan(s, &p->attempts[i], err);
    if (!rc)
        rc = bench_store_commit(s, err);
    else
        bench_store_rollback(s);
out:
    for (size_t i = 0; i < pl.n; i++)
        ptask_release(&pl.tasks[i]);
    free(pl.tasks);
    free(pl.map_dir);
    json_decref(pl.lb);
    task_set_release(&pl.set);
    if (rc)
        bench_plan_release(p);
    return rc;
}
