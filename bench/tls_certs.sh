#!/usr/bin/env bash
# bench/tls_certs.sh DIR - a throw-away CA and a server certificate for 127.0.0.1, for the
# benchmarks that run Redis over TLS (bench/bus_load.sh, bench/bus_gpu.sh): DIR/ca.crt,
# DIR/ca.key, DIR/s.crt and DIR/s.key, made with the openssl command, valid one day; then
# prints the redis-server arguments of a TLS port on a free loopback port that does not ask
# clients for certificates; the port number is the last word.
set -eu
d=$1
mkdir -p "$d"
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$d/ca.key" -out "$d/ca.crt" -days 1 \
    -subj "/CN=bench CA" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout "$d/s.key" -out "$d/s.csr" -subj /CN=s 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\n' >"$d/s.ext"
openssl x509 -req -in "$d/s.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
    -out "$d/s.crt" -days 1 -extfile "$d/s.ext" 2>/dev/null
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
echo "--tls-cert-file $d/s.crt --tls-key-file $d/s.key --tls-ca-cert-file $d/ca.crt --tls-auth-clients no --tls-port $port"
