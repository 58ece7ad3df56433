/*
 * test_task.c - the task module: parsing KernelBench-format files (layout,
 * docstrings, encoding, limits, __init__ signature), operator derivation and
 * label comparison, the tree and JSONL loaders with their error messages
 * (also driven by the fixture files under tests/it/data/tasks/), lookup by
 * selector, reference resolution, JSONL round trip and the parquet import.
 */
#include "test.h"

#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/fs.h"
#include "core/hash.h"
#include "core/limits.h"
#include "core/proc.h"
#include "core/util.h"
#include "task/task.h"

#define FIXTURES "tests/it/data/tasks"

/* A small valid task; %s is put into forward's body. */
#define TASK_CODE(fwd)                                                                             \
    "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"                           \
    "    def forward(self, x):\n        " fwd "\n\n\n"                                             \
    "def get_inputs():\n    return [torch.randn(4)]\n\n\n"                                         \
    "def get_init_inputs():\n    return []\n"

static char *fixture(const char *rel)
{
    return xstrfmt("%s/" FIXTURES "/%s", test_repo(), rel);
}

static char *tmp_path(const char *rel)
{
    return xstrfmt("%s/%s", test_tmpdir(), rel);
}

static void write_file(const char *path, const char *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    REQUIRE(fwrite(data, 1, len, f) == len);
    REQUIRE(fclose(f) == 0);
}

static void write_str(const char *path, const char *s)
{
    write_file(path, s, strlen(s));
}

static char *read_str(const char *path)
{
    struct buf b;
    buf_init(&b, 1 << 20);
    struct ca_err err = {0};
    REQUIRE(fs_read_file(path, 1 << 20, &b, &err) == 0);
    buf_rtrim(&b);
    return buf_detach(&b, NULL);
}

static int parse_str(const char *code, struct task *t, struct ca_err *err)
{
    return task_parse("t.py", code, strlen(code), t, err);
}

static bool has_op(const struct task *t, const char *op)
{
    for (size_t i = 0; i < t->nops; i++)
        if (strcmp(t->ops[i], op) == 0)
            return true;
    return false;
}

/* ---- parsing ---- */

TEST(parse_good_file)
{
    char *path = fixture("good/linear_relu.py");
    struct task_set set;
    struct ca_err err = {0};
    task_set_init(&set);
    REQUIRE(task_load_file(path, &set, &err) == 0);
    REQUIRE(set.n == 1);
    const struct task *t = &set.tasks[0];
    CHECK_STR(t->name, "linear_relu");
    char hex[HASH64_HEX_LEN + 1];
    CHECK(t->hash == hash64(t->code, t->code_len));
    hash64_hex(t->hash, hex);
    char *id = xstrfmt("linear_relu-%.12s", hex);
    CHECK_STR(t->id, id);
    CHECK_EQ(strlen(t->id), strlen("linear_relu-") + 12);
    CHECK_STR(t->init_signature, "self, in_features: int, out_features=10");
    CHECK_EQ(t->level, 0);
    CHECK(t->ops_unlabelled);
    CHECK(!t->ops_relabelled);
    CHECK(t->data_source == NULL);
    CHECK_STR(t->origin, path);
    REQUIRE(t->nops == 3);
    CHECK_STR(t->ops[0], "nn.Linear");
    CHECK_STR(t->ops[1], "F.relu");
    CHECK_STR(t->ops[2], "Tensor.sum");
    CHECK(t->ops[3] == NULL);
    free(id);
    free(path);
    task_set_release(&set);
}

TEST(parse_signatures)
{
    struct task_set set;
    struct ca_err err = {0};
    task_set_init(&set);
    char *a = fixture("good/conv_softmax.py"), *b = fixture("good/no_init.py");
    REQUIRE(task_load_file(a, &set, &err) == 0);
    REQUIRE(task_load_file(b, &set, &err) == 0);
    REQUIRE(set.n == 2);
    CHECK_STR(set.tasks[0].init_signature, "self, channels, kernel_size=3");
    CHECK_STR(set.tasks[1].init_signature, "self");
    CHECK(has_op(&set.tasks[0], "nn.Conv2d") && has_op(&set.tasks[0], "torch.softmax"));
    CHECK(has_op(&set.tasks[1], "torch.matmul") && has_op(&set.tasks[1], "Tensor.tanh"));
    free(a);
    free(b);
    task_set_release(&set);

    /* strings, brackets, comments and backslashes inside the parameter list */
    struct task t;
    const char *code = "import torch.nn as nn\n\n\nclass Model(nn.Module):\n"
                       "    def __init__(self,mode = 'a  b',  # comment (\n"
                       "                 dims=(1, 2), \\\n"
                       "                 *args, **kw):\n"
                       "        super().__init__()\n\n"
                       "    def forward(self, x):\n        return x\n\n\n"
                       "def get_inputs():\n    return []\n\n\n"
                       "def get_init_inputs():\n    return []\n";
    REQUIRE(parse_str(code, &t, &err) == 0);
    CHECK_STR(t.init_signature, "self, mode = 'a  b', dims=(1, 2), *args, **kw");
    task_release(&t);
}

