/*
 * test_policy_verdict.c - what decides a policy verdict, and under which rule set. Meaning
 * decides, names only advise: a name read in a source is a note (tests/eval/policy/collisions/
 * holds honest code whose helpers, variables and fields share torch and libc names, and launches
 * without a stream); the same rule on a built object's undefined symbols decides; syntax rules
 * decide; which stream work runs on never decides; the kernelbench rules allow torch computation
 * and other libraries but keep every other defence. Objects are built here with cc (skipped
 * without it), model_new.py goes through python3 (skipped without it).
 */
#include "test.h"

#include <dirent.h>
#include <errno.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/fs.h"
#include "core/proc.h"
#include "core/util.h"
#include "eval/policy.h"

static size_t count(const struct policy_report *rep, bool advisory, const char *rule)
{
    size_t n = 0;
    for (size_t i = 0; i < rep->n; i++)
        n += rep->items[i].advisory == advisory && (!rule || !strcmp(rep->items[i].rule, rule));
    return n;
}

static void check_src(const char *name, const char *code, enum policy_rules rules,
                      struct policy_report *rep)
{
    policy_report_init(rep);
    rep->rules = rules;
    struct ca_err err = {0};
    CHECK_EQ(policy_check_source(name, code, strlen(code), rep, &err), 0);
}

TEST(rule_sets_parse_and_name_themselves)
{
    enum policy_rules r = POLICY_RULES_KERNELBENCH;
    CHECK_EQ(policy_rules_parse(NULL, &r), 0);
    CHECK_EQ(r, POLICY_RULES_CUDA_AGENT);
    CHECK_EQ(policy_rules_parse("kernelbench", &r), 0);
    CHECK_EQ(r, POLICY_RULES_KERNELBENCH);
    CHECK_STR(policy_rules_name(r), "kernelbench");
    CHECK_STR(policy_rules_name(POLICY_RULES_CUDA_AGENT), "cuda-agent");
    CHECK_EQ(policy_rules_parse("KernelBench", &r), CA_EUSAGE);
    CHECK_EQ(policy_rules_parse("", &r), CA_EUSAGE);
}

/* Every collisions fixture: notes only, under both rule sets, and the scanner did see names. */
TEST(honest_name_collisions_are_notes)
{
    char *dir = xstrfmt("%s/tests/eval/policy/collisions", test_repo());
    DIR *d = opendir(dir);
    REQUIRE(d);
    size_t checked = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char *path = xstrfmt("%s/%s", dir, e->d_name);
        char *name = xstrfmt("kernels/%s", e->d_name);
        struct buf code;
        buf_init(&code, 1 << 20);
        struct ca_err err = {0};
        REQUIRE(fs_read_file(path, 1 << 20, &code, &err) == 0);
        for (int rules = 0; rules < 2; rules++) {
            struct policy_report rep;
            check_src(name, code.data, (enum policy_rules)rules, &rep);
            if (!policy_report_ok(&rep))
                test__fail(__FILE__, __LINE__, "%s (%s): %s: %s", e->d_name,
                           policy_rules_name(rep.rules), rep.items[0].rule, rep.items[0].message);
            CHECK(rep.notes > 0);
            CHECK_EQ(rep.notes, rep.n);
            policy_report_release(&rep);
        }
        buf_release(&code);
        free(name);
        free(path);
        checked++;
    }
    closedir(d);
    free(dir);
    CHECK(checked >= 2);
}

TEST(source_names_advise_and_syntax_decides)
{
    struct policy_report rep;
    /* A real call of fork in a source is still only a note: the object check decides. */
    check_src("kernels/a.cu",
              "#include <cuda_runtime.h>\n"
              "extern \"C\" int f(void) { return fork(); }\n",
              POLICY_RULES_CUDA_AGENT, &rep);
    CHECK(policy_report_ok(&rep));
    CHECK_EQ(count(&rep, true, "process"), 1);
    policy_report_release(&rep);

    /* Host inline assembly, a forbidden or local header, token pasting: violations. */
    check_src("kernels/b.cu",
              "#include <fstream>\n"
              "#include \"local.h\"\n"
              "#define CAT(a, b) a##b\n"
              "extern \"C\" void g(void) { asm volatile(\"syscall\"); }\n",
              POLICY_RULES_KERNELBENCH, &rep);
    CHECK(!policy_report_ok(&rep));
    CHECK(count(&rep, false, "include") >= 1);
    CHECK_EQ(count(&rep, false, "macro"), 1);
    CHECK_EQ(count(&rep, false, "asm"), 1);
    policy_report_release(&rep);

    /* torch::zeros in a binding: a note under both rule sets (the object decides). */
    check_src("kernels/c_binding.cpp",
              "#include \"binding_registry.h\"\n"
              "static torch::Tensor f(torch::Tensor x) { return torch::zeros_like(x); }\n",
              POLICY_RULES_CUDA_AGENT, &rep);
    CHECK(policy_report_ok(&rep));
    CHECK_EQ(count(&rep, true, "torch-compute"), 1);
    policy_report_release(&rep);
}

