#!/usr/bin/env bash
# Relay benchmark: the same nginx backend (PROXY protocol required) reached directly, through
# HAProxy 2.6 (mode tcp, send-proxy) and through `ouroboros proxy` (v1), all in one run on
# 127.0.0.1. Prints a markdown table and writes it to bench/results/. See bench/README.md.
#
# Settings (environment): those of bench/lib/common.sh (ROUNDS, WRK_DURATION, WRK_CONNS,
# BULK_MB, BULK_REPEAT, IDLE_CONNS, PROXY_CPU, LOAD_CPU, OUROBOROS_BIN, NICE, PROXY_THREADS,
# SCHED, KEEP_TMP, NOTES) and
#   VARIANTS="direct haproxy ouroboros ouroboros_splice"
#                       ouroboros = default --copy-mode (userspace), ouroboros_splice = --copy-mode splice
set -euo pipefail

BENCH=proxy
VARIANTS=${VARIANTS:-"direct haproxy ouroboros ouroboros_splice"}
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../lib/common.sh"

bench_prepare proxy --listen-http
read -r P_NGINX_PP P_NGINX_PLAIN P_HAPROXY P_OURO P_OURO_HEALTH P_SPLICE P_SPLICE_HEALTH < <("${HELPER[@]}" free-ports 7)
BACKEND_PP_PORTS=$P_NGINX_PP

start_nginx nginx "$P_NGINX_PP" "$P_NGINX_PLAIN"

start_haproxy() {
    cat >"$DIR/haproxy.cfg" <<EOF
global
    nbthread $PROXY_THREADS
    maxconn $((IDLE_CONNS + 2000))
defaults
    mode tcp
    timeout connect 5s
    timeout client 1h
    timeout server 1h
frontend fe
    bind 127.0.0.1:$P_HAPROXY
    default_backend be
backend be
    server s1 127.0.0.1:$P_NGINX_PP send-proxy
EOF
    taskset -c "$PROXY_CPU" "$HAPROXY" -f "$DIR/haproxy.cfg" -db >"$DIR/logs/haproxy.log" 2>&1 &
    PID[haproxy]=$!
}

start_ouroboros() { # variant port health-port extra-args...
    local v=$1 port=$2 health=$3
    shift 3
    taskset -c "$PROXY_CPU" "$BIN" --log-level warn proxy --threads "$PROXY_THREADS" \
        --listen-http "127.0.0.1:$port" --listen-https '' --listen-health "127.0.0.1:$health" \
        --target-host 127.0.0.1 --target-http-port "$P_NGINX_PP" --proxy-protocol v1 \
        --max-connections $((IDLE_CONNS + 2000)) "$@" >"$DIR/logs/$v.log" 2>&1 &
    PID[$v]=$!
}

url_of() {
    case $1 in
        direct) echo "http://127.0.0.1:$P_NGINX_PLAIN" ;;
        haproxy) echo "http://127.0.0.1:$P_HAPROXY" ;;
        ouroboros) echo "http://127.0.0.1:$P_OURO" ;;
        ouroboros_splice) echo "http://127.0.0.1:$P_SPLICE" ;;
    esac
}

for v in "${VARS[@]}"; do
    case $v in
        direct) ;;
        haproxy) start_haproxy ;;
        ouroboros) start_ouroboros ouroboros "$P_OURO" "$P_OURO_HEALTH" ;;
        ouroboros_splice) start_ouroboros ouroboros_splice "$P_SPLICE" "$P_SPLICE_HEALTH" --copy-mode splice ;;
        *) die "unknown variant $v (known: direct haproxy ouroboros ouroboros_splice)" ;;
    esac
done
check_variants

write_meta "bench/proxy/run.sh" "direct=direct (no proxy);haproxy=HAProxy 2.6;ouroboros=ouroboros;ouroboros_splice=ouroboros --copy-mode splice"
idle_phase
warm_up
measure_rounds
finish
