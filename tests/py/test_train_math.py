"""train/algo.py against hand-computed values: GAE over action tokens (tool tokens skipped),
the asymmetric clipped surrogate and its gradient, truncated importance weights, the clipped
value loss, explained variance, the k3 KL estimator; and a checkpoint round trip of a small
model (train/runtime.py)."""

import math
import pathlib
import sys

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from train import algo  # noqa: E402


def t(x):
    return torch.tensor([x], dtype=torch.float32)


def test_gae_gamma1_lambda095():
    # values 0.5, 0.2, 0.1, reward 1 at the end; gamma 1, lambda 0.95:
    # deltas -0.3, -0.1, 0.9; A2 = 0.9, A1 = -0.1 + 0.95 * 0.9 = 0.755,
    # A0 = -0.3 + 0.95 * 0.755 = 0.41725.
    mask = t([1, 1, 1])
    adv, ret = algo.gae(t([0, 0, 1]), t([0.5, 0.2, 0.1]), mask, 1.0, 0.95)
    assert adv[0].tolist() == pytest.approx([0.41725, 0.755, 0.9], abs=1e-6)
    assert ret[0].tolist() == pytest.approx([0.91725, 0.955, 1.0], abs=1e-6)


def test_gae_skips_tool_tokens():
    # The same three actions with a prompt token and two tool-output tokens between them: the
    # masked positions' values and rewards change nothing, and their advantages are 0.
    mask = t([0, 1, 1, 0, 0, 1])
    values = t([9.0, 0.5, 0.2, -7.0, 3.0, 0.1])
    rewards = t([5.0, 0, 0, 4.0, 0, 1])
    adv, ret = algo.gae(rewards, values, mask, 1.0, 0.95)
    assert adv[0].tolist() == pytest.approx([0, 0.41725, 0.755, 0, 0, 0.9], abs=1e-6)
    assert ret[0].tolist() == pytest.approx([0, 0.91725, 0.955, 0, 0, 1.0], abs=1e-6)


def test_gae_discounted():
    # gamma 0.9, lambda 1: deltas 0.9*0.2-0.5 = -0.32, 0.9*0.1-0.2 = -0.11, 1-0.1 = 0.9;
    # A2 = 0.9, A1 = -0.11 + 0.81 = 0.7, A0 = -0.32 + 0.63 = 0.31.
    adv, _ = algo.gae(t([0, 0, 1]), t([0.5, 0.2, 0.1]), t([1, 1, 1]), 0.9, 1.0)
    assert adv[0].tolist() == pytest.approx([0.31, 0.7, 0.9], abs=1e-6)


def test_terminal_rewards_on_last_action_token():
    mask = torch.tensor([[0, 1, 1, 0, 1, 0], [0, 0, 1, 0, 0, 0]], dtype=torch.float32)
    r = algo.terminal_rewards([3.0, -1.0], mask)
    assert r.tolist() == [[0, 0, 0, 0, 3, 0], [0, 0, -1, 0, 0, 0]]


def test_policy_loss_clip_low_high():
    # ratios 1.5, 0.5, 0.5, 1.2 with advantages +1, +1, -1, -2, clip [0.8, 1.28]:
    # token 1: max(-1.5, -1.28) = -1.28 (clipped); token 2: max(-0.5, -0.8) = -0.5;
    # token 3: max(0.5, 0.8) = 0.8 (clipped); token 4: 1.2 is inside: 2.4. The fifth token is
    # masked out (its huge ratio and advantage must not count).
    old = torch.zeros(1, 5)
    lp = torch.log(t([1.5, 0.5, 0.5, 1.2, 50.0])).requires_grad_(True)
    adv = t([1.0, 1.0, -1.0, -2.0, 100.0])
    mask = t([1, 1, 1, 1, 0])
    loss, m = algo.policy_loss(lp, old, adv, mask, 0.2, 0.28)
    assert loss.item() == pytest.approx((-1.28 - 0.5 + 0.8 + 2.4) / 4, abs=1e-6)
    assert m["clip_frac"] == pytest.approx(0.5)
    assert m["ratio_mean"] == pytest.approx((1.5 + 0.5 + 0.5 + 1.2) / 4, rel=1e-6)
    loss.backward()
    # d/d logp of -A * ratio / 4 = -A * ratio / 4 where unclipped, 0 where clipped or masked.
    assert lp.grad[0].tolist() == pytest.approx([0, -0.125, 0, 0.6, 0], abs=1e-6)


