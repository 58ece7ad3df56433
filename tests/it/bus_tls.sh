#!/usr/bin/env bash
# The job bus over TLS (rediss://, src/bus/bus_tls.c) against a real redis-server that this
# script starts with a TLS port beside a plain one, its certificates made here with the openssl
# command: a CA, a server certificate for 127.0.0.1 only (no DNS name), and a client
# certificate (the server asks for one: tls-auth-clients yes). Workers use the fake evaluation
# backend (--fake-eval, a TEST DOUBLE: a sleep and a made-up report; the job itself, its blobs
# and its result go through Redis over TLS).
#
# Cases: a job through a worker over TLS with AUTH (an ACL user) and a client certificate; a
# job with a 0.9 MiB file; the
# server's certificate not trusted (no $CUDA_AGENT_REDIS_CACERT); the host name not the
# certificate's; no client certificate; a certificate without its key; an unreadable CA file;
# rediss:// to the plain port and redis:// to the TLS port; Redis killed and restarted under a
# TLS worker (the relay ends, the worker reconnects, the next job is served).
. "${CA_REPO:?run through tests/run.sh (make test), which sets CA_REPO}/tests/it/lib.sh"
. "$CA_REPO/tests/it/bus_fixture.bash"
command -v openssl >/dev/null || skip_all redis "no openssl command (apt-get install openssl)"
ldd "$(command -v redis-server)" | grep -q libssl ||
    skip_all redis "this redis-server was built without TLS (Debian's has it)"

# -- certificates: a CA; the server's for IP 127.0.0.1 only; a client's
C=$PWD/certs
mkdir -p "$C"
ossl() { openssl "$@" 2>>"$C/openssl.log" >/dev/null || { echo "openssl $1 failed"; cat "$C/openssl.log"; exit 1; }; }
ossl req -x509 -newkey rsa:2048 -nodes -keyout "$C/ca.key" -out "$C/ca.crt" -days 2 -subj "/CN=test CA"
for who in server client; do
    ossl req -newkey rsa:2048 -nodes -keyout "$C/$who.key" -out "$C/$who.csr" -subj "/CN=$who"
done
printf 'subjectAltName=IP:127.0.0.1\n' >"$C/server.ext"
ossl x509 -req -in "$C/server.csr" -CA "$C/ca.crt" -CAkey "$C/ca.key" -CAcreateserial \
    -out "$C/server.crt" -days 2 -extfile "$C/server.ext"
ossl x509 -req -in "$C/client.csr" -CA "$C/ca.crt" -CAkey "$C/ca.key" -CAcreateserial \
    -out "$C/client.crt" -days 2

# -- one redis-server: a plain port and a TLS port, AOF on, an ACL user. The default user stays
# on, with every right but no password, so nobody can log in as it: Redis 7.0 (Debian 12's)
# replays the AOF's transactions as the default user and re-checks its rights at EXEC, so with
# `user default off` every result recorded by a worker's script is dropped at a restart
# (docs/security.md).
PORT=$(free_port)
TPORT=$(free_port)
start_redis() {
    redis-server --port "$PORT" --tls-port "$TPORT" --bind 127.0.0.1 --dir "$PWD/redis" \
        --save '' --appendonly yes --appendfsync always --daemonize no \
        --logfile "$PWD/redis/redis.log" --tls-cert-file "$C/server.crt" \
        --tls-key-file "$C/server.key" --tls-ca-cert-file "$C/ca.crt" --tls-auth-clients yes \
        --user default on resetpass '~*' '&*' '+@all' --user alice on '>pw' '~*' '&*' '+@all' &
    REDIS_PID=$!
    for _ in $(seq 100); do
        redis-cli -p "$PORT" --user alice --pass pw --no-auth-warning ping 2>/dev/null |
            grep -q PONG && return 0
        sleep 0.05
    done
    echo "redis-server did not start"
    cat "$PWD/redis/redis.log"
    exit 1
}
mkdir -p "$PWD/redis"
start_redis
URL="rediss://alice@127.0.0.1:$TPORT"
export CUDA_AGENT_REDIS_PASSWORD=pw
TLS_ENV=(env CUDA_AGENT_REDIS_CACERT="$C/ca.crt" CUDA_AGENT_REDIS_CERT="$C/client.crt"
         CUDA_AGENT_REDIS_KEY="$C/client.key")


# -- a job over TLS: worker and client verify the server, present the client certificate
"${TLS_ENV[@]}" "$CA" --log-level info worker --redis "$URL" --name tw --fake-eval 20 \
    2>"$PWD/w.log" &
W=$!
pids+=("$W")
mkws t1
run "${TLS_ENV[@]}" "$CA" eval --redis "$URL" --wait 30 --json "$PWD/t1"
assert "a job over TLS (ACL user, client certificate): evaluated by the TLS worker" \
    [ "$(jfield "$OUT" bus.worker):$(jfield "$OUT" bus.stored)" = tw:False ]
assert "its result is in Redis (read over the plain port)" \
    [ "$(redis-cli -p "$PORT" --user alice --pass pw --no-auth-warning --scan --pattern 'ca:result:*' | wc -l)" = 1 ]
run "${TLS_ENV[@]}" "$CA" eval --redis "$URL" --wait 30 --json "$PWD/t1"
assert "the same job again: answered from its stored result, saying so" \
    [ "$(jfield "$OUT" bus.worker):$(jfield "$OUT" bus.stored)" = tw:True ]

