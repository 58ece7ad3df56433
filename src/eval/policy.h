/*
 * policy.h - the evaluator's static policy (DESIGN §4 step 2): what the agent's files may contain
 * before anything is compiled or run, and what a built object may import.
 *
 * Three checks, each adding violations to a caller-owned struct policy_report:
 *   - policy_check_source(): one kernels/NAME.cu or kernels/NAME_binding.cpp, read by a C++
 *     tokenizer (comments and literals never count; line continuations, raw strings and digraphs
 *     are handled as the compiler handles them) against rules on identifiers, qualified names,
 *     member calls, #include and #define lines and kernel launches;
 *   - policy_check_model_new(): model_new.py, parsed as a syntax tree by the embedded script
 *     harness/policy_model_new.py (python3, standard library only) against an allow-list;
 *   - policy_check_so(): the undefined symbols of a built shared object (or of one relocatable
 *     object), read with libelf, against the same families of rules.
 * Every violation has a file, a line (0 when there is none, as for a symbol), a stable rule id
 * (docs/internals/policy.md lists them) and a message for the agent that says what was found,
 * which rule it breaks and what to do instead.
 *
 * A check returns 0 when it ran (look at the report for violations), or a negative CA_E* code
 * when it could not judge the input (python3 missing: CA_EUNAVAIL; unreadable file; not an ELF
 * object). Static checks are one layer: dynamic behaviour is caught by the evaluator's runtime
 * defences, and the docs say which rule relies on which.
 *
 * Reports are not thread-safe; separate reports may be filled from separate threads.
 */
#ifndef CA_EVAL_POLICY_H
#define CA_EVAL_POLICY_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "core/buf.h"
#include "core/err.h"
#include "core/limits.h"

/* Violations kept in one report; later ones are counted in `dropped`. */
#define POLICY_MAX_VIOLATIONS 200
/* Largest source file (one .cu or _binding.cpp, or model_new.py) the checks read. */
#define POLICY_MAX_SOURCE_BYTES (4 * CA_MIB)
/* Lines policy_report_format() prints before "... and N more". */
#define POLICY_FORMAT_LINES 20

struct policy_violation {
    char *file;    /* as the caller named it: "kernels/add.cu", "model_new.py", "ext.so" */
    unsigned line; /* 1-based; 0 when the violation has no line (a symbol of a built object) */
    char *rule;    /* stable id such as "process" or "torch-compute" */
    char *message; /* for the agent: what, which rule, what to do instead */
};

struct policy_report {
    struct policy_violation *items;
    size_t n, alloc;
    size_t dropped; /* violations past POLICY_MAX_VIOLATIONS: counted, not kept */
};

void policy_report_init(struct policy_report *rep);
void policy_report_release(struct policy_report *rep);
/* True when the report holds no violation. */
bool policy_report_ok(const struct policy_report *rep);
/*
 * Add a violation (the checks use it; so may the evaluator for its own findings). A violation
 * equal to the last one added (file, line, rule, message) is dropped as a repeat. Messages are
 * cut to a few hundred bytes.
 */
void policy_report_addf(struct policy_report *rep, const char *file, unsigned line,
                        const char *rule, const char *fmt, ...) CA_PRINTF(5, 6);

/* {"ok": bool, "violations": [{"file","line","rule","message"}...], "dropped": N}; new ref. */
json_t *policy_report_to_json(const struct policy_report *rep);
/*
 * Append the report for the agent: one "FILE:LINE: RULE: MESSAGE" line per violation ("FILE:
 * RULE: ..." without a line), at most POLICY_FORMAT_LINES of them, then "... and N more
 * violations" when there are more. Nothing is appended for an empty report.
 */
int policy_report_format(const struct policy_report *rep, struct buf *out) WARN_UNUSED_RESULT;

/* A one-line summary of rule `id`, or NULL when no check reports that id. */
const char *policy_rule_summary(const char *id);

/*
 * Check one C++/CUDA source. `name` is how the file is reported (e.g. "kernels/add.cu"); its
 * ending picks the dialect: ".cu" is a kernel file, "_binding.cpp" a binding; any other name is
 * reported as a "file-type" violation and nothing else is checked. code[0..len) need not be
 * NUL-terminated. Returns 0, or CA_ETOOBIG past POLICY_MAX_SOURCE_BYTES (also reported as a
 * "file-size" violation, so the agent sees it).
 */
int policy_check_source(const char *name, const char *code, size_t len, struct policy_report *rep,
                        struct ca_err *err) WARN_UNUSED_RESULT;

/*
 * Check the cuda_sources of a KernelBench file's load_inline call, written out as a .cu file
 * (`name` must end in .cu). Such a file holds both the kernels and the torch functions
 * load_inline exposes, so it meets the kernel-file rules for device code, launches and inline
 * assembly, and the binding rules for torch (the same allow-list of torch names, headers and
 * tensor methods; <torch/types.h>, which load_inline includes first, is allowed too). Only the
 * evaluator's KernelBench mode calls it: a workspace's .cu files stay plain CUDA.
 */
int policy_check_inline_cuda(const char *name, const char *code, size_t len,
                             struct policy_report *rep, struct ca_err *err) WARN_UNUSED_RESULT;

/*
 * Check model_new.py at `path` with the embedded harness/policy_model_new.py, run as
 * `python3 -I -S -B - PATH` (20 s timeout, output capped). Violations are reported under the
 * file's base name. A syntax error is a "syntax" violation, not an error. CA_EUNAVAIL when
 * python3 is not in PATH; CA_ECHILD/CA_ETIMEOUT/CA_EPARSE when the script fails or answers
 * something other than its JSON.
 */
int policy_check_model_new(const char *path, struct policy_report *rep,
                           struct ca_err *err) WARN_UNUSED_RESULT;

/*
 * Check the undefined symbols of an ELF object: the dynamic symbol table of a shared object
 * (ET_DYN: the linked extension, binding.cpp included), or the symbol table of a relocatable
 * object (ET_REL: one translation unit of the agent, where the Python C API rule is stricter
 * because only the trusted binding.cpp imports modules). Violations are reported under the
 * file's base name with line 0. CA_EPARSE when the file is not an ELF object of those types.
 */
int policy_check_so(const char *so_path, struct policy_report *rep,
                    struct ca_err *err) WARN_UNUSED_RESULT;

#endif
