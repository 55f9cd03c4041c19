{{/*
Names, labels and image references shared by every template.
*/}}

{{/* The release-scoped name of the operator's objects, at most 63 characters. */}}
{{- define "berth.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-operator" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* app.kubernetes.io/name of the operator's objects. */}}
{{- define "berth.name" -}}
{{- default "berth-operator" .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels every object of this chart carries. */}}
{{- define "berth.commonLabels" -}}
app.kubernetes.io/part-of: berth
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Labels of the operator's own objects (Deployment, ServiceAccount, RBAC, Service). */}}
{{- define "berth.labels" -}}
app.kubernetes.io/name: {{ include "berth.name" . }}
app.kubernetes.io/component: operator
{{ include "berth.commonLabels" . }}
{{- end -}}

{{/* The operator pods' selector; kept minimal because a Deployment's selector is immutable. */}}
{{- define "berth.selectorLabels" -}}
app.kubernetes.io/name: {{ include "berth.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The operator's ServiceAccount name. */}}
{{- define "berth.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "berth.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
An image reference from {repository, tag, digest}: repository@digest when a digest is set
(the tag is then informational only), else repository:tag, the tag defaulting to appVersion.
*/}}
{{- define "berth.image" -}}
{{- $image := index . 0 -}}
{{- $root := index . 1 -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $image.repository $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $image.repository (default $root.Chart.AppVersion $image.tag) -}}
{{- end -}}
{{- end -}}

{{/* Whether the Prometheus Operator API (ServiceMonitor, PodMonitor, PrometheusRule) exists. */}}
{{- define "berth.monitoringApi" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" -}}true{{- end -}}
{{- end -}}
