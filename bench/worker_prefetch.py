"""The warm runner (harness/worker.py) with and without input sets drawn ahead of time: the
same task evaluated JOBS times in a row by one worker, printing each job's setup time (task,
model, input sets, first reference) and total harness time. Job 1 draws its own sets; later
jobs find them drawn while the worker waited. CPU mode, so it runs anywhere with PyTorch.

    python3 bench/worker_prefetch.py [ROWS] [COLS] [JOBS]      (default 2048 2048 4)
"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "py"))
from test_harness import EXT, MODEL_NEW, CORRECT_BODY, TASK  # noqa: E402

rows, cols, jobs = (int(a) for a in (sys.argv[1:] + ["2048", "2048", "4"][len(sys.argv) - 1:])[:3])
task = TASK.replace("torch.randn(16, 37)", f"torch.randn({rows}, {cols})") \
           .replace("return [37, 1.5]", f"return [{cols}, 1.5]")
with tempfile.TemporaryDirectory() as d:
    d = pathlib.Path(d)
    (d / "cand").mkdir()
    (d / "task.py").write_text(task)
    (d / "ext.py").write_text(EXT)
    (d / "cand" / "model_new.py").write_text(MODEL_NEW.replace("{body}", " " * 8 + CORRECT_BODY))
    w = subprocess.Popen([sys.executable, str(ROOT / "harness" / "worker.py"), "--device", "cpu",
                          "--prewarm", "1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True, env=dict(os.environ, CUDA_AGENT_HARNESS_TESTING="1"))
    json.loads(w.stdout.readline())
    for i in range(jobs):
        out = d / f"r{i}.json"
        argv = ["--task", str(d / "task.py"), "--candidate-dir", str(d / "cand"), "--ext-module",
                str(d / "ext.py"), "--device", "cpu", "--budget-ms", "200", "--no-compile",
                "--quiet", "--out", str(out)]
        t0 = time.monotonic()
        w.stdin.write(json.dumps({"id": i, "argv": argv}) + "\n")
        w.stdin.flush()
        rep = json.loads(w.stdout.readline())
        wall = time.monotonic() - t0
        r = json.loads(out.read_text())
        e = r["elapsed_s"]
        print(f"job {i + 1}: rc={rep['rc']} sets_prefetched={r['verification']['sets_prefetched']}"
              f" setup {e['setup']:.3f} s, candidate verify {e.get('candidate_verify', 0):.3f} s,"
              f" harness total {e['total']:.3f} s, request wall {wall:.3f} s", flush=True)
        time.sleep(3)  # the agent's think time, during which the next sets are drawn
    w.stdin.close()
    w.wait()
