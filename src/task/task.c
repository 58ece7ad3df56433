/*
 * task.c - the task set: lifetime, merging a loaded source in, lookup by
 * selector, reference resolution, JSON and JSONL output.
 *
 * A set only ever grows by whole sources: loaders fill a private set and
 * task__set_merge_all() checks every id against the caller's set before
 * moving anything, so the caller sees all of a source or none of it.
 * Lookups are linear (sets are thousands of tasks, looked up a few times);
 * the id index is built only while merging.
 */
#include "task/task.h"

#include <errno.h>
#include <string.h>

#include "core/buf.h"
#include "core/fs.h"
#include "core/hash.h"
#include "core/json.h"
#include "core/limits.h"
#include "core/sv.h"
#include "task/task_internal.h"
#include "core/banned.h"

/* Candidates listed in "not found" and "ambiguous" messages. */
#define FIND_LIST_MAX 5

void task_set_init(struct task_set *set)
{
    memset(set, 0, sizeof(*set));
}

void task_set_release(struct task_set *set)
{
    for (size_t i = 0; i < set->n; i++)
        task_release(&set->tasks[i]);
    free(set->tasks);
    for (size_t i = 0; i < set->ndups; i++) {
        free(set->dups[i].origin);
        free(set->dups[i].kept_id);
    }
    free(set->dups);
    task_set_init(set);
}

/* ---- the index ---- */

void task__index_init(struct task__index *ix)
{
    memset(ix, 0, sizeof(*ix));
}

void task__index_release(struct task__index *ix)
{
    free(ix->keys);
    free(ix->vals);
    task__index_init(ix);
}

static void index_put(uint64_t *keys, size_t *vals, size_t cap, uint64_t key, size_t val)
{
    size_t s = (size_t)key & (cap - 1);
    while (vals[s])
        s = (s + 1) & (cap - 1);
    keys[s] = key;
    vals[s] = val;
}

void task__index_add(struct task__index *ix, uint64_t key, size_t pos)
{
    if ((ix->n + 1) * 2 > ix->cap) {
        size_t cap = ix->cap ? ix->cap * 2 : 64;
        uint64_t *keys = xcalloc(cap, sizeof(*keys));
        size_t *vals = xcalloc(cap, sizeof(*vals));
        for (size_t i = 0; i < ix->cap; i++)
            if (ix->vals[i])
                index_put(keys, vals, cap, ix->keys[i], ix->vals[i]);
        free(ix->keys);
        free(ix->vals);
        ix->keys = keys;
        ix->vals = vals;
        ix->cap = cap;
    }
    index_put(ix->keys, ix->vals, ix->cap, key, pos + 1);
    ix->n++;
}

static size_t index_probe(const struct task__index *ix, uint64_t key, size_t s)
{
    for (; ix->vals[s]; s = (s + 1) & (ix->cap - 1))
        if (ix->keys[s] == key)
            return s;
    return SIZE_MAX;
}

size_t task__index_first(const struct task__index *ix, uint64_t key)
{
    return ix->cap ? index_probe(ix, key, (size_t)key & (ix->cap - 1)) : SIZE_MAX;
}

size_t task__index_next(const struct task__index *ix, uint64_t key, size_t slot)
{
    return index_probe(ix, key, (slot + 1) & (ix->cap - 1));
}

uint64_t task__id_key(const char *id)
{
    return hash64(id, strlen(id));
}

/* ---- merging ---- */

static bool same_code(const struct task *a, const struct task *b)
{
    return a->hash == b->hash && a->code_len == b->code_len &&
           memcmp(a->code, b->code, a->code_len) == 0;
}

static void index_ids(const struct task_set *set, struct task__index *ix)
{
    task__index_init(ix);
    for (size_t i = 0; i < set->n; i++)
        task__index_add(ix, task__id_key(set->tasks[i].id), i);
}

/* The task in set (indexed by ix) with t's id, or NULL. */
static const struct task *find_id(const struct task_set *set, const struct task__index *ix,
                                  const char *id)
{
    uint64_t k = task__id_key(id);
    for (size_t s = task__index_first(ix, k); s != SIZE_MAX; s = task__index_next(ix, k, s)) {
        const struct task *o = &set->tasks[ix->vals[s] - 1];
        if (strcmp(o->id, id) == 0)
            return o;
    }
    return NULL;
}

