/*
 * test_policy_objects.c - the evaluator's static policy on built objects (policy_check_so): the
 * undefined symbols of shared and relocatable objects built here with cc/c++ (skipped without
 * them). A clean object passes, every refused family is named, a relocatable object is stricter
 * about Python, C++ names are matched mangled, and a missing or non-ELF input is an error. The
 * source checks are test_policy.c.
 */
#include "test.h"

#include <errno.h>

#include "core/fs.h"
#include "core/proc.h"
#include "core/util.h"
#include "eval/policy.h"

/* Compile src (written to tmpdir/name.ext) with argv-style flags; skips the case when the
 * compiler is missing. */
static void build(const char *compiler, const char *ext, const char *name, const char *src,
                  bool shared, char **out_path)
{
    char *cc = proc_which(compiler);
    if (!cc)
        SKIP(compiler, "%s not found in PATH", compiler);
    char *src_path = xstrfmt("%s/%s.%s", test_tmpdir(), name, ext);
    char *obj = xstrfmt("%s/%s.%s", test_tmpdir(), name, shared ? "so" : "o");
    struct ca_err err = {0};
    REQUIRE(fs_write_atomic(src_path, src, strlen(src), 0644, &err) == 0);
    const char *argv_shared[] = {cc, "-shared", "-fPIC", "-o", obj, src_path, NULL};
    const char *argv_obj[] = {cc, "-c", "-fPIC", "-o", obj, src_path, NULL};
    struct proc_opts o = {.argv = shared ? argv_shared : argv_obj, .timeout_ms = 60000};
    struct proc_result r;
    proc_result_init(&r);
    REQUIRE(proc_run(&o, &r, &err) == 0);
    if (!proc_ok(&r))
        test__fail(__FILE__, __LINE__, "%s failed: %s", compiler, r.err.data);
    REQUIRE(proc_ok(&r));
    proc_result_release(&r);
    free(src_path);
    free(cc);
    *out_path = obj;
}

static bool report_has(const struct policy_report *rep, const char *rule, const char *needle)
{
    for (size_t i = 0; i < rep->n; i++)
        if (strcmp(rep->items[i].rule, rule) == 0 && strstr(rep->items[i].message, needle))
            return true;
    return false;
}

static const char clean_c[] =
    "#include <string.h>\n"
    "#include <stdlib.h>\n"
    "extern int cublasSgemm_v2(void *, int);\n"
    "extern int cublasCreate_v2(void **);\n"
    "extern int cublasLtMatmul(void *);\n"
    "extern int cudnnConvolutionForward(void *);\n"
    "extern int cudaMemcpyAsync(void *, const void *, size_t, int, void *);\n"
    "extern int cudaLaunchKernel(const void *);\n"
    "extern int cudaStreamWaitEvent(void *, void *, unsigned);\n"
    "extern void *PyImport_ImportModule(const char *);\n"
    "int entry(void *h, char *d, const char *s, size_t n)\n"
    "{\n"
    "    memcpy(d, s, n);\n"
    "    free(malloc(n));\n"
    "    return cublasSgemm_v2(h, 0) + cublasCreate_v2(&h) + cublasLtMatmul(h) +\n"
    "           cudnnConvolutionForward(h) + cudaMemcpyAsync(d, s, n, 3, h) +\n"
    "           cudaLaunchKernel(h) + cudaStreamWaitEvent(h, h, 0) +\n"
    "           (PyImport_ImportModule(\"types\") != 0);\n"
    "}\n";

static const char bad_c[] =
    "#include <stddef.h>\n"
    "extern int fork(void);\n"
    "extern void *dlopen(const char *, int);\n"
    "extern int socket(int, int, int);\n"
    "extern int cudaMalloc(void **, size_t);\n"
    "extern int cublasSscal_v2(void *, int);\n"
    "extern char *getenv(const char *);\n"
    "extern int cuModuleLoadData(void **, const void *);\n"
    "extern int PyRun_SimpleString(const char *);\n"
    "extern int cudaStreamCreate(void **);\n"
    "extern int cudaMemcpy_ptds(void *, const void *, size_t, int);\n"
    "extern int pthread_create(void *, void *, void *, void *);\n"
    "extern void *mmap(void *, size_t, int, int, int, long);\n"
    "extern int cudnnSoftmaxForward(void *);\n"
    "extern int cufftExecC2C(void *);\n"
    "extern int cudaSetDevice(int);\n"
    "int entry(void *p)\n"
    "{\n"
    "    return fork() + (dlopen(\"x\", 0) != 0) + socket(2, 1, 0) + cudaMalloc(&p, 4) +\n"
    "           cublasSscal_v2(p, 0) + (getenv(\"A\") != 0) + cuModuleLoadData(&p, p) +\n"
    "           PyRun_SimpleString(\"\") + cudaStreamCreate(&p) + cudaMemcpy_ptds(p, p, 1, 3) +\n"
    "           pthread_create(p, p, p, p) + (mmap(p, 1, 0, 0, 0, 0) != 0) +\n"
    "           cudnnSoftmaxForward(p) + cufftExecC2C(p) + cudaSetDevice(1);\n"
    "}\n";

TEST(objects_clean_shared_object_passes)
{
    char *so;
    build("cc", "c", "clean", clean_c, true, &so);
    struct policy_report rep;
    policy_report_init(&rep);
    struct ca_err err = {0};
    CHECK_EQ(policy_check_so(so, &rep, &err), 0);
    if (!policy_report_ok(&rep))
        test__fail(__FILE__, __LINE__, "clean.so: %s", rep.items[0].message);
    policy_report_release(&rep);
    free(so);
}

