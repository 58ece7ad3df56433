#!/usr/bin/env bash
# bench/device_wheels.sh DIR [PYVER] - wheels of the official MCP SDK (and what it needs) for a GPU
# machine that has PyTorch but no package registry, so that bench/serve_examples.py can drive
# `cuda-agent serve` there with the real client. Run here, where pip reaches PyPI; carry DIR;
# there: python3 -m pip install -q --no-index --no-deps --target /tmp/site DIR/*.whl and
# PYTHONPATH=/tmp/site. PYVER is that machine's python3 (default 3.12); the wheels are for
# x86_64 Linux. The version pinned is the one the tests use (scripts/setup.sh installs it here).
set -euo pipefail
dir=${1:?usage: bench/device_wheels.sh DIR [PYVER]}
pyver=${2:-3.12}
py=${PYTHON:-python3}
[ -x .venv/bin/python3 ] && py=.venv/bin/python3
ver=$("$py" -c 'import importlib.metadata as m; print(m.version("mcp"))' 2>/dev/null) || {
    echo "device_wheels.sh: the mcp package is not installed here (scripts/setup.sh)" >&2
    exit 1
}
mkdir -p "$dir"
"$py" -m pip download -q --only-binary=:all: --python-version "$pyver" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any -d "$dir" "mcp==$ver"
echo "device_wheels.sh: mcp $ver and $(($(find "$dir" -name "*.whl" | wc -l) - 1)) dependencies in $dir ($(du -sh "$dir" | cut -f1))"
