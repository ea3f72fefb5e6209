#!/usr/bin/env bash
# The controller at scale, as its own process against an HTTP fake API (examples/fake_api.rs):
# 10,000 Ingresses with 3 TLS hosts each (labels, annotations with last-applied-configuration,
# managedFields, http paths), paginated at 500. The fake API samples the controller's
# /proc/PID/status and prints: time from the last list page to the first Corefile write, RSS
# and peak (VmHWM) after the sync, writes made by a no-change resync and relist, RSS per churn
# round (1 % of the Ingresses changed per round). See bench/controller/README.md.
#
# Usage: bench/controller/run.sh [N_INGRESSES] [ROUNDS]   (default 10000, 30)
# Environment: BENCH_BIN (the controller binary to run), BENCH_NO_BUILD=1 (skip cargo build).
# Cases (answer form:host names): template:diverse (the default answers, names that differ
# as real ones do: a ~700 KB Corefile, written), template:counted (app-1 ... app-9999: the
# regex folds them, a small Corefile) and rewrite:diverse (a line per name: 2.5 MB, over the
# 1 MiB ConfigMap limit, so the controller refuses it before sending it).
set -euo pipefail
cd "$(dirname "$0")/../.."
n="${1:-10000}"
rounds="${2:-30}"
target="${CARGO_TARGET_DIR:-target}"
# Two builds: the binary without the dev-dependencies' features the example pulls in.
if [ -z "${BENCH_NO_BUILD:-}" ]; then
  cargo build --locked --release --bin ouroboros
  cargo build --locked --release --example fake_api
fi
# BENCH_BIN: another build of the controller (e.g. a copy of an older one, to compare).
bin="${BENCH_BIN:-$target/release/ouroboros}"
# Strip OUROBOROS_* so the developer's environment does not change the flags.
for v in $(env | grep -o '^OUROBOROS_[A-Z_]*' || true); do unset "$v"; done

run() {
  local answer="$1" names="$2" dir
  dir="$(mktemp -d)"
  "$target/release/examples/fake_api" "$dir" --ingresses "$n" --rounds "$rounds" --resync-s 5 --names "$names" \
    >"$dir/report" 2>"$dir/fake_api.log" &
  local api=$!
  for _ in $(seq 1 600); do [ -e "$dir/ready" ] && break; sleep 0.1; done
  [ -e "$dir/ready" ] || { echo "fake API did not start"; cat "$dir/fake_api.log"; exit 1; }
  local extra=()
  if [ "$answer" = rewrite ]; then extra=(--proxy-fqdn ouroboros-proxy.ouroboros.svc.cluster.local.); fi
  RUST_LOG=warn "$bin" controller --kubeconfig "$dir/kubeconfig" \
    --leader-elect=false --cluster-domain cluster.local --proxy-ip 10.96.0.53 \
    --listen-health "" --resync 5s --coredns-answer "$answer" "${extra[@]}" \
    >"$dir/controller.log" 2>&1 &
  local ctl=$!
  echo "$ctl" >"$dir/controller.pid"
  local rc=0
  wait "$api" || rc=$?
  kill "$ctl" 2>/dev/null || true
  wait "$ctl" 2>/dev/null || true
  echo "--- $answer answers, $names names ($n Ingresses)"
  cat "$dir/report"
  if [ "$rc" != 0 ]; then
    echo "fake API failed ($rc):"; cat "$dir/fake_api.log"; tail -20 "$dir/controller.log"; exit 1
  fi
  rm -rf "$dir"
}

# BENCH_CASES: which of these to run (default: all).
for c in ${BENCH_CASES:-template:diverse template:counted rewrite:diverse}; do
  run "${c%%:*}" "${c##*:}"
done
