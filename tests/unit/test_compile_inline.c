/*
 * test_compile_inline.c - KernelBench's load_inline cuda sources in the compile pool
 * (opts.inline_cuda): the torch headers, light and full, and cutting a source in two
 * (compile_split*.c: device code for nvcc, torch functions for c++) with its fall-backs.
 * Cases that need nvcc skip when it is missing.
 */

#include "compile_fixture.h"
#include "core/banned.h"

/* ---- load_inline cuda sources (KernelBench mode: opts.inline_cuda) ---- */

static const char kb_cu[] = "#include <torch/extension.h>\n"
                            "__global__ void kb_kernel(int *o) { o[0] = 1; }\n"
                            "int kb_add(int a, int b)\n{\n"
                            "    TORCH_CHECK(a >= 0, \"a\");\n"
                            "    (void)kb_kernel;\n"
                            "    return a + b;\n}\n";
static const char kb_binding[] =
    "#include \"binding_registry.h\"\nint kb_add(int a, int b);\n"
    "static void bind(pybind11::module_ &m) { m.def(\"kb_add\", kb_add); }\n"
    "REGISTER_BINDING(\"kb_add\", bind);\n";

/* A KernelBench build of kb_add.cu (source) and kb_add_binding.cpp in a fresh snapshot. */
/* A KernelBench-style snapshot: kb_add.cu (the given text) and its binding, built with
 * inline_cuda. */
static void kb_begin(struct tbuild *k, const char *cu)
{
    tb_begin(k);
    put_text(k->snap, "kb_add.cu", cu);
    put_text(k->snap, "kb_add_binding.cpp", kb_binding);
    k->o.inline_cuda = true;
}

TEST(inline_cuda_units_build_with_torch_headers)
{
    need_nvcc();
    struct tbuild k;
    kb_begin(&k, kb_cu);
    REQUIRE(build(&k.o, k.snap, k.out, &k.r, &k.err) == 0);
    tb_show_errors(&k);
    CHECK(k.r.ok);
    const struct compile_unit_report *u = unit(&k.r, "kernels/kb_add.cu");
    CHECK_EQ(u->role, COMPILE_ROLE_CU_TORCH);
    CHECK_STR(compile_role_name(u->role), "cu-torch");
    CHECK(u->ok && !u->cached && !u->used_pch);
    CHECK(unit(&k.r, "kernels/kb_add_binding.cpp")->used_pch);
    json_t *j = compile_report_to_json(&k.r);
    CHECK_STR(
        json_string_value(json_object_get(json_array_get(json_object_get(j, "units"), 0), "role")),
        "cu-torch");
    json_decref(j);
    /* torch/extension.h was the light one (the fake torch/types.h): no retry. */
    CHECK(strstr(k.r.full_log.data, "retried") == NULL);
    char key[HASH128_HEX_LEN + 1];
    memcpy(key, u->key, sizeof(key));

    /* Unchanged: from the cache, under the same key. */
    REQUIRE(build(&k.o, k.snap, k.out, &k.r, &k.err) == 0);
    CHECK(k.r.ok && k.r.link_cached);
    CHECK(unit(&k.r, "kernels/kb_add.cu")->cached);
    CHECK_STR(unit(&k.r, "kernels/kb_add.cu")->key, key);

    /* Without inline_cuda the same file is a plain .cu, and nvcc finds no torch header. */
    k.o.inline_cuda = false;
    REQUIRE(build(&k.o, k.snap, k.out, &k.r, &k.err) == 0);
    CHECK(!k.r.ok);
    CHECK_EQ(unit(&k.r, "kernels/kb_add.cu")->role, COMPILE_ROLE_CU);
    CHECK_CONTAINS(unit(&k.r, "kernels/kb_add.cu")->log.data, "torch/extension.h");
    /* The binding's object does not depend on the mode. */
    CHECK(unit(&k.r, "kernels/kb_add_binding.cpp")->cached);
    tb_end(&k);
}

