/*
 * cmd_data.c - `cuda-agent data list|show|import`: look at and convert task
 * sources. Every source kind goes through src/task, so the same validation,
 * ids, operator labels and duplicate handling apply everywhere.
 */
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sv.h"
#include "task/task.h"
#include "core/banned.h"

static void print_summary(FILE *out, const struct task_set *set)
{
    fprintf(out, "%zu task%s", set->n, set->n == 1 ? "" : "s");
    if (set->ndups)
        fprintf(out, ", %zu exact duplicate%s dropped", set->ndups, set->ndups == 1 ? "" : "s");
    if (set->relabelled)
        fprintf(out, ", %zu ops label%s corrected from the code", set->relabelled,
                set->relabelled == 1 ? "" : "s");
    fputc('\n', out);
}

static json_t *set_to_json(const struct task_set *set)
{
    json_t *tasks = json_array(), *dups = json_array();
    for (size_t i = 0; i < set->n; i++)
        json_array_append_new(tasks, task_to_json(&set->tasks[i], false));
    for (size_t i = 0; i < set->ndups; i++)
        json_array_append_new(dups, json_pack("{s:s, s:s}", "origin", set->dups[i].origin,
                                              "duplicate_of", set->dups[i].kept_id));
    return json_pack("{s:o, s:o, s:I}", "tasks", tasks, "duplicates", dups, "relabelled",
                     (json_int_t)set->relabelled);
}

static int data_list(int argc, char **argv)
{
    bool as_json = false;
    const struct cli_opt opts[] = {
        {"json", 0, CLI_OPT_FLAG, &as_json, NULL, "print tasks, duplicates and counts as JSON"},
        {0},
    };
    const struct cli_spec spec = {
        .usage = "cuda-agent data list [--json] SOURCE...",
        .summary = "Validate task sources and list their tasks: id, level, operators.",
        .description =
            "SOURCE is a KernelBench-format .py file, a KernelBench-style tree (a folder\n"
            "with level1/, level2/, ... of N_Name.py files) or an Ops-6K-style .jsonl file.\n"
            "Exact duplicates are dropped and reported; operator labels are derived from\n"
            "the code. Any invalid task fails the command and names its file and line.",
        .opts = opts,
        .min_args = 1,
        .max_args = -1,
    };
    char **args;
    int nargs, rc;
    if (!cli_parse_cmd(&spec, argc, argv, &args, &nargs, &rc))
        return rc;
    struct task_set set;
    task_set_init(&set);
    struct ca_err err = {0};
    for (int i = 0; i < nargs && rc == 0; i++)
        rc = task_load(args[i], &set, &err);
    if (rc) {
        rc = cli_fail(&err);
        goto out;
    }
    if (as_json) {
        json_t *v = set_to_json(&set);
        cli_print_json(v);
        json_decref(v);
    } else {
        for (size_t i = 0; i < set.n; i++) {
            const struct task *t = &set.tasks[i];
            printf("%-40s L%d ", t->id, t->level);
            for (size_t k = 0; k < t->nops; k++)
                printf("%s%s", k ? "," : "", t->ops[k]);
            printf("%s\n", t->ops_relabelled ? "  (label corrected)" : "");
        }
        for (size_t i = 0; i < set.ndups; i++)
            printf("duplicate: %s is the same code as %s (dropped)\n", set.dups[i].origin,
                   set.dups[i].kept_id);
        print_summary(stdout, &set);
    }
    rc = CLI_OK;
out:
    task_set_release(&set);
    free(args);
    return rc;
}

