"""The four stages (DESIGN.md §1 "RL recipe") and the driver that runs them in order.

    <out_dir>/warmup/   stage 1: single-turn PPO           final/ = actor + critic
    <out_dir>/collect/  stage 2: trajectories.jsonl (one episode per line, token ids,
                        log-probs, masks, reward, messages)
    <out_dir>/rft/      stage 3: rejection fine-tuning of the actor + value pretraining of the
                        critic on stage 2's trajectories; filter.json says what was kept
    <out_dir>/ppo/      stage 4: agentic PPO from rft/final

Each stage starts from the previous stage's final/ (or the configured model when the previous
stage is disabled), resumes from its own latest checkpoint, and is skipped when its final/
exists. A stage's metrics go to <stage dir>/metrics.jsonl and <stage dir>/tb.
"""

import argparse
import asyncio
import copy
import json
import pathlib
import sys
import time

import torch

from train import config as C, model as M, ppo_update as U, rollout as R, runtime as RT
from train.chat import ChatFormat

ORDER = ["warmup", "collect", "rft", "ppo"]


class Ctx:
    """A stage's models, tokenizer, optimizers and directories."""

    def __init__(self, cfg, name):
        self.cfg = cfg
        self.name = name
        self.dir = pathlib.Path(cfg.out_dir) / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.tok = M.load_tokenizer(cfg.model)
        self.fmt = ChatFormat(self.tok)
        self.pad = self.tok.pad_token_id

    def init_dir(self):
        """The final/ of the nearest earlier stage that has one (None: the configured model)."""
        i = ORDER.index(self.name)
        for prev in reversed(ORDER[:i]):
            d = pathlib.Path(self.cfg.out_dir) / prev / "final"
            if (d / "actor").exists():
                return d
        return None

    def models(self, src=None):
        """Actor and critic from src (a checkpoint dir), else from init_dir(), else fresh."""
        RT.seed_all(self.cfg.seed)
        src = src or self.init_dir()
        actor = M.build_actor(self.cfg.model, self.tok, str(src / "actor") if src else None)
        critic = M.build_critic(actor)
        if src and (src / "critic.pt").exists():
            RT.load_critic(critic, src)
        return actor, critic

    def done(self):
        return (self.dir / "final" / "state.json").exists()


def _engine(ctx, actor, seed):
    r = ctx.cfg.rollout
    if r.engine == "local":
        return R.LocalEngine(actor, ctx.fmt.eos, r.temperature, seed)
    if r.engine == "openai":
        return R.OpenAIEngine(r.base_url, r.model_name, r.temperature)
    raise ValueError(f"rollout.engine must be local or openai, not {r.engine!r}")


def _read_jsonl(paths):
    out = []
    for p in paths:
        out += [json.loads(x) for x in pathlib.Path(p).read_text().splitlines() if x.strip()]
    return out


async def _tasks(ctx, env):
    t = ctx.cfg.server.tasks or await env.tasks()
    if not t:
        raise RuntimeError("the server lists no tasks (serve --tasks SOURCE)")
    return t


def _seed(cfg, stage, k):
    """Episode k's sampling seed: fixed by the run's seed, the stage and k (so a resumed step
    samples what it sampled before, and no two stages share a stream)."""
    return (cfg.seed * 1_000_003 + ORDER.index(stage) * 100_000_007 + k) % 2**63


def _log(ctx, msg):
    if RT.rank() == 0:
        print(f"[{ctx.name}] {msg}", file=sys.stderr, flush=True)


# ---- stages 1 and 4: PPO ----

