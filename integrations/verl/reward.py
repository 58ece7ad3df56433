"""verl custom reward function for cuda-agent episodes served over MCP.

verl's MCP tool (verl.tools.mcp_base_tool.MCPBaseTool) hands the model only the text of each
result; the reward lives in finish's structuredContent. This function finds the rollout's
episode (extra_info["episode_id"], else the last "ep-<16 hex>" in the rollout text: start_episode's
reply names it), calls finish on the server (a no-op returning the stored result when the
model already called it) and returns structuredContent["reward"]: -1 (nothing correct), 1, 2 or
3 (by speedup over eager and torch.compile), the paper's reward.

    custom_reward_function:
      path: integrations/verl/reward.py
      name: compute_score

`compute_score_single` is stage 1's (single-turn warm-up) reward: the rollout is one answer
holding every file as <file path="...">...</file> (the format train/chat.py's
SINGLE_TURN_NOTE asks for); it starts an episode for extra_info["task"], writes the files
through the server's Read/Write tools, evaluates (CUDA_AGENT_EVAL_STAGE, default profile) and
returns finish's reward: -1 when there is no file or nothing correct.

    custom_reward_function:
      path: integrations/verl/reward.py
      name: compute_score_single

Environment: CUDA_AGENT_SERVE_URL (default http://127.0.0.1:8000/mcp), CUDA_AGENT_SERVE_TOKEN,
CUDA_AGENT_EVAL_STAGE. Standard library only, so it runs in any verl worker.
"""

import json
import os
import re
import urllib.request

EPISODE = re.compile(r"\bep-[0-9a-f]{16}\b")
FILE = re.compile(r"<file path=\"([^\"]+)\">\n?(.*?)</file>", re.S)
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def _post(url, msg, headers, timeout):
    req = urllib.request.Request(url, json.dumps(msg).encode(), headers, method="POST")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        body = r.read()
        return r.headers, json.loads(body) if body else None


def finish(episode_id, url=None, token=None, final_eval=True, timeout=3600):
    """finish's structuredContent for one episode (raises on protocol errors)."""
    url = url or os.environ.get("CUDA_AGENT_SERVE_URL", "http://127.0.0.1:8000/mcp")
    token = token or os.environ.get("CUDA_AGENT_SERVE_TOKEN")
    h = dict(HEADERS)
    if token:
        h["Authorization"] = f"Bearer {token}"
    hdrs, _ = _post(url, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "verl-reward", "version": "1"}}}, h, 60)
    h["Mcp-Session-Id"] = hdrs["Mcp-Session-Id"]
    h["MCP-Protocol-Version"] = "2025-11-25"
    try:
        _, reply = _post(url, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "finish", "arguments": {"episode_id": episode_id,
                                            "final_eval": final_eval}}}, h, timeout)
    finally:
        req = urllib.request.Request(url, None, h, method="DELETE")
        try:
            urllib.request.urlopen(req, timeout=30).close()
        except OSError:
            pass
    if "error" in reply:
        raise RuntimeError(reply["error"]["message"])
    result = reply["result"]
    if result.get("isError"):
        raise RuntimeError(result["content"][0]["text"])
    return result["structuredContent"]


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """verl's reward-function signature; the score is the episode's reward (-1 without one)."""
    ep = (extra_info or {}).get("episode_id")
    if not ep:
        found = EPISODE.findall(solution_str or "")
        if not found:
            return -1.0
        ep = found[-1]
    try:
        return float(finish(ep)["reward"])
    except (OSError, RuntimeError, KeyError, ValueError):
        return -1.0


class _Session:
    """One MCP session over Streamable HTTP: tools/call returns structuredContent (and the
    text), raising on protocol errors."""

    def __init__(self, url=None, token=None):
        self.url = url or os.environ.get("CUDA_AGENT_SERVE_URL", "http://127.0.0.1:8000/mcp")
        token = token or os.environ.get("CUDA_AGENT_SERVE_TOKEN")
        self.h = dict(HEADERS)
        if token:
            self.h["Authorization"] = f"Bearer {token}"
        hdrs, _ = _post(self.url, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "verl-reward", "version": "1"}}}, self.h, 60)
        self.h["Mcp-Session-Id"] = hdrs["Mcp-Session-Id"]
        self.h["MCP-Protocol-Version"] = "2025-11-25"
        self.n = 1

    def call(self, name, args, timeout=3600):
        self.n += 1
        _, reply = _post(self.url, {"jsonrpc": "2.0", "id": self.n, "method": "tools/call",
                                    "params": {"name": name, "arguments": args}}, self.h, timeout)
        if "error" in reply:
            raise RuntimeError(reply["error"]["message"])
        r = reply["result"]
        text = "".join(c.get("text", "") for c in r.get("content", []))
        return r.get("structuredContent"), text, bool(r.get("isError"))

    def close(self):
        req = urllib.request.Request(self.url, None, self.h, method="DELETE")
        try:
            urllib.request.urlopen(req, timeout=30).close()
        except OSError:
            pass


def compute_score_single(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Stage 1's reward: the answer's files evaluated in a fresh episode of extra_info["task"]
    (a task id or name from list_tasks)."""
    task = (extra_info or {}).get("task")
    files = {p.strip().removeprefix("/workspace/"): c
             for p, c in FILE.findall(solution_str or "")}
    if not task or not files:
        return -1.0
    try:
        s = _Session()
    except (OSError, RuntimeError, KeyError, ValueError):
        return -1.0
    try:
        st, text, err = s.call("start_episode", {"task": task})
        if err:
            raise RuntimeError(text)
        ep = st["episode_id"]
        for path, content in files.items():
            s.call("Read", {"episode_id": ep, "file_path": "/workspace/" + path})
            s.call("Write", {"episode_id": ep, "file_path": "/workspace/" + path,
                             "content": content})
        s.call("evaluate", {"episode_id": ep,
                            "stage": os.environ.get("CUDA_AGENT_EVAL_STAGE", "profile")})
        fin, text, err = s.call("finish", {"episode_id": ep, "final_eval": False})
        if err:
            raise RuntimeError(text)
        return float(fin["reward"])
    except (OSError, RuntimeError, KeyError, ValueError, TypeError):
        return -1.0
    finally:
        s.close()
