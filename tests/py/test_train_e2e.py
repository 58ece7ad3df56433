"""Every stage of the trainer end to end (`python3 -m train.run`) with a tiny random model
against the real server (`cuda-agent serve --stdio`, the official `mcp` client) and the
CPU-mode evaluator on the CPU fixture task (tests/eval/cpu).

A random model writes garbage: its episodes must still run and score -1. One known-good
answer is injected in each stage that takes scripts (the fixture's reference solution: one
single-turn answer in the warm-up, one scripted agent episode that writes the files and runs
./verify in the sandbox in the collection; verify, not profile: timing torch.compile on two
CPU cores takes 20 s an evaluation), so the reward > 0 paths, the RFT filter and the
value targets are exercised for real: the evaluator scores them.
"""

import json
import pathlib
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("mcp")
REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "py"))
from test_serve import CA, CPU, TASK, env, require_cpu_evaluator  # noqa: E402

FIXTURES = (env,)  # test_serve's sandbox-probing server environment, used as a fixture here

SOL = CPU / "sol"
FILES = ["model_new.py", "kernels/swish_cpu.cu", "kernels/swish_cpu_binding.cpp"]


def call(name, **args):
    return "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>"


def write_config(base, env):
    single = "".join(f'<file path="{f}">\n{(SOL / f).read_text()}</file>\n' for f in FILES)
    (base / "single.jsonl").write_text(json.dumps({"reply": single}) + "\n")
    replies = [call("Read", file_path="/workspace/model_new.py"),
               "".join(call("Write", file_path="/workspace/" + f, content=(SOL / f).read_text())
                       for f in FILES),
               call("Bash", command="./verify; echo verify-exit=$?", timeout=600000),
               "Done."]
    (base / "agent.jsonl").write_text(json.dumps({"replies": replies}) + "\n")
    cfg = {
        "out_dir": str(base / "run"), "seed": 1, "tensorboard": True,
        "model": {"path": "tiny", "hidden": 32, "layers": 1, "heads": 2},
        "server": {"transport": "stdio", "command": CA,
                   "args": ["--root", str(base / "root"), "--tasks", TASK, "--device", "cpu"],
                   "timeout_s": 600},
        "rollout": {"max_prompt_tokens": 96, "max_new_tokens": 32, "max_turns": 4,
                    "max_seq_tokens": 4096, "max_tool_output_tokens": 256, "parallel": 4,
                    "final_eval": False, "eval_stage": "verify"},
        "warmup": {"steps": 2, "batch_episodes": 2, "max_new_tokens": 32,
                   "inject": [str(base / "single.jsonl")]},
        "collect": {"episodes_per_task": 2, "inject": [str(base / "agent.jsonl")]},
        "rft": {"epochs": 2, "value_epochs": 2, "lr": 1e-3, "value_lr": 1e-3},
        "ppo": {"steps": 1, "batch_episodes": 2, "micro_batch": 2, "save_every": 1},
    }
    p = base / "cfg.json"
    p.write_text(json.dumps(cfg))
    return p


def lines(p):
    return [json.loads(x) for x in pathlib.Path(p).read_text().splitlines() if x.strip()]


def check_sample(s):
    n = len(s["tokens"])
    assert len(s["mask"]) == n and len(s["logprobs"]) == n and 0 < s["prompt_len"] < n
    assert set(s["mask"][:s["prompt_len"]]) == {0}
    sampled = [lp for lp, m in zip(s["logprobs"], s["mask"]) if m]
    assert sampled and all(lp <= 0 for lp in sampled) and any(lp < 0 for lp in sampled)
    assert all(lp == 0 for lp, m in zip(s["logprobs"], s["mask"]) if not m)
    assert s["mask"][-1] == 1  # a trajectory ends with a sampled token


