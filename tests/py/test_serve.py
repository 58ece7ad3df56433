"""`cuda-agent serve`, driven by the official clients: the `mcp` SDK over stdio and Streamable
HTTP (whole episodes: start_episode, tool calls, evaluate on the CPU-mode evaluator, finish),
the `openenv-core` client over its WebSocket session and the plain HTTP routes, and raw HTTP for
what a well-behaved client never sends (malformed, oversized, unauthorised, out-of-order)."""

import asyncio
import http.client
import json
import os
import pathlib
import re
import signal
import subprocess
import threading
import time

import pytest

mcp = pytest.importorskip("mcp")
from mcp import Client, StdioServerParameters  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).resolve().parent
CA = os.environ.get("CUDA_AGENT") or str(REPO / os.environ.get("BUILD", "build") / "cuda-agent")
CPU = REPO / "tests" / "eval" / "cpu"
TASK = str(CPU / "task.py")


def required(need):
    return need in os.environ.get("TEST_REQUIRE", "").split(",")


if not os.access(CA, os.X_OK):
    pytest.skip(f"{CA} is not built (make)", allow_module_level=True)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    base = tmp_path_factory.mktemp("serve")
    e = dict(os.environ)
    e["CUDA_AGENT_STATE_DIR"] = str(base / "state")
    # The evaluator cache the it/ tier's CPU-mode tests share (a cold compile with the torch
    # headers takes a minute on two cores; the fixture's sources are the same).
    e["CUDA_AGENT_CACHE_DIR"] = os.environ.get("CUDA_AGENT_TEST_CACHE_DIR",
                                               str(REPO / ".test-cache"))
    e.pop("CUDA_AGENT_EVALUATOR", None)
    # The sandbox needs user namespaces: without them the episode tests cannot run here.
    ws = base / "probe"
    subprocess.run([CA, "workspace", "create", "--task", TASK, str(ws)], check=True,
                   capture_output=True, env=e)
    r = subprocess.run([CA, "tool", "-w", str(ws), "-e", "probe", "Bash", '{"command":"true"}'],
                       capture_output=True, env=e, text=True)
    subprocess.run([CA, "tool", "-e", "probe", "--close"], capture_output=True, env=e)
    if r.returncode == 69:
        if required("userns"):
            pytest.fail("no sandbox, but TEST_REQUIRE lists userns: " + r.stderr)
        pytest.skip("no sandbox on this host (user namespaces): " + r.stderr.strip())
    e["_BASE"] = str(base)
    return e


def serve_args(env, name, *extra):
    return ["serve", "--root", os.path.join(env["_BASE"], name), "--tasks", TASK,
            "--device", "cpu", *extra]


class Server:
    """`cuda-agent serve --http 127.0.0.1:0`, its port read from its first line."""

    def __init__(self, env, name, *extra, token=None):
        e = dict(env)
        if token:
            e["CUDA_AGENT_SERVE_TOKEN"] = token
        self.proc = subprocess.Popen([CA, *serve_args(env, name, "--http", "127.0.0.1:0", *extra)],
                                     stderr=subprocess.PIPE, text=True, env=e)
        line = self.proc.stderr.readline()
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        assert m, f"no listening line: {line!r}"
        self.port = int(m.group(1))
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()

    def request(self, method, path, body=None, headers=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        data = r.read()
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        c.close()
        try:
            return r.status, hdrs, json.loads(data) if data else None
        except ValueError:
            return r.status, hdrs, data.decode()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture(scope="module")
def server(env):
    s = Server(env, "http-main")
    yield s
    assert s.stop() == 0


MCP_H = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "0"}}}


def raw_session(server):
    st, h, body = server.request("POST", "/mcp", INIT, MCP_H)
    assert st == 200 and body["result"]["protocolVersion"] == "2025-11-25"
    sid = h["mcp-session-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", sid)
    st, _, _ = server.request("POST", "/mcp", {"jsonrpc": "2.0", "method":
                                               "notifications/initialized"},
                              {**MCP_H, "Mcp-Session-Id": sid})
    assert st == 202
    return sid


def sc(result):
    assert result.structured_content is not None, result
    return result.structured_content


def text(result):
    return "".join(getattr(c, "text", "") for c in result.content)