def ppo_stage(cfg, name, env_factory=None):
    """Stage 1 (name "warmup": single-turn episodes) or 4 ("ppo": agentic episodes).
    env_factory: an async context manager of the environment (default: McpEnv on the
    configured server; tests pass a toy environment)."""
    ctx = Ctx(cfg, name)
    if ctx.done():
        _log(ctx, "final/ exists: done")
        return ctx.dir / "final"
    single = name == "warmup"
    p = copy.deepcopy(cfg.ppo)
    if single:
        w = cfg.warmup
        p.steps, p.batch_episodes, p.actor_lr, p.critic_lr = (w.steps, w.batch_episodes,
                                                              w.actor_lr, w.critic_lr)
    ck = RT.latest(ctx.dir)
    actor, critic = ctx.models(ck)
    dev = RT.init_distributed()
    actor.to(dev)
    critic.to(dev)
    ref = None
    if p.kl_coef > 0:  # the stage's starting actor, also when resuming
        src = ctx.init_dir()
        RT.seed_all(cfg.seed)
        ref = M.build_actor(cfg.model, ctx.tok, str(src / "actor") if src else None)
        ref.to(dev).eval().requires_grad_(False)
    # Under torchrun each rank samples with its own unsharded copy of the actor (FSDP's
    # forward is a collective: ranks generating replies of different lengths would hang),
    # refreshed from the sharded actor after every update. Large models use the openai engine.
    gen_actor = copy.deepcopy(actor) if RT.world() > 1 else actor
    RT.shard(actor)
    RT.shard(critic)
    opt_a = torch.optim.AdamW(actor.parameters(), lr=p.actor_lr, weight_decay=p.weight_decay)
    opt_c = torch.optim.AdamW(critic.parameters(), lr=p.critic_lr, weight_decay=p.weight_decay)
    start = 0
    if ck:
        RT.load_optims(ck, (actor, critic), (opt_a, opt_c))
        st = RT.load_state(ck)
        start = st["step"]
        RT.set_rng_state(st["rng"])
        _log(ctx, f"resumed from {ck} at step {start}")
    inject = _read_jsonl(cfg.warmup.inject) if single else []
    metrics = RT.Metrics(ctx.dir, cfg.tensorboard)
    sync = R.weight_sync_hook(cfg.rollout.weight_sync)
    rc = cfg.rollout

    async def main():
        async with (env_factory or (lambda: R.McpEnv(cfg.server)))() as env:
            tasks = await _tasks(ctx, env)
            for step in range(start, p.steps):
                jobs = [(tasks[(step * p.batch_episodes + i) % len(tasks)],
                         _seed(cfg, name, step * 10_007 + i), None)
                        for i in range(p.batch_episodes)]
                jobs += [(j.get("task") or tasks[0], cfg.seed + step, j) for j in inject]
                if len(jobs) % RT.world():
                    raise ValueError(f"{len(jobs)} episodes a step (batch_episodes + inject) do "
                                     f"not split over {RT.world()} ranks")
                jobs = jobs[RT.rank()::RT.world()]

                async def one(job):
                    task, seed, script = job
                    eng = _engine(ctx, gen_actor, seed)
                    if script is not None:
                        eng = R.ScriptedEngine([script["reply"]] if single else
                                               script["replies"], ctx.fmt, gen_actor)
                    if single:
                        s = await R.single_turn_episode(env, eng, ctx.fmt, ctx.tok, rc,
                                                        cfg.warmup.max_new_tokens, task, seed)
                    else:
                        s = await R.agent_episode(env, eng, ctx.fmt, ctx.tok, rc, task, seed)
                    s.scripted = script is not None
                    return s

                t0 = time.perf_counter()
                samples = await R.collect(one, jobs, rc.parallel)
                roll_s = time.perf_counter() - t0
                rdir = ctx.dir / "rollouts"
                rdir.mkdir(exist_ok=True)
                part = f".rank-{RT.rank()}" if RT.world() > 1 else ""
                (rdir / f"step-{step + 1:06d}{part}.jsonl").write_text(
                    "".join(s.to_json() + "\n" for s in samples))
                m = U.sample_metrics(samples, roll_s)
                m.update(U.ppo_update(actor, critic, opt_a, opt_c, samples, p, ctx.pad, ref,
                                      train_actor=step >= p.critic_warmup_steps))
                metrics.log(name, step + 1, m)
                _log(ctx, f"step {step + 1}/{p.steps}: reward {m['reward_mean']:+.3f} "
                     f"entropy {m['entropy']:.3f} clip {m['clip_frac']:.3f} "
                     f"ev {m['explained_variance']:.3f} kl {m.get('kl_post_update', 0):.2e}")
                if gen_actor is not actor:
                    gen_actor.load_state_dict(RT.gathered_state_dict(actor))
                if sync:
                    sync(actor, step + 1, cfg)
                if (step + 1) % p.save_every == 0 or step + 1 == p.steps:
                    RT.save(ctx.dir / "ckpt" / f"step-{step + 1:06d}", actor, critic, ctx.tok,
                            (opt_a, opt_c), {"stage": name, "step": step + 1,
                                             "config": C.to_dict(cfg)})

    asyncio.run(main())
    metrics.close()
    RT.save(ctx.dir / "final", actor, critic, ctx.tok, None,
            {"stage": name, "step": p.steps, "config": C.to_dict(cfg)})
    return ctx.dir / "final"


