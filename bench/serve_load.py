#!/usr/bin/env python3
"""Load on `cuda-agent serve --http`: N concurrent episodes doing MCP tool calls.

Starts the server, opens one MCP session (Streamable HTTP, raw HTTP/1.1 keep-alive over
asyncio, so the client costs little next to the server on a small machine) and one episode per
worker, measures the memory of the idle episodes (PSS and USS of the server and of every
episode's processes: its supervisor, the sandbox's init and its shell), then lets every worker
make CALLS tool calls (Read, Glob, Grep, Bash in turn), either as fast as answers come (closed
loop: latency is then 256 / throughput, the machine's saturation) or at --rate calls per second
per episode (open loop, Poisson: latency at a given load), and reports
latency per call (p50/p90/p99/max, overall and per tool), throughput and errors; then finishes
every episode. Prints one JSON object (and --md a Markdown table row set).

    bench/serve_load.py [--episodes 256] [--calls 20] [--rate R] [--binary build/cuda-agent] [--md]
"""

import argparse
import asyncio
import json
import os
import pathlib
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]


class Conn:
    """One keep-alive HTTP/1.1 connection speaking MCP's POST /mcp."""

    def __init__(self, port, sid=None):
        self.port, self.sid = port, sid
        self.r = self.w = None

    async def post(self, msg):
        if self.w is None:
            self.r, self.w = await asyncio.open_connection("127.0.0.1", self.port)
        body = json.dumps(msg).encode()
        head = (f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                f"Accept: application/json, text/event-stream\r\nContent-Length: {len(body)}\r\n")
        if self.sid:
            head += f"Mcp-Session-Id: {self.sid}\r\n"
        self.w.write(head.encode() + b"\r\n" + body)
        await self.w.drain()
        status = int((await self.r.readline()).split()[1])
        headers = {}
        while True:
            line = await self.r.readline()
            if line in (b"\r\n", b""):
                break
            k, _, v = line.decode().partition(":")
            headers[k.strip().lower()] = v.strip()
        n = int(headers.get("content-length", 0))
        data = await self.r.readexactly(n) if n else b""
        return status, headers, json.loads(data) if data else None

    async def call(self, name, args, rid=1):
        st, _, body = await self.post({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                                       "params": {"name": name, "arguments": args}})
        if st != 200 or "result" not in body:
            raise RuntimeError(f"{name}: HTTP {st}: {body}")
        return body["result"]

    def close(self):
        if self.w:
            self.w.close()


async def session(port):
    c = Conn(port)
    st, h, body = await c.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "serve_load", "version": "1"}}})
    assert st == 200, body
    c.sid = h["mcp-session-id"]
    st, _, _ = await c.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert st == 202
    return c


def mem_of(pids):
    """PSS and USS in KiB summed over pids (smaps_rollup)."""
    pss = uss = 0
    for p in pids:
        try:
            txt = open(f"/proc/{p}/smaps_rollup").read()
        except OSError:
            continue
        f = {m[0]: int(m[1]) for m in re.findall(r"^(\w+):\s+(\d+) kB", txt, re.M)}
        pss += f.get("Pss", 0)
        uss += f.get("Private_Clean", 0) + f.get("Private_Dirty", 0)
    return pss, uss


