"""The trainer's configuration: TOML (Python's own tomllib) or JSON, into dataclasses.

Unknown keys are errors (a typo must not silently fall back to a default). Every default is
the paper's setting where it has one (DESIGN.md §1 "RL recipe"); the sizes that only make
sense on a GPU cluster (batch 1024, 150 steps, 131k context) are the defaults of the H200
example config (train/configs/h200.toml), not of these dataclasses, so that a bare config stays
runnable on a laptop.
"""

import dataclasses
import json
import pathlib
import tomllib


@dataclasses.dataclass
class ModelCfg:
    # A Hugging Face model directory (config + weights + tokenizer), or "tiny": a randomly
    # initialised Llama built from the fields below with the byte tokenizer (train/tokenizer.py).
    path: str = "tiny"
    tokenizer: str = ""  # a tokenizer directory when it is not the model's; "byte" forces ours
    hidden: int = 64
    layers: int = 2
    heads: int = 4
    max_positions: int = 4096
    dtype: str = "float32"  # float32 | bfloat16
    gradient_checkpointing: bool = False


@dataclasses.dataclass
class ServerCfg:
    # How episodes reach the environment: "stdio" spawns `cuda-agent serve --stdio` (command
    # below), "http" connects to a running `serve --http` at url.
    transport: str = "stdio"
    command: str = "cuda-agent"  # the binary; $CUDA_AGENT overrides
    args: list = dataclasses.field(default_factory=list)  # e.g. ["--tasks", "ops.jsonl"]
    url: str = "http://127.0.0.1:8000/mcp"
    token_env: str = "CUDA_AGENT_SERVE_TOKEN"
    timeout_s: float = 3600.0
    tasks: list = dataclasses.field(default_factory=list)  # task ids; empty: all of list_tasks


@dataclasses.dataclass
class RolloutCfg:
    engine: str = "local"  # local (in-process sampling) | openai (an external server)
    base_url: str = "http://127.0.0.1:8001/v1"  # the openai engine's completions endpoint root
    model_name: str = "policy"
    weight_sync: str = ""  # "module:function" called with (actor, step, cfg) after each update
    temperature: float = 1.0
    max_prompt_tokens: int = 32768  # longer prompts keep their last tokens (a tiny model's
    #                                 context is short; SKILL.md alone is ~5k tokens)
    max_new_tokens: int = 2048  # per model reply
    max_seq_tokens: int = 131072  # the whole trajectory; the episode stops at it
    max_tool_output_tokens: int = 4096  # a tool result longer than this keeps head and tail
    max_turns: int = 150
    parallel: int = 8  # episodes in flight
    final_eval: bool = True  # agent episodes: finish profiles the workspace as left (else the
    #                          best evaluation the agent's ./verify and ./profile recorded)
    eval_stage: str = "profile"  # single-turn answers: evaluate's stage (verify: reward 1 at
    #                              most, untimed; the CPU tests use it: CPU profiling is slow)


@dataclasses.dataclass
class PPOCfg:
    steps: int = 150
    batch_episodes: int = 16  # trajectories per update (the paper: 1024)
    actor_lr: float = 3e-6
    critic_lr: float = 6e-6
    clip_low: float = 0.2
    clip_high: float = 0.28
    value_clip: float = 0.2
    gamma: float = 1.0
    lam: float = 0.95
    minibatches: int = 1  # optimizer steps per batch (the paper: one update per batch)
    micro_batch: int = 4  # sequences per forward (gradient accumulation)
    tis_cap: float = 2.0  # truncated importance weight cap; 0 turns the correction off
    recompute_old_logprobs: bool = True  # ratio against the trainer's pi_old, IS vs rollout's
    entropy_coef: float = 0.0
    kl_coef: float = 0.0  # penalty against the stage's initial actor (a frozen copy) when > 0
    whiten_advantages: bool = False
    max_grad_norm: float = 1.0
    weight_decay: float = 0.0
    critic_warmup_steps: int = 0  # updates that train only the critic
    post_update_kl: bool = True  # one more forward to report KL(old || new) after the update
    save_every: int = 10