TEST(inline_cuda_light_header_falls_back_to_the_real_one)
{
    need_nvcc();
    /* A name only the full torch/extension.h declares (here pybind11's): retried with it. */
    struct tbuild k;
    kb_begin(&k, "#include <torch/extension.h>\n"
                 "int kb_add(int a, int b) { pybind11::str s(a); (void)s; return a + b; }\n");
    REQUIRE(build(&k.o, k.snap, k.out, &k.r, &k.err) == 0);
    tb_show_errors(&k);
    CHECK(k.r.ok);
    CHECK_CONTAINS(k.r.full_log.data, "kernels/kb_add.cu (exit 0, retried with the full "
                                      "torch headers)");
    tb_end(&k);
}

TEST(light_header_failures_are_told_by_a_torch_name_on_the_error)
{
    /* Which failures of a unit built with the light torch headers get a second run with the
     * real ones: an error that names a torch, ATen, c10 or pybind11 entity, whatever the
     * compiler's words. The first heuristic also wanted one of a list of phrases and missed
     * ATen's operators (two leaderboard solutions failed to compile on the whole corpus,
     * twelfth session): nvcc's and gcc's words for them are below, as the H100 printed them. */
    static const char *const retried[] = {
        "kernels/kb_x.cu:44: error: no operator \"/\" matches these operands\n"
        "            operand types are: at::Tensor / at::Tensor\n"
        "      return x / norm.sqrt();\n",
        "kernels/kb_x.cu:31:23: error: no match for 'operator/' (operand types are "
        "'at::Tensor' and 'long int')\n   31 |     return loss.sum() / size;\n",
        "kernels/kb_x.cu:70: error: no suitable conversion function from \"const "
        "at::DeprecatedTypeProperties\" to \"c10::ScalarType\" exists\n",
        "kernels/kb_x.cu:3: error: identifier \"AT_DISPATCH_FLOATING_TYPES\" is undefined\n",
        "kernels/kb_x.cu:9:5: error: 'scalar_t' was not declared in this scope\n",
        "kernels/kb_x.cu:1:10: fatal error: torch/csrc/api/include/torch/nn.h: No such file or "
        "directory\n",
        "kernels/kb_x.cu:5: error: namespace \"torch\" has no member \"nn\"\n",
        /* The name on a line the compiler quotes after the error. */
        "kernels/kb_x.cu:12: error: expression must have class type but it has type \"int\"\n"
        "      auto y = torch::relu(x);\n"};
    static const char *const not_retried[] = {
        "kernels/kb_x.cu:2: error: identifier \"c\" is undefined\n"
        "  int kb_add(int a, int b) { return c; }\n",
        "kernels/kb_x.cu:7: error: expected a \";\"\n      float v = x[i]\n",
        /* The unit's name is the load_inline name: a torch in it is no torch entity. */
        "kernels/kb_torch_ops.cu:2: error: identifier \"c\" is undefined\n"
        "  int kb_add(int a, int b) { return c; }\n\n"
        "1 error detected in the compilation of \"kernels/kb_torch_ops.cu\".\n",
        /* A torch name in a warning, or further down than the quoted lines: not this error's. */
        "kernels/kb_x.cu:4: warning: variable \"t\" was declared but never referenced "
        "(at::Tensor)\n"
        "kernels/kb_x.cu:9: error: too few arguments in function call\n"
        "      k<<<1, 1>>>(p);\n"
        "             ^\n"
        "\n"
        "  at::Tensor unrelated;\n",
        ""};
    for (size_t i = 0; i < ARRAY_SIZE(retried); i++) {
        struct buf b;
        buf_init(&b, 4096);
        REQUIRE(buf_addstr(&b, retried[i]) == 0);
        if (!compile__light_failure(&b))
            printf("  not retried: %s\n", retried[i]);
        CHECK(compile__light_failure(&b));
        buf_release(&b);
    }
    for (size_t i = 0; i < ARRAY_SIZE(not_retried); i++) {
        struct buf b;
        buf_init(&b, 4096);
        REQUIRE(buf_addstr(&b, not_retried[i]) == 0);
        if (compile__light_failure(&b))
            printf("  retried: %s\n", not_retried[i]);
        CHECK(!compile__light_failure(&b));
        buf_release(&b);
    }
}

