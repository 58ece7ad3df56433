#!/usr/bin/env bash
# Compile every reference solution's CUDA kernels (examples/solutions/*/kernels/*.cu) for
# Hopper with nvcc's warnings as errors. Needs no GPU and no PyTorch: the .cu files are plain
# CUDA with extern "C" launchers, so nvcc alone can build them.
# Exit: 0 all compiled; 1 some failed (each named); 77 skipped (no nvcc).
set -euo pipefail

if ! command -v nvcc >/dev/null 2>&1; then
    echo "SKIP: nvcc not found"
    exit 77
fi

root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

shopt -s nullglob
files=("$root"/examples/solutions/*/kernels/*.cu)
if [ ${#files[@]} -eq 0 ]; then
    echo "FAIL: no .cu files under $root/examples/solutions/*/kernels" >&2
    exit 1
fi

failed=()
for f in "${files[@]}"; do
    rel=${f#"$root"/}
    obj="$tmp/${rel//\//_}.o"
    if nvcc -std=c++17 -arch=sm_90 -O3 -Werror all-warnings -c "$f" -o "$obj"; then
        echo "ok: $rel"
    else
        echo "FAIL: $rel" >&2
        failed+=("$rel")
    fi
done

if [ ${#failed[@]} -ne 0 ]; then
    echo "FAIL: ${#failed[@]} of ${#files[@]} did not compile: ${failed[*]}" >&2
    exit 1
fi
echo "ok: ${#files[@]} files compiled"