TEST(objects_bad_imports_are_named)
{
    char *so;
    build("cc", "c", "bad", bad_c, true, &so);
    struct policy_report rep;
    policy_report_init(&rep);
    struct ca_err err = {0};
    CHECK_EQ(policy_check_so(so, &rep, &err), 0);
    CHECK(report_has(&rep, "process", "`fork`"));
    CHECK(report_has(&rep, "dlopen", "`dlopen`"));
    CHECK(report_has(&rep, "network", "`socket`"));
    CHECK(report_has(&rep, "memory", "`cudaMalloc`"));
    CHECK(report_has(&rep, "library", "`cublasSscal_v2`"));
    CHECK(report_has(&rep, "env", "`getenv`"));
    CHECK(report_has(&rep, "library", "`cuModuleLoadData`"));
    CHECK(report_has(&rep, "python", "`PyRun_SimpleString`"));
    CHECK(report_has(&rep, "stream", "`cudaStreamCreate`"));
    CHECK(report_has(&rep, "stream", "`cudaMemcpy_ptds`"));
    CHECK(report_has(&rep, "thread", "`pthread_create`"));
    CHECK(report_has(&rep, "file", "`mmap`"));
    CHECK(report_has(&rep, "library", "`cudnnSoftmaxForward`"));
    CHECK(report_has(&rep, "library", "`cufftExecC2C`"));
    CHECK(report_has(&rep, "device", "`cudaSetDevice`"));
    CHECK_EQ(rep.n, 15);
    for (size_t i = 0; i < rep.n; i++) {
        CHECK_STR(rep.items[i].file, "bad.so");
        CHECK_EQ(rep.items[i].line, 0);
    }
    policy_report_release(&rep);
    free(so);
}

TEST(objects_relocatable_are_stricter_about_python)
{
    char *so, *obj;
    build("cc", "c", "imp", clean_c, true, &so);
    build("cc", "c", "imp_rel", clean_c, false, &obj);
    struct policy_report rep;
    policy_report_init(&rep);
    struct ca_err err = {0};
    CHECK_EQ(policy_check_so(so, &rep, &err), 0);
    CHECK(policy_report_ok(&rep));
    policy_report_release(&rep);

    policy_report_init(&rep);
    CHECK_EQ(policy_check_so(obj, &rep, &err), 0);
    REQUIRE(rep.n == 1);
    CHECK(report_has(&rep, "python", "`PyImport_ImportModule`"));
    CHECK_STR(rep.items[0].file, "imp_rel.o");
    policy_report_release(&rep);
    free(obj);
    free(so);
}

TEST(objects_cxx_names_are_matched_mangled)
{
    static const char src[] =
        "namespace std { struct thread { void join(); };\n"
        "  namespace filesystem { bool exists(const char *); } }\n"
        "namespace at { namespace _ops {\n"
        "  struct add_Tensor { static int call(int); };\n"
        "  struct empty_like { static int call(int); };\n"
        "  struct empty_strided { static int call(int); }; }\n"
        "  struct TensorMaker { int make_tensor(); }; }\n"
        "namespace c10 { struct Dispatcher { static int singleton(); }; }\n"
        "namespace torch { namespace nn { int relu(int); } }\n"
        "extern \"C\" int entry(std::thread *t, at::TensorMaker *m)\n"
        "{\n"
        "    t->join();\n"
        "    return at::_ops::add_Tensor::call(1) + at::_ops::empty_like::call(2) +\n"
        "           at::_ops::empty_strided::call(3) + m->make_tensor() +\n"
        "           std::filesystem::exists(\"x\") + c10::Dispatcher::singleton() +\n"
        "           torch::nn::relu(1);\n"
        "}\n";
    char *so;
    build("c++", "cpp", "cxx", src, true, &so);
    struct policy_report rep;
    policy_report_init(&rep);
    struct ca_err err = {0};
    CHECK_EQ(policy_check_so(so, &rep, &err), 0);
    CHECK(report_has(&rep, "thread", "std::thread"));
    CHECK(report_has(&rep, "file", "std::filesystem"));
    CHECK(report_has(&rep, "torch-compute", "at::_ops::add_Tensor"));
    CHECK(!report_has(&rep, "torch-compute", "empty_like"));
    CHECK(!report_has(&rep, "torch-compute", "empty_strided"));
    CHECK(report_has(&rep, "memory", "TensorMaker"));
    CHECK(report_has(&rep, "torch-compute", "c10::Dispatcher"));
    CHECK(report_has(&rep, "torch-compute", "torch::nn"));
    CHECK_EQ(rep.n, 6);
    policy_report_release(&rep);
    free(so);
}

TEST(objects_errors)
{
    struct policy_report rep;
    policy_report_init(&rep);
    struct ca_err err = {0};
    char *missing = xstrfmt("%s/none.so", test_tmpdir());
    CHECK_EQ(policy_check_so(missing, &rep, &err), -ENOENT);
    CHECK_CONTAINS(err.msg, "none.so");

    char *text = xstrfmt("%s/text.so", test_tmpdir());
    REQUIRE(fs_write_atomic(text, "not an object\n", 14, 0644, &err) == 0);
    CHECK_EQ(policy_check_so(text, &rep, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "text.so");

    CHECK_EQ(policy_check_so(test_tmpdir(), &rep, &err), CA_EPARSE);
    CHECK_EQ(rep.n, 0);
    policy_report_release(&rep);
    free(text);
    free(missing);
}
