"""Many idle episodes at once: start N episodes (sandbox + supervisor + persistent shell each),
report the time to start each and the memory each idle episode holds, check that all of them
still answer, then close them.

    python3 bench/idle_episodes.py [N]          (default 256; run from the repository root
                                                after `make`)

Memory per episode is the proportional set size (PSS, from /proc/PID/smaps_rollup) summed over
the episode's processes: its supervisor and everything below it (sandbox init, bash). PSS
splits shared pages (libraries, the binary) between the processes that map them, so the sum
over all episodes is the real memory they use together.
"""

import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
CA = str(ROOT / "build" / "cuda-agent")
TASK = str(ROOT / "examples" / "tasks" / "softmax_last_dim.py")


def children_map():
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        kids.setdefault(ppid, []).append(int(d))
    return kids


def tree(pid, kids):
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def pss_kib(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    tmp = tempfile.mkdtemp(prefix="ca-idle-")
    env = dict(os.environ, CUDA_AGENT_STATE_DIR=f"{tmp}/state")
    starts, ids = [], []
    try:
        for i in range(n):
            ws = f"{tmp}/ws{i}"
            subprocess.run([CA, "workspace", "create", "--task", TASK, ws], check=True,
                           capture_output=True, env=env)
            t0 = time.perf_counter()
            subprocess.run([CA, "tool", "--workspace", ws, "--episode", f"idle{i}", "Bash",
                            '{"command":"true"}'], check=True, capture_output=True, env=env)
            starts.append(time.perf_counter() - t0)
            ids.append(f"idle{i}")
        time.sleep(1)
        kids = children_map()
        per, alive = [], 0
        for e in ids:
            p = subprocess.run([CA, "tool", "--episode", e, "--ping"], capture_output=True,
                               text=True, env=env)
            if p.returncode == 0:
                alive += 1
                sup = json.loads(p.stdout)["supervisor_pid"]
                per.append(sum(pss_kib(q) for q in tree(sup, kids)))
        print(f"episodes started: {n}; answering after all were up: {alive}")
        print(f"start (first tool call, incl. CLI process): median "
              f"{statistics.median(starts) * 1000:.1f} ms, max {max(starts) * 1000:.1f} ms")
        if per:
            print(f"memory per idle episode (PSS): median {statistics.median(per) / 1024:.2f} MiB, "
                  f"max {max(per) / 1024:.2f} MiB; all {len(per)} together "
                  f"{sum(per) / 1024:.1f} MiB")
        return 0 if alive == n else 1
    finally:
        for e in ids:
            subprocess.run([CA, "tool", "--episode", e, "--close"], capture_output=True, env=env)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
