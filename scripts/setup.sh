#!/usr/bin/env bash
# scripts/setup.sh - one command from a fresh Debian 12 machine to a working
# cuda-agent: installs dependencies (Debian packages, and a Python virtual
# environment in .venv for PyTorch (the CPU-mode evaluator tests run it), pyarrow and
# pytest), builds, and runs the main job
# on a built-in example: an episode workspace, a tool call in its sandbox,
# and an evaluation (on the GPU when there is one, else in CPU mode).
#
#   scripts/setup.sh            everything
#   scripts/setup.sh --deps     dependencies only (used by CI)
set -euo pipefail
cd "$(dirname "$0")/.."

DEBIAN_PKGS=(build-essential pkg-config git python3 python3-venv python3-pip
             libjansson-dev libxxhash-dev libpcre2-dev libseccomp-dev libelf-dev libcurl4-openssl-dev clang
             clang-format)
PY_PKGS=(pyarrow pytest pyflakes numpy torch)

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
    if ! .venv/bin/python3 -c 'import pyarrow, pytest, pyflakes, numpy, torch' 2>/dev/null; then
        say "installing Python packages into .venv: ${PY_PKGS[*]}"
        .venv/bin/python3 -m pip install -q --disable-pip-version-check "${PY_PKGS[@]}"
    fi
}

install_debian
install_python
[ "${1:-}" = "--deps" ] && exit 0

say "building"
make -j"$(nproc)"

say "main job: an episode workspace for the built-in softmax example"
ws=$(mktemp -d "${TMPDIR:-/tmp}/cuda-agent-demo-XXXXXX")
rmdir "$ws"
./build/cuda-agent workspace create --task examples/tasks/softmax_last_dim.py "$ws"
echo
(cd "$ws" && find . -printf '%M %p\n' | sort -k2)
echo
./build/cuda-agent workspace check "$ws"
echo
./build/cuda-agent data list examples/tasks
echo
say "one tool call in the episode's sandbox (persistent shell), then the episode ends"
if ./build/cuda-agent tool --workspace "$ws" --episode "demo-$$" Bash \
        '{"command":"cd kernels && pwd && id -u && ls /workspace"}'; then
    ./build/cuda-agent tool --episode "demo-$$" --close >/dev/null
else
    echo "(no sandbox on this host: see the message above)"
fi
echo
export PATH="$PWD/.venv/bin:$PATH" # python3 with PyTorch for the evaluator
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    say "evaluating the softmax reference solution on the GPU"
    cp examples/solutions/softmax_last_dim/kernels/* "$ws/kernels/"
    cp examples/solutions/softmax_last_dim/model_new.py "$ws/"
    ./build/cuda-agent eval "$ws" || echo "(evaluation failed: see the report above)"
else
    say "no GPU here: evaluating the CPU-mode fixture (tests/eval/cpu) with --device cpu"
    cpu_ws=$(mktemp -d "${TMPDIR:-/tmp}/cuda-agent-cpu-XXXXXX")
    rmdir "$cpu_ws"
    ./build/cuda-agent workspace create --task tests/eval/cpu/task.py "$cpu_ws" >/dev/null
    cp tests/eval/cpu/sol/kernels/* "$cpu_ws/kernels/"
    cp tests/eval/cpu/sol/model_new.py "$cpu_ws/"
    CUDA_AGENT_COMPILE_TIMEOUT=${CUDA_AGENT_COMPILE_TIMEOUT:-900} \
        ./build/cuda-agent eval --device cpu "$cpu_ws" || echo "(evaluation failed: see above)"
fi
echo
say "workspace left at $ws; run the tests with: make test"
