/* Unit tests of the server's protocol layer (server/mcp.c, the WebSocket digest, addresses),
 * in process and without episodes (SERVER_NO_EPISODES). */
#include "test.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/hash.h"
#include "core/buf.h"
#include "server/server.h"
#include "server/server_internal.h"

static struct server *new_server(void)
{
    char *root = xstrfmt("%s/server-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    REQUIRE(mkdtemp(root) != NULL);
    struct server_opts o = {.root = root, .state_dir = root, .flags = SERVER_NO_EPISODES};
    struct server *s = NULL;
    struct ca_err err = {0};
    REQUIRE(server_new(&o, &s, &err) == 0);
    free(root);
    return s;
}

/* The reply to one line (new reference, NULL when none). */
static json_t *rpc(struct server *s, struct server_session **sess, const char *msg)
{
    json_t *reply = NULL;
    bool pe;
    server_rpc(s, sess, msg, strlen(msg), &reply, &pe);
    return reply;
}

static int code_of(const json_t *r)
{
    return (int)json_integer_value(json_object_get(json_object_get(r, "error"), "code"));
}

#define INIT(v)                                                                                    \
    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"" v \
    "\"}}"

TEST(server_rpc_errors_and_order)
{
    struct server *s = new_server();
    struct server_session *sess = server_session_new(s);
    static const struct {
        const char *msg;
        int code;
    } before[] = {
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}", -32600},
        {"{oops", -32700},
        {"[]", -32600},
        {"42", -32600},
        {"{\"jsonrpc\":\"2.0\",\"id\":true,\"method\":\"ping\"}", -32600},
        {"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"nope\"}", -32601},
        {"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"initialize\",\"params\":{}}", -32602},
    };
    for (size_t i = 0; i < ARRAY_SIZE(before); i++) {
        json_t *r = rpc(s, &sess, before[i].msg);
        CHECK_EQ(code_of(r), before[i].code);
        json_decref(r);
    }
    json_t *r = rpc(s, &sess, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}");
    CHECK(r == NULL);
    r = rpc(s, &sess, "{\"jsonrpc\":\"2.0\",\"id\":9,\"result\":{}}");
    CHECK(r == NULL);
    r = rpc(s, &sess, INIT("1999-01-01")); /* unknown: the newest is offered */
    CHECK_STR(json_string_value(json_object_get(json_object_get(r, "result"), "protocolVersion")),
              "2025-11-25");
    json_decref(r);
    r = rpc(s, &sess, INIT("2025-11-25"));
    CHECK_EQ(code_of(r), -32600); /* initialized once only */
    json_decref(r);
    r = rpc(s, &sess,
            "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":"
            "{\"name\":\"start_episode\",\"arguments\":{\"task\":\"x\"}}}");
    CHECK(json_is_true(json_object_get(json_object_get(r, "result"), "isError")));
    json_decref(r);
    r = rpc(s, &sess,
            "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":"
            "{\"name\":\"Bash\",\"arguments\":{\"episode_id\":\"../../etc\"}}}");
    CHECK(json_is_true(json_object_get(json_object_get(r, "result"), "isError")));
    json_decref(r);
    r = rpc(s, &sess, "[{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"ping\"}]");
    CHECK_EQ(code_of(r), -32600); /* no batches in 2025-11-25 */
    json_decref(r);
    server_free(s);
}

TEST(server_rpc_batches_on_2025_03_26)
{
    struct server *s = new_server();
    struct server_session *sess = NULL; /* HTTP: initialize makes the session */
    json_t *r = rpc(s, &sess, INIT("2025-03-26"));
    REQUIRE(sess != NULL);
    CHECK_STR(server_session_version(sess), "2025-03-26");
    struct server_session *again = server_session_find(s, server_session_id(sess));
    CHECK(again == sess);
    server_session_release(s, again);
    json_decref(r);
    r = rpc(s, &sess,
            "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"},"
            "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/x\"},"
            "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"nope\"}]");
    REQUIRE(json_is_array(r));
    CHECK_EQ(json_array_size(r), 2); /* nothing for the notification */
    CHECK_EQ(code_of(json_array_get(r, 1)), -32601);
    json_decref(r);
    r = rpc(s, &sess, "[{\"jsonrpc\":\"2.0\",\"method\":\"notifications/x\"}]");
    CHECK(r == NULL);
    char id[64];
    snprintf(id, sizeof(id), "%s", server_session_id(sess));
    CHECK_EQ(server_session_end(s, id), 0);
    CHECK(server_session_find(s, id) == NULL);
    CHECK_EQ(server_session_end(s, id), CA_ENOTFOUND);
    /* Ended while held: still readable until released (a DELETE racing a call). */
    CHECK_STR(server_session_version(sess), "2025-03-26");
    server_session_release(s, sess);
    server_free(s);
}

