# shellcheck shell=bash
# Shared by bench/proxy/run.sh and bench/edge/run.sh (sourced, not run): settings, prerequisites,
# temp dir and cleanup, nginx backends requiring the PROXY protocol, the measured phases (idle
# memory, bulk, keep-alive and new-connection wrk runs, the same with each proxy under a CPU limit)
# and the report. The sourcing script sets
# BENCH (result file prefix), P_PLAIN (the direct baseline's port), BACKEND_PP_PORTS,
# HAPROXY_BACKEND and OURO_SUBCOMMAND, defines ouroboros_args, and calls the functions below in
# order; each proxy variant gets its own free ports. See bench/README.md.
#
# Variants (VARIANTS, space-separated):
#   direct               nginx's plain listener, no proxy
#   haproxy              HAProxy 2.6 mode tcp + send-proxy, no splicing options
#   haproxy_splice       the same with `option splice-auto` (the stronger HAProxy configuration:
#                        it splices a direction while its buffer keeps filling); the targets are
#                        judged against this one when it runs
#   ouroboros            ouroboros with its defaults (--copy-mode auto)
#   ouroboros_userspace  --copy-mode userspace        ouroboros_splice  --copy-mode splice
#   ouroboros_sockmap    --copy-mode sockmap (the kernel relay: needs root, and a binary built
#                        with --features kernel-relay, which this script builds when it is
#                        listed): judged against the kernel relay's targets, its CPU by what it
#                        adds to both CPUs per request
#   ouroboros_busy       --busy-poll $BUSY_POLL (default 0: the relay without busy polling; the
#                        default is auto)
#   ouroboros_t1         --threads 1: one event loop     ouroboros_t2  --threads 2: two
#   ouroboros_prev       the binary PREV_BIN (e.g. a build of an earlier commit) with the defaults
#
# Settings (environment):
#   ROUNDS=4            rate/throughput rounds; variants run back to back, order rotated per round
#   WRK_DURATION=6s     length of each wrk run      WRK_CONNS=50  wrk connections
#   BULK_MB=1024        size of the large file      BULK_REPEAT=2 downloads per variant per round
#   IDLE_CONNS=5000     idle connections held for the memory figure
#   PROXY_CPU=0         CPU the proxy under test (HAProxy or ouroboros) is pinned to; a list
#                       such as 0-1 lets it run on those CPUs (then sharing LOAD_CPU, as a
#                       proxy without a CPU limit shares a node)
#   LOAD_CPU=1          CPU nginx, wrk, curl and the idle-connection client are pinned to
#   OUROBOROS_BIN=path  use this binary instead of `cargo build --release`
#   NICE=-19            niceness of everything the run starts (a negative value needs root): on a
#                       shared box it keeps concurrent compiles from skewing one variant's turn
#   PROXY_THREADS=1     threads of each proxy: HAProxy nbthread and ouroboros --threads (1 = one
#                       event loop); 0 = each proxy's own default (one per CPU of PROXY_CPU)
#   SCHED=other|fifo    scheduling class of everything the run starts (fifo needs root)
#   CPU_LIMIT=400m      CFS quota of each proxy in the CPU-limited runs, as a pod's
#                       `resources.limits.cpu` sets it (100 ms period); 0 skips those runs. They
#                       need a writable cgroup cpu controller (v1 or v2; root)
#   KEEP_TMP=1          keep the temp dir (configs, logs, raw samples) after the run
#   NOTES=text          added under the table

BENCH_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$BENCH_LIB/../.." && pwd)
HELPER=(python3 "$BENCH_LIB/helper.py")

