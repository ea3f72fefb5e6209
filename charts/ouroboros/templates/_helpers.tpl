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
*/}}
{{- define "ouroboros.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "ouroboros.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop: [ALL]
{{- end -}}

{{- define "ouroboros.logArgs" -}}
- --log-format={{ .Values.logFormat }}
- --log-level={{ .Values.logLevel }}
{{- end -}}

{{/*
The DNS-target flags controller and cleanup share (DnsArgs), so cleanup finds exactly what the
controller wrote. Call with (dict "root" $ "mode" "coredns").
*/}}
{{- define "ouroboros.dnsArgs" -}}
{{- $v := .root.Values.controller -}}
{{- $ns := .root.Release.Namespace -}}
- --mode={{ .mode }}
{{- if $v.dryRun }}
- --dry-run
{{- end }}
- --proxy-service-name={{ include "ouroboros.proxyServiceName" .root }}
- --proxy-service-namespace={{ $ns }}
{{- if eq .mode "coredns" }}
- --coredns-namespace={{ $v.coredns.namespace }}
- --coredns-configmap={{ $v.coredns.configmap }}
- --coredns-key={{ $v.coredns.key }}
{{- end }}
{{- if eq .mode "coredns-import" }}
- --coredns-import-namespace={{ $v.corednsImport.namespace }}
- --coredns-import-configmap={{ $v.corednsImport.configmap }}
- --coredns-import-key={{ $v.corednsImport.key }}
{{- end }}
{{- if has .mode (list "coredns" "coredns-import") }}
{{- if and $v.nodeLocalDns.enabled (eq $v.corednsAnswer "rewrite") }}
{{- fail "controller.nodeLocalDns.enabled needs controller.corednsAnswer=template: node-local-dns has no kubernetes plugin, so a rewritten cluster name would be forwarded upstream and fail" }}
{{- end }}
- --coredns-answer={{ $v.corednsAnswer }}
{{- if eq $v.corednsAnswer "template" }}
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
{{- if eq .mode "etc-hosts" }}
- --etc-hosts=/host/etc/hosts
{{- range .root.Values.etcHosts.proxyIps }}
- --proxy-ip={{ . }}
{{- end }}
{{- end }}
{{- if eq .mode "external-dns" }}
{{- $x := $v.externalDns }}
- --external-dns-namespace={{ default $ns $x.namespace }}
- --external-dns-output={{ $x.output }}
- --external-dns-record-ttl={{ $x.recordTtl }}
{{- with $x.proxyService }}
- --external-dns-proxy-service={{ . }}
{{- end }}
{{- range $x.proxyIps }}
- --external-dns-proxy-ip={{ . }}
{{- end }}
{{- range $k, $val := $x.labels }}
- --external-dns-label={{ $k }}={{ $val }}
{{- end }}
{{- range $k, $val := $x.annotations }}
- --external-dns-annotation={{ $k }}={{ $val }}
{{- end }}
- --instance={{ default .root.Release.Name $v.instance }}
{{- end }}
{{- end -}}

{{/* Which hostnames, shared by the Deployment and the etc-hosts DaemonSet (HostnameArgs). */}}
{{- define "ouroboros.sourceArgs" -}}
{{- $v := .Values.controller -}}
{{- if $v.gatewayApi }}
- --gateway-api
{{- end }}
{{- with $v.ingressClass }}
- --ingress-class={{ . }}
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
- --resync={{ $v.resync }}
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
