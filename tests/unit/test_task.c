/*
 * test_task.c - the task module: parsing KernelBench-format files (layout, docstrings,
 * encoding, limits, __init__ signature), operator derivation and label comparison, the tree
 * loader with its error messages (also driven by the fixture files under
 * tests/it/data/tasks/), lookup by selector and reference resolution. The JSONL and parquet
 * loaders and the JSON output are in test_task_data.c.
 */
#include "task_fixture.h"

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

/* ---- lookup ---- */

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
