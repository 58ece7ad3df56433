#!/usr/bin/env bash
# Black-box tests of `cuda-agent serve` with curl and a pipe, so that the server's C paths run
# under the sanitizer pass too (tests/py/test_serve.py drives it with the real mcp and
# openenv-core clients): MCP over stdio (malformed, out-of-order, oversized lines), Streamable
# HTTP (sessions, Accept/Content-Type rules, 404/405/413, the token), an episode's tool calls
# and finish, /metrics, and a drain on SIGTERM with a call in flight.
. "${CA_REPO:?run through tests/run.sh (make test), which sets CA_REPO}/tests/it/lib.sh"
export CUDA_AGENT_STATE_DIR=$PWD/state
TASKS=$CA_REPO/examples/tasks
INIT='{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"it","version":"0"}}}'
# 2026-07-28's per-request envelope at revision $1.
meta() { printf '"_meta":{"io.modelcontextprotocol/protocolVersion":"%s","io.modelcontextprotocol/clientCapabilities":{}}' "$1"; }
M=$(meta 2026-07-28)
srv_pid=
cleanup() { [ -n "$srv_pid" ] && kill "$srv_pid" 2>/dev/null && wait "$srv_pid" 2>/dev/null; rm -f "$OUT" "$ERR"; }
trap cleanup EXIT

run "$CA" serve
expect "serve needs --stdio or --http" 2 "" "--stdio"
run "$CA" serve --http 0.0.0.0:0
expect "no token off loopback" 2 "" "token"
run "$CA" serve --http nonsense
expect "bad address" 2 "" "ADDR:PORT"

# -- stdio
printf '%s\n' '{"jsonrpc":"2.0","id":0,"method":"tools/list"}' "$INIT" '{oops' \
    '{"jsonrpc":"2.0","method":"notifications/initialized"}' \
    '{"jsonrpc":"2.0","id":2,"method":"tools/list"}' \
    '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"nope"}}' \
    '{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"list_tasks","arguments":{}}}' \
    '[{"jsonrpc":"2.0","id":5,"method":"ping"}]' >"$PWD/in.jsonl"
run "$CA" serve --stdio --root "$PWD/r1" --tasks "$TASKS" <"$PWD/in.jsonl"
expect "stdio: runs to end of input" 0 '"protocolVersion":"2025-11-25"'
assert "stdio: tools/list before initialize is refused" grep -q '"id":0,"error":{"code":-32600' "$OUT"
assert "stdio: parse error" grep -q '"code":-32700' "$OUT"
assert "stdio: unknown tool is -32602" grep -q '"id":3,"error":{"code":-32602' "$OUT"
assert "stdio: list_tasks lists the examples" grep -q 'softmax_last_dim' "$OUT"
assert "stdio: no batches in 2025-11-25" grep -q 'batches are not part' "$OUT"
assert "stdio: one reply per request, none for the notification" [ "$(wc -l <"$OUT")" -eq 7 ]

# -- stdio at 2026-07-28: the first request that passes fixes the era
printf '%s\n' "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/discover\",\"params\":{$(meta 2099-01-01)}}" \
    "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"server/discover\",\"params\":{$M}}" \
    "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"list_tasks\",\"arguments\":{},$M}}" \
    '{"jsonrpc":"2.0","id":4,"method":"tools/list"}' "$INIT" >"$PWD/in2.jsonl"
run "$CA" serve --stdio --root "$PWD/r1" --tasks "$TASKS" <"$PWD/in2.jsonl"
expect "stdio 2026-07-28: runs to end of input" 0 '"supportedVersions":["2026-07-28"]'
assert "stdio 2026-07-28: an unknown revision is -32022 naming ours" grep -q '"id":1,"error":{"code":-32022' "$OUT"
assert "stdio 2026-07-28: a tool call" grep -q '"id":3,"result":.*softmax_last_dim.*"resultType":"complete"' "$OUT"
assert "stdio 2026-07-28: no envelope is -32602" grep -q '"id":4,"error":{"code":-32602' "$OUT"
assert "stdio 2026-07-28: no handshake" grep -q '"id":1,"error":{"code":-32022,"message":"this session speaks' "$OUT"

# -- HTTP
"$CA" serve --http 127.0.0.1:0 --root "$PWD/r2" --tasks "$TASKS" --max-body 65536 \
    2>"$PWD/srv.log" &
