"""What every stage shares: seeding, distributed set-up (torchrun + FSDP2), the metrics log
(JSONL, and TensorBoard when it is installed), and checkpoints.

Checkpoint directory (one per saved step, written to a temporary name and renamed, so a crash
never leaves a half-written one; `latest` names the newest):

    <stage dir>/ckpt/step-000012/actor/       save_pretrained (config + safetensors)
                                 critic.pt    the critic's state dict
                                 optim.pt     both optimizers' state dicts
                                 state.json   stage, step, config, RNG states, data cursor
    <stage dir>/final/                        the same layout, what the next stage starts from

Under FSDP2 (world size > 1) the full state dicts are gathered to rank 0 (offloaded to the
CPU) with torch.distributed.checkpoint.state_dict, and rank 0 writes; loading happens before
sharding, so every rank reads the same full files.
"""

import json
import os
import pathlib
import random
import shutil
import time

import torch


def quiet():
    """No progress bars from transformers' save_pretrained in the logs."""
    try:
        from transformers.utils import logging
        logging.disable_progress_bar()
    except ImportError:
        pass


def seed_all(seed):
    random.seed(seed)
    torch.manual_seed(seed)


def rng_state():
    return {"torch": torch.get_rng_state().tolist(), "python": repr(random.getstate())}


def set_rng_state(st):
    torch.set_rng_state(torch.tensor(st["torch"], dtype=torch.uint8))
    import ast
    v = ast.literal_eval(st["python"])
    random.setstate((v[0], tuple(v[1]), v[2]))


# ---- distributed ----

def world():
    return int(os.environ.get("WORLD_SIZE", "1"))


def rank():
    return int(os.environ.get("RANK", "0"))


def init_distributed():
    """Under torchrun: the process group (NCCL on GPUs, gloo on the CPU) and this rank's device.
    Returns the device."""
    if world() == 1:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    import torch.distributed as dist
    if torch.cuda.is_available():
        dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(dev)
        backend = "nccl"
    else:
        dev, backend = torch.device("cpu"), "gloo"
    if not dist.is_initialized():
        import datetime
        # Long: ranks wait at barriers while rank 0 alone runs stage 3.
        dist.init_process_group(backend, timeout=datetime.timedelta(hours=6))
    return dev


def barrier():
    if world() > 1:
        import torch.distributed as dist
        dist.barrier()


def shard(module):
    """FSDP2 (`fully_shard`) on each decoder layer, then the whole module, when world > 1."""
    if world() == 1:
        return module
    from torch.distributed.fsdp import fully_shard
    layers = getattr(getattr(module, "model", None), "layers", None)
    if layers is None:
        layers = getattr(getattr(module, "backbone", None), "layers", None) or []
    for layer in layers:
        fully_shard(layer)
    fully_shard(module)
    return module


def full_state_dict(module, gather=True):
    if world() == 1 or not gather:
        return {k: v.detach().cpu() for k, v in module.state_dict().items()}
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    return get_model_state_dict(module, options=StateDictOptions(full_state_dict=True,
                                                                 cpu_offload=True))


def gathered_state_dict(module):
    """The full (unsharded) state dict on every rank, for the rollout copy of the actor."""
    if world() == 1:
        return module.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    return get_model_state_dict(module, options=StateDictOptions(full_state_dict=True))


def full_optim_state(module, opt):
    if world() == 1:
        return opt.state_dict()
    from torch.distributed.checkpoint.state_dict import (StateDictOptions,
                                                         get_optimizer_state_dict)
    return get_optimizer_state_dict(module, opt, options=StateDictOptions(full_state_dict=True,
                                                                          cpu_offload=True))


# ---- metrics ----

class Metrics:
    """Appends one JSON object per step to <dir>/metrics.jsonl and mirrors the numbers to
    TensorBoard (<dir>/tb) when torch.utils.tensorboard imports."""

    def __init__(self, d, tensorboard=True):
        self.d = pathlib.Path(d)
        self.d.mkdir(parents=True, exist_ok=True)
        self.f = open(self.d / "metrics.jsonl", "a") if rank() == 0 else None
        self.tb = None
        if tensorboard and rank() == 0:
            try:
                from torch.utils.tensorboard import SummaryWriter
                self.tb = SummaryWriter(str(self.d / "tb"))
            except ImportError:
                self.tb = None  # JSONL only: `pip install tensorboard` adds the event files

    def log(self, stage, step, values):
        if self.f is None:
            return
        rec = {"stage": stage, "step": step, "time": time.time(), **values}
        self.f.write(json.dumps(rec) + "\n")
        self.f.flush()
        if self.tb:
            for k, v in values.items():
                if isinstance(v, (int, float)) and v == v:
                    self.tb.add_scalar(f"{stage}/{k}", v, step)
            self.tb.flush()

    def close(self):
        if self.f:
            self.f.close()
        if self.tb:
            self.tb.close()


# ---- checkpoints ----

def save(d, actor, critic, tok, opts=None, state=None, gather=True):
    """Write actor, critic, optimizers and state to directory d (atomically). Under torchrun
    every rank calls it (the state dicts are gathered; rank 0 writes); gather=False: models
    that are not sharded, saved by the one rank that calls it, without collectives."""
    d = pathlib.Path(d)
    quiet()
    actor_sd = full_state_dict(actor, gather)
    critic_sd = full_state_dict(critic, gather) if critic is not None else None
    osd = None
    if opts:
        osd = {"actor": full_optim_state(actor, opts[0]),
               "critic": full_optim_state(critic, opts[1]) if opts[1] is not None else None}
    if gather and rank() != 0:
        return
    tmp = d.with_name(d.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    actor.save_pretrained(tmp / "actor", state_dict=actor_sd)
    tok.save_pretrained(tmp / "actor")
    if critic_sd is not None:
        torch.save(critic_sd, tmp / "critic.pt")
    if osd is not None:
        torch.save(osd, tmp / "optim.pt")
    (tmp / "state.json").write_text(json.dumps({**(state or {}), "rng": rng_state()}))
    shutil.rmtree(d, ignore_errors=True)
    os.replace(tmp, d)
    if d.parent.name == "ckpt":
        (d.parent / "latest").write_text(d.name)


def latest(stage_dir):
    p = pathlib.Path(stage_dir) / "ckpt" / "latest"
    if not p.exists():
        return None
    d = p.parent / p.read_text().strip()
    return d if (d / "state.json").exists() else None


def load_state(d):
    return json.loads((pathlib.Path(d) / "state.json").read_text())


def load_critic(critic, d):
    critic.load_state_dict(torch.load(pathlib.Path(d) / "critic.pt", weights_only=True))


def load_optims(d, modules, opts):
    """The optimizers' state from d (written by save: full state dicts), into plain or
    FSDP2-sharded optimizers (every rank reads the file)."""
    osd = torch.load(pathlib.Path(d) / "optim.pt", weights_only=False)
    for m, o, k in ((modules[0], opts[0], "actor"), (modules[1], opts[1], "critic")):
        if o is None or osd.get(k) is None:
            continue
        if world() == 1:
            o.load_state_dict(osd[k])
        else:
            from torch.distributed.checkpoint.state_dict import (StateDictOptions,
                                                                 set_optimizer_state_dict)
            set_optimizer_state_dict(m, o, osd[k],
                                     options=StateDictOptions(full_state_dict=True))
