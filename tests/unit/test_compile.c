/*
 * test_compile.c - the compile pool (src/eval/compile*.c): real nvcc runs on the example
 * kernels and small fixtures, the object and module cache, error trimming, timeouts, sandboxed
 * compilers, concurrent builds sharing a cache, and the binding path (precompiled header,
 * bindings, link) through the fake PyTorch of compile_fixture.h, so that it runs without
 * PyTorch. load_inline sources are in test_compile_inline.c; keys, the toolchain, pruning
 * and compiler output in test_compile_keys.c.
 *
 * Cases that need nvcc skip (the runner's SKIP) when it is missing.
 */

#include "compile_fixture.h"
#include "core/banned.h"

/* ---- .cu objects and the cache ---- */

TEST(cu_objects_built_then_cached)
{
    need_nvcc();
    char *snap = snapshot("snap");
    put_file(snap, "softmax_last_dim.cu", SOFTMAX);
    char *cache = xstrfmt("%s/cache", test_tmpdir());
    struct compile_opts o;
    base_opts(&o, cache);
    no_torch(&o);
    struct compile_report r;
    compile_report_init(&r);
    struct ca_err err = {0};

    CHECK_EQ(build(&o, snap, NULL, &r, &err), CA_EUNAVAIL);
    const struct compile_unit_report *u = unit(&r, "kernels/softmax_last_dim.cu");
    CHECK(u->ok);
    CHECK(!u->cached);
    CHECK(u->elapsed_us > 0);
    CHECK_EQ(strlen(u->key), HASH128_HEX_LEN);
    char *obj = xstrfmt("%s/objects/%.2s/%s.o", cache, u->key, u->key);
    CHECK(fs_is_file(obj));
    int64_t cold = r.total_us;
    printf("  nvcc of softmax_last_dim.cu, cold: %.2f s (unit %.2f s)\n", cold / 1e6,
           u->elapsed_us / 1e6);

    CHECK_EQ(build(&o, snap, NULL, &r, &err), CA_EUNAVAIL);
    u = unit(&r, "kernels/softmax_last_dim.cu");
    CHECK(u->ok);
    CHECK(u->cached);
    CHECK_EQ(u->elapsed_us, 0);
    printf("  the same build, cached: %.1f ms\n", r.total_us / 1e3);
    CHECK(r.total_us * 5 < cold);
    /* Nothing is left behind in tmp/. */
    char *tmp = xstrfmt("%s/tmp", cache);
    CHECK_EQ(count_files(tmp), 0);
    free(tmp);
    free(obj);
    compile_report_release(&r);
    free(cache);
    free(snap);
}

/* Issue 18: ./compile shows what each kernel uses (ptxas -v), also when the object is cached. */
TEST(cu_kernels_report_registers_spills_and_shared_memory)
{
    need_nvcc();
    char *snap = snapshot("snap");
    put_text(snap, "tile.cu",
             "#include <cuda_runtime.h>\n"
             "namespace {\n"
             "__global__ void tile_kernel(const float *x, float *y, int n)\n"
             "{\n"
             "    __shared__ float s[256];\n"
             "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
             "    s[threadIdx.x] = i < n ? x[i] : 0.0f;\n"
             "    __syncthreads();\n"
             "    if (i < n) y[i] = s[255 - threadIdx.x];\n"
             "}\n"
             "} // namespace\n"
             "extern \"C\" cudaError_t tile_launch(const float *x, float *y, int n,\n"
             "                                    cudaStream_t st)\n"
             "{\n"
             "    tile_kernel<<<(n + 255) / 256, 256, 0, st>>>(x, y, n);\n"
             "    return cudaGetLastError();\n"
             "}\n");
    char *cache = xstrfmt("%s/cache", test_tmpdir());
    struct compile_opts o;
    base_opts(&o, cache);
    no_torch(&o);
    struct compile_report r;
    compile_report_init(&r);
    struct ca_err err = {0};
    for (int pass = 0; pass < 2; pass++) {
        CHECK_EQ(build(&o, snap, NULL, &r, &err), CA_EUNAVAIL);
        const struct compile_unit_report *u = unit(&r, "kernels/tile.cu");
        CHECK(u->ok);
        CHECK_EQ(u->cached, pass == 1);
        REQUIRE(u->nkernels == 1);
        CHECK_STR(u->kernels[0].name, "tile_kernel");
        CHECK(u->kernels[0].registers > 0);
        CHECK_EQ(u->kernels[0].shared_bytes, 1024);
        CHECK_EQ(u->kernels[0].spill_store_bytes, 0);
        CHECK(!strstr(u->log.data, "ptxas info"));
        json_t *j = compile_report_to_json(&r);
        struct buf text;
        buf_init(&text, CA_LIMIT_JSON_BYTES);
        json_t *report = json_pack("{s:s, s:O}", "stage", "compile", "compile", j);
        CHECK_EQ(eval_format(report, &text), 0);
        CHECK_CONTAINS(text.data, "kernels/tile.cu: tile_kernel: ");
        CHECK_CONTAINS(text.data, " registers, 1024 bytes shared, no spills");
        json_decref(report);
        json_decref(j);
        buf_release(&text);
    }
    compile_report_release(&r);
    free(cache);
    free(snap);
}

