#!/usr/bin/env bash
# Load-balancer benchmark: three nginx backends (each requiring the PROXY protocol) behind
# HAProxy 2.6 (`balance roundrobin`, `send-proxy` on each server) and behind `ouroboros edge
# --backend ×3 --balance round-robin --proxy-protocol v1`, plus the direct baseline (one nginx,
# no proxy), all in one run on 127.0.0.1. Same figures as bench/proxy/run.sh. Prints a markdown
# table and writes it to bench/results/. See bench/README.md.
#
# Settings (environment): those of bench/lib/common.sh (ROUNDS, WRK_DURATION, WRK_CONNS,
# BULK_MB, BULK_REPEAT, IDLE_CONNS, PROXY_CPU, LOAD_CPU, OUROBOROS_BIN, NICE, PROXY_THREADS,
# SCHED, KEEP_TMP, NOTES) and
#   VARIANTS="direct haproxy ouroboros"
#                       add ouroboros_splice for `edge --copy-mode splice`
set -euo pipefail

BENCH=edge
VARIANTS=${VARIANTS:-"direct haproxy ouroboros"}
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../lib/common.sh"

bench_prepare edge --balance
read -r P_PP1 P_PP2 P_PP3 P_PLAIN P_HAPROXY P_OURO P_OURO_HEALTH P_SPLICE P_SPLICE_HEALTH < <("${HELPER[@]}" free-ports 9)
BACKEND_PP_PORTS=$P_PP1,$P_PP2,$P_PP3

# three backends; the first also has the plain listener for the direct baseline
start_nginx nginx1 "$P_PP1" "$P_PLAIN"
start_nginx nginx2 "$P_PP2"
start_nginx nginx3 "$P_PP3"

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
    balance roundrobin
    server s1 127.0.0.1:$P_PP1 send-proxy
    server s2 127.0.0.1:$P_PP2 send-proxy
    server s3 127.0.0.1:$P_PP3 send-proxy
EOF
    taskset -c "$PROXY_CPU" "$HAPROXY" -f "$DIR/haproxy.cfg" -db >"$DIR/logs/haproxy.log" 2>&1 &
    PID[haproxy]=$!
}

start_ouroboros() { # variant port health-port extra-args...
    local v=$1 port=$2 health=$3
    shift 3
    taskset -c "$PROXY_CPU" "$BIN" --log-level warn edge --threads "$PROXY_THREADS" \
        --listen "127.0.0.1:$port" --listen-health "127.0.0.1:$health" \
        --backend "127.0.0.1:$P_PP1" --backend "127.0.0.1:$P_PP2" --backend "127.0.0.1:$P_PP3" \
        --balance round-robin --proxy-protocol v1 \
        --max-connections $((IDLE_CONNS + 2000)) "$@" >"$DIR/logs/$v.log" 2>&1 &
    PID[$v]=$!
}

url_of() {
    case $1 in
        direct) echo "http://127.0.0.1:$P_PLAIN" ;;
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

# round robin over three: 30 new connections must land 10 on each backend, for both balancers
for v in "${VARS[@]}"; do
    [[ $v == direct ]] && continue
    got=$("${HELPER[@]}" spread "$(url_of "$v")/id" 30 | xargs)
    [[ $got == "nginx1 10 nginx2 10 nginx3 10" ]] || die "$v: 30 requests spread as '$got', expected 10 on each backend"
    log "$v: 30 requests spread $got"
done

write_meta "bench/edge/run.sh" "direct=direct (one nginx, no proxy);haproxy=HAProxy 2.6 roundrobin;ouroboros=ouroboros edge;ouroboros_splice=ouroboros edge --copy-mode splice"
idle_phase
warm_up
measure_rounds
finish
