#!/usr/bin/env python3
"""One episode per example through MCP: for each example task with a reference solution
(examples/solutions/<name>/ for examples/tasks/<name>.py), start `cuda-agent serve --http`,
and over the official `mcp` SDK client: start_episode, Read then Write the solution's files,
evaluate (profile), finish; print one JSON line per episode and a summary. On a GPU machine
this is the whole server path with the GPU evaluator; --device cpu with a CPU fixture checks
the script here.

    bench/serve_examples.py [--device cuda] [--binary build/cuda-agent]
    bench/serve_examples.py --device cpu --pair tests/eval/cpu/task.py:tests/eval/cpu/sol

A GPU machine without the mcp package: `bash bench/device_wheels.sh .whl` here, carry .whl,
and there `python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl` and
`PYTHONPATH=/tmp/site python3 bench/serve_examples.py --binary .carry/cuda-agent`.
"""

import argparse
import asyncio
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import threading
import time

from mcp import Client

REPO = pathlib.Path(__file__).resolve().parents[1]


def pairs_of(a):
    if a.pair:
        return [tuple(pathlib.Path(x) for x in p.split(":", 1)) for p in a.pair]
    sols = sorted((REPO / "examples" / "solutions").iterdir())
    return [(REPO / "examples" / "tasks" / f"{s.name}.py", s) for s in sols]


async def episode(url, task_file, sol):
    out = {"task": task_file.stem}
    async with Client(url, read_timeout_seconds=3600) as c:
        t0 = time.monotonic()
        r = await c.call_tool("start_episode", {"code": task_file.read_text()})
        if r.is_error:
            return {**out, "error": r.content[0].text}
        ep = r.structured_content["episode_id"]
        out["episode_id"] = ep
        out["start_s"] = round(time.monotonic() - t0, 2)
        await c.call_tool("Read", {"episode_id": ep, "file_path": "/workspace/model_new.py"})
        for f in sorted(p for p in sol.rglob("*") if p.is_file()):
            rel = f.relative_to(sol).as_posix()
            r = await c.call_tool("Write", {"episode_id": ep, "file_path": f"/workspace/{rel}",
                                            "content": f.read_text()})
            if r.is_error:
                return {**out, "error": f"Write {rel}: {r.content[0].text}"}
        t1 = time.monotonic()
        r = await c.call_tool("evaluate", {"episode_id": ep, "stage": "profile"})
        ev = r.structured_content or {}
        out["evaluate_s"] = round(time.monotonic() - t1, 2)
        out.update({k: ev.get(k) for k in ("ok", "stage", "reward", "speedup_eager",
                                             "speedup_compile", "candidate_ms", "eager_ms",
                                             "compile_ms", "message")})
        r = await c.call_tool("finish", {"episode_id": ep, "final_eval": False})
        fin = r.structured_content or {}
        out["final_reward"] = fin.get("reward")
        out["total_s"] = round(time.monotonic() - t0, 2)
    return out


async def main(a):
    tmp = tempfile.mkdtemp(prefix="serve-examples-")
    env = dict(os.environ)
    env.setdefault("CUDA_AGENT_STATE_DIR", os.path.join(tmp, "state"))
    srv = subprocess.Popen([a.binary, "serve", "--http", "127.0.0.1:0", "--root",
                            os.path.join(tmp, "root"), "--device", a.device, "--allow-task-code"],
                           stderr=subprocess.PIPE, text=True, env=env)
    line = srv.stderr.readline()
    m = re.search(r"listening on (http://\S+) ", line)
    if not m:
        print(line + srv.stderr.read(), file=sys.stderr)
        return 1
    threading.Thread(target=lambda: sys.stderr.write(srv.stderr.read()), daemon=True).start()
    url = m.group(1) + "/mcp"
    rows = []
    try:
        for task_file, sol in pairs_of(a):
            row = await episode(url, task_file, sol)
            print(json.dumps(row), flush=True)
            rows.append(row)
    finally:
        srv.terminate()
        srv.wait(60)
    ok = [r for r in rows if r.get("final_reward") is not None and r["final_reward"] >= 1]
    print(json.dumps({"episodes": len(rows), "rewarded": len(ok),
                      "rewards": {r["task"]: r.get("final_reward") for r in rows}}))
    return 0 if len(ok) == len(rows) else 1


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--binary", default=str(REPO / "build" / "cuda-agent"))
    ap.add_argument("--pair", action="append", help="TASK.py:SOLUTION_DIR (repeatable)")
    sys.exit(asyncio.run(main(ap.parse_args())))
