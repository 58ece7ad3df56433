/*
 * cmd_workspace.c - `cuda-agent workspace create|check`.
 */
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/json.h"
#include "task/task.h"
#include "workspace/workspace.h"
#include "core/banned.h"

static int ws_create(int argc, char **argv)
{
    const char *task_ref = NULL;
    bool force = false, as_json = false;
    const struct cli_opt opts[] = {
        {"task", 't', CLI_OPT_STRING, &task_ref, "TASK",
         "task: FILE.py, or SOURCE:SELECTOR (tree dir or .jsonl, by id, name or id prefix)"},
        {"force", 'f', CLI_OPT_FLAG, &force, NULL, "replace DIR if it is a cuda-agent workspace"},
        {"json", 0, CLI_OPT_FLAG, &as_json, NULL, "print the result as JSON"},
        {0},
    };
    const struct cli_spec spec = {
        .usage = "cuda-agent workspace create --task TASK [--force] [--json] DIR",
        .summary = "Create an episode workspace for TASK in DIR (which must not exist).",
        .description =
            "The workspace holds read-only SKILL.md, model.py (the task), binding.cpp,\n"
            "binding_registry.h, the compile/verify/profile commands and MANIFEST.json,\n"
            "plus the agent-writable model_new.py skeleton and an empty kernels/ folder.\n"
            "It is built beside DIR and renamed into place: a failure leaves nothing.",
        .opts = opts,
        .min_args = 1,
        .max_args = 1,
    };
    char **args;
    int nargs, rc;
    if (!cli_parse_cmd(&spec, argc, argv, &args, &nargs, &rc))
        return rc;
    if (!task_ref) {
        free(args);
        return cli_usage_error("workspace create", "--task is required");
    }
    struct ca_err err = {0};
    struct task_set set;
    task_set_init(&set);
    const struct task *task;
    const char *dir = args[0];
    rc = task_resolve(task_ref, &set, &task, &err);
    if (rc == 0)
        rc = workspace_create(task, dir, force ? WORKSPACE_FORCE : 0, &err);
    if (rc) {
        rc = cli_fail(&err);
        goto out;
    }
    if (as_json) {
        json_t *v = json_pack("{s:s, s:o, s:o}", "dir", dir, "task", task_to_json(task, false),
                              "writable", json_array());
        for (size_t i = 0; workspace_writable_patterns[i]; i++)
            json_array_append_new(json_object_get(v, "writable"),
                                  json_string(workspace_writable_patterns[i]));
        cli_print_json(v);
        json_decref(v);
    } else {
        printf("created workspace %s\n", dir);
        printf("  task:      %s (%s)\n", task->id, task->origin);
        printf("  ops:      ");
        for (size_t i = 0; i < task->nops; i++)
            printf(" %s", task->ops[i]);
        printf("%s\n", task->nops ? "" : " (none found)");
        printf("  read-only: SKILL.md model.py binding.cpp binding_registry.h compile verify "
               "profile MANIFEST.json\n");
        printf("  writable: ");
        for (size_t i = 0; workspace_writable_patterns[i]; i++)
            printf(" %s", workspace_writable_patterns[i]);
        printf("\n");
    }
    rc = CLI_OK;
out:
    task_set_release(&set);
    free(args);
    return rc;
}

static int ws_check(int argc, char **argv)
{
    bool as_json = false;
    const struct cli_opt opts[] = {
        {"json", 0, CLI_OPT_FLAG, &as_json, NULL, "print the report as JSON"},
        {0},
    };
    const struct cli_spec spec = {
        .usage = "cuda-agent workspace check [--json] DIR",
        .summary = "Check a workspace against its manifest: read-only files unchanged, which\n"
                   "files the evaluator would take (writable) and which it ignores.",
        .description = "Exit 0 when the workspace is intact, 3 when read-only files were changed.",
        .opts = opts,
        .min_args = 1,
        .max_args = 1,
    };
    char **args;
    int nargs, rc;
    if (!cli_parse_cmd(&spec, argc, argv, &args, &nargs, &rc))
        return rc;
    struct ca_err err = {0};
    json_t *report;
    rc = workspace_check(args[0], &report, &err);
    free(args);
    if (rc)
        return cli_fail(&err);
    bool ok = json_is_true(json_object_get(report, "ok"));
    if (as_json) {
        cli_print_json(report);
    } else {
        size_t i;
        json_t *v;
        printf("%s: %s\n", ok ? "intact" : "TAMPERED",
               json_string_value(json_object_get(json_object_get(report, "task"), "id")));
        json_array_foreach(json_object_get(report, "problems"), i, v)
            printf("  problem:  %s\n", json_string_value(v));
        json_array_foreach(json_object_get(report, "writable_files"), i, v)
            printf("  writable: %s\n", json_string_value(v));
        json_array_foreach(json_object_get(report, "ignored_files"), i, v)
            printf("  ignored:  %s (not an agent-writable path)\n", json_string_value(v));
    }
    json_decref(report);
    return ok ? CLI_OK : CLI_INVALID;
}

int cmd_workspace(int argc, char **argv)
{
    static const struct cli_sub subs[] = {
        {"create", ws_create, "create an episode workspace from a task"},
        {"check", ws_check, "check a workspace against its manifest"},
    };
    return cli_dispatch("workspace", subs, ARRAY_SIZE(subs), argc, argv);
}