def test_all_stages(env, tmp_path):
    require_cpu_evaluator()
    cfg = write_config(tmp_path, env)
    e = {k: v for k, v in env.items() if not k.startswith("_")}
    e["PYTHONPATH"] = str(REPO)
    r = subprocess.run([sys.executable, "-m", "train.run", "--config", str(cfg)], env=e,
                       cwd=REPO, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-4000:]
    run = tmp_path / "run"

    # Stage 1: every sampled answer scored by the evaluator; the injected one is correct.
    w = lines(run / "warmup" / "metrics.jsonl")
    assert [x["step"] for x in w] == [1, 2]
    for x in w:
        assert x["episodes"] == 3 and x["reward_eq_-1"] == 2 and x["reward_max"] >= 1
        for k in ("entropy", "clip_frac", "kl_post_update", "explained_variance", "pg_loss",
                  "vf_loss", "response_len_mean", "gen_tokens_per_s", "train_tokens_per_s"):
            assert k in x, k
    roll = lines(run / "warmup" / "rollouts" / "step-000001.jsonl")
    for s in roll:
        check_sample(s)
        assert s["mode"] == "single" and s["episode_id"].startswith("ep-")
    good = [s for s in roll if s["scripted"]]
    assert len(good) == 1 and good[0]["reward"] >= 1 and good[0]["result"]["best"]["ok"]
    assert all(s["reward"] == -1 for s in roll if not s["scripted"])
    assert (run / "warmup" / "final" / "critic.pt").exists()
    assert any((run / "warmup" / "tb").iterdir())

    # Stage 2: trajectories through the server with token ids, log-probs and masks.
    traj = lines(run / "collect" / "trajectories.jsonl")
    assert len(traj) == 3
    for s in traj:
        check_sample(s)
        assert s["mode"] == "agent"
    good = [s for s in traj if s["scripted"]]
    assert len(good) == 1
    g = good[0]
    assert g["reward"] >= 1 and g["turns"] == 4 and g["tool_calls"] == 5 and g["malformed"] == 0
    assert [m["role"] for m in g["messages"]].count("tool") == 5
    assert any("verify-exit=0" in m["content"] for m in g["messages"] if m["role"] == "tool")
    # Tool outputs are in the sequence, masked out: 0-runs between the sampled replies.
    runs = "".join(str(m) for m in g["mask"][g["prompt_len"]:])
    assert runs.count("10") == 3
    tool_text = bytes(t for t, m in zip(g["tokens"][g["prompt_len"]:], g["mask"][g["prompt_len"]:])
                      if not m and t < 256).decode("utf-8", "replace")
    assert "verify-exit=0" in tool_text

    # Stage 3: only the good trajectory is kept; the actor and critic moved.
    f = json.loads((run / "rft" / "filter.json").read_text())
    assert f["trajectories"] == 3 and f["kept"] == 1 and f["dropped"]["low_reward"] == 2
    from safetensors.torch import load_file
    wa = load_file(run / "warmup" / "final" / "actor" / "model.safetensors")
    ra = load_file(run / "rft" / "final" / "actor" / "model.safetensors")
    assert any(not torch.equal(wa[k], ra[k]) for k in wa)
    rm = lines(run / "rft" / "metrics.jsonl")
    sft = [x["sft_loss"] for x in rm if x["stage"] == "rft"]
    assert len(sft) == 2 and sft[1] < sft[0]
    assert len([x for x in rm if x["stage"] == "value"]) == 2

    # Stage 4: agentic PPO step from the RFT model, metrics and a checkpoint.
    p = lines(run / "ppo" / "metrics.jsonl")
    assert len(p) == 1 and p[0]["episodes"] == 2 and p[0]["reward_eq_-1"] == 2
    ck = run / "ppo" / "ckpt" / "step-000001"
    assert (ck / "optim.pt").exists() and json.loads((ck / "state.json").read_text())["step"] == 1
    fa = load_file(run / "ppo" / "final" / "actor" / "model.safetensors")
    ca = load_file(ck / "actor" / "model.safetensors")
    assert all(torch.equal(fa[k], ca[k]) for k in fa)

    # Running again resumes: every stage is found done, nothing changes.
    r = subprocess.run([sys.executable, "-m", "train.ppo", "--config", str(cfg)], env=e,
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "done" in r.stderr, r.stderr[-2000:]
    assert len(lines(run / "ppo" / "metrics.jsonl")) == 1


def test_collect_over_http_with_token(env, tmp_path, monkeypatch):
    """Stage 2 over Streamable HTTP to `serve --http` guarded by a bearer token."""
    from test_serve import Server
    from train import config as C, stages
    s = Server(env, "train-http", token="train-secret")
    try:
        monkeypatch.setenv("TRAIN_TEST_TOKEN", "train-secret")
        for k, v in env.items():
            if not k.startswith("_"):
                monkeypatch.setenv(k, v)
        cfg = C.from_dict({
            "out_dir": str(tmp_path / "run"), "tensorboard": False,
            "model": {"hidden": 32, "layers": 1, "heads": 2},
            "server": {"transport": "http", "url": s.url + "/mcp",
                       "token_env": "TRAIN_TEST_TOKEN", "timeout_s": 120},
            "rollout": {"max_prompt_tokens": 64, "max_new_tokens": 16, "max_turns": 2,
                        "final_eval": False},
            "collect": {"episodes_per_task": 2}})
        stages.collect_stage(cfg)
    finally:
        assert s.stop() == 0
    traj = lines(tmp_path / "run" / "collect" / "trajectories.jsonl")
    assert len(traj) == 2 and all(t["reward"] == -1 and t["episode_id"] for t in traj)
    for t in traj:
        check_sample(t)