/* The parser on ptxas's words, spills included, device functions left out. */
TEST(ptxas_parse_and_demangle)
{
    static const char log[] =
        "ptxas info    : 0 bytes gmem\n"
        "ptxas info    : Compiling entry function '_ZN12_GLOBAL__N_14gemmILi64EEEvPKfPf' for "
        "'sm_90'\n"
        "ptxas info    : Function properties for _ZN12_GLOBAL__N_14gemmILi64EEEvPKfPf\n"
        "    16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
        "ptxas info    : Used 255 registers, used 1 barriers, 16384 bytes smem, 368 bytes "
        "cmem[0]\n"
        "ptxas info    : Function properties for _Z6helperf\n"
        "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
        "ptxas info    : Compiling entry function 'plain_c_kernel' for 'sm_90'\n"
        "ptxas info    : Function properties for plain_c_kernel\n"
        "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
        "ptxas info    : Used 8 registers, used 0 barriers, 360 bytes cmem[0]\n";
    struct compile_kernel_info k[4];
    REQUIRE(compile__ptxas_parse(sv_cstr(log), k, 4) == 2);
    CHECK_STR(k[0].name, "gemm");
    CHECK_EQ(k[0].registers, 255);
    CHECK_EQ(k[0].shared_bytes, 16384);
    CHECK_EQ(k[0].stack_bytes, 16);
    CHECK_EQ(k[0].spill_store_bytes, 8);
    CHECK_EQ(k[0].spill_load_bytes, 12);
    CHECK_STR(k[1].name, "plain_c_kernel");
    CHECK_EQ(k[1].registers, 8);
    CHECK_EQ(k[1].shared_bytes, 0);
    CHECK(compile__ptxas_line(SV_LIT("ptxas info    : Used 8 registers")));
    CHECK(!compile__ptxas_line(SV_LIT("kernels/a.cu:3: warning: unused variable")));
}

TEST(changed_cu_rebuilds_only_that_unit)
{
    need_nvcc();
    char *snap = snapshot("snap");
    put_file(snap, "softmax_last_dim.cu", SOFTMAX);
    put_file(snap, "add.cu", "tests/eval/compile/src/add.cu");
    char *cache = xstrfmt("%s/cache", test_tmpdir());
    struct compile_opts o;
    base_opts(&o, cache);
    no_torch(&o);
    struct compile_report r;
    compile_report_init(&r);
    struct ca_err err = {0};
    CHECK_EQ(build(&o, snap, NULL, &r, &err), CA_EUNAVAIL);
    CHECK(unit(&r, "kernels/add.cu")->ok);
    CHECK(unit(&r, "kernels/softmax_last_dim.cu")->ok);
    char key[HASH128_HEX_LEN + 1];
    memcpy(key, unit(&r, "kernels/add.cu")->key, sizeof(key));

    put_text(snap, "add.cu", "extern \"C\" int add_launch(int a, int b) { return b + a; }\n");
    CHECK_EQ(build(&o, snap, NULL, &r, &err), CA_EUNAVAIL);
    CHECK(unit(&r, "kernels/softmax_last_dim.cu")->cached);
    CHECK(!unit(&r, "kernels/add.cu")->cached);
    CHECK(unit(&r, "kernels/add.cu")->ok);
    CHECK(strcmp(unit(&r, "kernels/add.cu")->key, key) != 0);
    compile_report_release(&r);
    free(cache);
    free(snap);
}

TEST(unit_including_another_unit_follows_it)
{
    need_nvcc();
    char *snap = snapshot("snap");
    put_text(snap, "a.cu",
             "#include \"b.cu\"\nextern \"C\" int a_fn(void) { return b_value(); }\n");
    put_text(snap, "b.cu", "static int b_value(void) { return 1; }\n");
    char *cache = xstrfmt("%s/cache", test_tmpdir());
    struct compile_opts o;
    base_opts(&o, cache);
    no_torch(&o);
    struct compile_report r;
    compile_report_init(&r);
    struct ca_err err = {0};
    CHECK_EQ(build(&o, snap, NULL, &r, &err), CA_EUNAVAIL);
    CHECK(unit(&r, "kernels/a.cu")->ok);
    put_text(snap, "b.cu", "static int b_value(void) { return 2; }\n");
    CHECK_EQ(build(&o, snap, NULL, &r, &err), CA_EUNAVAIL);
    /* a.cu did not change, but what it includes did. */
    CHECK(!unit(&r, "kernels/a.cu")->cached);
    compile_report_release(&r);
    free(cache);
    free(snap);
}

TEST(syntax_error_trimmed_with_workspace_names)
{
    need_nvcc();
    struct tbuild t;
    tb_begin(&t);
    put_file(t.snap, "bad.cu", "tests/eval/compile/src/bad.cu");
    put_file(t.snap, "add.cu", "tests/eval/compile/src/add.cu");
    CHECK_EQ(build(&t.o, t.snap, NULL, &t.r, &t.err), 0);
    CHECK(!t.r.ok);
    CHECK(!t.r.link_ok);
    CHECK(!unit(&t.r, "kernels/bad.cu")->ok);
    CHECK(unit(&t.r, "kernels/add.cu")->ok);
    CHECK_CONTAINS(t.r.errors.data, "kernels/bad.cu:6: error: expected a \";\"");
    CHECK_CONTAINS(unit(&t.r, "kernels/bad.cu")->log.data, "kernels/bad.cu:6: error");
    CHECK(!strstr(t.r.errors.data, t.cache));
    CHECK(!strstr(t.r.errors.data, "/workspace"));
    CHECK(!strstr(t.r.errors.data, "errors detected in the compilation"));
    CHECK(count_lines(t.r.errors.data) <= COMPILE_ERROR_LINES + 1);
    CHECK_CONTAINS(t.r.full_log.data, "== kernels/bad.cu (exit ");
    CHECK(t.r.so_path == NULL);
    json_t *j = compile_report_to_json(&t.r);
    REQUIRE(j);
    CHECK(json_is_false(json_object_get(j, "ok")));
    CHECK_CONTAINS(json_string_value(json_object_get(j, "errors")), "kernels/bad.cu:6:");
    json_decref(j);
    tb_end(&t);
}

