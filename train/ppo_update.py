"""One PPO update of actor and critic on a batch of samples (train/rollout.py's Sample), and
the supervised steps of stage 3 (rejection fine-tuning, value pretraining).

The update, per batch:
1. no grad: the trainer's log-probs of the sampled tokens (pi_old), the critic's values, and
   (kl_coef > 0) the reference actor's log-probs;
2. rewards on each trajectory's last action token (minus kl_coef * (log pi_old - log pi_ref)
   per token when a KL penalty is on), GAE (gamma, lambda) over the action tokens;
3. `minibatches` optimizer steps (default 1: the paper's one update per batch), each over
   micro-batches with gradient accumulation; the losses are token means over the whole
   minibatch (each micro-batch's share weighted by its tokens);
4. the policy ratio is against pi_old as the trainer computes it; the rollout engine's
   log-probs enter only through the truncated importance weight min(pi_old / pi_rollout, cap)
   (recompute_old_logprobs = false uses the rollout's log-probs as pi_old instead).
"""

import time

import torch

from train import algo, model as M, runtime as RT


def batch_tensors(samples, pad_id, device=None):
    """(ids, attention, action mask, rollout log-probs, rewards) on `device` (default CPU)."""
    ids, att = M.pad_batch([s.tokens for s in samples], pad_id)
    B, T = ids.shape
    mask = torch.zeros((B, T))
    lp = torch.zeros((B, T))
    for i, s in enumerate(samples):
        mask[i, :len(s.mask)] = torch.tensor(s.mask, dtype=torch.float32)
        lp[i, :len(s.logprobs)] = torch.tensor(s.logprobs, dtype=torch.float32)
    mask[:, 0] = 0  # the first token has no log-prob
    scores = torch.tensor([s.reward for s in samples], dtype=torch.float32)
    if device is not None:
        return ids.to(device), att.to(device), mask.to(device), lp.to(device), scores
    return ids, att, mask, lp, scores


def _chunks(n, size):
    return [slice(i, min(n, i + size)) for i in range(0, n, max(1, size))]


@torch.no_grad()
def _forward_all(fn, ids, att, micro):
    return torch.cat([fn(ids[c], att[c]) for c in _chunks(ids.shape[0], micro)])


def _grad_norm(params, max_norm):
    params = [p for p in params if p.grad is not None]
    if not params:
        return 0.0
    n = torch.nn.utils.clip_grad_norm_(params, max_norm)
    return float(n.full_tensor() if hasattr(n, "full_tensor") else n)


def _global_tokens(n):
    """(tokens of the minibatch over every rank, gradient scale). FSDP averages gradients over
    the ranks, so each rank's token share is multiplied by the world size to make the result
    the token mean of the global minibatch."""
    w = RT.world()
    if w == 1:
        return n, 1.0
    import torch.distributed as dist
    g = n.clone()
    dist.all_reduce(g)
    return g, float(w)


