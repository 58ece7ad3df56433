"""The chat format's token bookkeeping (train/chat.py): a trajectory built from the prompt's
ids, the sampled reply's ids and delta_ids for the tool messages decodes to exactly what the
template renders for the whole conversation, with a Hugging Face tokenizer and chat template
(a byte-level BPE trained here with `tokenizers`: nothing is downloaded) and with the
built-in format of the byte tokenizer; and the PPO stage runs on the Hugging Face one."""

import json
import pathlib
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from train import chat, stages  # noqa: E402
from test_train_toy import toy, toy_config  # noqa: E402

TEMPLATE = (
    "{% if tools %}{{ '<|im_start|>system\\n' }}{% if messages[0].role == 'system' %}"
    "{{ messages[0].content }}{% endif %}{{ '\\n# Tools\\n' }}{% for t in tools %}"
    "{{ t | tojson }}{{ '\\n' }}{% endfor %}{{ '<|im_end|>\\n' }}{% endif %}"
    "{% for m in messages %}{% if not (tools and loop.first and m.role == 'system') %}"
    "{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def hf_tokenizer(d):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|im_start|>", "<|im_end|>",
                                                             "<|pad|>"],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tk.train_from_iterator(["write lowercase letters", "tool call Bash ls", "ZZZZ"] * 20, tr)
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|im_end|>",
                                  pad_token="<|pad|>")
    tok.chat_template = TEMPLATE
    tok.save_pretrained(d)
    return tok


MSGS = [{"role": "system", "content": "You write kernels."},
        {"role": "user", "content": "task: relu"}]
TOOLS = [{"type": "function", "function": {"name": "Bash", "description": "a shell",
                                           "parameters": {"type": "object"}}}]
REPLY = 'ok <tool_call>{"name": "Bash", "arguments": {"command": "ls"}}</tool_call>'
TOOL = [{"role": "tool", "content": "kernels\nmodel.py"}]


def roundtrip(fmt, decode, ended):
    ids = fmt.prompt_ids(MSGS, TOOLS)
    reply = fmt.encode(REPLY) + ([fmt.eos] if ended else [])
    ids = ids + reply + fmt.delta_ids(MSGS, REPLY, TOOL, TOOLS, ended)
    full = fmt.render(MSGS + [{"role": "assistant", "content": REPLY}] + TOOL, TOOLS, True)
    return decode(ids), full


def test_hf_template_delta(tmp_path):
    tok = hf_tokenizer(tmp_path)
    fmt = chat.ChatFormat(tok)
    assert fmt.hf
    for ended in (True, False):  # a reply cut before its eos gets the end of turn here
        got, want = roundtrip(fmt, lambda i: tok.decode(i, skip_special_tokens=False), ended)
        assert got == want
        assert '"name": "Bash"' in want and "<|im_start|>tool\nkernels" in want


def test_builtin_format_delta():
    tok = chat.ByteTokenizer()
    fmt = chat.ChatFormat(tok)
    dec = lambda ids: "".join("<|end|>" if i == tok.eos_token_id else tok.decode([i])
                              for i in ids)
    for ended in (True, False):
        got, want = roundtrip(fmt, dec, ended)
        assert got == want and "<|tool|>\nkernels" in want


def test_ppo_stage_with_hf_tokenizer(tmp_path):
    tok = hf_tokenizer(tmp_path / "tok")
    cfg = toy_config(tmp_path / "run", 2)
    cfg.model.tokenizer = str(tmp_path / "tok")
    stages.ppo_stage(cfg, "ppo", toy)
    s = json.loads((tmp_path / "run" / "ppo" / "rollouts" / "step-000001.jsonl").read_text()
                   .splitlines()[0])
    text = tok.decode(s["tokens"], skip_special_tokens=False)
    # (the prompt keeps its last 64 tokens: the end of the episode note, the user message)
    assert "recorded.\n<|im_end|>\n<|im_start|>user\ngo<|im_end|>\n<|im_start|>assistant\n" \
        in text
    assert "<|im_start|>tool\nZZZZ ZZZZ<|im_end|>\n<|im_start|>assistant\n" in text
    assert (tmp_path / "run" / "ppo" / "final" / "actor" / "tokenizer.json").exists()
