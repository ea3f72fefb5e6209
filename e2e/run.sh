#!/usr/bin/env bash
# End-to-end check of ouroboros on a throwaway kind cluster. Not run in CI (it needs a container
# engine, kind, network access for images); run it by hand:
#   e2e/run.sh            create the cluster, test, delete the cluster
#   KEEP=1 e2e/run.sh     leave the cluster running for a look around
# Needs: docker (or ENGINE=podman with KIND_EXPERIMENTAL_PROVIDER=podman), kind, kubectl, helm.
#
# The flow: build the image and load it into the cluster; run `ouroboros whoami` as the "ingress
# controller" (it refuses connections without a PROXY header, as ingress-nginx with
# use-proxy-protocol does); install the chart pointing the proxy at it; create an Ingress with a
# TLS host; then check the Corefile block (the `template` pair, no `rewrite name`), what a pod
# gets for each query type of the host (A: exactly the proxy's IPv4 ClusterIPs; AAAA: its IPv6
# ones, or NOERROR with no answer; SOA/TXT: not answered by the block, never from cluster.local),
# that a request from a pod reaches the backend with a PROXY header carrying the pod's own
# address; finally uninstall and check the cleanup hook removed the block.
# docs/coredns-answers.md explains each expected answer and the CoreDNS behaviour behind it.
#
#   E2E_PUBLIC_HOST=example.com e2e/run.sh
#                         also hairpin a real public apex host (needs outbound DNS from the
#                         cluster) and check that its SOA and TXT still come from public DNS and
#                         that the DNS-01 zone walk (cert-manager's) still finds its zone.
set -euo pipefail

CLUSTER=${CLUSTER:-ouroboros-e2e}
IMAGE=${IMAGE:-ouroboros:e2e}
HOST=${HOST:-hairpin.e2e.example}
PUBLIC_HOST=${E2E_PUBLIC_HOST:-}
NS=ouroboros
ENGINE=${ENGINE:-docker}
root=$(cd "$(dirname "$0")/.." && pwd)
ctx="kind-$CLUSTER"
k() { kubectl --context "$ctx" "$@"; }

corefile() { k -n kube-system get configmap coredns -o jsonpath='{.data.Corefile}'; }
block() { corefile | sed -n '/BEGIN ouroboros/,/END ouroboros/p'; }

log() { printf '\n=== %s\n' "$*" >&2; }
fail() { printf '\nFAIL: %s\n' "$*" >&2; exit 1; }

# Retries "$@" every 2s for up to $1 seconds; true once it succeeds.
eventually() {
    local deadline=$((SECONDS + $1))
    shift
    until "$@"; do
        ((SECONDS < deadline)) || return 1
        sleep 2
    done
}

for tool in kind kubectl helm "$ENGINE"; do
    command -v "$tool" >/dev/null || fail "$tool is not installed"
done

cleanup() {
    local rc=$?
    if ((rc != 0)); then
        log "diagnostics"
        k get pods -A -o wide || true
        k -n "$NS" logs deployment/ouroboros-controller --tail=50 || true
        k -n "$NS" logs deployment/ouroboros-proxy --tail=20 || true
        block || true
    fi
    if [[ -z ${KEEP:-} ]]; then
        kind delete cluster --name "$CLUSTER" || true
    else
        echo "cluster kept: kubectl --context $ctx ..." >&2
    fi
    exit "$rc"
}
trap cleanup EXIT

log "cluster"
kind get clusters | grep -qx "$CLUSTER" || kind create cluster --name "$CLUSTER" --wait 120s

log "image"
"$ENGINE" build --file "$root/Containerfile" --tag "$IMAGE" "$root"
if [[ $ENGINE == docker ]]; then
    kind load docker-image "$IMAGE" --name "$CLUSTER"
else
    # kind reads images from docker only; others go through an archive.
    archive=$(mktemp)
    "$ENGINE" save --output "$archive" "$IMAGE"
    kind load image-archive "$archive" --name "$CLUSTER"
    rm -f "$archive"
fi