def process_table():
    ppid, cmd = {}, {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            st = open(f"/proc/{d}/stat").read()
            ppid[int(d)] = int(st[st.rindex(")") + 2:].split()[1])
            cmd[int(d)] = open(f"/proc/{d}/cmdline", "rb").read()
        except OSError:
            pass
    return ppid, cmd


def episode_pids(state_dir):
    """Supervisors are forks of the `cuda-agent tool --state-dir STATE ...` the server runs to
    start an episode, re-parented away; with them, every process below them (the sandbox's
    init, the shells)."""
    ppid, cmd = process_table()
    key = b"\0--state-dir\0" + state_dir.encode() + b"\0"
    sups = {p for p, c in cmd.items() if key in c and b"\0tool\0" in c}
    out, frontier = set(sups), set(sups)
    while frontier:
        frontier = {p for p, pp in ppid.items() if pp in frontier and p not in out}
        out |= frontier
    return sups, out


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


async def main(a):
    tmp = tempfile.mkdtemp(prefix="serve-load-")
    env = dict(os.environ, CUDA_AGENT_STATE_DIR=os.path.join(tmp, "state"))
    srv = subprocess.Popen([a.binary, "serve", "--http", "127.0.0.1:0", "--root",
                            os.path.join(tmp, "root"), "--tasks", str(REPO / "examples/tasks"),
                            "--max-episodes", str(a.episodes + 8)],
                           stderr=subprocess.PIPE, text=True, env=env)
    port = int(re.search(r":(\d+) \(MCP", srv.stderr.readline()).group(1))
    base_pss, base_uss = mem_of([srv.pid])
    conns = [await session(port) for _ in range(a.episodes)]
    t0 = time.monotonic()
    sem = asyncio.Semaphore(a.start_concurrency)
    eps = [None] * a.episodes
    start_ms = []

    async def start(i):
        async with sem:
            t = time.monotonic()
            r = await conns[i].call("start_episode", {"task": "softmax_last_dim"})
            start_ms.append((time.monotonic() - t) * 1000)
            if r["isError"]:
                raise RuntimeError(r["content"][0]["text"])
            eps[i] = r["structuredContent"]["episode_id"]

    await asyncio.gather(*(start(i) for i in range(a.episodes)))
    start_s = time.monotonic() - t0
    await asyncio.sleep(a.settle)
    sups, pids = episode_pids(env["CUDA_AGENT_STATE_DIR"])
    srv_pss, srv_uss = mem_of([srv.pid])
    ep_pss, ep_uss = mem_of(pids)
    mem = {
        "episodes": a.episodes, "supervisors_found": len(sups), "processes": len(pids),
        "server_pss_mib_before": round(base_pss / 1024, 1),
        "server_pss_mib_after": round(srv_pss / 1024, 1),
        "pss_kib_per_idle_episode": round((ep_pss + srv_pss - base_pss) / a.episodes, 1),
        "uss_kib_per_idle_episode": round((ep_uss + srv_uss - base_uss) / a.episodes, 1),
    }
    plan = [("Read", lambda ep: {"episode_id": ep, "file_path": "model.py"}),
            ("Glob", lambda ep: {"episode_id": ep, "pattern": "**/*.py"}),
            ("Grep", lambda ep: {"episode_id": ep, "pattern": "def forward", "path": "."}),
            ("Bash", lambda ep: {"episode_id": ep, "command": "echo $((6*7))"})]
    lat = {name: [] for name, _ in plan}
    errors = []

    async def worker(i):
        rng = random.Random(i)
        for k in range(a.calls):
            if a.rate > 0:  # open loop: Poisson arrivals at `rate` calls/s per episode
                await asyncio.sleep(rng.expovariate(a.rate))
            name, args = plan[(i + k) % len(plan)]
            t = time.monotonic()
            try:
                r = await conns[i].call(name, args(eps[i]), rid=k + 1)
                if r["isError"]:
                    errors.append(f"{name}: {r['content'][0]['text'][:200]}")
            except Exception as e:  # noqa: BLE001 - every failure is counted, none hidden
                errors.append(f"{name}: {e}")
                continue
            lat[name].append((time.monotonic() - t) * 1000)

    t1 = time.monotonic()
    await asyncio.gather(*(worker(i) for i in range(a.episodes)))
    wall = time.monotonic() - t1
    allv = [x for v in lat.values() for x in v]
    t2 = time.monotonic()
    fin = await asyncio.gather(*(conns[i].call("finish", {"episode_id": eps[i],
                                                          "final_eval": False})
                                 for i in range(a.episodes)))
    finish_s = time.monotonic() - t2
    errors += [r["content"][0]["text"] for r in fin if r["isError"]]
    for c in conns:
        c.close()
    srv.terminate()
    srv.wait(60)
    out = {
        "episodes": a.episodes, "calls_per_episode": a.calls, "calls": len(allv),
        "rate_per_episode": a.rate or "closed loop (as fast as answers come)",
        "errors": len(errors), "error_samples": errors[:5],
        "start_s": round(start_s, 2), "start_ms_p50": round(pct(start_ms, 50), 1),
        "start_ms_p99": round(pct(start_ms, 99), 1),
        "calls_per_s": round(len(allv) / wall, 1),
        "latency_ms": {"p50": round(pct(allv, 50), 2), "p90": round(pct(allv, 90), 2),
                       "p99": round(pct(allv, 99), 2), "max": round(max(allv), 2),
                       "mean": round(statistics.mean(allv), 2)},
        "per_tool_ms": {n: {"p50": round(pct(v, 50), 2), "p99": round(pct(v, 99), 2)}
                        for n, v in lat.items() if v},
        "memory": mem, "finish_s": round(finish_s, 2), "cpus": os.cpu_count(),
    }
    print(json.dumps(out, indent=1))
    if a.md:
        L = out["latency_ms"]
        print(f"| {a.episodes} | {len(allv)} | {out['errors']} | {L['p50']} | {L['p90']} | "
              f"{L['p99']} | {L['max']} | {out['calls_per_s']} | "
              f"{mem['pss_kib_per_idle_episode'] / 1024:.2f} | "
              f"{mem['uss_kib_per_idle_episode'] / 1024:.2f} |")
    return 0 if not errors else 1


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=256)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--rate", type=float, default=0.0,
                    help="calls/s per episode, Poisson (0: closed loop, each worker's next "
                         "call as soon as the last is answered)")
    ap.add_argument("--start-concurrency", type=int, default=8)
    ap.add_argument("--settle", type=float, default=3.0, help="seconds idle before measuring")
    ap.add_argument("--binary", default=str(REPO / "build" / "cuda-agent"))
    ap.add_argument("--md", action="store_true")
    sys.exit(asyncio.run(main(ap.parse_args())))