srv_pid=$!
for _ in $(seq 100); do grep -q 'listening on' "$PWD/srv.log" && break; sleep 0.1; done
PORT=$(sed -nE 's/.*listening on http:\/\/127\.0\.0\.1:([0-9]+).*/\1/p' "$PWD/srv.log")
assert "http: listening on a free port" [ -n "$PORT" ]
U=http://127.0.0.1:$PORT
hc() { # hc NAME STATUS curl-args... -- checks the HTTP status; body in $OUT
    local name=$1 want=$2
    shift 2
    local got
    got=$(curl -s -m 60 -o "$OUT" -D "$ERR" -w '%{http_code}' "$@")
    if [ "$got" = "$want" ]; then ok "$name"; else bad "$name" "HTTP $got, expected $want"; fi
}
A=(-H 'Accept: application/json, text/event-stream' -H 'Content-Type: application/json')
hc "health" 200 "$U/health"
hc "Accept rules: 406" 406 -H 'Content-Type: application/json' -d "$INIT" "$U/mcp"
hc "Content-Type rules: 415" 415 -H 'Accept: application/json, text/event-stream' -d "$INIT" "$U/mcp"
hc "no session: 400" 400 "${A[@]}" -d '{"jsonrpc":"2.0","id":2,"method":"tools/list"}' "$U/mcp"
hc "GET /mcp: 405" 405 "$U/mcp"
hc "oversized body: 413" 413 "${A[@]}" --data-binary @<(head -c 100000 /dev/zero | tr '\0' ' ') "$U/mcp"
hc "bad JSON: 400" 400 "${A[@]}" -d '{x' "$U/mcp"
assert "bad JSON: -32700" grep -q -- '-32700' "$OUT"
# 2026-07-28: self-contained requests, no session
MH=(-H 'MCP-Protocol-Version: 2026-07-28')
hc "2026-07-28: server/discover" 200 "${A[@]}" "${MH[@]}" -H 'Mcp-Method: server/discover' \
    -d "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/discover\",\"params\":{$M}}" "$U/mcp"
assert "2026-07-28: discover lists the revision" grep -q '"supportedVersions":\["2026-07-28"\]' "$OUT"
assert "2026-07-28: no session id" sh -c "! grep -qi '^mcp-session-id' '$ERR'"
hc "2026-07-28: tools/call" 200 "${A[@]}" "${MH[@]}" -H 'Mcp-Method: tools/call' -H 'Mcp-Name: list_tasks' \
    -d "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"list_tasks\",\"arguments\":{},$M}}" "$U/mcp"
assert "2026-07-28: its result" grep -q softmax_last_dim "$OUT"
hc "2026-07-28: Mcp-Name mismatch: 400" 400 "${A[@]}" "${MH[@]}" -H 'Mcp-Method: tools/call' -H 'Mcp-Name: Bash' \
    -d "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"list_tasks\",$M}}" "$U/mcp"
assert "2026-07-28: header mismatch is -32020" grep -q -- '-32020' "$OUT"
hc "2026-07-28: version header twice: 400" 400 "${A[@]}" "${MH[@]}" "${MH[@]}" -H 'Mcp-Method: tools/list' \
    -d "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/list\",\"params\":{$M}}" "$U/mcp"
assert "2026-07-28: duplicate header is -32020" grep -q 'more than once' "$OUT"
hc "2026-07-28: no version header: 400" 400 "${A[@]}" -H 'Mcp-Method: tools/list' \
    -d "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/list\",\"params\":{$M}}" "$U/mcp"
assert "2026-07-28: missing header is -32020" grep -q -- '-32020' "$OUT"
hc "2026-07-28: no envelope: 400" 400 "${A[@]}" "${MH[@]}" -H 'Mcp-Method: tools/list' \
    -d '{"jsonrpc":"2.0","id":4,"method":"tools/list"}' "$U/mcp"
assert "2026-07-28: no envelope is -32602" grep -q -- '-32602' "$OUT"
hc "unknown revision: 400" 400 "${A[@]}" -H 'MCP-Protocol-Version: 2099-01-01' -H 'Mcp-Method: tools/list' \
    -d "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/list\",\"params\":{$(meta 2099-01-01)}}" "$U/mcp"
assert "unknown revision: -32022 with the supported list" grep -q '"code":-32022.*"supported":\["2026-07-28","2025-11-25"' "$OUT"
hc "2026-07-28: unknown method: 404" 404 "${A[@]}" "${MH[@]}" -H 'Mcp-Method: no/such' \
    -d "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"no/such\",\"params\":{$M}}" "$U/mcp"
