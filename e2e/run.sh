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
# TLS host; then check the Corefile block, that a pod resolves the host to the proxy Service,
# that a request from that pod reaches the backend with a PROXY header carrying the pod's own
# address; finally uninstall and check the cleanup hook removed the block.
set -euo pipefail

CLUSTER=${CLUSTER:-ouroboros-e2e}
IMAGE=${IMAGE:-ouroboros:e2e}
HOST=${HOST:-hairpin.e2e.example}
NS=ouroboros
ENGINE=${ENGINE:-docker}
root=$(cd "$(dirname "$0")/.." && pwd)
ctx="kind-$CLUSTER"
k() { kubectl --context "$ctx" "$@"; }

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

log "Ingress with a TLS host"
k apply -f - <<YAML
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: hairpin, namespace: backend}
spec:
  tls: [{hosts: [$HOST]}]
  rules:
    - host: $HOST
      http:
        paths:
          - {path: /, pathType: Prefix, backend: {service: {name: whoami, port: {number: 80}}}}
YAML

corefile() { k -n kube-system get configmap coredns -o jsonpath='{.data.Corefile}'; }
rewrite_present() { corefile | grep -q "rewrite name $HOST ouroboros-proxy.$NS.svc.cluster.local."; }
log "Corefile block"
eventually 60 rewrite_present || { corefile; fail "no rewrite for $HOST in the Corefile"; }
corefile | sed -n '/BEGIN ouroboros/,/END ouroboros/p'

proxy_ip=$(k -n "$NS" get service ouroboros-proxy -o jsonpath='{.spec.clusterIP}')
[[ -n $proxy_ip ]] || fail "proxy Service has no ClusterIP"

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

log "PASS"
