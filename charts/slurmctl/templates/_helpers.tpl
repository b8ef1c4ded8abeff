{{/*
Object names are fixed, as config/default names them (slurmctl-operator, ...), whatever the release is called: the
CRD and the ClusterRoles are cluster-wide, so a cluster runs one release of this chart.
*/}}

{{/* Labels every object carries: config/default adds the same (its kustomize `labels`). No Helm-only labels, so
that the default render equals config/default object for object. */}}
{{- define "slurmctl.commonLabels" -}}
app.kubernetes.io/part-of: slurmctl
{{- end }}

{{/* The operator's own labels: its pods' (the Deployment's selector), its ServiceAccount's and its roles'. */}}
{{- define "slurmctl.operatorLabels" -}}
app.kubernetes.io/name: slurmctl
app.kubernetes.io/component: operator
{{- end }}

{{/* The metrics Service's labels, which the ServiceMonitor selects. */}}
{{- define "slurmctl.metricsLabels" -}}
app.kubernetes.io/name: slurmctl
app.kubernetes.io/component: operator-metrics
{{- end }}

{{/*
The namespaces the operator watches, comma-separated ("" watches all): the Deployment's --watch-namespace and, with
rbac.namespaced, where the Roles go. The namespaced mode without a namespace would grant nothing, so it fails.
*/}}
{{- define "slurmctl.watchNamespaces" -}}
{{- $namespaces := uniq (compact (.Values.watchNamespaces | default list)) -}}
{{- if and .Values.rbac.namespaced (not $namespaces) -}}
{{- fail "rbac.namespaced=true grants the operator Roles only in watchNamespaces: list at least one (--set 'watchNamespaces={team-a,team-b}')" -}}
{{- end -}}
{{- join "," $namespaces -}}
{{- end }}
