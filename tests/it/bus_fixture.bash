# tests/it/bus_fixture.bash - what the job bus's tests (bus.sh, bus_tls.sh) share, sourced after
# lib.sh (not a test itself): the skips without redis-server or redis-cli, the background
# processes killed at exit, a free loopback port, the CPU fixture's solution as a workspace to
# copy, and reading a field of a JSON report.
#   pids+=(PID)        a worker or other process to kill at exit (REDIS_PID, REDIS2_PID too)
#   free_port          a free TCP port on 127.0.0.1
#   mkws NAME          $PWD/NAME: the base workspace with "# NAME" added to model_new.py (its own job)
#   jfield FILE K.PATH a field of a JSON file (None when absent)
command -v redis-server >/dev/null || skip_all redis "no redis-server (apt-get install redis-server)"
command -v redis-cli >/dev/null || skip_all redis "no redis-cli (apt-get install redis-tools)"
export CUDA_AGENT_CACHE_DIR=$PWD/cache
FIX=$CA_REPO/tests/eval/cpu
PY=${CUDA_AGENT_PYTHON:-python3}

pids=()
bus_cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
    [ -n "${REDIS_PID:-}" ] && kill -9 "$REDIS_PID" 2>/dev/null
    [ -n "${REDIS2_PID:-}" ] && kill -9 "$REDIS2_PID" 2>/dev/null
    wait 2>/dev/null
    rm -f "$OUT" "$ERR"
}
trap bus_cleanup EXIT

free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

"$CA" workspace create --task "$FIX/task.py" "$PWD/base" >/dev/null || exit 1
cp "$FIX"/sol/kernels/* "$PWD/base/kernels/"
cp "$FIX/sol/model_new.py" "$PWD/base/"
mkws() { rm -rf "$PWD/$1" && cp -a "$PWD/base" "$PWD/$1" && echo "# $1" >>"$PWD/$1/model_new.py"; }
jfield() { "$PY" -c 'import json,sys
d = json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."):
    d = d.get(k) if isinstance(d, dict) else None
print(d)' "$1" "$2"; }
