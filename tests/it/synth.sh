#!/usr/bin/env bash
# Black-box tests of `cuda-agent synth`: bad input, a small CPU run (torch.compile with the
# aot_eager backend, a small runtime window), the output read back as a task source (data list,
# workspace create, parquet), the report in Chromium, resume after SIGINT and after SIGKILL with
# nothing lost or done twice, nothing redone on a re-run, a new operator subset extending the
# set, and determinism from the seed (a second folder gives the same tasks).
source "$CA_REPO/tests/it/lib.sh"

PY=${CUDA_AGENT_PYTHON:-python3}
# -- usage errors need no torch
run "$CA" synth run --seeds 0-3
expect "run without --out is a usage error" 2 "" "--out DIR"
run "$CA" synth run --out d --seeds 5-1
expect "a reversed seed range is a usage error" 2 "" "--seeds 5-1"
run "$CA" synth run --out d --min-ms x
expect "a bad runtime bound is a usage error" 2 "" "--min-ms x"
run "$CA" synth report nowhere
expect "report of a folder without a store" 4 "" "no synth store here"

if ! "$PY" -c 'import torch' 2>/dev/null; then
    skip_all torch "PyTorch is not importable by $PY (set CUDA_AGENT_PYTHON; scripts/setup.sh installs it in .venv)"
fi
export CUDA_AGENT_PYTHON=$PY CUDA_AGENT_CACHE_DIR=$PWD/cache

# -- missing torch: a python3 that cannot import it
mkdir -p nopy
printf '#!/bin/sh\nexec %s -S "$@"\n' "$(command -v "$PY")" >nopy/python3
chmod +x nopy/python3
CUDA_AGENT_PYTHON=$PWD/nopy/python3 run "$CA" synth catalog -o c.json
expect "catalog without torch: exit 69, says so" 69 "" "torch is not importable"

# -- the catalog, crawled once and shared by every run below
run "$CA" synth catalog -o cat.json
expect "catalog crawl" 0
assert "the catalog has nn.Linear with its signature" \
    "$PY" -c 'import json,sys; c=json.load(open("cat.json")); e=c["ops"]["nn.Linear"]; sys.exit(not ("in_features" in e["signature"] and c["fingerprint"]))'

COMMON=(--catalog cat.json --device cpu --compile-backend aot_eager --min-ms 0.05 --max-ms 50
    --timeout 60 --threads 1 --timing-ms 30)
run "$CA" synth run --out d "${COMMON[@]}" --ops nn.Nope,nn.ReLU
expect "an unknown operator is named" 4 "" 'unknown operator "nn.Nope"'
run "$CA" synth run --out d "${COMMON[@]}" --depths 2:1,7:1
expect "a bad depth is a usage error" 2 "" 'bad --depths entry "7:1"'
touch afile
run "$CA" synth run --out afile/sub "${COMMON[@]}"
expect "an unwritable output folder is an error" 1 "" "afile/sub"
run "$CA" synth run --out d "${COMMON[@]}" --decontaminate nowhere
expect "a missing decontamination tree is an error" 4 "" "nowhere"

# Seeds recorded in DIR's store: "count distinct-count" over all streams.
seeds_in() {
    "$PY" - "$1" <<'EOF'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1] + "/synth.db")
