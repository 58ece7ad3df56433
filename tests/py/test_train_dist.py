"""FSDP2 under torchrun on the CPU (gloo, 2 processes): the toy PPO stage sharded over two
ranks, each sampling half the batch, must end with the weights one process gets on the whole
batch (the same episodes, gradients averaged as one token mean), and its checkpoint (gathered
full state dicts, written by rank 0) must load."""

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from test_train_toy import toy_config  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]


def test_fsdp2_two_ranks_match_one(tmp_path):
    if not torch.distributed.is_available():
        pytest.skip("this PyTorch has no torch.distributed")
    torchrun = shutil.which("torchrun") or str(pathlib.Path(sys.executable).parent / "torchrun")
    if not os.access(torchrun, os.X_OK):
        pytest.skip("torchrun is not installed next to this Python")
    e = dict(os.environ, OMP_NUM_THREADS="1")
    e.pop("WORLD_SIZE", None)
    r = subprocess.run([torchrun, "--standalone", "--nproc_per_node", "2",
                        str(HERE / "train_dist_toy.py"), str(tmp_path / "two"), "2"],
                       env=e, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    r = subprocess.run([sys.executable, str(HERE / "train_dist_toy.py"), str(tmp_path / "one"),
                        "2"], env=e, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    from safetensors.torch import load_file
    a = load_file(tmp_path / "two" / "ppo" / "final" / "actor" / "model.safetensors")
    b = load_file(tmp_path / "one" / "ppo" / "final" / "actor" / "model.safetensors")
    assert a.keys() == b.keys()
    # Adam turns the summation-order noise of a gradient near zero (two ranks reduce in another
    # order than one process) into a step of up to lr, so a bound in absolute terms fails now
    # and then (1.2e-5 seen after 2 steps at lr 1e-2); a sharding defect (a rank's half of the
    # batch not averaged in, a shard stepped twice) moves weights by a sizeable part of a step.
    # The bound: a hundredth of one step.
    cfg = toy_config(tmp_path / "cfg", 2).ppo
    for k in a:
        d = (a[k] - b[k]).abs().max().item()
        assert d <= 1e-2 * cfg.actor_lr, (k, d)
    rolls = sorted(p.name for p in (tmp_path / "two" / "ppo" / "rollouts").iterdir())
    assert rolls == ["step-000001.rank-0.jsonl", "step-000001.rank-1.jsonl",
                     "step-000002.rank-0.jsonl", "step-000002.rank-1.jsonl"]
    ca = torch.load(tmp_path / "two" / "ppo" / "final" / "critic.pt")
    cb = torch.load(tmp_path / "one" / "ppo" / "final" / "critic.pt")
    for k in ca:
        d = (ca[k] - cb[k]).abs().max().item()
        assert d <= 1e-2 * cfg.critic_lr, (k, d)
    import json
    import math
    for run in ("one", "two"):  # rank 0's metrics: token means of its own share
        for line in (tmp_path / run / "ppo" / "metrics.jsonl").read_text().splitlines():
            m = json.loads(line)
            assert 0 < m["entropy"] <= math.log(262) + 1e-6 and 0 <= m["clip_frac"] <= 1
    opt = torch.load(tmp_path / "two" / "ppo" / "ckpt" / "step-000002" / "optim.pt",
                     weights_only=False)
    assert opt["actor"]["state"]
