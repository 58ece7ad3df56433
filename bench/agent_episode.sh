#!/usr/bin/env bash
# bench/agent_episode.sh - one full scripted agent episode with the real evaluator (issue "the
# agent": "one full scripted episode with the evaluator on an H200, its trajectory and timings
# recorded").
#
#   bash bench/agent_episode.sh BIN OUTDIR [--device cuda|cpu]
#
# Starts `BIN evaluator --device DEV` (warm runner behind a socket) and the scripted
# OpenAI-compatible server tests/it/fake_llm.py, then `BIN run` with CUDA_AGENT_EVALUATOR set
# to the service. The scripted model reads SKILL.md and model_new.py, writes a reference
# solution (examples/solutions/swish_scale_bias with --device cuda; the CPU-mode fixture
# tests/eval/cpu with --device cpu), runs ./compile, ./verify and ./profile through Bash,
# breaks model_new.py with one Edit, runs ./verify again and answers. Best of trajectory must
# then score the good (profiled) snapshot at reward >= 1, above the broken final workspace.
#
# OUTDIR gets: summary.json and summary.md (per turn the tools and their wall time, the
# evaluations' compile / verify / profile timings, rewards and speedups, final and best
# rewards, episode wall time, evaluator start time), trajectory.jsonl (copied from run/),
# run/ (the run's OUT: workspace, evals/, eval_final.json, eval_best.json, ...), run.json
# (`run --json`), run.log, evaluator.log, fake_llm.log (every request), script.json.
#
# Exit status: 0 the episode ran and every check held; 1 a step failed or a check did not hold
# (summary.md lists them); 2 usage; 69 a needed component (BIN, PyTorch, nvcc) is missing.
#
# Environment:
#   CUDA_AGENT_PYTHON         interpreter with PyTorch (default: .venv/bin/python3 of this
#                             repository when present, else python3)
#   CUDA_AGENT_CACHE_DIR      evaluator cache (default the evaluator's own, ~/.cache/cuda-agent:
#                             cold on a fresh machine, warm on the next run; kept out of
#                             OUTDIR, it holds hundreds of MB)
#   CUDA_AGENT_COMPILE_TIMEOUT  seconds per compiler run (default 900: slow machines)
#   EVALUATOR_START_TIMEOUT   seconds to wait for the service's socket (default 900)
#   EPISODE_TIMEOUT           the episode's --wall-clock in seconds (default 1800); scoring
#                             gets as long again before the run is killed
#   EVAL_SERVICE_FLAGS        extra flags for `BIN evaluator` (e.g. --no-sandbox)
#   RUN_FLAGS                 extra flags for `BIN run` (e.g. --insecure-no-sandbox)
set -u

die() { # code message...
    local code=$1
    shift
    echo "agent_episode: $*" >&2
    exit "$code"
}
usage() {
    echo "usage: bash bench/agent_episode.sh BIN OUTDIR [--device cuda|cpu]" >&2
    exit 2
}

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEVICE=cuda
POS=()
while [ $# -gt 0 ]; do
    case $1 in
    --device)
        [ $# -ge 2 ] || usage
        DEVICE=$2
        shift 2
        ;;
    --device=*)
        DEVICE=${1#--device=}
        shift
        ;;
    -h | --help)
        sed -n '2,/^set -u/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
        exit 0
        ;;
    -*) usage ;;
    *)
        POS+=("$1")
        shift
        ;;
    esac
done
[ ${#POS[@]} -eq 2 ] || usage
BIN=${POS[0]}
OUTDIR=${POS[1]}
case $DEVICE in
cuda)
    TASK=$REPO/examples/tasks/swish_scale_bias.py
    SOL=$REPO/examples/solutions/swish_scale_bias
    ;;
cpu)
    TASK=$REPO/tests/eval/cpu/task.py
    SOL=$REPO/tests/eval/cpu/sol
    ;;
*) usage ;;
esac