ROUNDS=${ROUNDS:-4}
WRK_DURATION=${WRK_DURATION:-6s}
WRK_CONNS=${WRK_CONNS:-50}
BULK_MB=${BULK_MB:-1024}
BULK_REPEAT=${BULK_REPEAT:-2}
IDLE_CONNS=${IDLE_CONNS:-5000}
PROXY_CPU=${PROXY_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
OUROBOROS_BIN=${OUROBOROS_BIN:-}
KEEP_TMP=${KEEP_TMP:-0}
NICE=${NICE:--19}
PROXY_THREADS=${PROXY_THREADS:-1}
BUSY_POLL=${BUSY_POLL:-0}
CPU_LIMIT=${CPU_LIMIT:-400m}
CFS_PERIOD_US=100000 # the kubelet's default

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# bench_prepare SUBCOMMAND FLAG: checks tools and limits, builds (or checks) the binary, makes
# the temp dir. SUBCOMMAND FLAG is what `ouroboros SUBCOMMAND --help` must mention.
bench_prepare() {
    local sub=$1 flag=$2
    NGINX=$(command -v nginx || echo /usr/sbin/nginx)
    HAPROXY=$(command -v haproxy || echo /usr/sbin/haproxy)
    local missing=() tool
    [[ -x $NGINX ]] || missing+=(nginx)
    [[ -x $HAPROXY ]] || missing+=(haproxy)
    for tool in wrk curl; do command -v "$tool" >/dev/null || missing+=("$tool"); done
    command -v taskset >/dev/null || missing+=(util-linux)
    command -v python3 >/dev/null || missing+=(python3)
    if ((${#missing[@]})); then
        die "missing ${missing[*]}; install with: apt-get install ${missing[*]}"
    fi
    if [[ $VARIANTS == *ouroboros* && -z $OUROBOROS_BIN ]]; then
        command -v cargo >/dev/null || die "cargo not found; install Rust (https://rustup.rs) or set OUROBOROS_BIN"
    fi
    [[ $($HAPROXY -v | head -1) == *"version 2.6"* ]] || log "warning: $($HAPROXY -v | head -1) is not HAProxy 2.6"
    local ncpu
    ncpu=$(nproc)
    if ((LOAD_CPU >= ncpu)) || ! "${HELPER[@]}" cpus "$PROXY_CPU" | awk -v n="$ncpu" '$1 >= n {bad = 1} END {exit bad}'; then
        die "PROXY_CPU=$PROXY_CPU / LOAD_CPU=$LOAD_CPU: this machine has $ncpu CPUs"
    fi

    # every idle connection costs a descriptor on the client, two in the proxy, one in nginx
    NEED_FDS=$((2 * IDLE_CONNS + 1000))
    local hard
    hard=$(ulimit -Hn)
    [[ $hard == unlimited ]] || ((hard >= NEED_FDS)) ||
        die "open-file hard limit $hard < $NEED_FDS needed for IDLE_CONNS=$IDLE_CONNS; raise it (ulimit -Hn) or lower IDLE_CONNS"
    ulimit -n "$hard"

    # children inherit it: nginx, the proxies, wrk and curl all run at the same priority
    renice -n "$NICE" -p $$ >/dev/null 2>&1 || log "warning: cannot renice to $NICE (not root?); running at $(nice)"
    if [[ ${SCHED:-other} == fifo ]]; then
        chrt -f -p 1 $$ || die "cannot switch to SCHED_FIFO (needs root)"
    fi

    CLK_TCK=$(getconf CLK_TCK)
    WRK_SECONDS=${WRK_DURATION%s}
    [[ $WRK_SECONDS =~ ^[0-9]+$ ]] || die "WRK_DURATION must be whole seconds like 10s, got $WRK_DURATION"

    BIN=$OUROBOROS_BIN
    if [[ $VARIANTS == *ouroboros* ]]; then
        if [[ -z $BIN ]]; then
            # The kernel relay is compiled only with its cargo feature (off by default); the
            # other variants run the same copy paths in that build.
            features=""
            [[ $VARIANTS == *ouroboros_sockmap* ]] && features=kernel-relay
            log "cargo build --release --features '$features'"
            (cd "$REPO" && cargo build --release --bin ouroboros --features "$features") >&2
            BIN=$REPO/target/release/ouroboros
        fi
        [[ -x $BIN ]] || die "$BIN is not executable"
        "$BIN" "$sub" --help 2>/dev/null | grep -q -- "$flag" ||
            die "$BIN has no working '$sub' subcommand (no $flag in its help); run with VARIANTS=\"direct haproxy\" to benchmark only the others"
    fi

    if [[ $CPU_LIMIT != 0 ]]; then
        [[ $CPU_LIMIT =~ ^([1-9][0-9]*)m$ ]] || die "CPU_LIMIT must be millicores like 400m, or 0, got $CPU_LIMIT"
        CPU_QUOTA_US=$((BASH_REMATCH[1] * CFS_PERIOD_US / 1000))
    fi

    DIR=$(mktemp -d /tmp/ouroboros-bench.XXXXXX)
    mkdir -p "$DIR"/{www,logs}
    declare -gA PID=() CGROUP=() PORT=()
    trap bench_cleanup EXIT
    trap 'exit 130' INT TERM

    head -c 1024 /dev/urandom >"$DIR/www/1k.bin"
    BIG_BYTES=$((BULK_MB * 1024 * 1024))
    fallocate -l "$BIG_BYTES" "$DIR/www/big.bin" 2>/dev/null || head -c "$BIG_BYTES" /dev/zero >"$DIR/www/big.bin"
    read -ra VARS <<<"$VARIANTS"
}

bench_cleanup() {
    local rc=$? name alive
    for name in "${!PID[@]}"; do kill -TERM "${PID[$name]}" 2>/dev/null || true; done
    for _ in $(seq 20); do
        alive=0
        for name in "${!PID[@]}"; do kill -0 "${PID[$name]}" 2>/dev/null && alive=1; done
        ((alive)) || break
        sleep 0.1
    done
    for name in "${!PID[@]}"; do kill -KILL "${PID[$name]}" 2>/dev/null || true; done
    wait 2>/dev/null || true
    for name in "${!CGROUP[@]}"; do rmdir "${CGROUP[$name]}" 2>/dev/null || log "warning: cannot remove cgroup ${CGROUP[$name]}"; done
    rm -f "$DIR/www/big.bin"
    if ((rc != 0)) || [[ $KEEP_TMP == 1 ]]; then
        log "configs, logs and raw samples kept in $DIR"
    else
        rm -rf "$DIR"
    fi
}

# start_nginx NAME PP_PORT [PLAIN_PORT]: one nginx (one worker, pinned to LOAD_CPU) serving
# $DIR/www; PP_PORT requires a PROXY header, PLAIN_PORT (the direct baseline) does not. /pp
# answers the PROXY source address, /id the instance's NAME.
start_nginx() {
    local name=$1 pp=$2 plain=${3:-} d=$DIR/$1
    mkdir -p "$d/tmp"
    cat >"$d/nginx.conf" <<EOF
$( ((EUID == 0)) && echo 'user root;')
worker_processes 1;
worker_rlimit_nofile $NEED_FDS;
pid $d/nginx.pid;
error_log $d/error.log warn;
events { worker_connections $NEED_FDS; }
http {
    access_log off;
    default_type application/octet-stream;
    client_body_temp_path $d/tmp/body;
    proxy_temp_path $d/tmp/proxy;
    fastcgi_temp_path $d/tmp/fastcgi;
    uwsgi_temp_path $d/tmp/uwsgi;
    scgi_temp_path $d/tmp/scgi;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_requests 10000000;
    keepalive_timeout 600s;
    open_file_cache max=16;
    server {
        # proxies connect here and must send a PROXY header; the direct baseline uses the other
        listen 127.0.0.1:$pp proxy_protocol backlog=4096;
$([[ -n $plain ]] && echo "        listen 127.0.0.1:$plain backlog=4096;")
        root $DIR/www;
        location = /pp { return 200 "\$proxy_protocol_addr\n"; }
        location = /id { return 200 "$name\n"; }
    }
}
EOF
    taskset -c "$LOAD_CPU" "$NGINX" -e "$d/error.log" -p "$d" -c "$d/nginx.conf" \
        -g 'daemon off;' >"$DIR/logs/$name.out" 2>&1 &
    PID[$name]=$!
    # the PROXY listener only answers after a header: probe it through a plain TCP connect
    "${HELPER[@]}" wait-port "$pp" 10 || die "$name did not start: $(tail -5 "$d/error.log" "$DIR/logs/$name.out")"
}

# start_variants: starts HAProxy and ouroboros for every variant in VARIANTS, each on free
# ports of its own. HAProxy gets HAPROXY_BACKEND as the body of its `backend be`; ouroboros runs
# OURO_SUBCOMMAND with the flags `ouroboros_args PORT HEALTH_PORT` puts in OURO_ARGS.
start_variants() {
    local v port health
    for v in "${VARS[@]}"; do
        read -r port health < <("${HELPER[@]}" free-ports 2)
        PORT[$v]=$port
        case $v in
            direct) PORT[$v]=$P_PLAIN ;;
            haproxy) start_haproxy haproxy "$port" ;;
            haproxy_splice) start_haproxy haproxy_splice "$port" "    option splice-auto" ;;
            ouroboros) start_ouroboros ouroboros "$port" "$health" ;;
            ouroboros_userspace) start_ouroboros "$v" "$port" "$health" --copy-mode userspace ;;
            ouroboros_splice) start_ouroboros "$v" "$port" "$health" --copy-mode splice ;;
            ouroboros_sockmap) start_ouroboros "$v" "$port" "$health" --copy-mode sockmap ;;
            ouroboros_busy) start_ouroboros "$v" "$port" "$health" --busy-poll "$BUSY_POLL" ;;
            ouroboros_t1) start_ouroboros "$v" "$port" "$health" --threads 1 ;;
            ouroboros_t2) start_ouroboros "$v" "$port" "$health" --threads 2 ;;
            ouroboros_prev)
                [[ -x ${PREV_BIN:-} ]] || die "ouroboros_prev needs PREV_BIN=path to another ouroboros binary"
                BIN=$PREV_BIN start_ouroboros "$v" "$port" "$health" ;;
            *) die "unknown variant $v (known: direct haproxy haproxy_splice ouroboros ouroboros_userspace ouroboros_splice ouroboros_sockmap ouroboros_busy ouroboros_t1 ouroboros_t2 ouroboros_prev)" ;;
        esac
    done
}