TEST(inline_cuda_prelude_gets_the_light_types_header)
{
    need_nvcc();
    /* load_inline's prelude for cuda sources is torch/types.h: the light one serves it, with
     * torch:: names for at::'s dtypes. */
    struct tbuild k;
    kb_begin(
        &k,
        "#include <torch/types.h>\n#include <cuda_runtime.h>\n"
        "int kb_add(int a, int b)\n{\n"
        "    TORCH_CHECK(torch::kFloat32 == torch::kF32 && torch::kInt64 == at::kLong, \"t\");\n"
        "    return a + b;\n}\n");
    REQUIRE(build(&k.o, k.snap, k.out, &k.r, &k.err) == 0);
    tb_show_errors(&k);
    CHECK(k.r.ok);
    CHECK(strstr(k.r.full_log.data, "retried") == NULL);
    tb_end(&k);
}

TEST(inline_cuda_errors_and_no_torch)
{
    need_nvcc();
    /* A compiler error is nvcc's, under the unit's name; not one the light headers could have
     * caused (no torch name near it), so not retried with the real ones. */
    struct tbuild k;
    kb_begin(&k, "#include <torch/extension.h>\nint kb_add(int a, int b) { return c; }\n");
    REQUIRE(build(&k.o, k.snap, k.out, &k.r, &k.err) == 0);
    CHECK(!k.r.ok);
    CHECK_CONTAINS(k.r.errors.data, "kernels/kb_add.cu:2");
    CHECK(strstr(k.r.full_log.data, "retried") == NULL);

    /* Without PyTorch nothing of a KernelBench build can be compiled. */
    no_torch(&k.o);
    CHECK_EQ(build(&k.o, k.snap, NULL, &k.r, &k.err), CA_EUNAVAIL);
    CHECK(!unit(&k.r, "kernels/kb_add.cu")->ok);
    CHECK_CONTAINS(unit(&k.r, "kernels/kb_add.cu")->log.data,
                   "not built: PyTorch is not importable");
    tb_end(&k);
}

/* ---- cutting load_inline cuda sources in two (compile_split*.c) ---- */

/* load_inline's prelude for cuda sources, then the include nearly every solution starts with. */
#define KB_PRELUDE                                                                                 \
    "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n\n"                   \
    "#include <torch/extension.h>\n"

static int cut(const char *src, struct compile__split *sp)
{
    int rc = compile__split_source(sv_cstr(src), "kernels/kb_x.cu", sp);
    if (rc)
        printf("  not cut: %s\n", sp->why);
    return rc;
}

static const char kb_scale_cu[] =
    KB_PRELUDE "#define THREADS 256\n"
               "constexpr int kTile = 4;\n"
               "__device__ __forceinline__ float twice(float v) { return 2.0f * v * kTile; }\n"
               "__global__ void scale_kernel(const float *x, float *y, int n)\n"
               "{\n"
               "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
               "    if (i < n)\n"
               "        y[i] = twice(x[i]);\n"
               "}\n"
               "torch::Tensor scale(torch::Tensor x)\n"
               "{\n"
               "    auto y = torch::empty_like(x);\n"
               "    int n = x.numel();\n"
               "    scale_kernel<<<(n + THREADS - 1) / THREADS, THREADS, 0,\n"
               "                   at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(),\n"
               "                                                       y.data_ptr<float>(), n);\n"
               "    return y;\n"
               "}\n";