# ---- what the episode needs, checked up front with clear errors ----
case $BIN in */*) ;; *) BIN=$(command -v -- "$BIN" || echo "$BIN") ;; esac
{ [ -f "$BIN" ] && [ -x "$BIN" ]; } ||
    die 69 "BIN '$BIN' is not an executable file (build it with 'make': build/cuda-agent)"
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
VERSION=$("$BIN" --version 2>&1) || die 69 "'$BIN --version' failed: $VERSION"
# The interpreter the way the tests and bench scripts find it: $CUDA_AGENT_PYTHON, else the
# repository's .venv (scripts/setup.sh), else python3 from PATH. No pip: it must have torch.
PY=${CUDA_AGENT_PYTHON:-}
if [ -z "$PY" ]; then
    if [ -x "$REPO/.venv/bin/python3" ]; then PY=$REPO/.venv/bin/python3; else PY=python3; fi
fi
command -v -- "$PY" >/dev/null ||
    die 69 "no Python interpreter '$PY' (set CUDA_AGENT_PYTHON to one with PyTorch)"
PY=$(command -v -- "$PY")
TORCH_INFO=$("$PY" -c '
import sys, torch
gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else ""
print(torch.__version__, torch.version.cuda or "-", int(torch.cuda.is_available()), gpu, sep="\t")
' 2>&1) || die 69 "PyTorch is not importable by $PY (set CUDA_AGENT_PYTHON; scripts/setup.sh" \
    "installs it in .venv): $(tail -1 <<<"$TORCH_INFO")"
IFS=$'\t' read -r TORCH_VERSION TORCH_CUDA HAVE_GPU GPU_NAME <<<"$TORCH_INFO"
if [ "$DEVICE" = cuda ] && [ "$HAVE_GPU" != 1 ]; then
    die 69 "--device cuda, but PyTorch $TORCH_VERSION ($PY) sees no CUDA GPU" \
        "(use --device cpu without one)"
fi
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$NVCC" ] ||
    die 69 "no nvcc (on PATH or /usr/local/cuda/bin): the evaluator compiles kernels/*.cu with it"
NVCC_VERSION=$("$NVCC" --version 2>/dev/null | sed -n 's/.*release \([^,]*\),.*/\1/p')
export CUDA_AGENT_PYTHON=$PY
export CUDA_AGENT_COMPILE_TIMEOUT=${CUDA_AGENT_COMPILE_TIMEOUT:-900}
START_TIMEOUT=${EVALUATOR_START_TIMEOUT:-900}
EPISODE_TIMEOUT=${EPISODE_TIMEOUT:-1800}
for v in "$START_TIMEOUT" "$EPISODE_TIMEOUT"; do
    [[ $v =~ ^[1-9][0-9]*$ ]] ||
        die 2 "EVALUATOR_START_TIMEOUT and EPISODE_TIMEOUT are whole seconds, not '$v'"
done

mkdir -p "$OUTDIR" || die 1 "cannot create OUTDIR '$OUTDIR'"
OUTDIR=$(cd "$OUTDIR" && pwd)
[ -e "$OUTDIR/run" ] &&
    die 2 "$OUTDIR/run exists (from an earlier episode): use a new OUTDIR or remove it"
# The evaluator's default (src/core/fs.c fs_cache_dir), made explicit so that it is recorded.
CACHE_HOME=${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}
export CUDA_AGENT_CACHE_DIR=${CUDA_AGENT_CACHE_DIR:-$CACHE_HOME/cuda-agent}
# Whether an earlier evaluation left a compile cache (the evaluator's start-up time says
# whether the precompiled header for this toolchain was in it).
CACHE_USED=0
[ -d "$CUDA_AGENT_CACHE_DIR/compile" ] && CACHE_USED=1
rm -f "$OUTDIR"/summary.json "$OUTDIR"/summary.md "$OUTDIR"/trajectory.jsonl "$OUTDIR"/fake_llm.port
# Our own variables decide where the episode goes, not the caller's.
unset CUDA_AGENT_EVALUATOR CUDA_AGENT_EVAL_DEVICE OPENAI_BASE_URL CUDA_AGENT_BASE_URL

now() { date +%s.%N; }
secs() { # start end -> seconds between them
    "$PY" -c 'import sys; print("%.1f" % (float(sys.argv[2]) - float(sys.argv[1])))' "$1" "$2"
}