TEST(report_separates_violations_and_notes)
{
    struct policy_report rep;
    policy_report_init(&rep);
    rep.rules = POLICY_RULES_KERNELBENCH;
    rep.basis = POLICY_BASIS_SYMBOL;
    policy_report_addf(&rep, "x.so", 0, "torch-compute", "`at::_ops::add` %s", "note");
    policy_report_addf(&rep, "x.so", 0, "process", "`fork` %s", "violation");
    policy_report_addf(&rep, "x.so", 0, "stream", "`cudaStreamCreate` %s", "note");
    policy_report_add_note(&rep, "model_new.py", 3, "fallback", "try/except");
    CHECK_EQ(rep.n, 4);
    CHECK_EQ(rep.notes, 3);
    CHECK(!policy_report_ok(&rep));
    CHECK(policy_report_has(&rep, "process"));
    CHECK(!policy_report_has(&rep, "torch-compute"));
    struct buf out;
    buf_init(&out, 1 << 16);
    CHECK_EQ(policy_report_format(&rep, &out), 0);
    CHECK_STR(out.data, "x.so: process: `fork` violation\n");
    buf_reset(&out);
    CHECK_EQ(policy_report_format_notes(&rep, "fallback", &out), 0);
    CHECK_STR(out.data, "model_new.py:3: note: fallback: try/except\n");
    buf_release(&out);
    json_t *j = policy_report_to_json(&rep);
    CHECK_STR(json_string_value(json_object_get(j, "rules")), "kernelbench");
    CHECK(json_is_false(json_object_get(j, "ok")));
    CHECK_EQ(json_array_size(json_object_get(j, "violations")), 1);
    CHECK_EQ(json_array_size(json_object_get(j, "notes")), 3);
    json_decref(j);
    policy_report_release(&rep);
    /* The rule set survives a release (the report is reused for the next check). */
    CHECK_EQ(rep.rules, POLICY_RULES_KERNELBENCH);
}

TEST(notes_never_crowd_out_a_violation)
{
    struct policy_report rep;
    policy_report_init(&rep);
    rep.basis = POLICY_BASIS_SOURCE_NAME;
    for (int i = 0; i < POLICY_MAX_VIOLATIONS + 50; i++)
        policy_report_addf(&rep, "kernels/a.cu", (unsigned)i + 1, "process", "`fork` %d", i);
    CHECK(policy_report_ok(&rep));
    CHECK_EQ(rep.notes_dropped, 50);
    rep.basis = POLICY_BASIS_FINDING;
    policy_report_addf(&rep, "kernels/a.cu", 999, "asm", "host assembly");
    CHECK(!policy_report_ok(&rep));
    CHECK_EQ(rep.dropped, 0);
    CHECK(policy_report_has(&rep, "asm"));
    policy_report_release(&rep);
}

/* An object whose undefined symbols are the given C declarations' uses (skips without cc). */
static void build_object(const char *name, const char *src, char **out)
{
    char *cc = proc_which("cc");
    if (!cc)
        SKIP("cc", "cc not found in PATH");
    char *c = xstrfmt("%s/%s.c", test_tmpdir(), name);
    *out = xstrfmt("%s/%s.o", test_tmpdir(), name);
    struct ca_err err = {0};
    REQUIRE(fs_write_atomic(c, src, strlen(src), 0644, &err) == 0);
    const char *argv[] = {cc, "-c", "-fPIC", "-o", *out, c, NULL};
    struct proc_opts o = {.argv = argv, .timeout_ms = 60000};
    struct proc_result r;
    proc_result_init(&r);
    REQUIRE(proc_run(&o, &r, &err) == 0);
    CHECK(proc_ok(&r));
    proc_result_release(&r);
    free(c);
    free(cc);
}

/* at::_ops::zeros_like::call(...) and at::_ops::add_Tensor::call(...), as C can name them. */
static const char imports_c[] =
    "extern int _ZN2at4_ops10zeros_like4callERKNS_6TensorE(void);\n"
    "extern int _ZN2at4_ops10add_Tensor4callERKNS_6TensorES4_RKN3c106ScalarE(void);\n"
    "extern int cudaStreamCreate(void **);\n"
    "extern int cudaLaunchHostFunc(void *, void *, void *);\n"
    "extern int cufftExecC2C(void *);\n"
    "extern int fork(void);\n"
    "int entry(void *p)\n"
    "{\n"
    "    return _ZN2at4_ops10zeros_like4callERKNS_6TensorE() +\n"
    "           _ZN2at4_ops10add_Tensor4callERKNS_6TensorES4_RKN3c106ScalarE() +\n"
    "           cudaStreamCreate(&p) + cudaLaunchHostFunc(p, p, p) + cufftExecC2C(p) + fork();\n"
    "}\n";