TEST(split_cuts_torch_functions_from_device_code)
{
    struct compile__split sp;
    compile__split_init(&sp);
    REQUIRE(cut(kb_scale_cu, &sp) == 0);
    /* nvcc's half: the kernel and its helper as written, nothing of torch. */
    CHECK_CONTAINS(sp.dev.data, "#include <cfloat>\n#include <climits>\n");
    CHECK_CONTAINS(sp.dev.data, "#include <cstring>\n#line 1 \"kernels/kb_x.cu\"\n");
    CHECK_CONTAINS(sp.dev.data, "__global__ void scale_kernel(const float *x, float *y, int n)\n{");
    CHECK_CONTAINS(sp.dev.data, "y[i] = twice(x[i]);");
    CHECK_CONTAINS(sp.dev.data, "constexpr int kTile = 4;");
    CHECK(strstr(sp.dev.data, "torch") == NULL);
    CHECK(strstr(sp.dev.data, "at::") == NULL);
    /* g++'s half: the torch function with the launch as cudafe++ lowers it, the kernel declared,
     * the device helper deleted (calling it from host code stays an error), no device code. */
    CHECK_CONTAINS(sp.host.data, "#line 1 \"kernels/kb_x.cu\"\n");
    CHECK_CONTAINS(sp.host.data,
                   "    ((::__cudaPushCallConfiguration((n + THREADS - 1) / THREADS, THREADS, 0,\n"
                   "                   at::cuda::getCurrentCUDAStream())) ? (void)0 : "
                   "scale_kernel(x.data_ptr<float>(),\n"
                   "                                                       y.data_ptr<float>(), "
                   "n));\n");
    CHECK_CONTAINS(sp.host.data,
                   "__global__ void scale_kernel(const float *x, float *y, int n)\n;");
    CHECK_CONTAINS(sp.host.data, "__device__ __forceinline__ float twice(float v) = delete;");
    CHECK_CONTAINS(sp.host.data, "constexpr int kTile = 4;");
    CHECK(strstr(sp.host.data, "threadIdx") == NULL);
    CHECK(strstr(sp.host.data, "<<<") == NULL);
    /* Both keep the source's lines (after their own first lines). */
    CHECK_EQ(count_lines(sp.dev.data), count_lines(kb_scale_cu) + 10);
    CHECK_EQ(count_lines(sp.host.data), count_lines(kb_scale_cu) + 12);
    CHECK_STR(sp.dev_names.data, "scale_kernel\n");
    compile__split_release(&sp);
}

TEST(split_keeps_strings_comments_and_shifts)
{
    static const char src[] =
        KB_PRELUDE "/* } a comment with a brace { */\n"
                   "__global__ void k(int *o) { o[0] = '{'; }\n"
                   "// a line comment }\n"
                   "torch::Tensor f(torch::Tensor x)\n"
                   "{\n"
                   "    const char *doc = R\"doc(k<<<1, 1>>>() } { )doc\";\n"
                   "    TORCH_CHECK(x.numel() > 0, \"} k<<<g, b>>>\");\n"
                   "    int n = x.numel() >> 1;\n"
                   "    std::cout << n << std::endl;\n"
                   "    k<<<std::max<int>(1, n >> 2), 32>>>(x.data_ptr<int>());\n"
                   "    (void)doc;\n"
                   "    return x;\n"
                   "}\n";
    struct compile__split sp;
    compile__split_init(&sp);
    REQUIRE(cut(src, &sp) == 0);
    CHECK_CONTAINS(sp.host.data, "R\"doc(k<<<1, 1>>>() } { )doc\"");
    CHECK_CONTAINS(sp.host.data, "\"} k<<<g, b>>>\"");
    CHECK_CONTAINS(sp.host.data, "std::cout << n << std::endl;");
    CHECK_CONTAINS(sp.host.data, "((::__cudaPushCallConfiguration(std::max<int>(1, n >> 2), 32)) "
                                 "? (void)0 : k(x.data_ptr<int>()));");
    CHECK_CONTAINS(sp.dev.data, "__global__ void k(int *o) { o[0] = '{'; }");
    CHECK(strstr(sp.dev.data, "R\"doc") == NULL);
    compile__split_release(&sp);
}

