#!/usr/bin/env bash
# The job bus (issue 20) against real redis-server processes this script starts on loopback
# ports in its scratch directory, with real worker processes killed and stopped by signals.
# Workers use the fake evaluation backend (--fake-eval, a TEST DOUBLE: a sleep and a made-up
# report; everything else of a job is real) except the CPU-mode case at the end, which runs the
# real evaluator (skipped without PyTorch and nvcc).
#
# Cases: unreachable Redis and bad URLs; jobs through two workers, one result each, a duplicate
# answered from the stored result; a worker killed mid-job (its entry taken over, one result, a
# strike); a stalled worker that finishes after the takeover (its result dropped); Redis killed
# and restarted under load with AOF (nothing lost); a garbage-returning worker and a hung one
# quarantined and reported; back-pressure ("busy" after --queue-wait); a tampered artifact and
# a forged entry refused; AUTH with an ACL user (TLS: tests/it/bus_tls.sh); a 64-consumer load run; `bench run --redis`
# (solutions, workspaces, replays; Redis unreachable, then resumed); dead consumers forgotten
# (and those that own entries or whose worker lives kept) and stale heartbeats pruned; agent
# episodes on the bus (`tool`, `run`, `serve` and `bench run --model` with --redis, each also
# with Redis unreachable; a scripted model server, tests/it/fake_llm.py); CPU-mode end to end,
# bench and an episode's ./verify included.
. "${CA_REPO:?run through tests/run.sh (make test), which sets CA_REPO}/tests/it/lib.sh"
. "$CA_REPO/tests/it/bus_fixture.bash"

# start_redis DIR PORT [extra args]: a redis-server with AOF (fsync always) in DIR; sets REDIS_PID.
start_redis() {
    local dir=$1 port=$2
    shift 2
    mkdir -p "$dir"
    redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save '' --appendonly yes \
        --appendfsync always --daemonize no --logfile "$dir/redis.log" "$@" &
    REDIS_PID=$!
    for _ in $(seq 100); do
        redis-cli -p "$port" ${REDISCLI_AUTH:+--no-auth-warning} ping 2>/dev/null | grep -q PONG && return 0
        grep -q "Ready to accept" "$dir/redis.log" 2>/dev/null && return 0
        sleep 0.05
    done
    echo "redis-server did not start on $port"
    cat "$dir/redis.log"
    exit 1
}

PORT=$(free_port)
start_redis "$PWD/redis" "$PORT"
URL=redis://127.0.0.1:$PORT
R() { redis-cli -p "$PORT" "$@"; }


