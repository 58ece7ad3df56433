#!/usr/bin/env bash
# Black-box tests of `cuda-agent data`: listing sources, showing a task,
# importing to JSONL (atomic, nothing left on failure), selectors.
. "${CA_REPO:?run through tests/run.sh (make test), which sets CA_REPO}/tests/it/lib.sh"
EX=$CA_REPO/examples/tasks
D=$CA_REPO/tests/it/data/tasks

run "$CA" data list "$EX";  expect "list the examples" 0 "tasks"
assert "every example listed" [ "$(grep -c -- '-[0-9a-f]\{12\} ' "$OUT")" -eq "$(ls "$EX"/*.py | wc -l)" ]
run "$CA" data list --json "$EX/softmax_last_dim.py"
expect "list --json one file" 0 '"id"'
assert "json has ops" python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["tasks"][0]["ops"]' "$OUT"
run "$CA" data list "$D/tree";  expect "list a KernelBench tree" 0 "l1_"
assert "tree levels" grep -q ' L2 ' "$OUT"
run "$CA" data list "$D/ops_small.jsonl";  expect "list a JSONL" 0 "duplicate"
run "$CA" data list "$CA_REPO/README.md";  expect "unknown source kind" 2 "" "README.md"
run "$CA" data list "$PWD/nothing.jsonl";  expect "missing source" 4 "" "nothing.jsonl"

for bad in "$D"/bad_jsonl/*.jsonl; do
    [ -f "$bad" ] || continue
    name=$(basename "$bad" .jsonl)
    run "$CA" data list "$bad"
    expect "bad jsonl $name" 3 "" "$(cat "${bad%.jsonl}.expect")"
done

run "$CA" data show "$EX/softmax_last_dim.py";  expect "show a task" 0 "class Model"
run "$CA" data show --json "$EX/softmax_last_dim.py";  expect "show --json" 0 '"code"'
id=$("$CA" data list --json "$D/ops_small.jsonl" | python3 -c 'import json,sys; print(json.load(sys.stdin)["tasks"][0]["id"])')
run "$CA" data show "$D/ops_small.jsonl:$id";  expect "show by id selector" 0 "$id"
run "$CA" data show "$D/ops_small.jsonl:${id:0:6}"
[ "$RC" -eq 0 ] || [ "$RC" -eq 4 ]; assert "id prefix resolves or is reported ambiguous" [ $? -eq 0 ]
run "$CA" data show "$D/ops_small.jsonl:no-such-task";  expect "unknown selector" 4 "" "no-such-task"
run "$CA" data show "$D/ops_small.jsonl";  expect "several tasks need a selector" 4 "" ":"
run "$CA" workspace create --task "$D/ops_small.jsonl:$id" "$PWD/ws-jsonl"
expect "workspace from a JSONL row" 0 "$id"

run "$CA" data import -o "$PWD/out.jsonl" "$D/ops_small.jsonl" "$EX"
expect "import JSONL + tree" 0 "wrote"
n=$(wc -l <"$PWD/out.jsonl")
run "$CA" data list "$PWD/out.jsonl";  expect "re-list the import" 0 "tasks"
assert "imported rows keep their ids" python3 -c '
import json,sys
rows=[json.loads(l) for l in open(sys.argv[1])]
assert all(r["id"] and r["code"] and isinstance(r["ops"],list) for r in rows), rows[0]
' "$PWD/out.jsonl"
assert "import has one row per task ($n)" [ "$n" -gt 7 ]
first_bad=$(ls "$D"/bad_jsonl/*.jsonl | head -1)
run "$CA" data import -o "$PWD/fail.jsonl" "$D/ops_small.jsonl" "$first_bad"
expect "import with a bad source fails, naming the file and line" 3 "" "$first_bad:1: "
assert "failed import leaves no output" [ ! -e "$PWD/fail.jsonl" ]
assert "failed import leaves no temporary" bash -c "! ls '$PWD'/.fail.jsonl* '$PWD'/fail.jsonl.* 2>/dev/null | grep -q ."
run "$CA" data import -o "$PWD/x.jsonl" "$PWD/a.parquet" "$D/ops_small.jsonl"
expect "parquet mixed with others" 2 "" "on its own"

if python3 -c 'import pyarrow' 2>/dev/null; then
    python3 - "$D/ops_small.jsonl" "$PWD/ds.parquet" <<'PY'
import ast, json, sys, pyarrow as pa, pyarrow.parquet as pq
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def ops(r):  # the published set has a list column; fixture rows may hold a string
    o = r.get("ops", [])
    return ast.literal_eval(o) if isinstance(o, str) else o
pq.write_table(pa.table({
    "code": [r["code"] for r in rows],
    "ops": [ops(r) for r in rows],
    "data_source": [r.get("data_source", "torch#1") for r in rows],
}), sys.argv[2])
PY
    run "$CA" data import -o "$PWD/ds.jsonl" "$PWD/ds.parquet"
    expect "parquet import" 0 "wrote"
    assert "parquet import drops the duplicate" grep -q "duplicate" "$OUT"
    printf 'not a parquet file' >"$PWD/broken.parquet"
    run "$CA" data import -o "$PWD/broken.jsonl" "$PWD/broken.parquet"
    [ "$RC" -ne 0 ]; assert "broken parquet fails" [ $? -eq 0 ]
    assert "broken parquet leaves no output" [ ! -e "$PWD/broken.jsonl" ]
else
    echo "note: pyarrow missing; parquet import cases not run (scripts/setup.sh installs it)"
fi
finish
