#!/usr/bin/env bash
# bench/candbox_probe.sh - what the candidate sandbox gives a CUDA program on this machine:
# torch on the GPU inside it (with and without /sys), the device-memory arena across it
# (tests/gpu/test_arena_ipc.py), and the softmax example's reference solution evaluated with
# the sandbox on and off (stage, reward, isolation, transport, timings side by side).
#
#   bash bench/candbox_probe.sh CUDA_AGENT_BINARY OUT_DIR
set -u
CA=$(cd "$(dirname "${1:?binary}")" && pwd)/$(basename "$1")
OUT=${2:?out dir}
mkdir -p "$OUT"
export CA_BIN=$CA
PY=${CUDA_AGENT_PYTHON:-python3}
ro=$("$PY" - <<'PYEOF'
import json, sys
sys.path.insert(0, "harness")
import candidate_proc as cp
print(json.dumps(cp.read_only_paths(sys.executable)))
PYEOF
)
scratch=$(mktemp -d); chmod 777 "$scratch"
for sys_ro in no yes; do
    extra=""; [ "$sys_ro" = yes ] && extra=',"/sys"'
    spec="{\"scratch\":\"$scratch\",\"gpu\":true,\"ro\":${ro%]}$extra]}"
    echo "== torch on the GPU in the sandbox (/sys bound: $sys_ro)"
    timeout 120 "$CA" candidate-sandbox "$spec" -- "$PY" -c '
import time, torch
t = time.time(); x = torch.ones(1 << 20, device="cuda"); torch.cuda.synchronize()
print("ok", torch.cuda.get_device_name(), float(x.sum()), f"{time.time() - t:.2f} s")' 2>&1 | tail -5
done
echo "== arena"
timeout 180 "$PY" -m pytest -q -p no:cacheprovider tests/gpu/test_arena_ipc.py 2>&1 | tail -15
ws=$(mktemp -d)/ws
"$CA" workspace create --task examples/tasks/softmax_last_dim.py "$ws" >/dev/null
cp examples/solutions/softmax_last_dim/kernels/* "$ws/kernels/"
cp examples/solutions/softmax_last_dim/model_new.py "$ws/"
for mode in sandbox no-sandbox sandbox no-sandbox; do
    flag=""; [ "$mode" = no-sandbox ] && flag=--no-sandbox
    t0=$(date +%s.%N)
    timeout 300 "$CA" eval $flag --json "$ws" >"$OUT/softmax-$mode.json" 2>"$OUT/softmax-$mode.err"
    t1=$(date +%s.%N)
    "$PY" - "$OUT/softmax-$mode.json" "$mode" "$t0" "$t1" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1])); h = r.get("harness") or {}
t = h.get("timing") or {}; c = t.get("candidate") or {}; e = h.get("elapsed_s") or {}
print(f"{sys.argv[2]:10s} wall {float(sys.argv[4]) - float(sys.argv[3]):6.1f} s stage {r.get('stage')} "
      f"reward {(r.get('reward') or {}).get('reward')} cand {c.get('median_ms')} ms "
      f"cv {c.get('cv')} verify {e.get('candidate_verify')} "
      f"transport {(h.get('verification') or {}).get('transport')}")
print("   isolation", json.dumps(h.get("isolation")))
if h.get("failure"): print("   failure", json.dumps(h["failure"])[:1500])
if r.get("message"): print("   message", r["message"][:800])
PYEOF
done
