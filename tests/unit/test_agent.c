/*
 * Unit tests of the agent (src/agent): the serialised conversation, token
 * estimates and elision of old tool outputs, trimming, reading trajectories
 * back (torn lines), best of trajectory, snapshot copies, and whole episodes
 * in process over an in-memory model transport.
 */
#include "test.h"

#include <fcntl.h>
#include <unistd.h>

#include "agent/agent.h"
#include "core/fs.h"
#include "core/json.h"
#include "sandbox/sandbox.h"
#include "task/task.h"
#include "workspace/workspace.h"

static json_t *msg(const char *role, const char *content)
{
    return json_pack("{s:s, s:s}", "role", role, "content", content);
}

static json_t *tool_msg(const char *id, const char *content)
{
    return json_pack("{s:s, s:s, s:s}", "role", "tool", "tool_call_id", id, "content", content);
}

/* The cache must always equal a fresh dump of the messages. */
static void check_cache(struct agent_conv *c)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < agent_conv_count(c); i++)
        json_array_append(arr, (json_t *)agent_conv_get(c, i));
    char *d = json_dumps(arr, JSON_COMPACT | JSON_PRESERVE_ORDER);
    struct sv s = agent_conv_json(c);
    CHECK(d && strlen(d) == s.len && memcmp(d, s.p, s.len) == 0);
    free(d);
    json_decref(arr);
}

TEST(conv_append_and_estimate)
{
    struct agent_conv *c = agent_conv_new();
    CHECK_EQ(agent_conv_json(c).len, 2);
    check_cache(c);
    REQUIRE(agent_conv_append(c, msg("system", "s\"\n\u00e9")) == 0);
    REQUIRE(agent_conv_append(c, msg("user", "task")) == 0);
    check_cache(c);
    size_t bytes = agent_conv_json(c).len;
    CHECK_EQ(agent_conv_tokens(c, 0), (int64_t)((bytes + 2) / 4));
    CHECK_EQ(agent_conv_tokens(c, 400), (int64_t)((bytes + 400 + 2) / 4));
    /* With the server's count, bytes scale by its ratio (here 1 token per 2 bytes). */
    agent_conv_note_usage(c, 500, 1000);
    CHECK_EQ(agent_conv_tokens(c, 1000 - bytes), 500);
    CHECK_EQ(agent_conv_tokens(c, 3000 - bytes), 1500);
    agent_conv_note_usage(c, 0, 1000); /* no usage: ignored */
    CHECK_EQ(agent_conv_tokens(c, 1000 - bytes), 500);
    agent_conv_free(c);
    agent_conv_free(NULL);
}

TEST(conv_elides_oldest_tool_outputs_first)
{
    struct agent_conv *c = agent_conv_new();
    char big[4001];
    memset(big, 'x', 4000);
    big[4000] = '\0';
    REQUIRE(agent_conv_append(c, msg("system", "sys")) == 0);
    REQUIRE(agent_conv_append(c, msg("user", big)) == 0); /* never elided: not a tool output */
    for (int t = 0; t < 4; t++) {
        REQUIRE(agent_conv_append(c, msg("assistant", "go")) == 0);
        REQUIRE(agent_conv_append(c, tool_msg("c", big)) == 0);
    }
    int64_t before = agent_conv_tokens(c, 0); /* ~ 5 * 1000 */
    CHECK(before > 5000);
    /* Target that needs two outputs gone; the last turn (from index 8) is kept. */
    size_t n = agent_conv_elide(c, before - 1500, 0, 8);
    CHECK_EQ(n, 2);
    check_cache(c);
    CHECK(agent_conv_tokens(c, 0) <= before - 1500);
    CHECK_CONTAINS(json_string_value(json_object_get(agent_conv_get(c, 3), "content")),
                   AGENT_ELIDED_MARKER);
    CHECK_CONTAINS(json_string_value(json_object_get(agent_conv_get(c, 3), "content")),
                   "4000 bytes");
    CHECK_CONTAINS(json_string_value(json_object_get(agent_conv_get(c, 5), "content")),
                   AGENT_ELIDED_MARKER);
    CHECK_STR(json_string_value(json_object_get(agent_conv_get(c, 7), "content")), big);
    CHECK_STR(json_string_value(json_object_get(agent_conv_get(c, 1), "content")), big);
    CHECK_STR(json_string_value(json_object_get(agent_conv_get(c, 3), "tool_call_id")), "c");
    /* Before index 6 every output is elided already; before 8 one is left. */
    CHECK_EQ(agent_conv_elide(c, 0, 0, 6), 0);
    CHECK_EQ(agent_conv_elide(c, 0, 0, 8), 1);
    CHECK_STR(json_string_value(json_object_get(agent_conv_get(c, 9), "content")), big);
    check_cache(c);
    /* Under the target: nothing happens. */
    CHECK_EQ(agent_conv_elide(c, 1000000, 0, 10), 0);
    agent_conv_free(c);
}