def test_policy_loss_ignores_masked_values():
    # Whatever sits at masked positions (tool output, padding) changes neither loss nor grads.
    torch.manual_seed(0)
    mask = t([0, 1, 1, 0, 0, 1, 0])
    base = [torch.randn(1, 7) for _ in range(3)]
    out = []
    for junk in (0.0, 37.0):
        lp = (base[0] + junk * (1 - mask)).requires_grad_(True)
        old = base[1] - junk * (1 - mask)
        adv = base[2] + junk * (1 - mask)
        loss, _ = algo.policy_loss(lp, old, adv, mask)
        loss.backward()
        out.append((loss.item(), lp.grad.clone()))
    assert out[0][0] == pytest.approx(out[1][0], abs=1e-6)
    assert torch.allclose(out[0][1], out[1][1])
    assert (out[0][1][0][mask[0] == 0] == 0).all()


def test_truncated_is_weights():
    train = t([0.1, 1.0, 0.0, 5.0])
    roll = t([0.0, 0.0, 0.5, 0.0])
    w = algo.truncated_is_weights(train, roll, t([1, 1, 1, 0]), cap=2.0)
    assert w[0].tolist() == pytest.approx([math.exp(0.1), 2.0, math.exp(-0.5), 1.0], rel=1e-6)
    # The weight scales each token's loss and carries no gradient of its own.
    lp = torch.zeros(1, 2, requires_grad=True)
    loss, _ = algo.policy_loss(lp, torch.zeros(1, 2), t([1.0, 1.0]), t([1, 1]),
                               is_weights=t([2.0, 0.5]))
    assert loss.item() == pytest.approx(-(2.0 + 0.5) / 2)
    loss.backward()
    assert lp.grad[0].tolist() == pytest.approx([-1.0, -0.25])


def test_value_loss_clipped():
    # token 1: V 1.0 (rollout 0.5, clip 0.2 -> 0.7), R 2: max(1, 1.69) = 1.69;
    # token 2: V 0.6, R 0: 0.36 either way. 0.5 * mean = 0.5125.
    v, old, ret, mask = t([1.0, 0.6, 9.0]), t([0.5, 0.5, 0.0]), t([2.0, 0.0, 0.0]), t([1, 1, 0])
    assert algo.value_loss(v, old, ret, mask, 0.2).item() == pytest.approx(0.5125, abs=1e-6)
    assert algo.value_loss(v, old, ret, mask).item() == pytest.approx(0.5 * (1 + 0.36) / 2)


def test_explained_variance_and_kl():
    mask = t([1, 1, 1])
    assert algo.explained_variance(t([1.0, 2.0, 3.0]), t([1.0, 2.0, 3.0]), mask) == 1.0
    assert algo.explained_variance(t([2.0, 2.0, 2.0]), t([1.0, 2.0, 3.0]), mask) == \
        pytest.approx(0.0, abs=1e-6)
    # k3 with p = 0.5, ref = 0.25: r = 0.5, r - 1 - log r = -0.5 + log 2.
    kl = algo.kl_k3(torch.log(t([0.5])), torch.log(t([0.25])), t([1]))
    assert kl.item() == pytest.approx(-0.5 + math.log(2), abs=1e-6)
    assert algo.kl_k3(t([-1.0]), t([-1.0]), t([1])).item() == 0.0