n, d = db.execute("SELECT count(*), count(DISTINCT stream || ':' || seed) FROM candidates").fetchone()
print(n, d)
EOF
}
wait_rows() { # DIR N: wait (up to 60 s) until the store holds at least N rows
    for _ in $(seq 600); do
        [ -f "$1/synth.db" ] && [ "$(seeds_in "$1" 2>/dev/null | cut -d' ' -f1)" -ge "$2" ] 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

# -- interrupted with SIGINT, then resumed
"$CA" synth run --out a "${COMMON[@]}" --seeds 0-7 -j 2 --json >int.out 2>int.err &
pid=$!
wait_rows a 2
kill -INT $pid
wait $pid
RC=$?
read -r n1 _ <<<"$(seeds_in a)"
assert "SIGINT: exit 130, some seeds kept, not all (n=$n1)" test "$RC" -eq 130 -a "$n1" -ge 2 -a "$n1" -lt 8
assert "SIGINT: the interrupted run still wrote its outputs" test -s a/tasks.jsonl -a -s a/report.md
run "$CA" synth run --out a "${COMMON[@]}" --seeds 0-7 -j 1 --json
expect "resume after SIGINT" 0 '"interrupted": false'
done2=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["done"])' "$OUT")
read -r n dn <<<"$(seeds_in a)"
assert "resume did only the rest ($done2 = 8 - $n1) and each seed once ($n rows, $dn distinct)" \
    test "$done2" -eq $((8 - n1)) -a "$n" -eq 8 -a "$dn" -eq 8

# -- killed with SIGKILL while extending the range, then resumed
"$CA" synth run --out a "${COMMON[@]}" --seeds 0-11 -j 1 >kill.out 2>&1 &
pid=$!
wait_rows a 9
kill -KILL $pid
wait $pid 2>/dev/null
read -r nk _ <<<"$(seeds_in a)"
run "$CA" synth run --out a "${COMMON[@]}" --seeds 0-11 -j 1 --json
expect "resume after SIGKILL" 0
read -r n dn <<<"$(seeds_in a)"
assert "SIGKILL: $nk kept, then 12 rows, 12 distinct ($n, $dn)" test "$nk" -ge 9 -a "$n" -eq 12 -a "$dn" -eq 12
run "$CA" synth run --out a "${COMMON[@]}" --seeds 0-11 --json
expect "a finished range is not redone" 0 '"done": 0'

# -- a different window on the same store is refused (its rows would not be comparable)
run "$CA" synth run --out a "${COMMON[@]}" --max-ms 40 --seeds 0-1
expect "other filter settings on one store are refused" 2 "" "max_ms"

# -- an operator subset is a new stream: it extends the set, the old rows stay
run "$CA" synth run --out a "${COMMON[@]}" --ops nn.Linear,nn.ReLU,nn.Tanh --seeds 0-2 --json
expect "an operator subset extends the set" 0 '"done": 3'
read -r n _ <<<"$(seeds_in a)"
assert "15 rows after extending (have $n)" test "$n" -eq 15

# -- the output is a task source
acc=$("$PY" -c 'import sqlite3; print(sqlite3.connect("a/synth.db").execute("SELECT count(*) FROM candidates WHERE status=\"accepted\"").fetchone()[0])')
run "$CA" data list a/tasks.jsonl
expect "data list reads tasks.jsonl ($acc tasks, no label corrected)" 0 "$acc task"
assert "no ops label disagrees with the code" bash -c "! grep -q 'corrected' '$OUT'"
id=$(head -1 "$OUT" | awk '{print $1}')
run "$CA" workspace create --task "a/tasks.jsonl:$id" ws
expect "workspace create --task tasks.jsonl:ID" 0
assert "the workspace holds the task" test -s ws/model.py
assert "every row has the Ops-6K columns and ours" "$PY" - <<'EOF'
import json, re, sys
rows = [json.loads(l) for l in open("a/tasks.jsonl")]
for r in rows:
    assert re.fullmatch(r"torch#[1-5]", r["data_source"]), r["data_source"]
    assert int(r["data_source"][6:]) >= len(r["ops"]) >= 1
    assert r["eager_ms"] > 0 and r["compile_ms"] > 0 and r["filters"]["compile"]["ok"]
    assert isinstance(r["seed"], int) and r["id"].endswith(r["id"][-12:])
    assert "class Model" in r["code"]
sys.exit(0)
EOF
if "$PY" -c 'import pyarrow' 2>/dev/null; then
    assert "tasks.parquet has the rows and the Ops-6K columns" "$PY" - "$acc" <<'EOF'
