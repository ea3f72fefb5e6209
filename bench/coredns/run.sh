#!/usr/bin/env bash
# What our block costs real CoreDNS: queries per second and CPU per query under dnsperf, at
# SIZES varied hostnames, with the block against the same CoreDNS and Corefile without it, in
# the same run; cache warm (`cache 30`, as kubeadm's Corefile) and cold (no cache plugin, every
# query takes the full path), for each of FORMS (--coredns-answer: the template pair, the view
# form's server blocks). Query classes: in-cluster names (answered by `hosts`, which comes after
# `template` in CoreDNS's plugin order, as `kubernetes` does), hairpinned hits, misses in a
# covered zone, other domains under the same public suffixes, and names under a top-level
# domain no name has (all forwarded to a second CoreDNS standing in for the public DNS). Also the
# Go heap in use after the runs, from CoreDNS's metrics.
#
# Needs: CoreDNS from .ci/peers/build.sh, dnsperf (apt-get install dnsperf), python3, cargo.
# CoreDNS runs on CPU 0, dnsperf and the upstream on CPU 1. Not part of CI: see bench/README.md.
#
# Settings (environment): SIZES="1000 10000 30000"  FORMS="template view"
#   DURATION=5 (seconds per dnsperf run)
#   CLIENTS=4 (dnsperf -c)  COREDNS=.ci/peers/bin/coredns  OUROBOROS_BIN=(cargo build, debug:
#   only `render` runs)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
SIZES=${SIZES:-"1000 10000 30000"}
FORMS=${FORMS:-"template view"}
DURATION=${DURATION:-5}
CLIENTS=${CLIENTS:-4}
COREDNS=${COREDNS:-$root/.ci/peers/bin/coredns}

[[ -x $COREDNS ]] || { echo "no CoreDNS at $COREDNS: run .ci/peers/build.sh coredns" >&2; exit 1; }
command -v dnsperf >/dev/null || { echo "dnsperf is missing: apt-get install dnsperf" >&2; exit 1; }
if [[ -z ${OUROBOROS_BIN:-} ]]; then
    (cd "$root" && cargo build --quiet --bin ouroboros)
    OUROBOROS_BIN=$root/target/debug/ouroboros
fi

tmp=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    [[ -n ${KEEP:-} ]] || rm -rf "$tmp"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# The public DNS: every name has an A and an AAAA record.
up_port=$(free_port)
cat >"$tmp/upstream.Corefile" <<EOF
.:$up_port {
    template IN A . {
        answer "{{ .Name }} 60 IN A 198.51.100.7"
    }
    template IN AAAA . {
        answer "{{ .Name }} 60 IN AAAA 2001:db8::7"
    }
}
EOF
taskset -c 1 "$COREDNS" -conf "$tmp/upstream.Corefile" >"$tmp/upstream.log" 2>&1 &
pids+=($!)

clk=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# ready PORT: waits until CoreDNS on PORT answers a query (asked every 20 ms, so the start-up
# time is known to about that: loading the Corefile, compiling every pattern or set).
ready() {
    python3 - "$1" <<'PY' || { echo "CoreDNS on port $1 did not answer" >&2; return 1; }
import socket, sys, time
q = bytes.fromhex("abcd01000001000000000000") + b"\x05probe\x04test\x00\x00\x01\x00\x01"
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(0.02)
deadline = time.time() + 60
while time.time() < deadline:
    s.sendto(q, ("127.0.0.1", int(sys.argv[1])))
    try:
        s.recv(512)
        sys.exit(0)
    except OSError:
        pass
sys.exit(1)
PY
}

# reloaded PORT NAME IP: after SIGUSR1, how long until CoreDNS on PORT answers NAME with IP (asked
# every 10 ms): reading the changed Corefile, building every plugin anew, swapping the servers.
reloaded() {
    python3 - "$@" <<'PY' || { echo "CoreDNS on port $1 did not reload" >&2; return 1; }
import socket, struct, sys, time
port, name, want = int(sys.argv[1]), sys.argv[2], socket.inet_aton(sys.argv[3])
q = bytes.fromhex("abcd01000001000000000000")
q += b"".join(bytes([len(l)]) + l.encode() for l in name.strip(".").split(".")) + b"\0\0\1\0\1"
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(0.01)
start = time.time()
while time.time() < start + 120:
    s.sendto(q, ("127.0.0.1", port))
    try:
        if s.recv(512).endswith(want):
            print(f"{time.time() - start:.3f}")
            sys.exit(0)
    except OSError:
        pass
sys.exit(1)
PY
}

results="$tmp/results.tsv"
printf 'size\tcache\tvariant\tclass\tqps\tcpu_us_per_query\n' >"$results"
heaps="$tmp/heaps.tsv"
: >"$heaps"

for size in $SIZES; do
    d="$tmp/$size"
    mkdir -p "$d"
    python3 "$root/bench/coredns/names.py" "$size" "$d"
    for cache in warm cold; do
        port=$(free_port)
        metrics=$(free_port)
        cache_line=""
        [[ $cache == warm ]] && cache_line="cache 30"
        cat >"$d/base.Corefile" <<EOF