log "backend: whoami requiring the PROXY protocol"
k create namespace backend --dry-run=client -o yaml | k apply -f -
k apply -f - <<YAML
apiVersion: apps/v1
kind: Deployment
metadata: {name: whoami, namespace: backend}
spec:
  selector: {matchLabels: {app: whoami}}
  template:
    metadata: {labels: {app: whoami}}
    spec:
      containers:
        - name: whoami
          image: $IMAGE
          imagePullPolicy: Never
          args: [whoami, --listen=:8080, --proxy-protocol=required]
          ports: [{containerPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: whoami, namespace: backend}
spec:
  selector: {app: whoami}
  ports:
    - {name: http, port: 80, targetPort: 8080}
    - {name: https, port: 443, targetPort: 8080}
YAML
k -n backend rollout status deployment/whoami --timeout=120s

log "chart"
helm --kube-context "$ctx" upgrade --install ouroboros "$root/charts/ouroboros" \
    --namespace "$NS" --create-namespace --wait --timeout 180s \
    --set image.repository="${IMAGE%:*}" --set image.tag="${IMAGE##*:}" \
    --set image.pullPolicy=Never \
    --set proxy.target.host=whoami.backend.svc.cluster.local \
    --set logFormat=text

ingress_hosts=("$HOST")
if [[ -n $PUBLIC_HOST ]]; then
    ingress_hosts+=("$PUBLIC_HOST")
fi
log "Ingress with TLS hosts: ${ingress_hosts[*]}"
{
    cat <<YAML
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: hairpin, namespace: backend}
spec:
  tls: [{hosts: [$(IFS=,; echo "${ingress_hosts[*]}")]}]
  rules:
YAML
    for h in "${ingress_hosts[@]}"; do
        cat <<YAML
    - host: $h
      http:
        paths:
          - {path: /, pathType: Prefix, backend: {service: {name: whoami, port: {number: 80}}}}
YAML
    done
} | k apply -f -

# The block answers with `template` directives (an A and an AAAA one); `rewrite name` lines are
# the opt-in `--coredns-answer rewrite` form and must not appear with the default.
template_block_present() {
    local b
    b=$(block)
    grep -q '^[[:space:]]*template IN A ' <<<"$b" &&
        grep -q '^[[:space:]]*template IN AAAA ' <<<"$b" &&
        ! grep -q 'rewrite name' <<<"$b"
}
log "Corefile block"
eventually 60 template_block_present || { corefile; fail "no template block for $HOST in the Corefile"; }
block

proxy_ip=$(k -n "$NS" get service ouroboros-proxy -o jsonpath='{.spec.clusterIP}')
[[ -n $proxy_ip ]] || fail "proxy Service has no ClusterIP"
# All the Service's addresses (dual-stack has two), split by family, one per line, sorted: what
# the A and the AAAA template must answer.
read -r -a proxy_ips <<<"$(k -n "$NS" get service ouroboros-proxy -o jsonpath='{.spec.clusterIPs[*]}')"
want_a=$(printf '%s\n' "${proxy_ips[@]}" | grep -v ':' | sort || true)
want_aaaa=$(printf '%s\n' "${proxy_ips[@]}" | grep ':' | sort || true)
echo "proxy ClusterIPs: ${proxy_ips[*]}"

# A client pod that stays up, so its IP can be compared with what the backend saw.
k -n backend delete pod client --ignore-not-found --wait
k -n backend run client --image=curlimages/curl:8.11.1 --restart=Never --command -- sleep 3600
k -n backend wait pod/client --for=condition=Ready --timeout=120s
client_ip=$(k -n backend get pod client -o jsonpath='{.status.podIP}')

log "resolution from a pod (CoreDNS reloads within ~30s)"
resolves_to_proxy() {
    local got
    got=$(k -n backend exec client -- nslookup "$HOST" 2>/dev/null | awk '/^Address: /{print $2}' | tail -n1)
    [[ $got == "$proxy_ip" ]]
}
eventually 90 resolves_to_proxy || fail "$HOST does not resolve to the proxy ($proxy_ip)"
echo "$HOST -> $proxy_ip (proxy Service)"

# A second client for the per-type checks. jessie-dnsutils is the image Kubernetes' own DNS
# conformance tests use: multi-arch, on registry.k8s.io, and it has `dig`, which prints the
# rcode and each section separately (busybox nslookup in the curl image shows neither, and
# cannot ask for SOA or TXT reliably). `dig` does not apply the pod's search path to names with
# a trailing dot, so every query below asks exactly the name written.
k -n backend delete pod dnsutils --ignore-not-found --wait
k -n backend run dnsutils --image=registry.k8s.io/e2e-test-images/jessie-dnsutils:1.7 \
    --restart=Never --command -- sleep 3600