# start_haproxy VARIANT PORT [DEFAULTS-LINE]: HAProxy 2.6 in mode tcp, PROXY_THREADS threads,
# pinned to PROXY_CPU
start_haproxy() {
    cat >"$DIR/$1.cfg" <<EOF
global
$( ((PROXY_THREADS > 0)) && echo "    nbthread $PROXY_THREADS")
    maxconn $((IDLE_CONNS + 2000))
defaults
    mode tcp
    timeout connect 5s
    timeout client 1h
    timeout server 1h
${3:-}
frontend fe
    bind 127.0.0.1:$2
    default_backend be
backend be
$HAPROXY_BACKEND
EOF
    taskset -c "$PROXY_CPU" "$HAPROXY" -f "$DIR/$1.cfg" -db >"$DIR/logs/$1.log" 2>&1 &
    PID[$1]=$!
}

start_ouroboros() { # variant port health-port extra-args...
    local v=$1 threads=(--threads "$PROXY_THREADS")
    ouroboros_args "$2" "$3"
    shift 3
    [[ " $* " == *" --threads "* ]] && threads=()
    taskset -c "$PROXY_CPU" "$BIN" --log-level warn "$OURO_SUBCOMMAND" "${threads[@]}" \
        --max-connections $((IDLE_CONNS + 2000)) "${OURO_ARGS[@]}" "$@" >"$DIR/logs/$v.log" 2>&1 &
    PID[$v]=$!
}

