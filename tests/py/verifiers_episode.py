"""One episode of verifiers' own OpenEnv engine against a live `cuda-agent serve --http`.

Run by tests/py/test_serve.py with the Python of .venv-verifiers (scripts/setup.sh makes it:
verifiers pins an older mcp than .venv's, so it lives apart):

    .venv-verifiers/bin/python tests/py/verifiers_episode.py URL

It builds the taskset with integrations/verifiers (cuda_agent_verifiers), then plays the first
task through verifiers.v1's OpenEnvEnv.run: openenv-core's client over the server's WebSocket,
/schema, reset, each reply parsed by verifiers' parse_action and stepped, the step rewards
summed. The model is the only thing replaced: a scripted player answers with the replies given
on stdin (one JSON string a line). Prints one JSON object: the task ids, the reset, what the
player was shown each turn and the reward verifiers recorded.
"""

import asyncio
import contextlib
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "integrations" / "verifiers"))
import cuda_agent_verifiers as cav  # noqa: E402
from verifiers.v1.tasksets.openenv.taskset import OpenEnvEnv  # noqa: E402


class Segment:
    def __init__(self, reply):
        self.last_reply = reply or ""
        self.terminated = reply is None


class Trace:
    def __init__(self):
        self.stopped = None
        self.rewards = {}

    def stop(self, reason):
        self.stopped = reason

    def record_reward(self, name, value):
        self.rewards[name] = value


class Interaction:
    """What verifiers' engine asks of a player's interaction: turn(payload) -> a segment."""

    def __init__(self, replies):
        self.replies = list(replies)
        self.shown = []
        self.trace = Trace()

    async def turn(self, payload):
        self.shown.append(json.loads(payload))
        return Segment(self.replies.pop(0) if self.replies else None)


class Player:
    def __init__(self, replies):
        self.last = Interaction(replies)

    @contextlib.asynccontextmanager
    async def interaction(self, task):
        yield self.last


class Agents:
    def __init__(self, replies):
        self.player = Player(replies)


def main():
    url = sys.argv[1]
    replies = [json.loads(line) for line in sys.stdin if line.strip()]
    ids = cav.task_ids(url)
    task = next(iter(cav.taskset(url, tasks=ids[:1]).load()))
    agents = Agents(replies)
    # OpenEnvEnv.run reads only the task and the agents (its config chooses the taskset, which
    # a whole verifiers run loads by id); the loop, the client and the parsing are verifiers'.
    asyncio.run(OpenEnvEnv.run(None, task, agents))
    inter = agents.player.last
    print(json.dumps({"task_ids": ids, "reset": task.data.reset, "shown": inter.shown,
                      "left": inter.replies, "stopped": inter.trace.stopped,
                      "rewards": inter.trace.rewards}))


if __name__ == "__main__":
    main()