TEST(split_shares_what_both_halves_use)
{
    static const char src[] =
        KB_PRELUDE "static int div_up(int a, int b) { return (a + b - 1) / b; }\n"
                   "inline int unused_twice(int a) { return 2 * a; }\n"
                   "extern \"C\" int launch_x(float *x, int n, cudaStream_t s);\n"
                   "__global__ void k(float *x, int n) { x[0] = n; }\n"
                   "extern \"C\" int launch_x(float *x, int n, cudaStream_t s)\n"
                   "{\n"
                   "    k<<<1, 1, 0, s>>>(x, n);\n"
                   "    return 0;\n"
                   "}\n"
                   "__host__ __device__ inline float hd(float v) { return v + 1.0f; }\n"
                   "torch::Tensor f(torch::Tensor x)\n"
                   "{\n"
                   "    (void)hd(1.0f);\n"
                   "    launch_x(x.data_ptr<float>(), div_up(x.numel(), 4), 0);\n"
                   "    return x;\n"
                   "}\n";
    struct compile__split sp;
    compile__split_init(&sp);
    REQUIRE(cut(src, &sp) == 0);
    /* An internal helper the torch function calls: a copy in each half. */
    CHECK_CONTAINS(sp.host.data, "static int div_up(int a, int b) { return (a + b - 1) / b; }");
    CHECK_CONTAINS(sp.dev.data, "static int div_up(int a, int b) { return (a + b - 1) / b; }");
    /* An inline one nobody on the host side uses: left to nvcc. */
    CHECK(strstr(sp.host.data, "return 2 * a") == NULL);
    /* An external launcher: defined by nvcc's half (with its launch), declared for the other. */
    CHECK_CONTAINS(sp.dev.data, "k<<<1, 1, 0, s>>>(x, n);");
    CHECK_CONTAINS(sp.host.data, "extern \"C\" int launch_x(float *x, int n, cudaStream_t s)\n;\n");
    CHECK(strstr(sp.host.data, "return 0;") == NULL);
    /* __host__ __device__ inline: both. */
    CHECK_CONTAINS(sp.host.data, "hd(float v) { return v + 1.0f; }");
    CHECK_CONTAINS(sp.dev.data, "hd(float v) { return v + 1.0f; }");
    CHECK_STR(sp.dev_names.data, "launch_x\n");
    compile__split_release(&sp);
}

TEST(split_without_torch_functions_is_nvcc_alone)
{
    static const char src[] = "#include <torch/types.h>\n#include <cuda_runtime.h>\n"
                              "__global__ void k(int *o) { o[0] = 1; }\n"
                              "extern \"C\" int kb_add(int a, int b) { return a + b; }\n";
    struct compile__split sp;
    compile__split_init(&sp);
    REQUIRE(cut(src, &sp) == 0);
    CHECK_EQ(sp.host.len, 0);
    CHECK(strstr(sp.dev.data, "torch/types.h") == NULL);
    CHECK_CONTAINS(sp.dev.data, "extern \"C\" int kb_add(int a, int b) { return a + b; }");
    compile__split_release(&sp);
}

TEST(split_takes_a_late_torch_include_and_forward_declarations)
{
    /* examples/kernelbench's layout: the prelude, the kernels, then torch/extension.h before
     * the host function. A device function declared before its definition is declared, not
     * deleted, in the c++ half (a deleted definition must be the first declaration). */
    static const char src[] =
        "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n"
        "__device__ float sq(float v);\n"
        "__global__ void k(float *x) { x[0] = sq(x[0]); }\n"
        "__device__ float sq(float v) { return v * v; }\n"
        "#include <torch/extension.h>\n"
        "torch::Tensor f(torch::Tensor x) { k<<<1, 1>>>(x.data_ptr<float>()); return x; }\n";
    struct compile__split sp;
    compile__split_init(&sp);
    REQUIRE(cut(src, &sp) == 0);
    CHECK_CONTAINS(sp.host.data, "__device__ float sq(float v);\n__global__ void k(float *x);\n"
                                 "__device__ float sq(float v);\n#include <torch/extension.h>\n");
    CHECK(strstr(sp.host.data, "= delete") == NULL);
    CHECK_CONTAINS(sp.dev.data, "__device__ float sq(float v) { return v * v; }\n\n");
    compile__split_release(&sp);
}

