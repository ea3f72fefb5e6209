#!/usr/bin/env bash
# Builds the real peers the tests run against (tests/it/peers): CoreDNS at the newest and the
# oldest supported release, node-local-dns's CoreDNS (node-cache's plugins), etcd, kube-apiserver
# and kube-proxy, from the Go module proxy, pinned by the go.mod/go.sum files beside this script
# (own modules: etcd's and Kubernetes' go.mod files have replace directives, so `go install`
# refuses them). It also takes the CRDs the controller reads or writes (Gateway API's standard
# channel, external-dns's DNSEndpoint, the Traefik, Contour and Istio CRDs whose objects it
# reads hosts from, and Envoy Gateway's ClientTrafficPolicy, whose proxyProtocol it reads) from
# their Go modules, at the versions pinned below, into
# $OUROBOROS_PEERS_DIR/crds/.
#
# Binaries are cached outside the clone, in $OUROBOROS_PEERS_CACHE (default ~/.cache/ouroboros-peers),
# keyed by peer, version, Go version and a hash of the files that pin it, so a warm run takes
# seconds and a version bump rebuilds only that peer. They are linked into $OUROBOROS_PEERS_DIR
# (default .ci/peers/bin, gitignored), where the tests look for them.
#
# A peer that fails to build does not stop the others: its link is replaced by NAME.failed, which
# holds the command that failed and the end of its output, and the tests that need it print that
# (skipped locally, failed under CI=true). The exit status is 0 unless --strict is given.
#
# Usage: .ci/peers/build.sh [--strict] [PEER...]
#   (PEER: coredns coredns-oldest node-cache etcd kube-apiserver kube-proxy kubelet
#    kube-controller-manager kube-scheduler pause crds-gateway-api crds-external-dns crds-traefik
#    crds-contour crds-istio crds-envoy-gateway)
set -euo pipefail

# The CRD modules: the newest release the Go module proxy serves of each.
gateway_api=v1.7.0
external_dns=v0.23.0
traefik=v3.7.13
contour=v1.33.8
istio_api=v1.32.0
envoy_gateway=v1.9.1
here=$(cd "$(dirname "$0")" && pwd)
cache=${OUROBOROS_PEERS_CACHE:-${HOME}/.cache/ouroboros-peers}
bin=${OUROBOROS_PEERS_DIR:-$here/bin}
strict=0
if [[ ${1:-} == --strict ]]; then
    strict=1
    shift
fi

command -v go >/dev/null || {
    echo "peers: no Go toolchain on PATH (/usr/local/go/bin?): the real-peer tests need it to build CoreDNS, etcd and Kubernetes" >&2
    exit 1
}
# Never fetch another toolchain: a pin whose go line is newer than this Go fails at once.
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false
gover=$(go env GOVERSION)
mkdir -p "$cache" "$bin"

# mod_version FILE MODULE: the version FILE requires of MODULE.
mod_version() {
    awk -v m="$2" '$1 == m && $2 ~ /^v/ {print $2; exit} $1 == "require" && $2 == m {print $3; exit}' "$1"
}

