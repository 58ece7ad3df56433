/*
 * agent_overhead - the agent loop's own time per turn, model and tool time
 * excluded.
 *
 *   make bench && build/bench/agent_overhead [TURNS [OUTPUT_BYTES]]
 *
 * Runs one whole episode in process (agent_run: real workspace, sandbox,
 * persistent shell, trajectory file) against an in-memory model transport
 * that answers every request at once with a canned reply: a few hundred
 * bytes of text and one Bash call printing OUTPUT_BYTES (default 2000), for
 * TURNS turns (default 100), then an answer; its usage counts 4 bytes of
 * request a token, so the context budget and elision behave as they would. What remains after the
 * transport's and the tools' time is the loop: building the request from
 * the serialised conversation, parsing the reply, appending the results,
 * estimating the context, and building and writing the trajectory line.
 * The trajectory's fsync is disk latency, not loop work, and is reported
 * apart. Prints median and p99 over all turns, the first and last ten, and
 * the final request size.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/agent.h"
#include "core/fs.h"
#include "core/util.h"

struct canned {
    int turns, n;
    char *call, *answer;
    size_t last_request;
};

static int post(void *data, struct llm_http *h, struct ca_err *err)
{
    struct canned *c = data;
    c->last_request = h->len;
    h->status = 200;
    /* Usage as a server would count it (about 4 bytes a token), so the
     * context budget and elision work as in a real episode. */
    int rc = c->n++ < c->turns ? buf_addstr(h->resp, c->call) : buf_addstr(h->resp, c->answer);
    if (rc == 0 && c->n <= c->turns) {
        char usage[96];
        snprintf(usage, sizeof(usage),
                 ",\"usage\":{\"prompt_tokens\":%zu,\"completion_tokens\":80}}", h->len / 4);
        buf_truncate(h->resp, h->resp->len - 1); /* the closing brace */
        rc = buf_addstr(h->resp, usage);
    }
    return rc ? err_setf(err, CA_ETOOBIG, "reply too big") : 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void stats(const char *what, int64_t *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_i64);
    printf("%-28s median %7lld us   p99 %7lld us   max %7lld us   (n=%zu)\n", what,
           (long long)v[n / 2], (long long)v[(n * 99) / 100], (long long)v[n - 1], n);
}

int main(int argc, char **argv)
{
    int turns = argc > 1 ? atoi(argv[1]) : 100;
    int out_bytes = argc > 2 ? atoi(argv[2]) : 2000;
    if (turns < 1 || out_bytes < 1) {
        fprintf(stderr, "usage: agent_overhead [TURNS [OUTPUT_BYTES]]\n");
        return 2;
    }
    const char *repo = getenv("CA_REPO") ? getenv("CA_REPO") : ".";
    char tmpl[] = "/tmp/ca-agent-bench-XXXXXX";
    if (!mkdtemp(tmpl)) {
        perror("mkdtemp");
        return 1;
    }
    struct canned c = {.turns = turns};
    c.call = xstrfmt(
        "{\"id\":\"x\",\"object\":\"chat.completion\",\"choices\":[{\"index\":0,\"message\":{"
        "\"role\":\"assistant\",\"content\":\"The kernel reads each row twice; I will fuse the max "
        "and the sum into one pass with an online softmax, then check the output against the "
        "reference and time it. First, a quick look at the current state of the workspace and "
        "the compiler output.\",\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\","
        "\"function\":{\"name\":\"Bash\",\"arguments\":\"{\\\"command\\\":\\\"head -c %d "
        "/dev/zero | tr '\\\\\\\\0' x\\\"}\"}}]},\"finish_reason\":\"tool_calls\"}]}",
        out_bytes);
    c.answer =
        xstrdup("{\"choices\":[{\"message\":{\"role\":\"assistant\",\"content\":\"done\"}}]}");
    struct llm_transport t = {&c, post};
    struct agent_opts o = {0};
    llm_opts_init(&o.llm);
    o.llm.base_url = "http://127.0.0.1:1/v1";
    o.llm.model = "bench";
    o.llm.retries = 0;
    o.transport = &t;
    char *task = xstrfmt("%s/examples/tasks/softmax_last_dim.py", repo);
    char *out = xstrfmt("%s/out", tmpl);
    char *state = xstrfmt("%s/state", tmpl);
    o.task_ref = task;
    o.out_dir = out;
    o.state_dir = state;
    o.no_eval = true;
    o.max_turns = turns + 1;
    json_t *res = NULL;
    struct ca_err err = {0};
    if (agent_run(&o, &res, &err) != 0) {
        fprintf(stderr, "agent_overhead: %s\n", err.msg);
        return 1;
    }
    const char *stop = json_string_value(json_object_get(res, "stop_reason"));
    if (!stop || strcmp(stop, "answer") != 0) {
        fprintf(stderr, "agent_overhead: the episode stopped early: %s (%s)\n", stop,
                json_string_value(json_object_get(res, "detail")));
        return 1;
    }
    char *traj = xstrfmt("%s/trajectory.jsonl", out);
    json_t *lines;
    size_t end;
    if (agent_traj_load(traj, &lines, &end, &err) != 0) {
        fprintf(stderr, "agent_overhead: %s\n", err.msg);
        return 1;
    }
    int64_t *all = xcalloc(json_array_size(lines), sizeof(*all));
    size_t n = 0;
    for (size_t i = 0; i < json_array_size(lines); i++) {
        const json_t *l = json_array_get(lines, i);
        const json_t *tm = json_object_get(l, "timings");
        if (json_is_integer(json_object_get(tm, "overhead_us")))
            all[n++] = json_integer_value(json_object_get(tm, "overhead_us"));
    }
    printf("agent loop overhead: %d turns, %d-byte tool outputs, in-memory model transport\n",
           turns, out_bytes);
    int64_t first[10], last[10];
    size_t k = n < 10 ? n : 10;
    memcpy(first, all, k * sizeof(*all));
    memcpy(last, all + n - k, k * sizeof(*all));
    stats("turns 1-10", first, k);
    stats("last 10 turns", last, k);
    stats("all turns (line write excl.)", all, n);
    const json_t *tm = json_object_get(res, "timings");
    printf("%-28s median %7lld us   p99 %7lld us\n", "all turns (line write incl.)",
           (long long)json_integer_value(json_object_get(tm, "overhead_us_median")),
           (long long)json_integer_value(json_object_get(tm, "overhead_us_p99")));
    printf("%-28s median %7lld us (disk latency, not loop work)\n", "trajectory fsync",
           (long long)json_integer_value(json_object_get(tm, "fsync_us_median")));
    printf("final request: %zu bytes; stop: %s after %lld turns; tools %.1f ms in all\n",
           c.last_request, json_string_value(json_object_get(res, "stop_reason")),
           (long long)json_integer_value(json_object_get(res, "turns")),
           json_number_value(json_object_get(tm, "tool_ms")));
    json_decref(lines);
    json_decref(res);
    free(all);
    if (fs_remove_tree(tmpl, &err))
        fprintf(stderr, "agent_overhead: %s\n", err.msg);
    free(traj);
    free(task);
    free(out);
    free(state);
    free(c.call);
    free(c.answer);
    return 0;
}
