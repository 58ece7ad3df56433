/*
 * eval_internal.h - shared between the files of the evaluation pipeline (eval.c: the stages;
 * eval_snapshot.c: taking files; eval_kernelbench.c: KernelBench single files). Also used by the
 * unit tests. Not part of the module's interface.
 */
#ifndef CA_EVAL_INTERNAL_H
#define CA_EVAL_INTERNAL_H

#include <jansson.h>

#include "core/buf.h"
#include "core/err.h"
#include "core/sv.h"

/*
 * Turn the KernelBench file `file` into workspace-shaped sources under out_dir (an existing,
 * empty directory): kernels/kb_NAME.cu and kernels/kb_NAME_binding.cpp for each load_inline
 * call, and model_new.py, by running the embedded harness/kernelbench_extract.py (python3,
 * standard library only; the file is parsed, never run).
 *
 * Returns 0 with *summary a new object ({"modules": [...], "functions": [...], "lines": {...}})
 * when the file was
 * extracted; 0 with *summary NULL and *problem a new object {"line": N, "message": "..."} when
 * the file cannot be (no ModelNew, no load_inline, sources that are not static, bad syntax): the
 * candidate's result, not an error. A negative code when the extraction could not be judged:
 * -ENOENT for a missing file, CA_EUNAVAIL without python3, CA_ECHILD/CA_ETIMEOUT/CA_EPARSE when
 * the script fails or answers something unexpected.
 */
int eval__kernelbench_extract(const char *file, const char *out_dir, json_t **summary,
                              json_t **problem, struct ca_err *err) WARN_UNUSED_RESULT;

/*
 * The line of the KernelBench file that line `line` of the generated `file` was written on, by
 * the extraction's summary["lines"] (`lines`, a json_t *): model_new.py keeps the file's lines;
 * 0 for a line the extraction wrote itself. A policy_report_set_origins() callback.
 */
unsigned eval__kernelbench_origin(void *lines, const char *file, unsigned line);

/*
 * Append `log` (compiler diagnostics) to out with each line that starts "kernels/NAME:LINE:"
 * placed in the KernelBench file too: "FILE:N (kernels/NAME:LINE): ...", where `lines` (the
 * extraction's map) places that line. 0, or CA_ETOOBIG past out's bound.
 */
int eval__kernelbench_place_log(struct sv log, const char *file, json_t *lines,
                                struct buf *out) WARN_UNUSED_RESULT;

#endif
