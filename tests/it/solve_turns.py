"""The scripted model's turns that write a solution (for fake_llm.bash's serve; tests/eval/cpu's
for the tests, the examples' for bench/bench_agent.sh): read model_new.py, write every file of
SOL_DIR/kernels and model_new.py, then the Bash commands given, then a last message.

  python3 tests/it/solve_turns.py SOL_DIR [--mark TEXT] [--bash-timeout MS] [--done TEXT]
      [CMD...] > script.json

--mark appends a comment line to model_new.py (files of their own: the job bus keeps one result
per identical job); each CMD becomes one Bash call.
"""
import argparse
import json
import os

p = argparse.ArgumentParser()
p.add_argument("sol")
p.add_argument("--mark")
p.add_argument("--bash-timeout", type=int)
p.add_argument("--done", default="Done.")
p.add_argument("cmds", nargs="*")
a = p.parse_intermixed_args()


def read(path):
    with open(os.path.join(a.sol, path)) as f:
        return f.read()


def bash(cmd):
    args = {"command": cmd}
    if a.bash_timeout:
        args["timeout"] = a.bash_timeout
    return {"tool_calls": [{"name": "Bash", "arguments": args}]}


model_new = read("model_new.py") + (f"# {a.mark}\n" if a.mark else "")
print(json.dumps(
    [{"tool_calls": [{"name": "Read", "arguments": {"file_path": "model_new.py"}}]},
     {"tool_calls": [{"name": "Write", "arguments": {"file_path": "kernels/" + f,
                                                     "content": read("kernels/" + f)}}
                     for f in sorted(os.listdir(os.path.join(a.sol, "kernels")))]
      + [{"name": "Write", "arguments": {"file_path": "model_new.py", "content": model_new}}]}]
    + [bash(c) for c in a.cmds] + [{"content": a.done}]))
