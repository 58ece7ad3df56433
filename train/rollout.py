"""Rollouts: inference engines, the environment client, and the two episode shapes.

Engines (`generate(prompt_ids, max_new_tokens) -> (ids, logprobs, finished)`):
- `LocalEngine`: the actor itself, sampled in process with the KV cache (train/model.py);
  generation is serialised by a lock and runs in a thread, so the tool calls of other episodes
  overlap with it.
- `OpenAIEngine`: an external OpenAI-compatible completions server that takes token ids as the
  prompt and returns the sampled token ids with their log-probabilities (vLLM:
  `return_tokens_as_token_ids` / `return_token_ids`; SGLang's OpenAI server likewise). After
  each update the trainer calls the weight-sync hook (`rollout.weight_sync`,
  "module:function(actor, step, cfg)"): the hook pushes the new weights to the server (save
  and reload, or the server's update-weights endpoint); until it returns, rollouts use the old
  weights, which the truncated importance weights account for.
- `ScriptedEngine`: fixed replies (a demonstration, or a test's known-good answer) whose
  log-probabilities are the actor's own (teacher forcing), so PPO and RFT treat them exactly
  like sampled replies.

Environments: `McpEnv` (the `mcp` SDK client on `cuda-agent serve`, stdio or Streamable
HTTP; one session carries every episode in flight) and any object with the same four async
methods (tests/py/test_train_toy.py's toy environment).

A `Sample` (one episode) keeps the whole token sequence, the mask (1 on sampled tokens), the
engine's log-probabilities, the reward and what the loop saw (tool calls, malformed calls,
repeats, stop reason); `Sample.to_json` is one trajectory line.
"""

import asyncio
import dataclasses
import importlib
import json
import os
import threading
import time
import urllib.request
import weakref

import torch

from train import chat, model as M

CONTROL_TOOLS = {"list_tasks", "start_episode", "evaluate", "finish"}


# ---- engines ----

_LOCKS_GUARD = threading.Lock()
_LOCKS = weakref.WeakKeyDictionary()


def model_lock(actor):
    """One lock per model: every in-process forward during rollouts holds it (episodes run
    in threads; seq_logprobs swaps the model's head for its forward)."""
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(actor, threading.Lock())


class LocalEngine:
    def __init__(self, actor, eos_id, temperature=1.0, seed=0):
        self.actor = actor
        self.eos = eos_id
        self.temperature = temperature
        self.gen = torch.Generator().manual_seed(seed)
        self.lock = model_lock(actor)

    def _generate(self, prompt_ids, max_new_tokens):
        with self.lock:
            return M.sample(self.actor, prompt_ids, max_new_tokens, self.eos, self.temperature,
                            self.gen)

    async def generate(self, prompt_ids, max_new_tokens):
        return await asyncio.to_thread(self._generate, prompt_ids, max_new_tokens)


class OpenAIEngine:
    def __init__(self, base_url, model_name, temperature=1.0, timeout=600):
        self.url = base_url.rstrip("/") + "/completions"
        self.model = model_name
        self.temperature = temperature
        self.timeout = timeout

    def _post(self, prompt_ids, max_new_tokens):
        body = {"model": self.model, "prompt": prompt_ids, "max_tokens": max_new_tokens,
                "temperature": self.temperature, "logprobs": 0, "top_p": 1.0,
                "return_tokens_as_token_ids": True, "return_token_ids": True,
                "skip_special_tokens": False}
        req = urllib.request.Request(self.url, json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=self.timeout) as r:
            return json.loads(r.read())

    @staticmethod
    def parse(reply):
        """(ids, logprobs, finished) from a completions reply."""
        c = reply["choices"][0]
        lp = c.get("logprobs") or {}
        lps = [float(x) for x in lp.get("token_logprobs") or []]
        ids = c.get("token_ids")
        if ids is None:  # vLLM's return_tokens_as_token_ids: "token_id:123"
            ids = [int(t.split(":", 1)[1]) for t in lp.get("tokens") or []]
        if len(ids) != len(lps):
            raise ValueError(f"the server returned {len(ids)} token ids and {len(lps)} "
                             "log-probs: it must return both (vLLM: logprobs=0 with "
                             "return_tokens_as_token_ids)")
        return list(ids), lps, c.get("finish_reason") == "stop"

    async def generate(self, prompt_ids, max_new_tokens):
        return self.parse(await asyncio.to_thread(self._post, prompt_ids, max_new_tokens))