# ---- clean-up: the processes this script started, by their ids ----
SVC_PID='' SRV_PID='' RUN_PID=''
SOCK=$(mktemp -u "${TMPDIR:-/tmp}/ca-episode-XXXXXX.sock")
stop_pid() { # pid grace-seconds: TERM, wait up to grace, then KILL
    local pid=$1 i
    [ -n "$pid" ] || return 0
    kill -TERM "$pid" 2>/dev/null || return 0
    for ((i = 0; i < $2 * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
}
cleanup() {
    stop_pid "$RUN_PID" 30
    stop_pid "$SRV_PID" 5
    # The service stops its runners on TERM after the requests in flight.
    stop_pid "$SVC_PID" 60
    rm -f "$SOCK"
}
trap cleanup EXIT
trap 'echo "agent_episode: interrupted (what was written is in $OUTDIR)" >&2; exit 130' INT TERM

echo "agent_episode: $VERSION; device $DEVICE${GPU_NAME:+ ($GPU_NAME)};" \
    "torch $TORCH_VERSION; nvcc ${NVCC_VERSION:-?}"
echo "agent_episode: task $TASK, solution $SOL, out $OUTDIR"
echo "agent_episode: cache $CUDA_AGENT_CACHE_DIR" \
    "($([ $CACHE_USED = 1 ] && echo "used before" || echo new))"

# ---- the scripted model's replies ----
"$PY" "$REPO/bench/agent_episode.py" script "$SOL" >"$OUTDIR/script.json" ||
    die 1 "cannot write the scripted model's replies from $SOL"

# ---- the evaluator service ----
EXTRA_SVC=()
[ "$DEVICE" = cpu ] && EXTRA_SVC=(--runners 1)
t_svc0=$(now)
# shellcheck disable=SC2086
"$BIN" --log-level info evaluator --socket "$SOCK" --device "$DEVICE" "${EXTRA_SVC[@]}" \
    ${EVAL_SERVICE_FLAGS:-} 2>"$OUTDIR/evaluator.log" &
SVC_PID=$!
deadline=$((SECONDS + START_TIMEOUT))
while [ ! -S "$SOCK" ]; do
    if ! kill -0 "$SVC_PID" 2>/dev/null; then
        wait "$SVC_PID"
        rc=$?
        SVC_PID=
        tail -20 "$OUTDIR/evaluator.log" >&2
        die "$([ $rc = 69 ] && echo 69 || echo 1)" \
            "the evaluator exited ($rc) before listening (log: $OUTDIR/evaluator.log)"
    fi
    [ $SECONDS -lt $deadline ] || {
        tail -20 "$OUTDIR/evaluator.log" >&2
        die 1 "the evaluator did not listen within ${START_TIMEOUT} s" \
            "(EVALUATOR_START_TIMEOUT; log: $OUTDIR/evaluator.log)"
    }
    sleep 0.1
done
t_svc1=$(now)
echo "agent_episode: evaluator ready in $(secs "$t_svc0" "$t_svc1") s"

# ---- the scripted model server ----
"$PY" "$REPO/tests/it/fake_llm.py" "$OUTDIR/script.json" "$OUTDIR/fake_llm.port" \
    "$OUTDIR/fake_llm.log" 2>"$OUTDIR/fake_llm.err" &
SRV_PID=$!
for _ in $(seq 200); do
    [ -s "$OUTDIR/fake_llm.port" ] && break
    kill -0 "$SRV_PID" 2>/dev/null || break
    sleep 0.05
done
[ -s "$OUTDIR/fake_llm.port" ] ||
    die 1 "the scripted model server did not start: $(tail -c 500 "$OUTDIR/fake_llm.err")"
URL=http://127.0.0.1:$(cat "$OUTDIR/fake_llm.port")/v1

# ---- the episode ----
echo "agent_episode: episode running (wall-clock limit ${EPISODE_TIMEOUT} s, then scoring)"
t_run0=$(now)
# shellcheck disable=SC2086
CUDA_AGENT_EVALUATOR=$SOCK timeout -k 30 $((2 * EPISODE_TIMEOUT)) \
    "$BIN" run --task "$TASK" --model scripted --base-url "$URL" --out "$OUTDIR/run" \
    --device "$DEVICE" --max-turns 20 --request-timeout 60 \
    --wall-clock "$EPISODE_TIMEOUT" --json ${RUN_FLAGS:-} >"$OUTDIR/run.json" 2>"$OUTDIR/run.log" &
RUN_PID=$!
wait "$RUN_PID"
RUN_RC=$?
RUN_PID=
t_run1=$(now)
echo "agent_episode: run exited $RUN_RC after $(secs "$t_run0" "$t_run1") s"
[ "$RUN_RC" = 124 ] || [ "$RUN_RC" = 137 ] &&
    echo "agent_episode: the run was killed after $((2 * EPISODE_TIMEOUT)) s (EPISODE_TIMEOUT)" >&2
[ -f "$OUTDIR/run/trajectory.jsonl" ] &&
    cp "$OUTDIR/run/trajectory.jsonl" "$OUTDIR/trajectory.jsonl"
SVC_ALIVE=0
kill -0 "$SVC_PID" 2>/dev/null && SVC_ALIVE=1

# ---- summary and checks ----
"$PY" "$REPO/bench/agent_episode.py" summary "$OUTDIR" \
    --device "$DEVICE" --task "$TASK" --solution "$SOL" --run-rc "$RUN_RC" \
    --evaluator-start-s "$(secs "$t_svc0" "$t_svc1")" \
    --episode-wall-s "$(secs "$t_run0" "$t_run1")" \
    --evaluator-alive "$SVC_ALIVE" --cache "$CUDA_AGENT_CACHE_DIR" --cache-used "$CACHE_USED" \
    --version "$VERSION" --torch "$TORCH_VERSION" --torch-cuda "$TORCH_CUDA" --gpu "$GPU_NAME" \
    --nvcc "${NVCC_VERSION:-}" --python "$PY"
rc=$?
if [ $rc -ne 0 ]; then
    echo "agent_episode: FAILED (see $OUTDIR/summary.md; logs: run.log, evaluator.log)" >&2
    [ -s "$OUTDIR/run.log" ] && tail -5 "$OUTDIR/run.log" >&2
    exit 1
fi
echo "agent_episode: ok ($OUTDIR/summary.md)"