int task__set_merge_check(const struct task_set *dst, const struct task_set *src,
                          struct ca_err *err)
{
    if (dst->n == 0)
        return 0;
    struct task__index ix;
    int rc = 0;
    index_ids(dst, &ix);
    for (size_t i = 0; i < src->n && !rc; i++) {
        const struct task *t = &src->tasks[i];
        const struct task *o = find_id(dst, &ix, t->id);
        if (o && !same_code(o, t))
            rc = err_setf(err, CA_EDUP,
                          "%s: task id \"%s\" is already loaded from %s for different code",
                          t->origin, t->id, o->origin);
    }
    if (!rc && dst->n + src->n > CA_LIMIT_DATASET_TASKS)
        rc = err_setf(err, CA_ETOOBIG, "more than %d tasks in one set (CA_LIMIT_DATASET_TASKS)",
                      CA_LIMIT_DATASET_TASKS);
    task__index_release(&ix);
    return rc;
}

static bool has_dup(const struct task_set *set, const struct task_duplicate *d)
{
    for (size_t i = 0; i < set->ndups; i++)
        if (strcmp(set->dups[i].origin, d->origin) == 0 &&
            strcmp(set->dups[i].kept_id, d->kept_id) == 0)
            return true;
    return false;
}

void task__set_merge(struct task_set *dst, struct task_set *src)
{
    struct task__index ix;
    size_t old_dups = dst->ndups;
    bool reload = false;
    index_ids(dst, &ix);
    ALLOC_GROW(dst->tasks, dst->n + src->n, dst->alloc);
    for (size_t i = 0; i < src->n; i++) {
        struct task *t = &src->tasks[i];
        if (find_id(dst, &ix, t->id)) { /* the same task, loaded before */
            task_release(t);
            reload = true;
            continue;
        }
        dst->relabelled += t->ops_relabelled;
        dst->tasks[dst->n++] = *t;
    }
    task__index_release(&ix);
    for (size_t i = 0; i < src->ndups; i++) {
        struct task_duplicate *d = &src->dups[i];
        /* a source loaded twice reports its duplicates once */
        if (reload && old_dups && has_dup(dst, d)) {
            free(d->origin);
            free(d->kept_id);
            continue;
        }
        ALLOC_GROW(dst->dups, dst->ndups + 1, dst->dups_alloc);
        dst->dups[dst->ndups++] = *d;
    }
    free(src->tasks);
    free(src->dups);
    task_set_init(src);
}

int task__set_merge_all(struct task_set *dst, struct task_set *src, struct ca_err *err)
{
    int rc = task__set_merge_check(dst, src, err);
    if (rc) {
        task_set_release(src);
        return rc;
    }
    task__set_merge(dst, src);
    return 0;
}

/* ---- lookup ---- */

static size_t common_prefix(const char *a, const char *b)
{
    size_t n = 0;
    while (a[n] && a[n] == b[n])
        n++;
    return n;
}

static void list_ids(struct buf *b, const struct task *const *list, size_t n, size_t total)
{
    /* b is capped at the message size: a list too long for it just stops */
    for (size_t i = 0; i < n; i++)
        if (buf_addf(b, "%s%s", i ? ", " : "", list[i]->id))
            return;
    if (total > n && buf_addstr(b, ", ..."))
        return;
}

static int ambiguous(const char *selector, const struct task *const *list, size_t n, size_t total,
                     const char *what, struct ca_err *err)
{
    struct buf b;
    buf_init(&b, CA_ERR_MSG_MAX);
    list_ids(&b, list, n, total);
    int rc = err_setf(err, CA_EAMBIGUOUS,
                      "task selector \"%s\" matches %zu tasks by %s (%s): give more of the id",
                      selector, total, what, b.data);
    buf_release(&b);
    return rc;
}

static int not_found(const struct task_set *set, const char *selector, struct ca_err *err)
{
    const struct task *best[FIND_LIST_MAX];
    size_t score[FIND_LIST_MAX], nbest = 0;
    for (size_t i = 0; i < set->n; i++) {
        const struct task *t = &set->tasks[i];
        size_t a = common_prefix(selector, t->id), b = common_prefix(selector, t->name);
        size_t sc = a > b ? a : b;
        if (sc == 0)
            continue;
        size_t at = nbest;
        while (at > 0 && score[at - 1] < sc)
            at--;
        if (at == FIND_LIST_MAX)
            continue;
        if (nbest < FIND_LIST_MAX)
            nbest++;
        memmove(best + at + 1, best + at, (nbest - 1 - at) * sizeof(*best));
        memmove(score + at + 1, score + at, (nbest - 1 - at) * sizeof(*score));
        best[at] = t;
        score[at] = sc;
    }
    if (set->n == 0)
        return err_setf(err, CA_ENOTFOUND, "no task matches \"%s\": no tasks are loaded", selector);
    if (nbest == 0)
        return err_setf(err, CA_ENOTFOUND,
                        "no task matches \"%s\" among %zu tasks (by id, name or id prefix)",
                        selector, set->n);
    struct buf b;
    buf_init(&b, CA_ERR_MSG_MAX);
    list_ids(&b, best, nbest, nbest);
    int rc = err_setf(err, CA_ENOTFOUND, "no task matches \"%s\" among %zu tasks; closest: %s",
                      selector, set->n, b.data);
    buf_release(&b);
    return rc;
}

