{{- /*
The DNS modes, one define each: what the chart renders that differs by mode, in one place, as the
binary has one module per mode (src/dns/mode/). "ouroboros.mode" reads a mode's define; the
templates (the flags, the Roles, the cleanup hook, the alerts, the proxy checks) ask it rather
than naming modes. A mode's define returns JSON of:
  editsCoredns   it writes CoreDNS's configuration (a Corefile block or an imported snippet): the
                 flags and Role of node-local-dns, the alerts on the block, follow it
  editsCorefile  it edits the Corefile itself (the revert alerts follow it)
  configmap      `-n NS configmap NAME` of the ConfigMap it writes, for the alerts' runbooks
  args           its own flags (beside those of every mode and, editsCoredns, the CoreDNS ones)
  refuses        why its values cannot work, when they cannot ("" else); "ouroboros.dnsArgs" fails
                 with it
  reads          the proxy Service it reads for the answers ("service": "" when the addresses
                 are given, "verbs"), {} when it reads none
  withoutProxy   with proxy.enabled=false, the values it then needs and lacks ("" when none)
  writeRoles     its Roles ({suffix, namespace, rules}), kept equal to
                 ouroboros::controller::rbac::required by tests/it/chart/
  removal        the cleanup hook's Role ({namespace, rules}), kept equal to
                 ouroboros::controller::rbac::cleanup_required
etc-hosts runs as its own DaemonSet (etc-hosts.yaml, with its RBAC in rbac.yaml), never as
controller.mode: its define has only the flags.
*/}}

{{/* A mode's facts (above) for (dict "root" $ "mode" MODE); {} when the mode is empty. */}}
{{- define "ouroboros.mode" -}}
{{- if .mode -}}
{{- include (printf "ouroboros.mode.%s" .mode) .root -}}
{{- else -}}
{}
{{- end -}}
{{- end -}}

{{- define "ouroboros.mode.coredns" -}}
{{- $c := .Values.controller -}}
{{- $rules := list
      (dict "apiGroups" (list "") "resources" (list "configmaps") "resourceNames" (list $c.coredns.configmap) "verbs" (list "get" "list" "watch" "update")) -}}
{{- /* The Deployment `coredns` (get only, that one Deployment): its container's memory limit,
which no Corefile whose reload would exceed it is written under, and for corednsAnswer=auto its
image tag's version. */ -}}
{{- $rules = append $rules (dict "apiGroups" (list "apps") "resources" (list "deployments") "resourceNames" (list "coredns") "verbs" (list "get")) -}}
{{- $roles := list (dict "suffix" "coredns" "namespace" $c.coredns.namespace "rules" $rules) -}}
{{- /* Without node-local-dns, its ConfigMap is looked up (get only) to warn that it bypasses
the block. */ -}}
{{- if not $c.nodeLocalDns.enabled -}}
{{- $roles = append $roles (dict "suffix" "node-local-dns" "namespace" $c.nodeLocalDns.namespace "rules" (list
      (dict "apiGroups" (list "") "resources" (list "configmaps") "resourceNames" (list $c.nodeLocalDns.configmap) "verbs" (list "get")))) -}}
{{- end -}}
{{- dict
    "editsCoredns" true
    "editsCorefile" true
    "configmap" (printf "-n %s configmap %s" $c.coredns.namespace $c.coredns.configmap)
    "args" (list
      (printf "--coredns-namespace=%s" $c.coredns.namespace)
      (printf "--coredns-configmap=%s" $c.coredns.configmap)
      (printf "--coredns-key=%s" $c.coredns.key))
    "reads" (include "ouroboros.corednsReads" . | fromJson)
    "withoutProxy" (include "ouroboros.corednsWithoutProxy" .)
    "writeRoles" $roles
    "removal" (dict "namespace" $c.coredns.namespace "rules" (list
      (dict "apiGroups" (list "") "resources" (list "configmaps") "resourceNames" (list $c.coredns.configmap) "verbs" (list "get" "update"))))
  | toJson -}}
{{- end -}}

