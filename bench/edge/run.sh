#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Load-balancer benchmark: three nginx backends (each requiring the PROXY protocol) behind
# HAProxy 2.6 (`balance roundrobin`, `send-proxy` on each server) and behind `ouroboros edge
# --backend ×3 --balance round-robin --proxy-protocol v1`, plus the direct baseline (one nginx,
# no proxy), all in one run on 127.0.0.1. Same figures as bench/proxy/run.sh. Prints a markdown
# table and writes it to bench/results/. See bench/README.md.
#
# Settings (environment): those of bench/lib/common.sh (ROUNDS, WRK_DURATION, WRK_CONNS,
# BULK_MB, BULK_REPEAT, IDLE_CONNS, PROXY_CPU, LOAD_CPU, OUROBOROS_BIN, NICE, PROXY_THREADS,
# SCHED, KEEP_TMP, NOTES) and
#   VARIANTS="direct haproxy haproxy_splice ouroboros ouroboros_userspace"
#                       (the list of variants is in bench/lib/common.sh)
set -euo pipefail

BENCH=edge
VARIANTS=${VARIANTS:-"direct haproxy haproxy_splice ouroboros ouroboros_userspace"}
# shellcheck source=../lib/common.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../lib/common.sh"

bench_prepare edge --balance
read -r P_PP1 P_PP2 P_PP3 P_PLAIN < <("${HELPER[@]}" free-ports 4)
BACKEND_PP_PORTS=$P_PP1,$P_PP2,$P_PP3

# three backends; the first also has the plain listener for the direct baseline
start_nginx nginx1 "$P_PP1" "$P_PLAIN"
start_nginx nginx2 "$P_PP2"
start_nginx nginx3 "$P_PP3"

HAPROXY_BACKEND="    balance roundrobin
    server s1 127.0.0.1:$P_PP1 send-proxy
    server s2 127.0.0.1:$P_PP2 send-proxy
    server s3 127.0.0.1:$P_PP3 send-proxy"
OURO_SUBCOMMAND=edge
ouroboros_args() { # port health-port
    OURO_ARGS=(--listen "127.0.0.1:$1" --listen-health "127.0.0.1:$2"
        --backend "127.0.0.1:$P_PP1" --backend "127.0.0.1:$P_PP2" --backend "127.0.0.1:$P_PP3"
        --balance round-robin --proxy-protocol v1)
}

start_variants
check_variants
cpu_limit_prepare

# round robin over three: 30 new connections must land 10 on each backend, for both balancers
for v in "${VARS[@]}"; do
    [[ $v == direct ]] && continue
    got=$("${HELPER[@]}" spread "$(url_of "$v")/id" 30 | xargs)
    [[ $got == "nginx1 10 nginx2 10 nginx3 10" ]] || die "$v: 30 requests spread as '$got', expected 10 on each backend"
    log "$v: 30 requests spread $got"
done

write_meta "bench/edge/run.sh" "direct=direct (one nginx, no proxy);haproxy=HAProxy 2.6 roundrobin;haproxy_splice=HAProxy 2.6 roundrobin splice-auto;ouroboros=ouroboros edge;ouroboros_userspace=ouroboros edge --copy-mode userspace;ouroboros_splice=ouroboros edge --copy-mode splice;ouroboros_t1=ouroboros edge --threads 1;ouroboros_t2=ouroboros edge --threads 2;ouroboros_busy=ouroboros edge --busy-poll $BUSY_POLL"
idle_phase
warm_up
measure_rounds
finish