# ---- stage 2: trajectories ----

def _traj_files(d):
    """Stage 2's output: trajectories.jsonl, or one file per rank under torchrun."""
    return sorted(pathlib.Path(d).glob("trajectories*.jsonl"))


def collect_stage(cfg, env_factory=None):
    ctx = Ctx(cfg, "collect")
    part = f".rank-{RT.rank()}" if RT.world() > 1 else ""
    out = ctx.dir / f"trajectories{part}.jsonl"
    if (ctx.dir / "done").exists():
        _log(ctx, "done")
        return out
    actor, _ = ctx.models()
    actor.to(RT.init_distributed())
    have = set()  # resume: the episodes already written (by any rank) are not run again
    for f in _traj_files(ctx.dir):
        for line in f.read_text().splitlines():
            try:
                have.add(json.loads(line)["job"])
            except (ValueError, KeyError):
                pass  # a line torn by a crash: that episode runs again
    inject = _read_jsonl(cfg.collect.inject)
    rc = cfg.rollout
    metrics = RT.Metrics(ctx.dir, cfg.tensorboard)

    async def main():
        async with (env_factory or (lambda: R.McpEnv(cfg.server)))() as env:
            tasks = await _tasks(ctx, env)
            n = cfg.collect.episodes_per_task
            jobs = [(f"{t}/{k}", t, _seed(cfg, "collect", i * n + k), None)
                    for i, t in enumerate(tasks)
                    for k in range(cfg.collect.episodes_per_task)]
            jobs += [(f"inject/{i}", j.get("task") or tasks[0], cfg.seed + i, j)
                     for i, j in enumerate(inject)]
            jobs = [j for j in jobs if j[0] not in have][RT.rank()::RT.world()]
            if out.exists() and out.stat().st_size and not out.read_bytes().endswith(b"\n"):
                out.open("a").write("\n")  # after a torn line
            f = open(out, "a")

            async def one(job):
                key, task, seed, script = job
                eng = (R.ScriptedEngine(script["replies"], ctx.fmt, actor) if script
                       else _engine(ctx, actor, seed))
                try:
                    s = await R.agent_episode(env, eng, ctx.fmt, ctx.tok, rc, task, seed)
                except Exception as e:  # one episode's failure (the server refused it, a
                    # tool call timed out) loses that episode, not the collection; a rerun
                    # retries it
                    _log(ctx, f"episode {key} failed: {type(e).__name__}: {e}")
                    return None
                s.scripted = script is not None
                d = json.loads(s.to_json())
                d["job"] = key
                f.write(json.dumps(d) + "\n")
                f.flush()
                return s

            t0 = time.perf_counter()
            samples = [s for s in await R.collect(one, jobs, rc.parallel) if s is not None]
            f.close()
            if samples:
                m = U.sample_metrics(samples, time.perf_counter() - t0)
                metrics.log("collect", 1, m)
                _log(ctx, f"{len(samples)} episodes: reward {m['reward_mean']:+.3f}, "
                     f"{m['correct_frac']:.0%} correct")
            return len(jobs) - len(samples)

    failed = asyncio.run(main())
    metrics.close()
    if failed:
        raise RuntimeError(f"collect: {failed} episodes failed (above); run the stage again to "
                           "retry them (the others are kept)")
    RT.barrier()
    if RT.rank() == 0:
        (ctx.dir / "done").write_text("")
    return out


# ---- stage 3: rejection fine-tuning and value pretraining ----

def rft_filter(samples, rcfg):
    """(kept, reasons): trajectories with reward > min_reward, no malformed tool call and no
    tool call repeated max_repeats times in a row."""
    kept, why = [], {"low_reward": 0, "malformed": 0, "looping": 0}
    for s in samples:
        if s.reward <= rcfg.min_reward:
            why["low_reward"] += 1
        elif s.malformed:
            why["malformed"] += 1
        elif s.max_repeat >= rcfg.max_repeats:
            why["looping"] += 1
        else:
            kept.append(s)
    return kept, why


