/* libFuzzer target: the C++/CUDA source policy on arbitrary bytes, in its three dialects (the
 * first byte picks one: kernel file, binding, load_inline cuda source), with the report's JSON
 * and text forms built from whatever it found. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/buf.h"
#include "eval/policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const char *name = data[0] & 1 ? "kernels/fuzz_binding.cpp" : "kernels/fuzz.cu";
    bool inline_cuda = (data[0] & 3) == 2;
    struct policy_report rep;
    policy_report_init(&rep);
    struct ca_err err;
    const char *code = (const char *)data + 1;
    int rc = inline_cuda ? policy_check_inline_cuda(name, code, size - 1, &rep, &err)
                         : policy_check_source(name, code, size - 1, &rep, &err);
    if (rc == 0) {
        for (size_t i = 0; i < rep.n; i++)
            if (!policy_rule_summary(rep.items[i].rule))
                abort();
        json_t *j = policy_report_to_json(&rep);
        json_decref(j);
        struct buf out;
        buf_init(&out, BUF_MAX_INTERNAL);
        if (policy_report_format(&rep, &out) != 0)
            abort();
        buf_release(&out);
    }
    policy_report_release(&rep);
    return 0;
}