TEST(split_declines_what_it_cannot_keep_the_same)
{
    /* Each source, and the reason it stays one unit. */
    static const struct {
        const char *src, *why;
    } cases[] = {
        {KB_PRELUDE "template <typename T> __global__ void k(T *o) { o[0] = 1; }\n"
                    "torch::Tensor f(torch::Tensor x) { k<float><<<1, 1>>>(x.data_ptr<float>()); "
                    "return x; }\n",
         "a template kernel"},
        {KB_PRELUDE "template <typename T> __global__ void k(T *o) { o[0] = 1; }\n"
                    "torch::Tensor f(torch::Tensor x) { k<<<1, 1>>>(x.data_ptr<float>()); "
                    "return x; }\n",
         "a template kernel"},
        {KB_PRELUDE "namespace {\n__global__ void k(float *o) { o[0] = 1; }\n}\n"
                    "torch::Tensor f(torch::Tensor x) { k<<<1, 1>>>(x.data_ptr<float>()); "
                    "return x; }\n",
         "internal linkage"},
        {KB_PRELUDE "static __global__ void k(float *o) { o[0] = 1; }\n"
                    "torch::Tensor f(torch::Tensor x) { k<<<1, 1>>>(x.data_ptr<float>()); "
                    "return x; }\n",
         "internal linkage"},
        {KB_PRELUDE "__global__ void k(float *o) { o[0] = 1; }\n"
                    "torch::Tensor f(torch::Tensor x) { k(x.data_ptr<float>()); return x; }\n",
         "called or instantiated other than by a launch"},
        {KB_PRELUDE "__device__ float h(at::Half v) { return v; }\n"
                    "torch::Tensor f(torch::Tensor x) { return x; }\n",
         "device code that uses torch"},
        {KB_PRELUDE "#ifdef __CUDACC__\n#define FAST 1\n#endif\n"
                    "torch::Tensor f(torch::Tensor x) { return x; }\n",
         "__CUDACC__"},
        {KB_PRELUDE "static int calls = 0;\n"
                    "torch::Tensor f(torch::Tensor x) { calls++; return x; }\n",
         "one that changes"},
        {KB_PRELUDE "__constant__ float w[4];\n"
                    "torch::Tensor f(torch::Tensor x) { cudaMemcpyToSymbol(w, x.data_ptr<float>(), "
                    "16); return x; }\n",
         "a device variable"},
        {KB_PRELUDE "#define KERNEL __global__\n"
                    "KERNEL void k(float *o) { o[0] = 1; }\n"
                    "torch::Tensor f(torch::Tensor x) { return x; }\n",
         "macro"},
        {"#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n"
         "#define NDEBUG 1\n#include <torch/extension.h>\n"
         "torch::Tensor f(torch::Tensor x) { return x; }\n",
         "a directive other than #include <...> before the torch includes"},
        {"#include <torch/extension.h>\ntorch::Tensor f(torch::Tensor x) { return x; }\n",
         "does not start with #include <torch/types.h>"},
        {"#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n"
         "constexpr int CUBLAS_TILE = 4;\n#include <torch/extension.h>\n"
         "torch::Tensor f(torch::Tensor x) { return x; }\n",
         "CUBLAS_TILE, before #include <torch/extension.h>, may be a macro"},
        {"#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n"
         "torch::Tensor f(torch::Tensor x) { return x; }\n",
         "no #include <torch/extension.h>"},
        {KB_PRELUDE "using namespace torch;\nTensor f(Tensor x) { return x; }\n",
         "a declaration outside functions that uses torch"},
        {KB_PRELUDE "static int helper() { static int n = 0; return ++n; }\n"
                    "torch::Tensor f(torch::Tensor x) { helper(); return x; }\n",
         "static locals"},
        {KB_PRELUDE "torch::Tensor f(torch::Tensor x) { return x; } /* unterminated\n",
         "unterminated comment"},
        {KB_PRELUDE "torch::Tensor f(torch::Tensor x) { return x; \n", "unbalanced"},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct compile__split sp;
        compile__split_init(&sp);
        int rc = compile__split_source(sv_cstr(cases[i].src), "kernels/kb_x.cu", &sp);
        if (rc != 1 || !strstr(sp.why, cases[i].why))
            printf("  case %zu: rc %d, why \"%s\", expected \"%s\"\n", i, rc, sp.why, cases[i].why);
        CHECK_EQ(rc, 1);
        CHECK_CONTAINS(sp.why, cases[i].why);
        CHECK_EQ(sp.dev.len + sp.host.len, 0);
        compile__split_release(&sp);
    }
}

