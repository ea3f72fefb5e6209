{{/* Names: the release name alone when it already contains the chart name. */}}
{{- define "ouroboros.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "ouroboros.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ouroboros.proxyServiceName" -}}
{{- printf "%s-proxy" (include "ouroboros.fullname" .) -}}
{{- end -}}

{{/*
The proxies the chart renders: the main one (proxy.*, when proxy.enabled) and one per entry of
`proxies`, each resolved into (name, key, fullname, component, labels, p, ingressController,
ipModeService, answer): p is proxy.* with the entry's overrides (values.yaml lists them),
ingressController is networkPolicy.ingressController with the entry's, ipModeService is the
target's ingress controller Service as NAMESPACE/NAME when the controller is given it (to watch
its ipMode with controller.skipProxyIpMode, or to answer with it: see "ouroboros.answer"), else
"", and answer is "ouroboros.answer"'s result. Call with
(dict "root" $ "out" $out): sets $out.proxies (main first) and $out.extras (the entries). Fails on an entry the controller's
--target would refuse or Kubernetes could not name.
*/}}
{{- define "ouroboros.resolveProxies" -}}
{{- $v := .root.Values -}}
{{- $fn := include "ouroboros.fullname" .root -}}
{{- $gatewayApi := include "ouroboros.gatewayApi" .root -}}
{{- $ipMode := $v.controller.skipProxyIpMode -}}
{{- $all := list -}}
{{- if $v.proxy.enabled -}}
{{- $t := $v.proxy.target -}}
{{- $a := include "ouroboros.answer" (dict "key" "proxy" "e" $v.proxy "svcNs" $t.serviceNamespace "svc" $t.serviceName "ipMode" $ipMode) | fromJson -}}
{{- $all = append $all (dict "name" "" "key" "proxy" "fullname" (include "ouroboros.proxyServiceName" .root) "component" "proxy" "labels" (dict) "p" $v.proxy "ingressController" $v.networkPolicy.ingressController "ipModeService" $a.service "answer" $a) -}}
{{- end -}}
{{- $extras := list -}}
{{- $names := dict -}}
{{- $taken := dict -}}
{{- range $k := ($v.controller.ingressClassControllers | default list) }}{{ $_ := set $taken (printf "ingress-class-controller=%s" $k) "controller.ingressClassControllers" }}{{ end -}}
{{- range $i, $e := $v.proxies -}}
{{- $key := printf "proxies[%d]" $i -}}
{{- $n := $e.name -}}
{{- if eq $n "default" -}}
{{- fail (printf "%s.name is default, the controller's name for the main proxy (proxy.*): give the entry another name" $key) -}}
{{- end -}}
{{- if hasKey $names $n -}}
{{- fail (printf "%s.name %s is also the name of %s: every entry of proxies needs a name of its own" $key $n (get $names $n)) -}}
{{- end -}}
{{- $_ := set $names $n $key -}}
{{- $obj := printf "%s-proxy-%s" $fn $n -}}
{{- if gt (len $obj) 63 -}}
{{- fail (printf "%s.name %s is too long: the proxy's Service would be %s, %d characters, and Kubernetes allows 63; use at most %d characters (or a shorter fullnameOverride)" $key $n $obj (len $obj) (sub 63 (len (printf "%s-proxy-" $fn)))) -}}
{{- end -}}
{{- $mapping := list -}}
{{- range $c := (get $e "ingressClasses" | default list) }}{{ $mapping = append $mapping (printf "ingress-class=%s" $c) }}{{ end -}}
{{- range $k := (get $e "ingressClassControllers" | default list) }}{{ $mapping = append $mapping (printf "ingress-class-controller=%s" $k) }}{{ end -}}
{{- range $c := (get $e "gatewayClasses" | default list) }}{{ $mapping = append $mapping (printf "gateway-class=%s" $c) }}{{ end -}}
{{- range $g := (get $e "gateways" | default list) }}{{ $mapping = append $mapping (printf "gateway=%s" $g) }}{{ end -}}
{{- if not $mapping -}}
{{- fail (printf "%s (%s) takes no hostnames: set at least one of ingressClasses, ingressClassControllers, gatewayClasses and gateways (what no entry takes stays with the main proxy)" $key $n) -}}
{{- end -}}
{{- if and (or (get $e "gatewayClasses") (get $e "gateways")) (not $gatewayApi) -}}
{{- fail (printf "%s (%s) maps gatewayClasses or gateways, and the controller reads Gateway-API objects only with controller.gatewayApi=true: set it" $key $n) -}}
{{- end -}}
{{- range $m := $mapping -}}
{{- if hasKey $taken $m -}}
{{- fail (printf "%s and %s (%s) both take %s: each class, IngressClass controller and Gateway goes to one proxy" (get $taken $m) $key $n $m) -}}
{{- end -}}
{{- $_ := set $taken $m (printf "%s (%s)" $key $n) -}}
{{- end -}}
{{- /* proxy.* with the entry's overrides: whole values, then key by key within a group. */ -}}
{{- $p := deepCopy $v.proxy -}}
{{- range $k := list "proxyProtocol" "copyMode" "replicas" "podAnnotations" "podLabels" "nodeSelector" "tolerations" "affinity" "topologySpreadConstraints" "priorityClassName" -}}
{{- if hasKey $e $k }}{{ $_ := set $p $k (index $e $k) }}{{ end -}}
{{- end -}}
{{- range $group := list "resources" "service" -}}
{{- range $k, $val := (get $e $group | default dict) }}{{ $_ := set (index $p $group) $k $val }}{{ end -}}
{{- end -}}
{{- $pdb := get $e "podDisruptionBudget" | default dict -}}
{{- if hasKey $pdb "enabled" }}{{ $_ := set $p.podDisruptionBudget "enabled" (get $pdb "enabled") }}{{ end -}}
{{- if or (hasKey $pdb "minAvailable") (hasKey $pdb "maxUnavailable") -}}
{{- /* Either replaces both of proxy's, so an inherited one never conflicts. */ -}}
{{- $_ := set $p.podDisruptionBudget "minAvailable" (ternary (get $pdb "minAvailable") "" (hasKey $pdb "minAvailable")) -}}
{{- $_ := set $p.podDisruptionBudget "maxUnavailable" (ternary (get $pdb "maxUnavailable") 1 (hasKey $pdb "maxUnavailable")) -}}
{{- end -}}
{{- $min := toString $p.podDisruptionBudget.minAvailable -}}
{{- if and (ne $min "") (ne (toJson $p.podDisruptionBudget.maxUnavailable) "1") -}}
{{- fail (printf "%s.podDisruptionBudget: minAvailable (%s) and maxUnavailable (%v) are both set; a PodDisruptionBudget takes one of them" $key $min $p.podDisruptionBudget.maxUnavailable) -}}
{{- end -}}
{{- $t := get $e "target" | default (dict) -}}
{{- $host := get $t "host" | default "" -}}
{{- $svc := get $t "serviceName" | default "" -}}
{{- $svcNs := get $t "serviceNamespace" | default "" -}}
{{- if and $svc (not $svcNs) -}}
{{- fail (printf "%s.target.serviceName needs %s.target.serviceNamespace; or leave serviceName out to forward to %s.target.host" $key $key $key) -}}
{{- end -}}
{{- if and $svcNs (not $svc) -}}
{{- fail (printf "%s.target.serviceNamespace needs %s.target.serviceName; or leave serviceNamespace out to forward to %s.target.host" $key $key $key) -}}
{{- end -}}
{{- if not (or $host $svc) -}}
{{- fail (printf "%s.target is empty: set host, or serviceName and serviceNamespace (the ingress controller %s forwards to)" $key $n) -}}
{{- end -}}
{{- $_ := set $p "target" (dict "host" $host "serviceName" $svc "serviceNamespace" $svcNs
      "httpPort" (ternary (get $t "httpPort") $v.proxy.target.httpPort (hasKey $t "httpPort"))
      "httpsPort" (ternary (get $t "httpsPort") $v.proxy.target.httpsPort (hasKey $t "httpsPort"))) -}}
{{- $ic := deepCopy $v.networkPolicy.ingressController -}}
{{- range $k, $val := (get (get $e "networkPolicy" | default dict) "ingressController" | default dict) }}{{ $_ := set $ic $k $val }}{{ end -}}
{{- $a := include "ouroboros.answer" (dict "key" $key "e" $e "svcNs" $svcNs "svc" $svc "ipMode" $ipMode) | fromJson -}}
{{- $spec := dict "name" $n "key" $key "fullname" $obj "component" (printf "proxy-%s" $n) "labels" (dict "ouroboros.io/proxy" $n) "p" $p "ingressController" $ic "mapping" $mapping "ipModeService" $a.service "answer" $a -}}
{{- $all = append $all $spec -}}
{{- $extras = append $extras $spec -}}
{{- end -}}
{{- $_ := set .out "proxies" $all -}}
{{- $_ := set .out "extras" $extras -}}
{{- end -}}

{{/*
A target's answer settings (answer, ingressControllerKind, ingressControllerConfig of .e, which
are the entry's own: not inherited from proxy.*), checked as the controller checks them, as JSON:
answer, kind, config; service, the ingress controller Service (.svcNs/.svc) given to the
controller ("" when none: it is given when its ipMode is watched (.ipMode) or when the answer
may be direct); rule, the one object `auto` reads (namespace, name, group, resource; empty
without one; the ingress controller Service itself for kind `probe`, which knocks on it),
which rbac.yaml grants get/list/watch on by name. Call with
(dict "key" "proxy" "e" $entry "svcNs" $ns "svc" $name "ipMode" $bool).
*/}}
{{- define "ouroboros.answer" -}}
{{- $answer := get .e "answer" | default "auto" -}}
{{- $kind := get .e "ingressControllerKind" | default "" -}}
{{- $config := get .e "ingressControllerConfig" | default "" -}}
{{- $kinds := dict "ingress-nginx" (list "" "configmaps") "haproxy" (list "" "configmaps") "cilium" (list "" "configmaps") "traefik" (list "apps" "deployments") "contour" (list "apps" "deployments") "envoy-gateway" (list "gateway.envoyproxy.io" "clienttrafficpolicies") "nginx-gateway-fabric" (list "gateway.nginx.org" "nginxproxies") -}}
{{- $rule := dict -}}
{{- if eq $kind "probe" -}}
{{- if $config -}}
{{- fail (printf "%s.ingressControllerKind probe knocks on the ingress controller Service and reads no configuration object: drop %s.ingressControllerConfig (%s), or name the controller's kind to read that object" .key .key $config) -}}
{{- end -}}
{{- if not (and .svc .svcNs) -}}
{{- fail (printf "%s.ingressControllerKind probe knocks on the ingress controller Service: set %s.target.serviceName and serviceNamespace (a target host names no Service)" .key .key) -}}
{{- end -}}
{{- $rule = dict "namespace" .svcNs "name" .svc "group" "" "resource" "services" -}}
{{- else if or $kind $config -}}
{{- if not (and $kind $config) -}}
{{- fail (printf "%s.ingressControllerKind and %s.ingressControllerConfig go together: the kind says how to read the object the config names (docs/targets.md)" .key .key) -}}
{{- end -}}
{{- if not (hasKey $kinds $kind) -}}
{{- fail (printf "%s.ingressControllerKind %s is not one of %s, or probe" .key $kind (keys $kinds | sortAlpha | join ", ")) -}}
{{- end -}}
{{- $gr := get $kinds $kind -}}
{{- $parts := splitList "/" $config -}}
{{- if and (eq (len $parts) 3) (eq (first $parts) "daemonset") (has $kind (list "traefik" "contour")) -}}
{{- $gr = list "apps" "daemonsets" -}}
{{- $parts = rest $parts -}}
{{- end -}}
{{- if or (ne (len $parts) 2) (not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" (first $parts))) (not (regexMatch "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$" (last $parts))) -}}
{{- fail (printf "%s.ingressControllerConfig %s is not NAMESPACE/NAME%s" .key $config (ternary " (or daemonset/NAMESPACE/NAME)" "" (has $kind (list "traefik" "contour")))) -}}
{{- end -}}
{{- $rule = dict "namespace" (first $parts) "name" (last $parts) "group" (first $gr) "resource" (last $gr) -}}
{{- end -}}
{{- $direct := or (eq $answer "direct") (and (eq $answer "auto") (not (empty $rule))) -}}
{{- if and $direct (not (and .svc .svcNs)) -}}
{{- fail (printf "%s.answer %s may answer with the ingress controller Service's ClusterIPs: set %s.target.serviceName and serviceNamespace (a target host names no Service), or set %s.answer to relay" .key $answer .key .key) -}}
{{- end -}}
{{- $service := "" -}}
{{- if and .svc .svcNs (or .ipMode $direct) }}{{ $service = printf "%s/%s" .svcNs .svc }}{{ end -}}
{{- toJson (dict "answer" $answer "kind" $kind "config" $config "service" $service "rule" $rule) -}}
{{- end -}}

{{/* Labels. Call with (dict "root" $ "component" "proxy"). */}}
{{- define "ouroboros.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ouroboros.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "ouroboros.labels" -}}
{{ include "ouroboros.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Labels of one proxy's objects: px is an entry of "ouroboros.resolveProxies". Call with (dict "root" $ "px" $px). */}}
{{- define "ouroboros.proxyLabels" -}}
{{ include "ouroboros.labels" (dict "root" .root "component" .px.component) }}
{{- with .px.labels }}
{{ toYaml . | trim }}
{{- end }}
{{- end -}}

{{- define "ouroboros.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/*
Hardened defaults for every container but the etc-hosts and edge ones. Every pod also sets
enableServiceLinks: false: the Service <release>-proxy would otherwise inject
OUROBOROS_PROXY_* variables, the environment namespace of the proxy's flags.
The controller, proxy and cleanup pods take podSecurityContext / securityContext on top: each
key set there replaces the chart's (a whole key: capabilities replaces capabilities).
*/}}
{{- define "ouroboros.podSecurityContext" -}}
{{- $d := dict "runAsNonRoot" true "runAsUser" 65532 "runAsGroup" 65532 "fsGroup" 65532 "seccompProfile" (dict "type" "RuntimeDefault") -}}
{{- range $k, $v := .Values.podSecurityContext }}{{ $_ := set $d $k $v }}{{ end -}}
{{- toYaml $d -}}
{{- end -}}

{{- define "ouroboros.containerSecurityContextDefaults" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop: [ALL]
{{- end -}}

{{- define "ouroboros.containerSecurityContext" -}}
{{- include "ouroboros.relaySecurityContext" (dict "root" . "copyMode" "") -}}
{{- end -}}

{{/*
A proxy container's securityContext: the same, and with copyMode sockmap (the kernel relay,
src/relay/sockmap.rs) root with CAP_BPF and CAP_NET_ADMIN added, every other capability still
dropped. Root because Kubernetes sets no ambient capabilities: added ones reach the effective
set of a root process only (the binary has no file capabilities), so user 65532 would start
without them and fall back to auto. Group 65532 and fsGroup stay; securityContext keys still
replace the chart's last. Call with (dict "root" $ "copyMode" MODE).
*/}}
{{- define "ouroboros.relaySecurityContext" -}}
{{- $d := include "ouroboros.containerSecurityContextDefaults" .root | fromYaml -}}
{{- if eq .copyMode "sockmap" -}}
{{- $_ := set $d "runAsUser" 0 -}}
{{- $_ := set $d "runAsNonRoot" false -}}
{{- $_ := set $d "capabilities" (dict "drop" (list "ALL") "add" (list "BPF" "NET_ADMIN")) -}}
{{- end -}}
{{- range $k, $v := .root.Values.securityContext }}{{ $_ := set $d $k $v }}{{ end -}}
{{- toYaml $d -}}
{{- end -}}

{{/* Name of the controller Deployment's ServiceAccount. */}}
{{- define "ouroboros.controllerServiceAccount" -}}
{{- default (printf "%s-controller" (include "ouroboros.fullname" .)) .Values.serviceAccount.name -}}
{{- end -}}

{{/*
The controller Deployment's mode, empty when it is not rendered. controller.mode empty means
coredns, except with etcHosts.enabled: then the etc-hosts DaemonSet replaces the Deployment (as
in the reference chart); an explicit controller.mode runs both.
*/}}
{{- define "ouroboros.controllerMode" -}}
{{- $c := .Values.controller -}}
{{- if and $c.enabled (or $c.mode (not .Values.etcHosts.enabled)) -}}
{{- default "coredns" $c.mode -}}
{{- end -}}
{{- end -}}

{{/* controller.gatewayApi, or the reference chart's controller.gatewayApi.enabled: "true" or "". */}}
{{- define "ouroboros.gatewayApi" -}}
{{- $g := .Values.controller.gatewayApi -}}
{{- if kindIs "map" $g -}}
{{- if $g.enabled }}true{{ end -}}
{{- else if $g -}}
true
{{- end -}}
{{- end -}}

{{/*
Keys of the reference tool's chart (lexfrei/ouroboros) and the keys of this chart they set.
"ouroboros.compat" copies each old key that is set onto its new key; NOTES.txt prints one
deprecation line per old key present. An old key counts as set unless null or an empty string,
list or map (the reference chart's "unset"). default: the new key's default in values.yaml (a new
key away from it counts as set; tests/it/chart/ checks they agree). convert: list (one IP to a
list), output (crd is dnsendpoint), seconds (a duration to whole seconds), trimDot (drop a
trailing dot). mode: applies only when the controller Deployment runs in that mode, as in the
reference chart. controller.gatewayApi.enabled is read by "ouroboros.gatewayApi".
*/}}
{{- define "ouroboros.aliases" -}}
- {old: controller.replicaCount, new: controller.replicas, default: 1}
- {old: controller.clusterDomain, new: clusterDomain, default: "", convert: trimDot}
- {old: controller.logLevel, new: logLevel, default: info}
- {old: controller.coredns.cleanupOnUninstall, new: controller.cleanupOnUninstall, default: true, mode: coredns}
- {old: controller.corednsImport.cleanupOnUninstall, new: controller.cleanupOnUninstall, default: true, mode: coredns-import}
- {old: externalDns.cleanupOnUninstall, new: controller.cleanupOnUninstall, default: true, mode: external-dns}
- {old: externalDns.namespace, new: controller.externalDns.namespace, default: ""}
- {old: externalDns.recordTTL, new: controller.externalDns.recordTtl, default: 60}
- {old: externalDns.output, new: controller.externalDns.output, default: dnsendpoint, convert: output}
- {old: externalDns.annotationPrefix, new: controller.externalDns.annotationPrefix, default: ""}
- {old: externalDns.proxyIP, new: controller.externalDns.proxyIps, default: [], convert: list}
- {old: externalDns.proxyService, new: controller.externalDns.proxyService, default: ""}
- {old: externalDns.annotations, new: controller.externalDns.annotations, default: {}}
- {old: externalDns.labels, new: controller.externalDns.labels, default: {}}
- {old: etcHosts.hostsPath, new: etcHosts.hostPath, default: /etc/hosts}
- {old: etcHosts.proxyIP, new: etcHosts.proxyIps, default: [], convert: list}
- {old: proxy.replicaCount, new: proxy.replicas, default: 2}
- {old: proxy.target.namespace, new: proxy.target.serviceNamespace, default: ""}
- {old: proxy.shutdownGrace, new: proxy.shutdownGraceSeconds, default: 30, convert: seconds}
- {old: podDisruptionBudget.enabled, new: proxy.podDisruptionBudget.enabled, default: true}
- {old: podDisruptionBudget.minAvailable, new: proxy.podDisruptionBudget.minAvailable, default: ""}
- {old: podDisruptionBudget.maxUnavailable, new: proxy.podDisruptionBudget.maxUnavailable, default: 1}
- {old: networkPolicy.ingress.from, new: networkPolicy.from, default: [{namespaceSelector: {}}]}
{{- end -}}

{{/* Keys of the reference chart with nothing to set here, and why ignoring them is harmless. */}}
{{- define "ouroboros.ignoredKeys" -}}
- {key: controller.cleanupHookImage, why: "the uninstall hook runs `ouroboros cleanup` from image.*, so no kubectl image is pulled"}
- {key: externalDns.cleanupHookImage, why: "the uninstall hook runs `ouroboros cleanup` from image.*, so no kubectl image is pulled"}
- {key: terminationGracePeriodSeconds, why: "each pod's grace period follows its own shutdown (the proxy's is proxy.shutdownDelaySeconds + proxy.shutdownGraceSeconds + 5)"}
{{- end -}}

{{/*
Applies "ouroboros.aliases" to .Values, which is this template's own copy: every template
includes it first (a test checks). Idempotent. Fails when an old key and its new key are both
set to different values.
*/}}
{{- define "ouroboros.compat" -}}
{{- $values := .Values -}}
{{- /* The binary's mode name, which the schema takes so that this message, not the schema's
list of values, says where the etc-hosts mode is. */ -}}
{{- if eq (toString $values.controller.mode) "etc-hosts" -}}
{{- fail "controller.mode=etc-hosts: the etc-hosts mode writes each node's hosts file, so it runs as a DaemonSet, not in the controller Deployment: set etcHosts.enabled=true instead (with controller.mode empty the DaemonSet replaces the controller; with controller.mode set, both run)" -}}
{{- end -}}
{{- $mode := include "ouroboros.controllerMode" . -}}
{{- range $a := include "ouroboros.aliases" . | fromYamlArray -}}
{{- $cur := $values -}}
{{- $found := true -}}
{{- range $k := splitList "." $a.old -}}
{{- if and $found (kindIs "map" $cur) (hasKey $cur $k) -}}
{{- $cur = index $cur $k -}}
{{- else -}}
{{- $found = false -}}
{{- end -}}
{{- end -}}
{{- $set := and $found (not (kindIs "invalid" $cur)) -}}
{{- if and $set (or (kindIs "string" $cur) (kindIs "slice" $cur) (kindIs "map" $cur)) -}}
{{- $set = not (empty $cur) -}}
{{- end -}}
{{- if and $set $a.mode (ne $a.mode $mode) -}}
{{- $set = false -}}
{{- end -}}
{{- if $set -}}
{{- $new := $cur -}}
{{- $convert := default "" $a.convert -}}
{{- if eq $convert "list" -}}
{{- $new = list $cur -}}
{{- else if eq $convert "output" -}}
{{- $new = ternary "dnsendpoint" $cur (eq $cur "crd") -}}
{{- else if eq $convert "trimDot" -}}
{{- $new = trimSuffix "." $cur -}}
{{- else if eq $convert "seconds" -}}
{{- $new = include "ouroboros.durationSeconds" $cur | atoi -}}
{{- end -}}
{{- $keys := splitList "." $a.new -}}
{{- $parent := $values -}}
{{- range $k := initial $keys -}}
{{- $parent = index $parent $k -}}
{{- end -}}
{{- $now := index $parent (last $keys) -}}
{{- if and (ne (toJson $now) (toJson $a.default)) (ne (toJson $now) (toJson $new)) -}}
{{- fail (printf "%s (%s) and %s (%s) are both set: %s is the reference chart's name for %s; keep only %s" $a.old (toJson $cur) $a.new (toJson $now) $a.old $a.new $a.new) -}}
{{- end -}}
{{- $_ := set $parent (last $keys) $new -}}
{{- end -}}
{{- end -}}
{{- /* proxy.target.namespace: the reference chart's target rules. A host set there wins over
serviceName/namespace; else serviceName defaults to ingress-nginx-controller. */ -}}
{{- $t := $values.proxy.target -}}
{{- if and (hasKey $t "namespace") $t.namespace -}}
{{- if and $t.host (ne $t.host "ingress-nginx-controller.ingress-nginx.svc.cluster.local") -}}
{{- $_ := set $t "serviceName" "" -}}
{{- $_ := set $t "serviceNamespace" "" -}}
{{- else if not $t.serviceName -}}
{{- $_ := set $t "serviceName" "ingress-nginx-controller" -}}
{{- end -}}
{{- end -}}
{{- with $values.image.repository -}}
{{- if or (eq . "ghcr.io/lexfrei/ouroboros") (hasSuffix "/lexfrei/ouroboros" .) -}}
{{- fail (printf "image.repository %s is the reference tool's image, which does not take this chart's arguments: drop image.repository and image.tag from your values (this chart's default is its own image)" .) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A duration of whole hours, minutes and seconds (1m30s) in seconds. */}}
{{- define "ouroboros.durationSeconds" -}}
{{- $s := 0 -}}
{{- range regexFindAll "[0-9]+[hms]" . -1 -}}
{{- $unit := regexFind "[hms]$" . -}}
{{- $n := trimSuffix $unit . | atoi -}}
{{- $s = add $s (mul $n (get (dict "h" 3600 "m" 60 "s" 1) $unit)) -}}
{{- end -}}
{{- $s -}}
{{- end -}}

{{/* NOTES.txt: one line per key of the reference chart in the values. */}}
{{- define "ouroboros.compatNotes" -}}
{{- $values := .Values -}}
{{- $lines := list -}}
{{- if kindIs "map" $values.controller.gatewayApi -}}
{{- $lines = append $lines "`controller.gatewayApi.enabled` is deprecated: use `controller.gatewayApi`" -}}
{{- end -}}
{{- range $a := include "ouroboros.aliases" . | fromYamlArray -}}
{{- if include "ouroboros.present" (dict "values" $values "path" $a.old) -}}
{{- $lines = append $lines (printf "`%s` is deprecated: use `%s`" $a.old $a.new) -}}
{{- end -}}
{{- end -}}
{{- range $i := include "ouroboros.ignoredKeys" . | fromYamlArray -}}
{{- if include "ouroboros.present" (dict "values" $values "path" $i.key) -}}
{{- $lines = append $lines (printf "`%s` is ignored: %s" $i.key $i.why) -}}
{{- end -}}
{{- end -}}
{{- join "\n" $lines -}}
{{- end -}}

{{/* "true" when the dotted path is in the values and not null. Call with (dict "values" .Values "path" "a.b"). */}}
{{- define "ouroboros.present" -}}
{{- $cur := .values -}}
{{- $found := true -}}
{{- range $k := splitList "." .path -}}
{{- if and $found (kindIs "map" $cur) (hasKey $cur $k) -}}
{{- $cur = index $cur $k -}}
{{- else -}}
{{- $found = false -}}
{{- end -}}
{{- end -}}
{{- if and $found (not (kindIs "invalid" $cur)) }}true{{ end -}}
{{- end -}}

{{- define "ouroboros.logArgs" -}}
- --log-format={{ .Values.logFormat }}
- --log-level={{ .Values.logLevel }}
{{- end -}}

{{/*
The DNS-target flags controller and cleanup share (DnsArgs), so cleanup finds exactly what the
controller wrote: those of every mode, the mode's own (its define in _modes.tpl) and, for the
modes that write CoreDNS's configuration, the CoreDNS ones. Call with (dict "root" $ "mode"
"coredns").
*/}}
{{- define "ouroboros.dnsArgs" -}}
{{- $v := .root.Values.controller -}}
{{- $ns := .root.Release.Namespace -}}
{{- $spec := include "ouroboros.mode" . | fromJson -}}
- --mode={{ .mode }}
{{- if $v.dryRun }}
- --dry-run
{{- end }}
- --proxy-service-name={{ include "ouroboros.proxyServiceName" .root }}
- --proxy-service-namespace={{ $ns }}
{{- range $spec.args }}
- {{ . }}
{{- end }}
{{- with $spec.refuses }}
{{- fail . }}
{{- end }}
{{- if $spec.editsCoredns }}
{{- if and $v.nodeLocalDns.enabled (eq $v.corednsAnswer "rewrite") }}
{{- fail "controller.nodeLocalDns.enabled needs controller.corednsAnswer=auto, template or view (node-local-dns then gets the template pair): node-local-dns has no kubernetes plugin, so a rewritten cluster name would be forwarded upstream and fail" }}
{{- end }}
- --coredns-answer={{ $v.corednsAnswer }}
{{- if and (eq $v.corednsAnswer "auto") $v.corednsVersion }}
- --coredns-version={{ $v.corednsVersion }}
{{- end }}
{{- if has $v.corednsAnswer (list "auto" "template" "view") }}
{{- range $v.proxyIps }}
- --proxy-ip={{ . }}
{{- end }}
{{- else if $v.proxyFqdn }}
- --proxy-fqdn={{ $v.proxyFqdn }}
{{- end }}
{{- if $v.nodeLocalDns.enabled }}
- --node-local-dns=true
{{- end }}
- --node-local-dns-namespace={{ $v.nodeLocalDns.namespace }}
- --node-local-dns-configmap={{ $v.nodeLocalDns.configmap }}
{{- end }}
{{- end -}}

{{/* Which hostnames, shared by the Deployment and the etc-hosts DaemonSet (HostnameArgs). */}}
{{- define "ouroboros.sourceArgs" -}}
{{- $v := .Values.controller -}}
{{- /* One named target per entry of proxies; everything else stays with the main proxy. Here,
not with the DNS-target flags: removing what was written (cleanup) needs no target and watches
no ingress controller. A target whose ingress controller is a Service names it, so that its
load-balancer ipMode is watched (KEP-1860); rbac.yaml grants that. */}}
{{- $proxies := dict }}
{{- $_ := include "ouroboros.resolveProxies" (dict "root" . "out" $proxies) }}
{{- range $proxies.proxies }}
{{- if eq .name "" }}
{{- with .ipModeService }}
- --ingress-controller-service={{ . }}
{{- end }}
{{- if ne .answer.answer "auto" }}
- --answer={{ .answer.answer }}
{{- end }}
{{- if .answer.kind }}
- --ingress-controller-kind={{ .answer.kind }}
{{- with .answer.config }}
- --ingress-controller-config={{ . }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- range $proxies.extras }}
- --target=name={{ .name }},service={{ $.Release.Namespace }}/{{ .fullname }},{{ join "," .mapping }}{{ with .ipModeService }},ingress-controller={{ . }}{{ end }}{{ if ne .answer.answer "auto" }},answer={{ .answer.answer }}{{ end }}{{ with .answer.kind }},ingress-controller-kind={{ . }}{{ end }}{{ with .answer.config }},ingress-controller-config={{ . }}{{ end }}
{{- end }}
{{- if not $v.skipProxyIpMode }}
- --skip-proxy-ipmode=false
{{- end }}
{{- if include "ouroboros.gatewayApi" . }}
- --gateway-api
{{- end }}
{{- if $v.traefikIngressRoutes }}
- --traefik-ingressroutes
{{- end }}
{{- if $v.contourHttpProxies }}
- --contour-httpproxies
{{- end }}
{{- if $v.istioGateways }}
- --istio-gateways
{{- end }}
{{- with $v.ingressClass }}
- --ingress-class={{ . }}
{{- end }}
{{- range $v.ingressClassControllers }}
- --ingress-class-controller={{ . }}
{{- end }}
{{- with $v.gatewayClass }}
- --gateway-class={{ . }}
{{- end }}
{{- with .Values.clusterDomain }}
- --cluster-domain={{ . }}
{{- end }}
{{- range $v.allowDomains }}
- --allow-domain={{ . }}
{{- end }}
{{- range $v.denyDomains }}
- --deny-domain={{ . }}
{{- end }}
{{- if ne $v.ingressHosts "tls" }}
- --ingress-hosts={{ $v.ingressHosts }}
{{- end }}
{{- range $v.includeNamespaces }}
- --include-namespace={{ . }}
{{- end }}
{{- range $v.excludeNamespaces }}
- --exclude-namespace={{ . }}
{{- end }}
- --resync={{ $v.resync }}
- --watch-idle-timeout={{ $v.watchIdleTimeout }}
- --source-discovery-interval={{ $v.sourceDiscoveryInterval }}
- --removal-guard-share={{ $v.removalGuard.share }}
- --removal-guard-min={{ $v.removalGuard.min }}
- --removal-guard-hold={{ $v.removalGuard.hold }}
- --debounce={{ $v.debounce }}
- --listen-health=:{{ $v.healthPort }}
{{- end -}}

{{/* The external-dns proxy Service the controller reads, when it reads one. */}}
{{- define "ouroboros.externalDnsProxyService" -}}
{{- default (include "ouroboros.proxyServiceName" .) .Values.controller.externalDns.proxyService -}}
{{- end -}}

{{- define "ouroboros.leaderElect" -}}
{{- if .Values.controller.leaderElect }}true{{ end -}}
{{- end -}}

{{- define "ouroboros.leaseName" -}}
{{- default (printf "%s-controller" (include "ouroboros.fullname" .)) .Values.controller.leaseName -}}
{{- end -}}
