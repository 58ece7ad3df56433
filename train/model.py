"""Actor and critic: building them (a Hugging Face checkpoint, or a tiny random Llama from the
config), per-token log-probabilities and values over padded batches, and in-process sampling.

The critic is the actor's backbone (a copy of its weights at the start) with a scalar head: the
value of the state before token t is read at position t - 1, the same position whose logits
give log p(token t).
"""

import torch
import torch.nn as nn
import torch.utils.checkpoint

from train import chat


def _dtype(name):
    return {"float32": torch.float32, "bfloat16": torch.bfloat16}[name]


def load_tokenizer(mcfg):
    if mcfg.tokenizer == "byte" or (mcfg.path == "tiny" and not mcfg.tokenizer):
        return chat.ByteTokenizer()
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(mcfg.tokenizer or mcfg.path)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def tiny_config(mcfg, tok):
    from transformers import LlamaConfig
    return LlamaConfig(vocab_size=tok.vocab_size, hidden_size=mcfg.hidden,
                       intermediate_size=mcfg.hidden * 2, num_hidden_layers=mcfg.layers,
                       num_attention_heads=mcfg.heads, num_key_value_heads=mcfg.heads,
                       max_position_embeddings=mcfg.max_positions,
                       pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                       bos_token_id=None, tie_word_embeddings=False)


def build_actor(mcfg, tok, path=None):
    """The policy: from `path` (a saved actor), the config's model path, or a tiny random one
    (seeded by the caller's torch.manual_seed)."""
    from transformers import AutoModelForCausalLM
    src = path or (None if mcfg.path == "tiny" else mcfg.path)
    if src:
        m = AutoModelForCausalLM.from_pretrained(src, dtype=_dtype(mcfg.dtype))
    else:
        m = AutoModelForCausalLM.from_config(tiny_config(mcfg, tok)).to(_dtype(mcfg.dtype))
    if mcfg.gradient_checkpointing:
        m.gradient_checkpointing_enable()
    m.config.use_cache = True
    return m


class Critic(nn.Module):
    """A causal LM backbone with a scalar value head."""

    def __init__(self, backbone, hidden):
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(hidden, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, input_ids, attention_mask):
        h = self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.head(h.to(self.head.weight.dtype)).squeeze(-1)


def build_critic(actor):
    """A critic initialised from the actor's backbone (its own copy of the weights)."""
    import copy
    base = copy.deepcopy(actor.base_model if hasattr(actor, "base_model") else actor.model)
    return Critic(base, actor.config.hidden_size).to(next(actor.parameters()).dtype)


def pad_batch(seqs, pad_id):
    """[list of id lists] -> (ids [B, T], attention [B, T]) right-padded."""
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    att = torch.zeros((len(seqs), T), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s, dtype=torch.long)
        att[i, :len(s)] = 1
    return ids, att


HEAD_CHUNK = 1024  # positions per LM-head chunk (logits of a 150k vocabulary: 0.6 MB each)


def _head_chunk(head, h, nxt):
    logits = head(h).float()
    logp = torch.log_softmax(logits, dim=-1)
    lp = logp.gather(-1, nxt.unsqueeze(-1)).squeeze(-1)
    ent = -(logp.exp() * logp).sum(-1)
    return lp, ent


class _LogprobHead(nn.Module):
    """Stands in for the LM head during one forward: instead of [B, T, vocab] logits it
    returns [B, T, 2] (log-prob of the next token, entropy), computed HEAD_CHUNK positions at
    a time (recomputed in the backward pass under grad). It runs inside the model's own
    forward, so FSDP's hooks gather the head's weight as usual."""

    def __init__(self, head, nxt):
        super().__init__()
        self.head = head
        self.nxt = nxt

    def forward(self, h):
        h = h[:, :-1]
        out = []
        for s in range(0, h.shape[1], HEAD_CHUNK):
            hc, nc = h[:, s:s + HEAD_CHUNK], self.nxt[:, s:s + HEAD_CHUNK]
            if torch.is_grad_enabled():
                lp, ent = torch.utils.checkpoint.checkpoint(_head_chunk, self.head, hc, nc,
                                                            use_reentrant=False)
            else:
                lp, ent = _head_chunk(self.head, hc, nc)
            out.append(torch.stack([lp, ent], -1))
        pad = torch.zeros((h.shape[0], 1, 2), dtype=torch.float32, device=h.device)
        return torch.cat([pad] + out, dim=1)


def seq_logprobs(actor, ids, att, with_entropy=False):
    """log p(ids[:, t] | ids[:, <t]) for t >= 1 at index t (index 0 is 0), and the entropy of
    the distribution each token was drawn from. The [B, T, vocab] logits never exist at once
    (_LogprobHead): at 32k tokens and a 150k vocabulary they would be 19 GB in fp32."""
    name = "lm_head" if hasattr(actor, "lm_head") else None
    head = actor.get_output_embeddings()
    if name is None or getattr(actor, name) is not head:
        logits = actor(input_ids=ids, attention_mask=att, use_cache=False).logits[:, :-1]
        from train import algo
        zero = torch.zeros((ids.shape[0], 1), dtype=torch.float32, device=ids.device)
        lp = torch.cat([zero, algo.token_logprobs(logits, ids[:, 1:])], 1)
        ent = torch.cat([zero, algo.entropy_from_logits(logits)], 1) if with_entropy else None
        return lp, ent
    actor.lm_head = _LogprobHead(head, ids[:, 1:])
    try:
        out = actor(input_ids=ids, attention_mask=att, use_cache=False).logits.float()
    finally:
        actor.lm_head = head
    # out[:, 0] is padding, out[:, t] for t >= 1 holds token t's log-prob and entropy.
    lp = out[..., 0]
    return lp, (out[..., 1] if with_entropy else None)


def seq_values(critic, ids, att):
    """The value of the state before token t, at index t (read at position t - 1)."""
    v = critic(ids, att)
    out = torch.zeros(ids.shape, dtype=torch.float32, device=ids.device)
    out[:, 1:] = v[:, :-1].float()
    return out


# transformers 5.x names the KV cache `cache` (in and out); 4.x `past_key_values`.
_CACHE_ARG = "cache"


def _cache(out):
    global _CACHE_ARG
    if "cache" in out:
        return out["cache"]
    _CACHE_ARG = "past_key_values"
    return out["past_key_values"]


@torch.no_grad()
def sample(actor, prompt_ids, max_new_tokens, eos_id, temperature=1.0, generator=None,
           stop_text=None, tok=None):
    """Sample one reply with the KV cache. Returns (ids, logprobs, finished): the log-probs are
    of the distribution sampled from (temperature applied), so with temperature 1 they are the
    actor's. `finished` is True when the reply ended with eos."""
    actor.eval()
    dev = next(actor.parameters()).device
    x = torch.tensor([prompt_ids], dtype=torch.long, device=dev)
    out = actor(input_ids=x, use_cache=True)
    past, logits = _cache(out), out.logits[:, -1]
    ids, lps = [], []
    for _ in range(max_new_tokens):
        logp = torch.log_softmax(logits.float() / temperature, dim=-1)
        t = torch.multinomial(logp.exp(), 1, generator=generator)
        tid = int(t.item())
        ids.append(tid)
        lps.append(float(logp[0, tid]))
        if tid == eos_id:
            return ids, lps, True
        out = actor(input_ids=t.to(dev), use_cache=True, **{_CACHE_ARG: past})
        past, logits = _cache(out), out.logits[:, -1]
    return ids, lps, False
