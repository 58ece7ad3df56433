/*
 * tools_bench - latency of the agent's tools and the sandbox, in process.
 *
 *   make bench && build/bench/tools_bench [ITERATIONS]
 *
 * Creates a workspace from examples/tasks/softmax_last_dim.py in a scratch
 * directory, opens an episode (sandbox + persistent shell + tools) and
 * times, as medians over ITERATIONS calls (default 300): sandbox start
 * (start + exec /bin/true + wait + teardown), a Bash `true` round trip in
 * the persistent shell, Read of model.py, Edit of a kernel file (and back),
 * Grep over the workspace. Prints one line per measurement.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/util.h"
#include "episode/episode.h"
#include "sandbox/sandbox.h"
#include "task/task.h"
#include "tools/tools.h"
#include "workspace/workspace.h"

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void report(const char *what, int64_t *us, int n)
{
    qsort(us, (size_t)n, sizeof(*us), cmp_i64);
    printf("%-34s median %8.3f ms   p90 %8.3f ms   min %8.3f ms   (n=%d)\n", what,
           (double)us[n / 2] / 1000.0, (double)us[n * 9 / 10] / 1000.0, (double)us[0] / 1000.0, n);
}

static void call(struct episode *ep, const char *tool, const char *args_json)
{
    json_error_t je;
    json_t *args = json_loads(args_json, 0, &je);
    struct tool_result res;
    tool_result_init(&res);
    if (!args || episode_call(ep, tool, args, &res) != 0 || res.is_error) {
        fprintf(stderr, "%s %s failed: %s\n", tool, args_json, res.text.data);
        exit(1);
    }
    tool_result_release(&res);
    json_decref(args);
}

static void time_call(struct episode *ep, const char *what, const char *tool, const char *args,
                      int n)
{
    int64_t *us = xcalloc((size_t)n, sizeof(*us));
    for (int i = 0; i < 5; i++)
        call(ep, tool, args);
    for (int i = 0; i < n; i++) {
        int64_t t0 = ca_now_us();
        call(ep, tool, args);
        us[i] = ca_now_us() - t0;
    }
    report(what, us, n);
    free(us);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 300;
    if (n < 10)
        n = 10;
    struct ca_err err = {0};
    char tmpl[] = "/tmp/ca-bench-XXXXXX";
    if (!mkdtemp(tmpl))
        return perror("mkdtemp"), 1;
    char *ws = xstrfmt("%s/ws", tmpl), *state = xstrfmt("%s/state", tmpl);
    struct task_set set;
    task_set_init(&set);
    const struct task *task;
    if (task_resolve("examples/tasks/softmax_last_dim.py", &set, &task, &err) ||
        workspace_create(task, ws, 0, &err)) {
        fprintf(stderr, "setup: %s (run from the repository root)\n", err.msg);
        return 1;
    }

    struct sandbox_opts so = {.workspace = ws};
    int64_t *us = xcalloc((size_t)n, sizeof(*us));
    int starts = n < 100 ? n : 100;
    for (int i = 0; i < starts; i++) {
        static const char *const argv_true[] = {"/bin/true", NULL};
        int64_t t0 = ca_now_us();
        struct sandbox *sb;
        if (sandbox_start(&so, &sb, &err)) {
            fprintf(stderr, "sandbox: %s\n", err.msg);
            return 1;
        }
        struct sandbox_cmd cmd = {
            .argv = argv_true, .stdin_fd = -1, .stdout_fd = -1, .stderr_fd = -1};
        int pid, status;
        if (sandbox_exec(sb, &cmd, &pid, &err) || sandbox_wait(sb, pid, 5000, &status, &err)) {
            fprintf(stderr, "sandbox exec: %s\n", err.msg);
            return 1;
        }
        sandbox_free(sb);
        us[i] = ca_now_us() - t0;
    }
    report("sandbox start+exec true+teardown", us, starts);
    free(us);

    struct episode_opts eo = {.state_dir = state, .id = "bench", .workspace = ws};
    struct episode *ep;
    if (episode_open(&eo, &ep, &err)) {
        fprintf(stderr, "episode: %s\n", err.msg);
        return 1;
    }
    char kpath[4096];
    snprintf(kpath, sizeof(kpath), "%s/kernels/k.cu", ws);
    FILE *f = fopen(kpath, "w");
    for (int i = 0; f && i < 200; i++)
        fprintf(f, "__global__ void kernel_%d(float *x) { x[threadIdx.x] *= %d.0f; }\n", i, i);
    if (f)
        fclose(f);
    time_call(ep, "Bash `true` round trip", "Bash", "{\"command\":\"true\"}", n);
    time_call(ep, "Read model.py", "Read", "{\"file_path\":\"/workspace/model.py\"}", n);
    call(ep, "Read", "{\"file_path\":\"kernels/k.cu\"}");
    int64_t *eu = xcalloc((size_t)n, sizeof(*eu));
    for (int i = 0; i < n; i++) {
        int64_t t0 = ca_now_us();
        call(ep, "Edit",
             i % 2 ? "{\"file_path\":\"kernels/k.cu\",\"old_string\":\"kernel_seven(\","
                     "\"new_string\":\"kernel_7(\"}"
                   : "{\"file_path\":\"kernels/k.cu\",\"old_string\":\"kernel_7(\","
                     "\"new_string\":\"kernel_seven(\"}");
        eu[i] = ca_now_us() - t0;
    }
    report("Edit kernels/k.cu (200 lines)", eu, n);
    free(eu);
    time_call(ep, "Grep 'kernel_1[0-9]' (content)", "Grep",
              "{\"pattern\":\"kernel_1[0-9]\",\"output_mode\":\"content\"}", n);
    time_call(ep, "Glob '**/*.cu'", "Glob", "{\"pattern\":\"**/*.cu\"}", n);
    episode_close(ep);
    task_set_release(&set);
    char *rm = xstrfmt("rm -rf %s", tmpl);
    if (system(rm) != 0)
        fprintf(stderr, "could not remove %s\n", tmpl);
    free(rm);
    free(ws);
    free(state);
    return 0;
}
