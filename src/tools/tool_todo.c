/*
 * tool_todo.c - TodoWrite: replace the episode's todo list.
 *
 * The list lives in the tool_ctx (tool_ctx_todos() hands it to a supervisor
 * that persists it). Rules: at most one item in progress, no empty content,
 * no id used twice. The answer is the whole list rendered with status marks
 * and counts, so the model sees the state it just set.
 */
#include "tools/tools_internal.h"

#include <string.h>

#include "core/banned.h"

#define TODO_MAX 100

static const char *const statuses[] = {"pending", "in_progress", "completed", NULL};

static int run_todo_write(struct tool_ctx *ctx, const json_t *args, struct tool_result *res)
{
    const json_t *todos = json_object_get(args, "todos");
    size_t i, counts[3] = {0, 0, 0}, in_progress[2] = {0, 0};
    json_t *t;
    json_array_foreach(todos, i, t)
    {
        size_t len;
        const char *content = tools__str(t, "content", &len);
        if (!sv_trim(sv_from(content, len)).len)
            return tool_result_errorf(res,
                                      "TodoWrite: todos[%zu].content is empty; describe the "
                                      "task",
                                      i);
        const char *status = tools__str(t, "status", NULL);
        for (size_t s = 0; statuses[s]; s++)
            if (strcmp(status, statuses[s]) == 0)
                counts[s]++;
        if (strcmp(status, "in_progress") == 0 && counts[1] <= 2)
            in_progress[counts[1] - 1] = i;
        const char *id = tools__str(t, "id", NULL);
        for (size_t j = 0; id && j < i; j++) {
            const char *other = tools__str(json_array_get(todos, j), "id", NULL);
            if (other && strcmp(other, id) == 0)
                return tool_result_errorf(res,
                                          "TodoWrite: todos[%zu] and todos[%zu] have the same id "
                                          "'%.100s'; ids must be unique",
                                          j, i, id);
        }
    }
    if (counts[1] > 1)
        return tool_result_errorf(res,
                                  "TodoWrite: %zu items are in_progress (todos[%zu] and "
                                  "todos[%zu]%s); at most one may be in progress at a time: mark "
                                  "the others pending or completed",
                                  counts[1], in_progress[0], in_progress[1],
                                  counts[1] > 2 ? ", ..." : "");

    json_t *list = json_array();
    json_array_foreach(todos, i, t)
    {
        json_t *item = json_object();
        static const char *const keys[] = {"content", "status", "activeForm", "id"};
        for (size_t k = 0; k < ARRAY_SIZE(keys); k++) {
            json_t *v = json_object_get(t, keys[k]);
            if (json_is_string(v))
                json_object_set(item, keys[k], v);
        }
        json_array_append_new(list, item);
    }
    json_decref(ctx->todos);
    ctx->todos = list;

    size_t n = json_array_size(list);
    if (!n)
        tools__out_tail(res, "Todo list cleared (0 items)\n");
    else
        tools__out_tail(res,
                        "Todo list updated: %zu item%s (%zu completed, %zu in progress, %zu "
                        "pending)\n",
                        n, n == 1 ? "" : "s", counts[2], counts[1], counts[0]);
    json_array_foreach(list, i, t)
    {
        const char *status = tools__str(t, "status", NULL);
        const char *mark = strcmp(status, "completed") == 0     ? "[x]"
                           : strcmp(status, "in_progress") == 0 ? "[>]"
                                                                : "[ ]";
        size_t len;
        const char *content = tools__str(t, "content", &len);
        const char *active = tools__str(t, "activeForm", NULL);
        bool show_active = active && strcmp(status, "in_progress") == 0;
        if (tools__outf(res, "%s %.*s%s%s%s\n", mark, (int)len, content,
                        show_active ? " (now: " : "", show_active ? active : "",
                        show_active ? ")" : "")) {
            tools__out_tail(res, "[list truncated at the tool output limit]\n");
            break;
        }
    }
    json_object_set_new(res->fields, "total", json_integer((json_int_t)n));
    json_object_set_new(res->fields, "pending", json_integer((json_int_t)counts[0]));
    json_object_set_new(res->fields, "in_progress", json_integer((json_int_t)counts[1]));
    json_object_set_new(res->fields, "completed", json_integer((json_int_t)counts[2]));
    return 0;
}

static const struct tools__arg todo_item[] = {
    {"content", TOOLS__STRING, true,
     "What to do, in the imperative (\"Write the softmax kernel\").", .max_len = 2000},
    {"status", TOOLS__STRING, true, "\"pending\", \"in_progress\" or \"completed\".",
     .choices = statuses},
    {"activeForm", TOOLS__STRING, false,
     "The same task as an ongoing activity (\"Writing the softmax kernel\").", .max_len = 2000},
    {"id", TOOLS__STRING, false, "An optional unique id for the item.", .max_len = 128},
    {NULL},
};

static const struct tools__arg todo_args[] = {
    {"todos", TOOLS__ARRAY, true, "The complete new todo list (it replaces the previous one).",
     .min = 0, .max = TODO_MAX, .items = todo_item},
    {NULL},
};

const struct tools__spec tools__todo_write_spec = {
    "TodoWrite",
    "Replace this episode's todo list, to plan multi-step work and track progress. Give the whole "
    "list each time, every item with content and status (pending, in_progress, completed); at "
    "most one item may be in_progress. Mark items completed as soon as they are done. Returns the "
    "list with its counts.",
    todo_args,
    run_todo_write,
};