def rft_stage(cfg):
    """Stage 3, on rank 0 alone (other torchrun ranks wait at a barrier)."""
    ctx = Ctx(cfg, "rft")
    if RT.world() > 1:
        RT.init_distributed()
        if RT.rank() != 0:
            RT.barrier()
            return ctx.dir / "final"
    if ctx.done():
        _log(ctx, "final/ exists: done")
        RT.barrier()
        return ctx.dir / "final"
    srcs = _traj_files(pathlib.Path(cfg.out_dir) / "collect")
    if not srcs:
        raise RuntimeError(f"no trajectories in {cfg.out_dir}/collect: run the collect stage")
    samples, torn = [], 0
    for src in srcs:
        for x in src.read_text().splitlines():
            try:
                samples.append(R.Sample.from_json(x))
            except (ValueError, TypeError):
                torn += x.strip() != ""  # a line a crash cut short
    if torn:
        _log(ctx, f"{torn} torn trajectory lines skipped")
    kept, why = rft_filter(samples, cfg.rft)
    (ctx.dir / "filter.json").write_text(json.dumps(
        {"trajectories": len(samples), "kept": len(kept), "dropped": why,
         "kept_tasks": sorted({s.task for s in kept})}, indent=1))
    _log(ctx, f"{len(kept)} of {len(samples)} trajectories kept ({why})")
    actor, critic = ctx.models()
    dev = RT.init_distributed()  # (rank 0 only: stage 3 is small; no sharding)
    actor.to(dev)
    critic.to(dev)
    metrics = RT.Metrics(ctx.dir, cfg.tensorboard)
    r = cfg.rft
    if kept:
        opt = torch.optim.AdamW(actor.parameters(), lr=r.lr)
        for e in range(r.epochs):
            loss = U.sft_epoch(actor, opt, kept, ctx.pad, r.micro_batch, r.batch)
            metrics.log("rft", e + 1, {"sft_loss": loss, "kept": len(kept)})
    vsamples = samples if r.value_on == "all" else kept
    if vsamples:
        opt = torch.optim.AdamW(critic.parameters(), lr=r.value_lr)
        for e in range(r.value_epochs):
            loss, ev = U.value_epoch(critic, opt, vsamples, ctx.pad, r.micro_batch,
                                     cfg.ppo.gamma, cfg.ppo.lam, r.batch)
            metrics.log("value", e + 1, {"value_loss": loss, "explained_variance": ev})
    metrics.close()
    RT.save(ctx.dir / "final", actor, critic, ctx.tok, None,
            {"stage": "rft", "kept": len(kept), "config": C.to_dict(cfg)}, gather=False)
    RT.barrier()
    return ctx.dir / "final"


STAGES = {"warmup": lambda c: ppo_stage(c, "warmup"), "collect": collect_stage,
          "rft": rft_stage, "ppo": lambda c: ppo_stage(c, "ppo")}


def enabled(cfg, name):
    return getattr(cfg, name).enabled if name != "ppo" else True


def main(stage=None, argv=None):
    ap = argparse.ArgumentParser(prog=f"python3 -m train.{stage or 'run'}",
                                 description="cuda-agent's staged PPO trainer (train/README.md)")
    ap.add_argument("--config", required=True, help="a .toml or .json file (train/configs/)")
    ap.add_argument("--out-dir", help="overrides the config's out_dir")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override one setting, e.g. --set model.path=DIR --set ppo.steps=5 "
                         "(VALUE is JSON when it parses, else a string)")
    if stage is None:
        ap.add_argument("--stages", default=",".join(ORDER),
                        help="comma-separated subset of " + ",".join(ORDER))
    a = ap.parse_args(argv)
    cfg = C.load(a.config)
    for kv in a.set:
        try:
            C.override(cfg, kv)
        except ValueError as e:
            ap.error(str(e))
    if a.out_dir:
        cfg.out_dir = a.out_dir
    names = [stage] if stage else [s for s in a.stages.split(",") if s]
    for n in names:
        if n not in STAGES:
            ap.error(f"unknown stage {n!r} (stages: {', '.join(ORDER)})")
    for n in ORDER:
        if n in names and (stage or enabled(cfg, n)):
            STAGES[n](cfg)
    return 0
