/*
 * compile_bench - what an agent iteration costs in the compile pool.
 *
 *   make bench && build/bench/compile_bench [options] [SOLUTION_DIR]
 *     --cache DIR     compile cache (default: a fresh directory under $TMPDIR)
 *     --out FILE      where the module goes (default: <cache>/cuda_extension.so)
 *     --sandbox       run compilers sandboxed
 *     --arch ARCH     e.g. sm_90 (default: the GPU's, else sm_90)
 *     --python PATH   interpreter with PyTorch (default: $CUDA_AGENT_PYTHON or python3)
 *
 * Copies SOLUTION_DIR/kernels (default examples/solutions/softmax_last_dim) into
 * a scratch snapshot and times, in one process (as the evaluator would run):
 * toolchain discovery; a cold build (empty cache: every unit, the precompiled
 * header, the link); the same build again (all cached); a build after a
 * change to one .cu; after a change to one binding (with the precompiled
 * header); the same without it; then, as the baseline, the same two with the
 * real torch headers instead of the light ones (their precompiled header is
 * built first, step "full_headers_pch"). Prints one JSON object per step, with
 * every unit's time. Without PyTorch only the .cu steps run.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/json.h"
#include "core/util.h"
#include "eval/compile.h"
#include "core/banned.h"

static void die(const char *what, const struct ca_err *err)
{
    fprintf(stderr, "compile_bench: %s: %s\n", what, err ? err->msg : "");
    exit(1);
}

static void copy_kernels(const char *from, const char *snap)
{
    char *cmd = xstrfmt("mkdir -p '%s/kernels' && cp '%s'/kernels/*.cu '%s'/kernels/*_binding.cpp "
                        "'%s/kernels/'",
                        snap, from, from, snap);
    if (system(cmd) != 0) {
        fprintf(stderr, "compile_bench: cannot copy %s/kernels\n", from);
        exit(1);
    }
    free(cmd);
}

/* Append a comment to the first file in snap/kernels ending in suffix: a new source. */
static const char *touch_first(const char *snap, const char *suffix, int n)
{
    static char name[512];
    char *cmd = xstrfmt("f=$(ls '%s'/kernels/*%s | head -1) && printf '\\n// edit %d\\n' >> \"$f\" "
                        "&& basename \"$f\"",
                        snap, suffix, n);
    FILE *p = popen(cmd, "r");
    free(cmd);
    if (!p || !fgets(name, sizeof(name), p))
        die("no file to change", NULL);
    pclose(p);
    name[strcspn(name, "\n")] = '\0';
    return name;
}

/* Seconds, to the millisecond. */
static double secs(int64_t us)
{
    return (double)((us + 500) / 1000) / 1000.0;
}

static void step(const char *label, const struct compile_opts *o, const char *snap, const char *out)
{
    struct compile_report r;
    compile_report_init(&r);
    struct ca_err err = {0};
    int rc = compile_build(o, snap, out, &r, &err);
    json_t *units = json_object();
    for (size_t i = 0; i < r.n; i++)
        json_object_set_new(units, r.units[i].name,
                            json_pack("{s:b, s:b, s:b, s:f}", "ok", r.units[i].ok, "cached",
                                      r.units[i].cached, "pch", r.units[i].used_pch, "s",
                                      secs(r.units[i].elapsed_us)));
    json_t *j = json_pack("{s:s, s:i, s:s, s:b, s:f, s:f, s:b, s:f, s:b, s:o}", "step", label, "rc",
                          rc, "error", err.msg, "ok", r.ok, "total_s", secs(r.total_us), "pch_s",
                          secs(r.pch_us), "pch_built", r.pch_built, "link_s", secs(r.link_us),
                          "link_cached", r.link_cached, "units", units);
    char *s = json_dumps(j, JSON_COMPACT);
    printf("%s\n", s);
    fflush(stdout);
    if (!r.ok && rc != CA_EUNAVAIL)
        fprintf(stderr, "%s\n%s\n", r.errors.data, r.full_log.data);
    free(s);
    json_decref(j);
    compile_report_release(&r);
}

int main(int argc, char **argv)
{
    struct compile_opts o;
    compile_opts_init(&o);
    o.use_sandbox = false;
    const char *cache = NULL, *out = NULL, *solution = "examples/solutions/softmax_last_dim";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--cache") && i + 1 < argc)
            cache = argv[++i];
        else if (!strcmp(argv[i], "--out") && i + 1 < argc)
            out = argv[++i];
        else if (!strcmp(argv[i], "--arch") && i + 1 < argc)
            o.arch = argv[++i];
        else if (!strcmp(argv[i], "--python") && i + 1 < argc)
            o.python = argv[++i];
        else if (!strcmp(argv[i], "--sandbox"))
            o.use_sandbox = true;
        else if (argv[i][0] != '-')
            solution = argv[i];
        else {
            fprintf(stderr, "usage: compile_bench [--cache DIR] [--out FILE] [--sandbox] "
                            "[--arch ARCH] [--python PATH] [SOLUTION_DIR]\n");
            return 64;
        }
    }
    const char *tmp = getenv("TMPDIR");
    char *scratch = xstrfmt("%s/compile-bench-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(scratch))
        die("mkdtemp", NULL);
    char *snap = xstrfmt("%s/snapshot", scratch);
    copy_kernels(solution, snap);
    char *cache_dir = cache ? xstrdup(cache) : xstrfmt("%s/cache", scratch);
    char *out_so = out ? xstrdup(out) : xstrfmt("%s/cuda_extension.so", scratch);
    o.cache_dir = cache_dir;

    struct ca_err err = {0};
    int64_t t0 = ca_now_us();
    json_t *tc = NULL;
    if (compile_toolchain_describe(&o, &tc, &err))
        die("toolchain", &err);
    json_object_set_new(tc, "step", json_string("toolchain"));
    json_object_set_new(tc, "s", json_real(secs(ca_now_us() - t0)));
    char *s = json_dumps(tc, JSON_COMPACT);
    printf("%s\n", s);
    free(s);
    json_decref(tc);

    step("cold", &o, snap, out_so);
    step("unchanged", &o, snap, out_so);
    printf("{\"step\": \"changed\", \"file\": \"%s\"}\n", touch_first(snap, ".cu", 1));
    step("cu_changed", &o, snap, out_so);
    printf("{\"step\": \"changed\", \"file\": \"%s\"}\n", touch_first(snap, "_binding.cpp", 2));
    step("binding_changed_pch", &o, snap, out_so);
    touch_first(snap, "_binding.cpp", 3);
    o.use_pch = false;
    step("binding_changed_no_pch", &o, snap, out_so);
    /* The baseline: the real torch headers (a precompiled header of their own, built here). */
    o.use_light = false;
    o.use_pch = true;
    touch_first(snap, "_binding.cpp", 4);
    step("full_headers_pch", &o, snap, out_so);
    touch_first(snap, "_binding.cpp", 5);
    step("binding_changed_full_headers_pch", &o, snap, out_so);
    touch_first(snap, "_binding.cpp", 6);
    o.use_pch = false;
    step("binding_changed_full_headers_no_pch", &o, snap, out_so);
    printf("{\"module\": \"%s\", \"scratch\": \"%s\"}\n", out_so, scratch);
    free(snap);
    free(cache_dir);
    free(out_so);
    free(scratch);
    return 0;
}
