"""The external rollout engine (train/rollout.py OpenAIEngine) against a fake vLLM-style
completions server: token ids in, sampled token ids and log-probs out; a PPO step on them with
the weight-sync hook called after the update and the train/inference mismatch measured (the
fake server's log-probs are not the actor's: the truncated importance weights must show it)."""

import contextlib
import http.server
import json
import pathlib
import sys
import threading

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from train import rollout as R, stages  # noqa: E402
from test_train_toy import toy, toy_config  # noqa: E402

REPLY = [ord("a"), ord("b"), 257]  # "ab" then <|end|>
SYNCS = []
SEEN = []


def hook(actor, step, cfg):
    SYNCS.append((step, sum(float(p.detach().sum()) for p in actor.parameters())))


class Fake(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        SEEN.append(body)
        n = min(body["max_tokens"], len(REPLY))
        out = {"choices": [{"text": "", "finish_reason": "stop" if n == len(REPLY) else "length",
                            "logprobs": {"tokens": [f"token_id:{t}" for t in REPLY[:n]],
                                         "token_logprobs": [-1.0] * n}}]}
        data = json.dumps(out).encode()
        self.send_response(200 if self.path == "/v1/completions" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a):
        pass


@contextlib.contextmanager
def fake_server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Fake)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    finally:
        srv.shutdown()


def test_parse_both_id_forms():
    lp = {"token_logprobs": [-0.5, -1.5]}
    a = {"choices": [{"finish_reason": "stop", "logprobs": {**lp, "tokens": ["token_id:7",
                                                                             "token_id:9"]}}]}
    b = {"choices": [{"finish_reason": "length", "token_ids": [7, 9], "logprobs": lp}]}
    assert R.OpenAIEngine.parse(a) == ([7, 9], [-0.5, -1.5], True)
    assert R.OpenAIEngine.parse(b) == ([7, 9], [-0.5, -1.5], False)
    with pytest.raises(ValueError, match="log-probs"):
        R.OpenAIEngine.parse({"choices": [{"token_ids": [1], "logprobs": {}}]})


def test_ppo_step_on_external_engine(tmp_path):
    SYNCS.clear()
    SEEN.clear()
    with fake_server() as url:
        cfg = toy_config(tmp_path, 2)
        cfg.rollout.engine, cfg.rollout.base_url = "openai", url
        cfg.rollout.weight_sync = "test_train_engine:hook"
        stages.ppo_stage(cfg, "ppo", toy)
    # The prompt goes as token ids; each episode's second turn carries the first reply.
    assert all(isinstance(b["prompt"], list) and b["return_tokens_as_token_ids"] for b in SEEN)
    assert len(SEEN) == 2 * 16 * 2
    second = [b["prompt"] for b in SEEN if REPLY[:2] + [257] in
              [b["prompt"][i:i + 3] for i in range(len(b["prompt"]) - 2)]]
    assert second
    s = json.loads((tmp_path / "ppo" / "rollouts" / "step-000001.jsonl").read_text()
                   .splitlines()[0])
    assert [t for t, m in zip(s["tokens"], s["mask"]) if m] == REPLY * 2
    assert [lp for lp, m in zip(s["logprobs"], s["mask"]) if m] == [-1.0] * 6
    m = [json.loads(x) for x in (tmp_path / "ppo" / "metrics.jsonl").read_text().splitlines()]
    # The random actor gives these tokens about 1/262 each, the "engine" e^-1: a large
    # mismatch, every weight truncated below 1.
    assert m[0]["kl_rollout_train"] > 1 and m[0]["tis_weight_mean"] < 0.1
    assert [x for x, _ in SYNCS] == [1, 2] and SYNCS[0][1] != SYNCS[1][1]