{{- define "ouroboros.mode.coredns-import" -}}
{{- $c := .Values.controller -}}
{{- $i := $c.corednsImport -}}
{{- dict
    "editsCoredns" true
    "editsCorefile" false
    "configmap" (printf "-n %s configmap %s" $i.namespace $i.configmap)
    "args" (list
      (printf "--coredns-import-namespace=%s" $i.namespace)
      (printf "--coredns-import-configmap=%s" $i.configmap)
      (printf "--coredns-import-key=%s" $i.key))
    "refuses" (ternary "controller.corednsAnswer=view writes server blocks before the Corefile's root block, which the coredns-import snippet (imported inside the root block) cannot hold: use controller.mode=coredns or controller.corednsAnswer=template" "" (eq $c.corednsAnswer "view"))
    "reads" (include "ouroboros.corednsReads" . | fromJson)
    "withoutProxy" (include "ouroboros.corednsWithoutProxy" .)
    "writeRoles" (list (dict "suffix" "coredns-import" "namespace" $i.namespace "rules" (list
      (dict "apiGroups" (list "") "resources" (list "configmaps") "resourceNames" (list $i.configmap) "verbs" (list "get" "update" "delete"))
      (dict "apiGroups" (list "") "resources" (list "configmaps") "verbs" (list "create")))))
    "removal" (dict "namespace" $i.namespace "rules" (list
      (dict "apiGroups" (list "") "resources" (list "configmaps") "resourceNames" (list $i.configmap) "verbs" (list "get" "update" "delete"))))
  | toJson -}}
{{- end -}}

{{- define "ouroboros.mode.etc-hosts" -}}
{{- $args := list "--etc-hosts=/host/etc/hosts" -}}
{{- range .Values.etcHosts.proxyIps -}}
{{- $args = append $args (printf "--proxy-ip=%v" .) -}}
{{- end -}}
{{- dict "editsCoredns" false "editsCorefile" false "args" $args | toJson -}}
{{- end -}}

{{- define "ouroboros.mode.external-dns" -}}
{{- $ns := .Release.Namespace -}}
{{- $c := .Values.controller -}}
{{- $x := $c.externalDns -}}
{{- $args := list
      (printf "--external-dns-namespace=%s" (default $ns $x.namespace))
      (printf "--external-dns-output=%s" $x.output)
      (printf "--external-dns-record-ttl=%v" $x.recordTtl) -}}
{{- with $x.proxyService }}{{ $args = append $args (printf "--external-dns-proxy-service=%s" .) }}{{ end -}}
{{- range $x.proxyIps }}{{ $args = append $args (printf "--external-dns-proxy-ip=%v" .) }}{{ end -}}
{{- with $x.annotationPrefix }}{{ $args = append $args (printf "--external-dns-annotation-prefix=%s" .) }}{{ end -}}
{{- if $x.adoptReferenceRecords }}{{ $args = append $args "--external-dns-adopt" }}{{ end -}}
{{- range $k, $val := $x.labels }}{{ $args = append $args (printf "--external-dns-label=%s=%v" $k $val) }}{{ end -}}
{{- range $k, $val := $x.annotations }}{{ $args = append $args (printf "--external-dns-annotation=%s=%v" $k $val) }}{{ end -}}
{{- $args = append $args (printf "--instance=%s" (default .Release.Name $c.instance)) -}}
{{- $xns := default $ns $x.namespace -}}
{{- $object := dict "apiGroups" (list "externaldns.k8s.io") "resources" (list "dnsendpoints") -}}
{{- if eq $x.output "service" -}}
{{- $object = dict "apiGroups" (list "") "resources" (list "services") -}}
{{- end -}}
{{- dict
    "editsCoredns" false
    "editsCorefile" false
    "args" $args
    "reads" (dict "service" (ternary "" (include "ouroboros.externalDnsProxyService" .) (not (empty $x.proxyIps))) "verbs" (list "get"))
    "withoutProxy" (ternary "controller.externalDns.proxyIps or controller.externalDns.proxyService" "" (and (not $x.proxyIps) (not $x.proxyService)))
    "writeRoles" (list (dict "suffix" "external-dns" "namespace" $xns "rules" (list (merge (dict "verbs" (list "list" "create" "patch" "delete")) $object))))
    "removal" (dict "namespace" $xns "rules" (list (merge (dict "verbs" (list "list" "delete")) $object)))
  | toJson -}}
{{- end -}}

{{/* The CoreDNS modes' proxy Service read: with auto, template or view answers (the Service itself
unless controller.proxyIps gives the addresses); JSON, {} when they read none (rewrite). */}}
{{- define "ouroboros.corednsReads" -}}
{{- $c := .Values.controller -}}
{{- if has $c.corednsAnswer (list "auto" "template" "view") -}}
{{- dict "service" (ternary "" (include "ouroboros.proxyServiceName" .) (not (empty $c.proxyIps))) "verbs" (list "get" "list" "watch") | toJson -}}
{{- else -}}
{}
{{- end -}}
{{- end -}}

{{/* What the CoreDNS modes lack with proxy.enabled=false: the addresses (template, view) or the
rewrite target (rewrite). */}}
{{- define "ouroboros.corednsWithoutProxy" -}}
{{- $c := .Values.controller -}}
{{- if and (has $c.corednsAnswer (list "auto" "template" "view")) (not $c.proxyIps) -}}
controller.proxyIps
{{- else if and (eq $c.corednsAnswer "rewrite") (not $c.proxyFqdn) -}}
controller.proxyFqdn
{{- end -}}
{{- end -}}