def test_entropy_and_logprobs():
    logits = torch.log(torch.tensor([[[0.5, 0.25, 0.25]]]))
    assert algo.entropy_from_logits(logits).item() == pytest.approx(1.5 * math.log(2), abs=1e-6)
    assert algo.token_logprobs(logits, torch.tensor([[1]])).item() == \
        pytest.approx(math.log(0.25), abs=1e-6)


def test_checkpoint_round_trip(tmp_path):
    pytest.importorskip("transformers")
    from train import config as C, model as M, runtime as RT
    cfg = C.Config()
    cfg.model.hidden, cfg.model.layers = 32, 1
    tok = M.load_tokenizer(cfg.model)
    torch.manual_seed(0)
    actor = M.build_actor(cfg.model, tok)
    critic = M.build_critic(actor)
    oa = torch.optim.AdamW(actor.parameters(), lr=1e-3)
    oc = torch.optim.AdamW(critic.parameters(), lr=1e-3)
    x = torch.randint(0, 256, (2, 9))
    (M.seq_logprobs(actor, x, torch.ones_like(x))[0].sum()
     + M.seq_values(critic, x, torch.ones_like(x)).sum()).backward()
    oa.step()
    oc.step()
    RT.save(tmp_path / "ckpt" / "step-000001", actor, critic, tok, (oa, oc), {"step": 1})
    assert RT.latest(tmp_path) == tmp_path / "ckpt" / "step-000001"
    d = RT.latest(tmp_path)
    a2 = M.build_actor(cfg.model, tok, str(d / "actor"))
    c2 = M.build_critic(a2)
    RT.load_critic(c2, d)
    oa2 = torch.optim.AdamW(a2.parameters(), lr=1e-3)
    oc2 = torch.optim.AdamW(c2.parameters(), lr=1e-3)
    RT.load_optims(d, (a2, c2), (oa2, oc2))
    for m1, m2 in ((actor, a2), (critic, c2)):
        s1, s2 = m1.state_dict(), m2.state_dict()
        assert s1.keys() == s2.keys()
        assert all(torch.equal(s1[k], s2[k]) for k in s1)
    e1, e2 = oa.state_dict()["state"], oa2.state_dict()["state"]
    assert e1.keys() == e2.keys()
    assert all(torch.equal(e1[k]["exp_avg"], e2[k]["exp_avg"]) for k in e1)
    assert RT.load_state(d)["step"] == 1
    # The same input gives the same log-probs and values from the loaded models.
    assert torch.equal(M.seq_logprobs(actor, x, torch.ones_like(x))[0],
                       M.seq_logprobs(a2, x, torch.ones_like(x))[0])
    assert torch.equal(M.seq_values(critic, x, torch.ones_like(x)),
                       M.seq_values(c2, x, torch.ones_like(x)))


def test_tool_call_and_file_parsing():
    from train import chat
    known = {"Bash", "Read"}
    calls = chat.parse_tool_calls(
        'x <tool_call>{"name": "Bash", "arguments": {"command": "ls"}}</tool_call> y '
        '<tool_call>{"name": "Nope", "arguments": {}}</tool_call>'
        '<tool_call>{"name": "Read", "arguments": "{\\"file_path\\": \\"a\\"}"}</tool_call>'
        '<tool_call>{not json</tool_call><tool_call>[1]</tool_call>', known)
    assert [(n, a) for n, a, _ in calls[:3]] == [("Bash", {"command": "ls"}), ("Nope", {}),
                                                 ("Read", {"file_path": "a"})]
    errs = [e for _, _, e in calls]
    assert errs[0] is None and errs[2] is None
    assert "unknown tool 'Nope'" in errs[1] and "<tool_call>" in errs[3]
    assert "JSON object" in errs[4] and len(calls) == 5
    assert chat.parse_tool_calls("no calls here", known) == []
    files = chat.parse_files('<file path="kernels/a.cu">\nint x;\n</file> and '
                             '<file path="/workspace/model_new.py">m</file>')
    assert files == {"kernels/a.cu": "int x;\n", "model_new.py": "m"}
    tok = chat.ByteTokenizer()
    text = "<|user|>\nhé<|end|>"
    ids = tok.encode(text)
    assert ids[0] == tok.special["<|user|>"] and ids[-1] == tok.eos_token_id
    assert tok.decode(ids) == "<|user|>\nhé"  # eos is not text