TEST(split_object_check_finds_names_left_undefined)
{
    /* An object calling a C++ kernel stub and an extern "C" launcher it does not define. */
    char *src = xstrfmt("%s/calls.cpp", test_tmpdir());
    char *obj = xstrfmt("%s/calls.o", test_tmpdir());
    write_text(src, "namespace ns { void scale_kernel(float *, int); }\n"
                    "extern \"C\" int launch_x(float *);\n"
                    "int f(float *p) { ns::scale_kernel(p, 1); return launch_x(p); }\n");
    const char *argv[] = {"c++", "-c", "-o", obj, src, NULL};
    struct proc_opts po = {.argv = argv, .timeout_ms = 60000};
    struct proc_result pr;
    proc_result_init(&pr);
    struct ca_err err = {0};
    REQUIRE(proc_run(&po, &pr, &err) == 0);
    REQUIRE(proc_ok(&pr));
    proc_result_release(&pr);
    char why[256] = "";
    CHECK_EQ(compile__split_check_object(obj, SV_LIT("scale_kernel\n"), why, sizeof(why)), 1);
    CHECK_CONTAINS(why, "scale_kernel");
    CHECK_EQ(compile__split_check_object(obj, SV_LIT("other\nlaunch_x\n"), why, sizeof(why)), 1);
    CHECK_CONTAINS(why, "launch_x");
    /* A name that is only part of another's ("kernel" in "scale_kernel") is not it. */
    CHECK_EQ(compile__split_check_object(obj, SV_LIT("kernel\nf\n"), why, sizeof(why)), 0);
    CHECK(compile__split_check_object("/nonexistent.o", SV_LIT("f\n"), why, sizeof(why)) < 0);
    free(src);
    free(obj);
}

/* What a split KernelBench build compiles: a kernel launched from a function that uses torch. */
static const char kb_split_cu[] = KB_PRELUDE "__global__ void kb_kernel(int *o) { o[0] = 1; }\n"
                                             "int kb_add(int a, int b)\n{\n"
                                             "    TORCH_CHECK(a >= 0, \"a\");\n"
                                             "    if (a > 1000)\n"
                                             "        kb_kernel<<<1, 1>>>(nullptr);\n"
                                             "    return a + b;\n}\n";