hc "2026-07-28: notification: 202" 202 "${A[@]}" "${MH[@]}" -H 'Mcp-Method: notifications/cancelled' \
    -d '{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}' "$U/mcp"
hc "initialize" 200 "${A[@]}" -d "$INIT" "$U/mcp"
SID=$(tr -d '\r' <"$ERR" | sed -n 's/^[Mm]cp-[Ss]ession-[Ii]d: //p')
assert "initialize gives a session id" [ ${#SID} -eq 32 ]
S=("${A[@]}" -H "Mcp-Session-Id: $SID")
hc "notification: 202" 202 "${S[@]}" -d '{"jsonrpc":"2.0","method":"notifications/initialized"}' "$U/mcp"
call() { hc "$1" 200 "${S[@]}" -d "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/call\",\"params\":{\"name\":\"$2\",\"arguments\":$3}}" "$U/mcp"; }
field() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))["result"]
for k in sys.argv[2].split("."): d = d[k]
print(d)' "$OUT" "$1"; }
call "start_episode" start_episode '{"task":"softmax_last_dim"}'
EP=$(field structuredContent.episode_id 2>/dev/null)
if [ -z "$EP" ] && grep -q namespaces "$OUT"; then
    skip userns "http: an episode" "no sandbox on this host"
else
    assert "start_episode: an episode id" [ "${EP#ep-}" != "$EP" ]
    call "Bash in the episode" Bash "{\"episode_id\":\"$EP\",\"command\":\"echo hi-from-\$((6*7))\"}"
    assert "Bash output" grep -q 'hi-from-42' "$OUT"
    call "Read in the episode" Read "{\"episode_id\":\"$EP\",\"file_path\":\"model.py\"}"
    assert "Read output" grep -q 'class Model' "$OUT"
    # Drain: SIGTERM while a call runs; it still gets its answer, then the server exits 0.
    (sleep 0.5; kill -TERM $srv_pid) &
    call "a call in flight over SIGTERM" Bash "{\"episode_id\":\"$EP\",\"command\":\"sleep 1.5; echo drained\"}"
    assert "its result came" grep -q drained "$OUT"
    wait $srv_pid
    assert "the server exits 0 after draining" [ $? -eq 0 ]
    srv_pid=
    "$CA" serve --http 127.0.0.1:$PORT --root "$PWD/r2" --tasks "$TASKS" 2>>"$PWD/srv.log" &
    srv_pid=$!
    for _ in $(seq 100); do curl -sf "$U/health" >/dev/null && break; sleep 0.1; done
    hc "the old session is gone" 404 "${S[@]}" -d '{"jsonrpc":"2.0","id":2,"method":"tools/list"}' "$U/mcp"
    hc "initialize again" 200 "${A[@]}" -d "$INIT" "$U/mcp"
    SID=$(tr -d '\r' <"$ERR" | sed -n 's/^[Mm]cp-[Ss]ession-[Ii]d: //p')
    S=("${A[@]}" -H "Mcp-Session-Id: $SID")
    call "finish on a restarted server" finish "{\"episode_id\":\"$EP\",\"final_eval\":false}"
    assert "finish: reward -1 without a correct evaluation" [ "$(field structuredContent.reward)" = -1 ]
fi
hc "metrics" 200 "$U/metrics"
assert "metrics: the cleanup policy's counters" grep -q '^cuda_agent_episodes_reclaimed_total 0' "$OUT"
assert "metrics: Prometheus text" grep -q '^# TYPE cuda_agent_tool_call_seconds histogram' "$OUT"
hc "DELETE ends the session" 200 -X DELETE -H "Mcp-Session-Id: $SID" "$U/mcp"
hc "the ended session: 404" 404 "${S[@]}" -d '{"jsonrpc":"2.0","id":2,"method":"ping"}' "$U/mcp"
kill -TERM $srv_pid
wait $srv_pid
assert "SIGTERM: exit 0" [ $? -eq 0 ]
srv_pid=

