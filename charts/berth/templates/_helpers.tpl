{{- define "berth.labels" -}}
app.kubernetes.io/name: berth-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}
{{- define "berth.selectorLabels" -}}
app.kubernetes.io/name: berth-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