TEST(include_outside_snapshot_unsandboxed)
{
    need_nvcc();
    char *outside = xstrfmt("%s/outside.h", test_tmpdir());
    write_text(outside, "#define OUTSIDE_VALUE 7\n");
    char *snap = snapshot("snap");
    char *src =
        xstrfmt("#include \"%s\"\nextern \"C\" int v(void) { return OUTSIDE_VALUE; }\n", outside);
    put_text(snap, "inc.cu", src);
    put_text(snap, "etc.cu", "#include \"/etc/hostname\"\n");
    char *cache = xstrfmt("%s/cache", test_tmpdir());
    struct compile_opts o;
    base_opts(&o, cache);
    no_torch(&o);
    struct compile_report r;
    compile_report_init(&r);
    struct ca_err err = {0};
    CHECK_EQ(build(&o, snap, NULL, &r, &err), CA_EUNAVAIL);
    /* Without a sandbox the compiler reads what the host lets it: the point of sandboxing. */
    CHECK(unit(&r, "kernels/inc.cu")->ok);
    if (fs_is_file("/etc/hostname"))
        CHECK(!unit(&r, "kernels/etc.cu")->ok); /* a host name is no C++ */
    compile_report_release(&r);
    free(cache);
    free(src);
    free(snap);
    free(outside);
}

TEST(include_outside_snapshot_sandboxed)
{
    need_nvcc();
    need_sandbox();
    char *outside = xstrfmt("%s/outside.h", test_tmpdir());
    write_text(outside, "#define OUTSIDE_VALUE 7\n");
    char *snap = snapshot("snap");
    char *src =
        xstrfmt("#include \"%s\"\nextern \"C\" int v(void) { return OUTSIDE_VALUE; }\n", outside);
    put_text(snap, "inc.cu", src);
    put_text(snap, "shadow.cu", "#include \"/etc/shadow\"\n");
    put_file(snap, "add.cu", "tests/eval/compile/src/add.cu");
    char *cache = xstrfmt("%s/cache", test_tmpdir());
    struct compile_opts o;
    base_opts(&o, cache);
    o.use_sandbox = true;
    no_torch(&o);
    struct compile_report r;
    compile_report_init(&r);
    struct ca_err err = {0};
    CHECK_EQ(build(&o, snap, NULL, &r, &err), CA_EUNAVAIL);
    CHECK(unit(&r, "kernels/add.cu")->ok);
    CHECK(!unit(&r, "kernels/inc.cu")->ok);
    CHECK(!unit(&r, "kernels/shadow.cu")->ok);
    /* nvcc preprocesses with the host compiler, which says so. */
    CHECK_CONTAINS(unit(&r, "kernels/inc.cu")->log.data, "kernels/inc.cu:1:10: fatal error: ");
    CHECK_CONTAINS(unit(&r, "kernels/inc.cu")->log.data, "outside.h: No such file or directory");
    CHECK_CONTAINS(unit(&r, "kernels/shadow.cu")->log.data,
                   "fatal error: /etc/shadow: No such file or directory");
    CHECK(!strstr(r.full_log.data, "root:"));
    compile_report_release(&r);
    free(cache);
    free(src);
    free(snap);
    free(outside);
}

TEST(timeout_kills_the_compiler)
{
    need_nvcc();
    char *snap = snapshot("snap");
    put_file(snap, "softmax_last_dim.cu", SOFTMAX);
    char *cache = xstrfmt("%s/cache", test_tmpdir());
    struct compile_opts o;
    base_opts(&o, cache);
    no_torch(&o);
    o.timeout_ms = 300;
    struct compile_report r;
    compile_report_init(&r);
    struct ca_err err = {0};
    int64_t t0 = ca_now_us();
    CHECK_EQ(build(&o, snap, NULL, &r, &err), CA_EUNAVAIL);
    CHECK(ca_now_us() - t0 < 5 * 1000000);
    const struct compile_unit_report *u = unit(&r, "kernels/softmax_last_dim.cu");
    CHECK(!u->ok);
    CHECK(u->timed_out);
    CHECK_CONTAINS(u->log.data, "kernels/softmax_last_dim.cu: nvcc timed out after 300 ms");
    CHECK_CONTAINS(r.errors.data, "timed out");
    /* Nothing half-written entered the cache. */
    char *objects = xstrfmt("%s/objects", cache);
    CHECK_EQ(count_files(objects), 0);
    free(objects);
    compile_report_release(&r);
    free(cache);
    free(snap);
}

TEST(timeout_in_sandbox)
{
    need_nvcc();
    need_sandbox();
    char *snap = snapshot("snap");
    put_file(snap, "softmax_last_dim.cu", SOFTMAX);
    char *cache = xstrfmt("%s/cache", test_tmpdir());
    struct compile_opts o;
    base_opts(&o, cache);
    o.use_sandbox = true;
    no_torch(&o);
    o.timeout_ms = 400;
    struct compile_report r;
    compile_report_init(&r);
    struct ca_err err = {0};
    int64_t t0 = ca_now_us();
    CHECK_EQ(build(&o, snap, NULL, &r, &err), CA_EUNAVAIL);
    CHECK(ca_now_us() - t0 < 5 * 1000000);
    CHECK(unit(&r, "kernels/softmax_last_dim.cu")->timed_out);
    compile_report_release(&r);
    free(cache);
    free(snap);
}

