#!/usr/bin/env bash
# Time-to-hairpin on the real node (tests/it/node/bench.rs), with the kubelet's and CoreDNS's
# default settings: SAMPLES new Ingresses (default 10), each timed from `kubectl apply` to the
# client pod's first request through our proxy and to every CoreDNS replica answering the proxy.
# Prints each sample, then the median and the maximum of both; the samples go to
# bench/results/node-time-to-hairpin-<time>.tsv. About a minute per sample.
#   bench/node/run.sh [SAMPLES]
#   OUROBOROS_BENCH_TUNED=1 bench/node/run.sh    # kubelet syncFrequency 10s, CoreDNS reload 5s 2s
set -euo pipefail
cd "$(dirname "$0")/../.."
samples=${1:-10}
bash .ci/tools.sh
bash .ci/peers/build.sh --strict
bash deploy/image.sh
mkdir -p bench/results
out=bench/results/node-time-to-hairpin-$(date -u +%Y%m%dT%H%M%SZ).tsv
CI=true OUROBOROS_BENCH_SAMPLES=$samples OUROBOROS_BENCH_TUNED=${OUROBOROS_BENCH_TUNED:-0} cargo test --locked --test it node::bench::time_to_hairpin \
    -- --ignored --exact --nocapture | tee "$out.log"
grep -E $'^[0-9]+\t' "$out.log" >"$out"
# stat COLUMN: the median and the maximum of one column of the samples.
stat() {
    cut -f"$1" "$out" | sort -n | awk '{v[NR] = $1} END {
        m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf "median %.1f s, max %.1f s (%d samples)\n", m, v[NR], NR }'
}
echo "first success:  $(stat 3)"
echo "every replica:  $(stat 4)"