def test_rft_filter():
    from train import config as C, rollout as R, stages
    mk = lambda **k: R.Sample(task="t", mode="agent", tokens=[1, 2], mask=[0, 1],
                              logprobs=[0, -1], prompt_len=1, **k)
    good = mk(reward=2.0, max_repeat=1)
    samples = [good, mk(reward=-1.0), mk(reward=1.0, malformed=1), mk(reward=3.0, max_repeat=3),
               mk(reward=1.0, max_repeat=2)]
    kept, why = stages.rft_filter(samples, C.RFTCfg())
    assert kept == [good, samples[4]]
    assert why == {"low_reward": 1, "malformed": 1, "looping": 1}
    kept, why = stages.rft_filter([mk(reward=-1.0)] * 3, C.RFTCfg())
    assert kept == [] and why["low_reward"] == 3


def test_chunked_lm_head_matches_full_logits(monkeypatch):
    """seq_logprobs runs the LM head in chunks (with recomputation under grad): the same
    log-probs, entropies and gradients as the model's full logits."""
    pytest.importorskip("transformers")
    from train import config as C, model as M
    cfg = C.Config()
    cfg.model.hidden, cfg.model.layers = 32, 1
    tok = M.load_tokenizer(cfg.model)
    torch.manual_seed(0)
    a = M.build_actor(cfg.model, tok)
    x = torch.randint(0, 256, (2, 23))
    att = torch.ones_like(x)
    monkeypatch.setattr(M, "HEAD_CHUNK", 5)
    lp, ent = M.seq_logprobs(a, x, att, with_entropy=True)
    logits = a(input_ids=x, attention_mask=att).logits[:, :-1]
    ref = algo.token_logprobs(logits, x[:, 1:])
    assert torch.allclose(lp[:, 1:], ref, atol=1e-6) and (lp[:, 0] == 0).all()
    assert torch.allclose(ent[:, 1:], algo.entropy_from_logits(logits), atol=1e-5)
    lp.sum().backward()
    g = a.lm_head.weight.grad.clone()
    a.zero_grad()
    ref.sum().backward()
    assert torch.allclose(a.lm_head.weight.grad, g, atol=1e-5)


def test_gae_batch_matches_rows():
    """The batched recursion equals each row computed alone, for ragged masks (an empty row,
    a row of one action, tool tokens in between)."""
    torch.manual_seed(1)
    mask = torch.tensor([[0, 1, 1, 0, 1, 1, 0], [0, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 1],
                         [1, 1, 1, 1, 1, 1, 1]], dtype=torch.float32)
    values = torch.randn(4, 7)
    rewards = algo.terminal_rewards([1.0, 2.0, -1.0, 3.0], mask)
    adv, ret = algo.gae(rewards, values, mask, 1.0, 0.95)
    for b in range(4):
        a1, r1 = algo.gae(rewards[b:b + 1], values[b:b + 1], mask[b:b + 1], 1.0, 0.95)
        assert torch.allclose(adv[b], a1[0], atol=1e-6) and torch.allclose(ret[b], r1[0],
                                                                             atol=1e-6)
    assert (adv[1] == 0).all() and adv[2, 6] == pytest.approx(-1.0 - values[2, 6].item())
    # Row 0 by hand: actions at 1, 2, 4, 5.
    v = values[0, [1, 2, 4, 5]].tolist()
    d = [v[1] - v[0], v[2] - v[1], v[3] - v[2], 1.0 - v[3]]
    a = [0.0] * 4
    acc = 0.0
    for i in range(3, -1, -1):
        acc = d[i] + 0.95 * acc
        a[i] = acc
    assert adv[0, [1, 2, 4, 5]].tolist() == pytest.approx(a, abs=1e-6)