# worker NAME LOG ARGS...: a worker in the background; its pid in WPID.
worker() {
    local name=$1 log=$2
    shift 2
    "$CA" --log-level info worker --redis "$URL" --name "$name" "$@" 2>"$log" &
    WPID=$!
    pids+=("$WPID")
}
results() { R --scan --pattern 'ca:result:*' | wc -l; }
wait_for() { # SECONDS CMD...: poll until CMD succeeds
    local n=$(($1 * 20))
    shift
    for _ in $(seq "$n"); do "$@" && return 0; sleep 0.05; done
    return 1
}
pending_for() { R XPENDING ca:jobs ca-workers | grep -q "^$1/"; }
# The exit status a fake report implies: 0 for a reward >= 1, 1 for -1.
fake_rc() { [ "$(jfield "$1" reward.reward)" -ge 1 ] && echo 0 || echo 1; }
# The verdict of a real report as far as it does not depend on timing: "ok stage class", the class
# -1 for a wrong kernel, "correct" for a correct one whose reward is the tier its own measured
# speedups give (a CPU-mode speedup is noise on this machine, so two runs may fall in other tiers),
# and "tier?N" for a reward its own timings do not explain.
verdict_of() { "$PY" -c 'import json, sys
d = json.loads(sys.stdin.read())
r = d.get("reward") or {}
n = r.get("reward")
if n is None or n == -1:
    c = n
else:
    fe, fc = r.get("faster_than_eager"), r.get("faster_than_compile")
    c = "correct" if n == 1 + bool(fe) + bool(fe and fc) or (n == 1 and r.get("needs_review")) else "tier?%s" % n
print(d.get("ok"), d.get("stage"), c)'; }

# -- unreachable Redis, bad URLs, no password in messages
DEAD=$(free_port)
run "$CA" eval --redis "redis://127.0.0.1:$DEAD" "$PWD/base"
expect "eval: unreachable Redis is exit 69, naming the URL and what to do" 69 "" \
    "cannot reach Redis at redis://127.0.0.1:$DEAD/0 (Connection refused); start redis-server"
run "$CA" worker --redis "redis://127.0.0.1:$DEAD" --fake-eval 10
expect "worker: unreachable Redis is exit 69" 69 "" "cannot reach Redis at redis://127.0.0.1:$DEAD"
run "$CA" eval --redis "redis://bob:sekrit@127.0.0.1:$DEAD" "$PWD/base"
assert "the password never appears in a message" \
    bash -c "! grep -q sekrit '$ERR' && grep -qF 'redis://bob:***@127.0.0.1' '$ERR'"
run "$CA" eval --redis "http://x" "$PWD/base"
expect "a URL of another scheme is a usage error" 2 "" "redis://"
run "$CA" worker --redis "$URL" --fake-eval 10:sometimes
expect "a bad --fake-eval spec is a usage error" 2 "" "--fake-eval"
run "$CA" worker --fake-eval 10
expect "worker needs --redis" 2 "" "--redis"
run "$CA" eval --redis "$URL" --server /nowhere "$PWD/base"
expect "--server and --redis exclude each other" 2

# -- queue time by Redis's one clock (the entry id's time against TIME when a worker takes it),
# whatever the client's and the worker's clocks say: a job queued with no worker running waits
# until one starts
mkws qt
"$CA" eval --redis "$URL" --wait 60 --json "$PWD/qt" >"$PWD/qt.json" 2>"$PWD/qt.err" &
qpid=$!
assert "the job is queued while no worker runs" wait_for 10 bash -c "[ \"\$(redis-cli -p $PORT XLEN ca:jobs)\" = 1 ]"
sleep 2
worker qw "$PWD/qw.log" --fake-eval 10
wait "$qpid"
assert "queue_ms counts that wait (2 s or more, less than 60)" "$PY" -c '
import json, sys
q = json.load(open(sys.argv[1]))["bus"]["queue_ms"]
assert 2000 <= q < 60000, q' "$PWD/qt.json"
kill -TERM "$WPID"
wait "$WPID"
R DEL "ca:result:$(jfield "$PWD/qt.json" bus.job)" >/dev/null   # the counts below start at 0

# -- jobs through two workers: each its own result, exactly one per job
worker w1 "$PWD/w1.log" --fake-eval 50 --jobs 4
W1=$WPID
worker w2 "$PWD/w2.log" --fake-eval 50 --jobs 4
W2=$WPID
cpids=()
for i in $(seq 12); do
    mkws "j$i"
    "$CA" eval --redis "$URL" --wait 60 --json "$PWD/j$i" >"$PWD/j$i.json" 2>"$PWD/j$i.err" &
    cpids+=($!)
done
bad_jobs=0
for i in $(seq 12); do
    wait "${cpids[$((i - 1))]}"
    rc=$?
    [ "$rc" = "$(fake_rc "$PWD/j$i.json")" ] || { bad_jobs=$((bad_jobs + 1)); echo "j$i: rc $rc"; cat "$PWD/j$i.err"; }
    [ "$(jfield "$PWD/j$i.json" job)" = "$(jfield "$PWD/j$i.json" bus.job)" ] ||
        { bad_jobs=$((bad_jobs + 1)); echo "j$i: the report is another job's"; }
done
assert "12 jobs through two workers: each its own report and exit status" [ "$bad_jobs" = 0 ]
assert "exactly 12 results, nothing queued or pending" \
    [ "$(results):$(R XLEN ca:jobs):$(R XPENDING ca:jobs ca-workers | head -1)" = "12:0:0" ]
assert "both workers took jobs" bash -c "grep -q '\"worker\": \"w1\"' '$PWD'/j*.json && grep -q '\"worker\": \"w2\"' '$PWD'/j*.json"
run "$CA" eval --redis "$URL" --json "$PWD/j1"
assert "a job submitted again is answered from its stored result (same worker, same queue time)" \
    [ "$(jfield "$OUT" bus.worker):$(jfield "$OUT" bus.queue_ms)" = "$(jfield "$PWD/j1.json" bus.worker):$(jfield "$PWD/j1.json" bus.queue_ms)" ]
assert "... and says so (bus.stored), where the first submission did not" \
    [ "$(jfield "$OUT" bus.stored):$(jfield "$PWD/j1.json" bus.stored)" = True:False ]
assert "still 12 results" [ "$(results)" = 12 ]
kill -TERM "$W1" "$W2"
wait "$W1"
rc1=$?
wait "$W2"
assert "workers stop on SIGTERM with status 0" [ "$rc1:$?" = "0:0" ]

# -- a worker killed mid-job: its entry is taken over, one result, a strike against it
mkws kill1
worker a "$PWD/a.log" --fake-eval 5000
WA=$WPID
"$CA" eval --redis "$URL" --wait 60 --json "$PWD/kill1" >"$PWD/kill1.json" 2>"$PWD/kill1.err" &
C=$!
assert "worker a holds the job" wait_for 10 pending_for a
kill -9 "$WA"
worker b "$PWD/b.log" --fake-eval 50 --reclaim-ms 1000
WB=$WPID
wait "$C"
assert "the client got its result ($?)" [ -s "$PWD/kill1.json" ]
assert "from worker b, on the second delivery" \
    [ "$(jfield "$PWD/kill1.json" bus.worker):$(R GET "ca:result:$(jfield "$PWD/kill1.json" bus.job)" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["deliveries"])')" = "b:2" ]
assert "a strike against the dead worker a" [ "$(R HGET ca:strikes a)" = 1 ]
assert "13 results, nothing pending" \
    [ "$(results):$(R XLEN ca:jobs):$(R XPENDING ca:jobs ca-workers | head -1)" = "13:0:0" ]
assert "b logged the takeover" grep -q "took over entry .* from a/" "$PWD/b.log"
kill -TERM "$WB"
wait "$WB"

# -- a stalled worker finishes after the takeover: one result, the late one dropped
mkws stall1
worker c "$PWD/c.log" --fake-eval 2500 --reclaim-ms 800
WC=$WPID
"$CA" eval --redis "$URL" --wait 60 --json "$PWD/stall1" >"$PWD/stall1.json" 2>/dev/null &
C=$!
assert "worker c holds the job" wait_for 10 pending_for c
kill -STOP "$WC"
worker d "$PWD/d.log" --fake-eval 50 --reclaim-ms 800
WD=$WPID
wait "$C"
JOB=$(jfield "$PWD/stall1.json" bus.job)
assert "the job's result came from d" [ "$(jfield "$PWD/stall1.json" bus.worker)" = d ]
kill -CONT "$WC"
assert "c finished later and dropped its own result" \
    wait_for 15 grep -q "already had a result .* ours is dropped" "$PWD/c.log"
assert "the recorded result is still d's, and the only one" \
    [ "$(R GET "ca:result:$JOB" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["worker"])'):$(results)" = "d:14" ]
kill -TERM "$WC" "$WD"
wait "$WC" "$WD"

# -- Redis killed (SIGKILL) and restarted under load, AOF on: no job or result lost
worker e "$PWD/e.log" --fake-eval 300 --jobs 2
WE=$WPID
cpids=()
for i in $(seq 8); do
    mkws "r$i"
    "$CA" eval --redis "$URL" --wait 90 --json "$PWD/r$i" >"$PWD/r$i.json" 2>"$PWD/r$i.err" &
    cpids+=($!)
done
sleep 0.6
kill -9 "$REDIS_PID"
wait "$REDIS_PID" 2>/dev/null
sleep 1
start_redis "$PWD/redis" "$PORT"
lost=0
for i in $(seq 8); do
    wait "${cpids[$((i - 1))]}"
    rc=$?
    [ -s "$PWD/r$i.json" ] && [ "$rc" = "$(fake_rc "$PWD/r$i.json")" ] ||
        { lost=$((lost + 1)); echo "r$i: rc $rc: $(cat "$PWD/r$i.err")"; }
done
assert "all 8 clients got their results across the restart" [ "$lost" = 0 ]
assert "the 14 results from before the restart and the 8 new ones are all there" [ "$(results)" = 22 ]
assert "nothing queued or pending" [ "$(R XLEN ca:jobs):$(R XPENDING ca:jobs ca-workers | head -1)" = "0:0" ]
kill -TERM "$WE"
wait "$WE"

# -- a worker that returns garbage is quarantined, reported, and its job done elsewhere
mkws g1
worker g "$PWD/g.log" --fake-eval 20:garbage --max-strikes 2 --reclaim-ms 500
WG=$WPID
"$CA" eval --redis "$URL" --wait 60 --json "$PWD/g1" >"$PWD/g1.json" 2>/dev/null &
C=$!
wait "$WG"
grc=$?
assert "the garbage worker quarantined itself and exited 75 ($grc)" \
    bash -c "[ $grc = 75 ] && grep -q 'quarantined' '$PWD/g.log'"
"$CA" --log-level info worker --redis "$URL" --name g --fake-eval 20 2>"$PWD/g2.log"
grc=$?
assert "a quarantined worker refuses to start again (75), naming --release ($grc)" \
    bash -c "[ $grc = 75 ] && grep -q -- '--release g' '$PWD/g2.log'"
run "$CA" worker --redis "$URL" --status
assert "status reports the quarantine with its reason" \
    bash -c "'$PY' -c 'import json,sys; d=json.load(open(sys.argv[1])); q=d[\"quarantine\"][\"g\"]; assert \"malformed report\" in q[\"reason\"], q; assert d[\"strikes\"][\"g\"] >= 2' '$OUT'"
worker h "$PWD/h.log" --fake-eval 20 --reclaim-ms 500 --max-deliveries 5
WH=$WPID
wait "$C"
assert "the job was done by a healthy worker" [ "$(jfield "$PWD/g1.json" bus.worker)" = h ]
run "$CA" worker --redis "$URL" --release g
expect "--release lifts the quarantine" 0 "released g"
run "$CA" worker --redis "$URL" --status
assert "status no longer lists g" bash -c "'$PY' -c 'import json,sys; d=json.load(open(sys.argv[1])); assert \"g\" not in d[\"quarantine\"] and \"g\" not in d[\"strikes\"]' '$OUT'"
# Values someone else wrote into the bus's hashes are shown as they are, never read as 0.
R HSET ca:strikes junk 12x >/dev/null
R HSET ca:config max_queue lots >/dev/null
run "$CA" worker --redis "$URL" --status
assert "status shows a value that is not an integer as it is" bash -c "'$PY' -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d[\"strikes\"][\"junk\"] == \"12x\" and d[\"max_queue\"] == \"lots\", d' '$OUT'"
R HDEL ca:strikes junk >/dev/null
R HDEL ca:config max_queue >/dev/null
run "$CA" worker --redis "$URL" --status
assert "... and an unset max_queue as the default" bash -c "'$PY' -c 'import json,sys; d=json.load(open(sys.argv[1])); assert isinstance(d[\"max_queue\"], int) and d[\"max_queue\"] > 0, d' '$OUT'"

# -- a hung worker: its lease lapses at the job deadline, the job is taken over, it is struck
# and (the striker's --max-strikes 1) quarantined
kill -TERM "$WH"
wait "$WH"
mkws k1
worker k "$PWD/k.log" --fake-eval 10:hang --job-deadline 1 --reclaim-ms 600
WK=$WPID
"$CA" eval --redis "$URL" --wait 60 --json "$PWD/k1" >"$PWD/k1.json" 2>/dev/null &
C=$!
assert "worker k holds the job" wait_for 10 pending_for k
worker l "$PWD/l.log" --fake-eval 20 --reclaim-ms 600 --max-strikes 1
WL=$WPID
wait "$C"
assert "the hung job's result came from l" [ "$(jfield "$PWD/k1.json" bus.worker)" = l ]
wait "$WK"
assert "the hung worker noticed its quarantine and exited 75" [ "$?" = 75 ]
assert "quarantine names k: abandoned" bash -c "redis-cli -p $PORT HGET ca:quarantine k | grep -q abandoned"
run "$CA" worker --redis "$URL" --release k
kill -TERM "$WL"
wait "$WL"

# -- back-pressure: a bounded queue answers "busy" after --queue-wait
worker p "$PWD/p.log" --fake-eval 10 --max-queue 2
WP=$WPID
assert "the worker published the bound" wait_for 5 bash -c "[ \"\$(redis-cli -p $PORT HGET ca:config max_queue)\" = 2 ]"
kill -TERM "$WP"
wait "$WP"
mkws q1 && mkws q2 && mkws q3
"$CA" eval --redis "$URL" --wait 60 --json "$PWD/q1" >"$PWD/q1.json" 2>/dev/null &
Q1=$!
"$CA" eval --redis "$URL" --wait 60 --json "$PWD/q2" >"$PWD/q2.json" 2>/dev/null &
Q2=$!
wait_for 10 bash -c "[ \"\$(redis-cli -p $PORT XLEN ca:jobs)\" = 2 ]"
t0=$SECONDS
run "$CA" eval --redis "$URL" --queue-wait 1 "$PWD/q3"
expect "a third job beyond the bound: busy, exit 75" 75 "" "busy: the job queue"
# the default wait is 60 s: 15 tells the two apart with room for a loaded sanitizer run
assert "after --queue-wait, not the default 60 s" [ $((SECONDS - t0)) -le 15 ]
worker p2 "$PWD/p2.log" --fake-eval 10
WP=$WPID
wait "$Q1" "$Q2"
run "$CA" eval --redis "$URL" --json "$PWD/q3"
assert "once workers drain the queue, the job goes through" [ -n "$(jfield "$OUT" bus.worker)" ]
R HDEL ca:config max_queue >/dev/null
kill -TERM "$WP"
wait "$WP"

# -- artifacts are trusted by hash only: a tampered blob and a forged entry are refused
mkws t1
"$CA" eval --redis "$URL" --wait 60 --json "$PWD/t1" >"$PWD/t1.json" 2>"$PWD/t1.err" &
C=$!
wait_for 10 bash -c "[ \"\$(redis-cli -p $PORT XLEN ca:jobs)\" = 1 ]"
SHA=$(R XRANGE ca:jobs - + | "$PY" -c '
import json, sys
lines = sys.stdin.read().split("\n")
doc = json.loads(lines[lines.index("job") + 1])
f = [f for f in doc["files"] if f["path"] == "model_new.py"][0]
print(f["sha256"])')
SIZE=$(R STRLEN "ca:blob:$SHA")
R SET "ca:blob:$SHA" "$(head -c "$SIZE" /dev/zero | tr '\0' x)" >/dev/null
R XADD ca:jobs '*' id 0000000000000000000000000000000000000000000000000000000000000000 job '{"v":1}' >/dev/null
worker t "$PWD/t.log" --fake-eval 10
WT=$WPID
wait "$C"
trc=$?
assert "the tampered job failed: exit 3 (invalid input)" [ "$trc" = 3 ]
assert "naming the digest" grep -q "SHA-256 is .*, not $SHA as the job says: refused" "$PWD/t1.err"
assert "the forged entry (its id is not its digest) was dropped without a result" \
    wait_for 5 bash -c "[ \"\$(redis-cli -p $PORT XLEN ca:jobs)\" = 0 ] && [ -z \"\$(redis-cli -p $PORT GET ca:result:0000000000000000000000000000000000000000000000000000000000000000)\" ]"
kill -TERM "$WT"
wait "$WT"

# -- AUTH with an ACL user
PORT2=$(free_port)
mkdir -p "$PWD/redis2"
redis-server --port "$PORT2" --bind 127.0.0.1 --dir "$PWD/redis2" --save '' --daemonize no \
    --logfile "$PWD/redis2/redis.log" --user default off --user alice on '>pw2' '~*' '&*' '+@all' &
REDIS2_PID=$!
wait_for 5 grep -qs "Ready to accept" "$PWD/redis2/redis.log"
mkws a1
"$CA" worker --redis "redis://alice:pw2@127.0.0.1:$PORT2" --fake-eval 10 2>"$PWD/acl.log" &
WACL=$!
pids+=("$WACL")
run "$CA" eval --redis "redis://alice@127.0.0.1:$PORT2" --wait 30 --json "$PWD/a1"
expect "without the password: refused at once, exit 69, saying what to do" 69 "" \
    "refused us (NOAUTH"
CUDA_AGENT_REDIS_PASSWORD=pw2 run "$CA" eval --redis "redis://alice@127.0.0.1:$PORT2" --wait 30 --json "$PWD/a1"
assert "with the ACL user's password (from the environment): evaluated" [ -n "$(jfield "$OUT" bus.worker)" ]
run "$CA" eval --redis "redis://alice:wrong@127.0.0.1:$PORT2" "$PWD/a1"
expect "a wrong password: exit 69, saying so, without echoing it" 69 "" "refused the credentials"
assert "the wrong password is not in the message" bash -c "! grep -q wrong '$ERR'"
kill -TERM "$WACL"
wait "$WACL"

# -- load: 64 consumers (4 workers x 16 slots), 128 jobs from 32 clients at once
for n in 1 2 3 4; do worker "load$n" "$PWD/load$n.log" --fake-eval 20 --jobs 16; done
for i in $(seq 128); do mkws "L$i"; done
t0=$(date +%s.%N)
cpids=()
for i in $(seq 128); do
    "$CA" eval --redis "$URL" --wait 120 --json "$PWD/L$i" >"$PWD/L$i.json" 2>/dev/null &
    cpids+=($!)
    if [ $((i % 32)) = 0 ]; then wait "${cpids[@]}"; cpids=(); fi
done
dt=$("$PY" -c "import time,sys; print(round(time.time() - float(sys.argv[1]), 1))" "$t0")
got=0
for i in $(seq 128); do [ -n "$(jfield "$PWD/L$i.json" bus.worker)" ] && got=$((got + 1)); done
assert "load: 128 of 128 jobs through 64 consumers in ${dt} s" [ "$got" = 128 ]
assert "load: each job one result, nothing left over" \
    [ "$(R XLEN ca:jobs):$(R XPENDING ca:jobs ca-workers | head -1)" = "0:0" ]
for n in "${pids[@]}"; do kill -TERM "$n" 2>/dev/null; done
wait "${pids[@]}" 2>/dev/null
pids=()

# -- --tasks: a worker runs only the reference code it holds (a job's task is trusted code)
run "$CA" worker --redis "$URL" --fake-eval 10 --tasks "$PWD/no-such-tasks"
expect "worker --tasks with a missing source fails before serving" 4 "" "no-such-tasks"
worker wt "$PWD/wt.log" --fake-eval 20 --tasks "$CA_REPO/examples/tasks"
WTK=$WPID
mkws tk1
run "$CA" eval --redis "$URL" --wait 60 --json "$PWD/tk1"
expect "a job whose task the worker does not hold fails, naming --tasks" 4 "" \
    "is not one of worker wt's tasks (--tasks)"
assert "the worker says at start-up that it evaluates --tasks' tasks only" \
    grep -q "evaluating the [0-9]* task(s) of --tasks only" "$PWD/wt.log"
kill -TERM "$WTK"
wait "$WTK"
worker wt2 "$PWD/wt2.log" --fake-eval 20 --tasks "$FIX/task.py"
WTK2=$WPID
mkws tk2
run "$CA" eval --redis "$URL" --wait 60 --json "$PWD/tk2"
assert "a job whose task is one of --tasks' is evaluated" \
    [ "$(jfield "$OUT" bus.worker)" = wt2 ]
assert "a worker without --tasks warns that any task's code runs as trusted reference code" \
    grep -q "evaluating any task a job brings" "$PWD/w1.log"
kill -TERM "$WTK2"
wait "$WTK2"

# -- files the evaluator refuses: the same verdict through the bus as locally, nothing queued
mkws big
head -c 2000000 /dev/zero | tr '\0' '/' >"$PWD/big/kernels/big.cu" # past the 1 MiB a file may have
run "$CA" eval --device cpu --json "$PWD/big"
expect "locally, a source past its limit is the candidate's failure at the snapshot (exit 1)" 1
cp "$OUT" "$PWD/big-local.json"
n0=$(R XLEN ca:jobs):$(results)
run "$CA" eval --redis "$URL" --wait 20 --json "$PWD/big"
expect "through the bus: the same exit status" 1
assert "... the same stage, reward and message" [ \
    "$(jfield "$OUT" stage):$(jfield "$OUT" reward.reward):$(jfield "$OUT" message)" = \
    "$(jfield "$PWD/big-local.json" stage):$(jfield "$PWD/big-local.json" reward.reward):$(jfield "$PWD/big-local.json" message)" ]
assert "... a snapshot failure with reward -1, and nothing queued" \
    [ "$(jfield "$OUT" stage):$(jfield "$OUT" reward.reward):$(R XLEN ca:jobs):$(results)" = "snapshot:-1:$n0" ]

# -- bench run --redis: solutions, workspaces and replays evaluated by the bus's workers
BT=$CA_REPO/tests/bench/cpu
unset CUDA_AGENT_EVALUATOR
# breports DB: per attempt "key:stage:reward:job-matches-bus.job:reward-is-the-fake's-for-its-job"
breports() { "$PY" -c '
import json, sqlite3, sys
rows = sqlite3.connect(sys.argv[1]).execute(
    "select a.key, r.json from attempts a join reports r on r.attempt_id = a.id order by a.key")
for key, j in rows:
    d = json.loads(j)
    bus = d.get("bus") or {}
    job = d.get("job") or ""
    r = int(job[0], 16) % 4 if job else None
    fake = (-1 if r == 0 else r) if job else None
    rew = (d.get("reward") or {}).get("reward")
    print("%s:%s:%s:%s:%s" % (key, d.get("stage"), rew, job != "" and job == bus.get("job"), rew == fake))
' "$1"; }
run "$CA" bench run --redis "$URL" --evaluator /nowhere --db "$PWD/bx.sqlite" --solutions "$BT/solutions" "$BT/tasks"
expect "bench: --evaluator and --redis exclude each other" 2 "" "exclude each other"
run "$CA" bench run --redis "$URL" --device cpu --db "$PWD/bx.sqlite" --solutions "$BT/solutions" "$BT/tasks"
expect "bench: --device is the started evaluator's, refused with --redis" 2 "" "workers' own settings"
run "$CA" bench run --redis "http://x" --db "$PWD/bx.sqlite" --solutions "$BT/solutions" "$BT/tasks"
expect "bench: a bad --redis URL is a usage error" 2 "" "redis://"
assert "refused runs left no database" [ ! -e "$PWD/bx.sqlite" ]
# Redis unreachable: nothing evaluated, exit 75; resumed once it is back: only those run.
run "$CA" bench run --redis "redis://127.0.0.1:$DEAD" --db "$PWD/bs.sqlite" --solutions "$BT/solutions" --no-html --json "$BT/tasks"
expect "bench --redis, Redis unreachable: the attempts are not evaluated, exit 75" 75 \
    '"finished_now":1,' "could not be evaluated"
assert "... each saying why" [ "$(grep -c "cannot reach Redis at redis://127.0.0.1:$DEAD" "$OUT")" = 3 ]
worker bw1 "$PWD/bw1.log" --fake-eval 30 --jobs 2
WB1=$WPID
worker bw2 "$PWD/bw2.log" --fake-eval 30 --jobs 2
WB2=$WPID
n0=$(results)
run "$CA" bench run --redis "$URL" --db "$PWD/bs.sqlite" --solutions "$BT/solutions" --jobs 3 --no-html --json "$BT/tasks"
expect "bench --redis --solutions: resumed, the 3 solutions evaluated on the bus" 0 '"finished_now":3,'
assert "... the missing one kept from before" grep -q '"already_finished":1,' "$OUT"
assert "3 jobs queued, 3 results recorded" [ "$(($(results) - n0))" = 3 ]
breports "$PWD/bs.sqlite" >"$PWD/bs.txt"
assert "each attempt's report is its own job's result, from a worker ($(tr '\n' ' ' <"$PWD/bs.txt"))" \
    [ "$(grep -c ':True:True$' "$PWD/bs.txt"):$(grep -c '^missing:missing:-1:False' "$PWD/bs.txt")" = "3:1" ]
run "$CA" bench report --json "$PWD/bs.sqlite"
assert "the run's verdicts follow the workers' rewards" "$PY" -c '
import json, sqlite3, sys
J = json.load(open(sys.argv[1]))
rew = {n: r for n, r in sqlite3.connect(sys.argv[2]).execute(
    "select t.name, r.reward from tasks t join attempts a on a.task_id = t.id join reports r on r.attempt_id = a.id")}
for t in J["tasks"]:
    assert t["verdict"] == ("correct" if rew[t["name"]] >= 1 else "failed"), (t, rew)' "$OUT" "$PWD/bs.sqlite"
mkdir -p "$PWD/bws"
cp -a "$PWD/base" "$PWD/bws/l1_1_Swish" && cp -a "$PWD/base" "$PWD/bws/l2_1_SwishScaled"
echo "# other" >>"$PWD/bws/l2_1_SwishScaled/model_new.py"
run "$CA" bench run --redis "$URL" --db "$PWD/bw.sqlite" --workspaces "$PWD/bws" --no-html --json "$BT/tasks"
expect "bench --redis --workspaces" 0 '"finished_now":4,'
breports "$PWD/bw.sqlite" >"$PWD/bw.txt"
assert "two workspaces through the bus, each its own job ($(tr '\n' ' ' <"$PWD/bw.txt"))" \
    [ "$(grep -c '^workspace:.*:True:True$' "$PWD/bw.txt")" = 2 ]
RP=$PWD/replays
mkdir -p "$RP/a"
printf '{"type": "header", "format": 1, "task_ref": "x", "task": {"name": "l1_1_Swish"}, "model": "m", "base_url": "u", "options": {}, "tools": [], "messages": []}\n' >"$RP/a/trajectory.jsonl"
cp -a "$PWD/bws/l1_1_Swish" "$RP/a/best_workspace"
run "$CA" bench run --redis "$URL" --db "$PWD/br.sqlite" --replay "$RP" --tasks l1_1_Swish --no-html --json "$BT/tasks"
expect "bench --redis --replay" 0 '"finished_now":1,'
# bjob DB TASK: the job of TASK's evaluated attempt
bjob() { "$PY" -c '
import json, sqlite3, sys
for (j,) in sqlite3.connect(sys.argv[1]).execute(
        "select r.json from tasks t join attempts a on a.task_id = t.id join reports r on r.attempt_id = a.id where t.name = ?", (sys.argv[2],)):
    print((json.loads(j).get("bus") or {}).get("job"))' "$1" "$2"; }
assert "the replayed snapshot went through the bus: the same job as its workspace's" \
    [ "$(bjob "$PWD/br.sqlite" l1_1_Swish)" = "$(bjob "$PWD/bw.sqlite" l1_1_Swish)" ]
kill -TERM "$WB1" "$WB2"
wait "$WB1" "$WB2"

# -- dead consumers: a live worker deletes, a bounded number per pass, the consumers of workers
# gone (no heartbeat of their process, silent past --forget-ms) that own no pending entry
# (Redis 7.0 creates a consumer when it is first served an entry, so the doomed worker takes one.)
R XADD ca:jobs '*' id ghost job '{}' >/dev/null
R XREADGROUP GROUP ca-workers ghost/1.0 COUNT 1 STREAMS ca:jobs '>' >/dev/null
R XGROUP CREATECONSUMER ca:jobs ca-workers ghost/1.1 >/dev/null
R XGROUP CREATECONSUMER ca:jobs ca-workers returned >/dev/null
worker dx "$PWD/dx.log" --fake-eval 10 --jobs 1
WDX=$WPID
mkws dx1
run "$CA" eval --redis "$URL" --wait 30 --json "$PWD/dx1"
consumers() { R XINFO CONSUMERS ca:jobs ca-workers | awk 'prev == "name" {print} {prev = $0}' | sort; }
assert "the doomed worker's consumer is there" [ "$(consumers | grep -c "^dx/$WDX\.0$")" = 1 ]
kill -9 "$WDX"
wait "$WDX" 2>/dev/null
# Heartbeats in ca:workers: one an hour old and one that is not a heartbeat (pruned), beside
# those of every earlier worker of this script (pruned too, silent for longer than --forget-ms).
NOW=$(date +%s)
R HSET ca:workers gone1 "{\"pid\": 1, \"seen\": $((NOW - 3600))}" gone2 'not a heartbeat' >/dev/null
worker live "$PWD/live.log" --fake-eval 10 --jobs 2 --forget-ms 1500 --reclaim-ms 600000
WLV=$WPID
# An idle consumer of the live worker's own process (kept: its heartbeat is fresh) and one of
# an earlier process under the same name (forgotten).
R XGROUP CREATECONSUMER ca:jobs ca-workers "live/$WLV.7" >/dev/null
R XGROUP CREATECONSUMER ca:jobs ca-workers "live/1.0" >/dev/null
assert "the dead worker's consumer, the idle ghost and the earlier process's are forgotten" \
    wait_for 15 bash -c "! redis-cli -p $PORT XINFO CONSUMERS ca:jobs ca-workers | grep -q '^dx/\|^ghost/1.1\|^live/1\.0\$'"
consumers >"$PWD/cons.txt"
assert "kept: the ghost that owns an entry, returned, the live worker's idle consumer ($(tr '\n' ' ' <"$PWD/cons.txt"))" \
    [ "$(grep -c '^ghost/1.0$' "$PWD/cons.txt"):$(grep -c '^returned$' "$PWD/cons.txt"):$(grep -c "^live/$WLV\.7\$" "$PWD/cons.txt")" = "1:1:1" ]
assert "the ghost's entry is still pending" [ "$(R XPENDING ca:jobs ca-workers | head -1)" = 1 ]
assert "the sweep was logged" grep -q "forgot consumer dx/" "$PWD/live.log"
assert "ca:workers: an old heartbeat and one that is not one are pruned" \
    wait_for 15 bash -c "[ -z \"\$(redis-cli -p $PORT HGET ca:workers gone1)\$(redis-cli -p $PORT HGET ca:workers gone2)\" ]"
assert "... and logged" grep -q "forgot worker gone1's heartbeat (silent past --forget-ms)" "$PWD/live.log"
assert "... then every earlier worker's (16 a pass); the live worker's own is kept" \
    wait_for 15 bash -c "[ \"\$(redis-cli -p $PORT HKEYS ca:workers)\" = live ]"
E=$(R XPENDING ca:jobs ca-workers - + 1 | head -1)
R XACK ca:jobs ca-workers "$E" >/dev/null
R XDEL ca:jobs "$E" >/dev/null
assert "once its entry is acknowledged, the ghost goes too" \
    wait_for 10 bash -c "! redis-cli -p $PORT XINFO CONSUMERS ca:jobs ca-workers | grep -q '^ghost/'"
assert "every other consumer of the earlier workers went the same way" \
    wait_for 15 bash -c "[ -z \"\$(redis-cli -p $PORT XINFO CONSUMERS ca:jobs ca-workers | awk 'prev == \"name\" {print} {prev = \$0}' | grep -v '^returned\$\|^live/')\" ]"
R EVAL "for i = 1, 40 do redis.call('XGROUP', 'CREATECONSUMER', KEYS[1], 'ca-workers', 'many/9.' .. i) end" 1 ca:jobs >/dev/null
many() { consumers | grep -c '^many/'; }
for _ in $(seq 200); do [ "$(many)" -lt 40 ] && break; sleep 0.05; done
n=$(many)
assert "40 idle consumers of a gone worker: the first pass that finds them deletes 16 ($((40 - n)))" [ "$n" = 24 ]
assert "... and later passes the rest" wait_for 10 bash -c "[ \$(redis-cli -p $PORT XINFO CONSUMERS ca:jobs ca-workers | grep -c '^many/') = 0 ]"
kill -TERM "$WLV"
wait "$WLV"

# -- agent episodes on the bus: `tool` (./verify in the sandbox), `run` (the episode's evaluations
# and its final scoring), `serve` (its `tool` children get the URL), `bench run --model`
export CUDA_AGENT_STATE_DIR=$PWD/state
unset CUDA_AGENT_EVALUATOR CUDA_AGENT_EVAL_DEVICE CUDA_AGENT_REDIS OPENAI_BASE_URL CUDA_AGENT_BASE_URL
SANDBOX=() # the episodes' tools in their sandbox, unconfined where the host has none
if ! "$CA" tool --workspace "$PWD/base" --episode probe-$$ Bash '{"command":"true"}' >/dev/null 2>"$ERR"; then
    echo "note: no sandbox on this host, the episodes run unconfined: $(head -c 300 "$ERR")"
    SANDBOX=(--insecure-no-sandbox)
fi
"$CA" tool --episode probe-$$ --close >/dev/null 2>&1
# fake_reward JOB: the reward the fake backend gives job JOB
fake_reward() { [ -n "$1" ] || { echo "no job"; return; }; local r=$((16#${1:0:1} % 4)); [ "$r" = 0 ] && echo -1 || echo "$r"; }
# evals_of EPISODE: "command:ok:reward:worker:job:fake-reward-of-job" per evaluation it recorded
evals_of() { "$CA" tool --episode "$1" --evals | "$PY" -c '
import json, sys
for e in json.load(sys.stdin)["evals"]:
    bus = e["report"].get("bus") or {}
    job = bus.get("job") or ""
    r = int(job[0], 16) % 4 if job else None
    print("%s:%s:%s:%s:%s:%s" % (e["command"], e["ok"], e["reward"], bus.get("worker"), job,
                                 (-1 if r == 0 else r) if job else None))'; }
worker ep "$PWD/ep.log" --fake-eval 30 --jobs 2
WEP=$WPID

mkws ews
run "$CA" tool "${SANDBOX[@]}" --redis "$URL" --workspace "$PWD/ews" --episode bus-e1 Bash '{"command": "./verify; echo verify-exit=$?"}'
expect "tool --redis: ./verify in the episode ran" 0 "verify-exit="
evals_of bus-e1 >"$PWD/e1.txt"
IFS=: read -r ecmd eok erew eworker ejob efake <"$PWD/e1.txt"
assert "... through the bus: worker ep, the job's own reward ($(cat "$PWD/e1.txt"))" \
    [ "$(wc -l <"$PWD/e1.txt"):$ecmd:$eworker:$erew" = "1:verify:ep:$efake" ]
assert "... ./verify's exit status follows the worker's verdict" \
    grep -q "verify-exit=$([ "$eok" = True ] && echo 0 || echo 1)" "$OUT"
assert "... the job is recorded in Redis under its id" [ -n "$(R GET "ca:result:$ejob")" ]
KEPT=$CUDA_AGENT_STATE_DIR/bus-e1/evals/1
assert "... the evaluated files kept by the client: model_new.py, the kernels, the task as model.py" \
    bash -c "cmp -s '$PWD/ews/model_new.py' '$KEPT/model_new.py' && cmp -s '$PWD/ews/kernels/swish_cpu.cu' '$KEPT/kernels/swish_cpu.cu' && cmp -s '$FIX/task.py' '$KEPT/model.py' && [ -s '$KEPT/report.json' ]"
run "$CA" tool --episode bus-e1 Bash '{"command": "echo // again >>kernels/swish_cpu.cu && ./compile; echo compile-exit=$?"}'
expect "a later call of the episode keeps the bus: ./compile" 0 "compile-exit="
assert "... its job queued too (a second evaluation through ep)" \
    [ "$(evals_of bus-e1 | awk -F: '$1 == "compile" && $4 == "ep"' | wc -l)" = 1 ]
"$CA" tool --episode bus-e1 --close >/dev/null
CUDA_AGENT_REDIS=$URL run "$CA" tool "${SANDBOX[@]}" --workspace "$PWD/ews" --episode bus-e2 Bash '{"command": "./verify; echo verify-exit=$?"}'
assert "tool: \$CUDA_AGENT_REDIS alone puts the episode on the bus" \
    [ "$(evals_of bus-e2 | cut -d: -f4)" = ep ]
"$CA" tool --episode bus-e2 --close >/dev/null
run "$CA" tool "${SANDBOX[@]}" --redis "redis://127.0.0.1:$DEAD" --workspace "$PWD/ews" --episode bus-e3 Bash '{"command": "./verify; echo verify-exit=$?"}'
expect "tool, Redis unreachable: exit 69 before the episode starts, naming the URL" 69 "" \
    "cannot reach Redis at redis://127.0.0.1:$DEAD/0"
assert "... no command ran" [ ! -s "$OUT" ]
run "$CA" tool --episode bus-e3 --close
expect "... and no episode was started" 0 "episode was not running"
run "$CA" tool --redis "http://x" --workspace "$PWD/ews" --episode bus-e4 Bash '{"command": "true"}'
expect "tool: a bad --redis URL is a usage error" 2 "" "redis://"

# run: a scripted model writes the fixture's solution (with a comment of its own, so that its jobs
# are not those of other cases: identical jobs share one result), runs ./verify and answers; the
# episode's evaluation and the final scoring go through the bus.
. "$CA_REPO/tests/it/fake_llm.bash"
trap 'stop_server; bus_cleanup' EXIT # fake_llm.bash's trap, and this script's
# model NAME: the scripted model server on $PWD/NAME.json at $LLM (fake_llm.bash's serve sets URL,
# which is Redis's here)
model() { local bus=$URL; serve "$1"; LLM=$URL; URL=$bus; }
"$PY" "$CA_REPO/tests/it/solve_turns.py" "$FIX/sol" --mark agent \
    './verify; echo verify-exit=$?' >"$PWD/bus_agent.json"
model bus_agent
n0=$(reqs 2>/dev/null || echo 0)
run "$CA" run --task "$FIX/task.py" --model m --base-url "$LLM" --out "$PWD/runx" "${SANDBOX[@]}" \
    --redis "redis://127.0.0.1:$DEAD"
expect "run, Redis unreachable: exit 69 at the start, naming the URL" 69 "" \
    "cannot reach Redis at redis://127.0.0.1:$DEAD/0"
assert "... before the model was asked anything" [ "$(reqs 2>/dev/null || echo 0)" = "$n0" ]
run "$CA" run --task "$FIX/task.py" --model m --base-url "$LLM" --redis "$URL" --evaluator /nowhere
expect "run: --evaluator and --redis exclude each other" 2 "" "exclude each other"
run "$CA" run --task "$FIX/task.py" --model test-model --base-url "$LLM" --out "$PWD/runb" \
    "${SANDBOX[@]}" --redis "$URL" --wait 60 --json
expect "run --redis: the episode ran to the answer" 0 '"stop_reason": "answer"'
cp "$OUT" "$PWD/runb.json"
T=$PWD/runb/trajectory.jsonl
py "$T" '"\n".join("%s:%s:%s:%s" % (e["command"], e["reward"], e["report"]["bus"]["worker"], e["report"]["bus"]["job"]) for x in L if x["type"] == "turn" for e in x.get("evals", []))' >"$PWD/runb.evals"
IFS=: read -r rcmd rrew rworker rjob <"$PWD/runb.evals"
assert "run --redis: the agent's ./verify went to worker ep, the job's own reward ($(cat "$PWD/runb.evals"))" \
    [ "$(wc -l <"$PWD/runb.evals"):$rcmd:$rworker:$rrew" = "1:verify:ep:$(fake_reward "$rjob")" ]
assert "... its snapshot kept in OUT" \
    bash -c "cmp -s '$PWD/runb/workspace/model_new.py' '$PWD/runb/evals/1/model_new.py' && grep -q '^# agent' '$PWD/runb/evals/1/model_new.py'"
FJOB=$(jfield "$PWD/runb/eval_final.json" bus.job)
assert "run --redis: the final workspace scored by worker ep, with its job's reward" \
    [ "$(jfield "$PWD/runb/eval_final.json" bus.worker):$(jfield "$PWD/runb/eval_final.json" reward.reward)" = "ep:$(fake_reward "$FJOB")" ]
assert "... the episode's final reward is that one" \
    [ "$(py "$PWD/runb.json" 'J["rewards"]["final"]["reward"]')" = "$(fake_reward "$FJOB")" ]
assert "... the final scoring is one job (one more result in Redis)" [ -n "$(R GET "ca:result:$FJOB")" ]
stop_server

# serve: start_episode starts the supervisor through a `tool` child, which gets the URL in its
# environment; the episode's Bash ./verify and the evaluate tool go through the bus.
run "$CA" serve --stdio --redis "redis://127.0.0.1:$DEAD" --root "$PWD/srvx" --tasks "$FIX/task.py" </dev/null
expect "serve, Redis unreachable: exit 69 at the start" 69 "" "cannot reach Redis at redis://127.0.0.1:$DEAD/0"
# The official mcp SDK's client over stdio (as tests/py/test_serve.py), not a client of our own.
"$PY" - "$CA" "$URL" "$PWD/srv" "$FIX/task.py" "${SANDBOX[@]}" >"$PWD/serve_bus.json" 2>"$PWD/serve_bus.err" <<'PYEOF'
import asyncio, json, os, sys
from mcp import Client, StdioServerParameters
ca, url, root, tasks = sys.argv[1:5]
env = {k: v for k, v in os.environ.items() if k != "CUDA_AGENT_REDIS"}
params = StdioServerParameters(command=ca, args=["serve", "--stdio", "--redis", url, "--root", root,
                                                 "--tasks", tasks] + sys.argv[5:], env=env)

async def main():
    async with Client(params, read_timeout_seconds=600) as c:
        tool = lambda name, args: c.call_tool(name, args)
        task = (await tool("list_tasks", {})).structured_content["tasks"][0]["id"]
        ep = (await tool("start_episode", {"task": task})).structured_content["episode_id"]
        bash = await tool("Bash", {"episode_id": ep, "command": "./verify; echo verify-exit=$?"})
        ev = await tool("evaluate", {"episode_id": ep, "stage": "verify"})
        await tool("finish", {"episode_id": ep, "final_eval": False})
        return {"episode": ep, "bash": {"content": [{"text": bash.content[0].text}]},
                "evaluate": {"structuredContent": ev.structured_content}}

print(json.dumps(asyncio.run(main())))
PYEOF
assert "serve --redis: the episode ran ($(head -c 300 "$PWD/serve_bus.err"))" \
    [ -n "$(py "$PWD/serve_bus.json" 'J["episode"]')" ]
py "$PWD/serve_bus.json" 'json.dumps(J["evaluate"]["structuredContent"])' >"$PWD/serve_eval.json"
SJOB=$(py "$PWD/serve_eval.json" 'J["report"]["bus"]["job"]')
assert "serve --redis: the evaluate tool went through worker ep, with its job's reward" \
    [ "$(py "$PWD/serve_eval.json" 'J["report"]["bus"]["worker"]'):$(py "$PWD/serve_eval.json" 'J["reward"]')" = "ep:$(fake_reward "$SJOB")" ]
assert "... and the agent's Bash ./verify (the same files: the same job) exited as its verdict says" \
    [ "$(py "$PWD/serve_bus.json" '"verify-exit=" in J["bash"]["content"][0]["text"] and J["bash"]["content"][0]["text"].split("verify-exit=")[1].strip()')" = \
      "$([ "$(fake_reward "$SJOB")" -ge 1 ] && echo 0 || echo 1)" ]

# bench run --model --redis: the agent children evaluate through the bus, no evaluator started
if [ ${#SANDBOX[@]} = 0 ]; then
    model bus_agent
    run "$CA" bench run --db "$PWD/bdead.sqlite" --model test-model --base-url "$LLM" \
        --redis "redis://127.0.0.1:$DEAD" --max-turns 5 --no-html --json "$FIX/task.py"
    expect "bench run --model, Redis unreachable: the episode is not run, exit 75" 75 "" \
        "could not be evaluated"
    assert "... saying why" grep -q "cannot reach Redis at redis://127.0.0.1:$DEAD/0" "$OUT"
    assert "... before its model was asked anything" [ "$(reqs 2>/dev/null || echo 0)" = 0 ]
    run "$CA" bench run --db "$PWD/bagent.sqlite" --model test-model --base-url "$LLM" --redis "$URL" \
        --max-turns 5 --no-html --json "$FIX/task.py"
    expect "bench run --model --redis: the episode ran and was scored" 0 '"finished_now":1,'
    assert "... no evaluator service was started" [ ! -e "$PWD/bagent.files/evaluator.log" ]
    BA=$(echo "$PWD"/bagent.files/agent/*)
    assert "... its final workspace scored by worker ep, with its job's reward" \
        [ "$(jfield "$BA/eval_final.json" bus.worker):$(jfield "$BA/eval_final.json" reward.reward)" = \
          "ep:$(fake_reward "$(jfield "$BA/eval_final.json" bus.job)")" ]
    assert "... the agent's ./verify too" \
        [ "$(py "$BA/trajectory.jsonl" '[e["report"]["bus"]["worker"] for x in L if x["type"] == "turn" for e in x.get("evals", [])]')" = "['ep']" ]
    stop_server
else
    skip userns "bench run --model --redis" "bench runs its agents in the sandbox, which this host cannot make"
fi
kill -TERM "$WEP"
wait "$WEP"

# -- CPU mode end to end: the real evaluator on a worker, the same reward as locally
if ! "$PY" -c 'import torch' 2>/dev/null; then
    skip torch "CPU-mode worker" "PyTorch is not importable by $PY"
elif ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
    skip nvcc "CPU-mode worker" "no nvcc"
else
    export CUDA_AGENT_PYTHON=$PY
    export CUDA_AGENT_CACHE_DIR=${CUDA_AGENT_TEST_CACHE_DIR:-$CA_REPO/.test-cache}
    export CUDA_AGENT_COMPILE_TIMEOUT=${CUDA_AGENT_COMPILE_TIMEOUT:-900}
    cp -a "$PWD/base" "$PWD/cpu"
    "$CA" worker --redis "$URL" --name cpu --device cpu --prewarm 1 2>"$PWD/cpu.log" &
    WCPU=$!
    pids+=("$WCPU")
    mkws wrongcpu
    sed -i 's/\* scale + bias\[c\]/* scale + bias[c] + 0.5f/' "$PWD/wrongcpu/kernels/swish_cpu.cu"
    run "$CA" eval --redis "$URL" --wait 600 --json "$PWD/wrongcpu"
    expect "CPU mode: a wrong kernel is caught by the worker's evaluator (reward -1)" 1 '"kind": "mismatch"'
    run "$CA" eval --device cpu --json "$PWD/cpu"
    cp "$OUT" "$PWD/local_full.json"
    run "$CA" eval --redis "$URL" --wait 600 --json "$PWD/cpu"
    expect "CPU mode: the full evaluation through the bus" 0 '"stage": "done"'
    assert "evaluated by worker cpu, with the candidate in its sandbox" \
        [ "$(jfield "$OUT" bus.worker):$(jfield "$OUT" harness.isolation.sandbox)" = cpu:True ]
    assert "the same verdict as the local evaluation" \
        [ "$(jfield "$OUT" ok):$(jfield "$OUT" stage)" = "$(jfield "$PWD/local_full.json" ok):$(jfield "$PWD/local_full.json" stage)" ]
    assert "the reward of the local evaluation's class, from its own timings ($(verdict_of <"$OUT"))" \
        [ "$(verdict_of <"$OUT")" = "$(verdict_of <"$PWD/local_full.json")" ]
    # bench through the same worker: a correct and a wrong KernelBench-format solution, the
    # verdicts, stages and rewards of local evaluations of the same files.
    BTS=(--rules kernelbench --no-compile-baseline)
    run "$CA" bench run --redis "$URL" --wait 600 --db "$PWD/bcpu.sqlite" --solutions "$BT/solutions" \
        --tasks l1_1_Swish,l2_1_SwishScaled "${BTS[@]}" --no-html --json "$BT/tasks"
    expect "CPU mode: bench --redis --solutions on the worker" 0 '"finished_now":2,'
    same=0
    for t in "l1_1_Swish level1/1_Swish.py level_1_problem_1" "l2_1_SwishScaled level2/1_SwishScaled.py level_2_problem_1"; do
        set -- $t
        "$CA" eval --device cpu "${BTS[@]}" --json --task "$BT/tasks/$2" \
            --kernelbench-file "$BT/solutions/$3_sample_0_kernel.py" >"$PWD/local_$1.json" 2>/dev/null
        "$PY" -c '
import sqlite3, sys
(j,) = sqlite3.connect(sys.argv[1]).execute(
    "select r.json from tasks t join attempts a on a.task_id = t.id join reports r on r.attempt_id = a.id where t.name = ?", (sys.argv[2],)).fetchone()
print(j)' "$PWD/bcpu.sqlite" "$1" >"$PWD/bus_$1.json"
        got="$(verdict_of <"$PWD/bus_$1.json") $(jfield "$PWD/bus_$1.json" bus.worker)"
        want="$(verdict_of <"$PWD/local_$1.json") cpu"
        [ "$got" = "$want" ] && same=$((same + 1)) || echo "$1: bus '$got', local '$want'"
    done
    assert "CPU mode: bench through the bus gives the local verdicts, stages and reward classes (2 of $same)" [ "$same" = 2 ]
    assert "... one correct, one wrong" \
        [ "$(jfield "$PWD/local_l1_1_Swish.json" stage):$(jfield "$PWD/local_l2_1_SwishScaled.json" stage)" = done:verify ]
    # An episode's ./verify through the worker, and in the episode's own supervisor on the CPU:
    # the same verdict, reward and exit status, for a correct and a wrong workspace.
    same=0
    for w in cpu wrongcpu; do
        V='{"command": "./verify; echo verify-exit=$?", "timeout": 600000}'
        "$CA" tool "${SANDBOX[@]}" --redis "$URL" --wait 600 --workspace "$PWD/$w" --episode "bv-$w" \
            Bash "$V" >"$PWD/bv-$w.json" 2>&1
        CUDA_AGENT_EVAL_DEVICE=cpu "$CA" tool "${SANDBOX[@]}" --workspace "$PWD/$w" --episode "lv-$w" \
            Bash "$V" >"$PWD/lv-$w.json" 2>&1
        got="$(evals_of "bv-$w" | cut -d: -f1-4) $(grep -o 'verify-exit=[0-9]*' "$PWD/bv-$w.json")"
        want="$(evals_of "lv-$w" | cut -d: -f1-3):cpu $(grep -o 'verify-exit=[0-9]*' "$PWD/lv-$w.json")"
        [ "$got" = "$want" ] && same=$((same + 1)) || echo "$w: bus '$got', local '$want'"
        "$CA" tool --episode "bv-$w" --close >/dev/null
        "$CA" tool --episode "lv-$w" --close >/dev/null
    done
    assert "CPU mode: an episode's ./verify through the bus as in the episode itself (2 of $same)" [ "$same" = 2 ]
    assert "... one passed, one failed" \
        [ "$(grep -o 'verify-exit=[0-9]*' "$PWD/bv-cpu.json" "$PWD/bv-wrongcpu.json" | cut -d= -f2 | tr '\n' :)" = "0:1:" ]
    kill -TERM "$WCPU"
    wait "$WCPU"
fi

finish
