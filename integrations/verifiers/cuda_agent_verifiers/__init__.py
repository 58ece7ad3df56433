"""verifiers (0.4: `verifiers.v1`) environment on cuda-agent's OpenEnv facade.

verifiers' OpenEnv taskset drives an OpenEnv server with openenv-core's client: it reads
/schema, resets once per task, sends the model's JSON replies as actions, and scores the sum
of the step rewards. cuda-agent serves that contract on `cuda-agent serve --http`: an action
is {"tool": NAME, "arguments": {...}}, reset's observation holds the system prompt (SKILL.md)
and the task message, and the reward arrives with finish (-1, 1, 2 or 3).

    import cuda_agent_verifiers as cav
    ts = cav.taskset("http://127.0.0.1:8000")        # one task per cuda-agent task

The tasks run in verifiers' OpenEnvEnv (verifiers.v1.tasksets.openenv), which a verifiers
run configuration names with its taskset; this package builds the taskset and its resets.
"""

import json
import urllib.request

from verifiers.v1.tasksets.openenv import OpenEnvConfig, OpenEnvTaskset

__all__ = ["task_ids", "taskset"]


def task_ids(base_url, filter=None, timeout=60):
    """The server's task ids (its list_tasks tool, through the stateless /step)."""
    args = {"filter": filter} if filter else {}
    req = urllib.request.Request(
        base_url.rstrip("/") + "/step",
        json.dumps({"action": {"tool": "list_tasks", "arguments": args}}).encode(),
        {"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        obs = json.load(r)["observation"]
    if obs["is_error"]:
        raise RuntimeError(obs["text"])
    return [t["id"] for t in obs["structured"]["tasks"]]


def taskset(base_url, tasks=None, limits=None, **config):
    """An OpenEnvTaskset with one reset per task (all the server's when tasks is None)."""
    ids = list(tasks) if tasks is not None else task_ids(base_url)
    resets = [{"task": t, **({"limits": limits} if limits else {})} for t in ids]
    return OpenEnvTaskset(OpenEnvConfig(base_url=base_url, resets=resets, **config))

