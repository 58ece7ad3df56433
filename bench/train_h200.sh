#!/usr/bin/env bash
# bench/train_h200.sh - every trainer stage on one H200 (issue 17): a small real model, the GPU
# evaluator on examples/tasks, the examples' reference solutions injected as demonstrations
# (one single-turn answer and one scripted agent episode per example), then the reward curve,
# tokens/s and GPU memory summarised for docs/BENCHMARKS.md. NOT RUN YET: written on a machine
# without a GPU; the first session with device time runs it.
#
#   bash bench/train_h200.sh MODEL_DIR OUTDIR [--set KEY=VALUE ...]
#
# MODEL_DIR: a Hugging Face model directory (e.g. Qwen2.5-0.5B-Instruct or -1.5B; weights must
# already be on the machine). OUTDIR gets: run/ (the trainer's out_dir: every stage's
# metrics.jsonl, tb/, rollouts, checkpoints), inject/ (the demonstration files), gpu_mem.csv
# (nvidia-smi every 5 s), train.log, summary.md.
# Exit status: 0 done; 1 the trainer failed; 2 usage; 69 no GPU, binary or PyTorch.
set -u
[ $# -ge 2 ] || { sed -n '2,14p' "$0"; exit 2; }
MODEL=$1 OUT=$2
shift 2
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
PY=${CUDA_AGENT_PYTHON:-$REPO/.venv/bin/python3}
[ -x build/cuda-agent ] || { echo "build/cuda-agent is not built (make)"; exit 69; }
command -v nvidia-smi >/dev/null || { echo "no nvidia-smi: this needs a GPU"; exit 69; }
"$PY" -c 'import torch, transformers; assert torch.cuda.is_available()' ||
    { echo "$PY: no PyTorch with CUDA, or no transformers"; exit 69; }
mkdir -p "$OUT/inject"
export PATH="$(dirname "$PY"):$PATH"

# Demonstrations from examples/solutions: a single answer and an agent episode per example.
"$PY" - "$OUT/inject" <<'PYEOF'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
single, agent = [], []
for sol in sorted(pathlib.Path("examples/solutions").iterdir()):
    files = sorted(str(p.relative_to(sol)) for p in sol.rglob("*") if p.is_file())
    body = "".join(f'<file path="{f}">\n{(sol / f).read_text()}</file>\n' for f in files)
    single.append({"task": sol.name, "reply": body})
    call = lambda n, **a: "<tool_call>" + json.dumps({"name": n, "arguments": a}) + "</tool_call>"
    agent.append({"task": sol.name, "replies": [
        call("Read", file_path="/workspace/model_new.py"),
        "".join(call("Write", file_path="/workspace/" + f, content=(sol / f).read_text())
                for f in files),
        call("Bash", command="./profile", timeout=600000), "Done."]})
(out / "single.jsonl").write_text("".join(json.dumps(x) + "\n" for x in single))
(out / "agent.jsonl").write_text("".join(json.dumps(x) + "\n" for x in agent))
PYEOF

nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv -l 5 \
    >"$OUT/gpu_mem.csv" 2>/dev/null &
SMI=$!
trap 'kill $SMI 2>/dev/null' EXIT
t0=$SECONDS
"$PY" -m train.run --config train/configs/h200.toml --out-dir "$OUT/run" \
    --set model.path="$MODEL" \
    --set warmup.inject="[\"$OUT/inject/single.jsonl\"]" \
    --set collect.inject="[\"$OUT/inject/agent.jsonl\"]" "$@" 2>&1 | tee "$OUT/train.log"
rc=${PIPESTATUS[0]}
wall=$((SECONDS - t0))

"$PY" - "$OUT" "$wall" <<'PYEOF' >"$OUT/summary.md"
import csv, json, pathlib, sys
out, wall = pathlib.Path(sys.argv[1]), sys.argv[2]
print(f"# Trainer on one H200\n\nwall {wall} s; model and config in run/*/final/state.json\n")
for st in ("warmup", "collect", "ppo"):
    p = out / "run" / st / "metrics.jsonl"
    if not p.exists():
        continue
    print(f"## {st}\n\n| step | reward | correct | resp. tokens | gen tok/s | train tok/s | KL | EV | GPU GiB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for l in p.read_text().splitlines():
        m = json.loads(l)
        g = lambda k, f="{:.3g}": f.format(m[k]) if k in m else "-"
        print(f"| {m['step']} | {g('reward_mean')} | {g('correct_frac')} | "
              f"{g('response_len_mean')} | {g('gen_tokens_per_s')} | {g('train_tokens_per_s')} | "
              f"{g('kl_post_update')} | {g('explained_variance')} | {g('gpu_mem_max_gib')} |")
    print()
f = out / "run" / "rft" / "filter.json"
if f.exists():
    print("## rft\n\n" + f.read_text() + "\n")
rows = list(csv.reader(open(out / "gpu_mem.csv")))[1:]
if rows:
    mib = max(int(r[1].split()[0]) for r in rows if len(r) > 1)
    print(f"GPU memory used, peak (nvidia-smi, trainer + evaluator): {mib} MiB")
PYEOF
cat "$OUT/summary.md"
[ "$rc" -eq 0 ] || exit 1
