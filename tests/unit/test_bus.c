/* Unit tests of the job bus (bus/): Redis URLs, SHA-256, job documents and what a
 * worker refuses in them, and a connection to a peer that closes. The bus against real Redis
 * servers is tests/it/bus.sh. */
#include "test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bus/bus_internal.h"
#include "core/fs.h"
#include "core/hash.h"
#include "core/limits.h"
#include "core/util.h"

TEST(sha256_known_vectors)
{
    char hex[SHA256_HEX_LEN + 1];
    sha256_hex("", 0, hex);
    CHECK_STR(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    sha256_hex("abc", 3, hex);
    CHECK_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"; /* 56: 2 blocks */
    sha256_hex(two, strlen(two), hex);
    CHECK_STR(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    char *m = malloc(1000000);
    memset(m, 'a', 1000000);
    sha256_hex(m, 1000000, hex);
    CHECK_STR(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(m);
    CHECK(sha256_hex_valid(hex));
    CHECK(!sha256_hex_valid("CDC76E5C9914FB9281A1C7E284D73E67F1809A48A497200E046D39CCC7112CD0"));
    CHECK(!sha256_hex_valid("abc"));
    CHECK(!sha256_hex_valid(NULL));
}

TEST(url_forms)
{
    struct bus_url u;
    struct ca_err err = {0};
    unsetenv("CUDA_AGENT_REDIS_PASSWORD");
    REQUIRE(bus_url_parse("redis://127.0.0.1", &u, &err) == 0);
    CHECK_STR(u.host, "127.0.0.1");
    CHECK_EQ(u.port, 6379);
    CHECK_EQ(u.db, 0);
    REQUIRE(bus_url_parse("redis://alice:p%40ss:w@redis.example:7000/3", &u, &err) == 0);
    CHECK_STR(u.user, "alice");
    CHECK_STR(u.pass, "p@ss:w");
    CHECK_STR(u.host, "redis.example");
    CHECK_EQ(u.port, 7000);
    CHECK_EQ(u.db, 3);
    CHECK_STR(u.shown, "redis://alice:***@redis.example:7000/3");
    REQUIRE(bus_url_parse("redis://:onlypass@h", &u, &err) == 0);
    CHECK_STR(u.user, "");
    CHECK_STR(u.pass, "onlypass");
    CHECK(strstr(u.shown, "onlypass") == NULL);
    REQUIRE(bus_url_parse("redis://[::1]:6380", &u, &err) == 0);
    CHECK_STR(u.host, "::1");
    CHECK_EQ(u.port, 6380);
    CHECK_STR(u.shown, "redis://[::1]:6380/0");
    REQUIRE(bus_url_parse("unix:///run/redis.sock?db=2", &u, &err) == 0);
    CHECK_STR(u.unix_path, "/run/redis.sock");
    CHECK_EQ(u.db, 2);
    setenv("CUDA_AGENT_REDIS_PASSWORD", "fromenv", 1);
    CHECK(!u.tls);
    REQUIRE(bus_url_parse("rediss://carol:pw@cache.example:6380/1", &u, &err) == 0);
    CHECK(u.tls);
    CHECK_STR(u.host, "cache.example");
    CHECK_EQ(u.port, 6380);
    CHECK_EQ(u.db, 1);
    CHECK_STR(u.shown, "rediss://carol:***@cache.example:6380/1");
    REQUIRE(bus_url_parse("redis://bob@h", &u, &err) == 0);
    CHECK(!u.tls);
    CHECK_STR(u.pass, "fromenv");
    CHECK_STR(u.shown, "redis://bob@h:6379/0");
    unsetenv("CUDA_AGENT_REDIS_PASSWORD");
}

TEST(url_refusals)
{
    struct bus_url u;
    struct ca_err err = {0};
    CHECK_EQ(bus_url_parse("rediss://", &u, &err), CA_EUSAGE);
    CHECK_EQ(bus_url_parse("http://user:secret@h", &u, &err), CA_EUSAGE);
    CHECK(strstr(err.msg, "secret") == NULL);
    CHECK_EQ(bus_url_parse("redis://h:0", &u, &err), CA_EUSAGE);
    CHECK_EQ(bus_url_parse("redis://h:70000", &u, &err), CA_EUSAGE);
    CHECK_EQ(bus_url_parse("redis://h:12x", &u, &err), CA_EUSAGE);
    CHECK_EQ(bus_url_parse("redis://", &u, &err), CA_EUSAGE);
    CHECK_EQ(bus_url_parse("redis://h/x", &u, &err), CA_EUSAGE);
    CHECK_EQ(bus_url_parse("unix://relative.sock", &u, &err), CA_EUSAGE);
    CHECK_EQ(bus_url_parse("", &u, &err), CA_EUSAGE);
    CHECK_EQ(bus_url_parse(NULL, &u, &err), CA_EUSAGE);
}

static struct bus_job *small_job(void)
{
    struct ca_err err = {0};
    struct bus_job *j = bus_job_new();
    REQUIRE(bus_job_set_task(j, "task", 4, &err) == 0);
    REQUIRE(bus_job_add_file(j, "model_new.py", "m", 1, &err) == 0);
    REQUIRE(bus_job_add_file(j, "kernels/a.cu", "k", 1, &err) == 0);
    REQUIRE(bus_job_set_opts(j, json_pack("{s:s, s:i}", "mode", "verify", "seeds", 3), &err) == 0);
    return j;
}

TEST(job_id_is_the_digest_of_a_canonical_document)
{
    struct ca_err err = {0};
    struct bus_job *a = small_job();
    /* The same files added in another order: the same document, the same id. */
    struct bus_job *b = bus_job_new();
    REQUIRE(bus_job_add_file(b, "kernels/a.cu", "k", 1, &err) == 0);
    REQUIRE(bus_job_add_file(b, "model_new.py", "m", 1, &err) == 0);
    REQUIRE(bus_job_set_task(b, "task", 4, &err) == 0);
    REQUIRE(bus_job_set_opts(b, json_pack("{s:i, s:s}", "seeds", 3, "mode", "verify"), &err) == 0);
    struct buf da, db;
    buf_init(&da, 1 << 20);
    buf_init(&db, 1 << 20);
    char ia[SHA256_HEX_LEN + 1], ib[SHA256_HEX_LEN + 1], check[SHA256_HEX_LEN + 1];
    REQUIRE(bus_job_encode(a, &da, ia, &err) == 0);
    REQUIRE(bus_job_encode(b, &db, ib, &err) == 0);
    CHECK_STR(da.data, db.data);
    CHECK_STR(ia, ib);
    sha256_hex(da.data, da.len, check);
    CHECK_STR(ia, check);
    /* One byte of one file changes the id. */
    REQUIRE(bus_job_add_file(b, "kernels/b.cu", "", 0, &err) == 0);
    buf_reset(&db);
    REQUIRE(bus_job_encode(b, &db, ib, &err) == 0);
    CHECK(strcmp(ia, ib) != 0);
    /* What a worker reads back. */
    struct bus__spec spec;
    REQUIRE(bus__spec_parse(da.data, da.len, &spec, &err) == 0);
    CHECK_EQ(spec.n_files, 2);
    CHECK_STR(spec.files[0].path, "kernels/a.cu");
    CHECK_STR(spec.files[1].path, "model_new.py");
    sha256_hex("m", 1, check);
    CHECK_STR(spec.files[1].sha, check);
    CHECK_EQ(spec.task.size, 4);
    CHECK_STR(json_string_value(json_object_get(spec.opts, "mode")), "verify");
    CHECK(!spec.kernelbench);
    bus__spec_release(&spec);
    buf_release(&da);
    buf_release(&db);
    bus_job_free(a);
    bus_job_free(b);
}

TEST(client_side_refusals)
{
    struct ca_err err = {0};
    struct bus_job *j = bus_job_new();
    CHECK_EQ(bus_job_add_file(j, "../etc/passwd", "x", 1, &err), CA_EESCAPE);
    CHECK(bus_job_add_file(j, "/abs.cu", "x", 1, &err) != 0);
    CHECK_EQ(bus_job_add_file(j, "model.py", "x", 1, &err), CA_EPARSE); /* read-only file */
    CHECK_EQ(bus_job_add_file(j, "binding.cpp", "x", 1, &err), CA_EPARSE);
    REQUIRE(bus_job_add_file(j, "model_new.py", "x", 1, &err) == 0);
    CHECK_EQ(bus_job_add_file(j, "model_new.py", "y", 1, &err), CA_EDUP);
    CHECK_EQ(bus_job_set_opts(j, json_pack("{s:s}", "keep_dir", "/tmp/x"), &err), CA_EPARSE);
    CHECK_EQ(bus_job_set_opts(j, json_pack("{s:s}", "workspace", "/"), &err), CA_EPARSE);
    char *big = calloc(1, CA_LIMIT_TASK_BYTES + 1);
    CHECK_EQ(bus_job_add_file(j, "kernels/big.cu", big, CA_LIMIT_TASK_BYTES + 1, &err), CA_ETOOBIG);
    free(big);
    struct buf d;
    buf_init(&d, 1 << 20);
    char id[SHA256_HEX_LEN + 1];
    CHECK_EQ(bus_job_encode(j, &d, id, &err), CA_EUSAGE); /* no task */
    buf_release(&d);
    bus_job_free(j);
}

/* What a worker refuses in a document (whose digest matched: its author knew the rules). */
static int parse_str(const char *doc)
{
    struct bus__spec spec;
    struct ca_err err = {0};
    int rc = bus__spec_parse(doc, strlen(doc), &spec, &err);
    if (rc == 0)
        bus__spec_release(&spec);
    return rc;
}

#define SHA "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define TASK "\"task\": {\"sha256\": \"" SHA "\", \"size\": 0}"

TEST(worker_refuses_bad_documents)
{
    CHECK_EQ(
        parse_str("{\"v\": 1, \"kind\": \"workspace\", \"files\": [], \"opts\": {}, " TASK "}"), 0);
    CHECK_EQ(
        parse_str("{\"v\": 2, \"kind\": \"workspace\", \"files\": [], \"opts\": {}, " TASK "}"),
        CA_EPARSE);
    CHECK_EQ(parse_str("{\"v\": 1, \"kind\": \"shell\", \"files\": [], \"opts\": {}, " TASK "}"),
             CA_EPARSE);
    /* A path out of the job directory, a read-only workspace file, a duplicate. */
    CHECK(parse_str("{\"v\": 1, \"kind\": \"workspace\", \"opts\": {}, " TASK
                    ", \"files\": [{\"path\": \"../../x.cu\", \"sha256\": \"" SHA
                    "\", \"size\": 0}]}") != 0);
    CHECK_EQ(parse_str("{\"v\": 1, \"kind\": \"workspace\", \"opts\": {}, " TASK
                       ", \"files\": [{\"path\": \"compile\", \"sha256\": \"" SHA
                       "\", \"size\": 0}]}"),
             CA_EPARSE);
    CHECK_EQ(parse_str("{\"v\": 1, \"kind\": \"workspace\", \"opts\": {}, " TASK
                       ", \"files\": [{\"path\": \"model_new.py\", \"sha256\": \"" SHA
                       "\", \"size\": 0}, {\"path\": \"model_new.py\", \"sha256\": \"" SHA
                       "\", \"size\": 0}]}"),
             CA_EPARSE);
    /* A digest that is not one, a size over the limit. */
    CHECK_EQ(parse_str("{\"v\": 1, \"kind\": \"workspace\", \"files\": [], \"opts\": {}, "
                       "\"task\": {\"sha256\": \"../x\", \"size\": 0}}"),
             CA_EPARSE);
    CHECK_EQ(parse_str("{\"v\": 1, \"kind\": \"workspace\", \"files\": [], \"opts\": {}, "
                       "\"task\": {\"sha256\": \"" SHA "\", \"size\": 99999999}}"),
             CA_ETOOBIG);
    /* Options the worker's own settings own. */
    CHECK_EQ(parse_str("{\"v\": 1, \"kind\": \"workspace\", \"files\": [], " TASK
                       ", \"opts\": {\"keep_dir\": \"/root\"}}"),
             CA_EPARSE);
    CHECK_EQ(parse_str("{\"v\": 1, \"kind\": \"workspace\", \"files\": [], " TASK
                       ", \"opts\": {\"device\": \"cpu\"}}"),
             CA_EPARSE);
    /* KernelBench: its file is required, workspace files are not allowed. */
    CHECK(parse_str("{\"v\": 1, \"kind\": \"kernelbench\", \"files\": [], \"opts\": {}, " TASK
                    "}") != 0);
    CHECK_EQ(parse_str("{\"v\": 1, \"kind\": \"kernelbench\", \"files\": [], \"opts\": {}, " TASK
                       ", \"kernelbench\": {\"sha256\": \"" SHA "\", \"size\": 0}}"),
             0);
    CHECK_EQ(parse_str("not json"), CA_EPARSE);
}

TEST(fake_backend_spec)
{
    struct ca_err err = {0};
    CHECK_EQ(bus__fake_check("20", &err), 0);
    CHECK_EQ(bus__fake_check("20:garbage", &err), 0);
    CHECK_EQ(bus__fake_check("20:hang", &err), 0);
    CHECK_EQ(bus__fake_check("20:maybe", &err), CA_EUSAGE);
    CHECK_EQ(bus__fake_check("-1", &err), CA_EUSAGE);
    atomic_int quit = 0;
    json_t *rep = NULL;
    REQUIRE(bus__fake_eval("0", SHA, &quit, &rep, &err) == 0);
    CHECK_STR(json_string_value(json_object_get(rep, "job")), SHA);
    /* 'e' = 14, 14 % 4 = 2 */
    CHECK_EQ(json_integer_value(json_object_get(json_object_get(rep, "reward"), "reward")), 2);
    json_decref(rep);
    REQUIRE(bus__fake_eval("0:garbage", SHA, &quit, &rep, &err) == 0);
    CHECK(!json_is_object(rep));
    json_decref(rep);
    atomic_store(&quit, 1);
    CHECK_EQ(bus__fake_eval("0:hang", SHA, &quit, &rep, &err), CA_ETIMEOUT);
}

/* keep_dir on the bus: the client keeps what it sends (no worker can write the caller's
 * folders): the snapshot's files and the task as model.py, nothing else of the workspace. */
TEST(job_from_eval_keeps_its_own_snapshot)
{
    struct ca_err err = {0};
    char *task = xstrfmt("%s/tests/eval/cpu/task.py", test_repo());
    char *ws = xstrfmt("%s/ws", test_tmpdir()), *keep = xstrfmt("%s/keep", test_tmpdir());
    char *p = xstrfmt("%s/kernels", ws);
    REQUIRE(fs_mkdirs(p, 0700, &err) == 0);
    free(p);
    p = xstrfmt("%s/model_new.py", ws);
    REQUIRE(fs_write_atomic(p, "# new\n", 6, 0600, &err) == 0);
    free(p);
    p = xstrfmt("%s/kernels/k.cu", ws);
    REQUIRE(fs_write_atomic(p, "// k\n", 5, 0600, &err) == 0);
    free(p);
    p = xstrfmt("%s/notes.txt", ws); /* not a writable source: not evaluated, not kept */
    REQUIRE(fs_write_atomic(p, "n\n", 2, 0600, &err) == 0);
    free(p);
    struct eval_opts o = {.workspace = ws, .task_ref = task, .keep_dir = keep};
    struct bus_job *j = NULL;
    REQUIRE(bus_job_from_eval(&o, &j, &err) == 0);
    bus_job_free(j);
    struct buf got, want;
    buf_init(&got, CA_LIMIT_TASK_BYTES);
    buf_init(&want, CA_LIMIT_TASK_BYTES);
    p = xstrfmt("%s/model_new.py", keep);
    CHECK(fs_read_file(p, 1024, &got, &err) == 0 && strcmp(got.data, "# new\n") == 0);
    free(p);
    p = xstrfmt("%s/kernels/k.cu", keep);
    buf_reset(&got);
    CHECK(fs_read_file(p, 1024, &got, &err) == 0 && strcmp(got.data, "// k\n") == 0);
    free(p);
    p = xstrfmt("%s/model.py", keep);
    buf_reset(&got);
    CHECK(fs_read_file(p, CA_LIMIT_TASK_BYTES, &got, &err) == 0 &&
          fs_read_file(task, CA_LIMIT_TASK_BYTES, &want, &err) == 0 && got.len == want.len &&
          memcmp(got.data, want.data, got.len) == 0);
    free(p);
    p = xstrfmt("%s/notes.txt", keep);
    CHECK(!fs_exists(p));
    free(p);
    /* A KernelBench file is not kept over the bus: refused rather than silently dropped. */
    o = (struct eval_opts){.kernelbench_file = task, .task_ref = task, .keep_dir = keep};
    j = NULL;
    CHECK_EQ(bus_job_from_eval(&o, &j, &err), CA_EUSAGE);
    CHECK(j == NULL);
    buf_release(&got);
    buf_release(&want);
    free(task);
    free(ws);
    free(keep);
}

/* A peer that answers the connection's PING and then closes, as a Redis that restarted while
 * the connection was idle: a large command written to it meets a reset, and the write that
 * follows raises SIGPIPE in the writing thread. The bus holds that back and reports the lost
 * connection; the default disposition (this test's) would otherwise kill the process. */
struct closing_peer {
    int lfd;
};

static void *closing_peer_main(void *arg)
{
    struct closing_peer *p = arg;
    int fd = accept(p->lfd, NULL, NULL);
    if (fd < 0)
        return NULL;
    char in[256];
    size_t got = 0;
    while (got < sizeof(in) - 1) { /* the PING of bus_conn_open, as RESP */
        ssize_t n = read(fd, in + got, sizeof(in) - 1 - got);
        if (n <= 0)
            break;
        got += (size_t)n;
        in[got] = 0;
        if (strstr(in, "PING\r\n"))
            break;
    }
    if (write(fd, "+PONG\r\n", 7) != 7)
        fprintf(stderr, "closing peer: write failed\n");
    close(fd);
    return NULL;
}

TEST(a_write_to_a_closed_connection_is_an_error_not_sigpipe)
{
    struct closing_peer p = {.lfd = socket(AF_INET, SOCK_STREAM, 0)};
    REQUIRE(p.lfd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    REQUIRE(bind(p.lfd, (struct sockaddr *)&a, sizeof(a)) == 0);
    REQUIRE(listen(p.lfd, 1) == 0);
    REQUIRE(getsockname(p.lfd, (struct sockaddr *)&a, &alen) == 0);
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, closing_peer_main, &p) == 0);
    char url[64];
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", ntohs(a.sin_port));
    struct bus_url u;
    struct ca_err err = {0};
    REQUIRE(bus_url_parse(url, &u, &err) == 0);
    struct bus_conn *c = NULL;
    REQUIRE(bus_conn_open(&u, &c, &err) == 0);
    pthread_join(th, NULL);
    close(p.lfd);
    usleep(20000); /* the peer's FIN is in: the connection is half closed */
    size_t n = 8 << 20;
    char *big = malloc(n);
    memset(big, 'x', n);
    const char *argv[3] = {"SET", "k", big};
    const size_t lens[3] = {3, 1, n};
    redisReply *r = NULL;
    CHECK_EQ(bus__cmd(c, &r, &err, 3, argv, lens), CA_EUNAVAIL);
    CHECK_CONTAINS(err.msg, "lost Redis at redis://127.0.0.1:");
    CHECK(r == NULL);
    sigset_t pending;
    REQUIRE(sigpending(&pending) == 0);
    CHECK(!sigismember(&pending, SIGPIPE)); /* consumed, not left for later */
    free(big);
    bus_conn_free(c);
}