TEST(no_torch_is_unavailable_after_the_cu_files)
{
    need_nvcc();
    char *snap = snapshot("snap");
    put_file(snap, "add.cu", "tests/eval/compile/src/add.cu");
    put_file(snap, "add_binding.cpp", "tests/eval/compile/src/add_binding.cpp");
    char *cache = xstrfmt("%s/cache", test_tmpdir());
    struct compile_opts o;
    base_opts(&o, cache);
    no_torch(&o);
    struct compile_report r;
    compile_report_init(&r);
    struct ca_err err = {0};
    CHECK_EQ(build(&o, snap, NULL, &r, &err), CA_EUNAVAIL);
    CHECK_CONTAINS(err.msg, "PyTorch is not importable by ");
    CHECK_CONTAINS(err.msg, "(needed to build bindings): install it or set CUDA_AGENT_PYTHON");
    CHECK_CONTAINS(err.msg, "No module named 'torch'");
    CHECK_EQ(r.n, 3);
    CHECK(unit(&r, "kernels/add.cu")->ok);
    CHECK(!unit(&r, "kernels/add_binding.cpp")->ok);
    CHECK(!unit(&r, "binding.cpp")->ok);
    CHECK_CONTAINS(unit(&r, "binding.cpp")->log.data, "not built: PyTorch is not importable");
    CHECK_CONTAINS(r.errors.data, "PyTorch is not importable");
    CHECK(!r.ok);
    compile_report_release(&r);
    free(cache);
    free(snap);
}

/* ---- bindings, precompiled header and link (fake torch) ---- */

/* The one entry in cache/pch/ (a directory named by its key). */
static char *pch_entry(const char *cache)
{
    char *cmd = xstrfmt("ls -d '%s'/pch/*/", cache);
    const char *argv[] = {"sh", "-c", cmd, NULL};
    struct proc_opts po = {.argv = argv, .timeout_ms = 10000};
    struct proc_result r;
    proc_result_init(&r);
    struct ca_err err = {0};
    REQUIRE(proc_run(&po, &r, &err) == 0);
    buf_rtrim(&r.out);
    REQUIRE(r.out.len > 1 && !strchr(r.out.data, '\n'));
    buf_truncate(&r.out, r.out.len - 1); /* the trailing slash */
    char *dir = xstrdup(r.out.data);
    proc_result_release(&r);
    free(cmd);
    return dir;
}