# -- the cleanup policy: ended episodes lose their workspace and snapshots; records, results
#    and live episodes stay
serve3() { # serve3 ARGS...: a server on r3; sets srv_pid, U, S
    "$CA" serve --http 127.0.0.1:0 --root "$PWD/r3" --tasks "$TASKS" "$@" 2>"$PWD/srv3.log" &
    srv_pid=$!
    for _ in $(seq 100); do grep -q 'listening on' "$PWD/srv3.log" && break; sleep 0.1; done
    U=http://127.0.0.1:$(sed -nE 's/.*listening on http:\/\/127\.0\.0\.1:([0-9]+).*/\1/p' "$PWD/srv3.log")
    hc "cleanup: initialize" 200 "${A[@]}" -d "$INIT" "$U/mcp"
    SID=$(tr -d '\r' <"$ERR" | sed -n 's/^[Mm]cp-[Ss]ession-[Ii]d: //p')
    S=("${A[@]}" -H "Mcp-Session-Id: $SID")
}
gone() { for _ in $(seq 300); do [ ! -e "$1" ] && return 0; sleep 0.1; done; return 1; }
start() { # start VAR [EXTRA-ARGS]: an episode's id in VAR
    call "cleanup: start_episode" start_episode "{\"task\":\"softmax_last_dim\"$2}"
    printf -v "$1" '%s' "$(field structuredContent.episode_id)"
}
if [ -z "$EP" ]; then
    skip userns "cleanup policy" "no sandbox on this host"
else
    W=$PWD/r3/workspaces
    serve3 --keep-finished 1
    start EA
    start EB
    start EC
    call "cleanup: finish A" finish "{\"episode_id\":\"$EA\",\"final_eval\":false}"
    assert "cleanup: the newest ended episode keeps its workspace" [ -d "$W/$EA" ]
    call "cleanup: finish B" finish "{\"episode_id\":\"$EB\",\"final_eval\":false}"
    assert "cleanup: past --keep-finished 1 the older one's workspace goes" gone "$W/$EA"
    assert "cleanup: ... and its snapshots and sockets" gone "$PWD/state/$EA"
    assert "cleanup: its record stays" [ -f "$PWD/r3/episodes/$EA.json" ]
    call "cleanup: finish again returns the result" finish "{\"episode_id\":\"$EA\"}"
    assert "cleanup: the result, marked reclaimed" [ "$(field structuredContent.reclaimed)/$(field structuredContent.reward)" = True/-1 ]
    assert "cleanup: the newest ended one is kept" [ -d "$W/$EB" ]
    call "cleanup: a live episode is untouched" Bash "{\"episode_id\":\"$EC\",\"command\":\"echo live-\$((6*7))\"}"
    assert "cleanup: its call runs" grep -q 'live-42' "$OUT"
    kill -TERM $srv_pid
    wait $srv_pid
    # A restarted server applies its policy to what it finds: B ended more than 1 s ago.
    serve3 --keep-finished 5 --finished-ttl 1 --episode-ttl 2
    assert "cleanup after a restart: B's workspace goes (--finished-ttl 1)" gone "$W/$EB"
    call "cleanup after a restart: B's result" finish "{\"episode_id\":\"$EB\"}"
    assert "cleanup after a restart: B's result, marked reclaimed" [ "$(field structuredContent.reclaimed)" = True ]
    # An episode idle past its TTL ends; it is cleaned up like a finished one.
    start ED ',"limits":{"ttl_s":1}'
    assert "cleanup: an idle-expired episode's workspace goes" gone "$W/$ED"
    expired_record() { python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))
assert r["end"] == "expired" and r.get("reclaimed_unix", 0) > 0 and r.get("result") is None' "$1" 2>/dev/null; }
    for _ in $(seq 100); do expired_record "$PWD/r3/episodes/$ED.json" && break; sleep 0.1; done
    assert "cleanup: its record says so" expired_record "$PWD/r3/episodes/$ED.json"
    call "cleanup: the live episode survived both servers" Bash "{\"episode_id\":\"$EC\",\"command\":\"echo still-\$((6*7))\"}"
    assert "cleanup: its call runs after the restart" grep -q 'still-42' "$OUT"
    assert "cleanup: its workspace is there" [ -f "$W/$EC/model.py" ]
    hc "cleanup: metrics" 200 "$U/metrics"
    assert "cleanup: metrics count the removals" grep -q '^cuda_agent_episodes_reclaimed_total 2' "$OUT"
    call "cleanup: finish the live one" finish "{\"episode_id\":\"$EC\",\"final_eval\":false}"
    kill -TERM $srv_pid
    wait $srv_pid
    srv_pid=
fi
finish