class ScriptedEngine:
    """Plays `replies` in order (each reply text is tokenised and closed with eos); their
    log-probabilities are computed under `actor`."""

    def __init__(self, replies, fmt, actor):
        self.replies = list(replies)
        self.fmt = fmt
        self.actor = actor
        self.lock = model_lock(actor)

    def _generate(self, prompt_ids, max_new_tokens):
        text = self.replies.pop(0) if self.replies else ""
        ids = self.fmt.encode(text) + [self.fmt.eos]  # a script is played whole
        with self.lock, torch.no_grad():
            x = torch.tensor([list(prompt_ids) + ids])
            self.actor.eval()
            lp, _ = M.seq_logprobs(self.actor, x, torch.ones_like(x))
        return ids, lp[0, len(prompt_ids):].tolist(), ids[-1] == self.fmt.eos

    async def generate(self, prompt_ids, max_new_tokens):
        return await asyncio.to_thread(self._generate, prompt_ids, max_new_tokens)


def weight_sync_hook(spec):
    """The configured hook "module:function", or None."""
    if not spec:
        return None
    mod, _, fn = spec.partition(":")
    return getattr(importlib.import_module(mod), fn)


# ---- environment ----

def _text(result):
    return "".join(getattr(c, "text", "") for c in result.content)


class McpEnv:
    """`cuda-agent serve` through the official `mcp` client. Use as an async context manager."""

    def __init__(self, scfg):
        self.cfg = scfg
        self._cm = None
        self.client = None
        self.agent_tools = []  # OpenAI-style function schemas, episode_id removed
        self.known = set()

    async def __aenter__(self):
        from mcp import Client, StdioServerParameters
        c = self.cfg
        if c.transport == "stdio":
            cmd = os.environ.get("CUDA_AGENT") or c.command
            # "{rank}" in an argument: each torchrun rank's server gets its own --root.
            args = [a.replace("{rank}", os.environ.get("RANK", "0")) for a in c.args]
            target = StdioServerParameters(command=cmd, args=["serve", "--stdio", *args],
                                           env=dict(os.environ))
        elif c.transport == "http":
            target = c.url
            tok = os.environ.get(c.token_env)
            if tok:
                from mcp.client.streamable_http import (create_mcp_http_client,
                                                        streamable_http_client)
                target = streamable_http_client(c.url, http_client=create_mcp_http_client(
                    headers={"Authorization": f"Bearer {tok}"}))
        else:
            raise ValueError(f"server.transport must be stdio or http, not {c.transport!r}")
        self._cm = Client(target, read_timeout_seconds=c.timeout_s)
        self.client = await self._cm.__aenter__()
        for t in (await self.client.list_tools()).tools:
            if t.name in CONTROL_TOOLS:
                continue
            params = json.loads(json.dumps(t.input_schema))
            params.get("properties", {}).pop("episode_id", None)
            if "required" in params:
                params["required"] = [r for r in params["required"] if r != "episode_id"]
            self.agent_tools.append({"type": "function", "function": {
                "name": t.name, "description": t.description or "", "parameters": params}})
            self.known.add(t.name)
        return self

    async def __aexit__(self, *exc):
        await self._cm.__aexit__(*exc)

    async def tasks(self):
        r = await self.client.call_tool("list_tasks", {})
        return [t["id"] for t in r.structured_content["tasks"]]

    async def start(self, task, seed):
        r = await self.client.call_tool("start_episode", {"task": task, "seed": seed})
        if r.is_error:
            raise RuntimeError(f"start_episode {task}: {_text(r)}")
        return r.structured_content

    async def call(self, episode_id, name, args):
        r = await self.client.call_tool(name, {**args, "episode_id": episode_id})
        return _text(r), bool(r.is_error)

    async def finish(self, episode_id, final_eval):
        r = await self.client.call_tool("finish", {"episode_id": episode_id,
                                                   "final_eval": final_eval})
        if r.is_error:
            raise RuntimeError(f"finish {episode_id}: {_text(r)}")
        return r.structured_content

    async def step(self, episode_id, reply, calls, cap):
        """The tool messages answering a reply's calls, or None when it ends the episode."""
        if not calls:
            return None
        out = []
        for name, args, err in calls:
            text = err if err else (await self.call(episode_id, name, args))[0]
            out.append({"role": "tool", "content": cap(text)})
        return out