TEST(bindings_pch_link_and_module_cache)
{
    need_nvcc();
    struct tbuild t;
    tb_begin(&t);
    put_file(t.snap, "add.cu", "tests/eval/compile/src/add.cu");
    put_file(t.snap, "add_binding.cpp", "tests/eval/compile/src/add_binding.cpp");

    REQUIRE(build(&t.o, t.snap, t.out, &t.r, &t.err) == 0);
    tb_show_errors(&t);
    CHECK(t.r.ok);
    CHECK(t.r.link_ok);
    CHECK(!t.r.link_cached);
    CHECK(t.r.pch_built);
    CHECK(t.r.pch_used);
    CHECK(unit(&t.r, "kernels/add_binding.cpp")->used_pch);
    CHECK(unit(&t.r, "binding.cpp")->used_pch);
    CHECK(!unit(&t.r, "kernels/add.cu")->used_pch);
    CHECK_EQ(unit(&t.r, "binding.cpp")->role, COMPILE_ROLE_REGISTRY);
    CHECK_EQ(unit(&t.r, "kernels/add_binding.cpp")->role, COMPILE_ROLE_BINDING);
    REQUIRE(t.r.so_path);
    CHECK_STR(t.r.so_path, t.out);
    CHECK_EQ(t.r.errors.len, 0);
    printf("  fake-torch build: total %.2f s, pch %.2f s, link %.1f ms\n", t.r.total_us / 1e6,
           t.r.pch_us / 1e6, t.r.link_us / 1e3);

    /* The module loads, and its launcher runs. */
    void *h = dlopen(t.out, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        fprintf(stderr, "  dlopen: %s\n", dlerror());
    REQUIRE(h);
    int (*add)(int, int) = (int (*)(int, int))dlsym(h, "add_launch");
    REQUIRE(add);
    CHECK_EQ(add(2, 3), 5);
    CHECK(dlsym(h, "PyInit_" COMPILE_MODULE_NAME) != NULL);
    dlclose(h);

    /* Unchanged: every object and the module itself from the cache. */
    char so_key[HASH128_HEX_LEN + 1];
    memcpy(so_key, t.r.so_key, sizeof(so_key));
    REQUIRE(build(&t.o, t.snap, t.out, &t.r, &t.err) == 0);
    CHECK(t.r.ok);
    CHECK(t.r.link_cached);
    CHECK(!t.r.pch_built);
    for (size_t i = 0; i < t.r.n; i++)
        CHECK(t.r.units[i].cached);
    CHECK_STR(t.r.so_key, so_key);

    /* Only into the cache: so_path names the cached module. */
    REQUIRE(build(&t.o, t.snap, NULL, &t.r, &t.err) == 0);
    REQUIRE(t.r.so_path);
    CHECK_CONTAINS(t.r.so_path, "/so/");
    CHECK(fs_is_file(t.r.so_path));

    /* A new binding: compiled alone, with the existing precompiled header; relinked. */
    put_text(t.snap, "mul_binding.cpp",
             "#include \"binding_registry.h\"\nstatic int mul(int a, int b) { return a * b; }\n"
             "static void bind(pybind11::module_ &m) { m.def(\"mul\", &mul); }\n"
             "REGISTER_BINDING(\"mul\", bind);\n");
    REQUIRE(build(&t.o, t.snap, t.out, &t.r, &t.err) == 0);
    CHECK(t.r.ok);
    CHECK(!t.r.pch_built);
    CHECK(!unit(&t.r, "kernels/mul_binding.cpp")->cached);
    CHECK(unit(&t.r, "kernels/mul_binding.cpp")->used_pch);
    CHECK(unit(&t.r, "kernels/add_binding.cpp")->cached);
    CHECK(unit(&t.r, "kernels/add.cu")->cached);
    CHECK(!t.r.link_cached);
    CHECK(strcmp(t.r.so_key, so_key) != 0);

    tb_end(&t);
}

TEST(warm_builds_the_pch_ahead)
{
    need_nvcc();
    struct tbuild t;
    tb_begin(&t);
    REQUIRE(compile_warm(&t.o, &t.err) == 0);
    char *entry = pch_entry(t.cache);
    char *gch = xstrfmt("%s/pch.h.gch", entry);
    CHECK(fs_is_file(gch));
    put_file(t.snap, "add_binding.cpp", "tests/eval/compile/src/add_binding.cpp");
    REQUIRE(build(&t.o, t.snap, NULL, &t.r, &t.err) == 0);
    CHECK(t.r.ok);
    CHECK(!t.r.pch_built);
    CHECK(t.r.pch_used);
    /* Without PyTorch there is nothing to warm. */
    no_torch(&t.o);
    CHECK_EQ(compile_warm(&t.o, &t.err), CA_EUNAVAIL);
    free(gch);
    free(entry);
    tb_end(&t);
}

/* Issue 21: every compiler the pool starts (bindings, the registry, the precompiled header,
 * the link) runs on the compile cores at the compile nice value, as read by the compiler
 * itself from /proc (a c++ wrapper first in PATH records it, then runs the real one). */
TEST(compilers_run_on_the_compile_cores_niced)
{
    need_nvcc();
    cpu_set_t all;
    REQUIRE(sched_getaffinity(0, sizeof(all), &all) == 0);
    int lo = -1;
    for (int c = 0; c < CPU_SETSIZE && lo < 0; c++)
        if (CPU_ISSET(c, &all))
            lo = c;
    if (CPU_COUNT(&all) < 2)
        SKIP("cpus", "this process may run on one CPU only");
    char *real = proc_which("c++");
    REQUIRE(real);
    char *bin = xstrfmt("%s/bin", test_tmpdir());
    char *log = xstrfmt("%s/placement.log", test_tmpdir());
    struct ca_err err = {0};
    REQUIRE(fs_mkdirs(bin, 0755, &err) == 0);
    char *wrapper = xstrfmt("%s/c++", bin);
    char *script = xstrfmt("#!/bin/sh\n"
                           "if [ \"$1\" != --version ]; then\n"
                           "  echo \"$(grep Cpus_allowed_list /proc/self/status | cut -f2) "
                           "$(cut -d' ' -f19 /proc/self/stat)\" >> '%s'\n"
                           "fi\n"
                           "exec '%s' \"$@\"\n",
                           log, real);
    write_text(wrapper, script);
    REQUIRE(chmod(wrapper, 0755) == 0);
    char *saved_path = xstrdup(getenv("PATH"));
    char *path = xstrfmt("%s:%s", bin, saved_path);
    setenv("PATH", path, 1);

    struct tbuild t;
    tb_begin(&t);
    put_file(t.snap, "add_binding.cpp", "tests/eval/compile/src/add_binding.cpp");
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(lo, &one);
    cpuplan_compile_config(&one, 5, 0);
    REQUIRE(build(&t.o, t.snap, t.out, &t.r, &t.err) == 0);
    tb_show_errors(&t);
    CHECK(t.r.ok);
    char *seen = read_text(log);
    char *want = xstrfmt("%d 5\n", lo); /* one line per run: CPUs, nice */
    size_t runs = 0;
    for (const char *p = seen; *p; p += strlen(want), runs++)
        if (strncmp(p, want, strlen(want)) != 0) {
            test__fail(__FILE__, __LINE__, "a compiler ran with %.40s, not %d/nice 5", p, lo);
            break;
        }
    CHECK(runs >= 3); /* add_binding.cpp, binding.cpp, the link (and the header, if built) */
    /* The build's own thread (the precompiled header and the link ran beside it) is as it was. */
    cpu_set_t after;
    REQUIRE(sched_getaffinity(0, sizeof(after), &after) == 0);
    CHECK(CPU_EQUAL(&after, &all));
    cpuplan_compile_config(NULL, 0, 0);
    setenv("PATH", saved_path, 1);
    free(saved_path);
    free(seen);
    free(want);
    free(path);
    free(script);
    free(wrapper);
    free(log);
    free(bin);
    free(real);
    tb_end(&t);
}

TEST(bindings_without_pch)
{
    need_nvcc();
    struct tbuild t;
    tb_begin(&t);
    put_file(t.snap, "add.cu", "tests/eval/compile/src/add.cu");
    put_file(t.snap, "add_binding.cpp", "tests/eval/compile/src/add_binding.cpp");
    t.o.use_pch = false;
    REQUIRE(build(&t.o, t.snap, NULL, &t.r, &t.err) == 0);
    CHECK(t.r.ok);
    CHECK(!t.r.pch_used);
    CHECK(!t.r.pch_built);
    char key[HASH128_HEX_LEN + 1];
    memcpy(key, unit(&t.r, "kernels/add_binding.cpp")->key, sizeof(key));
    /* The precompiled header is an accelerator: objects are shared either way. */
    t.o.use_pch = true;
    REQUIRE(build(&t.o, t.snap, NULL, &t.r, &t.err) == 0);
    CHECK(unit(&t.r, "kernels/add_binding.cpp")->cached);
    CHECK_STR(unit(&t.r, "kernels/add_binding.cpp")->key, key);
    tb_end(&t);
}

TEST(pch_damaged_or_refused)
{
    need_nvcc();
    struct tbuild t;
    tb_begin(&t);
    put_file(t.snap, "add_binding.cpp", "tests/eval/compile/src/add_binding.cpp");
    REQUIRE(build(&t.o, t.snap, NULL, &t.r, &t.err) == 0);
    CHECK(t.r.ok && t.r.pch_built);
    char *entry = pch_entry(t.cache);

    /* A damaged .gch: gcc says it is not a PCH file and parses the header instead. */
    char *gch = xstrfmt("%s/pch.h.gch", entry);
    REQUIRE(chmod(gch, 0644) == 0);
    write_text(gch, "garbage");
    put_text(t.snap, "one_binding.cpp",
             "#include \"binding_registry.h\"\nstatic int one() { return 1; }\n"
             "static void bind(pybind11::module_ &m) { m.def(\"one\", &one); }\n"
             "REGISTER_BINDING(\"one\", bind);\n");
    REQUIRE(build(&t.o, t.snap, NULL, &t.r, &t.err) == 0);
    CHECK(t.r.ok);
    CHECK(unit(&t.r, "kernels/one_binding.cpp")->ok);
    CHECK_CONTAINS(unit(&t.r, "kernels/one_binding.cpp")->log.data, "pch/pch.h.gch");
    CHECK(!unit(&t.r, "kernels/one_binding.cpp")->used_pch);

    /* A header gcc refused before is not tried again: bindings compile without one. */
    struct ca_err e2 = {0};
    REQUIRE(fs_remove_tree(entry, &e2) == 0);
    char *failed = xstrfmt("%s.failed", entry);
    write_text(failed, "error: refused\n");
    put_text(t.snap, "two_binding.cpp",
             "#include \"binding_registry.h\"\nstatic int two() { return 2; }\n"
             "static void bind(pybind11::module_ &m) { m.def(\"two\", &two); }\n"
             "REGISTER_BINDING(\"two\", bind);\n");
    REQUIRE(build(&t.o, t.snap, NULL, &t.r, &t.err) == 0);
    CHECK(t.r.ok);
    CHECK(!t.r.pch_built);
    CHECK(!t.r.pch_used);
    CHECK(!unit(&t.r, "kernels/two_binding.cpp")->used_pch);
    CHECK(!fs_exists(entry));
    tb_end(&t);
    free(failed);
    free(gch);
    free(entry);
}

/* A binding naming what only the real torch/extension.h declares (torch::nn); `extra` makes a
 * new source of it. */
static void put_nn_binding(const char *snap, const char *extra)
{
    char *text =
        xstrfmt("#include \"binding_registry.h\"\n"
                "static int size_of_module() { return %s(int)sizeof(torch::nn::Module); }\n"
                "static void bind(pybind11::module_ &m) { m.def(\"s\", &size_of_module); }\n"
                "REGISTER_BINDING(\"s\", bind);\n",
                extra);
    put_text(snap, "nn_binding.cpp", text);
    free(text);
}

TEST(binding_needing_the_full_header_is_retried_with_it)
{
    need_nvcc();
    /* Bindings get the light torch/extension.h (and the precompiled header built with it); one
     * that names what only the real header declares is compiled again with the real header and
     * without the precompiled one, and builds. */
    struct tbuild t;
    tb_begin(&t);
    put_nn_binding(t.snap, "");
    REQUIRE(build(&t.o, t.snap, NULL, &t.r, &t.err) == 0);
    tb_show_errors(&t);
    CHECK(t.r.ok && t.r.pch_built);
    CHECK_CONTAINS(t.r.full_log.data, "kernels/nn_binding.cpp (exit 0, retried with the full torch "
                                      "headers)");
    CHECK(!unit(&t.r, "kernels/nn_binding.cpp")->used_pch);
    CHECK(unit(&t.r, "binding.cpp")->used_pch);
    CHECK_CONTAINS(t.r.full_log.data, "== binding.cpp (exit 0)\n");

    /* use_light off (the benchmark's baseline): it builds at once, with a precompiled header
     * of the real headers (another key: built anew). */
    t.o.use_light = false;
    put_nn_binding(t.snap, "1 + ");
    REQUIRE(build(&t.o, t.snap, NULL, &t.r, &t.err) == 0);
    tb_show_errors(&t);
    CHECK(t.r.ok && t.r.pch_built);
    CHECK(unit(&t.r, "kernels/nn_binding.cpp")->used_pch);
    CHECK(strstr(t.r.full_log.data, "retried") == NULL);
    tb_end(&t);
}

TEST(binding_error_trimmed)
{
    need_nvcc();
    struct tbuild t;
    tb_begin(&t);
    put_file(t.snap, "bad_binding.cpp", "tests/eval/compile/src/bad_binding.cpp");
    REQUIRE(build(&t.o, t.snap, NULL, &t.r, &t.err) == 0);
    CHECK(!t.r.ok);
    CHECK(unit(&t.r, "binding.cpp")->ok);
    CHECK(!unit(&t.r, "kernels/bad_binding.cpp")->ok);
    CHECK_CONTAINS(t.r.errors.data, "kernels/bad_binding.cpp:6:");
    CHECK_CONTAINS(t.r.errors.data, "error: 'undefined_in_binding' was not declared");
    /* Not blamed on the precompiled header: no retry. */
    CHECK(unit(&t.r, "kernels/bad_binding.cpp")->used_pch);
    CHECK(!strstr(t.r.full_log.data, "retried without"));
    tb_end(&t);
}

TEST(link_error_names_units)
{
    need_nvcc();
    struct tbuild t;
    tb_begin(&t);
    put_file(t.snap, "add.cu", "tests/eval/compile/src/add.cu");
    put_file(t.snap, "dup.cu", "tests/eval/compile/src/dup.cu");
    REQUIRE(build(&t.o, t.snap, NULL, &t.r, &t.err) == 0);
    CHECK(!t.r.ok);
    CHECK(!t.r.link_ok);
    for (size_t i = 0; i < t.r.n; i++)
        CHECK(t.r.units[i].ok);
    CHECK_CONTAINS(t.r.errors.data, "link of cuda_extension failed");
    /* GNU ld: "multiple definition of `add_launch'"; lld: "duplicate symbol: add_launch". */
    CHECK(strstr(t.r.errors.data, "multiple definition of `add_launch'") ||
          strstr(t.r.errors.data, "duplicate symbol: add_launch"));
    CHECK_CONTAINS(t.r.errors.data, "kernels/add.cu.o");
    CHECK_CONTAINS(t.r.errors.data, "kernels/dup.cu.o");
    CHECK(!strstr(t.r.errors.data, t.cache));
    tb_end(&t);
}

TEST(cublas_linked_only_when_used)
{
    need_nvcc();
    char *readelf = proc_which("readelf");
    if (!readelf)
        SKIP("readelf", "readelf not found in PATH");
    struct tbuild t;
    tb_begin(&t);
    put_file(t.snap, "add.cu", "tests/eval/compile/src/add.cu");
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1)
            put_file(t.snap, "uses_cublas.cu", "tests/eval/compile/src/uses_cublas.cu");
        REQUIRE(build(&t.o, t.snap, t.out, &t.r, &t.err) == 0);
        CHECK(t.r.ok);
        const char *argv[] = {readelf, "-d", t.out, NULL};
        struct proc_opts po = {.argv = argv, .timeout_ms = 10000};
        struct proc_result pr;
        proc_result_init(&pr);
        REQUIRE(proc_run(&po, &pr, &t.err) == 0);
        /* The stub torch libraries define nothing, so --as-needed linkers drop them. */
        CHECK_CONTAINS(pr.out.data, "libcudart.so");
        CHECK_EQ(strstr(pr.out.data, "libcublas.so") != NULL, pass == 1);
        proc_result_release(&pr);
    }
    tb_end(&t);
    free(readelf);
}