url_of() { echo "http://127.0.0.1:${PORT[$1]}"; }

# PIDs whose CPU and memory are charged to a variant (the proxy and its children; none for direct)
pids_of() {
    [[ $1 == direct ]] && return 0
    local p=${PID[$1]}
    echo "$p $(pgrep -P "$p" | xargs)"
}

# check_variants: every variant answers; through a proxy nginx must have seen a PROXY header
check_variants() {
    local v got want threads
    for v in "${VARS[@]}"; do
        got=$("${HELPER[@]}" wait-http "$(url_of "$v")/pp" 10) || die "$v did not come up: $(tail -5 "$DIR/logs/$v.log" 2>/dev/null)"
        if [[ $v == direct ]]; then want=""; else want=127.0.0.1; fi
        [[ $got == "$want" ]] || die "$v: nginx saw PROXY source '$got', expected '$want'"
        threads=""
        [[ $v != direct ]] && threads=", $(awk '/^Threads:/ {print $2}' "/proc/${PID[$v]}/status") threads"
        log "$v up at $(url_of "$v") (PROXY source seen by nginx: '${got:-none}'$threads)"
    done
}

# cpu_limit_prepare: moves each proxy into a cgroup of its own (unlimited until `cpu_limit
# VARIANT on`). Without a writable cpu controller (cgroup v2 with `cpu` delegated, or v1's
# cpu hierarchy) the CPU-limited runs are skipped with a warning.
cpu_limit_prepare() {
    [[ $CPU_LIMIT == 0 ]] && return 0
    local root v d p
    if grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
        CGROUP_V=2 root=/sys/fs/cgroup
        grep -qw cpu "$root/cgroup.subtree_control" || echo +cpu >"$root/cgroup.subtree_control" 2>/dev/null
    else
        CGROUP_V=1 root=/sys/fs/cgroup/cpu
    fi
    for v in "${VARS[@]}"; do
        [[ $v == direct ]] && continue
        d=$root/ouroboros-bench-$$-$v
        if ! mkdir "$d" 2>/dev/null || ! cpu_limit_write "$d" off; then
            log "warning: no writable cgroup cpu controller under $root (not root, or not delegated): skipping the CPU-limited runs; CPU_LIMIT=0 silences this"
            rmdir "$d" 2>/dev/null
            CPU_LIMIT=0
            return 0
        fi
        CGROUP[$v]=$d
        for p in $(pids_of "$v"); do echo "$p" >"$d/cgroup.procs" || die "cannot move $v ($p) into $d"; done
    done
}