# -- a large job (a 0.9 MiB source, near the 1 MiB limit): its blob crosses the relay in many
# pieces, both ways
mkws big
"$PY" -c 'import sys; open(sys.argv[1], "a").write("".join("// pad %08d\n" % i for i in range(60000)))' \
    "$PWD/big/kernels/swish_cpu.cu"
run "${TLS_ENV[@]}" "$CA" eval --redis "$URL" --wait 30 --json "$PWD/big"
assert "a job with a 0.9 MiB file over TLS: evaluated by the TLS worker, its own result" \
    [ "$(jfield "$OUT" bus.worker):$(jfield "$OUT" job)" = "tw:$(jfield "$OUT" bus.job)" ]
big_sha=$(sha256sum "$PWD/big/kernels/swish_cpu.cu" | cut -d' ' -f1)
assert "its blob arrived whole (under the file's digest, its length)" \
    [ "$(redis-cli -p "$PORT" --user alice --pass pw --no-auth-warning STRLEN "ca:blob:$big_sha")" = "$(stat -c %s "$PWD/big/kernels/swish_cpu.cu")" ]

# -- what is refused, each with exit 69 and the reason
mkws t2
run env CUDA_AGENT_REDIS_CERT="$C/client.crt" CUDA_AGENT_REDIS_KEY="$C/client.key" \
    "$CA" eval --redis "$URL" "$PWD/t2"
expect "the server's certificate not trusted (no CA given): refused, naming the cause" 69 "" \
    "certificate was not accepted"
assert "... and saying which variable to set" grep -q CUDA_AGENT_REDIS_CACERT "$ERR"
run "${TLS_ENV[@]}" "$CA" eval --redis "rediss://alice@localhost:$TPORT" "$PWD/t2"
expect "a host name that is not the certificate's (it names 127.0.0.1 only): refused" 69 "" \
    "hostname mismatch"
run env CUDA_AGENT_REDIS_CACERT="$C/ca.crt" "$CA" eval --redis "$URL" "$PWD/t2"
expect "no client certificate where the server asks for one: refused, saying so" 69 "" \
    "client certificate"
assert "... and saying which variables to set" grep -q 'set \$CUDA_AGENT_REDIS_CERT and \$CUDA_AGENT_REDIS_KEY' "$ERR"
# The server's alert ends the relay at once: in one of 20-40 tries the relay used to wait on
# hiredis after it, which then gave up on its 15 s command timeout ("Resource temporarily
# unavailable"). 20 more tries, each refused with the reason within 5 s.
slow=0
for _ in $(seq 20); do
    t0=$SECONDS
    run env CUDA_AGENT_REDIS_CACERT="$C/ca.crt" timeout 30 "$CA" eval --redis "$URL" "$PWD/t2"
    { [ "$RC" = 69 ] && grep -q "client certificate" "$ERR" && [ $((SECONDS - t0)) -lt 5 ]; } ||
        { slow=$((slow + 1)); echo "try: rc $RC in $((SECONDS - t0)) s: $(cat "$ERR")"; }
done
assert "... every time, at once (20 tries)" [ "$slow" = 0 ]
run env CUDA_AGENT_REDIS_CACERT="$C/ca.crt" CUDA_AGENT_REDIS_CERT="$C/client.crt" \
    "$CA" eval --redis "$URL" "$PWD/t2"
expect "a client certificate without its key: refused, saying so" 69 "" "go together"
run env CUDA_AGENT_REDIS_CACERT="$C/nowhere.crt" "$CA" eval --redis "$URL" "$PWD/t2"
expect "an unreadable CA file: refused, naming it" 69 "" "cannot read \$CUDA_AGENT_REDIS_CACERT $C/nowhere.crt"
run env CUDA_AGENT_REDIS_CACERT="$C/ca.crt" CUDA_AGENT_REDIS_CERT="$C/client.crt" \
    CUDA_AGENT_REDIS_KEY="$C/server.key" "$CA" eval --redis "$URL" "$PWD/t2"
expect "a key that is not the certificate's: refused" 69 "" "cannot use the client certificate"
run "${TLS_ENV[@]}" timeout 20 "$CA" eval --redis "rediss://alice@127.0.0.1:$PORT" "$PWD/t2"
expect "rediss:// to the plain port: the handshake fails, exit 69" 69 "" "TLS handshake"
run "${TLS_ENV[@]}" timeout 30 "$CA" eval --redis "redis://alice@127.0.0.1:$TPORT" "$PWD/t2"
assert "redis:// to the TLS port: exit 69 (Redis unreachable), not a hang" [ "$RC" = 69 ]
assert "nothing of these was queued" \
    [ "$(redis-cli -p "$PORT" --user alice --pass pw --no-auth-warning XLEN ca:jobs)" = 0 ]
assert "the TLS worker is still serving" kill -0 "$W"

# -- Redis killed and restarted: the worker's TLS connections end, it reconnects, serves again
kill -9 "$REDIS_PID"
wait "$REDIS_PID" 2>/dev/null
sleep 1
start_redis
mkws t3
run "${TLS_ENV[@]}" "$CA" eval --redis "$URL" --wait 60 --json "$PWD/t3"
assert "after Redis restarted: a new job served by the same TLS worker" \
    [ "$(jfield "$OUT" bus.worker)" = tw ]
assert "the earlier jobs' results survived the restart (AOF)" \
    [ "$(redis-cli -p "$PORT" --user alice --pass pw --no-auth-warning --scan --pattern 'ca:result:*' | wc -l)" = 3 ]
kill -TERM "$W"
wait "$W"
assert "the TLS worker stops cleanly on SIGTERM" [ $? = 0 ]
finish