k -n backend wait pod/dnsutils --for=condition=Ready --timeout=120s

dnsq() { k -n backend exec dnsutils -- dig +time=2 +tries=2 "$@"; }
# The rcode (NOERROR, NXDOMAIN, SERVFAIL, ...) of a query.
rcode() { dnsq +noall +comments "$@" | sed -n 's/.*status: \([A-Z]*\),.*/\1/p'; }
# True when TYPE of NAME is answered with exactly the addresses in WANT (one per line, sorted);
# for an empty WANT, when it is NOERROR with an empty answer section (NODATA).
answers_exactly() {
    local type=$1 name=$2 want=$3 out got
    out=$(dnsq +noall +answer "$type" "$name") || return 1
    if [[ -z $want ]]; then
        [[ -z $out && $(rcode "$type" "$name") == NOERROR ]]
        return
    fi
    got=$(awk -v t="$type" '$4 == t {print $5}' <<<"$out" | sort)
    [[ $got == "$want" ]]
}
# The zone cert-manager's DNS-01 solver would use for FQDN (its FindZoneByFqdn): ask SOA for the
# name and each parent in turn, go on up on NXDOMAIN or a CNAME, stop at the first SOA in an
# answer section and print its owner; fail on any other rcode or when nothing is found.
soa_zone_of() {
    local name=$1 out rc zone
    while [[ -n $name ]]; do
        out=$(dnsq +noall +comments +answer SOA "$name") || return 1
        rc=$(sed -n 's/.*status: \([A-Z]*\),.*/\1/p' <<<"$out")
        case $rc in
            NXDOMAIN) ;;
            NOERROR)
                if ! awk '$4 == "CNAME"' <<<"$out" | grep -q .; then
                    zone=$(awk '$4 == "SOA" {print tolower($1); exit}' <<<"$out")
                    if [[ -n $zone ]]; then
                        echo "$zone"
                        return 0
                    fi
                fi
                ;;
            *) return 1 ;;
        esac
        name=${name#*.}
    done
    return 1
}

log "A and AAAA of $HOST: the proxy's ClusterIPs, per family"
eventually 90 answers_exactly A "$HOST." "$want_a" ||
    fail "A $HOST: got [$(dnsq +short A "$HOST." | tr '\n' ' ')], want [${want_a//$'\n'/ }]"
echo "A    $HOST -> ${want_a//$'\n'/ }"
# IPv4-only proxy (kind's default): NOERROR and no answer, so a public AAAA record cannot lead a
# dual-stack client around the proxy. Dual-stack: exactly the IPv6 ClusterIPs.
eventually 30 answers_exactly AAAA "$HOST." "$want_aaaa" ||
    fail "AAAA $HOST: got [$(dnsq +short AAAA "$HOST." | tr '\n' ' ')], want [${want_aaaa//$'\n'/ }] (empty: NOERROR, no answer)"
echo "AAAA $HOST -> ${want_aaaa:-NOERROR, no answer}"