# ---- episodes ----

@dataclasses.dataclass
class Sample:
    task: str
    mode: str  # single | agent
    tokens: list
    mask: list
    logprobs: list
    prompt_len: int
    reward: float = -1.0
    episode_id: str = ""
    turns: int = 0
    tool_calls: int = 0
    malformed: int = 0
    max_repeat: int = 0  # the longest run of one identical tool call
    stop: str = ""
    messages: list = dataclasses.field(default_factory=list)
    result: dict = dataclasses.field(default_factory=dict)
    scripted: bool = False
    gen_s: float = 0.0

    @property
    def response_tokens(self):
        return sum(self.mask)

    def to_json(self):
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, line):
        d = json.loads(line)
        return cls(**{k: v for k, v in d.items() if k in {f.name for f in dataclasses.fields(cls)}})


def _truncate(ids, n):
    return ids[-n:] if len(ids) > n else ids


def episode_note(max_turns):
    # The same note `cuda-agent run` appends to SKILL.md (src/agent/agent.c, first_messages).
    return ("\n\n## This episode\n\nYour workspace is /workspace (the shell starts there). Act "
            f"through the tools. You have at most {max_turns} turns; a turn is one reply of "
            "yours with its tool calls. When you are done, reply without tool calls: that ends "
            "the episode, and the evaluator scores the workspace as you leave it and the best "
            "correct version that your ./verify and ./profile runs recorded.\n")


