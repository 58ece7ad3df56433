#!/usr/bin/env bash
# scripts/setup.sh - one command from a fresh Debian 12 machine to a working
# cuda-agent: installs dependencies (Debian packages, a Python virtual environment
# in .venv for PyTorch (the CPU-mode evaluator tests run it), pyarrow and pytest, and
# one in .venv-verifiers for the verifiers integration test), builds, and runs the
# main job on the built-in softmax example: an episode workspace, a tool call in its
# sandbox, an evaluation (the reference solution on the GPU when there is one, else
# the CPU-mode fixture) and a summary of them (scripts/summarize.py) with where to go
# next.
#
#   scripts/setup.sh            everything
#   scripts/setup.sh --deps     dependencies only (used by CI)
set -euo pipefail
cd "$(dirname "$0")/.."

DEBIAN_PKGS=(build-essential pkg-config git python3 python3-venv python3-pip
             libjansson-dev libxxhash-dev libpcre2-dev libseccomp-dev libelf-dev libcurl4-openssl-dev
             libmicrohttpd-dev libsqlite3-dev libhiredis-dev libssl-dev openssl redis-server chromium clang
             clang-format)
PY_PKGS=(pyarrow pytest pyflakes numpy torch mcp openenv-core transformers tensorboard)
# verifiers pins an older mcp than PY_PKGS's: it gets a virtual environment of its own, in which
# tests/py/test_serve.py plays an episode with verifiers' OpenEnv engine.
VERIFIERS_PKGS=("verifiers[openenv]>=0.4,<0.5")

say() { printf '\033[1m== %s\033[0m\n' "$*" >&2; }

install_debian() {
    local missing=()
    for p in "${DEBIAN_PKGS[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
            missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && { say "Debian packages: all present"; return; }
    say "installing Debian packages: ${missing[*]}"
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}

install_python() {
    if [ ! -x .venv/bin/python3 ]; then
        say "creating .venv"
        python3 -m venv .venv
    fi
    if ! .venv/bin/python3 -c 'import pyarrow, pytest, pyflakes, numpy, torch, mcp, openenv, transformers, tensorboard' 2>/dev/null; then
        say "installing Python packages into .venv: ${PY_PKGS[*]}"
        .venv/bin/python3 -m pip install -q --disable-pip-version-check "${PY_PKGS[@]}"
    fi
}

install_verifiers() {
    if [ ! -x .venv-verifiers/bin/python3 ]; then
        say "creating .venv-verifiers"
        python3 -m venv .venv-verifiers
    fi
    if ! .venv-verifiers/bin/python3 -c 'import verifiers.v1.tasksets.openenv, openenv' 2>/dev/null; then
        say "installing Python packages into .venv-verifiers: ${VERIFIERS_PKGS[*]}"
        .venv-verifiers/bin/python3 -m pip install -q --disable-pip-version-check "${VERIFIERS_PKGS[@]}"
    fi
}

install_debian
install_python
install_verifiers
[ "${1:-}" = "--deps" ] && exit 0

say "building"
make -j"$(nproc)"

# The main job: the system doing its job on the built-in softmax example.
export PATH="$(cd .venv && pwd -P)/bin:$PATH" # python3 with PyTorch for the evaluator; its
                                              # real path, which the candidate sandbox mounts
demo=$(mktemp -d "${TMPDIR:-/tmp}/cuda-agent-demo-XXXXXX")
ws=$demo/softmax
say "main job: an episode workspace for the built-in softmax example"
./build/cuda-agent workspace create --task examples/tasks/softmax_last_dim.py "$ws"
say "one tool call in the episode's sandbox (persistent shell), then the episode ends"
if ./build/cuda-agent tool --workspace "$ws" --episode "demo-$$" Bash \
        '{"command":"cd kernels && echo \"working directory $(pwd), uid $(id -u), network interfaces: $(awk -F: \"NR > 2 {print \\$1}\" /proc/net/dev | xargs)\""}'; then
    ./build/cuda-agent tool --episode "demo-$$" --close >/dev/null
else
    echo "(no sandbox on this host: see the message above)"
fi
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    say "evaluating the softmax reference solution on the GPU"
    eval_ws=$ws device=cuda sol=examples/solutions/softmax_last_dim
else
    say "no GPU here: evaluating the CPU-mode fixture (tests/eval/cpu) with --device cpu"
    eval_ws=$demo/cpu device=cpu sol=tests/eval/cpu/sol
    ./build/cuda-agent workspace create --task tests/eval/cpu/task.py "$eval_ws" >/dev/null
fi
cp "$sol"/kernels/* "$eval_ws/kernels/"
cp "$sol/model_new.py" "$eval_ws/"
# The first evaluation on a machine builds the precompiled header: minutes on 2 cores.
rc=0
CUDA_AGENT_COMPILE_TIMEOUT=${CUDA_AGENT_COMPILE_TIMEOUT:-900} \
    ./build/cuda-agent eval --device "$device" --json "$eval_ws" >"$demo/report.json" || rc=$?
echo
if [ $rc -le 1 ]; then # 0 correct, 1 not (the report says why)
    python3 scripts/summarize.py "$eval_ws" "$demo/report.json"
else
    echo "(the evaluator could not run, exit $rc: see the message above)"
fi
echo
say "main job done: workspaces and the report (report.json) in $demo; run the tests with: make test"