# Every other type of the host must pass the block untouched and reach the rest of the Corefile
# (`forward`). $HOST is under a made-up domain and the cluster may have no outbound DNS, so what
# upstream answers is unknown; instead the host must get the same rcode as a name beside it that
# is not hairpinned, no A/AAAA record (which only the block would add), and nothing from
# cluster.local (what `rewrite name` gives: the kubernetes plugin's NODATA with the cluster.local
# SOA, or before CoreDNS 1.8.4 that SOA as the answer). If you set HOST to a real domain, pick
# one without wildcard records, or the sibling gets answers the host's other types do not.
sibling="not-hairpinned.${HOST#*.}"
passes_through() {
    local type=$1 out
    out=$(dnsq +noall +comments +answer +authority "$type" "$HOST.") || return 1
    if grep -qi 'cluster\.local' <<<"$out"; then
        return 1
    fi
    if awk '$4 == "A" || $4 == "AAAA"' <<<"$out" | grep -q .; then
        return 1
    fi
    [[ $(rcode "$type" "$HOST.") == "$(rcode "$type" "$sibling.")" ]]
}
# The sibling shares the host's template zone, so its A query is the regex-miss path: the
# anchored expression must not match it, and `fallthrough` must hand it on (without it CoreDNS
# fails the query itself: SERVFAIL, NXDOMAIN before 1.9.3). So it must get what a name outside
# every template zone gets. (Without outbound DNS both are SERVFAIL and only the first half of
# this check means anything.)
outside="not-hairpinned.ouroboros-e2e.invalid"
log "A of $sibling (same zone, not hairpinned): not the proxy, handed on like $outside"
sibling_not_hairpinned() {
    local out
    out=$(dnsq +noall +answer A "$sibling.") || return 1
    ! awk '$4 == "A" {print $5}' <<<"$out" | grep -qxF "$proxy_ip" &&
        [[ $(rcode A "$sibling.") == "$(rcode A "$outside.")" ]]
}
eventually 30 sibling_not_hairpinned || fail "A $sibling was answered or failed by the block"
echo "A    $sibling: $(rcode A "$sibling."), as $outside"
for type in SOA TXT; do
    log "$type of $HOST: not answered by the block, not from cluster.local"
    eventually 30 passes_through "$type" || {
        dnsq +noall +comments +answer +authority "$type" "$HOST." || true
        fail "$type $HOST was answered by the block or from cluster.local (or differs from $sibling)"
    }
    echo "$type $HOST: $(rcode "$type" "$HOST."), as $sibling"
done

if [[ -n $PUBLIC_HOST ]]; then
    pub="${PUBLIC_HOST,,}."
    log "public apex host $PUBLIC_HOST: A hairpinned, SOA/TXT from public DNS"
    eventually 90 answers_exactly A "$pub" "$want_a" ||
        fail "A $pub: got [$(dnsq +short A "$pub" | tr '\n' ' ')], want [${want_a//$'\n'/ }]"
    has_public() { # TYPE: an answer record of that type owned by the host itself, none from cluster.local
        local out
        out=$(dnsq +noall +answer +authority "$1" "$pub") || return 1
        ! grep -qi 'cluster\.local' <<<"$out" &&
            awk -v t="$1" -v o="$pub" 'tolower($1) == o && $4 == t' <<<"$out" | grep -q .
    }
    eventually 30 has_public SOA || fail "SOA $pub: no public $pub SOA in the answer section"
    eventually 30 has_public TXT || fail "TXT $pub: no public TXT records in the answer section"
    dnsq +noall +answer SOA "$pub"
    dnsq +noall +answer TXT "$pub"
    # The DNS-01 case: cert-manager walks SOA queries up from _acme-challenge.<host>; a name
    # rewrite makes the apex NODATA and the walk ends in the parent zone.
    zone=$(soa_zone_of "_acme-challenge.$pub" || true)
    [[ $zone == "$pub" ]] || fail "the DNS-01 zone walk from _acme-challenge.$pub found [$zone], want $pub"
    echo "DNS-01 zone of _acme-challenge.$pub: $zone"
fi

log "request through the proxy"
out=$(k -n backend exec client -- curl -sS --max-time 10 "http://$HOST/")
echo "$out"
grep -q "^Proxy: v1 PROXY TCP4 $client_ip:" <<<"$out" || fail "backend did not see a PROXY header from $client_ip"
grep -q "^ClientAddr: $client_ip:" <<<"$out" || fail "backend saw another client address"

log "uninstall: the cleanup hook removes the block"
k -n backend delete pod client --wait=false
helm --kube-context "$ctx" uninstall ouroboros --namespace "$NS" --wait --timeout 180s
if corefile | grep -q "BEGIN ouroboros"; then
    fail "the Corefile block is still there after uninstall"
fi
# And CoreDNS has dropped it: the host no longer resolves to the (deleted) proxy Service.
not_hairpinned() {
    local out
    out=$(dnsq +short A "$HOST.") || return 1
    ! grep -qxF "$proxy_ip" <<<"$out"
}
eventually 120 not_hairpinned || fail "$HOST still resolves to $proxy_ip after uninstall"
k -n backend delete pod dnsutils --wait=false

log "PASS"