TEST(sandboxed_full_build)
{
    need_nvcc();
    need_sandbox();
    char *fx = fixture("");
    if (strncmp(fx, "/tmp/", 5) == 0) {
        free(fx);
        SKIP("repo-outside-tmp", "the repository is under /tmp, which the sandbox cannot bind");
    }
    free(fx);
    /* Library directories are bound into the sandbox, which refuses /tmp: use /var/tmp. */
    char libdir[] = "/var/tmp/ca-fake-torch-XXXXXX";
    REQUIRE(mkdtemp(libdir));
    char *snap = snapshot("snap");
    put_file(snap, "add.cu", "tests/eval/compile/src/add.cu");
    put_file(snap, "add_binding.cpp", "tests/eval/compile/src/add_binding.cpp");
    char *cache = xstrfmt("%s/cache", test_tmpdir());
    char *out = xstrfmt("%s/m.so", test_tmpdir());
    struct compile_opts o;
    base_opts(&o, cache);
    o.use_sandbox = true;
    fake_torch(&o, libdir);
    struct compile_report r;
    compile_report_init(&r);
    struct ca_err err = {0};
    int rc = build(&o, snap, out, &r, &err);
    CHECK_EQ(rc, 0);
    if (!r.ok)
        fprintf(stderr, "  errors:\n%s\n  log:\n%s\n", r.errors.data, r.full_log.data);
    CHECK(r.ok);
    CHECK(r.pch_used);
    CHECK(fs_is_file(out));
    compile_report_release(&r);
    struct ca_err e2 = {0};
    CHECK(fs_remove_tree(libdir, &e2) == 0);
    free(out);
    free(cache);
    free(snap);
}