import sys, pyarrow.parquet as pq
t = pq.read_table("a/tasks.parquet")
assert t.num_rows == int(sys.argv[1]), t.num_rows
assert {"code", "ops", "data_source", "id", "seed", "eager_ms", "compile_ms", "filters"} <= set(t.column_names)
EOF
    run "$CA" data import -o back.jsonl a/tasks.parquet
    expect "data import reads tasks.parquet back ($acc tasks)" 0 "$acc task"
else
    skip pyarrow "tasks.parquet" "pyarrow is not installed"
fi
run "$CA" synth report a
expect "synth report prints the Markdown" 0 "| runtime |"
assert "report.html is written" test -s a/report.html

# -- every rejection has its reason
assert "every rejected row has a filter and a reason" "$PY" - <<'EOF'
import sqlite3, sys
db = sqlite3.connect("a/synth.db")
bad = db.execute("SELECT count(*) FROM candidates WHERE status='rejected' AND (filter IS NULL OR reason IS NULL OR reason='')").fetchone()[0]
sys.exit(bad)
EOF

# -- determinism: another folder, the same seeds, the same tasks
run "$CA" synth run --out b "${COMMON[@]}" --seeds 0-2 --no-parquet
expect "a second folder" 0
assert "the same seeds give the same code" "$PY" - <<'EOF'
import json, sqlite3, sys
def codes(d):
    db = sqlite3.connect(d + "/synth.db")
    return dict(db.execute("SELECT seed, code FROM candidates WHERE seed <= 2 AND stream = "
                           "(SELECT stream FROM candidates WHERE seed = 0 ORDER BY created_us LIMIT 1)"))
a, b = codes("a"), codes("b")
sys.exit(not (a == b and len(a) == 3))
EOF

# -- LLM mode against the scripted server: the model's reply is filtered like a composition;
# a reply that is not a task is rejected with its reason, the same code twice is a duplicate
. "$CA_REPO/tests/it/fake_llm.bash"
"$PY" - <<'EOF' >llm.json
import json
code = """import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return F.gelu(self.linear(x)) * 0.5


batch_size = 64
in_features = 256
out_features = 512


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
"""
print(json.dumps([{"content": "I cannot write that."},
                  {"content": "Here it is:\n```python\n" + code + "```\n", "repeat": True}]))
EOF
serve llm
run "$CA" synth run --out l "${COMMON[@]}" --seeds 0-2 --llm-model fake-model --llm-base-url "$URL" --json
expect "LLM mode: 3 done, 1 duplicate" 0 '"duplicates": 1'
assert "LLM mode: 1 accepted" grep -q '"accepted": 1,' "$OUT"
assert "LLM mode: each request carried the composer's draft" test "$(py "$LOG" 'sum("Operators, in this order" in json.dumps(x["body"]) and x["body"]["model"] == "fake-model" for x in L)')" = 3
assert "LLM mode: the rejected reply keeps its reason, ops come from the code" "$PY" - <<'EOF'
import json, sqlite3
db = sqlite3.connect("l/synth.db")
rows = {s: (st, f) for s, st, f in db.execute("SELECT seed, status, filter FROM candidates")}
assert rows[0] == ("rejected", "static"), rows
assert rows[1][0] == "accepted" and rows[2] == ("rejected", "duplicate"), rows
row = json.loads(open("l/tasks.jsonl").readline())
assert row["ops"] == ["nn.Linear", "F.gelu"], row["ops"]
assert row["data_source"] == "torch#2" and "F.gelu(self.linear(x))" in row["code"]
EOF
stop_server

# -- the HTML report in headless Chromium
"$PY" "$CA_REPO/tests/it/synth_html.py" a/report.html "$acc" "$PWD/a.png" >"$OUT" 2>"$ERR"
case $? in
0) ok "$(tail -1 "$OUT" | sed 's/^ok //')" ;;
77) skip chromium "the synth HTML report in Chromium" "$(tail -1 "$OUT")" ;;
*) bad "the synth HTML report in Chromium" "$(cat "$OUT")" ;;
esac
finish
