/*
 * libFuzzer target: arbitrary JSON as the arguments of any tool call. The
 * input is "NAME\nJSON": the first line names the tool (any text: unknown
 * names are exercised too), the rest is parsed as JSON and passed as args.
 * Calls run against one scratch workspace made in LLVMFuzzerInitialize
 * (under $TMPDIR, removed at exit, rebuilt every RESET_EVERY inputs so that
 * written files cannot pile up). The tools confine themselves to it; the
 * target checks that no call fails internally, that the text stays within
 * the output limit, and that every result serialises as JSON.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fs.h"
#include "core/json.h"
#include "core/limits.h"
#include "task/task.h"
#include "tools/tools.h"
#include "workspace/workspace.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define RESET_EVERY 500

static const char task_code[] = "import torch\nimport torch.nn as nn\n\n\n"
                                "class Model(nn.Module):\n"
                                "    def __init__(self, dim):\n"
                                "        super().__init__()\n"
                                "        self.dim = dim\n\n"
                                "    def forward(self, x):\n"
                                "        return torch.softmax(x, dim=self.dim)\n\n\n"
                                "def get_inputs():\n    return [torch.randn(8, 16)]\n\n\n"
                                "def get_init_inputs():\n    return [1]\n";

static char scratch[4096], ws[4200];
static struct task task;
static struct tool_ctx *ctx;
static unsigned long runs;

static void cleanup(void)
{
    tool_ctx_free(ctx);
    ctx = NULL;
    if (scratch[0])
        (void)fs_remove_tree(scratch, NULL);
}

static void make_workspace(void)
{
    struct ca_err err;
    tool_ctx_free(ctx);
    ctx = NULL;
    if (workspace_create(&task, ws, WORKSPACE_FORCE, &err) != 0 ||
        tool_ctx_new(ws, &ctx, &err) != 0) {
        fprintf(stderr, "fuzz_tool_args: %s\n", err.msg);
        abort();
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    struct ca_err err;
    const char *tmp = getenv("TMPDIR");
    snprintf(scratch, sizeof(scratch), "%s/ca-fuzz-tools-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(scratch)) {
        perror("fuzz_tool_args: mkdtemp");
        abort();
    }
    atexit(cleanup);
    snprintf(ws, sizeof(ws), "%s/ws", scratch);
    if (task_parse("fuzz_task.py", task_code, sizeof(task_code) - 1, &task, &err) != 0) {
        fprintf(stderr, "fuzz_tool_args: %s\n", err.msg);
        abort();
    }
    make_workspace();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (++runs % RESET_EVERY == 0)
        make_workspace();
    const char *text = (const char *)data;
    const char *nl = memchr(text, '\n', size);
    if (!nl)
        return 0;
    char name[64];
    size_t nlen = (size_t)(nl - text) < sizeof(name) - 1 ? (size_t)(nl - text) : sizeof(name) - 1;
    memcpy(name, text, nlen);
    name[nlen] = '\0';

    json_t *args = NULL;
    struct ca_err err;
    if (jsonx_parse(sv_from(nl + 1, size - (size_t)(nl + 1 - text)), 1 << 20, "fuzz", &args,
                    &err) != 0)
        return 0;
    struct tool_result res;
    tool_result_init(&res);
    if (tool_call(ctx, name, args, &res) != 0)
        __builtin_trap();
    if (res.text.len > CA_LIMIT_TOOL_OUTPUT)
        __builtin_trap();
    json_t *out = tool_result_to_json(&res);
    char *dump = json_dumps(out, JSON_COMPACT);
    if (!dump)
        __builtin_trap();
    free(dump);
    json_decref(out);
    tool_result_release(&res);
    json_decref(args);
    return 0;
}
