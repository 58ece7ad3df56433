/* libFuzzer target: the task parser and operator derivation on arbitrary bytes. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "task/task.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ca_err err;
    struct task t;
    if (task_parse("fuzz.py", (const char *)data, size, &t, &err) == 0)
        task_release(&t);
    size_t n;
    char **ops = task_derive_ops((const char *)data, size, &n);
    task_free_ops(ops, n);
    return 0;
}