cpu_limit_write() { # cgroup-dir on|off
    local q=max
    [[ $2 == on ]] && q=$CPU_QUOTA_US
    if [[ $CGROUP_V == 2 ]]; then
        echo "$q $CFS_PERIOD_US" >"$1/cpu.max"
    else
        [[ $q == max ]] && q=-1
        echo "$CFS_PERIOD_US" >"$1/cpu.cfs_period_us" && echo "$q" >"$1/cpu.cfs_quota_us"
    fi 2>/dev/null
}

cpu_limit() { cpu_limit_write "${CGROUP[$1]}" "$2" || die "cannot set the CPU limit of $1 (${CGROUP[$1]})"; }

per_req() { awk -v d="$1" -v n="$2" 'BEGIN {printf "%.3f", d / n}'; } # total requests
rec() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${4:-}" >>"$RAW"; }
ticks() {
    local pids
    if [[ $1 == direct ]]; then echo 0; return; fi
    read -ra pids <<<"$(pids_of "$1")"
    "${HELPER[@]}" cpu-ticks "${pids[@]}"
}

# write_meta COMMAND LABELS: run metadata for the report; LABELS is "variant=label;..."
write_meta() {
    RAW=$DIR/raw.tsv
    META=$DIR/meta.tsv
    : >"$RAW"
    {
        printf 'date\t%s\n' "$(date -u '+%Y-%m-%d %H:%M UTC')"
        printf 'machine\t%s\n' "$(nproc) × $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), Linux $(uname -r)"
        printf 'ouroboros_rev\t%s\n' "$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null)$(git -C "$REPO" diff --quiet HEAD 2>/dev/null || echo +dirty)"
        printf 'command\t%s\n' "$1"
        printf 'labels\t%s\n' "$2"
        printf 'variants\t%s\n' "$VARIANTS"
        printf 'settings\t%s\n' "ROUNDS=$ROUNDS CPU_LIMIT=$CPU_LIMIT WRK_DURATION=$WRK_DURATION WRK_CONNS=$WRK_CONNS BULK_MB=$BULK_MB BULK_REPEAT=$BULK_REPEAT IDLE_CONNS=$IDLE_CONNS PROXY_CPU=$PROXY_CPU LOAD_CPU=$LOAD_CPU PROXY_THREADS=$PROXY_THREADS NICE=$(nice) SCHED=${SCHED:-other}; $($HAPROXY -v | head -1 | cut -d' ' -f1-3), $($NGINX -v 2>&1 | cut -d' ' -f3), $(wrk --version 2>&1 | head -1 | cut -d' ' -f1-2)"
        printf 'load_start\t%s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
        printf "bulk_mb\t%s\nidle_conns\t%s\nwrk_conns\t%s\ncpu_limit\t%s\n" "$BULK_MB" "$IDLE_CONNS" "$WRK_CONNS" "$CPU_LIMIT"
    } >"$META"
    [[ $(cut -d. -f1 /proc/loadavg) -ge 1 ]] && log "warning: load average $(cut -d' ' -f1-3 /proc/loadavg) — other work on this machine will skew the figures"
    return 0
}

