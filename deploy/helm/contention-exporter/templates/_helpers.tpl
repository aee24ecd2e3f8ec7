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

{{/* --web.config.file and the kube-rbac-proxy sidecar both secure /metrics: one only. */}}
{{- define "ce.checkWebConfig" -}}
{{- if and .Values.webConfig.secretName .Values.secureMetrics.enabled -}}
{{- fail "webConfig.secretName and secureMetrics.enabled both secure /metrics: choose one (docs/kubernetes.md, section 6)" -}}
{{- end -}}
{{- if and .Values.webConfig.clientCertificates (not .Values.webConfig.tls) -}}
{{- fail "webConfig.clientCertificates needs webConfig.tls: client certificates come with TLS" -}}
{{- end -}}
{{- end -}}
