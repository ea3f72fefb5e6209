#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Relay benchmark: the same nginx backend (PROXY protocol required) reached directly, through
# HAProxy 2.6 (mode tcp, send-proxy) and through `ouroboros proxy` (v1), all in one run on
# 127.0.0.1. Prints a markdown table and writes it to bench/results/. See bench/README.md.
#
# Settings (environment): those of bench/lib/common.sh (ROUNDS, WRK_DURATION, WRK_CONNS,
# BULK_MB, BULK_REPEAT, IDLE_CONNS, PROXY_CPU, LOAD_CPU, OUROBOROS_BIN, NICE, PROXY_THREADS,
# SCHED, KEEP_TMP, NOTES) and
#   VARIANTS="direct haproxy haproxy_splice ouroboros ouroboros_userspace"
#                       (the list of variants is in bench/lib/common.sh)
set -euo pipefail

BENCH=proxy
VARIANTS=${VARIANTS:-"direct haproxy haproxy_splice ouroboros ouroboros_userspace"}
# shellcheck source=../lib/common.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../lib/common.sh"

bench_prepare proxy --listen-http
read -r P_NGINX_PP P_PLAIN < <("${HELPER[@]}" free-ports 2)
BACKEND_PP_PORTS=$P_NGINX_PP

start_nginx nginx "$P_NGINX_PP" "$P_PLAIN"

HAPROXY_BACKEND="    server s1 127.0.0.1:$P_NGINX_PP send-proxy"
OURO_SUBCOMMAND=proxy
ouroboros_args() { # port health-port
    OURO_ARGS=(--listen-http "127.0.0.1:$1" --listen-https '' --listen-health "127.0.0.1:$2"
        --target-host 127.0.0.1 --target-http-port "$P_NGINX_PP" --proxy-protocol v1)
}

start_variants
check_variants
cpu_limit_prepare

write_meta "bench/proxy/run.sh" "ouroboros_busy=ouroboros --busy-poll $BUSY_POLL"
idle_phase
warm_up
measure_rounds
finish
