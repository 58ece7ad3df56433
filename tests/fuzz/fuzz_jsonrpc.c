/*
 * libFuzzer target: the MCP JSON-RPC layer (server_rpc) must answer every
 * input - one message per line, on one session, so initialize followed by
 * calls is reached - with nothing (notifications, responses) or a well-formed
 * JSON-RPC reply, and never crash or leak. Each line also goes through the
 * 2026-07-28 HTTP entry (server__rpc_modern), with routing headers that agree
 * with the body on lines of even length and none on the others, so both the
 * ladder's refusals and its dispatch are reached. The server starts no
 * episodes (SERVER_NO_EPISODES); tool calls reach the tools' argument checks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/limits.h"
#include "server/server.h"
#include "server/server_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct server *srv;
static char root[] = "/tmp/fuzz-jsonrpc-XXXXXX";

static void remove_root(void)
{
    struct ca_err err;
    if (fs_remove_tree(root, &err))
        fprintf(stderr, "fuzz_jsonrpc: %s\n", err.msg);
}

static void check_one(const json_t *r)
{
    if (!json_is_object(r) || strcmp(json_string_value(json_object_get(r, "jsonrpc")), "2.0"))
        __builtin_trap();
    const json_t *err = json_object_get(r, "error");
    const json_t *res = json_object_get(r, "result");
    if (!err == !res)
        __builtin_trap();
    if (err) {
        json_int_t c = json_integer_value(json_object_get(err, "code"));
        if (c != -32700 && c != -32600 && c != -32601 && c != -32602 && c != -32603 &&
            c != -32020 && c != -32022)
            __builtin_trap();
        if (!json_is_string(json_object_get(err, "message")))
            __builtin_trap();
    }
}

static void modern_one(const char *p, size_t n)
{
    json_t *m = n % 2 == 0 ? json_loadb(p, n, 0, NULL) : NULL;
    json_t *params = json_object_get(m, "params");
    const char *v = json_string_value(json_object_get(json_object_get(params, "_meta"),
                                                      "io.modelcontextprotocol/protocolVersion"));
    struct server__mcp_headers h = {
        .version = v,
        .method = json_string_value(json_object_get(m, "method")),
        .name = json_string_value(json_object_get(params, "name")),
    };
    json_t *reply = NULL;
    unsigned status = 0;
    server__rpc_modern(srv, p, n, &h, &reply, &status);
    if (reply)
        check_one(reply);
    if (!reply != (status == 202))
        __builtin_trap();
    json_decref(reply);
    json_decref(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!srv) {
        if (!mkdtemp(root))
            abort();
        atexit(remove_root);
        struct server_opts o = {
            .root = root, .state_dir = root, .flags = SERVER_NO_EPISODES, .max_body = 1 << 20};
        struct ca_err err;
        if (server_new(&o, &srv, &err) != 0)
            abort();
    }
    struct server_session *sess = server_session_new(srv);
    char id[64];
    snprintf(id, sizeof(id), "%s", server_session_id(sess));
    const char *p = (const char *)data, *end = p + size;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = (size_t)((nl ? nl : end) - p);
        json_t *reply = NULL;
        bool parse_error;
        server_rpc(srv, &sess, p, n, &reply, &parse_error);
        if (json_is_array(reply)) {
            size_t i;
            json_t *r;
            json_array_foreach(reply, i, r) check_one(r);
        } else if (reply) {
            check_one(reply);
        }
        json_decref(reply);
        modern_one(p, n);
        p += n + (nl ? 1 : 0);
    }
    (void)server_session_end(srv, id);
    server_session_release(srv, sess);
    return 0;
}
