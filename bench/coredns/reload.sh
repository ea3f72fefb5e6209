#!/usr/bin/env bash
# Peak memory of a CoreDNS reload against the size of our block: for each CoreDNS binary in
# COREDNS_BINS (default: the newest and the oldest tested, from .ci/peers/build.sh), each answer
# form in FORMS and each size in SIZES (varied hostnames from names.py), CoreDNS starts on a
# Corefile with our block, the block's answer changes (the proxy's address, as the controller's
# next write would) and CoreDNS gets SIGUSR1, which reloads as the `reload` plugin does when its
# poll sees a change. Printed per run: the Corefile's bytes, the peak RSS (VmHWM) after start-up
# and after the reload (the old and the new configuration are held at once during a reload), and
# the reload's time (signal to the first answer with the new address). No query load and no
# cache: the block's own cost. Not part of CI: see bench/README.md.
#
# Settings (environment): SIZES="1000 5000 10000 20000 30000" FORMS="template view"
#   COREDNS_BINS=".ci/peers/bin/coredns .ci/peers/bin/coredns-oldest"
#   OUROBOROS_BIN=(cargo build, debug: target/debug/ouroboros)
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
SIZES=${SIZES:-"1000 5000 10000 20000 30000"}
FORMS=${FORMS:-"template view"}
COREDNS_BINS=${COREDNS_BINS:-"$root/.ci/peers/bin/coredns $root/.ci/peers/bin/coredns-oldest"}
if [[ -z ${OUROBOROS_BIN:-} ]]; then
    (cd "$root" && cargo build --quiet --bin ouroboros)
    OUROBOROS_BIN=${CARGO_TARGET_DIR:-$root/target}/debug/ouroboros
fi

tmp=$(mktemp -d)
pid=
cleanup() {
    [[ -z $pid ]] || kill "$pid" 2>/dev/null || true
    [[ -n ${KEEP:-} ]] || rm -rf "$tmp"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# answers PORT NAME IP: seconds until CoreDNS on PORT answers NAME with IP (asked every 10 ms).
answers() {
    python3 - "$@" <<'PY' || { echo "CoreDNS on port $1 never answered $2 with $3" >&2; return 1; }
import socket, sys, time
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

mib() { awk -v k="$2" '$1 == k":" {printf "%.0f", $2 / 1024}' "/proc/$1/status"; }

echo "| CoreDNS | form | names | Corefile bytes | peak RSS after start-up (MiB) | peak RSS after the reload (MiB) | reload (s) |"
echo "|---|---|---:|---:|---:|---:|---:|"
for size in $SIZES; do
    d="$tmp/$size"
    mkdir -p "$d"
    python3 "$root/bench/coredns/names.py" "$size" "$d"
    name=$(awk 'NR == 1 {print $1}' "$d/hits.txt")
    for bin in $COREDNS_BINS; do
        version=$("$bin" -version 2>/dev/null | awk -F- '/CoreDNS-/ {print $2; exit}')
        for form in $FORMS; do
            port=$(free_port)
            cat >"$d/base.Corefile" <<EOF
.:$port {
    errors
    forward . 127.0.0.1:9
    loadbalance
}
EOF
            for ip in 10.96.0.20 10.96.0.21; do
                "$OUROBOROS_BIN" render coredns --corefile "$d/base.Corefile" --proxy-ip "$ip" \
                    --coredns-answer "$form" --allow-oversize "$d/ingress.json" \
                    >"$d/$form-$ip.Corefile" 2>"$d/render.log"
            done
            cp "$d/$form-10.96.0.20.Corefile" "$d/Corefile"
            "$bin" -conf "$d/Corefile" >"$d/coredns.log" 2>&1 &
            pid=$!
            answers "$port" "$name" 10.96.0.20 >/dev/null
            start_peak=$(mib "$pid" VmHWM)
            cp "$d/$form-10.96.0.21.Corefile" "$d/Corefile"
            kill -USR1 "$pid"
            reload_s=$(answers "$port" "$name" 10.96.0.21)
            sleep 1
            reload_peak=$(mib "$pid" VmHWM)
            kill "$pid"
            wait "$pid" 2>/dev/null || true
            pid=
            bytes=$(wc -c <"$d/Corefile")
            echo "| $version | $form | $size | $bytes | $start_peak | $reload_peak | $reload_s |"
        done
    done
done