# phase 1: idle memory (fresh proxies, before other phases grow their pools)
idle_phase() {
    local v port out kib alive backend pids
    for v in "${VARS[@]}"; do
        [[ $v == direct ]] && continue
        log "$v: holding $IDLE_CONNS idle keep-alive connections"
        port=$(url_of "$v")
        port=${port##*:}
        read -ra pids <<<"$(pids_of "$v")"
        out=$(taskset -c "$LOAD_CPU" "${HELPER[@]}" idle "$port" "$IDLE_CONNS" "$BACKEND_PP_PORTS" 2 /1k.bin "${pids[@]}") ||
            die "$v: idle-connection phase failed"
        log "$v: $out"
        read -r kib alive backend <<<"$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(d["kib_per_conn"], d["alive"], d["backend_established_delta"])' "$out")"
        rec "$v" idle_kib_per_conn "$kib"
        rec "$v" idle_errors $((IDLE_CONNS - alive + (backend < IDLE_CONNS ? IDLE_CONNS - backend : 0)))
        sleep 1 # let the closes drain before the next variant
    done
}

# warm-up: page cache for the large file, allocator pools, CPU frequency
warm_up() {
    local v
    log "warm-up"
    taskset -c "$LOAD_CPU" curl -s -o /dev/null "$(url_of "${VARS[0]}")/big.bin"
    for v in "${VARS[@]}"; do
        taskset -c "$LOAD_CPU" wrk -t1 -c"$WRK_CONNS" -d2s "$(url_of "$v")/1k.bin" >/dev/null
    done
}

bulk() { # variant round
    local v=$1 url t0 t1 bytes=0 out code size speed
    url=$(url_of "$v")/big.bin
    t0=$(ticks "$v")
    for _ in $(seq "$BULK_REPEAT"); do
        out=$(taskset -c "$LOAD_CPU" curl -s -o /dev/null -w '%{http_code} %{size_download} %{speed_download}' "$url")
        read -r code size speed <<<"$out"
        [[ $code == 200 && $size == "$BIG_BYTES" ]] || { rec "$v" bulk_errors 1; log "$v: bulk download got HTTP $code, $size bytes"; continue; }
        bytes=$((bytes + size))
        rec "$v" bulk_mbps "$(awk -v s="$speed" 'BEGIN {printf "%.1f", s / 1e6}')" "round $2"
    done
    t1=$(ticks "$v")
    if [[ $v != direct ]] && ((bytes > 0)); then
        rec "$v" cpu_s_per_gb "$(awk -v d=$((t1 - t0)) -v hz="$CLK_TCK" -v b="$bytes" 'BEGIN {printf "%.4f", d / hz / (b / 1e9)}')" "round $2"
    fi
    log "$v round $2: bulk $(awk -F'\t' -v v="$v" -v r="round $2" '$1 == v && $2 == "bulk_mbps" && $4 == r {printf "%s ", $3}' "$RAW")MB/s"
}

wrk_run() { # variant mode(ka|close|ka_cap|close_cap) round
    local v=$1 mode=$2 url t0 t1 file rps p99 errors reqs
    url=$(url_of "$v")/1k.bin
    file=$DIR/logs/wrk-$v-$mode-$3.txt
    local hdr=()
    [[ $mode == close* ]] && hdr=(-H 'Connection: close')
    local lb0 lt0 ls0 lb1 lt1 ls1 pb0 pt0 ps0 pb1 pt1 ps1 s0 s1 i0 i1 pids
    read -ra pids <<<"$(pids_of "$v")"
    read -r lb0 lt0 ls0 pb0 pt0 ps0 s0 i0 t0 < <("${HELPER[@]}" snapshot "$LOAD_CPU" "$PROXY_CPU" "${pids[@]}")
    taskset -c "$LOAD_CPU" wrk -t1 -c"$WRK_CONNS" -d"$WRK_DURATION" --latency "${hdr[@]}" "$url" >"$file"
    read -r lb1 lt1 ls1 pb1 pt1 ps1 s1 i1 t1 < <("${HELPER[@]}" snapshot "$LOAD_CPU" "$PROXY_CPU" "${pids[@]}")
    rec "$v" "${mode}_steal" $((100 * (ls1 - ls0 + ps1 - ps0) / (lt1 - lt0 + pt1 - pt0))) "round $3"
    rec "$v" "${mode}_load_busy" $((100 * (lb1 - lb0) / (lt1 - lt0))) "round $3"
    [[ $v != direct ]] && rec "$v" "${mode}_proxy_busy" $((100 * (pb1 - pb0) / (pt1 - pt0))) "round $3"
    read -r rps p99 errors reqs < <("${HELPER[@]}" wrk-parse "$file") || die "cannot parse $file"
    rec "$v" "${mode}_rps" "$rps" "round $3"
    rec "$v" "${mode}_p99_us" "$p99" "round $3"
    rec "$v" "${mode}_errors" "$errors" "round $3"
    local us=$((1000000 / CLK_TCK))
    rec "$v" "${mode}_load_us_per_req" "$(per_req $(((lb1 - lb0) * us)) "$reqs")" "round $3"
    rec "$v" "${mode}_sys_us_per_req" "$(per_req $(((lb1 - lb0 + pb1 - pb0) * us)) "$reqs")" "round $3"
    if [[ $v != direct ]]; then
        rec "$v" "${mode}_cpu_us_per_req" "$(per_req $(((t1 - t0) * us)) "$reqs")" "round $3"
        rec "$v" "${mode}_sleeps_per_req" "$(per_req $((s1 - s0)) "$reqs")" "round $3"
        rec "$v" "${mode}_wake_ipis_per_req" "$(per_req $((i1 - i0)) "$reqs")" "round $3"
    fi
    log "$v round $3 $mode: $rps req/s, p99 ${p99}us, errors $errors"
}

measure_rounds() {
    local r i v order mode
    for ((r = 1; r <= ROUNDS; r++)); do
        # rotate the order each round so no variant always runs first or right after another
        order=()
        for ((i = 0; i < ${#VARS[@]}; i++)); do order+=("${VARS[$(((i + r - 1) % ${#VARS[@]}))]}"); done
        log "round $r/$ROUNDS: ${order[*]}"
        for v in "${order[@]}"; do bulk "$v" "$r"; done
        for v in "${order[@]}"; do wrk_run "$v" ka "$r"; done
        for v in "${order[@]}"; do wrk_run "$v" close "$r"; done
        [[ $CPU_LIMIT == 0 ]] && continue
        for mode in ka_cap close_cap; do
            for v in "${order[@]}"; do
                [[ $v == direct ]] && continue
                cpu_limit "$v" on
                # ouroboros reads its CPU limit every second (`--busy-poll auto` does not spin
                # under one): give it the state a pod started under the limit has from the start
                sleep 1.5
                wrk_run "$v" "$mode" "$r"
                cpu_limit "$v" off
            done
        done
    done
}

# finish: checks nothing died, writes bench/results/$BENCH-<time>.md and prints it
finish() {
    local v stamp result
    for v in "${VARS[@]}"; do
        [[ $v == direct ]] || kill -0 "${PID[$v]}" 2>/dev/null || die "$v exited during the run: $(tail -5 "$DIR/logs/$v.log")"
    done
    printf 'load_end\t%s\n' "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$META"
    [[ -n ${NOTES:-} ]] && printf 'notes\t%s\n' "$NOTES" >>"$META"
    mkdir -p "$REPO/bench/results"
    stamp=$(date -u +%Y%m%dT%H%M%SZ)
    result=$REPO/bench/results/$BENCH-$stamp.md
    "${HELPER[@]}" report "$RAW" "$META" >"$result"
    cp "$RAW" "$REPO/bench/results/$BENCH-$stamp.raw.tsv"
    cat "$result"
    log "written to $result"
}