TEST(concurrent_builds_share_one_cache)
{
    need_nvcc();
    struct tbuild t;
    tb_begin(&t);
    put_file(t.snap, "add.cu", "tests/eval/compile/src/add.cu");
    put_file(t.snap, "add_binding.cpp", "tests/eval/compile/src/add_binding.cpp");
    pid_t pids[2];
    char *outs[2];
    for (int i = 0; i < 2; i++) {
        outs[i] = xstrfmt("%s/m%d.so", test_tmpdir(), i);
        fflush(NULL);
        pids[i] = fork();
        REQUIRE(pids[i] >= 0);
        if (pids[i] == 0) {
            struct compile_report r;
            compile_report_init(&r);
            struct ca_err err = {0};
            int rc = compile_build(&t.o, t.snap, outs[i], &r, &err);
            if (rc || !r.ok)
                fprintf(stderr, "  child %d: rc %d %s\n%s\n", i, rc, err.msg, r.errors.data);
            _exit(rc == 0 && r.ok ? 0 : 1);
        }
    }
    for (int i = 0; i < 2; i++) {
        int st;
        REQUIRE(waitpid(pids[i], &st, 0) == pids[i]);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    char *a = read_text(outs[0]), *b = read_text(outs[1]);
    struct stat sa, sb;
    REQUIRE(stat(outs[0], &sa) == 0 && stat(outs[1], &sb) == 0);
    CHECK_EQ(sa.st_size, sb.st_size);
    CHECK(memcmp(a, b, (size_t)sa.st_size) == 0);
    free(a);
    free(b);
    /* Whatever order they finished in, the cache holds complete entries only. */
    REQUIRE(build(&t.o, t.snap, NULL, &t.r, &t.err) == 0);
    CHECK(t.r.ok);
    CHECK(t.r.link_cached);
    for (size_t i = 0; i < t.r.n; i++)
        CHECK(t.r.units[i].cached);
    char *tmp = xstrfmt("%s/tmp", t.cache);
    CHECK_EQ(count_files(tmp), 0);
    free(tmp);
    for (int i = 0; i < 2; i++)
        free(outs[i]);
    tb_end(&t);
}

/* The report's unit named name; fails the test when there is none. */
static const struct compile_unit_report *unit_named(const struct compile_report *r,
                                                    const char *name)
{
    for (size_t i = 0; i < r->n; i++)
        if (strcmp(r->units[i].name, name) == 0)
            return &r->units[i];
    REQUIRE(!"no such unit");
    return NULL;
}

/*
 * Another evaluator's pruning removes an object this build found in the cache, after the
 * lookup and before the link: here while a second unit compiles, held by a FIFO it includes
 * (the writer removes the object before it lets the compiler read on; units go in name
 * order, so add.cu's lookup is done before slow.cu is submitted). The build builds
 * again instead of failing: a pruned cache entry is not the candidate's failure.
 */
TEST(pruned_object_is_built_again)
{
    need_nvcc();
    struct tbuild t;
    tb_begin(&t);
    put_file(t.snap, "add.cu", "tests/eval/compile/src/add.cu");
    REQUIRE(build(&t.o, t.snap, NULL, &t.r, &t.err) == 0);
    REQUIRE(t.r.ok);
    struct buf obj;
    buf_init(&obj, CA_LIMIT_PATH + 64);
    REQUIRE(compile__cache_path(t.cache, COMPILE__OBJ, unit_named(&t.r, "kernels/add.cu")->key,
                                &obj) == 0);
    REQUIRE(fs_is_file(obj.data));
    char *fifo = xstrfmt("%s/gate.h", test_tmpdir());
    REQUIRE(mkfifo(fifo, 0600) == 0);
    char *slow =
        xstrfmt("#include \"%s\"\nextern \"C\" int slow_launch(void) { return 1; }\n", fifo);
    put_text(t.snap, "slow.cu", slow);
    fflush(NULL);
    pid_t w = fork();
    REQUIRE(w >= 0);
    if (w == 0) {
        /* Every open of the FIFO by a compiler pass: the first removes the object. */
        for (int i = 0;; i++) {
            int fd = open(fifo, O_WRONLY | O_CLOEXEC);
            if (fd < 0 || (i == 0 && unlink(obj.data) != 0))
                _exit(1);
            close(fd);
        }
    }
    int rc = build(&t.o, t.snap, NULL, &t.r, &t.err);
    int st;
    REQUIRE(kill(w, SIGKILL) == 0 && waitpid(w, &st, 0) == w);
    CHECK(WIFSIGNALED(st));
    CHECK_EQ(rc, 0);
    CHECK(t.r.ok);
    CHECK(t.r.rebuilt);
    /* The second time, add.cu was compiled again and slow.cu came from the cache. */
    CHECK(!unit_named(&t.r, "kernels/add.cu")->cached);
    CHECK(unit_named(&t.r, "kernels/slow.cu")->cached);
    CHECK(fs_is_file(obj.data));
    CHECK(fs_is_file(t.r.so_path));
    json_t *j = compile_report_to_json(&t.r);
    CHECK(json_is_true(json_object_get(j, "rebuilt")));
    json_decref(j);
    /* A build that finds everything is not rebuilt. */
    REQUIRE(build(&t.o, t.snap, NULL, &t.r, &t.err) == 0);
    CHECK(!t.r.rebuilt);
    free(slow);
    free(fifo);
    buf_release(&obj);
    tb_end(&t);
}

TEST(empty_and_missing_snapshots)
{
    need_nvcc();
    struct tbuild t;
    tb_begin(&t);
    /* No kernels/ at all: the template's binding.cpp alone (a module with no functions). */
    char *empty = xstrfmt("%s/empty", test_tmpdir());
    REQUIRE(mkdir(empty, 0755) == 0);
    REQUIRE(build(&t.o, empty, NULL, &t.r, &t.err) == 0);
    CHECK(t.r.ok);
    CHECK_EQ(t.r.n, 1);
    CHECK_STR(t.r.units[0].name, "binding.cpp");
    /* Other files in kernels/ are not units and are not copied. */
    put_text(t.snap, "notes.txt", "not a source\n");
    put_text(t.snap, ".hidden.cu", "this is not C++\n");
    REQUIRE(build(&t.o, t.snap, NULL, &t.r, &t.err) == 0);
    CHECK(t.r.ok);
    CHECK_EQ(t.r.n, 1);
    char *missing = xstrfmt("%s/missing", test_tmpdir());
    CHECK(build(&t.o, missing, NULL, &t.r, &t.err) < 0);
    CHECK_CONTAINS(t.err.msg, "missing");
    tb_end(&t);
    free(missing);
    free(empty);
}

TEST(missing_nvcc_is_unavailable)
{
    /* A PATH without nvcc and no CUDA_HOME: the toolchain says so. Only where
     * /usr/local/cuda/bin/nvcc, the last fallback, does not exist. */
    if (access("/usr/local/cuda/bin/nvcc", X_OK) == 0)
        SKIP("no-cuda-home", "/usr/local/cuda/bin/nvcc exists");
    setenv("PATH", "/usr/bin:/bin", 1);
    unsetenv("CUDA_HOME");
    char *snap = snapshot("snap");
    struct compile_opts o;
    char *cache = xstrfmt("%s/cache", test_tmpdir());
    base_opts(&o, cache);
    no_torch(&o);
    struct compile_report r;
    compile_report_init(&r);
    struct ca_err err = {0};
    CHECK_EQ(compile_build(&o, snap, NULL, &r, &err), CA_EUNAVAIL);
    CHECK_CONTAINS(err.msg, "nvcc was not found");
    compile_report_release(&r);
    free(cache);
    free(snap);
}
