{{/* Chart name, overridable. */}}
{{- define "fdp.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Object name prefix: the release name if it already says what it is. */}}
{{- define "fdp.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "fdp.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fdp.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "fdp.labels" -}}
{{ include "fdp.selectorLabels" . }}
app.kubernetes.io/component: agent
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "fdp.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* Every container of the DaemonSet: no capabilities, no escalation, read-only root. */}}
{{- define "fdp.containerSecurity" -}}
privileged: false
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsUser: 0
runAsGroup: 0
capabilities:
  drop:
    - ALL
{{- end }}

{{/* --runtime-state-dir: where each runtime keeps its containers' OCI configs
     under the state folders observe.* mounts (values.yaml, observe). */}}
{{- define "fdp.runtimeStateDirs" -}}
{{- with .Values.observe.containerdStateDir }}containerd={{ trimSuffix "/" . }}/k8s.io{{ end -}}
{{- if and .Values.observe.containerdStateDir .Values.observe.crioStateDir }},{{ end -}}
{{- with .Values.observe.crioStateDir }}cri-o={{ trimSuffix "/" . }}/overlay-containers{{ end -}}
{{- end }}
