{{/* The Prometheus Operator's objects: which the values ask for, whether the cluster
serves their API (the operator's CRDs), and the scrape endpoint the ServiceMonitor and
the PodMonitor share. */}}

{{/* The operator objects the values enable: kind -> API (group/version/kind, as
`.Capabilities.APIVersions.Has` and `helm template --api-versions` spell it). */}}
{{- define "ce.operatorAPIs" -}}
{{- $apis := dict -}}
{{- if .Values.serviceMonitor.enabled -}}
{{- $_ := set $apis .Values.monitoring.kind (printf "monitoring.coreos.com/v1/%s" .Values.monitoring.kind) -}}
{{- end -}}
{{- if .Values.prometheusRule.enabled -}}
{{- $_ := set $apis "PrometheusRule" "monitoring.coreos.com/v1/PrometheusRule" -}}
{{- end -}}
{{- if .Values.alertmanagerConfig.enabled -}}
{{- $_ := set $apis "AlertmanagerConfig" "monitoring.coreos.com/v1alpha1/AlertmanagerConfig" -}}
{{- end -}}
{{- toJson $apis -}}
{{- end -}}

{{/* The enabled operator objects whose API this cluster does not serve, as a JSON
list of APIs; with monitoring.requireCRDs the install fails instead. */}}
{{- define "ce.missingAPIs" -}}
{{- $missing := list -}}
{{- range $kind, $api := include "ce.operatorAPIs" . | fromJson -}}
{{- if not ($.Capabilities.APIVersions.Has $api) -}}
{{- $missing = append $missing $api -}}
{{- end -}}
{{- end -}}
{{- if and $missing .Values.monitoring.requireCRDs -}}
{{- fail (printf "monitoring.requireCRDs: this cluster does not serve %s: the Prometheus Operator's CRDs are not installed. Install the operator (or kube-prometheus-stack) first, disable the objects it cannot take, or set monitoring.requireCRDs=false to install without them (docs/kubernetes.md, \"Without the Prometheus Operator\"). With `helm template`, name the APIs your cluster serves: --api-versions %s" (join ", " $missing) (join " --api-versions " $missing)) -}}
{{- end -}}
{{- toJson $missing -}}
{{- end -}}

{{/* "true" when the operator object `kind` (second argument) is rendered: enabled
and its API served. */}}
{{- define "ce.renders" -}}
{{- $ctx := index . 0 -}}
{{- $kind := index . 1 -}}
{{- $api := get (include "ce.operatorAPIs" $ctx | fromJson) $kind -}}
{{- if and $api (not (has $api (include "ce.missingAPIs" $ctx | fromJsonArray))) }}true{{ end -}}
{{- end -}}

{{/* The one scrape endpoint, as the ServiceMonitor's `endpoints` and the PodMonitor's
`podMetricsEndpoints` both take it. Target labels: `node` and `instance` from the
pod's node name (else the pod IP:port, which changes at every rollout), as
kube-prometheus does for node_exporter: the rules join a node's series on `instance`;
`job` is the one the rules select (`selector` in the thresholds,
docs/configuration.md). The exporter itself never sets node or cluster labels. */}}
{{- define "ce.scrapeEndpoint" -}}
- port: metrics
  path: /metrics
  interval: {{ .Values.serviceMonitor.interval }}
  scrapeTimeout: {{ .Values.serviceMonitor.scrapeTimeout }}
  # The exporter's namespace/pod/container labels name the *measured* container: the
  # series' own labels win over the target's.
  honorLabels: true
  {{- if .Values.secureMetrics.enabled }}
  scheme: https
  {{- if eq .Values.monitoring.kind "PodMonitor" }}
  {{- fail "secureMetrics.enabled needs monitoring.kind=ServiceMonitor: kube-rbac-proxy authenticates Prometheus by its service account token, which the Prometheus Operator sends only from a ServiceMonitor (bearerTokenFile); a PodMonitor has no such field" }}
  {{- end }}
  bearerTokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
  tlsConfig:
    {{- toYaml .Values.secureMetrics.serviceMonitorTlsConfig | nindent 4 }}
  {{- end }}
  {{- if .Values.webConfig.secretName }}
  {{- if .Values.webConfig.tls }}
  scheme: https
  {{- end }}
  {{- with .Values.webConfig.serviceMonitor.tlsConfig }}
  tlsConfig:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.webConfig.serviceMonitor.basicAuth }}
  basicAuth:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- end }}
  relabelings:
    - sourceLabels: [__meta_kubernetes_pod_node_name]
      targetLabel: node
      action: replace
    - sourceLabels: [__meta_kubernetes_pod_node_name]
      targetLabel: instance
      action: replace
    {{- with .Values.serviceMonitor.job }}
    # The job the rules' selector expects, whatever the release is called.
    - targetLabel: job
      replacement: {{ . | quote }}
      action: replace
    {{- end }}
    {{- with .Values.serviceMonitor.relabelings }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    # Last, after yours: the operator gives the target the exporter's own pod's
    # namespace, pod and container, which honorLabels would stamp on every series
    # that lacks them (the node's own cgroups, pods not named yet). Dropped here, no
    # series ever names the exporter's pod (docs/kube-prometheus-stack.md, "Target
    # labels"); relabelings above may still read them.
    - action: labeldrop
      regex: namespace|pod|container
  {{- with .Values.serviceMonitor.metricRelabelings }}
  metricRelabelings:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}
