#!/usr/bin/env bash
# The controller's first sync at scale against a mock API (no cluster needed): time from the
# Ingress list to the first Corefile write, and the process RSS after the sync.
# Usage: bench/controller/run.sh [N_INGRESSES]   (default 10000, 3 TLS hosts each)
set -euo pipefail
cd "$(dirname "$0")/../.."
n="${1:-10000}"
cargo build --release --example controller_bench
# Strip OUROBOROS_* so the developer's environment does not change the flags.
for v in $(env | grep -o '^OUROBOROS_[A-Z_]*' || true); do unset "$v"; done
for i in 1 2 3; do
  echo "--- run $i"
  RUST_LOG=warn target/release/examples/controller_bench "$n"
done