async def whole_episode(client, evaluate_stages):
    tools = {t.name for t in (await client.list_tools()).tools}
    assert {"list_tasks", "start_episode", "evaluate", "finish", "Bash", "Read", "Write",
            "Edit", "MultiEdit", "Glob", "Grep", "TodoWrite"} <= tools
    tasks = sc(await client.call_tool("list_tasks", {}))
    assert tasks["total"] == 1
    task_id = tasks["tasks"][0]["id"]
    r = await client.call_tool("start_episode", {"task": task_id, "seed": 7})
    assert not r.is_error, text(r)
    start = sc(r)
    ep = start["episode_id"]
    assert "SKILL" in start["system_prompt"] or "kernel" in start["system_prompt"].lower()
    assert "class Model" in start["task_message"]
    # The agent's tools: a shell that keeps state, a read-before-write policy.
    r = await client.call_tool("Bash", {"episode_id": ep, "command": "cd kernels && X=5; pwd"})
    assert not r.is_error and "/workspace/kernels" in text(r) and sc(r)["exit_code"] == 0
    r = await client.call_tool("Bash", {"episode_id": ep, "command": "echo $X; pwd"})
    assert "5\n/workspace/kernels" in text(r)
    r = await client.call_tool("Write", {"episode_id": ep, "file_path": "/workspace/model_new.py",
                                         "content": (CPU / "sol" / "model_new.py").read_text()})
    assert r.is_error and "Read" in text(r)  # not read yet
    await client.call_tool("Read", {"episode_id": ep, "file_path": "/workspace/model_new.py"})
    for f in ["model_new.py", "kernels/swish_cpu.cu", "kernels/swish_cpu_binding.cpp"]:
        r = await client.call_tool("Write", {"episode_id": ep, "file_path": f"/workspace/{f}",
                                             "content": (CPU / "sol" / f).read_text()})
        assert not r.is_error, text(r)
    r = await client.call_tool("Glob", {"episode_id": ep, "pattern": "kernels/*"})
    assert "swish_cpu.cu" in text(r)
    records = []
    for stage in evaluate_stages:
        r = await client.call_tool("evaluate", {"episode_id": ep, "stage": stage})
        rec = sc(r)
        assert rec["ok"] is True and not r.is_error, text(r)
        assert rec["command"] == stage and isinstance(rec["seq"], int)
        records.append(rec)
    r = await client.call_tool("finish", {"episode_id": ep, "final_eval": False})
    fin = sc(r)
    assert fin["episode_id"] == ep and fin["evaluations"] == len(evaluate_stages)
    # After finish the episode takes no more tool calls; finish again returns the same result.
    r = await client.call_tool("Bash", {"episode_id": ep, "command": "true"})
    assert r.is_error and "finished" in text(r)
    again = sc(await client.call_tool("finish", {"episode_id": ep}))
    assert again["reward"] == fin["reward"]
    return fin, records


def require_cpu_evaluator():
    """The CPU-mode evaluator needs PyTorch (for the harness) and nvcc (for the .cu), as
    tests/it/lib.sh's require_cpu_evaluator says."""
    import importlib.util
    import shutil
    for need, have in (("torch", importlib.util.find_spec("torch") is not None),
                       ("nvcc", shutil.which("nvcc") or os.access("/usr/local/cuda/bin/nvcc",
                                                                  os.X_OK))):
        if not have:
            if required(need):
                pytest.fail(f"no {need}, but TEST_REQUIRE lists it")
            pytest.skip(f"the CPU-mode evaluator needs {need}")


def test_stdio_whole_episode(env):
    """The mcp SDK over stdio: a whole episode, verified on the CPU-mode evaluator."""
    require_cpu_evaluator()
    params = StdioServerParameters(command=CA, args=serve_args(env, "stdio", "--stdio"), env=env)

    async def main():
        # The default (auto) mode probes server/discover and adopts 2026-07-28.
        async with Client(params, read_timeout_seconds=600) as client:
            assert client.protocol_version == "2026-07-28"
            return await whole_episode(client, ["compile", "verify"])

    fin, recs = asyncio.run(main())
    # A passing ./verify is a correct, untimed candidate: reward 1, and it is the best.
    assert fin["reward"] == 1 and fin["best"]["seq"] == recs[1]["seq"]
    assert os.path.isdir(fin["best"]["snapshot_dir"])


