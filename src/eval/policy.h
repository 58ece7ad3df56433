/*
 * policy.h - the evaluator's static policy (DESIGN §4 step 2): what the agent's files may contain
 * before anything is compiled or run, and what a built object may import.
 *
 * Three checks, each adding violations to a caller-owned struct policy_report:
 *   - policy_check_source(): one kernels/NAME.cu or kernels/NAME_binding.cpp, read by a C++
 *     tokenizer (comments and literals never count; line continuations, raw strings and digraphs
 *     are handled as the compiler handles them) against rules on identifiers, qualified names,
 *     member calls, #include and #define lines and kernel launches;
 *   - policy_check_model_new(): model_new.py, parsed as a syntax tree by the embedded Python
 *     package harness/policy/ (python3, standard library only) against an allow-list;
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

/*
 * The rule sets a report is judged by (named in every report):
 *   - cuda-agent (default): SKILL.md's rules, for RL rewards: kernels and bindings only check,
 *     allocate and launch; model_new.py calls only the extension;
 *   - kernelbench: what KernelBench accepts: torch computation in bindings and in
 *     ModelNew.forward, other libraries, tensor outputs from torch::zeros; every defence that
 *     does not contradict it stays on (processes, files, network, threads, run-time loading,
 *     environment, device settings, memory outside the allocator, the syntax rules).
 * Under both, which stream a kernel runs on is not a violation: the harness orders and times
 * the candidate's work on every stream.
 */
enum policy_rules { POLICY_RULES_CUDA_AGENT = 0, POLICY_RULES_KERNELBENCH };

/* "cuda-agent" / "kernelbench". */
const char *policy_rules_name(enum policy_rules rules);
/* 0 and *out set when s names a rule set (NULL: the default); CA_EUSAGE otherwise. */
int policy_rules_parse(const char *s, enum policy_rules *out) WARN_UNUSED_RESULT;

/*
 * What a finding rests on, which decides whether it fails the candidate or is only a note.
 * Meaning decides, names only advise: a name read in a source (`fork`, `gelu(x)`, `.relu`) may
 * be a local function, variable or field, so it is a note; the built object's undefined symbols
 * (a real call leaves an import) and the evaluator's own findings decide. Syntax that no name
 * collision can produce (the lexer, #include paths, macros that hide names, host inline
 * assembly) decides too.
 */
enum policy_basis {
    POLICY_BASIS_FINDING = 0, /* syntax, or the evaluator's own finding */
    POLICY_BASIS_SOURCE_NAME, /* a name or pattern read in a C++/CUDA source */
    POLICY_BASIS_SYMBOL,      /* an undefined symbol of a built object */
    POLICY_BASIS_MODEL_NEW,   /* model_new.py's syntax tree */
};

struct policy_violation {
    char *file;    /* as the caller named it: "kernels/add.cu", "model_new.py", "ext.so" */
    unsigned line; /* 1-based; 0 when the violation has no line (a symbol of a built object) */
    char *rule;    /* stable id such as "process" or "torch-compute" */
    char *message; /* for the agent: what, which rule, what to do instead */
    bool advisory; /* a note: reported, never fails the candidate */
    /* Where the line was written when `file` was generated from another (a KernelBench file's
     * load_inline sources): that file and line, else NULL and 0. */
    char *origin_file;
    unsigned origin_line;
};

struct policy_report {
    struct policy_violation *items; /* violations and notes, in the order found */
    size_t n, alloc;
    size_t notes;            /* how many of items are notes */
    size_t dropped;          /* violations past POLICY_MAX_VIOLATIONS: counted, not kept */
    size_t notes_dropped;    /* the same for notes */
    enum policy_rules rules; /* set by the caller after init (default cuda-agent) */
    enum policy_basis basis; /* what the check running now reads; the checks set it */
};

void policy_report_init(struct policy_report *rep);
void policy_report_release(struct policy_report *rep);
/* True when the report holds no violation (notes do not count). */
bool policy_report_ok(const struct policy_report *rep);
/*
 * Add a finding (the checks use it; so may the evaluator for its own findings, with the basis
 * left at POLICY_BASIS_FINDING). Whether it is a violation or a note follows from rep->basis,
 * the rule and rep->rules (policy.c's decision table). A finding equal to the last one added
 * (file, line, rule, message) is dropped as a repeat. Messages are cut to a few hundred bytes.
 */
void policy_report_addf(struct policy_report *rep, const char *file, unsigned line,
                        const char *rule, const char *fmt, ...) CA_PRINTF(5, 6);

/* As policy_report_addf(), but a note whatever the table says (model_new.py's checker marks
 * the findings that only advise under the report's rule set). */
void policy_report_add_note(struct policy_report *rep, const char *file, unsigned line,
                            const char *rule, const char *message);

/*
 * Give each finding with a line the place that line was written, where the checked files were
 * generated from `origin_file` (a KernelBench file): origin(ctx, file, line) returns the line of
 * origin_file, or 0 for a line written by the generator (the finding then keeps its own place).
 */
void policy_report_set_origins(struct policy_report *rep, const char *origin_file,
                               unsigned (*origin)(void *ctx, const char *file, unsigned line),
                               void *ctx);

/* {"ok": bool, "rules": "cuda-agent"|"kernelbench", "violations": [{"file","line","rule",
 * "message"[, "origin": {"file","line"}]}...], "notes": [...], "dropped": N,
 * "notes_dropped": N}; new ref. */
json_t *policy_report_to_json(const struct policy_report *rep);
/*
 * Append the report for the agent: one "FILE:LINE: RULE: MESSAGE" line per violation ("FILE:
 * RULE: ..." without a line; "ORIGIN:LINE (FILE:LINE): ..." with an origin), at most
 * POLICY_FORMAT_LINES of them, then "... and N more violations" when there are more. Nothing is
 * appended for an empty report.
 */
int policy_report_format(const struct policy_report *rep, struct buf *out) WARN_UNUSED_RESULT;
/*
 * Append the notes whose rule is `rule` (every note when NULL), one "FILE:LINE: note: RULE:
 * MESSAGE" line each, at most POLICY_FORMAT_LINES: where in the sources a violation found in a
 * built object may come from.
 */
int policy_report_format_notes(const struct policy_report *rep, const char *rule,
                               struct buf *out) WARN_UNUSED_RESULT;
/* True when the report holds a violation (not a note) of rule `rule`. */
bool policy_report_has(const struct policy_report *rep, const char *rule);

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
 * Check model_new.py at `path` with the embedded policy (harness/policy/, loaded from memory by
 * harness/policy_model_new.py), run as `python3 -I -S -B - PATH` (20 s timeout, output capped).
 * Violations are reported under the file's base name. A syntax error is a "syntax" violation,
 * not an error. CA_EUNAVAIL when python3 is not in PATH; CA_ECHILD/CA_ETIMEOUT/CA_EPARSE when
 * the policy fails (CA_ECHILD, naming the source, when one of its files does not load) or
 * answers something other than its JSON.
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
/* As policy_check_so(), with the findings reported under `report_as` (e.g. the source an object
 * was built from) instead of the file's base name; NULL: the base name. */
int policy_check_object(const char *path, const char *report_as, struct policy_report *rep,
                        struct ca_err *err) WARN_UNUSED_RESULT;

#endif