TEST(trim_output)
{
    struct buf b;
    buf_init(&b, 1 << 20);
    REQUIRE(agent_trim_output(sv_cstr("short"), 100, &b) == 0);
    CHECK_STR(b.data, "short");
    /* Multi-byte characters are never cut in half. */
    struct buf in;
    buf_init(&in, 1 << 20);
    for (int i = 0; i < 1000; i++)
        REQUIRE(buf_addstr(&in, "\u00e9\u4e2d") == 0); /* 2 + 3 bytes */
    buf_reset(&b);
    REQUIRE(agent_trim_output(sv_from(in.data, in.len), 1000, &b) == 0);
    CHECK(b.len <= 1000 + 60);
    CHECK(utf8_valid(b.data, b.len, NULL));
    CHECK_CONTAINS(b.data, AGENT_TRIM_MARKER);
    CHECK(memcmp(b.data, in.data, 10) == 0);                         /* head kept */
    CHECK(memcmp(b.data + b.len - 5, in.data + in.len - 5, 5) == 0); /* tail kept */
    buf_release(&in);
    buf_release(&b);
}

static void write_text(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    REQUIRE(fd >= 0);
    REQUIRE(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
}

TEST(traj_load_drops_a_torn_line)
{
    char *p = xstrfmt("%s/t.jsonl", test_tmpdir());
    const char *good = "{\"type\":\"header\"}\n\n{\"type\":\"turn\",\"turn\":1}\n";
    char *text = xstrfmt("%s{\"type\":\"turn\",\"tu", good);
    write_text(p, text);
    json_t *lines;
    size_t end;
    struct ca_err err = {0};
    REQUIRE(agent_traj_load(p, &lines, &end, &err) == 0);
    CHECK_EQ(json_array_size(lines), 2);
    CHECK_EQ(end, strlen(good));
    json_decref(lines);

    write_text(p, "{\"type\":\"header\"}\nnot json\n{}\n");
    CHECK_EQ(agent_traj_load(p, &lines, &end, &err), CA_EPARSE);
    CHECK_CONTAINS(err.msg, "line 2");
    write_text(p, "[1]\n");
    CHECK_EQ(agent_traj_load(p, &lines, &end, &err), CA_EPARSE);
    CHECK(agent_traj_load("/nonexistent/t.jsonl", &lines, &end, &err) < 0);
    free(text);
    free(p);
}

TEST(best_of_trajectory)
{
    json_t *recs = json_loads(
        "[{\"seq\":1,\"command\":\"verify\",\"ok\":true,\"reward\":1,\"snapshot_dir\":\"/a\"},"
        " {\"seq\":2,\"command\":\"profile\",\"ok\":true,\"reward\":3,\"snapshot_dir\":\"/b\","
        "  \"report\":{\"reward\":{\"speedup_compile\":1.2}}},"
        " {\"seq\":3,\"command\":\"profile\",\"ok\":false,\"reward\":-1,\"snapshot_dir\":\"/c\"},"
        " {\"seq\":4,\"command\":\"profile\",\"ok\":true,\"reward\":3,\"snapshot_dir\":\"/d\","
        "  \"report\":{\"reward\":{\"speedup_compile\":1.1}}},"
        " {\"seq\":5,\"command\":\"profile\",\"ok\":true,\"reward\":3},"
        " {\"seq\":6,\"command\":\"compile\",\"ok\":true,\"reward\":9,\"snapshot_dir\":5}]",
        0, NULL);
    REQUIRE(recs);
    const json_t *b = agent_best_eval(recs);
    REQUIRE(b);
    CHECK_EQ(json_integer_value(json_object_get(b, "seq")), 2); /* 3 at 1.2x beats 3 at 1.1x */
    /* A passing ./verify (no reward of its own) counts 1; a later one wins a tie. */
    json_t *ver = json_loads(
        "[{\"seq\":1,\"command\":\"verify\",\"ok\":true,\"reward\":null,\"snapshot_dir\":\"/a\"},"
        " {\"seq\":2,\"command\":\"compile\",\"ok\":true,\"reward\":null},"
        " {\"seq\":3,\"command\":\"verify\",\"ok\":true,\"snapshot_dir\":\"/c\"},"
        " {\"seq\":4,\"command\":\"verify\",\"ok\":false,\"snapshot_dir\":\"/d\"}]",
        0, NULL);
    REQUIRE(ver);
    b = agent_best_eval(ver);
    REQUIRE(b);
    CHECK_EQ(json_integer_value(json_object_get(b, "seq")), 3);
    json_decref(ver);
    json_t *none =
        json_loads("[{\"seq\":1,\"ok\":false,\"reward\":-1,\"snapshot_dir\":\"/a\"}]", 0, NULL);
    CHECK(agent_best_eval(none) == NULL);
    json_t *empty = json_array();
    CHECK(agent_best_eval(empty) == NULL);
    json_decref(recs);
    json_decref(none);
    json_decref(empty);
}

static const struct task *load_task(struct task_set *set)
{
    struct ca_err err = {0};
    char *src = xstrfmt("%s/examples/tasks/softmax_last_dim.py", test_repo());
    task_set_init(set);
    if (task_load(src, set, &err) != 0)
        printf("%s\n", err.msg);
    free(src);
    REQUIRE(set->n == 1);
    return &set->tasks[0];
}

TEST(copy_snapshot_takes_writable_files_only)
{
    struct task_set set;
    const struct task *t = load_task(&set);
    struct ca_err err = {0};
    char *ws = xstrfmt("%s/ws", test_tmpdir());
    char *snap = xstrfmt("%s/snap", test_tmpdir());
    REQUIRE(workspace_create(t, ws, 0, &err) == 0);
    char *k = xstrfmt("%s/kernels", snap);
    REQUIRE(fs_mkdirs(k, 0755, &err) == 0);
    char *p = xstrfmt("%s/model_new.py", snap);
    write_text(p, "# best\n");
    free(p);
    p = xstrfmt("%s/kernels/a.cu", snap);
    write_text(p, "// a\n");
    free(p);
    p = xstrfmt("%s/kernels/notes.txt", snap);
    write_text(p, "not evaluated\n");
    free(p);
    p = xstrfmt("%s/model.py", snap);
    write_text(p, "# tampered\n");
    free(p);
    int n = agent_copy_snapshot(snap, ws, &err);
    CHECK_EQ(n, 2);
    struct buf b;
    buf_init(&b, 1 << 20);
    p = xstrfmt("%s/model_new.py", ws);
    REQUIRE(fs_read_file(p, 1 << 20, &b, &err) == 0);
    CHECK_STR(b.data, "# best\n");
    free(p);
    p = xstrfmt("%s/kernels/notes.txt", ws);
    CHECK(!fs_exists(p));
    free(p);
    buf_reset(&b);
    p = xstrfmt("%s/model.py", ws);
    REQUIRE(fs_read_file(p, 1 << 20, &b, &err) == 0);
    CHECK(strstr(b.data, "tampered") == NULL);
    free(p);
    buf_release(&b);
    free(k);
    free(ws);
    free(snap);
    task_set_release(&set);
}

/* ---- whole episodes over an in-memory transport ---- */

struct script {
    const char *const *replies; /* bodies, NULL-terminated */
    int n;
    json_t *requests; /* what the agent sent */
};

static int script_post(void *data, struct llm_http *h, struct ca_err *err)
{
    struct script *s = data;
    json_t *req = json_loadb(h->body, h->len, 0, NULL);
    REQUIRE(req);
    json_array_append_new(s->requests, req);
    const char *body = s->replies[s->n] ? s->replies[s->n++] : NULL;
    if (!body)
        return err_setf(err, CA_EUNAVAIL, "script exhausted");
    h->status = 200;
    return buf_addstr(h->resp, body);
}

static json_t *episode(struct script *s, struct agent_opts *o, int *rc_out, bool no_eval)
{
    /* Asked before, not guessed from agent_run's error: a scripted transport that runs out
     * fails with CA_EUNAVAIL too, and that must not read as a host without a sandbox. */
    struct ca_err why = {0};
    if (!sandbox_supported(&why))
        SKIP("userns", "no sandbox here: %s", why.msg);
    static struct llm_transport t;
    t = (struct llm_transport){s, script_post};
    s->requests = json_array();
    char *state = xstrfmt("%s/state", test_tmpdir());
    char *task = xstrfmt("%s/examples/tasks/softmax_last_dim.py", test_repo());
    o->task_ref = task;
    o->state_dir = state;
    o->no_eval = no_eval;
    o->transport = &t;
    llm_opts_init(&o->llm);
    o->llm.retries = 0;
    o->llm.base_url = "http://127.0.0.1:1/v1";
    o->llm.model = "unit";
    json_t *res = NULL;
    struct ca_err err = {0};
    *rc_out = agent_run(o, &res, &err);
    if (*rc_out)
        printf("agent_run: %s\n", err.msg);
    free(state);
    free(task);
    return res;
}

#define CALL_REPLY_U(calls, tokens)                                                                \
    "{\"choices\":[{\"message\":{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[" calls   \
    "]}}],\"usage\":{\"prompt_tokens\":" tokens ",\"completion_tokens\":5}}"
#define CALL_REPLY(calls) CALL_REPLY_U(calls, "3000")
#define BASH(id, cmd)                                                                              \
    "{\"id\":\"" id "\",\"type\":\"function\",\"function\":{\"name\":\"Bash\",\"arguments\":"      \
    "\"{\\\"command\\\":\\\"" cmd "\\\"}\"}}"
#define ANSWER "{\"choices\":[{\"message\":{\"role\":\"assistant\",\"content\":\"done\"}}]}"

TEST(agent_episode_in_process)
{
    static const char *const replies[] = {
        CALL_REPLY(
            BASH("a", "echo hello > kernels/h.txt; cat kernels/h.txt") "," BASH("b", "exit 3")),
        CALL_REPLY("{\"id\":\"c\",\"function\":{\"name\":\"Read\",\"arguments\":\"{oops\"}}"),
        ANSWER, NULL};
    struct script s = {.replies = replies};
    struct agent_opts o = {0};
    o.out_dir = xstrfmt("%s/out", test_tmpdir());
    int rc;
    json_t *res = episode(&s, &o, &rc, true);
    REQUIRE(rc == 0 && res);
    CHECK_STR(json_string_value(json_object_get(res, "stop_reason")), "answer");
    CHECK_EQ(json_integer_value(json_object_get(res, "turns")), 3);
    CHECK_EQ(json_array_size(s.requests), 3);
    /* Request 2 carries both results, in order, with their ids. */
    const json_t *m = json_object_get(json_array_get(s.requests, 1), "messages");
    REQUIRE(json_array_size(m) == 5);
    CHECK_STR(json_string_value(json_object_get(json_array_get(m, 3), "tool_call_id")), "a");
    CHECK_CONTAINS(json_string_value(json_object_get(json_array_get(m, 3), "content")), "hello");
    CHECK_CONTAINS(json_string_value(json_object_get(json_array_get(m, 4), "content")),
                   "[exit code 3]");
    m = json_object_get(json_array_get(s.requests, 2), "messages");
    CHECK_CONTAINS(json_string_value(json_object_get(json_array_get(m, 6), "content")),
                   "invalid JSON");
    /* The trajectory reads back: header, 3 turns, final. */
    json_t *lines;
    size_t end;
    struct ca_err err = {0};
    char *tp = xstrfmt("%s/trajectory.jsonl", o.out_dir);
    REQUIRE(agent_traj_load(tp, &lines, &end, &err) == 0);
    CHECK_EQ(json_array_size(lines), 5);
    CHECK_STR(json_string_value(json_object_get(json_array_get(lines, 4), "type")), "final");
    json_decref(lines);
    /* Running again into the same directory is refused; resuming a finished one too. */
    json_decref(s.requests);
    s.n = 0;
    json_t *again = episode(&s, &o, &rc, true);
    CHECK_EQ(rc, CA_EUSAGE);
    CHECK(again == NULL);
    json_decref(s.requests);
    o.resume = true;
    s.n = 0;
    again = episode(&s, &o, &rc, true);
    CHECK_EQ(rc, CA_EUSAGE);
    json_decref(s.requests);
    free(tp);
    free((char *)o.out_dir);
    json_decref(res);
}

TEST(agent_stops_on_limits_and_errors)
{
    static const char *const loop[] = {CALL_REPLY(BASH("a", "true")), CALL_REPLY(BASH("b", "true")),
                                       CALL_REPLY(BASH("c", "true")), NULL};
    struct script s = {.replies = loop};
    struct agent_opts o = {0};
    o.out_dir = xstrfmt("%s/limit", test_tmpdir());
    o.max_turns = 2;
    int rc;
    json_t *res = episode(&s, &o, &rc, true);
    REQUIRE(rc == 0 && res);
    CHECK_STR(json_string_value(json_object_get(res, "stop_reason")), "max_turns");
    CHECK_EQ(json_array_size(s.requests), 2);
    json_decref(res);
    json_decref(s.requests);
    free((char *)o.out_dir);

    /* The script runs out: the transport fails for good -> model_error, still a result. */
    struct script s2 = {.replies = loop};
    struct agent_opts o2 = {0};
    o2.out_dir = xstrfmt("%s/err", test_tmpdir());
    res = episode(&s2, &o2, &rc, true);
    REQUIRE(rc == 0 && res);
    CHECK_STR(json_string_value(json_object_get(res, "stop_reason")), "model_error");
    CHECK_EQ(json_integer_value(json_object_get(res, "turns")), 3);
    json_decref(res);
    json_decref(s2.requests);
    free((char *)o2.out_dir);

    /* Context: the first request fits by the bytes/4 estimate; then the server counts
     * 50000 tokens for it, so the next one cannot fit in 12000 even with elision. */
    static const char *const big[] = {CALL_REPLY_U(BASH("a", "true"), "50000"), ANSWER, NULL};
    struct script s3 = {.replies = big};
    struct agent_opts o3 = {0};
    o3.out_dir = xstrfmt("%s/ctx", test_tmpdir());
    o3.context_tokens = 12000;
    res = episode(&s3, &o3, &rc, true);
    REQUIRE(rc == 0 && res);
    CHECK_STR(json_string_value(json_object_get(res, "stop_reason")), "context");
    CHECK_EQ(json_integer_value(json_object_get(res, "turns")), 1);
    json_decref(res);
    json_decref(s3.requests);
    free((char *)o3.out_dir);
}

/* Evaluations as the episode would record them: two on the first poll. */
struct fake_evals {
    char *snap_a, *snap_b;
    int polls;
};

static int fake_evals(void *data, int64_t since, json_t **out, struct ca_err *err)
{
    struct fake_evals *f = data;
    f->polls++;
    *out = json_array();
    if (since == 0) {
        json_array_append_new(*out, json_pack("{s:i, s:s, s:b, s:n, s:s, s:s}", "seq", 1, "command",
                                              "verify", "ok", 1, "reward", "stage", "verify",
                                              "snapshot_dir", f->snap_a));
        json_array_append_new(*out, json_pack("{s:i, s:s, s:b, s:i, s:s, s:s}", "seq", 2, "command",
                                              "profile", "ok", 1, "reward", 2, "stage", "profile",
                                              "snapshot_dir", f->snap_b));
    }
    return 0;
}

static char *snapshot(const char *name, const char *model_new)
{
    struct ca_err err = {0};
    char *dir = xstrfmt("%s/%s", test_tmpdir(), name);
    char *k = xstrfmt("%s/kernels", dir);
    REQUIRE(fs_mkdirs(k, 0755, &err) == 0);
    char *p = xstrfmt("%s/model_new.py", dir);
    write_text(p, model_new);
    free(p);
    p = xstrfmt("%s/kernels/%s.cu", dir, name);
    write_text(p, "// kernel\n");
    free(p);
    free(k);
    return dir;
}

TEST(agent_best_of_trajectory_plumbing)
{
    static const char *const replies[] = {CALL_REPLY(BASH("a", "true")), ANSWER, NULL};
    struct script s = {.replies = replies};
    struct fake_evals fe = {snapshot("snap_a", "# A\n"), snapshot("snap_b", "# B\n"), 0};
    struct agent_opts o = {0};
    o.out_dir = xstrfmt("%s/best", test_tmpdir());
    o.evals = fake_evals;
    o.evals_data = &fe;
    o.device = "cpu";
    int rc;
    json_t *res = episode(&s, &o, &rc, false);
    REQUIRE(rc == 0 && res);
    CHECK_EQ(fe.polls, 2);
    CHECK_EQ(json_integer_value(json_object_get(res, "evals_recorded")), 2);
    /* Snapshots are kept in OUT/evals/SEQ, so the episode's state may go. */
    char *p = xstrfmt("%s/evals/2/kernels/snap_b.cu", o.out_dir);
    CHECK(fs_is_file(p));
    free(p);
    /* The best (the profiled one, reward 2) is rebuilt as a workspace and scored. */
    const json_t *best = json_object_get(json_object_get(res, "rewards"), "best");
    REQUIRE(json_is_object(best));
    CHECK_EQ(json_integer_value(json_object_get(best, "seq")), 2);
    CHECK_EQ(json_integer_value(json_object_get(best, "recorded_reward")), 2);
    struct buf b;
    buf_init(&b, 1 << 20);
    struct ca_err err = {0};
    p = xstrfmt("%s/best_workspace/model_new.py", o.out_dir);
    REQUIRE(fs_read_file(p, 1 << 20, &b, &err) == 0);
    CHECK_STR(b.data, "# B\n");
    free(p);
    /* Scored or not (the evaluator needs PyTorch), the final workspace has a verdict or a
     * reason: the template's model_new.py is no solution, so a verdict is -1 at a named stage,
     * and a reason names its error code. */
    const json_t *fin = json_object_get(json_object_get(res, "rewards"), "final");
    REQUIRE(json_is_object(fin));
    if (json_object_get(fin, "error")) {
        CHECK(json_is_string(json_object_get(fin, "error")));
        CHECK(json_is_string(json_object_get(fin, "code")));
    } else {
        CHECK(json_is_false(json_object_get(fin, "ok")));
        CHECK_EQ(json_integer_value(json_object_get(fin, "reward")), -1);
        CHECK(json_is_string(json_object_get(fin, "stage")));
    }
    buf_release(&b);
    json_decref(res);
    json_decref(s.requests);
    free((char *)o.out_dir);
    free(fe.snap_a);
    free(fe.snap_b);
}