def test_http_whole_episode(server):
    """The mcp SDK over Streamable HTTP: the same episode, compile-only (cached compile)."""
    require_cpu_evaluator()

    async def main():
        async with Client(server.url + "/mcp", read_timeout_seconds=600) as client:
            assert client.protocol_version == "2026-07-28"
            return await whole_episode(client, ["compile"])

    fin, _ = asyncio.run(main())
    assert fin["reward"] == -1 and fin["best"] is None  # a compile alone is no correct result


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_legacy_handshake_episode(env, server, transport):
    """A client held to the initialize handshake (mode="legacy") still runs an episode."""
    target = server.url + "/mcp" if transport == "http" else StdioServerParameters(
        command=CA, args=serve_args(env, "stdio-legacy", "--stdio"), env=env)

    async def main():
        async with Client(target, mode="legacy", read_timeout_seconds=600) as client:
            assert client.protocol_version == "2025-11-25"
            return await whole_episode(client, [])

    fin, _ = asyncio.run(main())
    assert fin["reward"] == -1 and fin["evaluations"] == 0


def test_http_transport_errors(server):
    st, _, body = server.request("POST", "/mcp", INIT, {"Content-Type": "application/json"})
    assert st == 406 and body["error"]["code"] == -32600
    st, _, _ = server.request("POST", "/mcp", INIT, {"Accept": MCP_H["Accept"],
                                                     "Content-Type": "text/plain"})
    assert st == 415
    tl = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    st, _, body = server.request("POST", "/mcp", tl, MCP_H)
    assert st == 400 and "Mcp-Session-Id" in body["error"]["message"]
    st, _, _ = server.request("POST", "/mcp", tl, {**MCP_H, "Mcp-Session-Id": "0" * 32})
    assert st == 404
    st, _, body = server.request("POST", "/mcp", "{nope", MCP_H)
    assert st == 400 and body["error"]["code"] == -32700 and body["id"] is None
    # The 2026-07-28 probe without its envelope and header: the ladder's first rung.
    st, _, body = server.request("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method":
                                                  "server/discover", "params": {}}, MCP_H)
    assert st == 400 and body["error"]["code"] == -32602 and "_meta" in body["error"]["message"]
    st, h, _ = server.request("GET", "/mcp", None, {"Accept": "text/event-stream"})
    assert st == 405 and "POST" in h["allow"]
    sid = raw_session(server)
    H = {**MCP_H, "Mcp-Session-Id": sid}
    # Inline task code runs in the evaluator's trusted process: not from HTTP clients unless
    # the operator allows it.
    st, _, body = server.request("POST", "/mcp", {
        "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "start_episode", "arguments": {"code": (CPU / "task.py").read_text()}}}, H)
    assert body["result"]["isError"] and "--allow-task-code" in \
        body["result"]["content"][0]["text"]
    st, _, body = server.request("POST", "/mcp", tl, H)
    assert st == 200 and any(t["name"] == "finish" for t in body["result"]["tools"])
    cases = [
        ({"jsonrpc": "2.0", "id": 3, "method": "no/such"}, -32601),
        ({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "nope"}}, -32602),
        ({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": []}, -32602),
        ({"jsonrpc": "2.0", "id": 6, "method": "tools/call"}, -32602),
        ({"jsonrpc": "1.0", "id": 7, "method": "ping"}, -32600),
        ({"jsonrpc": "2.0", "id": {"x": 1}, "method": "ping"}, -32600),
        ({"jsonrpc": "2.0", "id": 8, "method": "initialize", "params": INIT["params"]}, -32600),
        ([{"jsonrpc": "2.0", "id": 9, "method": "ping"}], -32600),  # no batches in 2025-11-25
        ("[]", -32600),
        ("7", -32600),
    ]
    for msg, code in cases:
        st, _, body = server.request("POST", "/mcp", msg, H)
        assert body["error"]["code"] == code, (msg, body)
    st, _, body = server.request("POST", "/mcp", {"jsonrpc": "2.0", "id": 10, "method": "ping"}, H)
    assert st == 200 and body == {"jsonrpc": "2.0", "id": 10, "result": {}}
    # A tool's refusal is a result the model reads (isError), not a protocol error.
    st, _, body = server.request("POST", "/mcp", {"jsonrpc": "2.0", "id": 11, "method":
                                                  "tools/call", "params": {
                                                      "name": "Bash", "arguments": {
                                                          "episode_id": "ep-none",
                                                          "command": "true"}}}, H)
    assert body["result"]["isError"] is True and "no episode" in \
        body["result"]["content"][0]["text"]
    st, _, _ = server.request("POST", "/mcp", {"jsonrpc": "2.0", "id": 12, "method": "ping"},
                              {**H, "MCP-Protocol-Version": "2024-11-05"})
    assert st == 400
    deep = "[" * 5000 + "]" * 5000
    st, _, body = server.request("POST", "/mcp", deep, H)
    assert st == 400 and body["error"]["code"] == -32600 and "deep" in body["error"]["message"] \
        or "depth" in body["error"]["message"] or "nest" in body["error"]["message"]
    st, _, body = server.request("POST", "/mcp", "x" * (9 << 20), H)
    assert st == 413
    st, _, _ = server.request("POST", "/mcp", INIT, {**MCP_H, "Origin": "http://evil.example"})
    assert st == 403
    st, _, _ = server.request("POST", "/mcp", INIT, {**MCP_H, "Origin": "http://localhost:3000"})
    assert st == 200
    st, _, _ = server.request("DELETE", "/mcp", None, {"Mcp-Session-Id": sid})
    assert st == 200
    st, _, _ = server.request("POST", "/mcp", tl, H)
    assert st == 404
    st, _, _ = server.request("GET", "/nowhere")
    assert st == 404


MODERN = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"}}


def modern(method, params=None, id_=1, meta=None):
    return {"jsonrpc": "2.0", "id": id_, "method": method,
            "params": {**(params or {}), "_meta": META if meta is None else meta}}


def modern_h(method, version=MODERN, name=None):
    h = {**MCP_H, "MCP-Protocol-Version": version, "Mcp-Method": method}
    if name is not None:
        h["Mcp-Name"] = name
    return h


def raw_post(server, body, header_lines):
    """A POST with header lines as given (http.client's dict would fold duplicates)."""
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    data = json.dumps(body).encode()
    c.putrequest("POST", "/mcp")
    for k, v in [*header_lines, ("Content-Length", str(len(data)))]:
        c.putheader(k, v)
    c.endheaders(data)
    r = c.getresponse()
    out = r.status, json.loads(r.read())
    c.close()
    return out


def test_http_modern_protocol(server):
    """2026-07-28 over Streamable HTTP: self-contained requests, no session, the spec's errors
    for a request whose envelope, headers or revision are wrong."""
    st, h, body = server.request("POST", "/mcp", modern("server/discover"),
                                 modern_h("server/discover"))
    assert st == 200 and "mcp-session-id" not in h
    res = body["result"]
    assert res["supportedVersions"] == [MODERN] and res["resultType"] == "complete"
    assert res["capabilities"]["tools"] == {"listChanged": False}
    assert res["cacheScope"] == "public" and res["ttlMs"] > 0
    assert res["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "cuda-agent"
    st, _, body = server.request("POST", "/mcp", modern("tools/list"), modern_h("tools/list"))
    assert st == 200 and body["result"]["resultType"] == "complete"
    assert any(t["name"] == "finish" for t in body["result"]["tools"])
    call_ = modern("tools/call", {"name": "list_tasks", "arguments": {}})
    st, _, body = server.request("POST", "/mcp", call_, modern_h("tools/call", name="list_tasks"))
    assert st == 200 and body["result"]["structuredContent"]["total"] == 1
    assert body["result"]["resultType"] == "complete"
    # Mcp-Name in the SDK's base64 sentinel form is the same name.
    st, _, body = server.request("POST", "/mcp", call_, modern_h(
        "tools/call", name="=?base64?bGlzdF90YXNrcw==?="))
    assert st == 200 and "result" in body
    # A session id has no meaning at 2026-07-28: an unknown one is not looked up.
    st, _, body = server.request("POST", "/mcp", modern("tools/list"),
                                 {**modern_h("tools/list"), "Mcp-Session-Id": "0" * 32})
    assert st == 200 and "result" in body

    def err(st, body, status, code):
        assert st == status and body["error"]["code"] == code, (st, body)
        return body["error"]

    # An unknown revision: -32022 naming what is served (the handshake's too, for fallback).
    e = err(*server.request("POST", "/mcp", modern("server/discover", meta={
        **META, "io.modelcontextprotocol/protocolVersion": "2099-01-01"}),
        modern_h("server/discover", "2099-01-01"))[::2], 400, -32022)
    assert e["data"]["requested"] == "2099-01-01"
    assert e["data"]["supported"][0] == MODERN and "2025-11-25" in e["data"]["supported"]
    # Header and body disagree, or the header is missing, or named twice: -32020.
    err(*server.request("POST", "/mcp", modern("tools/list"),
                        modern_h("tools/list", "2099-01-01"))[::2], 400, -32020)
    err(*server.request("POST", "/mcp", modern("tools/list"), MCP_H)[::2], 400, -32020)
    err(*server.request("POST", "/mcp", modern("tools/list"),
                        modern_h("tools/call"))[::2], 400, -32020)
    err(*server.request("POST", "/mcp", call_, modern_h("tools/call", name="Bash"))[::2],
        400, -32020)
    err(*server.request("POST", "/mcp", call_, modern_h("tools/call"))[::2], 400, -32020)
    hl = list(modern_h("tools/list").items())
    e = err(*raw_post(server, modern("tools/list"), hl + [("MCP-Protocol-Version", MODERN)]),
            400, -32020)
    assert "more than once" in e["message"]
    # A modern request without its envelope, or without one of its two keys: -32602.
    e = err(*server.request("POST", "/mcp", {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                            modern_h("tools/list"))[::2], 400, -32602)
    assert "_meta" in e["message"]
    e = err(*server.request("POST", "/mcp", modern("tools/list", meta={
        "io.modelcontextprotocol/protocolVersion": MODERN}), modern_h("tools/list"))[::2],
        400, -32602)
    assert "clientCapabilities" in e["message"]
    e = err(*server.request("POST", "/mcp", modern("tools/list", meta={
        "io.modelcontextprotocol/clientCapabilities": {}}), modern_h("tools/list"))[::2],
        400, -32602)
    assert "protocolVersion" in e["message"]
    # No handshake and no ping at 2026-07-28; unknown methods are 404.
    e = err(*server.request("POST", "/mcp", modern("initialize", INIT["params"]),
                            modern_h("initialize"))[::2], 400, -32022)
    assert "2025-11-25" in e["data"]["supported"]
    err(*server.request("POST", "/mcp", modern("ping"), modern_h("ping"))[::2], 404, -32601)
    err(*server.request("POST", "/mcp", modern("no/such"), modern_h("no/such"))[::2], 404, -32601)
    err(*server.request("POST", "/mcp", [modern("tools/list")], modern_h("tools/list"))[::2],
        400, -32600)
    err(*server.request("POST", "/mcp", "{nope", modern_h("tools/list"))[::2], 400, -32700)
    # Notifications are acknowledged and dropped, at a revision we serve.
    note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
    st, _, _ = server.request("POST", "/mcp", note, modern_h("notifications/cancelled"))
    assert st == 202
    err(*server.request("POST", "/mcp", note, modern_h("notifications/cancelled",
                                                       "2099-01-01"))[::2], 400, -32022)
    # A handshake session refuses requests in the 2026-07-28 envelope.
    sid = raw_session(server)
    err(*server.request("POST", "/mcp", modern("tools/list"), {
        **MCP_H, "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"})[::2], 200, -32600)
    server.request("DELETE", "/mcp", None, {"Mcp-Session-Id": sid})


def test_stdio_modern_protocol(env):
    """2026-07-28 on stdio: the first request that passes fixes the session's era."""
    lines = [
        modern("server/discover", id_=1, meta={**META, "io.modelcontextprotocol/protocolVersion":
                                               "2099-01-01"}),  # not served: era still open
        modern("server/discover", id_=2),
        modern("tools/call", {"name": "list_tasks", "arguments": {}}, id_=3),
        {"jsonrpc": "2.0", "id": 4, "method": "tools/list"},  # no envelope
        {**INIT, "id": 5},  # no handshake on a 2026-07-28 session
        modern("tools/list", id_=6, meta={**META, "io.modelcontextprotocol/protocolVersion":
                                          "2025-11-25"}),
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 9}},
        modern("ping", id_=7),
        modern("tools/list", id_=8, meta={"io.modelcontextprotocol/clientCapabilities": {}}),
    ]
    data = "\n".join(json.dumps(x) for x in lines) + "\n"
    r = subprocess.run([CA, *serve_args(env, "stdio-modern", "--stdio")], input=data,
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    out = {m["id"]: m for m in map(json.loads, r.stdout.splitlines())}
    assert len(out) == 8
    assert out[1]["error"]["code"] == -32022
    assert "2025-11-25" in out[1]["error"]["data"]["supported"]
    assert out[2]["result"]["supportedVersions"] == [MODERN]
    assert out[3]["result"]["structuredContent"]["total"] == 1
    assert out[4]["error"]["code"] == -32602 and "_meta" in out[4]["error"]["message"]
    assert out[5]["error"]["code"] == -32022
    assert out[5]["error"]["data"] == {"supported": [MODERN], "requested": "2025-11-25"}
    assert out[6]["error"]["code"] == -32022 and out[6]["error"]["data"]["supported"] == [MODERN]
    assert out[7]["error"]["code"] == -32601
    assert out[8]["error"]["code"] == -32602 and "protocolVersion" in out[8]["error"]["message"]
    # ... and after initialize a request in the envelope is refused.
    data = "\n".join(json.dumps(x) for x in [INIT, modern("tools/list", id_=2)]) + "\n"
    r = subprocess.run([CA, *serve_args(env, "stdio-modern", "--stdio")], input=data,
                       capture_output=True, text=True, env=env, timeout=60)
    out = {m["id"]: m for m in map(json.loads, r.stdout.splitlines())}
    assert out[1]["result"]["protocolVersion"] == "2025-11-25"
    assert out[2]["error"]["code"] == -32600


def test_stdio_out_of_order_and_malformed(env):
    lines = [
        {"jsonrpc": "2.0", "id": "early", "method": "tools/list"},  # before initialize
        INIT,
        "not json",
        {"jsonrpc": "2.0", "method": "notifications/initialized"},  # no reply
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
         "params": {"name": "start_episode", "arguments": {"task": "x", "code": "y"}}},
        {"jsonrpc": "2.0", "id": 4, "result": {}},  # a response: no reply
        {"jsonrpc": "2.0", "id": 5, "method": "ping"},
    ]
    data = "\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n"
    data += "[" + " " * (9 << 20) + "]\n"  # over the request limit
    data += json.dumps({"jsonrpc": "2.0", "id": 6, "method": "ping"}) + "\n"
    r = subprocess.run([CA, *serve_args(env, "stdio-raw", "--stdio")], input=data,
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    out = [json.loads(x) for x in r.stdout.splitlines()]
    by_id = {m.get("id"): m for m in out}
    early = by_id["early"]["error"]
    assert early["code"] == -32600 and "initialize" in early["message"]
    assert by_id[1]["result"]["protocolVersion"] == "2025-11-25"
    assert [m["error"]["code"] for m in out if m.get("id") is None] == [-32700, -32600]
    assert by_id[3]["result"]["isError"] is True
    assert by_id[5]["result"] == {} and by_id[6]["result"] == {}
    # 1, 2, the parse error, 3, 5, the line too large, 6: nothing for the notification or
    # the client's response.
    assert len(out) == 7


def test_token_and_loopback(env):
    r = subprocess.run([CA, *serve_args(env, "public", "--http", "0.0.0.0:0")],
                       capture_output=True, text=True, env=env, timeout=30)
    assert r.returncode == 2 and "token" in r.stderr
    s = Server(env, "tok", token="s3cret")
    try:
        st, _, _ = s.request("GET", "/health")
        assert st == 200
        st, h, _ = s.request("POST", "/mcp", INIT, MCP_H)
        assert st == 401 and h["www-authenticate"] == "Bearer"
        st, _, _ = s.request("POST", "/mcp", INIT, {**MCP_H, "Authorization": "Bearer wrong"})
        assert st == 401
        st, _, _ = s.request("GET", "/metrics")
        assert st == 401
        st, _, body = s.request("POST", "/mcp", INIT, {**MCP_H, "Authorization": "Bearer s3cret"})
        assert st == 200 and "result" in body
    finally:
        assert s.stop() == 0


def call(server, sid, name, args, id_=100):
    st, _, body = server.request("POST", "/mcp", {
        "jsonrpc": "2.0", "id": id_, "method": "tools/call",
        "params": {"name": name, "arguments": args}}, {**MCP_H, "Mcp-Session-Id": sid})
    assert st == 200, body
    return body["result"]


def test_limits(env):
    s = Server(env, "limits", "--max-episodes", "1", "--episode-wall", "2", "--max-output", "2048",
               "--allow-task-code")
    try:
        sid = raw_session(s)
        r = call(s, sid, "start_episode", {"code": (CPU / "task.py").read_text()})
        assert not r["isError"], r
        ep = r["structuredContent"]["episode_id"]
        r2 = call(s, sid, "start_episode", {"task": "task"})
        assert r2["isError"] and "maximum of 1" in r2["content"][0]["text"]
        r = call(s, sid, "Bash", {"episode_id": ep, "command": "head -c 100000 /dev/zero | tr "
                                  "'\\0' a"})
        assert len(r["content"][0]["text"]) < 2400 and "output limit" in r["content"][0]["text"]
        r = call(s, sid, "Bash", {"episode_id": ep, "command": "true", "bogus": 1})
        assert r["isError"]  # the tool's own argument check, relayed
        time.sleep(2.5)
        r = call(s, sid, "Bash", {"episode_id": ep, "command": "true"})
        assert r["isError"] and "wall-clock" in r["content"][0]["text"]
        r = call(s, sid, "finish", {"episode_id": ep, "final_eval": False})
        assert not r["isError"] and r["structuredContent"]["reward"] == -1
        st, _, m = s.request("GET", "/metrics")
        assert st == 200 and "cuda_agent_episodes_finished_total 1" in m
        assert re.search(r"cuda_agent_tool_call_seconds_count [1-9]", m)
    finally:
        assert s.stop() == 0


def test_drain_and_reattach(env):
    """SIGTERM lets a call in flight finish and answer; a new server on the same root finds
    the episode again (it outlived the server), shell state and all."""
    s = Server(env, "drain")
    sid = raw_session(s)
    ep = call(s, sid, "start_episode", {"task": "task"})["structuredContent"]["episode_id"]
    call(s, sid, "Bash", {"episode_id": ep, "command": "export KEEP=kept"})
    got = {}

    def slow():
        got["r"] = call(s, sid, "Bash", {"episode_id": ep, "command": "sleep 2; echo done"}, 7)

    t = threading.Thread(target=slow)
    t.start()
    time.sleep(0.7)
    s.proc.send_signal(signal.SIGTERM)
    t.join(30)
    assert "done" in got["r"]["content"][0]["text"]
    assert s.proc.wait(30) == 0
    s2 = Server(env, "drain")
    try:
        sid2 = raw_session(s2)
        r = call(s2, sid2, "Bash", {"episode_id": ep, "command": "echo $KEEP"})
        assert not r["isError"] and "kept" in r["content"][0]["text"]
        call(s2, sid2, "finish", {"episode_id": ep, "final_eval": False})
    finally:
        assert s2.stop() == 0


def test_openenv_client(server):
    """openenv-core's own client (WebSocket /ws session) and its HTTP routes."""
    oe = pytest.importorskip("openenv.core")
    st, _, body = server.request("GET", "/health")
    assert st == 200 and body["status"] == "healthy"
    st, _, schema = server.request("GET", "/schema")
    assert st == 200 and "finish" in schema["action"]["properties"]["tool"]["enum"]
    with oe.GenericEnvClient(base_url=server.url).sync() as envc:
        r = envc.reset(task="task", seed=3)
        ep = r.observation["episode_id"]
        assert ep.startswith("ep-") and "class Model" in r.observation["task_message"]
        assert r.done is False and r.reward is None
        r = envc.step({"tool": "Bash", "arguments": {"command": "echo hello from openenv"}})
        assert "hello from openenv" in r.observation["text"] and r.done is False
        st = envc.state()
        assert st["episode_id"] == ep and st["step_count"] >= 1
        r = envc.step({"tool": "finish", "arguments": {"final_eval": False}})
        assert r.done is True and r.reward == -1.0
    # Plain HTTP: stateless requests name the episode.
    st, _, r = server.request("POST", "/reset", {"task": "task"},
                              {"Content-Type": "application/json"})
    assert st == 200 and r["done"] is False
    ep = r["observation"]["episode_id"]
    st, _, r = server.request("POST", "/step", {"episode_id": ep, "action": {
        "tool": "Read", "arguments": {"file_path": "/workspace/model.py"}}})
    assert st == 200 and "class Model" in r["observation"]["text"] and r["reward"] is None
    # An action naming no tool is the model's mistake to read, not an HTTP error.
    st, _, r = server.request("POST", "/step", {"episode_id": ep, "action": {
        "tool": "Nope \u00e9" * 20, "arguments": {}}})
    assert st == 200 and r["observation"]["is_error"] is True and r["done"] is False, r
    assert r["observation"]["text"].startswith("unknown tool 'Nope") and \
        "...': an action is one JSON object" in r["observation"]["text"], r
    st, _, r = server.request("GET", f"/state?episode_id={ep}")
    assert st == 200 and r["step_count"] == 1
    st, _, r = server.request("POST", "/step", {"episode_id": ep, "action": {"tool": "finish"}})
    assert st == 200 and r["done"] is True and isinstance(r["reward"], float)
    st, _, r = server.request("POST", "/step", {"action": "nope"})
    assert st == 422
    st, _, r = server.request("POST", "/reset", "{bad")
    assert st == 422


def test_integrations(server):
    """The verl reward function against a live server."""
    import sys
    sys.path.insert(0, str(REPO / "integrations" / "verl"))
    import reward
    st, _, r = server.request("POST", "/reset", {"task": "task"})
    ep = r["observation"]["episode_id"]
    rollout = f"... Started episode {ep} for task ... (the model's turns) ..."
    os.environ["CUDA_AGENT_SERVE_URL"] = server.url + "/mcp"
    # The final evaluation of a skeleton workspace is test_openenv_client's; here the model
    # "ran" nothing: finish without it, and the reward function reads the stored result.
    r = reward.finish(ep, final_eval=False)
    assert r["episode_id"] == ep and r["reward"] == -1 and r["final"] is None
    assert reward.compute_score("cuda-agent", rollout, None, {}) == -1.0
    assert reward.compute_score("cuda-agent", "x", None, {"episode_id": ep}) == -1.0
    assert reward.compute_score("cuda-agent", "no episode here", None) == -1.0
    st, _, schema = server.request("GET", "/schema")
    assert any(t["name"] == "finish" for t in schema["action"]["available_tools"])


VERIFIERS_PY = REPO / ".venv-verifiers" / "bin" / "python3"


def test_verifiers_engine_plays_an_episode(server):
    """verifiers' own OpenEnv engine (OpenEnvEnv.run, openenv's client, parse_action) plays an
    episode of integrations/verifiers' taskset against the server, a scripted player in place
    of the model: a reply with prose around its JSON (verifiers sends the whole text as the
    tool name: an error observation, the episode going on), a fenced Bash call, then finish;
    the reward verifiers records is the server's."""
    if not VERIFIERS_PY.exists():
        why = f"{VERIFIERS_PY} is missing: scripts/setup.sh --deps makes it"
        if "verifiers" in os.environ.get("TEST_REQUIRE", "").split(","):
            pytest.fail(f"TEST_REQUIRE names verifiers, but {why}")
        pytest.skip(why)
    bash = '{"tool": "Bash", "arguments": {"command": "ls /workspace"}}'
    replies = [f"I will look first.\n```json\n{bash}\n```", f"```json\n{bash}\n```",
               '{"tool": "finish", "arguments": {"final_eval": false}}']
    r = subprocess.run([str(VERIFIERS_PY), str(HERE / "verifiers_episode.py"), server.url],
                       input="\n".join(json.dumps(x) for x in replies), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    out = json.loads(r.stdout)
    assert out["task_ids"] and out["reset"] == {"task": out["task_ids"][0]}
    assert out["left"] == [] and out["stopped"] is None, out
    first, prose, listing = out["shown"]  # the reset's observation, then each step's
    assert "class Model" in first["observation"]["task_message"], first["observation"]
    skill = (REPO / "template" / "SKILL.md").read_text().splitlines()[0]
    assert skill in first["observation"]["system_prompt"], first["observation"]
    assert "finish" in first["action_schema"]["properties"]["tool"]["enum"]
    assert prose["observation"]["is_error"] is True, prose["observation"]
    assert prose["observation"]["text"].startswith("unknown tool 'I will look first."), prose
    assert "the tools are: list_tasks," in prose["observation"]["text"], prose
    assert listing["observation"]["is_error"] is False, listing["observation"]
    assert "model.py" in listing["observation"]["text"], listing["observation"]
    assert out["rewards"] == {"openenv_reward": -1.0}


def test_idle_ttl(env):
    """An episode left idle past its TTL ends by itself (its supervisor and sandbox with it),
    and the server says so; its slot is free again."""
    s = Server(env, "ttl", "--episode-ttl", "1", "--max-episodes", "1")
    try:
        sid = raw_session(s)
        ep = call(s, sid, "start_episode", {"task": "task"})["structuredContent"]["episode_id"]
        sock = pathlib.Path(env["CUDA_AGENT_STATE_DIR"]) / ep / "sock"
        assert sock.exists()
        time.sleep(2.5)
        r = call(s, sid, "Bash", {"episode_id": ep, "command": "true"})
        assert r["isError"] and "idle TTL" in r["content"][0]["text"]
        assert not sock.exists()  # the supervisor is gone
        st, _, m = s.request("GET", "/metrics")
        assert "cuda_agent_episodes_expired_total 1" in m and "cuda_agent_episodes_live 0" in m
        r = call(s, sid, "start_episode", {"task": "task"})
        assert not r["isError"], r
    finally:
        assert s.stop() == 0