TEST(object_symbols_decide_per_rule_set)
{
    char *obj;
    build_object("imports", imports_c, &obj);
    for (int rules = 0; rules < 2; rules++) {
        struct policy_report rep;
        policy_report_init(&rep);
        rep.rules = (enum policy_rules)rules;
        struct ca_err err = {0};
        CHECK_EQ(policy_check_object(obj, "kernels/x_binding.cpp", &rep, &err), 0);
        bool kb = rules == POLICY_RULES_KERNELBENCH;
        /* Under both: fork and a host callback decide, a stream of one's own never does. */
        CHECK(policy_report_has(&rep, "process"));
        CHECK(policy_report_has(&rep, "thread"));
        CHECK(!policy_report_has(&rep, "stream"));
        CHECK(count(&rep, true, "stream") >= 1);
        /* torch computation and cuFFT: violations for RL rewards, notes under kernelbench. */
        CHECK_EQ(policy_report_has(&rep, "torch-compute"), !kb);
        CHECK_EQ(policy_report_has(&rep, "library"), !kb);
        CHECK_EQ(count(&rep, true, "torch-compute") >= 1, kb);
        for (size_t i = 0; i < rep.n; i++)
            CHECK_STR(rep.items[i].file, "kernels/x_binding.cpp");
        CHECK_EQ(rep.basis, POLICY_BASIS_FINDING); /* restored */
        policy_report_release(&rep);
    }
    free(obj);
}

static const char model_new_kb[] = "import torch\n"
                                   "import torch.nn as nn\n"
                                   "import torch.nn.functional as F\n"
                                   "import cuda_extension\n"
                                   "\n"
                                   "\n"
                                   "class ModelNew(nn.Module):\n"
                                   "    def __init__(self, c):\n"
                                   "        super().__init__()\n"
                                   "        self.conv = nn.Conv2d(c, c, 3)\n"
                                   "\n"
                                   "    @staticmethod\n"
                                   "    def act(x):\n"
                                   "        return F.relu(x)\n"
                                   "\n"
                                   "    def forward(self, x):\n"
                                   "        try:\n"
                                   "            y = cuda_extension.act(self.conv(x).contiguous())\n"
                                   "        except RuntimeError:\n"
                                   "            y = self.act(x)\n"
                                   "        return torch.cat([y, y], dim=1)\n";

static int model_new_verdict(const char *code, enum policy_rules rules, struct policy_report *rep)
{
    char *path = xstrfmt("%s/model_new.py", test_tmpdir());
    struct ca_err err = {0};
    REQUIRE(fs_write_atomic(path, code, strlen(code), 0644, &err) == 0);
    policy_report_init(rep);
    rep->rules = rules;
    int rc = policy_check_model_new(path, rep, &err);
    free(path);
    return rc;
}

TEST(model_new_under_the_kernelbench_rules)
{
    char *py = proc_which("python3");
    if (!py)
        SKIP("python3", "python3 not found in PATH");
    free(py);
    struct policy_report rep;
    /* Torch computation, nn modules, decorators and fallbacks: notes under kernelbench... */
    CHECK_EQ(model_new_verdict(model_new_kb, POLICY_RULES_KERNELBENCH, &rep), 0);
    if (!policy_report_ok(&rep))
        test__fail(__FILE__, __LINE__, "%s: %s", rep.items[0].rule, rep.items[0].message);
    CHECK(rep.notes >= 2);
    policy_report_release(&rep);
    /* ... and violations under the cuda-agent rules. */
    CHECK_EQ(model_new_verdict(model_new_kb, POLICY_RULES_CUDA_AGENT, &rep), 0);
    CHECK(policy_report_has(&rep, "fallback"));
    CHECK(policy_report_has(&rep, "torch-compute"));
    policy_report_release(&rep);
    /* What reaches beyond the model decides under both. */
    static const char *const beyond[][2] = {
        {"import os\n", "import"},
        {"from model import Model\n", "import"},
        {"import torch\nx = exec('1')\n", "builtin"},
        {"import torch\ny = torch.__builtins__\n", "dunder"},
        {"import torch\nf = open('/etc/passwd')\n", "builtin"},
    };
    for (size_t i = 0; i < ARRAY_SIZE(beyond); i++) {
        for (int rules = 0; rules < 2; rules++) {
            CHECK_EQ(model_new_verdict(beyond[i][0], (enum policy_rules)rules, &rep), 0);
            if (!policy_report_has(&rep, beyond[i][1]))
                test__fail(__FILE__, __LINE__, "%s (%s): no %s violation", beyond[i][0],
                           policy_rules_name((enum policy_rules)rules), beyond[i][1]);
            policy_report_release(&rep);
        }
    }
}
