#!/usr/bin/env bash
# How many bytes our block costs a Corefile per hostname, by name shape, set size, form
# (--coredns-answer template or view) and address family, and how many names fit the 1 MiB a
# ConfigMap's data may hold and the 0.8 MiB #28 asks for, with the rest of kubeadm's Corefile.
# No CoreDNS runs here (bench/coredns/run.sh measures what the block costs it); every count in
# the "fits" columns is rendered and measured, not extrapolated.
#
# Needs: python3, cargo. Settings (environment): SIZES="1000 10000 30000"
#   OUROBOROS_BIN=(cargo build --release)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
SIZES=${SIZES:-"1000 10000 30000"}
if [[ -z ${OUROBOROS_BIN:-} ]]; then
    (cd "$root" && cargo build --quiet --release --bin ouroboros)
    OUROBOROS_BIN=$root/target/release/ouroboros
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
base=$root/tests/fixtures/corefiles/kubeadm.Corefile

# render SHAPE N FORM FAMILY: the Corefile's size in bytes with the block for N names.
render() {
    local d="$tmp/$1-$2"
    [[ -e $d/ingress.json ]] || { mkdir -p "$d" && SHAPE=$1 python3 "$root/bench/coredns/names.py" "$2" "$d"; }
    local ips=(--proxy-ip 10.96.0.20)
    [[ $4 == dual ]] && ips+=(--proxy-ip fd00:10:96::20)
    "$OUROBOROS_BIN" render coredns --corefile "$base" "${ips[@]}" --coredns-answer "$3" \
        --allow-oversize "$d/ingress.json" 2>/dev/null | wc -c
}

# fits SHAPE FORM FAMILY LIMIT: the most names of SHAPE whose Corefile is at most LIMIT bytes,
# to within 1% (bisection over rendered sizes).
fits() {
    local lo=0 hi=100000 mid
    while ((hi - lo > lo / 100 + 1)); do
        mid=$(((lo + hi) / 2))
        if (($(render "$1" "$mid" "$2" "$3") <= $4)); then lo=$mid; else hi=$mid; fi
    done
    echo "$lo"
}

empty=$(wc -c <"$base")
mib=$((1 << 20))
echo "| shape | form | family | names | Corefile bytes | bytes a name |"
echo "|---|---|---|---:|---:|---:|"
for shape in varied apex; do
    for form in template view; do
        for family in v4 dual; do
            for n in $SIZES; do
                bytes=$(render $shape "$n" $form $family)
                echo "| $shape | $form | $family | $n | $bytes | $(((bytes - empty) / n)) |"
            done
        done
    done
done
echo
echo "| shape | form | family | names in 1 MiB | names in 0.8 MiB |"
echo "|---|---|---|---:|---:|"
for shape in varied apex; do
    for form in template view; do
        for family in v4 dual; do
            echo "| $shape | $form | $family | $(fits $shape $form $family $mib) | $(fits $shape $form $family $((mib * 8 / 10))) |"
        done
    done
done