TEST(inline_cuda_split_builds_links_and_caches)
{
    need_nvcc();
    struct tbuild k;
    kb_begin(&k, kb_split_cu);
    REQUIRE(build(&k.o, k.snap, k.out, &k.r, &k.err) == 0);
    tb_show_errors(&k);
    CHECK(k.r.ok);
    const struct compile_unit_report *u = unit(&k.r, "kernels/kb_add.cu");
    CHECK(u->ok && !u->cached);
    CHECK(u->split);
    CHECK(u->used_pch);
    CHECK_CONTAINS(k.r.full_log.data, "kernels/kb_add.cu (exit 0, cut in two");
    json_t *j = compile_report_to_json(&k.r);
    CHECK(json_is_true(json_object_get(json_array_get(json_object_get(j, "units"), 0), "split")));
    json_decref(j);
    /* Every name resolves: the kernel's host stub came from nvcc's half. */
    void *h = dlopen(k.out, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        fprintf(stderr, "  dlopen: %s\n", dlerror());
    REQUIRE(h);
    int (*add)(int, int) = (int (*)(int, int))dlsym(h, "_Z6kb_addii");
    REQUIRE(add);
    CHECK_EQ(add(2, 3), 5);
    dlclose(h);
    char key[HASH128_HEX_LEN + 1];
    memcpy(key, u->key, sizeof(key));

    REQUIRE(build(&k.o, k.snap, k.out, &k.r, &k.err) == 0);
    CHECK(k.r.ok && k.r.link_cached);
    CHECK(unit(&k.r, "kernels/kb_add.cu")->cached);

    /* The baseline (one nvcc unit), in a cache of its own: the same key, a working module. */
    k.o.use_split = false;
    char *cache2 = xstrfmt("%s/cache-whole", test_tmpdir());
    k.o.cache_dir = cache2;
    REQUIRE(build(&k.o, k.snap, k.out, &k.r, &k.err) == 0);
    CHECK(k.r.ok);
    u = unit(&k.r, "kernels/kb_add.cu");
    CHECK(!u->split && !u->cached && !u->used_pch);
    CHECK_STR(u->key, key);
    free(cache2);
    tb_end(&k);
}

TEST(inline_cuda_warm_makes_both_headers)
{
    need_nvcc();
    /* KernelBench mode: the bindings' header and the split one, ahead of the first build. */
    struct tbuild k;
    kb_begin(&k, kb_split_cu);
    REQUIRE(compile_warm(&k.o, &k.err) == 0);
    char *pch = xstrfmt("%s/pch", k.cache);
    CHECK_EQ(count_files(pch), 4); /* two pch.h and two pch.h.gch */
    REQUIRE(build(&k.o, k.snap, NULL, &k.r, &k.err) == 0);
    CHECK(k.r.ok && !k.r.pch_built);
    CHECK(unit(&k.r, "kernels/kb_add.cu")->split);
    free(pch);
    tb_end(&k);
}

TEST(inline_cuda_split_that_fails_is_built_whole)
{
    need_nvcc();
    /* A type with a device member function: g++ cannot compile the torch half, nvcc the whole. */
    struct tbuild k;
    kb_begin(&k, KB_PRELUDE "struct Lane { __device__ int id() const { return threadIdx.x; } };\n"
                            "__global__ void kb_kernel(int *o) { o[0] = Lane().id(); }\n"
                            "int kb_add(int a, int b) { TORCH_CHECK(a >= 0, \"a\"); return a + b; "
                            "}\n");
    REQUIRE(build(&k.o, k.snap, k.out, &k.r, &k.err) == 0);
    tb_show_errors(&k);
    CHECK(k.r.ok);
    const struct compile_unit_report *u = unit(&k.r, "kernels/kb_add.cu");
    CHECK(u->ok && !u->split);
    CHECK_CONTAINS(k.r.full_log.data, "kernels/kb_add.cu (cut in two, then built whole)");
    CHECK_CONTAINS(k.r.full_log.data, "the torch half did not compile");
    CHECK_CONTAINS(k.r.full_log.data, "threadIdx");

    /* A compiler error of the source's own is reported as nvcc gives it for the whole unit. */
    put_text(k.snap, "kb_add.cu",
             KB_PRELUDE "__global__ void kb_kernel(int *o) { o[0] = missing_name; }\n"
                        "int kb_add(int a, int b) { TORCH_CHECK(a >= 0, \"a\"); return a + b; }\n");
    REQUIRE(build(&k.o, k.snap, k.out, &k.r, &k.err) == 0);
    CHECK(!k.r.ok);
    CHECK_CONTAINS(k.r.errors.data, "kernels/kb_add.cu:6: error: identifier \"missing_name\" is "
                                    "undefined");
    CHECK(strstr(k.r.errors.data, "split/") == NULL);
    tb_end(&k);
}
