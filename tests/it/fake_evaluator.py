#!/usr/bin/env python3
"""tests/it/fake_evaluator.py - a stand-in for `cuda-agent evaluator` in the bench tests.

Speaks the service's protocol (core/msg.h: a 4-byte big-endian length, then JSON; one request
per connection) on SOCKET, and answers each {"op": "eval", "kernelbench_file": F, ...} with a
report made from F's first line, `# FAKE {...}`: reward, speedup_eager, speedup_compile,
peak_fraction, stage, infrastructure, timing_noisy (a `noisy_timing` flag), delay (seconds to
wait first). What the bench runner does
with reports (store, metrics, resume) is tested without PyTorch or a GPU. Each request is
appended to SOCKET.log as one JSON line.

    python3 tests/it/fake_evaluator.py SOCKET
"""
import json
import os
import socketserver
import struct
import sys
import threading
import time

LOCK = threading.Lock()


def report_for(req: dict) -> dict:
    path = req.get("kernelbench_file") or os.path.join(req.get("workspace") or "", "FAKE")
    with open(path) as f:
        first = f.readline()
    spec = json.loads(first.split("FAKE", 1)[1]) if "FAKE" in first else {}
    time.sleep(float(spec.get("delay", 0)))
    reward = spec.get("reward", 1)
    stage = spec.get("stage", "done" if reward >= 1 else "verify")
    infra = bool(spec.get("infrastructure"))
    rep = {
        "ok": reward >= 1 and not infra,
        "stage": "infrastructure" if infra else stage,
        "rules": req.get("rules") or "cuda-agent",
        "task": {"id": os.path.basename(req.get("task", "?"))[:-3]},
        "message": spec.get("message", "fake" if reward < 1 else ""),
        "stage_ms": {"extract": 1.0, "compile": 100.0, "harness": 200.0},
        "harness": {
            "device": {"type": "cuda", "name": "Fake GPU", "torch": "0.0+fake", "cuda": "0.0"},
            "timing": {"eager": {"median_ms": 1.0}, "candidate": {"median_ms": 0.5},
                       "sol": {"peak_fraction": spec.get("peak_fraction")}},
            "flags": [{"kind": "noisy_timing", "message": "fake: measured while busy"}]
            if spec.get("timing_noisy") else [],
        },
    }
    if infra:
        rep["infrastructure_error"] = True
    else:
        rep["reward"] = {"reward": reward, "speedup_eager": spec.get("speedup_eager"),
                         "speedup_compile": spec.get("speedup_compile"), "timing_noisy": False}
    return rep


class Handler(socketserver.BaseRequestHandler):
    def handle(self):
        head = self.request.recv(4, socket_flags())
        if len(head) < 4:
            return
        n = struct.unpack(">I", head)[0]
        data = b""
        while len(data) < n:
            chunk = self.request.recv(n - len(data))
            if not chunk:
                return
            data += chunk
        req = json.loads(data)
        with LOCK, open(sys.argv[1] + ".log", "a") as log:
            log.write(json.dumps(req) + "\n")
        if req.get("op") == "status":
            reply = {"ok": True, "pool": {}, "served": 0, "active": 0}
        else:
            try:
                reply = {"ok": True, "report": report_for(req)}
            except Exception as e:  # the fixture is wrong: say so to the client
                reply = {"ok": False, "error": f"fake evaluator: {e}", "code": 1}
        out = json.dumps(reply).encode()
        self.request.sendall(struct.pack(">I", len(out)) + out)


def socket_flags() -> int:
    import socket
    return socket.MSG_WAITALL


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


if __name__ == "__main__":
    if os.path.exists(sys.argv[1]):
        os.unlink(sys.argv[1])
    with Server(sys.argv[1], Handler) as srv:
        srv.serve_forever()