TEST(parse_missing_pieces)
{
    struct task t;
    struct ca_err err = {0};
    CHECK_EQ(parse_str("import torch\n", &t, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "t.py: no top-level `class Model(nn.Module)`: a task file must define "
                            "class Model(nn.Module), get_inputs() and get_init_inputs()");
    CHECK_EQ(parse_str("class Model(nn.Module):\n    def forward(self, x):\n        return x\n"
                       "def get_init_inputs():\n    return []\n",
                       &t, &err),
             CA_EPARSE);
    CHECK_CONTAINS(err.msg, "t.py: no top-level `def get_inputs()`: a task file must define");
    CHECK_EQ(parse_str("class Model(nn.Module):\n    def forward(self, x):\n        return x\n"
                       "def get_inputs():\n    return []\n",
                       &t, &err),
             CA_EPARSE);
    CHECK_CONTAINS(err.msg, "t.py: no top-level `def get_init_inputs()`");
    /* indented (inside an if block) does not count */
    CHECK_EQ(parse_str("class Model(nn.Module):\n    def forward(self, x):\n        return x\n"
                       "if True:\n    def get_inputs():\n        return []\n"
                       "def get_init_inputs():\n    return []\n",
                       &t, &err),
             CA_EPARSE);
    CHECK_CONTAINS(err.msg, "get_inputs");
    /* a ModelNew is not a Model; a ModuleList base is not a Module */
    CHECK_EQ(parse_str("class ModelNew(nn.Module):\n    pass\n", &t, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "no top-level `class Model");
    CHECK_EQ(parse_str("\nclass Model(nn.ModuleList):\n    def forward(self):\n        pass\n", &t,
                       &err),
             CA_EPARSE);
    CHECK_CONTAINS(err.msg, "t.py:2: class Model does not derive from nn.Module");
    CHECK_EQ(parse_str("class Model:\n    def forward(self):\n        pass\n", &t, &err),
             CA_EPARSE);
    CHECK_CONTAINS(err.msg, "does not derive from nn.Module");
}

TEST(parse_base_spellings)
{
    const char *bases[] = {"nn.Module", "torch.nn.Module", "Module", " torch.nn.Module ",
                           "\n    nn.Module,\n"};
    for (size_t i = 0; i < ARRAY_SIZE(bases); i++) {
        char *code = xstrfmt("from torch.nn import Module\nimport torch.nn as nn\n\n"
                             "class Model(%s):\n    def forward(self, x):\n        return x\n\n"
                             "def get_inputs():\n    return []\n\n"
                             "def get_init_inputs():\n    return []\n",
                             bases[i]);
        struct task t;
        struct ca_err err = {0};
        CHECK_EQ(parse_str(code, &t, &err), 0);
        task_release(&t);
        free(code);
    }
}

TEST(parse_docstring_and_comment_defs_do_not_count)
{
    struct task t;
    struct ca_err err = {0};
    const char *code = "'''\ndef get_inputs():\n'''\n"
                       "r\"\"\"\nclass Model(nn.Module):\n\"\"\"\n"
                       "# def get_init_inputs():\n"
                       "x = 'def get_inputs():'\n"
                       "def get_init_inputs():\n    return []\n";
    CHECK_EQ(parse_str(code, &t, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "no top-level `class Model(nn.Module)`");
    /* a triple-quoted string that ends mid-line and code after it */
    const char *code2 = "import torch\nimport torch.nn as nn\nDOC = '''\n\n'''.strip()\n"
                        "class Model(nn.Module):\n    \"\"\"doc\n"
                        "def forward(self):\n    \"\"\"\n"
                        "    def forward(self, x):\n        return x.relu()\n"
                        "def get_inputs():\n    return []\n"
                        "def get_init_inputs():\n    return []\n";
    CHECK_EQ(parse_str(code2, &t, &err), 0);
    CHECK(has_op(&t, "Tensor.relu"));
    task_release(&t);
}

/*
 * Every DIR/NAME<ext> fixture must fail to load with the text of DIR/NAME.expect in the
 * message, and add nothing to the set. Returns how many fixtures were checked.
 */
static int check_bad_fixtures(const char *subdir, const char *ext)
{
    char *dir = fixture(subdir);
    DIR *d = opendir(dir);
    REQUIRE(d);
    struct dirent *de;
    size_t elen = strlen(ext);
    int seen = 0;
    while ((de = readdir(d))) {
        size_t n = strlen(de->d_name);
        if (n <= elen || strcmp(de->d_name + n - elen, ext) != 0)
            continue;
        char *path = xstrfmt("%s/%s", dir, de->d_name);
        char *expect_path = xstrfmt("%s/%.*s.expect", dir, (int)(n - elen), de->d_name);
        char *expect = read_str(expect_path);
        struct task_set set;
        struct ca_err err = {0};
        task_set_init(&set);
        int rc = task_load(path, &set, &err);
        if (rc == 0 || !strstr(err.msg, expect))
            test__fail(__FILE__, __LINE__, "%s: rc %d, message \"%s\", expected \"%s\"", de->d_name,
                       rc, err.msg, expect);
        CHECK_EQ(set.n, 0);
        task_set_release(&set);
        free(expect);
        free(expect_path);
        free(path);
        seen++;
    }
    closedir(d);
    free(dir);
    return seen;
}

TEST(parse_bad_fixtures)
{
    CHECK(check_bad_fixtures("bad", ".py") >= 6);
}

TEST(parse_invalid_utf8_position)
{
    struct task t;
    struct ca_err err = {0};
    const char code[] = "import torch\n# ok: caf\xc3\xa9\nx = 1  \xe2\x82\n";
    CHECK_EQ(task_parse("u.py", code, sizeof(code) - 1, &t, &err), CA_EUTF8);
    CHECK_CONTAINS(err.msg, "u.py:3:8: invalid UTF-8 (byte 0xe2)");
    /* overlong encoding of '/' */
    const char code2[] = "\xc0\xaf";
    CHECK_EQ(task_parse("u.py", code2, 2, &t, &err), CA_EUTF8);
    CHECK_CONTAINS(err.msg, "u.py:1:1: invalid UTF-8");
}

TEST(parse_nul_byte)
{
    struct task t;
    struct ca_err err = {0};
    const char code[] = "import torch\nx = 1\0\n";
    CHECK_EQ(task_parse("n.py", code, sizeof(code) - 1, &t, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "n.py:2:6: NUL byte");
}

TEST(parse_size_limit)
{
    struct task t;
    struct ca_err err = {0};
    size_t n = CA_LIMIT_TASK_BYTES + 1;
    char *code = xmalloc(n);
    memset(code, '#', n);
    CHECK_EQ(task_parse("big.py", code, n, &t, &err), CA_ETOOBIG);
    CHECK_CONTAINS(err.msg, "big.py: task source is 1048577 bytes, over the limit");
    /* the same through a file */
    char *path = tmp_path("big.py");
    write_file(path, code, n);
    struct task_set set;
    task_set_init(&set);
    CHECK_EQ(task_load(path, &set, &err), CA_ETOOBIG);
    CHECK_CONTAINS(err.msg, "big.py: task file is over the limit of 1048576 bytes");
    CHECK_EQ(set.n, 0);
    /* exactly at the limit is fine (as far as size goes) */
    const char *tail = TASK_CODE("return x");
    memset(code, '#', CA_LIMIT_TASK_BYTES);
    code[0] = '#';
    code[CA_LIMIT_TASK_BYTES - strlen(tail) - 1] = '\n';
    memcpy(code + CA_LIMIT_TASK_BYTES - strlen(tail), tail, strlen(tail));
    CHECK_EQ(task_parse("max.py", code, CA_LIMIT_TASK_BYTES, &t, &err), 0);
    task_release(&t);
    free(path);
    free(code);
    task_set_release(&set);
}

TEST(parse_crlf)
{
    struct task t;
    struct ca_err err = {0};
    const char *code = "import torch\r\nimport torch.nn as nn\r\n\r\n"
                       "class Model(nn.Module):\r\n"
                       "    def __init__(self,\r\n                 k=3):\r\n"
                       "        super().__init__()\r\n"
                       "    def forward(self, x):  \\\r\n\r\n        return torch.exp(x)\r\n"
                       "def get_inputs():\r\n    return [torch.randn(3)]\r\n"
                       "def get_init_inputs():\r\n    return []\r\n";
    REQUIRE(parse_str(code, &t, &err) == 0);
    CHECK_STR(t.init_signature, "self, k=3");
    CHECK(has_op(&t, "torch.exp"));
    task_release(&t);
}

TEST(parse_name_sanitised)
{
    char *dir = tmp_path("we ird");
    REQUIRE(mkdir(dir, 0755) == 0);
    char *path = xstrfmt("%s/-x y$z.py", dir);
    write_str(path, TASK_CODE("return x"));
    struct task_set set;
    struct ca_err err = {0};
    task_set_init(&set);
    REQUIRE(task_load(path, &set, &err) == 0);
    CHECK_STR(set.tasks[0].name, "_x_y_z");
    CHECK(strncmp(set.tasks[0].id, "_x_y_z-", 7) == 0);
    task_set_release(&set);
    free(path);
    /* a long stem is cut to CA_LIMIT_ID / 2 */
    char stem[200];
    memset(stem, 'a', sizeof(stem) - 1);
    stem[sizeof(stem) - 1] = '\0';
    path = xstrfmt("%s/%s.py", dir, stem);
    write_str(path, TASK_CODE("return x"));
    REQUIRE(task_load(path, &set, &err) == 0);
    CHECK_EQ(strlen(set.tasks[0].name), CA_LIMIT_ID / 2);
    CHECK_EQ(strlen(set.tasks[0].id), CA_LIMIT_ID / 2 + 13);
    task_set_release(&set);
    free(path);
    free(dir);
}

/* ---- operators ---- */

static void check_ops(const char *code, const char *const *want, size_t nwant)
{
    size_t n;
    char **ops = task_derive_ops(code, strlen(code), &n);
    bool ok = n == nwant && ops[n] == NULL;
    for (size_t i = 0; ok && i < n; i++)
        ok = strcmp(ops[i], want[i]) == 0;
    if (!ok) {
        fprintf(stderr, "  code: %s\n  got:", code);
        for (size_t i = 0; i < n; i++)
            fprintf(stderr, " %s", ops[i]);
        fprintf(stderr, "\n");
        test__fail(__FILE__, __LINE__, "derived ops differ");
    }
    task_free_ops(ops, n);
}

#define OPS(code, ...)                                                                             \
    check_ops(code, (const char *const[]){__VA_ARGS__}, ARRAY_SIZE(((const char *[]){__VA_ARGS__})))

TEST(derive_ops_namespaces)
{
    OPS("y = torch.nn.functional.relu(x)", "F.relu");
    OPS("y = nn.functional.gelu(x) + F.silu(x)", "F.gelu", "F.silu");
    OPS("m = torch.nn.Conv2d(3, 3, 3); n = nn.BatchNorm2d(3)", "nn.Conv2d", "nn.BatchNorm2d");
    OPS("y = torch.linalg.norm(x); z = torch.fft.rfft(x); w = torch.special.erf(x)",
        "torch.linalg.norm", "torch.fft.rfft", "torch.special.erf");
    OPS("y = torch.matmul(a, b)", "torch.matmul");
    OPS("y = torch . relu(x)"); /* not a dotted name we read */
    OPS("y = torch.relu (x)", "torch.relu");
    /* first use order, deduplicated */
    OPS("a = torch.relu(x); b = F.relu(x); c = torch.relu(y); d = x.relu()", "torch.relu", "F.relu",
        "Tensor.relu");
}

TEST(derive_ops_exclusions)
{
    OPS("x = torch.randn(3); y = torch.zeros(3); z = torch.ones_like(x); t = torch.tensor([1])");
    OPS("torch.manual_seed(0)\nwith torch.no_grad():\n    pass\nd = torch.device('cuda')");
    OPS("s = torch.Size([1]); t = torch.float32; u = x.to(torch.float16); v = torch.Tensor(3)");
    OPS("class M(nn.Module):\n    p = nn.Parameter(w)\n    l = nn.ModuleList([nn.Sequential()])");
    OPS("torch.cuda.synchronize(); nn.init.xavier_uniform_(w); torch.nn.utils.clip(x)");
    OPS("y = x.view(2, -1).reshape(4).contiguous().clone().permute(1, 0).size(0)");
    OPS("self.relu(x); self.conv(x); math.exp(1); np.sum(a); print(x)");
    OPS("y = self.weight.sum()", "Tensor.sum");
    OPS("y = f(x).mean(dim=1)[0].softmax(-1)", "Tensor.mean", "Tensor.softmax");
    OPS("x.add_(1); x.relu_(); x.__add__(y)", "Tensor.add", "Tensor.relu");
}

TEST(derive_ops_skips_strings_and_comments)
{
    OPS("# torch.relu(x)\ns = 'torch.tanh(x)'\nd = \"\"\"\nF.gelu(x)\n\"\"\"\ny = torch.exp(x)",
        "torch.exp");
    OPS("s = f'{x}'.join(y)");
    OPS("s = rb'\\'torch.relu(x)'; t = torch.abs(x)", "torch.abs");
}

TEST(derive_ops_cap)
{
    struct buf b;
    buf_init(&b, 1 << 20);
    for (int i = 0; i < 100; i++)
        REQUIRE(buf_addf(&b, "y = torch.op%d(x)\n", i) == 0);
    size_t n;
    char **ops = task_derive_ops(b.data, b.len, &n);
    CHECK_EQ(n, CA_LIMIT_TASK_OPS);
    CHECK_STR(ops[0], "torch.op0");
    CHECK(ops[n] == NULL);
    task_free_ops(ops, n);
    ops = task_derive_ops("", 0, &n);
    CHECK_EQ(n, 0);
    CHECK(ops && ops[0] == NULL);
    task_free_ops(ops, n);
    buf_release(&b);
}

/* ---- trees ---- */

TEST(tree_fixture)
{
    char *dir = fixture("tree");
    struct task_set set;
    struct ca_err err = {0};
    task_set_init(&set);
    REQUIRE(task_load(dir, &set, &err) == 0);
    REQUIRE(set.n == 3);
    CHECK_STR(set.tasks[0].name, "l1_1_Foo");
    CHECK_STR(set.tasks[1].name, "l1_2_Bar");
    CHECK_STR(set.tasks[2].name, "l2_1_Baz");
    CHECK_EQ(set.tasks[0].level, 1);
    CHECK_EQ(set.tasks[1].level, 1);
    CHECK_EQ(set.tasks[2].level, 2);
    CHECK_STR(set.tasks[1].init_signature, "self, dim: int");
    CHECK(has_op(&set.tasks[2], "nn.Conv2d") && has_op(&set.tasks[2], "torch.sigmoid"));
    CHECK_CONTAINS(set.tasks[2].origin, "tree/level2/1_Baz.py");
    CHECK_EQ(set.ndups, 0);
    task_set_release(&set);
    free(dir);
}

/* Issue 18: KernelBench's own names for its files select them. */
TEST(tree_kernelbench_selectors)
{
    char *dir = fixture("tree");
    struct task_set set;
    struct ca_err err = {0};
    const struct task *t;
    task_set_init(&set);
    REQUIRE(task_load(dir, &set, &err) == 0);
    static const char *const bar[] = {"level1/2", "level1/2_Bar", "level1/2_Bar.py",
                                      "KernelBench/level1/2_Bar.py", "tree/level1/2"};
    for (size_t i = 0; i < ARRAY_SIZE(bar); i++) {
        CHECK_EQ(task_set_find(&set, bar[i], &t, &err), 0);
        if (t)
            CHECK_STR(t->name, "l1_2_Bar");
    }
    CHECK_EQ(task_set_find(&set, "level2/1", &t, &err), 0);
    CHECK(t && strcmp(t->name, "l2_1_Baz") == 0);
    CHECK_EQ(task_set_find(&set, "level1/3", &t, &err), CA_ENOTFOUND);
    CHECK_EQ(task_set_find(&set, "level1/2x", &t, &err), CA_ENOTFOUND);
    task_set_release(&set);

    /* TREE/levelN/M as a whole reference, and TREE:levelN/M_Name.py. */
    task_set_init(&set);
    char *ref = xstrfmt("%s/level1/1", dir);
    CHECK_EQ(task_resolve(ref, &set, &t, &err), 0);
    CHECK(t && strcmp(t->name, "l1_1_Foo") == 0);
    free(ref);
    ref = xstrfmt("%s:level2/1_Baz.py", dir);
    CHECK_EQ(task_resolve(ref, &set, &t, &err), 0);
    CHECK(t && strcmp(t->name, "l2_1_Baz") == 0);
    free(ref);
    task_set_release(&set);
    free(dir);
}

static void make_tree_file(const char *rel, const char *code)
{
    char *path = tmp_path(rel);
    write_str(path, code);
    free(path);
}

static void make_dir(const char *rel)
{
    char *path = tmp_path(rel);
    REQUIRE(mkdir(path, 0755) == 0);
    free(path);
}

TEST(tree_sorting)
{
    make_dir("t");
    make_dir("t/level10");
    make_dir("t/level2");
    make_dir("t/level02"); /* not a level folder */
    make_dir("t/levelx");
    make_dir("t/level1");
    make_dir("t/level1/sub.py"); /* a folder, not a task file */
    make_tree_file("t/level1/10_Ten.py", TASK_CODE("return torch.exp(x)"));
    make_tree_file("t/level1/2_Two.py", TASK_CODE("return torch.log(x)"));
    make_tree_file("t/level1/2_Also.py", TASK_CODE("return torch.abs(x)"));
    make_tree_file("t/level1/NoNumber.py", TASK_CODE("return torch.cos(x)"));
    make_tree_file("t/level1/notes.md", "not python");
    make_tree_file("t/level1/.hidden.py", "garbage");
    make_tree_file("t/level2/1_A.py", TASK_CODE("return torch.sin(x)"));
    make_tree_file("t/level10/1_B.py", TASK_CODE("return torch.tan(x)"));
    make_tree_file("t/level02/1_C.py", "garbage");
    make_tree_file("t/levelx/1_D.py", "garbage");
    char *dir = tmp_path("t");
    struct task_set set;
    struct ca_err err = {0};
    task_set_init(&set);
    REQUIRE(task_load_tree(dir, &set, &err) == 0);
    const char *want[] = {"l1_2_Also", "l1_2_Two", "l1_10_Ten", "l1_NoNumber", "l2_1_A", "l10_1_B"};
    REQUIRE(set.n == ARRAY_SIZE(want));
    for (size_t i = 0; i < set.n; i++)
        CHECK_STR(set.tasks[i].name, want[i]);
    CHECK_EQ(set.tasks[5].level, 10);
    task_set_release(&set);
    free(dir);
}

TEST(tree_broken_file_fails_whole_load)
{
    make_dir("t");
    make_dir("t/level1");
    make_dir("t/level2");
    make_tree_file("t/level1/1_Good.py", TASK_CODE("return torch.exp(x)"));
    make_tree_file("t/level2/1_Bad.py", "import torch\n");
    char *dir = tmp_path("t");
    struct task_set set;
    struct ca_err err = {0};
    task_set_init(&set);
    char *good = fixture("good/no_init.py");
    REQUIRE(task_load(good, &set, &err) == 0);
    CHECK_EQ(task_load(dir, &set, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "t/level2/1_Bad.py: no top-level `class Model(nn.Module)`");
    CHECK_EQ(set.n, 1);
    CHECK_STR(set.tasks[0].name, "no_init");
    task_set_release(&set);
    free(good);
    free(dir);
}

TEST(tree_without_levels)
{
    /* No level<N>/ folders: the directory itself is a flat folder of task files. */
    make_dir("t");
    make_dir("t/tasks");
    make_tree_file("t/tasks/1_A.py", TASK_CODE("return x"));
    char *dir = tmp_path("t");
    struct task_set set;
    struct ca_err err = {0};
    task_set_init(&set);
    CHECK_EQ(task_load(dir, &set, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg,
                   "t: no task files: a task directory holds *.py task files, or level<N>/");
    CHECK_EQ(set.n, 0);
    make_dir("t/level1");
    CHECK_EQ(task_load(dir, &set, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "no task files");
    CHECK_EQ(set.n, 0);
    free(dir);
    dir = tmp_path("t/tasks");
    REQUIRE(task_load(dir, &set, &err) == 0);
    REQUIRE(set.n == 1);
    CHECK_EQ(set.tasks[0].level, 0);
    CHECK_STR(set.tasks[0].name, "1_A");
    task_set_release(&set);
    free(dir);
}

/* ---- JSONL ---- */

TEST(jsonl_fixture)
{
    char *path = fixture("ops_small.jsonl");
    struct task_set set;
    struct ca_err err = {0};
    task_set_init(&set);
    REQUIRE(task_load(path, &set, &err) == 0);
    REQUIRE(set.n == 6);
    CHECK_EQ(set.relabelled, 2);
    REQUIRE(set.ndups == 1);

    const struct task *t = &set.tasks[0];
    CHECK_STR(t->name, "conv2d_relu");
    CHECK(strncmp(t->id, "conv2d_relu-", 12) == 0);
    CHECK_STR(t->data_source, "torch#2");
    CHECK(!t->ops_relabelled && !t->ops_unlabelled);
    char *origin = xstrfmt("%s:1", path);
    CHECK_STR(t->origin, origin);
    free(origin);

    origin = xstrfmt("%s:3", path);
    CHECK_STR(set.dups[0].origin, origin);
    CHECK_STR(set.dups[0].kept_id, t->id);
    free(origin);

    t = &set.tasks[1]; /* label says tanh, code does sigmoid */
    CHECK_STR(t->name, "sigmoid_matmul");
    CHECK(t->ops_relabelled);
    REQUIRE(t->nops == 2);
    CHECK_STR(t->ops[0], "torch.sigmoid");
    CHECK_STR(t->ops[1], "torch.matmul");

    t = &set.tasks[2]; /* label given as a JSON string */
    CHECK_STR(t->name, "softmax");
    CHECK(!t->ops_relabelled && !t->ops_unlabelled);
    CHECK_STR(t->data_source, "torch#1");

    t = &set.tasks[3]; /* no label, explicit name, after a blank line */
    CHECK_STR(t->name, "my_gelu");
    CHECK(t->ops_unlabelled && !t->ops_relabelled);
    CHECK(t->data_source == NULL);
    CHECK_CONTAINS(t->origin, "ops_small.jsonl:6");

    t = &set.tasks[4]; /* explicit id; Tensor.sum agrees with torch.sum */
    CHECK_STR(t->id, "custom-rowsum");
    CHECK_STR(t->name, "sum");
    CHECK(!t->ops_relabelled);

    t = &set.tasks[5]; /* Python-list label missing amax */
    CHECK(t->ops_relabelled);
    CHECK(has_op(t, "Tensor.amax"));
    task_set_release(&set);
    free(path);
}

TEST(jsonl_bad_fixtures)
{
    CHECK(check_bad_fixtures("bad_jsonl", ".jsonl") >= 8);
}

static int load_jsonl_text(const char *text, struct task_set *set, struct ca_err *err)
{
    char *path = tmp_path("d.jsonl");
    write_str(path, text);
    int rc = task_load_jsonl(path, set, err);
    free(path);
    return rc;
}

static char *row(const char *code, const char *extra)
{
    json_t *s = json_string(code);
    char *dumped = json_dumps(s, JSON_ENCODE_ANY);
    char *r = xstrfmt("{\"code\": %s%s}\n", dumped, extra);
    free(dumped);
    json_decref(s);
    return r;
}

TEST(jsonl_errors)
{
    struct task_set set;
    struct ca_err err = {0};
    task_set_init(&set);
    char *good = row(TASK_CODE("return torch.exp(x)"), "");
    char *text;

    text = xstrfmt("%s\n  \n%s", good, "{\"code\": 1 2}\n");
    CHECK_EQ(load_jsonl_text(text, &set, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "d.jsonl:4: invalid JSON at column");
    free(text);

    text = xstrfmt("%s{\"code\": \"imp", good);
    CHECK_EQ(load_jsonl_text(text, &set, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "d.jsonl:2: truncated JSON line (file ends mid-record)");
    free(text);

    /* a complete last line without a newline is fine */
    text = xstrdup(good);
    text[strlen(text) - 1] = '\0';
    CHECK_EQ(load_jsonl_text(text, &set, &err), 0);
    CHECK_EQ(set.n, 1);
    task_set_release(&set);
    free(text);

    CHECK_EQ(load_jsonl_text("{\"ops\": []}\n", &set, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "d.jsonl:1: missing required field \"code\"");
    CHECK_EQ(load_jsonl_text("{\"code\": null}\n", &set, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "missing required field \"code\"");

    text = row(TASK_CODE("return x"), ", \"ops\": {\"a\": 1}");
    CHECK_EQ(load_jsonl_text(text, &set, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "d.jsonl:1: field \"ops\" must be a list of operator names");
    free(text);
    text = row(TASK_CODE("return x"), ", \"ops\": \"relu\"");
    CHECK_EQ(load_jsonl_text(text, &set, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "field \"ops\" is a string but not a list");
    free(text);
    text = row(TASK_CODE("return x"), ", \"data_source\": 2");
    CHECK_EQ(load_jsonl_text(text, &set, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "d.jsonl:1: field \"data_source\" must be a string");
    free(text);
    text = row(TASK_CODE("return x"), ", \"level\": -1");
    CHECK_EQ(load_jsonl_text(text, &set, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "field \"level\" must be 0..");
    free(text);
    text = row(TASK_CODE("return x"), ", \"id\": \"a:b\"");
    CHECK_EQ(load_jsonl_text(text, &set, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "field \"id\" must be");
    free(text);

    /* a task_parse failure names the line and the position in the code */
    text = row("import torch\nclass Model(object):\n    pass\n", "");
    CHECK_EQ(load_jsonl_text(text, &set, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "d.jsonl:1 (code line 2): class Model does not derive");
    free(text);
    text = row("x = 1\n", "");
    CHECK_EQ(load_jsonl_text(text, &set, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "d.jsonl:1: no top-level `class Model(nn.Module)`");
    free(text);
    CHECK_EQ(load_jsonl_text("{\"code\": \"x\\u0000\"}\n", &set, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "d.jsonl:1: invalid JSON");
    CHECK_EQ(load_jsonl_text("{\"code\": \"\xff\"}\n", &set, &err), CA_EUTF8);
    CHECK_CONTAINS(err.msg, "d.jsonl:1: invalid UTF-8 at column 11");
    CHECK_EQ(load_jsonl_text("{\"code\": \"x\", \"code\": \"y\"}\n", &set, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "duplicate");

    CHECK_EQ(set.n, 0);
    free(good);
    task_set_release(&set);
}

TEST(jsonl_explicit_id_duplicated)
{
    struct task_set set;
    struct ca_err err = {0};
    task_set_init(&set);
    char *a = row(TASK_CODE("return torch.exp(x)"), ", \"id\": \"x1\"");
    char *b = row(TASK_CODE("return torch.log(x)"), ", \"id\": \"x1\"");
    char *text = xstrfmt("%s%s%s", a, a, b);
    /* the same code twice is a duplicate; other code under the same id is an error */
    CHECK_EQ(load_jsonl_text(text, &set, &err), CA_EDUP);
    CHECK_CONTAINS(err.msg, "d.jsonl:3: task id \"x1\" is already used by");
    CHECK_CONTAINS(err.msg, "d.jsonl:1 for different code");
    CHECK_EQ(set.n, 0);
    free(text);
    /* across sources: the same id for different code cannot join one set */
    char *p1 = tmp_path("one.jsonl"), *p2 = tmp_path("two.jsonl");
    write_str(p1, a);
    write_str(p2, b);
    REQUIRE(task_load(p1, &set, &err) == 0);
    CHECK_EQ(task_load(p2, &set, &err), CA_EDUP);
    CHECK_CONTAINS(err.msg, "two.jsonl:1: task id \"x1\" is already loaded from");
    CHECK_EQ(set.n, 1);
    /* loading the same source again adds nothing and is not an error */
    REQUIRE(task_load(p1, &set, &err) == 0);
    CHECK_EQ(set.n, 1);
    free(p1);
    free(p2);
    free(a);
    free(b);
    task_set_release(&set);
}

TEST(jsonl_blank_lines_and_crlf)
{
    struct task_set set;
    struct ca_err err = {0};
    task_set_init(&set);
    char *a = row(TASK_CODE("return torch.exp(x)"), "");
    char *b = row(TASK_CODE("return torch.log(x)"), "");
    a[strlen(a) - 1] = '\0';
    char *text = xstrfmt("\n\n%s\r\n \t\n\r\n%s\n\n", a, b);
    REQUIRE(load_jsonl_text(text, &set, &err) == 0);
    REQUIRE(set.n == 2);
    CHECK_CONTAINS(set.tasks[0].origin, "d.jsonl:3");
    CHECK_CONTAINS(set.tasks[1].origin, "d.jsonl:6");
    CHECK_STR(set.tasks[0].name, "exp");
    task_set_release(&set);
    free(text);
    free(a);
    free(b);
    /* an empty file holds no tasks */
    REQUIRE(load_jsonl_text("", &set, &err) == 0);
    CHECK_EQ(set.n, 0);
}

TEST(jsonl_line_limit)
{
    char *path = tmp_path("big.jsonl");
    char *first = row(TASK_CODE("return x"), "");
    size_t big = 5 * CA_MIB;
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    fputs(first, f);
    fputs("{\"code\": \"", f);
    for (size_t i = 0; i < big; i++)
        fputc('a', f);
    fputs("\"}\n", f);
    REQUIRE(fclose(f) == 0);
    struct task_set set;
    struct ca_err err = {0};
    task_set_init(&set);
    CHECK_EQ(task_load(path, &set, &err), CA_ETOOBIG);
    CHECK_CONTAINS(err.msg, "big.jsonl:2: line longer than 4194304 bytes (CA_LIMIT_JSONL_LINE)");
    CHECK_EQ(set.n, 0);
    /* a row under the line limit whose code is over the task limit */
    f = fopen(path, "wb");
    REQUIRE(f);
    fputs("{\"code\": \"", f);
    for (size_t i = 0; i < 2 * CA_MIB; i++)
        fputc('a', f);
    fputs("\"}\n", f);
    REQUIRE(fclose(f) == 0);
    CHECK_EQ(task_load(path, &set, &err), CA_ETOOBIG);
    CHECK_CONTAINS(err.msg, "big.jsonl:1: task source is 2097152 bytes, over the limit");
    free(first);
    free(path);
    task_set_release(&set);
}

TEST(jsonl_many_rows_across_read_chunks)
{
    /* ~300 KiB of rows: lines straddle the reader's 64 KiB chunks */
    char *path = tmp_path("many.jsonl");
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    for (int i = 0; i < 600; i++) {
        char *fwd = xstrfmt("return torch.exp(x) * %d  # %0400d", i, 0);
        char *code = xstrfmt(TASK_CODE("%s"), fwd);
        char *r = row(code, i % 7 == 0 ? ", \"ops\": [\"torch.exp\"]" : "");
        fputs(r, f);
        free(r);
        free(code);
        free(fwd);
    }
    REQUIRE(fclose(f) == 0);
    struct task_set set;
    struct ca_err err = {0};
    task_set_init(&set);
    REQUIRE(task_load(path, &set, &err) == 0);
    REQUIRE(set.n == 600);
    CHECK_EQ(set.ndups, 0);
    CHECK_EQ(set.relabelled, 0);
    CHECK_CONTAINS(set.tasks[599].origin, "many.jsonl:600");
    CHECK_CONTAINS(set.tasks[599].code, "torch.exp(x) * 599");
    task_set_release(&set);
    free(path);
}

/* ---- lookup ---- */

static void load_small(struct task_set *set)
{
    char *path = fixture("ops_small.jsonl");
    struct ca_err err = {0};
    task_set_init(set);
    REQUIRE(task_load(path, set, &err) == 0);
    free(path);
}

TEST(find_selectors)
{
    struct task_set set;
    struct ca_err err = {0};
    const struct task *t;
    load_small(&set);
    const struct task *conv = &set.tasks[0];

    CHECK_EQ(task_set_find(&set, conv->id, &t, &err), 0);
    CHECK(t == conv);
    CHECK_EQ(task_set_find(&set, "my_gelu", &t, &err), 0);
    CHECK(t == &set.tasks[3]);
    CHECK_EQ(task_set_find(&set, "custom-rowsum", &t, &err), 0);
    CHECK(t == &set.tasks[4]);
    CHECK_EQ(task_set_find(&set, "conv2d_relu", &t, &err), 0); /* the name */
    CHECK(t == conv);
    char *prefix = xstrndup(conv->id, strlen("conv2d_relu-") + 3);
    CHECK_EQ(task_set_find(&set, prefix, &t, &err), 0);
    CHECK(t == conv);
    free(prefix);
    CHECK_EQ(task_set_find(&set, "c", &t, &err), CA_EAMBIGUOUS);
    CHECK(t == NULL);
    CHECK_CONTAINS(err.msg, "task selector \"c\" matches 2 tasks by id prefix");
    CHECK_CONTAINS(err.msg, conv->id);
    CHECK_CONTAINS(err.msg, "custom-rowsum");
    CHECK_EQ(task_set_find(&set, "conv2d_reluX", &t, &err), CA_ENOTFOUND);
    CHECK_CONTAINS(err.msg, "no task matches \"conv2d_reluX\" among 6 tasks; closest: ");
    CHECK_CONTAINS(err.msg, conv->id);
    CHECK_EQ(task_set_find(&set, "zzz", &t, &err), CA_ENOTFOUND);
    CHECK_CONTAINS(err.msg, "no task matches \"zzz\" among 6 tasks");
    CHECK_EQ(task_set_find(&set, "", &t, &err), CA_ENOTFOUND);
    task_set_release(&set);
}

TEST(find_ambiguous_name)
{
    struct task_set set;
    struct ca_err err = {0};
    const struct task *t;
    task_set_init(&set);
    char *a = row(TASK_CODE("return torch.exp(x)"), "");
    char *b = row(TASK_CODE("return torch.exp(x) * 2"), "");
    char *text = xstrfmt("%s%s", a, b);
    REQUIRE(load_jsonl_text(text, &set, &err) == 0);
    REQUIRE(set.n == 2);
    CHECK_STR(set.tasks[0].name, set.tasks[1].name);
    CHECK_EQ(task_set_find(&set, "exp", &t, &err), CA_EAMBIGUOUS);
    CHECK_CONTAINS(err.msg, "matches 2 tasks by name");
    CHECK_EQ(task_set_find(&set, set.tasks[1].id, &t, &err), 0);
    CHECK(t == &set.tasks[1]);
    free(text);
    free(a);
    free(b);
    task_set_release(&set);
}

TEST(resolve_refs)
{
    struct task_set set;
    struct ca_err err = {0};
    const struct task *t;
    task_set_init(&set);
    char *jsonl = fixture("ops_small.jsonl");
    char *ref = xstrfmt("%s:my_gelu", jsonl);
    REQUIRE(task_resolve(ref, &set, &t, &err) == 0);
    CHECK_STR(t->name, "my_gelu");
    CHECK_EQ(set.n, 6);
    free(ref);
    /* a second reference into the same source reuses what is loaded */
    ref = xstrfmt("%s:custom-rowsum", jsonl);
    REQUIRE(task_resolve(ref, &set, &t, &err) == 0);
    CHECK_STR(t->id, "custom-rowsum");
    CHECK(t >= set.tasks && t < set.tasks + set.n);
    CHECK_EQ(set.n, 6);
    free(ref);
    /* a source of many tasks without a selector */
    CHECK_EQ(task_resolve(jsonl, &set, &t, &err), CA_EAMBIGUOUS);
    CHECK_CONTAINS(err.msg, "holds 6 tasks: pick one with");
    CHECK_CONTAINS(err.msg, "PATH:SELECTOR");
    /* a selector that matches nothing names the source */
    ref = xstrfmt("%s:nope", jsonl);
    CHECK_EQ(task_resolve(ref, &set, &t, &err), CA_ENOTFOUND);
    CHECK_CONTAINS(err.msg, "ops_small.jsonl: no task matches \"nope\"");
    free(ref);
    /* a .py file is one task */
    char *py = fixture("good/no_init.py");
    REQUIRE(task_resolve(py, &set, &t, &err) == 0);
    CHECK_STR(t->name, "no_init");
    CHECK_EQ(set.n, 7);
    free(py);
    /* missing paths */
    CHECK_EQ(task_resolve("/nonexistent/x.py", &set, &t, &err), -ENOENT);
    CHECK_CONTAINS(err.msg, "/nonexistent/x.py: no such file or directory");
    CHECK_EQ(task_resolve("/nonexistent/x.jsonl:abc", &set, &t, &err), -ENOENT);
    CHECK_CONTAINS(err.msg, "/nonexistent/x.jsonl: no such file or directory");
    CHECK_EQ(set.n, 7);
    /* a tree with a selector */
    char *tree = fixture("tree");
    ref = xstrfmt("%s:l2_1_Baz", tree);
    REQUIRE(task_resolve(ref, &set, &t, &err) == 0);
    CHECK_EQ(t->level, 2);
    free(ref);
    free(tree);
    free(jsonl);
    task_set_release(&set);
}

TEST(load_dispatch)
{
    struct task_set set;
    struct ca_err err = {0};
    task_set_init(&set);
    char *pq = tmp_path("data.parquet");
    write_str(pq, "PAR1");
    CHECK_EQ(task_load(pq, &set, &err), CA_EUSAGE);
    CHECK_CONTAINS(err.msg, "cuda-agent data import");
    CHECK_CONTAINS(err.msg, "/data.jsonl`");
    char *txt = tmp_path("x.txt");
    write_str(txt, "hi");
    CHECK_EQ(task_load(txt, &set, &err), CA_EUSAGE);
    CHECK_CONTAINS(err.msg, "unknown task source");
    CHECK_EQ(task_load("/nonexistent.py", &set, &err), -ENOENT);
    free(pq);
    free(txt);
}

/* ---- output ---- */

TEST(to_json_fields)
{
    struct task_set set;
    load_small(&set);
    const struct task *t = &set.tasks[1];
    json_t *j = task_to_json(t, false);
    CHECK_STR(json_string_value(json_object_get(j, "id")), t->id);
    CHECK_STR(json_string_value(json_object_get(j, "name")), "sigmoid_matmul");
    CHECK_EQ(json_integer_value(json_object_get(j, "level")), 0);
    CHECK_EQ(json_array_size(json_object_get(j, "ops")), 2);
    CHECK(json_is_true(json_object_get(j, "ops_relabelled")));
    CHECK_STR(json_string_value(json_object_get(j, "data_source")), "torch#2");
    CHECK_STR(json_string_value(json_object_get(j, "origin")), t->origin);
    CHECK_EQ(strlen(json_string_value(json_object_get(j, "hash"))), 16);
    CHECK_STR(json_string_value(json_object_get(j, "init_signature")), "self");
    CHECK(json_object_get(j, "code") == NULL);
    json_decref(j);
    j = task_to_json(&set.tasks[3], true);
    CHECK(json_is_null(json_object_get(j, "data_source")));
    CHECK_STR(json_string_value(json_object_get(j, "code")), set.tasks[3].code);
    json_decref(j);
    task_set_release(&set);
}

TEST(write_jsonl_round_trip)
{
    struct task_set set, again;
    struct ca_err err = {0};
    load_small(&set);
    char *tree = fixture("tree");
    REQUIRE(task_load(tree, &set, &err) == 0);
    char *out = tmp_path("out.jsonl");
    REQUIRE(task_set_write_jsonl(&set, out, &err) == 0);
    task_set_init(&again);
    REQUIRE(task_load(out, &again, &err) == 0);
    REQUIRE(again.n == set.n);
    CHECK_EQ(again.relabelled, 0); /* labels written are the derived ones */
    CHECK_EQ(again.ndups, 0);
    for (size_t i = 0; i < set.n; i++) {
        CHECK_STR(again.tasks[i].id, set.tasks[i].id);
        CHECK_STR(again.tasks[i].name, set.tasks[i].name);
        CHECK_EQ(again.tasks[i].level, set.tasks[i].level);
        CHECK(again.tasks[i].hash == set.tasks[i].hash);
        CHECK(!again.tasks[i].ops_unlabelled);
        CHECK_EQ(again.tasks[i].nops, set.tasks[i].nops);
    }
    CHECK(again.tasks[3].data_source == NULL);
    CHECK_STR(again.tasks[0].data_source, "torch#2");
    /* the rows are normalised: keys in a fixed order, one per line */
    char *text = read_str(out);
    CHECK(strncmp(text, "{\"id\":", 6) == 0);
    CHECK_CONTAINS(text, "\"level\":2");
    free(text);
    /* a failed write leaves nothing behind */
    char *bad = tmp_path("missing/out.jsonl");
    CHECK(task_set_write_jsonl(&set, bad, &err) < 0);
    CHECK(!fs_exists(bad));
    free(bad);
    free(out);
    free(tree);
    task_set_release(&again);
    task_set_release(&set);
}

/* ---- parquet ---- */

static bool have_pyarrow(void)
{
    const char *argv[] = {"python3", "-c", "import pyarrow.parquet", NULL};
    struct proc_opts o = {.argv = argv, .timeout_ms = 60000};
    struct proc_result r;
    struct ca_err err = {0};
    proc_result_init(&r);
    bool ok = proc_run(&o, &r, &err) == 0 && proc_ok(&r);
    proc_result_release(&r);
    return ok;
}

static const char make_parquet_py[] =
    "import sys, pyarrow as pa, pyarrow.parquet as pq\n"
    "def task(fwd):\n"
    "    return ('import torch\\nimport torch.nn as nn\\n\\nclass Model(nn.Module):\\n'\n"
    "            '    def forward(self, x):\\n        return ' + fwd + '\\n\\n'\n"
    "            'def get_inputs():\\n    return [torch.randn(4)]\\n\\n'\n"
    "            'def get_init_inputs():\\n    return []\\n')\n"
    "a, b, c = task('torch.relu(x)'), task('torch.tanh(x).sum()'), task('torch.exp(x)')\n"
    "mode = sys.argv[2]\n"
    "if mode == 'list':\n"
    "    t = pa.table({'code': [a, b, a, c],\n"
    "                  'ops': [['torch.relu'], ['torch.tanh'], ['torch.relu'], None],\n"
    "                  'data_source': ['torch#1', 'torch#2', 'torch#1', 'torch#1']})\n"
    "elif mode == 'string':\n"
    "    t = pa.table({'code': [a, b], 'ops': ['[\"torch.relu\"]', \"['torch.tanh', 'sum']\"],\n"
    "                  'data_source': ['torch#1', 'torch#2']})\n"
    "elif mode == 'nocode':\n"
    "    t = pa.table({'source': [a]})\n"
    "else:\n"
    "    t = pa.table({'code': [a, 'x = 1\\n']})\n"
    "pq.write_table(t, sys.argv[1], row_group_size=2)\n";

static char *make_parquet(const char *name, const char *mode)
{
    char *path = tmp_path(name);
    const char *argv[] = {"python3", "-", path, mode, NULL};
    struct proc_opts o = {.argv = argv,
                          .stdin_data = make_parquet_py,
                          .stdin_len = sizeof(make_parquet_py) - 1,
                          .timeout_ms = 60000};
    struct proc_result r;
    struct ca_err err = {0};
    proc_result_init(&r);
    REQUIRE(proc_run(&o, &r, &err) == 0);
    if (!proc_ok(&r))
        fprintf(stderr, "%s", r.err.data);
    REQUIRE(proc_ok(&r));
    proc_result_release(&r);
    return path;
}

TEST(parquet_import)
{
    if (!have_pyarrow())
        SKIP("pyarrow", "python3 cannot import pyarrow (pip install pyarrow)");
    char *pq = make_parquet("d.parquet", "list");
    char *out = tmp_path("d.jsonl");
    struct task_set set;
    struct ca_err err = {0};
    task_set_init(&set);
    REQUIRE(task_import_parquet(pq, out, &set, &err) == 0);
    REQUIRE(set.n == 3);
    CHECK_EQ(set.ndups, 1);
    CHECK_CONTAINS(set.dups[0].origin, "d.parquet:row 3");
    CHECK_STR(set.dups[0].kept_id, set.tasks[0].id);
    CHECK_EQ(set.relabelled, 1); /* row 2: label tanh, code tanh + sum */
    CHECK(set.tasks[1].ops_relabelled);
    CHECK(set.tasks[2].ops_unlabelled);
    CHECK_STR(set.tasks[0].name, "relu");
    CHECK_STR(set.tasks[1].data_source, "torch#2");
    /* the output is the normalised JSONL and loads to the same ids */
    struct task_set again;
    task_set_init(&again);
    REQUIRE(task_load(out, &again, &err) == 0);
    REQUIRE(again.n == 3);
    for (size_t i = 0; i < 3; i++)
        CHECK_STR(again.tasks[i].id, set.tasks[i].id);
    task_set_release(&again);
    task_set_release(&set);
    /* no temporary files are left beside the output */
    DIR *d = opendir(test_tmpdir());
    REQUIRE(d);
    struct dirent *de;
    while ((de = readdir(d)))
        CHECK(!strstr(de->d_name, ".tmp-"));
    closedir(d);
    free(pq);
    free(out);

    /* labels stored as strings (JSON or Python lists) */
    pq = make_parquet("s.parquet", "string");
    out = tmp_path("s.jsonl");
    task_set_init(&set);
    REQUIRE(task_import_parquet(pq, out, &set, &err) == 0);
    REQUIRE(set.n == 2);
    CHECK_EQ(set.relabelled, 0);
    task_set_release(&set);
    free(pq);
    free(out);
}

TEST(parquet_import_failures)
{
    if (!have_pyarrow())
        SKIP("pyarrow", "python3 cannot import pyarrow (pip install pyarrow)");
    struct task_set set;
    struct ca_err err = {0};
    task_set_init(&set);
    char *pq = make_parquet("n.parquet", "nocode");
    char *out = tmp_path("n.jsonl");
    CHECK_EQ(task_import_parquet(pq, out, &set, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "n.parquet: no column \"code\"");
    CHECK(!fs_exists(out));
    free(pq);
    free(out);

    pq = make_parquet("b.parquet", "badtask");
    out = tmp_path("b.jsonl");
    CHECK_EQ(task_import_parquet(pq, out, &set, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "b.parquet:row 2: no top-level `class Model(nn.Module)`");
    CHECK(!fs_exists(out));
    CHECK_EQ(set.n, 0);
    free(pq);
    free(out);

    pq = tmp_path("junk.parquet");
    write_str(pq, "not parquet at all");
    out = tmp_path("junk.jsonl");
    CHECK_EQ(task_import_parquet(pq, out, &set, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "junk.parquet: not a readable parquet file");
    CHECK(!fs_exists(out));
    free(pq);
    free(out);

    DIR *d = opendir(test_tmpdir());
    REQUIRE(d);
    struct dirent *de;
    while ((de = readdir(d)))
        CHECK(!strstr(de->d_name, ".tmp-"));
    closedir(d);
    task_set_release(&set);
}

TEST(parquet_without_python)
{
    /* an empty PATH: python3 cannot be found */
    REQUIRE(setenv("PATH", test_tmpdir(), 1) == 0);
    char *pq = tmp_path("d.parquet");
    write_str(pq, "PAR1");
    char *out = tmp_path("d.jsonl");
    struct task_set set;
    struct ca_err err = {0};
    task_set_init(&set);
    CHECK_EQ(task_import_parquet(pq, out, &set, &err), CA_EUNAVAIL);
    CHECK_CONTAINS(err.msg, "python3 is not in PATH");
    CHECK(!fs_exists(out));
    free(pq);
    free(out);
}
