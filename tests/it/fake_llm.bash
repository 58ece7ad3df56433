# tests/it/fake_llm.bash - helpers for tests that drive `cuda-agent run` against the scripted
# server tests/it/fake_llm.py (sourced after lib.sh; not a test itself).
#   serve NAME         start the server on script $PWD/NAME.json; sets URL and LOG
#   stop_server        stop it
#   py FILE EXPR       print EXPR over L (FILE's JSON lines) or J (FILE as one JSON document)
#   reqs               how many requests the server got
FAKE=$CA_REPO/tests/it/fake_llm.py
SRV_PID=
stop_server() { [ -n "$SRV_PID" ] && kill "$SRV_PID" 2>/dev/null && wait "$SRV_PID" 2>/dev/null; SRV_PID=; }
trap 'stop_server; rm -f "$OUT" "$ERR"' EXIT
serve() {
    stop_server
    LOG=$PWD/$1.log
    rm -f "$PWD/$1.port"
    python3 "$FAKE" "$PWD/$1.json" "$PWD/$1.port" "$LOG" &
    SRV_PID=$!
    for _ in $(seq 100); do [ -s "$PWD/$1.port" ] && break; sleep 0.05; done
    URL=http://127.0.0.1:$(cat "$PWD/$1.port")/v1
}
py() { python3 -c '
import json, sys
t = open(sys.argv[1]).read()
try: J = json.loads(t)
except ValueError: J = None
try: L = [json.loads(x) for x in t.splitlines() if x.strip()]
except ValueError: L = []
print(eval(sys.argv[2]))' "$1" "$2"; }
reqs() { wc -l <"$LOG"; }
