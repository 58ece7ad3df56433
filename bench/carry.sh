#!/usr/bin/env bash
# bench/carry.sh - a copy of the cuda-agent binary that runs on another Linux machine without
# this machine's development packages: .carry/cuda-agent, linked with an RPATH of
# $ORIGIN/lib, beside .carry/lib holding every shared library it needs that is not part of
# glibc. Used to run the GPU benchmarks and suites on a machine where the project cannot be
# built (no -dev packages, no package registry); .carry/ is ignored by git.
#
#   bash bench/carry.sh            (after `make`)
# then, on the other machine: CA_BIN=.carry/cuda-agent ...
# Also .carry/redis-server and .carry/redis-cli (this machine's, when installed; run them with
# LD_LIBRARY_PATH=.carry/lib) for the job bus's GPU benchmark (bench/bus_gpu.sh), since the GPU
# machine has no Redis and no package registry.
set -eu
make -s all
mkdir -p .carry/lib
objs=$(ls build/src/cli/*.o)
# DT_RPATH (not RUNPATH): it also applies to the libraries' own dependencies.
# shellcheck disable=SC2086,SC2016
cc -o .carry/cuda-agent $objs build/libcuda-agent.a \
    $(make -s print-libs) \
    -Wl,--disable-new-dtags,-rpath,'$ORIGIN/lib'
bins=(.carry/cuda-agent)
for r in redis-server redis-cli; do
    if command -v "$r" >/dev/null; then
        cp -L "$(command -v "$r")" ".carry/$r" # redis-server picks its role by its name
        bins+=(".carry/$r")
    fi
done
for b in "${bins[@]}"; do ldd "$b"; done | awk '$3 ~ /^\// {print $3}' | sort -u |
    grep -Ev '/(libc|libm|libpthread|libdl|librt|libresolv|ld-linux[^/]*)\.so' |
    while read -r lib; do case $lib in "$PWD"/.carry/*) ;; *) cp -L "$lib" .carry/lib/ ;; esac; done
echo "carried: ${bins[*]} and $(ls .carry/lib | wc -l) libraries ($(du -sh .carry | cut -f1))"
