#!/usr/bin/env bash
# Black-box tests of `cuda-agent workspace`: layout, modes, manifest, the
# model_new.py skeleton, tamper detection, refusal paths, no leftovers.
. "${CA_REPO:?run through tests/run.sh (make test), which sets CA_REPO}/tests/it/lib.sh"
EX=$CA_REPO/examples/tasks
W=$PWD/ws

mode() { stat -c %a "$1"; }
no_leftovers() { ! ls -d "$PWD"/*.tmp-* >/dev/null 2>&1; }

for task in "$EX"/*.py; do
    name=$(basename "$task" .py)
    run "$CA" workspace create --task "$task" "$W-$name"
    expect "create $name" 0 "created workspace"
done

run "$CA" workspace create --task "$EX/linear_gelu.py" --json "$W"
expect "create --json" 0 '"writable"'
assert "json output parses" python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["task"]["id"].startswith("linear_gelu-")' "$OUT"
for f in SKILL.md model.py binding.cpp binding_registry.h MANIFEST.json; do
    assert "$f is read-only (0444)" [ "$(mode "$W/$f")" = 444 ]
done
for f in compile verify profile; do
    assert "$f is read-only and executable (0555)" [ "$(mode "$W/$f")" = 555 ]
done
assert "model_new.py is writable" [ "$(mode "$W/model_new.py")" = 644 ]
assert "kernels/ exists and is empty" [ -d "$W/kernels" ] && [ -z "$(ls -A "$W/kernels")" ]
assert "model.py is the task" cmp -s "$EX/linear_gelu.py" "$W/model.py"
sig=$(grep -A3 'def __init__' "$EX/linear_gelu.py" | head -1 | sed -E 's/.*def __init__\((.*)\):.*/\1/')
assert "model_new.py has Model's constructor signature ($sig)" grep -qF "def __init__($sig):" "$W/model_new.py"
assert "model_new.py has no template tokens left" bash -c "! grep -q '{{' '$W/model_new.py'"
assert "manifest lists writable patterns" python3 -c '
import json,sys
m=json.load(open(sys.argv[1]))
assert m["format"]==1
assert set(m["writable"])=={"model_new.py","kernels/*.cu","kernels/*_binding.cpp"}
assert "model.py" in m["read_only"] and "SKILL.md" in m["read_only"]' "$W/MANIFEST.json"

run "$W/compile";  expect "compile without evaluator" 69 "" "no evaluator is reachable"
run "$W/verify";   expect "verify without evaluator" 69 "" "no evaluator is reachable"
run "$W/profile";  expect "profile without evaluator" 69 "" "no evaluator is reachable"

run "$CA" workspace check "$W";  expect "fresh workspace is intact" 0 "intact"
echo '__global__ void k() {}' >"$W/kernels/k.cu"
echo 'x' >"$W/kernels/notes.txt"
run "$CA" workspace check --json "$W"
expect "check lists writable and ignored files" 0 '"kernels/k.cu"'
assert "notes.txt is ignored" grep -qF '"kernels/notes.txt"' "$OUT"
chmod u+w "$W/model.py"; echo "# tampered" >>"$W/model.py"
run "$CA" workspace check "$W";  expect "tampered model.py is detected" 3 "TAMPERED"
assert "problem names the file" grep -qF "model.py was modified" "$OUT"
rm -f "$W/SKILL.md"
run "$CA" workspace check "$W";  expect "missing SKILL.md is detected" 3 "SKILL.md is missing"
run "$CA" workspace check "$PWD"; expect "check of a non-workspace" 3 "" "not a cuda-agent workspace"

run "$CA" workspace create --task "$EX/linear_gelu.py" "$W"
expect "existing dir refused" 1 "" "already exists"
mkdir -p "$PWD/precious"; echo keep >"$PWD/precious/file"
run "$CA" workspace create --force --task "$EX/linear_gelu.py" "$PWD/precious"
expect "--force refuses a non-workspace" 1 "" "not a cuda-agent workspace"
assert "non-workspace left intact" grep -q keep "$PWD/precious/file"
run "$CA" workspace create --force --task "$EX/softmax_last_dim.py" "$W"
expect "--force replaces a workspace" 0 "created workspace"
assert "replaced workspace has the new task" cmp -s "$EX/softmax_last_dim.py" "$W/model.py"
run "$CA" workspace check "$W";  expect "replaced workspace is intact" 0 "intact"

run "$CA" workspace create --task "$PWD/missing.py" "$PWD/ws-missing"
expect "missing task file" 4 "" "missing.py"
assert "no workspace left for a missing task" [ ! -e "$PWD/ws-missing" ]
for bad in "$CA_REPO"/tests/it/data/tasks/bad/*.py; do
    [ -f "$bad" ] || continue
    name=$(basename "$bad" .py)
    run "$CA" workspace create --task "$bad" "$PWD/ws-bad-$name"
    expect "bad task $name rejected" 3 "" "$(cat "${bad%.py}.expect")"
    assert "no workspace left for $name" [ ! -e "$PWD/ws-bad-$name" ]
done
assert "no temporary directories left" no_leftovers
run "$CA" workspace create --task "$EX/linear_gelu.py" "$PWD/no/such/parent/ws"
expect "missing parent directory" 4 "" "no/such/parent"
finish
