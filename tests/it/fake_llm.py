#!/usr/bin/env python3
"""A scripted OpenAI-compatible Chat Completions server for tests (real HTTP on loopback).

    fake_llm.py SCRIPT PORT_FILE LOG

SCRIPT is a JSON list of steps; each POST to /v1/chat/completions consumes the next step
(a step with "repeat": true is never consumed, so it answers every later request). A step:

  {"content": "...", "tool_calls": [{"name": "Bash", "arguments": {...} | "raw string",
                                     "id": optional}],
   "finish_reason": ..., "usage": {...} | "prompt_tokens": N, "logprobs": ..., "token_ids": [...],
   "reasoning_content": "..."}                       a normal reply
  {"status": 429, "headers": {"Retry-After": "1"}, "body": "..."}   an HTTP error
  {"delay": 1.5, ...}           wait before answering (any kind of step)
  {"hang": true}                send the headers, then nothing
  {"endless": true}             a chunked 200 reply that never ends
  {"close": true}               close the connection without answering
  {"raw": "..."}                a 200 reply with this body as is

When the script runs out the server answers 500 "script exhausted". Every request is appended
to LOG as one JSON line {"n", "path", "authorization", "body"} before it is answered, so tests
can check what the client sent. The port (ephemeral, 127.0.0.1) is written to PORT_FILE once
the server listens.
"""
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
STATE = {"steps": [], "n": 0, "log": None}


def next_step():
    with LOCK:
        STATE["n"] += 1
        steps = STATE["steps"]
        if not steps:
            return STATE["n"], None
        step = steps[0]
        if not step.get("repeat"):
            steps.pop(0)
        return STATE["n"], step


def completion(step, n, request):
    msg = {"role": "assistant", "content": step.get("content")}
    if "reasoning_content" in step:
        msg["reasoning_content"] = step["reasoning_content"]
    calls = []
    for i, c in enumerate(step.get("tool_calls") or []):
        if "raw" in c:  # a tool call entry exactly as given
            calls.append(c["raw"])
            continue
        args = c.get("arguments", {})
        calls.append({
            "id": c.get("id", "call_%d_%d" % (n, i)),
            "type": "function",
            "function": {"name": c.get("name"),
                         "arguments": args if isinstance(args, str) else json.dumps(args)},
        })
    if calls:
        msg["tool_calls"] = calls
    prompt = len(json.dumps(request)) // 4
    usage = step.get("usage") or {"prompt_tokens": step.get("prompt_tokens", prompt),
                                  "completion_tokens": 17}
    usage.setdefault("total_tokens", usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0))
    choice = {"index": 0, "message": msg,
              "finish_reason": step.get("finish_reason", "tool_calls" if calls else "stop")}
    if "logprobs" in step:
        choice["logprobs"] = step["logprobs"]
    if "token_ids" in step:
        choice["token_ids"] = step["token_ids"]
    return {"id": "chatcmpl-%d" % n, "object": "chat.completion", "created": int(time.time()),
            "model": request.get("model", "?"), "choices": [choice], "usage": usage}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def send_body(self, status, body, headers=None):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        try:
            request = json.loads(raw)
        except ValueError:
            request = {"unparsable": raw[:200].decode(errors="replace")}
        n, step = next_step()
        with LOCK, open(STATE["log"], "a") as f:
            f.write(json.dumps({"n": n, "path": self.path,
                                "authorization": self.headers.get("Authorization"),
                                "body": request}) + "\n")
        if step is None:
            return self.send_body(500, json.dumps({"error": {"message": "script exhausted"}}))
        if step.get("delay"):
            time.sleep(step["delay"])
        if step.get("close"):
            self.close_connection = True
            self.connection.shutdown(2)
            return
        if step.get("hang"):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "100000")
            self.end_headers()
            self.wfile.flush()
            time.sleep(3600)
            return
        if step.get("endless"):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            chunk = b'{"choices": [' + b" " * 65536
            try:
                while True:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                    time.sleep(0.01)
            except (BrokenPipeError, ConnectionResetError):
                return
        if "status" in step:
            body = step.get("body", json.dumps({"error": {"message": "scripted %d" % step["status"]}}))
            return self.send_body(step["status"], body, step.get("headers"))
        if "raw" in step:
            return self.send_body(200, step["raw"])
        return self.send_body(200, json.dumps(completion(step, n, request)))


def main():
    script, port_file, log = sys.argv[1:4]
    with open(script) as f:
        STATE["steps"] = json.load(f)
    STATE["log"] = log
    open(log, "w").close()
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    with open(port_file + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    import os
    os.rename(port_file + ".tmp", port_file)
    srv.serve_forever()


if __name__ == "__main__":
    main()
