"""Tokenizers and the chat format: messages -> token ids, and back to tool calls.

Two tokenizers:
- `ByteTokenizer`: UTF-8 bytes 0-255 plus six special tokens. It needs no download (none can
  happen on these machines), encodes any text losslessly, and gives a tiny randomly initialised
  model a 262-token vocabulary, so CPU tests run in seconds. It is for tests and toy runs.
- a Hugging Face tokenizer (`transformers.AutoTokenizer`) of a real model, with its own chat
  template (`apply_chat_template`, tools passed as JSON schemas).

The format is token-in, token-out: a trajectory is one token sequence; the model's replies are
kept as the ids it sampled (never re-tokenised), and only the environment's text (tool results,
the next turn's header) is tokenised. `ChatFormat.delta_ids` gives the ids to append after a
reply for the tool messages that follow it, so that the sequence decodes to what the template
renders for the whole conversation.

Tool calls are text-form `<tool_call>{"name": TOOL, "arguments": {...}}</tool_call>`, the form
`cuda-agent run`'s parser accepts for models served without a tool parser
(docs/internals/agent.md, src/llm/llm_parse.c), with the same error text for a malformed one.
"""

import json
import re

SPECIALS = ["<|pad|>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>", "<|tool|>"]


class ByteTokenizer:
    """Bytes 0-255, then SPECIALS. Special tokens are recognised in text passed to encode."""

    def __init__(self):
        self.vocab_size = 256 + len(SPECIALS)
        self.special = {s: 256 + i for i, s in enumerate(SPECIALS)}
        self.pad_token_id = self.special["<|pad|>"]
        self.eos_token_id = self.special["<|end|>"]
        self._split = re.compile("(" + "|".join(re.escape(s) for s in SPECIALS) + ")")
        self.chat_template = None

    def encode(self, text):
        ids = []
        for part in self._split.split(text):
            if part in self.special:
                ids.append(self.special[part])
            elif part:
                ids.extend(part.encode("utf-8"))
        return ids

    def decode(self, ids):
        out, run = [], bytearray()
        for i in ids:
            if i < 256:
                run.append(i)
                continue
            if run:
                out.append(run.decode("utf-8", "replace"))
                run = bytearray()
            if i != self.pad_token_id and i != self.eos_token_id:
                out.append(SPECIALS[i - 256])
        if run:
            out.append(run.decode("utf-8", "replace"))
        return "".join(out)

    def save_pretrained(self, path):
        import pathlib
        pathlib.Path(path, "byte_tokenizer.json").write_text(json.dumps({"specials": SPECIALS}))


TOOL_NOTE = (
    "\n\n## Tools\n\nCall a tool by writing <tool_call>{\"name\": TOOL, \"arguments\": {...}}"
    "</tool_call> (one per call; several in one reply run in order). The tools:\n")


def tools_text(tools):
    """The tools' schemas for a system message (templates without a tools slot)."""
    return TOOL_NOTE + "\n".join(json.dumps(t, separators=(",", ":")) for t in tools) + "\n"


class ChatFormat:
    """Renders messages to ids with the tokenizer's chat template, or with a plain built-in
    one (`<|role|>\\ncontent<|end|>\\n`) for tokenizers without a template (ByteTokenizer)."""

    def __init__(self, tok):
        self.tok = tok
        self.hf = getattr(tok, "chat_template", None) is not None
        self.eos = tok.eos_token_id

    def _render_builtin(self, messages, tools, generation_prompt):
        out = []
        for i, m in enumerate(messages):
            content = m["content"]
            if i == 0 and m["role"] == "system" and tools:
                content = content + tools_text(tools)
            out.append(f"<|{m['role']}|>\n{content}<|end|>\n")
        if generation_prompt:
            out.append("<|assistant|>\n")
        return "".join(out)

    def render(self, messages, tools=None, generation_prompt=True):
        if not self.hf:
            return self._render_builtin(messages, tools, generation_prompt)
        return self.tok.apply_chat_template(messages, tools=tools or None, tokenize=False,
                                            add_generation_prompt=generation_prompt)

    def encode(self, text):
        if self.hf:
            return self.tok.encode(text, add_special_tokens=False)
        return self.tok.encode(text)

    def prompt_ids(self, messages, tools=None):
        return self.encode(self.render(messages, tools, True))

    def eos_text(self):
        return "<|end|>" if not self.hf else self.tok.eos_token

    def delta_ids(self, messages, reply, tool_messages, tools=None, ended=True):
        """Ids to append after a sampled reply for the tool messages that answer it and the
        next assistant header: the text the template adds after the reply's content, as the
        difference of two renderings, less the eos the model already sampled (`ended`; a reply
        cut at max_new_tokens gets the template's end-of-turn text here). A template that
        rewrites earlier turns falls back to rendering the tool messages on their own."""
        a = messages + [{"role": "assistant", "content": reply}]
        before = self.render(a, tools, False)
        after = self.render(a + tool_messages, tools, True)
        at = before.rfind(reply) if reply else len(before.rstrip())
        if after.startswith(before) and at >= 0:
            tail = before[at + len(reply):] if reply else ""
            if ended and tail.startswith(self.eos_text()):
                tail = tail[len(self.eos_text()):]
            return self.encode(tail + after[len(before):])
        return self.encode("".join(self.render([m], None, False) for m in tool_messages)
                           + self.render([], None, True))


CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.S)


def parse_tool_calls(text, known):
    """Text-form tool calls in a reply: a list of (name, arguments, error) where error is None
    for a well-formed call of a known tool, else the message the model gets back."""
    calls = []
    for m in CALL.finditer(text):
        body = m.group(1).strip()
        try:
            v = json.loads(body)
        except ValueError as e:
            calls.append(("", {}, f"{e}. Write a tool call as <tool_call>{{\"name\": TOOL, "
                                  "\"arguments\": {...}}</tool_call>."))
            continue
        items = v if isinstance(v, list) else [v]
        for o in items:
            if not isinstance(o, dict) or not isinstance(o.get("name"), str):
                calls.append(("", {}, "a tool call must be a JSON object {\"name\": TOOL, "
                                      "\"arguments\": {...}}"))
                continue
            args = o.get("arguments", o.get("parameters", {}))
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except ValueError:
                    args = None
            if not isinstance(args, dict):
                calls.append((o["name"], {}, "the arguments must be a JSON object matching the "
                                             "tool's schema"))
            elif o["name"] not in known:
                calls.append((o["name"], args, f"unknown tool {o['name']!r}; the tools are: "
                                               + ", ".join(sorted(known))))
            else:
                calls.append((o["name"], args, None))
    return calls


FILE = re.compile(r"<file path=\"([^\"]+)\">\n?(.*?)</file>", re.S)

SINGLE_TURN_NOTE = (
    "\n\n## This episode (single answer)\n\nYou have no tools in this episode. Answer with one "
    "message that holds every file you write, each as\n<file path=\"kernels/NAME.cu\">\n...\n"
    "</file>\n(the paths are relative to /workspace: kernels/*.cu, kernels/*_binding.cpp and "
    "model_new.py). The evaluator compiles, verifies and profiles the workspace with your files "
    "and scores it.\n")


def parse_files(text):
    """The <file path="...">...</file> blocks of a single-turn answer: {path: content}."""
    return {p.strip().removeprefix("/workspace/"): c for p, c in FILE.findall(text)}