def make_cap(fmt, tok, n):
    def cap(text):
        ids = fmt.encode(text)
        if len(ids) <= n:
            return text
        head, tail = ids[:2 * n // 3], ids[-(n // 3):]
        return (tok.decode(head) + f"\n[... {len(ids) - len(head) - len(tail)} tokens trimmed "
                "from this tool output ...]\n" + tok.decode(tail))
    return cap


async def agent_episode(env, engine, fmt, tok, rcfg, task, seed):
    """One multi-turn episode: replies are sampled, their tool calls run on the server, the
    results appended as masked tokens, until a reply without calls, the turn or token limit.
    An episode that fails half-way is finished on the server (best effort) and re-raised."""
    st = await env.start(task, seed)
    try:
        return await _agent_turns(env, engine, fmt, tok, rcfg, task, st)
    except BaseException:
        try:
            await env.finish(st["episode_id"], False)
        except Exception:
            pass  # the server ends it after its idle TTL
        raise


async def _agent_turns(env, engine, fmt, tok, rcfg, task, st):
    ep = st["episode_id"]
    messages = [{"role": "system", "content": st["system_prompt"] + episode_note(rcfg.max_turns)},
                {"role": "user", "content": st["task_message"]}]
    prompt = _truncate(fmt.prompt_ids(messages, env.agent_tools), rcfg.max_prompt_tokens)
    s = Sample(task=task, mode="agent", tokens=list(prompt), mask=[0] * len(prompt),
               logprobs=[0.0] * len(prompt), prompt_len=len(prompt), episode_id=ep)
    cap = make_cap(fmt, tok, rcfg.max_tool_output_tokens)
    last_call, run = None, 0
    s.stop = "max_turns"
    for turn in range(rcfg.max_turns):
        room = rcfg.max_seq_tokens - len(s.tokens)
        if room <= 0:
            s.stop = "context"
            break
        t0 = time.perf_counter()
        ids, lps, ended = await engine.generate(s.tokens, min(rcfg.max_new_tokens, room))
        s.gen_s += time.perf_counter() - t0
        s.tokens += ids
        s.mask += [1] * len(ids)
        s.logprobs += lps
        s.turns = turn + 1
        reply = tok.decode([i for i in ids if i != fmt.eos])
        calls = chat.parse_tool_calls(reply, env.known)
        s.tool_calls += len(calls)
        for name, args, err in calls:
            s.malformed += err is not None
            key = json.dumps([name, args], sort_keys=True)
            run = run + 1 if key == last_call else 1
            last_call = key
            s.max_repeat = max(s.max_repeat, run)
        tool_msgs = await env.step(ep, reply, calls, cap)
        s.messages.append({"role": "assistant", "content": reply})
        if tool_msgs is None:
            s.stop = "answer"
            break
        delta = fmt.delta_ids(messages + s.messages[:-1], reply, tool_msgs, env.agent_tools,
                              ended)
        s.messages += tool_msgs
        s.tokens += delta
        s.mask += [0] * len(delta)
        s.logprobs += [0.0] * len(delta)
    s.result = await env.finish(ep, rcfg.final_eval)
    s.reward = float(s.result["reward"])
    _trim(s)
    return s


def _trim(s):
    """The trajectory ends with the last sampled token (trailing tool output is not trained)."""
    while s.mask and s.mask[-1] == 0 and len(s.mask) > s.prompt_len:
        s.tokens.pop()
        s.mask.pop()
        s.logprobs.pop()


async def single_turn_episode(env, engine, fmt, tok, rcfg, max_new_tokens, task, seed):
    """Stage 1's episode: SKILL.md + the task, one answer with every file, written into the
    episode's workspace through the server's Read/Write tools, evaluated (rollout.eval_stage,
    default profile), then finish: its reward (the evaluation's) is the sample's. An answer
    with no file is scored by finish without an evaluation (-1)."""
    st = await env.start(task, seed)
    ep = st["episode_id"]
    messages = [{"role": "system", "content": st["system_prompt"] + chat.SINGLE_TURN_NOTE},
                {"role": "user", "content": st["task_message"]}]
    prompt = _truncate(fmt.prompt_ids(messages), rcfg.max_prompt_tokens)
    t0 = time.perf_counter()
    ids, lps, _ = await engine.generate(prompt, max_new_tokens)
    s = Sample(task=task, mode="single", tokens=list(prompt) + ids,
               mask=[0] * len(prompt) + [1] * len(ids), logprobs=[0.0] * len(prompt) + lps,
               prompt_len=len(prompt), episode_id=ep, turns=1, stop="answer",
               gen_s=time.perf_counter() - t0)
    reply = tok.decode([i for i in ids if i != fmt.eos])
    s.messages = [{"role": "assistant", "content": reply}]
    files = chat.parse_files(reply)
    for path, content in files.items():
        await env.call(ep, "Read", {"file_path": "/workspace/" + path})  # read-before-write
        text, err = await env.call(ep, "Write", {"file_path": "/workspace/" + path,
                                                 "content": content})
        s.tool_calls += 1
        s.malformed += err
    ev_text, ev_err = "", False
    if files:
        ev_text, ev_err = await env.call(ep, "evaluate", {"stage": rcfg.eval_stage})
    s.result = await env.finish(ep, False)
    if ev_err:  # the evaluator could not run (not a wrong answer): kept for the metrics
        s.result["evaluate_error"] = ev_text[:2000]
    s.reward = float(s.result["reward"])
    return s


async def collect(episode_fn, jobs, parallel):
    """Run episode_fn(job) for every job, at most `parallel` at once; results in job order."""
    sem = asyncio.Semaphore(max(1, parallel))

    async def one(j):
        async with sem:
            return await episode_fn(j)

    return await asyncio.gather(*(one(j) for j in jobs))
