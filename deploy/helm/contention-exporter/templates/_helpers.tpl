{{/* Names, labels and the probe's needs, shared by every template. */}}

{{- define "ce.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ce.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "ce.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "ce.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "ce.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ce.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* helm.sh/chart and managed-by are Helm's bookkeeping: scripts/generate-deploy.py
drops them from the kustomize base. */}}
{{- define "ce.labels" -}}
{{ include "ce.selectorLabels" . }}
app.kubernetes.io/part-of: contention-exporter
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "ce.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if and (eq .Values.image.flavor "bcc") (not .Values.image.tag) -}}
{{- $tag = printf "%s-bcc" $tag -}}
{{- end -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/* "true" when the scheduler probe may load at all. */}}
{{- define "ce.probeOn" -}}
{{- if ne .Values.probe.loader "off" }}true{{ end -}}
{{- end -}}

{{/* "true" when BCC may compile the probe: it needs tracefs and the node's kernel
headers. Not for the CO-RE image, which has no BCC. */}}
{{- define "ce.bcc" -}}
{{- if and (include "ce.probeOn" .) (eq .Values.image.flavor "bcc") (has .Values.probe.loader (list "auto" "bcc")) }}true{{ end -}}
{{- end -}}

{{- define "ce.capabilities" -}}
{{- $add := list -}}
{{- if include "ce.probeOn" . -}}
{{- if .Values.probe.legacyKernel -}}
{{- $add = list "SYS_ADMIN" -}}
{{- else -}}
{{- $add = list "BPF" "PERFMON" -}}
{{- end -}}
{{- if or .Values.probe.sysResource .Values.probe.legacyKernel -}}
{{- $add = append $add "SYS_RESOURCE" -}}
{{- end -}}
{{- end -}}
drop: ["ALL"]
{{- if $add }}
add: [{{ range $i, $c := $add }}{{ if $i }}, {{ end }}{{ $c | quote }}{{ end }}]
{{- end -}}
{{- end -}}

{{/*
The rule groups and dashboards the chart deploys, and the check that they were made
from the thresholds the exporter is given. The exporter's generators (Python) are the
only source of PromQL and dashboard JSON: this chart never computes either, it only
refuses combinations where they would disagree.
*/}}
{{- define "ce.checkThresholds" -}}
{{- $gen := .Values.generated | default dict -}}
{{- if $gen -}}
{{- if ne (toJson .Values.thresholds) (toJson ($gen.thresholds | default dict)) -}}
{{- fail (printf "thresholds %s differ from the thresholds %s that the rules and dashboards in `generated` were made from: regenerate them with scripts/chart-thresholds.py (the alerts and the exporter would disagree otherwise)" (toJson .Values.thresholds) (toJson ($gen.thresholds | default dict))) -}}
{{- end -}}
{{- if ne (toString $gen.version) .Chart.AppVersion -}}
{{- fail (printf "`generated` was made by contention-exporter %s but this chart deploys %s: regenerate it with scripts/chart-thresholds.py from this version" (toString $gen.version) .Chart.AppVersion) -}}
{{- end -}}
{{- if not (and $gen.ruleGroups $gen.dashboards) -}}
{{- fail "`generated` lacks ruleGroups or dashboards: make it with scripts/chart-thresholds.py" -}}
{{- end -}}
{{- else if and .Values.thresholds (or .Values.prometheusRule.enabled .Values.dashboards.enabled) -}}
{{- fail "custom thresholds need alert rules and dashboards generated from them, or the alerts would disagree with the exporter: run `scripts/chart-thresholds.py YOUR-THRESHOLDS.yaml > values-thresholds.yaml` and pass `-f values-thresholds.yaml` instead of setting thresholds (or disable prometheusRule and dashboards)" -}}
{{- end -}}
{{- end -}}

{{- define "ce.ruleGroups" -}}
{{- if .Values.generated -}}
{{- toYaml .Values.generated.ruleGroups -}}
{{- else -}}
{{- toYaml (.Files.Get "files/contention.rules.yaml" | fromYaml).groups -}}
{{- end -}}
{{- end -}}

{{/* The dashboards as a dict: file name -> JSON text. */}}
{{- define "ce.dashboards" -}}
{{- if .Values.generated -}}
{{- toJson .Values.generated.dashboards -}}
{{- else -}}
{{- $out := dict -}}
{{- range $path, $_ := .Files.Glob "files/dashboards/*.json" -}}
{{- $_ := set $out (base $path) ($.Files.Get $path) -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}
{{- end -}}

{{/* --web.config.file and the kube-rbac-proxy sidecar both secure /metrics: one only. */}}
{{- define "ce.checkWebConfig" -}}
{{- if and .Values.webConfig.secretName .Values.secureMetrics.enabled -}}
{{- fail "webConfig.secretName and secureMetrics.enabled both secure /metrics: choose one (docs/kubernetes.md, section 6)" -}}
{{- end -}}
{{- if and .Values.webConfig.clientCertificates (not .Values.webConfig.tls) -}}
{{- fail "webConfig.clientCertificates needs webConfig.tls: client certificates come with TLS" -}}
{{- end -}}
{{- end -}}