# build NAME VERSION DIR OUTPUT -- GO-BUILD-ARGS...: builds into the cache unless a finished
# build with the same key is there, then links bin/NAME to it.
build() {
    local name=$1 version=$2 dir=$3 output=$4
    shift 5
    local key
    key=$(cd "$dir" && cat ./*.mod ./*.sum ./*.go 2>/dev/null | cat - <(printf '%s\n' "$@") | sha256sum | cut -c1-12)
    local out="$cache/$name-$version-$gover-$key"
    rm -f "$bin/$name" "$bin/$name.failed"
    if [[ ! -e $out/.ok ]]; then
        rm -rf "$out"
        mkdir -p "$out"
        echo "peers: building $name $version with $gover (cold: minutes; cached in $out)" >&2
        local start=$SECONDS log="$out/build.log"
        if ! (cd "$dir" && timeout 40m go build -trimpath -o "$out/$output" "$@") >"$log" 2>&1; then
            {
                echo "peer $name $version did not build with $gover:"
                echo "  (cd .ci/peers/$(basename "$dir") && go build -trimpath -o $out/$output $*)"
                tail -n 20 "$log" | sed 's/^/  | /'
            } | tee "$bin/$name.failed" >&2
            return 1
        fi
        echo "peers: built $name $version in $((SECONDS - start)) s" >&2
        touch "$out/.ok"
    fi
    ln -sfn "$out/$output" "$bin/$name"
}

# build_c NAME DIR SOURCE: a static C program (gcc -static) into the cache, keyed by its source,
# linked as bin/NAME.
build_c() {
    local name=$1 dir=$2 source=$3 key
    key=$(sha256sum <"$dir/$source" | cut -c1-12)
    local out="$cache/$name-$key"
    rm -f "$bin/$name" "$bin/$name.failed"
    if [[ ! -e $out/.ok ]]; then
        rm -rf "$out"
        mkdir -p "$out"
        if ! gcc -static -Os -s -o "$out/$name" "$dir/$source" >"$out/build.log" 2>&1; then
            {
                echo "peer $name did not build:"
                echo "  gcc -static -Os -s -o $out/$name .ci/peers/$(basename "$dir")/$source"
                tail -n 20 "$out/build.log" | sed 's/^/  | /'
            } | tee "$bin/$name.failed" >&2
            return 1
        fi
        touch "$out/.ok"
    fi
    ln -sfn "$out/$name" "$bin/$name"
}

# json_field NAME JSON: a string field of `go mod download -json`'s output (one per line, tab
# indented), without needing jq.
json_field() {
    sed -n "s/^[[:space:]]*\"$1\": \"\(.*\)\",\{0,1\}\$/\1/p" <<<"$2" | head -n 1
}

# crds NAME MODULE VERSION SUBDIR [FILE...]: the YAML files of SUBDIR of MODULE@VERSION (all of
# them, or FILEs) into the cache unless already there, then links bin/crds/NAME to that directory.
# A FILE named *.yml (Traefik's spelling) is stored as *.yaml, which is what the tests read.
crds() {
    local name=$1 module=$2 version=$3 sub=$4
    shift 4
    local link="$bin/crds/$name" key
    key=$(printf '%s\n' "$module" "$sub" "$@" | sha256sum | cut -c1-12)
    local out="$cache/crds-$name-$version-$key"
    mkdir -p "$bin/crds"
    rm -f "$link" "$link.failed"
    if [[ ! -e $out/.ok ]]; then
        rm -rf "$out"
        mkdir -p "$out"
        echo "peers: fetching the $name CRDs from $module@$version" >&2
        local log="$out/fetch.log" json dir zip sum
        # Run where no go.mod is above, so the module is fetched on its own. The exit status is
        # not final: see the zip case below.
        json=$(cd "$out" && GOWORK=off timeout 10m go mod download -json "$module@$version" 2>"$log") || true
        printf '%s\n' "$json" >>"$log"
        dir=$(json_field Dir "$json")
        zip=$(json_field Zip "$json")
        sum=$(json_field Sum "$json")
        local ok=0
        if [[ -n $dir ]]; then
            if (($#)); then
                (cd "$dir/$sub" && cp "$@" "$out/") 2>>"$log" && ok=1
            else
                cp "$dir/$sub"/*.yaml "$out/" 2>>"$log" && ok=1
            fi
        elif [[ -n $zip && -n $sum ]]; then
            # A module whose go line is newer than this Go (gateway-api and external-dns ask
            # for 1.27) is downloaded and its zip checked against sum.golang.org (that is what
            # Sum reports), but not unpacked ("requires go >= ..."). Nothing here compiles it:
            # the YAML files are taken from the checked zip.
            local pattern=("$module@$version/$sub/*.yaml")
            if (($#)); then
                pattern=("${@/#/$module@$version/$sub/}")
            fi
            if command -v unzip >/dev/null; then
                unzip -j -o -q "$zip" "${pattern[@]}" -d "$out" >>"$log" 2>&1 && ok=1
            else
                echo "unzip is not installed (apt-get install unzip)" >>"$log"
            fi
        fi
        local f
        for f in "$out"/*.yml; do
            [[ -e $f ]] && mv "$f" "${f%.yml}.yaml"
        done
        if ((ok == 0)) || ! compgen -G "$out/*.yaml" >/dev/null; then
            {
                echo "CRDs $name of $module@$version not fetched:"
                echo "  go mod download -json $module@$version   (then $sub/*.yaml of its Dir or Zip)"
                tail -n 20 "$log" | sed 's/^/  | /'
            } | tee "$link.failed" >&2
            return 1
        fi
        touch "$out/.ok"
    fi
    ln -sfn "$out" "$link"
}

k8s=$(mod_version "$here/kubernetes/go.mod" k8s.io/kubernetes)
k8s_minor=$(cut -d. -f2 <<<"$k8s")
# What /version reports, as upstream's hack/lib/version.sh stamps it.
k8s_ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$k8s -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$k8s_minor -X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/client-go/pkg/version.gitVersion=$k8s"

peer() {
    case $1 in
    coredns)
        build coredns "$(mod_version "$here/coredns/go.mod" github.com/coredns/coredns)" "$here/coredns" coredns -- \
            -ldflags "-s -w" -tags grpcnotrace .
        ;;
    coredns-oldest)
        build coredns-oldest "$(mod_version "$here/coredns/oldest.mod" github.com/coredns/coredns)" "$here/coredns" coredns -- \
            -modfile oldest.mod -ldflags "-s -w" -tags grpcnotrace .
        ;;
    node-cache)
        # node-local-dns's plugin set on its CoreDNS version (node-cache/main.go says why not
        # node-cache itself).
        build node-cache "$(mod_version "$here/node-cache/go.mod" github.com/coredns/coredns)" "$here/node-cache" node-cache -- \
            -ldflags "-s -w" -tags grpcnotrace .
        ;;
    etcd)
        build etcd "$(mod_version "$here/etcd/go.mod" go.etcd.io/etcd/server/v3)" "$here/etcd" etcd -- \
            -ldflags "-s -w" go.etcd.io/etcd/server/v3
        ;;
    kube-apiserver | kube-proxy | kubelet | kube-controller-manager | kube-scheduler)
        # The last three are the real node's (tests/it/node): the same module, so the same pins.
        build "$1" "$k8s" "$here/kubernetes" "$1" -- -pgo=off -ldflags "$k8s_ldflags" "k8s.io/kubernetes/cmd/$1"
        ;;
    pause)
        # The pod sandbox's image (tests/it/node): no registry serves one here, so a static
        # program that sleeps until a signal and reaps its children, from .ci/peers/pause/pause.c.
        build_c pause "$here/pause" pause.c
        ;;
    crds-gateway-api)
        crds gateway-api-standard sigs.k8s.io/gateway-api "$gateway_api" config/crd/standard
        ;;
    crds-external-dns)
        crds external-dns sigs.k8s.io/external-dns "$external_dns" config/crd/standard \
            dnsendpoints.externaldns.k8s.io.yaml
        ;;
    crds-traefik)
        crds traefik github.com/traefik/traefik/v3 "$traefik" docs/content/reference/dynamic-configuration \
            kubernetes-crd-definition-v1.yml
        ;;
    crds-contour)
        crds contour github.com/projectcontour/contour "$contour" examples/contour 01-crds.yaml
        ;;
    crds-istio)
        crds istio istio.io/api "$istio_api" kubernetes customresourcedefinitions.gen.yaml
        ;;
    crds-envoy-gateway)
        # The ClientTrafficPolicy CRD alone, as the gateway-helm chart installs it (a plain file
        # of the CRD subchart, no template in it).
        crds envoy-gateway github.com/envoyproxy/gateway "$envoy_gateway" charts/gateway-helm/charts/crds/crds/generated \
            gateway.envoyproxy.io_clienttrafficpolicies.yaml
        ;;
    *)
        echo "peers: unknown peer $1 (coredns coredns-oldest node-cache etcd kube-apiserver kube-proxy kubelet kube-controller-manager kube-scheduler pause crds-gateway-api crds-external-dns crds-traefik crds-contour crds-istio crds-envoy-gateway)" >&2
        return 2
        ;;
    esac
}

failed=0
peers=("$@")
((${#peers[@]})) || peers=(coredns coredns-oldest node-cache etcd kube-apiserver kube-proxy kubelet kube-controller-manager kube-scheduler pause crds-gateway-api crds-external-dns crds-traefik crds-contour crds-istio crds-envoy-gateway)
for p in "${peers[@]}"; do
    peer "$p" || failed=$((failed + 1))
done
if ((failed)); then
    echo "peers: $failed peer(s) did not build; the tests that need them say which" >&2
    ((strict == 0)) || exit 1
fi