/*
 * A selector in KernelBench's own words: "levelN/M", "levelN/M_Name" or "levelN/M_Name.py",
 * possibly behind a path into the tree ("KernelBench/level1/50_X.py"). Writes the name prefix
 * the tree loader gives such a file ("l1_50_") into out; false when the selector is not one.
 */
static bool kernelbench_prefix(const char *selector, char *out, size_t len)
{
    const char *p = selector, *at = NULL;
    while ((p = strstr(p, "level")) != NULL) {
        if (p == selector || p[-1] == '/')
            at = p;
        p += 5;
    }
    if (!at)
        return false;
    struct sv rest = sv_cstr(at + 5), level, num;
    long slash = sv_find_ch(rest, '/');
    if (slash <= 0)
        return false;
    level = sv_sub(rest, 0, (size_t)slash);
    rest = sv_sub(rest, (size_t)slash + 1, rest.len);
    size_t k = 0;
    while (k < rest.len && rest.p[k] >= '0' && rest.p[k] <= '9')
        k++;
    num = sv_sub(rest, 0, k);
    rest = sv_sub(rest, k, rest.len);
    uint64_t lv, nv;
    struct ca_err ignored;
    if (!num.len || sv_parse_u64(level, &lv, "level", &ignored) ||
        sv_parse_u64(num, &nv, "number", &ignored) ||
        (rest.len && rest.p[0] != '_' && !sv_eq(rest, SV_LIT(".py"))) || sv_find_ch(rest, '/') >= 0)
        return false;
    return snprintf(out, len, "l%llu_%llu_", (unsigned long long)lv, (unsigned long long)nv) <
           (int)len;
}

int task_set_find(const struct task_set *set, const char *selector, const struct task **out,
                  struct ca_err *err)
{
    const struct task *list[FIND_LIST_MAX];
    size_t n = 0;
    *out = NULL;
    if (!*selector)
        return err_setf(err, CA_ENOTFOUND,
                        "empty task selector: give an id, a name or an id "
                        "prefix");
    for (size_t i = 0; i < set->n; i++) {
        if (strcmp(set->tasks[i].id, selector) == 0) {
            *out = &set->tasks[i];
            return 0;
        }
    }
    for (size_t i = 0; i < set->n; i++)
        if (strcmp(set->tasks[i].name, selector) == 0 && n++ < FIND_LIST_MAX)
            list[n - 1] = &set->tasks[i];
    if (n == 1) {
        *out = list[0];
        return 0;
    }
    if (n > 1)
        return ambiguous(selector, list, n < FIND_LIST_MAX ? n : FIND_LIST_MAX, n, "name", err);
    char kb[48];
    if (kernelbench_prefix(selector, kb, sizeof(kb))) {
        for (size_t i = 0; i < set->n; i++)
            if (strncmp(set->tasks[i].name, kb, strlen(kb)) == 0 && n++ < FIND_LIST_MAX)
                list[n - 1] = &set->tasks[i];
        if (n == 1) {
            *out = list[0];
            return 0;
        }
        if (n > 1)
            return ambiguous(selector, list, n < FIND_LIST_MAX ? n : FIND_LIST_MAX, n,
                             "KernelBench level and number", err);
    }
    size_t len = strlen(selector);
    for (size_t i = 0; i < set->n; i++)
        if (strncmp(set->tasks[i].id, selector, len) == 0 && n++ < FIND_LIST_MAX)
            list[n - 1] = &set->tasks[i];
    if (n == 1) {
        *out = list[0];
        return 0;
    }
    if (n > 1)
        return ambiguous(selector, list, n < FIND_LIST_MAX ? n : FIND_LIST_MAX, n, "id prefix",
                         err);
    return not_found(set, selector, err);
}

/* ---- references ---- */

/* Pick the task in a freshly loaded source: the only one, or by selector. */
static int pick(const struct task_set *src, const char *path, const char *selector, const char **id,
                struct ca_err *err)
{
    if (selector) {
        const struct task *t;
        int rc = task_set_find(src, selector, &t, err);
        if (rc) {
            err_prefix(err, "%s", path);
            return rc;
        }
        *id = t->id;
        return 0;
    }
    if (src->n == 0)
        return err_setf(err, CA_ENOTFOUND, "%s: holds no tasks", path);
    if (src->n > 1)
        return err_setf(err, CA_EAMBIGUOUS,
                        "%s holds %zu tasks: pick one with PATH:SELECTOR (an id, a name or an "
                        "id prefix), e.g. %s:%s",
                        path, src->n, path, src->tasks[0].id);
    *id = src->tasks[0].id;
    return 0;
}

