#!/usr/bin/env bash
# Builds the ouroboros image without a container engine: the release binary, stripped (its debug
# information kept apart in ouroboros.debug), packed with the libraries it loads into a one-layer
# OCI image archive with the Containerfile's settings: user 65532:65532, the binary as the
# entrypoint at /usr/local/bin/ouroboros, no shell, distroless's base files (passwd and group with
# nonroot, the CA bundle, /tmp). No registry is involved: load the archive where the pods run.
#
#   deploy/image.sh [--binary PATH] [--name REF] [--out FILE]
#   ctr -n k8s.io images import target/image/ouroboros.oci.tar      # containerd (kubeadm)
#   k3s ctr images import target/image/ouroboros.oci.tar            # k3s, on each node
#   kind load image-archive target/image/ouroboros.oci.tar          # kind
#
# REF defaults to the chart's default image (ghcr.io/ouroboros-hairpin/ouroboros:<appVersion>), so
# `helm install` with default values uses the archive's image (pullPolicy IfNotPresent).
# --binary takes a release binary already built (else `cargo build --release`).
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/ouroboros/Chart.yaml)
name="ghcr.io/ouroboros-hairpin/ouroboros:$version"
out=""
binary=""
while (($#)); do
    case $1 in
    --binary) binary=$2; shift 2 ;;
    --name) name=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "image.sh: unknown argument $1 (--binary PATH, --name REF, --out FILE)" >&2; exit 64 ;;
    esac
done
target_dir=${CARGO_TARGET_DIR:-target}
if [[ -z $binary ]]; then
    cargo build --release --locked --bin ouroboros
    binary=$target_dir/release/ouroboros
fi
work=$target_dir/image
mkdir -p "$work"
out=${out:-$work/ouroboros.oci.tar}
# The symbols stay (a panic's backtrace names its functions); the DWARF line tables, four fifths
# of the release binary, go to ouroboros.debug, linked by name for gdb and perf.
objcopy --only-keep-debug "$binary" "$work/ouroboros.debug"
objcopy --strip-debug --add-gnu-debuglink="$work/ouroboros.debug" "$binary" "$work/ouroboros"
python3 deploy/oci-image.py --name "$name" --out "$out" --base-files \
    --exe "$work/ouroboros:/usr/local/bin/ouroboros" \
    --user 65532:65532 --entrypoint /usr/local/bin/ouroboros --cmd=--help \
    --port 8080/tcp --port 8443/tcp --port 8081/tcp
echo "image.sh: $name in $out ($(du -h "$out" | cut -f1); binary $(du -h "$work/ouroboros" | cut -f1) stripped)" >&2
