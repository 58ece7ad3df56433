/*
 * test_compile_keys.c - the compile pool's pure parts: cache keys, the target architecture,
 * the toolchain probe, the cache directory, pruning, and the trimming and classification of
 * compiler output (fixtures in tests/eval/compile/logs: real compilers' words).
 */

#include "compile_fixture.h"
#include "core/banned.h"

/* ---- keys, architecture, toolchain ---- */

TEST(keys_change_with_every_input)
{
    const char *argv90[] = {"nvcc", "-c", "-gencode", "arch=compute_90,code=[sm_90,compute_90]",
                            NULL};
    const char *argv80[] = {"nvcc", "-c", "-gencode", "arch=compute_80,code=[sm_80,compute_80]",
                            NULL};
    const char *argv_o2[] = {
        "nvcc", "-c", "-O2", "-gencode", "arch=compute_90,code=[sm_90,compute_90]", NULL};
    struct compile__unit_key_in base = {
        .role = COMPILE_ROLE_CU,
        .name = "kernels/a.cu",
        .source = SV_LIT("int x;"),
        .compiler = "/usr/local/cuda/bin/nvcc",
        .compiler_version = "V13.0.88",
        .argv = argv90,
    };
    char k0[HASH128_HEX_LEN + 1], k[HASH128_HEX_LEN + 1];
    compile__unit_key(&base, k0);
    compile__unit_key(&base, k);
    CHECK_STR(k, k0);
    struct compile__unit_key_in v;
#define VARY(field, value)                                                                         \
    do {                                                                                           \
        v = base;                                                                                  \
        v.field = value;                                                                           \
        compile__unit_key(&v, k);                                                                  \
        if (strcmp(k, k0) == 0)                                                                    \
            test__fail(__FILE__, __LINE__, "key did not change with " #field);                     \
    } while (0)
    VARY(role, COMPILE_ROLE_BINDING);
    VARY(name, "kernels/b.cu");
    VARY(source, SV_LIT("int y;"));
    VARY(deps, SV_LIT("kernels/b.cu 0123"));
    VARY(compiler, "/opt/cuda/bin/nvcc");
    VARY(compiler_version, "V13.0.89");
    VARY(argv, argv80);
    VARY(argv, argv_o2);
    VARY(headers, "torch 2.11");
    VARY(template_header, SV_LIT("#pragma once"));
#undef VARY
    /* Fields are length-prefixed: moving bytes between them changes the key. */
    v = base;
    v.name = "kernels/a.cuint";
    v.source = SV_LIT(" x;");
    compile__unit_key(&v, k);
    CHECK(strcmp(k, k0) != 0);

    const char *keys1[] = {"a", "b"}, *keys2[] = {"b", "a"};
    const char *lflags[] = {"-shared", "-lcudart", NULL}, *lflags2[] = {"-shared", NULL};
    char s1[HASH128_HEX_LEN + 1], s2[HASH128_HEX_LEN + 1];
    compile__so_key("c++", "12", lflags, keys1, 2, s1);
    compile__so_key("c++", "12", lflags, keys2, 2, s2);
    CHECK(strcmp(s1, s2) != 0);
    compile__so_key("c++", "12", lflags2, keys1, 2, s2);
    CHECK(strcmp(s1, s2) != 0);
    compile__so_key("c++", "13", lflags, keys1, 2, s2);
    CHECK(strcmp(s1, s2) != 0);
}

TEST(arch_changes_the_object_key)
{
    need_nvcc();
    char *snap = snapshot("snap");
    put_file(snap, "add.cu", "tests/eval/compile/src/add.cu");
    char *cache = xstrfmt("%s/cache", test_tmpdir());
    struct compile_opts o;
    base_opts(&o, cache);
    no_torch(&o);
    o.arch = "sm_90";
    struct compile_report r;
    compile_report_init(&r);
    struct ca_err err = {0};
    CHECK_EQ(build(&o, snap, NULL, &r, &err), CA_EUNAVAIL);
    CHECK_STR(r.arch, "sm_90");
    char key[HASH128_HEX_LEN + 1];
    memcpy(key, r.units[0].key, sizeof(key));
    o.arch = "80";
    CHECK_EQ(build(&o, snap, NULL, &r, &err), CA_EUNAVAIL);
    CHECK_STR(r.arch, "sm_80");
    CHECK(!r.units[0].cached);
    CHECK(r.units[0].ok);
    CHECK(strcmp(r.units[0].key, key) != 0);
    o.arch = "sm_9x";
    CHECK_EQ(build(&o, snap, NULL, &r, &err), CA_EUSAGE);
    CHECK_CONTAINS(err.msg, "sm_9x");
    compile_report_release(&r);
    free(cache);
    free(snap);
}

TEST(arch_parsing)
{
    char a[16];
    struct ca_err err = {0};
    static const struct {
        const char *in, *out;
    } ok[] = {{"sm_90", "sm_90"},   {"90", "sm_90"},         {"9.0", "sm_90"},
              {"sm_90a", "sm_90a"}, {"compute_80", "sm_80"}, {"sm_100f", "sm_100f"},
              {"120", "sm_120"},    {"sm_75", "sm_75"}};
    for (size_t i = 0; i < ARRAY_SIZE(ok); i++) {
        CHECK_EQ(compile__arch_resolve(ok[i].in, a, &err), 0);
        CHECK_STR(a, ok[i].out);
    }
    static const char *const bad[] = {"sm_9", "sm_9000", "sm_90b", "ampere", "sm_", "09", "-90"};
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
        CHECK_EQ(compile__arch_resolve(bad[i], a, &err), CA_EUSAGE);
    /* Default: the GPU's, else sm_90. */
    CHECK_EQ(compile__arch_resolve(NULL, a, &err), 0);
    CHECK_STR(a, *compile__gpu_arch() ? compile__gpu_arch() : COMPILE_DEFAULT_ARCH);
}

static void tc_release(struct compile__toolchain *tc)
{
    compile__argv_release(&tc->torch_includes);
    compile__argv_release(&tc->torch_libdirs);
    compile__argv_release(&tc->pybind11_defines);
    char **strs[] = {&tc->python_version, &tc->python_include, &tc->ext_suffix,
                     &tc->torch_error,    &tc->torch_version,  &tc->torch_identity,
                     &tc->torch_cuda,     &tc->cudnn_include,  &tc->cudnn_lib};
    for (size_t i = 0; i < ARRAY_SIZE(strs); i++)
        FREE_AND_NULL(*strs[i]);
}

TEST(toolchain_probe_parsing)
{
    struct compile__toolchain tc = {0};
    compile__argv_init(&tc.torch_includes);
    compile__argv_init(&tc.torch_libdirs);
    compile__argv_init(&tc.pybind11_defines);
    char *inc = fixture("fake_torch/include");
    char *py = fixture("fake_torch/python");
    char *text = xstrfmt("warning printed by torch\n"
                         "{\"python_version\": \"3.12.3\", \"python_include\": \"%s\", "
                         "\"ext_suffix\": \".cpython-312-x86_64-linux-gnu.so\", "
                         "\"torch_version\": \"2.11.0\", \"include_paths\": [\"%s\", "
                         "\"/nonexistent/TH\"], \"library_paths\": [\"%s\"], \"cxx11_abi\": true, "
                         "\"torch_cuda\": \"13.0\", \"pybind11_abi\": {\"COMPILER_TYPE\": "
                         "\"_gcc\", \"STDLIB\": \"_libstdcpp\", \"BUILD_ABI\": \"_cxxabi1018\"}}\n",
                         py, inc, test_tmpdir());
    struct ca_err err = {0};
    /* cxx11_abi must be an integer */
    CHECK_EQ(compile__toolchain_parse_python(&tc, sv_cstr(text), &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "cxx11_abi");
    free(text);
    tc_release(&tc);

    tc = (struct compile__toolchain){0};
    compile__argv_init(&tc.torch_includes);
    compile__argv_init(&tc.torch_libdirs);
    compile__argv_init(&tc.pybind11_defines);
    text = xstrfmt("{\"python_version\": \"3.12.3\", \"python_include\": \"%s\", "
                   "\"ext_suffix\": \".so\", \"torch_version\": \"2.11.0\", "
                   "\"include_paths\": [\"%s\", \"/nonexistent/TH\"], \"library_paths\": "
                   "[\"%s\"], \"cxx11_abi\": 1, \"torch_cuda\": null, \"pybind11_abi\": "
                   "{\"COMPILER_TYPE\": \"_gcc\", \"STDLIB\": null, \"BUILD_ABI\": "
                   "\"_cxxabi1018\"}}",
                   py, inc, test_tmpdir());
    CHECK_EQ(compile__toolchain_parse_python(&tc, sv_cstr(text), &err), 0);
    CHECK(tc.have_torch);
    CHECK_STR(tc.torch_version, "2.11.0");
    CHECK_EQ(tc.torch_includes.n, 1); /* the missing TH directory dropped */
    CHECK_STR(tc.torch_includes.v[0], inc);
    CHECK_EQ(tc.cxx11_abi, 1);
    CHECK(tc.torch_cuda == NULL);
    CHECK_EQ(tc.pybind11_defines.n, 2);
    CHECK_STR(tc.pybind11_defines.v[0], "-DPYBIND11_COMPILER_TYPE=\"_gcc\"");
    CHECK_STR(tc.pybind11_defines.v[1], "-DPYBIND11_BUILD_ABI=\"_cxxabi1018\"");
    CHECK_CONTAINS(tc.torch_identity, "torch 2.11.0; python 3.12.3");
    free(text);
    free(inc);
    free(py);
    tc_release(&tc);
}

TEST(toolchain_describe)
{
    struct compile_opts o;
    compile_opts_init(&o);
    no_torch(&o);
    char *cache = xstrfmt("%s/cache", test_tmpdir());
    o.cache_dir = cache;
    json_t *j = NULL;
    struct ca_err err = {0};
    REQUIRE(compile_toolchain_describe(&o, &j, &err) == 0);
    REQUIRE(json_is_object(j));
    CHECK(json_is_object(json_object_get(j, "nvcc")));
    CHECK(json_is_object(json_object_get(j, "cxx")));
    CHECK_CONTAINS(json_string_value(json_object_get(json_object_get(j, "torch"), "error")),
                   "No module named 'torch'");
    CHECK_STR(json_string_value(json_object_get(j, "cache_dir")), cache);
    CHECK(json_is_string(json_object_get(j, "arch")));
    json_decref(j);
    free(cache);
}

TEST(cache_dir_defaults)
{
    struct compile_opts o;
    compile_opts_init(&o);
    struct buf b;
    buf_init(&b, 4096);
    struct ca_err err = {0};
    setenv("CUDA_AGENT_CACHE_DIR", "/x/cache", 1);
    REQUIRE(compile_cache_dir(&o, &b, &err) == 0);
    CHECK_STR(b.data, "/x/cache/compile");
    unsetenv("CUDA_AGENT_CACHE_DIR");
    setenv("XDG_CACHE_HOME", "/x/xdg", 1);
    buf_reset(&b);
    REQUIRE(compile_cache_dir(&o, &b, &err) == 0);
    CHECK_STR(b.data, "/x/xdg/cuda-agent/compile");
    unsetenv("XDG_CACHE_HOME");
    setenv("HOME", "/x/home", 1);
    buf_reset(&b);
    REQUIRE(compile_cache_dir(&o, &b, &err) == 0);
    CHECK_STR(b.data, "/x/home/.cache/cuda-agent/compile");
    o.cache_dir = "/explicit";
    buf_reset(&b);
    REQUIRE(compile_cache_dir(&o, &b, &err) == 0);
    CHECK_STR(b.data, "/explicit");
    buf_release(&b);
}

/* ---- pruning ---- */

static void make_entry(const char *path, size_t bytes, time_t age_s)
{
    char *text = xmalloc(bytes + 1);
    memset(text, 'x', bytes);
    text[bytes] = '\0';
    write_text(path, text);
    free(text);
    struct timespec ts[2] = {{.tv_sec = time(NULL) - age_s}, {.tv_sec = time(NULL) - age_s}};
    REQUIRE(utimensat(AT_FDCWD, path, ts, 0) == 0);
}

TEST(prune_evicts_least_recently_used)
{
    char *cache = xstrfmt("%s/cache", test_tmpdir());
    struct ca_err err = {0};
    REQUIRE(compile__cache_prepare(cache, &err) == 0);
    char *d1 = xstrfmt("%s/objects/aa", cache), *d2 = xstrfmt("%s/pch/k1", cache);
    REQUIRE(fs_mkdirs(d1, 0755, &err) == 0);
    REQUIRE(fs_mkdirs(d2, 0755, &err) == 0);
    char *old_obj = xstrfmt("%s/aa%030d.o", d1, 1);
    char *new_obj = xstrfmt("%s/aa%030d.o", d1, 2);
    char *so = xstrfmt("%s/so/%032d.so", cache, 3);
    char *gch = xstrfmt("%s/pch.h.gch", d2);
    make_entry(old_obj, 100000, 5000);
    make_entry(so, 100000, 4000);
    make_entry(gch, 100000, 3000);
    make_entry(new_obj, 100000, 10);
    struct timespec ts[2] = {{.tv_sec = time(NULL) - 3000}, {.tv_sec = time(NULL) - 3000}};
    REQUIRE(utimensat(AT_FDCWD, d2, ts, 0) == 0);
    /* A build directory left by a crash two hours ago, and one in use now. */
    char *stale = xstrfmt("%s/tmp/build.tmp-AAAAAA", cache);
    char *live = xstrfmt("%s/tmp/build.tmp-BBBBBB", cache);
    REQUIRE(mkdir(stale, 0700) == 0 && mkdir(live, 0700) == 0);
    struct timespec old[2] = {{.tv_sec = time(NULL) - 7200}, {.tv_sec = time(NULL) - 7200}};
    REQUIRE(utimensat(AT_FDCWD, stale, old, 0) == 0);

    struct compile_prune_stats st;
    REQUIRE(compile_cache_prune(cache, 1 << 30, &st, &err) == 0);
    CHECK_EQ(st.removed, 0);
    CHECK(st.bytes_before >= 400000);
    CHECK(!fs_exists(stale));
    CHECK(fs_exists(live));

    /* Room for two of the four: the two oldest go (an object, then the module). */
    REQUIRE(compile_cache_prune(cache, st.bytes_before / 2 + 1000, &st, &err) == 0);
    CHECK_EQ(st.removed, 2);
    CHECK(!fs_exists(old_obj));
    CHECK(!fs_exists(so));
    CHECK(fs_exists(gch));
    CHECK(fs_exists(new_obj));
    /* A hit refreshes the clock: the precompiled header now outlives the object. */
    CHECK(compile__cache_hit(d2));
    struct timespec ts2[2] = {{.tv_sec = time(NULL) - 100}, {.tv_sec = time(NULL) - 100}};
    REQUIRE(utimensat(AT_FDCWD, new_obj, ts2, 0) == 0);
    REQUIRE(compile_cache_prune(cache, 150000, &st, &err) == 0);
    CHECK_EQ(st.removed, 1);
    CHECK(!fs_exists(new_obj));
    CHECK(fs_exists(d2));
    CHECK(st.bytes_after <= 150000);
    CHECK(compile_cache_prune("/nonexistent/cache", 1, &st, &err) < 0);
    free(stale);
    free(live);
    free(old_obj);
    free(new_obj);
    free(so);
    free(gch);
    free(d1);
    free(d2);
    free(cache);
}

/*
 * One evaluator stores a key again and again (another build's equal object) while a second
 * hard-links the entry into its build, as compile__link does. An entry replaced under the
 * linker made its link(2) fail with ENOENT (the inode it had looked up lost its last name):
 * "the cached object ... vanished", a false compile failure seen in CI. The first entry stays.
 */
TEST(storing_a_key_again_never_moves_the_entry)
{
    char *cache = xstrfmt("%s/cache", test_tmpdir());
    struct ca_err err = {0};
    REQUIRE(compile__cache_prepare(cache, &err) == 0);
    char *entry = xstrfmt("%s/objects/ab/%032d.o", cache, 7);
    char *first = xstrfmt("%s/tmp/first.o", cache);
    write_text(first, "first");
    REQUIRE(compile__cache_store(first, entry, &err) == 0);
    CHECK(!fs_exists(first));
    struct stat st0;
    REQUIRE(stat(entry, &st0) == 0);
    CHECK_EQ(st0.st_mode & 0777, 0444);

    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        int bad = 0;
        for (int i = 0; i < 3000 && !bad; i++) {
            char *again = xstrfmt("%s/tmp/again-%d.o", cache, i);
            write_text(again, "again");
            struct ca_err e = {0};
            bad = compile__cache_store(again, entry, &e) != 0 || fs_exists(again);
            free(again);
        }
        _exit(bad);
    }
    char *dst = xstrfmt("%s/linked.o", test_tmpdir());
    int failures = 0, tries = 0, st;
    for (;;) {
        pid_t done = waitpid(pid, &st, WNOHANG);
        if (link(entry, dst) != 0)
            failures++;
        else
            unlink(dst);
        tries++;
        if (done == pid)
            break;
    }
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK_EQ(failures, 0);
    CHECK(tries > 0);
    struct stat st1;
    REQUIRE(stat(entry, &st1) == 0);
    CHECK_EQ(st1.st_ino, st0.st_ino);
    char *text = read_text(entry);
    CHECK_STR(text, "first");
    /* A store that fails for another reason says so and keeps the file. */
    char *orphan = xstrfmt("%s/tmp/orphan.o", cache);
    write_text(orphan, "x");
    CHECK(compile__cache_store(orphan, "/nonexistent/objects/ab/x.o", &err) < 0);
    CHECK(fs_exists(orphan));
    free(orphan);
    free(text);
    free(dst);
    free(first);
    free(entry);
    free(cache);
}

/* ---- compiler output ---- */

static char *trim_fixture(const char *name, struct compile__trim_result *tr)
{
    char *rel = xstrfmt("logs/%s", name);
    char *path = fixture(rel);
    char *raw = read_text(path);
    struct buf norm, out;
    buf_init(&norm, 1 << 20);
    buf_init(&out, 1 << 20);
    REQUIRE(compile__log_normalize(sv_cstr(raw), NULL, &norm) == 0);
    REQUIRE(compile__log_trim(sv_from(norm.data, norm.len), &out, tr) == 0);
    free(rel);
    free(path);
    free(raw);
    buf_release(&norm);
    return buf_detach(&out, NULL);
}

TEST(trim_nvcc_errors)
{
    struct compile__trim_result tr;
    char *t = trim_fixture("nvcc_syntax.txt", &tr);
    CHECK(tr.had_errors);
    CHECK_STR(t, "kernels/bad.cu:6: error: expected a \";\"\n"
                 "      y = 2;\n"
                 "      ^\n");
    free(t);
    t = trim_fixture("nvcc_template.txt", &tr);
    CHECK(tr.had_errors);
    CHECK_CONTAINS(t, "kernels/tmpl.cu:3: error: expression must have class type but it has "
                      "type \"float\"\n");
    CHECK_CONTAINS(t, "          detected during:\n");
    CHECK_CONTAINS(t, "instantiation of \"T thrice(T) [with T=int]\" at line 6\n");
    CHECK(!strstr(t, "errors detected"));
    CHECK_EQ(count_lines(t), 12);
    free(t);
}

TEST(trim_gcc_errors_notes_and_context)
{
    struct compile__trim_result tr;
    char *t = trim_fixture("gcc_template.txt", &tr);
    CHECK(tr.had_errors);
    CHECK_CONTAINS(t, "kernels/tmpl_binding.cpp: In function 'int f()':\n"
                      "kernels/tmpl_binding.cpp:8:68: error: no matching function");
    /* Two notes of three, without their excerpts; no include stack. */
    CHECK_CONTAINS(t, "note: candidate: 'void std::vector");
    CHECK_CONTAINS(t, "note:   no known conversion");
    CHECK(!strstr(t, "In file included from"));
    CHECK(!strstr(t, " 1276 |"));
    /* Warnings go when there are errors. */
    CHECK(!strstr(t, "warning:"));
    CHECK(!strstr(t, "unused variable"));
    /* Instantiation context kept before its error. */
    CHECK_CONTAINS(t, "In instantiation of 'T twice(T) [with T = int]':\n"
                      "kernels/tmpl_binding.cpp:7:51:   required from 'T thrice(T) [with T = "
                      "int]'\n"
                      "kernels/tmpl_binding.cpp:8:86:   required from here\n"
                      "kernels/tmpl_binding.cpp:6:47: error: request for member 'nope'");
    free(t);
}

TEST(trim_warnings_when_no_errors)
{
    struct compile__trim_result tr;
    char *t = trim_fixture("nvcc_warning.txt", &tr);
    CHECK(!tr.had_errors);
    CHECK_STR(t, "kernels/warn.cu:4: warning #177-D: variable \"unused\" was declared but never "
                 "referenced\n"
                 "      int unused = 3;\n"
                 "          ^\n");
    free(t);
}

TEST(trim_template_spam_and_long_lines)
{
    struct buf raw, norm, out;
    buf_init(&raw, 1 << 24);
    buf_init(&norm, 1 << 24);
    buf_init(&out, 1 << 24);
    REQUIRE(buf_addstr(&raw, "kernels/x_binding.cpp: In instantiation of 'struct F<0>':\n") == 0);
    for (int i = 0; i < 200; i++)
        REQUIRE(buf_addf(&raw, "kernels/x_binding.cpp:3:%d:   required from 'struct F<%d>'\n", i,
                         i + 1) == 0);
    REQUIRE(buf_addstr(&raw, "kernels/x_binding.cpp:9:1:   required from here\n") == 0);
    REQUIRE(buf_addstr(&raw, "kernels/x_binding.cpp:3:5: error: ") == 0);
    for (int i = 0; i < 2000; i++)
        REQUIRE(buf_addstr(&raw, "F<") == 0);
    REQUIRE(buf_addstr(&raw, "\n    3 | code\n      | ^\n") == 0);
    REQUIRE(compile__log_normalize(sv_from(raw.data, raw.len), NULL, &norm) == 0);
    struct compile__trim_result tr;
    REQUIRE(compile__log_trim(sv_from(norm.data, norm.len), &out, &tr) == 0);
    CHECK_EQ(tr.lines, 6);
    CHECK_CONTAINS(out.data, "In instantiation of 'struct F<0>':\n"
                             "kernels/x_binding.cpp:3:199:   required from 'struct F<200>'\n"
                             "kernels/x_binding.cpp:9:1:   required from here\n"
                             "kernels/x_binding.cpp:3:5: error: F<F<");
    CHECK_CONTAINS(out.data, "F<...\n    3 | code\n");
    struct sv rest = sv_from(out.data, out.len), line;
    while (sv_next_line(&rest, &line, NULL))
        CHECK(line.len <= COMPILE__LINE_MAX + 3);
    buf_release(&raw);
    buf_release(&norm);
    buf_release(&out);
}

TEST(trim_budget_counts_omitted_lines)
{
    struct buf raw, out;
    buf_init(&raw, 1 << 20);
    buf_init(&out, 1 << 20);
    for (int i = 1; i <= 30; i++)
        REQUIRE(buf_addf(&raw, "kernels/a.cu(%d): error: bad %d\n  code\n  ^\n\n", i, i) == 0);
    struct buf norm;
    buf_init(&norm, 1 << 20);
    REQUIRE(compile__log_normalize(sv_from(raw.data, raw.len), NULL, &norm) == 0);
    struct compile__trim_result tr;
    REQUIRE(compile__log_trim(sv_from(norm.data, norm.len), &out, &tr) == 0);
    CHECK_EQ(tr.lines, 90);
    struct buf shown;
    buf_init(&shown, 1 << 20);
    size_t budget = COMPILE_ERROR_LINES, omitted = 0;
    REQUIRE(compile__append_lines(&shown, sv_from(out.data, out.len), &budget, &omitted) == 0);
    CHECK_EQ(budget, 0);
    CHECK_EQ(omitted, 50);
    CHECK_EQ(count_lines(shown.data), COMPILE_ERROR_LINES);
    CHECK_CONTAINS(shown.data, "kernels/a.cu:1: error: bad 1\n  code\n  ^\n");
    buf_release(&shown);
    buf_release(&norm);
    buf_release(&raw);
    buf_release(&out);
}

TEST(normalize_maps_paths)
{
    const char *strip[] = {"/cache/tmp/build.tmp-XYZ/", "/workspace/", NULL};
    struct buf out;
    buf_init(&out, 1 << 16);
    const char *raw = "/cache/tmp/build.tmp-XYZ/kernels/a.cu(12): error: x\n"
                      "/workspace/kernels/b_binding.cpp:3:4: error: y\n"
                      "./binding_registry.h:7:1: note: z\n"
                      "In file included from /workspace/kernels/c.cu:1:\n"
                      "kernels/my file.cu(3): error: spaces stay as they are\n"
                      "ptxas error   : Entry function uses too much shared data\n";
    REQUIRE(compile__log_normalize(sv_cstr(raw), strip, &out) == 0);
    CHECK_STR(out.data, "kernels/a.cu:12: error: x\n"
                        "kernels/b_binding.cpp:3:4: error: y\n"
                        "binding_registry.h:7:1: note: z\n"
                        "In file included from kernels/c.cu:1:\n"
                        "kernels/my file.cu(3): error: spaces stay as they are\n"
                        "ptxas error   : Entry function uses too much shared data\n");
    /* Bounded: CA_ETOOBIG with what fitted. */
    struct buf small;
    buf_init(&small, 20);
    CHECK_EQ(compile__log_normalize(sv_cstr(raw), strip, &small), CA_ETOOBIG);
    CHECK(small.len <= 20);
    buf_release(&small);
    buf_release(&out);
}

TEST(trim_classifies_tools)
{
    struct buf out;
    buf_init(&out, 1 << 16);
    struct compile__trim_result tr;
    const char *raw = "ptxas info    : 0 bytes gmem\n"
                      "ptxas error   : Entry function 'k' uses too much shared data\n"
                      "nvcc fatal   : Unsupported gpu architecture 'compute_5'\n"
                      "/usr/bin/ld: cannot find -lcudnn: No such file or directory\n"
                      "collect2: error: ld returned 1 exit status\n"
                      "kernels/a.cu(1): warning #177-D: unused\n";
    REQUIRE(compile__log_trim(sv_cstr(raw), &out, &tr) == 0);
    CHECK(tr.had_errors);
    CHECK_STR(out.data, "ptxas error   : Entry function 'k' uses too much shared data\n"
                        "nvcc fatal   : Unsupported gpu architecture 'compute_5'\n"
                        "/usr/bin/ld: cannot find -lcudnn: No such file or directory\n"
                        "collect2: error: ld returned 1 exit status\n");
    /* lld's lines under an error are kept. */
    buf_reset(&out);
    REQUIRE(compile__log_trim(sv_cstr("ld.lld: error: duplicate symbol: f\n>>> defined at a.cpp\n"
                                      ">>>            kernels/a.cu.o:(f)\n>>> defined at b.cpp\n"
                                      ">>>            kernels/b.cu.o:(f)\n"),
                              &out, &tr) == 0);
    CHECK_EQ(tr.lines, 5);
    CHECK_CONTAINS(out.data, "kernels/b.cu.o:(f)\n");
    /* Neither errors nor warnings: the first lines as they are. */
    buf_reset(&out);
    REQUIRE(compile__log_trim(sv_cstr("Segmentation fault\n\nsomething else\n"), &out, &tr) == 0);
    CHECK_STR(out.data, "Segmentation fault\nsomething else\n");
    buf_release(&out);
}
