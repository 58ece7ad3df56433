"""The PPO arithmetic, on tensors only (no models, no I/O), so that every formula is tested
against hand-computed values (tests/py/test_train_math.py).

Conventions. A batch is [B, T] tensors right-padded to T. `mask` is 1 on tokens the policy
generated (the actions) and 0 on prompt, tool-output and padding tokens. Every loss and metric
is a token-level mean over mask = 1 tokens of the whole batch (DAPO's "token-level" loss: a long
trajectory weighs by its tokens, not as one sample). Rewards are sparse: one scalar per
trajectory, on its last action token.

GAE runs over the action tokens only: tool-output tokens are the environment's transition
between two actions, not steps of the MDP, so the recursion skips them (the value after the
last action token of a turn is the value at the first action token of the next turn). With
gamma = 1 this is what verl's multi-turn GAE computes with its response mask.
"""

import torch


def masked_mean(x, mask):
    """Mean of x over mask = 1 (0 when the mask is empty)."""
    n = mask.sum()
    return (x * mask).sum() / n.clamp(min=1)


def masked_var(x, mask):
    m = masked_mean(x, mask)
    return masked_mean((x - m) ** 2, mask)


def gae(rewards, values, mask, gamma=1.0, lam=0.95):
    """Per-token advantages and returns.

    rewards, values, mask: [B, T]. rewards is 0 everywhere but the last action token of each
    row (any reward on a masked-out token is ignored). Returns (advantages, returns), 0 off the
    mask. The step after the last action token of a row is terminal (value 0).

    Each row's action tokens are packed to the left ([B, N], order kept), the recursion runs
    over N vectorised across the batch, and the result is scattered back.
    """
    B, T = mask.shape
    mb = mask.bool()
    n = mb.sum(1)
    N = int(n.max()) if B else 0
    if N == 0:
        return torch.zeros_like(values), torch.zeros_like(values)
    # A stable sort of "not an action" puts each row's action positions first, in order.
    idx = torch.argsort((~mb).to(torch.int8), dim=1, stable=True)[:, :N]
    valid = (torch.arange(N)[None, :] < n[:, None]).to(values.dtype)
    v = values.gather(1, idx) * valid
    r = rewards.gather(1, idx) * valid
    nxt = torch.cat([v[:, 1:], torch.zeros(B, 1, dtype=v.dtype)], 1)
    delta = (r + gamma * nxt - v) * valid
    packed = torch.zeros_like(delta)
    last = torch.zeros(B, dtype=delta.dtype)
    for i in range(N - 1, -1, -1):
        last = delta[:, i] + gamma * lam * last
        packed[:, i] = last
    adv = torch.zeros_like(values).scatter(1, idx, packed * valid)
    adv = adv * mask
    return adv, (adv + values) * mask


def terminal_rewards(scores, mask):
    """[B, T] rewards: each row's score on its last mask = 1 token."""
    r = torch.zeros(mask.shape, dtype=torch.float32)
    for b in range(mask.shape[0]):
        idx = mask[b].nonzero(as_tuple=True)[0]
        if idx.numel():
            r[b, idx[-1]] = float(scores[b])
    return r


def whiten(x, mask, eps=1e-8):
    """Advantages normalised over the batch's action tokens (mean 0, std 1)."""
    m = masked_mean(x, mask)
    s = masked_var(x, mask).sqrt()
    return (x - m) / (s + eps) * mask


def truncated_is_weights(train_logprobs, rollout_logprobs, mask, cap=2.0):
    """Truncated importance weights for the train/inference mismatch (TIS): the rollout engine
    sampled with pi_infer, the trainer computes pi_train for the same tokens; the gradient is
    reweighted by min(pi_train / pi_infer, cap), detached. 1 off the mask."""
    w = torch.exp(train_logprobs - rollout_logprobs).clamp(max=cap)
    return torch.where(mask.bool(), w, torch.ones_like(w)).detach()


def policy_loss(logprobs, old_logprobs, advantages, mask, clip_low=0.2, clip_high=0.28,
                is_weights=None):
    """Clipped PPO surrogate with asymmetric clipping (clip-higher): the ratio is kept in
    [1 - clip_low, 1 + clip_high]. Returns (loss, metrics) where the metrics are floats:
    clip_frac (tokens whose gradient the clip removed), ratio_mean, approx_kl (k3 estimate of
    KL(old || new))."""
    log_ratio = (logprobs - old_logprobs) * mask
    ratio = torch.exp(log_ratio)
    pg1 = -advantages * ratio
    pg2 = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    per_tok = torch.maximum(pg1, pg2)
    if is_weights is not None:
        per_tok = per_tok * is_weights
    loss = masked_mean(per_tok, mask)
    with torch.no_grad():
        clipped = (pg2 > pg1).float()
        k3 = torch.exp(-log_ratio) - 1 + log_ratio
        metrics = {
            "clip_frac": masked_mean(clipped, mask).item(),
            "ratio_mean": masked_mean(ratio, mask).item(),
            "approx_kl": masked_mean(k3, mask).item(),
        }
    return loss, metrics


def value_loss(values, old_values, returns, mask, clip=None):
    """0.5 * (V - R)^2, token mean; with clip, PPO's clipped value loss (the larger of the
    clipped and unclipped errors, V kept within clip of the rollout's value)."""
    err = (values - returns) ** 2
    if clip is not None:
        vc = old_values + (values - old_values).clamp(-clip, clip)
        err = torch.maximum(err, (vc - returns) ** 2)
    return 0.5 * masked_mean(err, mask)


def explained_variance(values, returns, mask):
    """1 - Var(R - V) / Var(R) over the action tokens (1: perfect critic, 0: a constant)."""
    vr = masked_var(returns, mask)
    if vr.item() == 0:
        return float("nan")
    return (1 - masked_var(returns - values, mask) / vr).item()


def kl_k3(logp, ref_logp, mask):
    """Schulman's k3 estimator of KL(p || ref) from samples of p: E[r - 1 - log r], r = ref/p."""
    lr = (ref_logp - logp) * mask
    return masked_mean(torch.exp(lr) - 1 - lr, mask)


def entropy_from_logits(logits):
    """Entropy of each position's distribution: [B, T, V] -> [B, T]."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def token_logprobs(logits, tokens):
    """log p(tokens[t] | <t) for logits already aligned to tokens: [B, T, V], [B, T] -> [B, T]."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