int task_resolve(const char *ref, struct task_set *set, const struct task **out, struct ca_err *err)
{
    char *path = NULL;
    const char *selector = NULL;
    struct task_set src;
    int rc;
    *out = NULL;
    task_set_init(&src);
    if (fs_exists(ref)) {
        path = xstrdup(ref);
    } else {
        const char *colon = strrchr(ref, ':');
        char kb[48];
        const char *lv = strstr(ref, "/level");
        /* TREE/levelN/M[_Name[.py]]: the tree, and the file in KernelBench's words. */
        if (!colon && lv && kernelbench_prefix(ref, kb, sizeof(kb))) {
            path = xstrndup(ref, (size_t)(lv - ref));
            selector = lv + 1;
            if (fs_is_dir(path))
                goto load;
            FREE_AND_NULL(path);
            selector = NULL;
        }
        if (!colon)
            return err_setf(err, -ENOENT,
                            "%s: no such file or directory (a task reference is PATH or "
                            "PATH:SELECTOR)",
                            ref);
        path = xstrndup(ref, (size_t)(colon - ref));
        selector = colon + 1;
        if (!fs_exists(path)) {
            rc = err_setf(err, -ENOENT,
                          "%s: no such file or directory (from the task reference \"%s\")", path,
                          ref);
            goto out;
        }
    }
load:
    rc = task_load(path, &src, err);
    if (rc)
        goto out;
    const char *picked = NULL;
    rc = pick(&src, path, selector, &picked, err);
    if (rc)
        goto out;
    char *id = xstrdup(picked);
    rc = task__set_merge_all(set, &src, err);
    if (!rc) {
        rc = task_set_find(set, id, out, err);
        ASSERT(!rc); /* just merged in, by exact id */
    }
    free(id);
out:
    task_set_release(&src);
    free(path);
    return rc;
}

/* ---- output ---- */

/* A JSON string, or null for text that is not UTF-8 (a path can be any bytes). */
static json_t *str_or_null(const char *s)
{
    json_t *v = s ? jsonx_string(sv_cstr(s)) : NULL;
    return v ? v : json_null();
}

static json_t *ops_array(const struct task *t)
{
    json_t *a = json_array();
    for (size_t i = 0; i < t->nops; i++)
        json_array_append_new(a, str_or_null(t->ops[i]));
    return a;
}

json_t *task_to_json(const struct task *t, bool with_code)
{
    char hex[HASH64_HEX_LEN + 1];
    hash64_hex(t->hash, hex);
    json_t *o = json_object();
    json_object_set_new(o, "id", str_or_null(t->id));
    json_object_set_new(o, "name", str_or_null(t->name));
    json_object_set_new(o, "level", json_integer(t->level));
    json_object_set_new(o, "ops", ops_array(t));
    json_object_set_new(o, "ops_relabelled", json_boolean(t->ops_relabelled));
    json_object_set_new(o, "data_source", str_or_null(t->data_source));
    json_object_set_new(o, "origin", str_or_null(t->origin));
    json_object_set_new(o, "hash", json_string(hex));
    json_object_set_new(o, "init_signature", str_or_null(t->init_signature));
    if (with_code)
        json_object_set_new(o, "code", jsonx_string(sv_from(t->code, t->code_len)));
    return o;
}

int task_set_write_jsonl(const struct task_set *set, const char *path, struct ca_err *err)
{
    struct buf out;
    int rc = 0;
    buf_init(&out, CA_LIMIT_DATASET_BYTES);
    for (size_t i = 0; i < set->n && !rc; i++) {
        const struct task *t = &set->tasks[i];
        json_t *row = json_object();
        json_object_set_new(row, "id", str_or_null(t->id));
        json_object_set_new(row, "name", str_or_null(t->name));
        json_object_set_new(row, "level", json_integer(t->level));
        json_object_set_new(row, "ops", ops_array(t));
        json_object_set_new(row, "data_source", str_or_null(t->data_source));
        json_object_set_new(row, "code", jsonx_string(sv_from(t->code, t->code_len)));
        rc = jsonx_dump(row, 0, &out);
        if (!rc)
            rc = buf_addch(&out, '\n');
        json_decref(row);
    }
    if (rc) {
        rc = err_setf(err, rc, "%s: the dataset would be over %zu bytes (CA_LIMIT_DATASET_BYTES)",
                      path, (size_t)CA_LIMIT_DATASET_BYTES);
        goto out;
    }
    rc = fs_write_atomic(path, out.data, out.len, 0644, err);
out:
    buf_release(&out);
    return rc;
}
