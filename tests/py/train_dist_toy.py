"""Run by tests/py/test_train_dist.py under `torchrun --nproc_per_node N` (gloo, CPU): the toy
PPO stage of test_train_toy.py with FSDP2, into the directory given as argv[1]."""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import torch  # noqa: E402

from test_train_toy import toy, toy_config  # noqa: E402
from train import stages  # noqa: E402

if __name__ == "__main__":
    torch.manual_seed(0)
    stages.ppo_stage(toy_config(sys.argv[1], int(sys.argv[2])), "ppo", toy)
    import torch.distributed as dist
    if dist.is_initialized():
        # Both ranks reach the teardown together: a gloo group torn down while the other rank
        # still talks to it aborted once ("terminate called without an active exception").
        dist.barrier()
        dist.destroy_process_group()