def ppo_update(actor, critic, opt_a, opt_c, samples, pcfg, pad_id, ref=None, train_actor=True):
    """One update on `samples`; returns the step's metrics (floats)."""
    t0 = time.perf_counter()
    dev = next(actor.parameters()).device
    ids, att, mask, roll_lp, scores = batch_tensors(samples, pad_id)  # GAE on the CPU
    ids, att = ids.to(dev), att.to(dev)
    micro = pcfg.micro_batch
    actor.eval()
    critic.eval()
    old_lp = _forward_all(lambda i, a: M.seq_logprobs(actor, i, a)[0], ids, att, micro).cpu()
    values = _forward_all(lambda i, a: M.seq_values(critic, i, a), ids, att, micro).cpu() * mask
    rewards = algo.terminal_rewards(scores, mask)
    kl_ref = 0.0
    if ref is not None and pcfg.kl_coef > 0:
        ref_lp = _forward_all(lambda i, a: M.seq_logprobs(ref, i, a)[0], ids, att, micro).cpu()
        rewards = rewards - pcfg.kl_coef * (old_lp - ref_lp) * mask
        kl_ref = algo.kl_k3(old_lp, ref_lp, mask).item()
    adv, ret = algo.gae(rewards, values, mask, pcfg.gamma, pcfg.lam)
    if pcfg.whiten_advantages:
        adv = algo.whiten(adv, mask)
    if pcfg.recompute_old_logprobs:
        prox = old_lp
        isw = (algo.truncated_is_weights(old_lp, roll_lp, mask, pcfg.tis_cap)
               if pcfg.tis_cap > 0 else None)
    else:
        prox, isw = roll_lp * mask, None
    m = {"kl_rollout_train": algo.kl_k3(roll_lp, old_lp, mask).item(), "kl_ref": kl_ref,
         "explained_variance": algo.explained_variance(values, ret, mask),
         "value_mean": algo.masked_mean(values, mask).item(),
         "return_mean": algo.masked_mean(ret, mask).item(),
         "advantage_mean": algo.masked_mean(adv, mask).item()}
    if isw is not None:
        raw = torch.exp(old_lp - roll_lp)
        m["tis_weight_mean"] = algo.masked_mean(isw, mask).item()
        m["tis_truncated_frac"] = algo.masked_mean((raw > pcfg.tis_cap).float(), mask).item()
    mask, adv, ret, prox, values = (x.to(dev) for x in (mask, adv, ret, prox, values))
    isw = isw.to(dev) if isw is not None else None
    acc = {"pg_loss": 0.0, "vf_loss": 0.0, "entropy": 0.0, "clip_frac": 0.0, "approx_kl": 0.0,
           "grad_norm_actor": 0.0, "grad_norm_critic": 0.0}
    mbs = _chunks(len(samples), -(-len(samples) // max(1, pcfg.minibatches)))
    actor.train()
    critic.train()
    for mb in mbs:
        local = mask[mb].sum().clamp(min=1)
        ntok, scale = _global_tokens(mask[mb].sum())
        ntok = ntok.clamp(min=1)
        opt_a.zero_grad(set_to_none=True)
        opt_c.zero_grad(set_to_none=True)
        for c in _chunks(mb.stop - mb.start, micro):
            sl = slice(mb.start + c.start, mb.start + c.stop)
            mk = mask[sl]
            share = (mk.sum() / ntok).item() * scale  # of the gradient
            ms = (mk.sum() / local).item() / len(mbs)  # of this rank's metrics
            if share == 0 and scale == 1.0:
                continue  # (under FSDP every rank runs every micro-batch: collectives)
            if train_actor:
                lp, ent = M.seq_logprobs(actor, ids[sl], att[sl], with_entropy=True)
                pg, pm = algo.policy_loss(lp, prox[sl], adv[sl], mk, pcfg.clip_low,
                                          pcfg.clip_high, None if isw is None else isw[sl])
                e = algo.masked_mean(ent, mk)
                loss = pg - pcfg.entropy_coef * e
                (loss * share).backward()
                acc["pg_loss"] += pg.item() * ms
                acc["entropy"] += e.item() * ms
                acc["clip_frac"] += pm["clip_frac"] * ms
                acc["approx_kl"] += pm["approx_kl"] * ms
            v = M.seq_values(critic, ids[sl], att[sl])
            vl = algo.value_loss(v, values[sl], ret[sl], mk, pcfg.value_clip)
            (vl * share).backward()
            acc["vf_loss"] += vl.item() * ms
        if train_actor:
            acc["grad_norm_actor"] += _grad_norm(actor.parameters(), pcfg.max_grad_norm) / len(mbs)
            opt_a.step()
        acc["grad_norm_critic"] += _grad_norm(critic.parameters(), pcfg.max_grad_norm) / len(mbs)
        opt_c.step()
    m.update(acc)
    if pcfg.post_update_kl and train_actor:
        actor.eval()
        new_lp = _forward_all(lambda i, a: M.seq_logprobs(actor, i, a)[0], ids, att, micro)
        m["kl_post_update"] = algo.kl_k3(old_lp.to(dev), new_lp, mask).item()
    m["update_s"] = time.perf_counter() - t0
    if torch.cuda.is_available():
        m["gpu_mem_max_gib"] = torch.cuda.max_memory_allocated() / 2**30
        m["gpu_mem_reserved_gib"] = torch.cuda.max_memory_reserved() / 2**30
    m["train_tokens_per_s"] = float(att.sum()) / max(m["update_s"], 1e-9)
    return m


def sample_metrics(samples, rollout_s):
    """Reward and length statistics of a batch of samples."""
    r = torch.tensor([s.reward for s in samples], dtype=torch.float32)
    resp = torch.tensor([s.response_tokens for s in samples], dtype=torch.float32)
    seq = torch.tensor([len(s.tokens) for s in samples], dtype=torch.float32)
    gen = float(resp.sum())
    m = {"reward_mean": r.mean().item(), "reward_std": r.std(unbiased=False).item(),
         "reward_max": r.max().item(), "reward_min": r.min().item(),
         "correct_frac": (r > 0).float().mean().item(),
         "response_len_mean": resp.mean().item(), "response_len_max": resp.max().item(),
         "seq_len_mean": seq.mean().item(), "episodes": len(samples),
         "turns_mean": sum(s.turns for s in samples) / len(samples),
         "malformed_calls": sum(s.malformed for s in samples),
         "evaluate_errors": sum("evaluate_error" in s.result for s in samples),
         "rollout_s": rollout_s, "gen_tokens_per_s": gen / max(rollout_s, 1e-9)}
    for v in (-1, 1, 2, 3):
        m[f"reward_eq_{v}"] = int((r == v).sum())
    return m


# ---- stage 3 ----

def sft_epoch(actor, opt, samples, pad_id, micro, batch=64, max_grad_norm=1.0):
    """One epoch of token-mean NLL on the samples' action tokens (tool outputs and prompts are
    context only), one optimizer step per `batch` samples. Returns the mean loss."""
    actor.train()
    total, n = 0.0, 0
    for b in _chunks(len(samples), batch):
        ids, att, mask, _, _ = batch_tensors(samples[b], pad_id,
                                             next(actor.parameters()).device)
        ntok = mask.sum().clamp(min=1)
        opt.zero_grad(set_to_none=True)
        for c in _chunks(ids.shape[0], micro):
            lp, _ = M.seq_logprobs(actor, ids[c], att[c])
            loss = -(lp * mask[c]).sum() / ntok
            loss.backward()
            total += loss.item()
        n += 1
        _grad_norm(actor.parameters(), max_grad_norm)
        opt.step()
    return total / max(1, n)


def value_epoch(critic, opt, samples, pad_id, micro, gamma, lam, batch=64, max_grad_norm=1.0):
    """One epoch of value pretraining: GAE(lambda) returns computed with the critic's current
    values are the per-token targets (recomputed every batch, so the targets bootstrap), one
    optimizer step per `batch` samples. Returns (mean loss, explained variance before)."""
    total, n, evs = 0.0, 0, []
    for b in _chunks(len(samples), batch):
        ids, att, mask, _, scores = batch_tensors(samples[b], pad_id)
        dev = next(critic.parameters()).device
        ids, att = ids.to(dev), att.to(dev)
        critic.eval()
        values = _forward_all(lambda i, a: M.seq_values(critic, i, a), ids, att, micro).cpu()
        values = values * mask
        _, ret = algo.gae(algo.terminal_rewards(scores, mask), values, mask, gamma, lam)
        mask, ret = mask.to(dev), ret.to(dev)
        evs.append(algo.explained_variance(values, ret, mask))
        critic.train()
        ntok = mask.sum().clamp(min=1)
        opt.zero_grad(set_to_none=True)
        for c in _chunks(ids.shape[0], micro):
            v = M.seq_values(critic, ids[c], att[c])
            loss = 0.5 * (((v - ret[c]) ** 2) * mask[c]).sum() / ntok
            loss.backward()
            total += loss.item()
        n += 1
        _grad_norm(critic.parameters(), max_grad_norm)
        opt.step()
    return total / max(1, n), sum(evs) / max(1, len(evs))
