/*
 * synth_llm.c - the LLM-assisted mode of `synth run`: the composer's draft of a seed (its
 * operators, shapes and sizes) goes to an OpenAI-compatible model (src/llm) with a request to
 * write one realistic fused task from it; the model's file then goes through the same filters
 * as a composed one. The model's code is only data here: the worker runs it under the same
 * per-task timeout and process isolation as our own compositions, and its operator label is
 * derived from the code (task_derive_ops), never taken from the model.
 */
#include "synth/synth_internal.h"

#include <stdlib.h>
#include <string.h>

#include "core/sv.h"
#include "core/util.h"
#include "llm/llm.h"
#include "task/task.h"
#include "core/banned.h"

static const char SYSTEM_PROMPT[] =
    "You write PyTorch reference programs for a CUDA kernel benchmark, in the KernelBench "
    "format: imports, `class Model(nn.Module)` with `__init__` and `forward`, module-level size "
    "constants, `get_inputs()` returning a list of random input tensors (torch.randn) and "
    "`get_init_inputs()` returning the constructor arguments. Use only torch. No randomness in "
    "forward (no dropout, no torch.rand*). Reply with the whole file in one ```python block and "
    "nothing else.";

char *synth__extract_code(const char *text)
{
    const char *open = strstr(text, "```python\n");
    size_t skip = 10;
    if (!open) {
        open = strstr(text, "```\n");
        skip = 4;
    }
    if (!open)
        return xstrdup(text);
    const char *start = open + skip, *end = strstr(start, "```");
    return end ? xstrndup(start, (size_t)(end - start)) : xstrdup(start);
}

json_t *synth__ops_of(const char *code)
{
    size_t n = 0;
    char **ops = task_derive_ops(code, strlen(code), &n);
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_string(ops[i]));
    task_free_ops(ops, n);
    return a;
}

int synth__llm_rewrite(struct llm_client *c, const char *draft, const json_t *ops, int64_t seq,
                       char **code, struct ca_err *err)
{
    *code = NULL;
    char *names = json_dumps(ops, JSON_COMPACT | JSON_ENCODE_ANY);
    char *user = xstrfmt("Operators, in this order: %s. A mechanical composition of them, with "
                         "shapes and sizes that fit a 1-100 ms eager runtime on the target GPU:\n"
                         "```python\n%s```\nWrite one new task that fuses these operators the "
                         "way a real model would (you may add elementwise glue such as a bias, a "
                         "scale or a residual). Keep the sizes' order of magnitude.",
                         names, draft);
    free(names);
    json_t *msgs = json_pack("[{s:s, s:s}, {s:s, s:s}]", "role", "system", "content", SYSTEM_PROMPT,
                             "role", "user", "content", user);
    free(user);
    char *text = json_dumps(msgs, JSON_COMPACT);
    json_decref(msgs);
    struct llm_reply reply;
    llm_reply_init(&reply);
    int rc = llm_chat(c, sv_from(text, strlen(text)), sv_from("", 0), seq, &reply, err);
    free(text);
    if (rc == 0) {
        if (!reply.content || !*reply.content)
            rc = err_setf(err, CA_EPARSE, "the model replied with no text");
        else
            *code = synth__extract_code(reply.content);
    }
    llm_reply_release(&reply);
    return rc;
}
