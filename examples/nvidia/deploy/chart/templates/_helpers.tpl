{{/* The chart's name, also the name of its objects. */}}
{{- define "nvidia-dra-driver.name" -}}
{{- .Chart.Name -}}
{{- end }}

{{/* The DRA driver name the binary serves (nvdriver.DriverName). */}}
{{- define "nvidia-dra-driver.driverName" -}}
gpu.nvidia.drakit.dev
{{- end }}

{{/* The defragmenter's name: its ServiceAccount, ClusterRole (the owner
of its DeviceTaintRules), Deployment and Lease. */}}
{{- define "nvidia-dra-driver.defragName" -}}
{{- printf "%s-defrag" (include "nvidia-dra-driver.name" .) -}}
{{- end }}

{{/* The DeviceClasses' domain: the driver name without its "gpu." label. */}}
{{- define "nvidia-dra-driver.domain" -}}
{{- trimPrefix "gpu." (include "nvidia-dra-driver.driverName" .) -}}
{{- end }}

{{/* The container's path of the host's driver root (mounted read-only). */}}
{{- define "nvidia-dra-driver.containerDriverRoot" -}}
/driver-root
{{- end }}

{{- define "nvidia-dra-driver.labels" -}}
app.kubernetes.io/name: {{ include "nvidia-dra-driver.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end }}

{{- define "nvidia-dra-driver.selector" -}}
app.kubernetes.io/name: {{ include "nvidia-dra-driver.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The driver's publication of dynamic MIG GPUs (--mig-publication):
the value of migPublication, which must be placements or layout. */}}
{{- define "nvidia-dra-driver.migPublication" -}}
{{- $v := .Values.migPublication -}}
{{- if not (has $v (list "placements" "layout")) -}}
{{- fail (printf "migPublication must be placements (every placement with shared counters, the default) or layout (docs/dynamic-mig-publication.md), not %q" (toString $v)) -}}
{{- end -}}
{{- $v -}}
{{- end }}