.:$port {
    errors
    hosts $d/cluster-hosts {
        fallthrough
    }
    prometheus 127.0.0.1:$metrics
    forward . 127.0.0.1:$up_port
    $cache_line
    loadbalance
}
EOF
        # --allow-oversize: the template pair's 30,000 names do not fit a ConfigMap, but what
        # they cost CoreDNS is measured all the same.
        for form in $FORMS; do
            "$OUROBOROS_BIN" render coredns --corefile "$d/base.Corefile" --proxy-ip 10.96.0.20 \
                --proxy-ip fd00:10:96::20 --coredns-answer "$form" --allow-oversize \
                "$d/ingress.json" >"$d/$form.Corefile" 2>"$d/render-$form.log"
        done
        for variant in without $FORMS; do
            conf="$d/base.Corefile"
            [[ $variant == without ]] || conf="$d/$variant.Corefile"
            start=$(date +%s.%N)
            taskset -c 0 "$COREDNS" -conf "$conf" >"$d/$variant-$cache.log" 2>&1 &
            pid=$!
            pids+=("$pid")
            ready "$port"
            load_s=$(echo "$(date +%s.%N) - $start" | bc)
            for class in cluster hits covered neighbour outside; do
                # A warm-up pass, then the measured one.
                taskset -c 1 dnsperf -s 127.0.0.1 -p "$port" -d "$d/$class.txt" -l 1 -c "$CLIENTS" >/dev/null 2>&1 || true
                t0=$(cpu_ticks "$pid")
                out=$(taskset -c 1 dnsperf -s 127.0.0.1 -p "$port" -d "$d/$class.txt" -l "$DURATION" -c "$CLIENTS" 2>&1)
                t1=$(cpu_ticks "$pid")
                done_n=$(awk '/Queries completed:/ {print $3}' <<<"$out")
                qps=$(awk '/Queries per second:/ {print $4}' <<<"$out")
                us=$(echo "scale=2; ($t1 - $t0) * 1000000 / $clk / $done_n" | bc)
                printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$size" "$cache" "$variant" "$class" "$qps" "$us" >>"$results"
                echo "size=$size cache=$cache $variant $class: $qps q/s, $us us CPU/query" >&2
            done
            heap=$(curl -s "http://127.0.0.1:$metrics/metrics" | awk '/^go_memstats_heap_inuse_bytes/ {print $2}')
            # The controller changed the block (the proxy moved): SIGUSR1 stands for the reload
            # plugin's poll, and the time is from the signal to the new answer; the peak RSS
            # (VmHWM) after it shows the old and the new config held at once.
            reload_s=-
            if [[ $variant != without ]]; then
                sed -i 's/10\.96\.0\.20/10.96.0.21/' "$conf"
                kill -USR1 "$pid"
                reload_s=$(reloaded "$port" "$(awk 'NR == 1 {print $1}' "$d/hits.txt")" 10.96.0.21)
            fi
            hwm=$(awk '/^VmHWM:/ {print $2 * 1024}' "/proc/$pid/status")
            printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$size" "$cache" "$variant" "$heap" "$load_s" "$reload_s" "$hwm" >>"$heaps"
            kill "$pid"
            wait "$pid" 2>/dev/null || true
        done
        for form in $FORMS; do
            echo "size=$size: Corefile with the $form block $(wc -c <"$d/$form.Corefile") bytes" >&2
        done
    done
done

# The report: each class with the block as a ratio of the same CoreDNS without it.
python3 - "$results" "$heaps" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
key = lambda r: (r["size"], r["cache"], r["class"])
base = {key(r): r for r in rows if r["variant"] == "without"}
print("| names | cache | query class | form | q/s without | q/s with | ratio | CPU µs/query without | with | ratio |")
print("|---:|---|---|---|---:|---:|---:|---:|---:|---:|")
for r in rows:
    if r["variant"] == "without":
        continue
    b = base[key(r)]
    q0, q1 = float(b["qps"]), float(r["qps"])
    c0, c1 = float(b["cpu_us_per_query"]), float(r["cpu_us_per_query"])
    print(f"| {r['size']} | {r['cache']} | {r['class']} | {r['variant']} | {q0:,.0f} | {q1:,.0f} | {q1/q0:.2f} | {c0:.1f} | {c1:.1f} | {c1/c0:.2f} |")
print()
print("| names | cache | form | heap in use without (MiB) | with (MiB) | extra (MiB) | start-up with (s) | reload (s) | peak RSS without (MiB) | with, after the reload (MiB) |")
print("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|")
heaps = {}
for size, cache, variant, heap, load, reload, hwm in csv.reader(open(sys.argv[2]), delimiter="\t"):
    heaps.setdefault((size, cache), {})[variant] = (float(heap), float(load), reload, float(hwm))
for (size, cache), v in heaps.items():
    h0, r0 = v["without"][0] / 2**20, v["without"][3] / 2**20
    for form, (heap, load, reload, hwm) in v.items():
        if form != "without":
            print(f"| {size} | {cache} | {form} | {h0:.1f} | {heap / 2**20:.1f} | {heap / 2**20 - h0:.1f} | {load:.1f} | {reload} | {r0:.0f} | {hwm / 2**20:.0f} |")
PY
