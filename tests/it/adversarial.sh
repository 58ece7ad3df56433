#!/usr/bin/env bash
# Every candidate under tests/adversarial/ (except gpu/, the GPU suite's) through the evaluator
# service in CPU mode: each hack must get its expected verdict (reward -1 at the named stage, with
# the named failure kind or message) and each legitimate candidate must pass. Needs PyTorch
# (CUDA_AGENT_PYTHON or the python3 on PATH) and nvcc; skips with the reason otherwise.
. "${CA_REPO:?run through tests/run.sh (make test), which sets CA_REPO}/tests/it/lib.sh"
require_cpu_evaluator
FIX=$CA_REPO/tests/eval/cpu
SOCK=$PWD/adv.sock
"$CA" evaluator --device cpu --prewarm 1 --socket "$SOCK" 2>"$PWD/svc.log" &
svc=$!
trap 'kill $svc 2>/dev/null; wait $svc 2>/dev/null; rm -f "$OUT" "$ERR"' EXIT
for _ in $(seq 3000); do [ -S "$SOCK" ] && break; sleep 0.1; done
assert "the service listens" [ -S "$SOCK" ]

for case in "$CA_REPO"/tests/adversarial/*/; do
    name=$(basename "$case")
    # GPU cases: tests/gpu/test_adversarial.py runs them against the example tasks.
    [ "$name" = gpu ] && continue
    ws=$PWD/ws-$name
    "$CA" workspace create --task "$FIX/task.py" "$ws" >/dev/null || exit 1
    cp "$FIX"/sol/kernels/* "$ws/kernels/"
    cp "$FIX/sol/model_new.py" "$ws/"
    (cd "$case" && find . -type f ! -name expect.json -exec cp --parents {} "$ws/" \;)
    run "$CA" eval --server "$SOCK" --json "$ws"
    assert "$name" "$PY" - "$case/expect.json" "$OUT" "$CA_REPO/tests/adversarial" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[3])
import expect  # tests/adversarial/expect.py: the check the GPU suite runs too
exp = json.load(open(sys.argv[1]))
r = json.load(open(sys.argv[2]))
failure = (r.get("harness") or {}).get("failure") or {}
msg = r.get("message") or ""
why = expect.problems(exp, r)
verdict = f"reward {(r.get('reward') or {}).get('reward')} at {r.get('stage')}" + \
    (f" ({failure.get('kind')})" if failure else "")
print(f"  {exp['pattern']}: {verdict}: {msg.splitlines()[0][:140] if msg else 'passed'}",
      file=sys.stderr)
if why:
    print("; ".join(why) + "\n" + msg[:1500])
    sys.exit(1)
PY
done
finish