#define ENV(v)                                                                                     \
    "\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"" v                                  \
    "\",\"io.modelcontextprotocol/clientCapabilities\":{}}"

/* 2026-07-28 over HTTP: the ladder (envelope, headers, revision) and its HTTP statuses. */
TEST(server_rpc_modern_ladder)
{
    struct server *s = new_server();
    static const struct {
        const char *body, *version, *method, *name, *dup;
        int code;
        unsigned status;
    } cases[] = {
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/discover\",\"params\":{" ENV(
             "2026-07-28") "}}",
         "2026-07-28", "server/discover", NULL, NULL, 0, 200},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}", "2026-07-28", "tools/list",
         NULL, NULL, -32602, 400},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{" ENV(
             "2026-07-28") "}}",
         NULL, "tools/list", NULL, NULL, -32020, 400},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{" ENV(
             "2026-07-28") "}}",
         "2026-07-28", "tools/list", NULL, "Mcp-Method", -32020, 400},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":"
         "\"list_tasks\"," ENV("2026-07-28") "}}",
         "2026-07-28", "tools/call", "=?base64?bGlzdF90YXNrcw==?=", NULL, 0, 200},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":"
         "\"list_tasks\"," ENV("2026-07-28") "}}",
         "2026-07-28", "tools/call", "=?base64?QmFzaA==?=", NULL, -32020, 400},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{" ENV(
             "2030-01-01") "}}",
         "2030-01-01", "tools/list", NULL, NULL, -32022, 400},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{" ENV("2026-07-28") "}}",
         "2026-07-28", "ping", NULL, NULL, -32601, 404},
        {"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\"}", "2026-07-28", NULL, NULL,
         NULL, 0, 202},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}", "2026-07-28", NULL, NULL, NULL, -32600,
         400},
        {"{x", "2026-07-28", NULL, NULL, NULL, -32700, 400},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct server__mcp_headers h = {cases[i].version, cases[i].method, cases[i].name,
                                        cases[i].dup};
        json_t *r = NULL;
        unsigned status = 0;
        server__rpc_modern(s, cases[i].body, strlen(cases[i].body), &h, &r, &status);
        CHECK_EQ(status, cases[i].status);
        CHECK_EQ(code_of(r), cases[i].code);
        if (cases[i].code == -32022) {
            json_t *sup =
                json_object_get(json_object_get(json_object_get(r, "error"), "data"), "supported");
            CHECK_STR(json_string_value(json_array_get(sup, 0)), "2026-07-28");
        }
        if (status == 200)
            CHECK_STR(
                json_string_value(json_object_get(json_object_get(r, "result"), "resultType")),
                "complete");
        json_decref(r);
    }
    server_free(s);
}

TEST(server_websocket_accept_digest)
{
    /* RFC 6455 section 1.3's example. */
    const char *in = "dGhlIHNhbXBsZSBub25jZQ==258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    unsigned char d[20];
    sha1_digest(in, strlen(in), d);
    struct buf b;
    buf_init(&b, 64);
    REQUIRE(server__base64(d, sizeof(d), &b) == 0);
    CHECK_STR(b.data, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    buf_reset(&b);
    sha1_digest("", 0, d); /* FIPS 180: da39a3ee... */
    CHECK_EQ(d[0], 0xda);
    CHECK_EQ(d[19], 0x09);
    REQUIRE(server__base64((const unsigned char *)"ab", 2, &b) == 0);
    CHECK_STR(b.data, "YWI=");
    buf_release(&b);
}

TEST(server_addresses)
{
    CHECK_EQ(server_addr_loopback("127.0.0.1:8000", NULL), 1);
    CHECK_EQ(server_addr_loopback("[::1]:0", NULL), 1);
    CHECK_EQ(server_addr_loopback(":8000", NULL), 1); /* no host: loopback */
    CHECK_EQ(server_addr_loopback("0.0.0.0:8000", NULL), 0);
    CHECK_EQ(server_addr_loopback("10.1.2.3:1", NULL), 0);
    CHECK(server_addr_loopback("127.0.0.1", NULL) < 0);
    CHECK(server_addr_loopback("127.0.0.1:99999", NULL) < 0);
}