@dataclasses.dataclass
class WarmupCfg:
    """Stage 1: single-turn PPO (prompt = SKILL.md + task, one answer holding every file)."""
    enabled: bool = True
    steps: int = 20
    batch_episodes: int = 16
    max_new_tokens: int = 8192
    actor_lr: float = 3e-6
    critic_lr: float = 6e-6
    # JSONL files of scripted answers {"task": ID, "reply": TEXT} played in every batch (their
    # log-probs are the actor's): demonstrations, or a test's known-good answer.
    inject: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class CollectCfg:
    """Stage 2: agent trajectories through the server with the warm-up model."""
    enabled: bool = True
    episodes_per_task: int = 4
    # JSONL files of scripted episodes {"task": ID, "replies": [TEXT, ...]}: each reply is
    # played as the model's turn (its tool calls run on the server), once.
    inject: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class RFTCfg:
    """Stage 3: rejection fine-tuning of the actor and value pretraining of the critic."""
    enabled: bool = True
    min_reward: float = 0.0  # keep trajectories with reward > this
    max_repeats: int = 3  # the same tool call this many times in a row is looping
    epochs: int = 2
    lr: float = 1e-5
    value_epochs: int = 2
    value_lr: float = 6e-6
    value_on: str = "all"  # all | kept: the trajectories the critic is pretrained on
    batch: int = 64  # trajectories per optimizer step
    micro_batch: int = 4


@dataclasses.dataclass
class Config:
    out_dir: str = "runs/train"
    seed: int = 0
    model: ModelCfg = dataclasses.field(default_factory=ModelCfg)
    server: ServerCfg = dataclasses.field(default_factory=ServerCfg)
    rollout: RolloutCfg = dataclasses.field(default_factory=RolloutCfg)
    warmup: WarmupCfg = dataclasses.field(default_factory=WarmupCfg)
    collect: CollectCfg = dataclasses.field(default_factory=CollectCfg)
    rft: RFTCfg = dataclasses.field(default_factory=RFTCfg)
    ppo: PPOCfg = dataclasses.field(default_factory=PPOCfg)
    tensorboard: bool = True


def _build(cls, data, where):
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected a table, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kw = {}
    for k, v in data.items():
        if k not in fields:
            raise ValueError(f"{where}: unknown key {k!r} (known: {', '.join(fields)})")
        t = fields[k].type
        if dataclasses.is_dataclass(t):
            kw[k] = _build(t, v, f"{where}.{k}")
        else:
            kw[k] = v
    return cls(**kw)


def from_dict(data):
    return _build(Config, data, "config")


def load(path):
    """A Config from a .toml or .json file."""
    p = pathlib.Path(path)
    text = p.read_text()
    data = tomllib.loads(text) if p.suffix == ".toml" else json.loads(text)
    return from_dict(data)


def to_dict(cfg):
    return dataclasses.asdict(cfg)


def override(cfg, kv):
    """Apply "section.key=VALUE" (VALUE as JSON when it parses, else the string)."""
    key, eq, raw = kv.partition("=")
    if not eq:
        raise ValueError(f"--set {kv!r}: expected KEY=VALUE")
    try:
        val = json.loads(raw)
    except ValueError:
        val = raw
    *path, last = key.split(".")
    obj = cfg
    for p in path:
        if not dataclasses.is_dataclass(obj) or not hasattr(obj, p):
            raise ValueError(f"--set {key}: no section {p!r}")
        obj = getattr(obj, p)
    if not dataclasses.is_dataclass(obj) or last not in {f.name for f in dataclasses.fields(obj)}:
        raise ValueError(f"--set {key}: unknown key {last!r}")
    setattr(obj, last, val)