static int data_show(int argc, char **argv)
{
    bool as_json = false;
    const struct cli_opt opts[] = {
        {"json", 0, CLI_OPT_FLAG, &as_json, NULL, "print the task (with its code) as JSON"},
        {0},
    };
    const struct cli_spec spec = {
        .usage = "cuda-agent data show [--json] TASK",
        .summary = "Show one task's metadata and code. TASK is FILE.py or SOURCE:SELECTOR.",
        .opts = opts,
        .min_args = 1,
        .max_args = 1,
    };
    char **args;
    int nargs, rc;
    if (!cli_parse_cmd(&spec, argc, argv, &args, &nargs, &rc))
        return rc;
    struct task_set set;
    task_set_init(&set);
    struct ca_err err = {0};
    const struct task *t;
    rc = task_resolve(args[0], &set, &t, &err);
    if (rc) {
        rc = cli_fail(&err);
        goto out;
    }
    if (as_json) {
        json_t *v = task_to_json(t, true);
        cli_print_json(v);
        json_decref(v);
    } else {
        printf("id:       %s\nname:     %s\nlevel:    %d\norigin:   %s\nsignature: "
               "Model(%s)\nops:     ",
               t->id, t->name, t->level, t->origin, t->init_signature);
        for (size_t k = 0; k < t->nops; k++)
            printf(" %s", t->ops[k]);
        printf("\n\n%s%s", t->code, t->code_len && t->code[t->code_len - 1] == '\n' ? "" : "\n");
    }
    rc = CLI_OK;
out:
    task_set_release(&set);
    free(args);
    return rc;
}

static int data_import(int argc, char **argv)
{
    const char *out_path = NULL;
    bool as_json = false;
    const struct cli_opt opts[] = {
        {"output", 'o', CLI_OPT_STRING, &out_path, "OUT.jsonl",
         "where to write the normalised JSONL (required)"},
        {"json", 0, CLI_OPT_FLAG, &as_json, NULL, "print the summary as JSON"},
        {0},
    };
    const struct cli_spec spec = {
        .usage = "cuda-agent data import -o OUT.jsonl SOURCE...",
        .summary = "Convert task sources into one normalised JSONL dataset.",
        .description =
            "SOURCE may be the published parquet file (columns code, ops, data_source;\n"
            "read with python3 and pyarrow), a .jsonl, a .py file or a KernelBench-style\n"
            "tree. Rows are validated, exact duplicates dropped, operator labels derived\n"
            "from the code, and ids assigned. OUT is written atomically: on any error\n"
            "nothing is left behind.",
        .opts = opts,
        .min_args = 1,
        .max_args = -1,
    };
    char **args;
    int nargs, rc;
    if (!cli_parse_cmd(&spec, argc, argv, &args, &nargs, &rc))
        return rc;
    if (!out_path) {
        free(args);
        return cli_usage_error("data import", "-o/--output is required");
    }
    struct task_set set;
    task_set_init(&set);
    struct ca_err err = {0};
    if (nargs == 1 && sv_ends_with(sv_cstr(args[0]), SV_LIT(".parquet"))) {
        rc = task_import_parquet(args[0], out_path, &set, &err);
    } else {
        for (int i = 0; i < nargs && rc == 0; i++) {
            if (sv_ends_with(sv_cstr(args[i]), SV_LIT(".parquet")))
                rc = err_setf(&err, CA_EUSAGE,
                              "%s: import a parquet file on its own, then list the JSONL "
                              "with the other sources",
                              args[i]);
            else
                rc = task_load(args[i], &set, &err);
        }
        if (rc == 0)
            rc = task_set_write_jsonl(&set, out_path, &err);
    }
    if (rc) {
        rc = cli_fail(&err);
        goto out;
    }
    if (as_json) {
        json_t *v = json_pack("{s:s, s:I, s:I, s:I}", "output", out_path, "tasks",
                              (json_int_t)set.n, "duplicates", (json_int_t)set.ndups, "relabelled",
                              (json_int_t)set.relabelled);
        cli_print_json(v);
        json_decref(v);
    } else {
        printf("wrote %s: ", out_path);
        print_summary(stdout, &set);
    }
    rc = CLI_OK;
out:
    task_set_release(&set);
    free(args);
    return rc;
}

int cmd_data(int argc, char **argv)
{
    static const struct cli_sub subs[] = {
        {"list", data_list, "validate task sources and list their tasks"},
        {"show", data_show, "show one task's metadata and code"},
        {"import", data_import, "convert sources (parquet, JSONL, tree, .py) to normalised JSONL"},
    };
    return cli_dispatch("data", subs, ARRAY_SIZE(subs), argc, argv);
}
