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
{{- fail (printf "migPublication must be placements (every placement with shared counters, the default) or layout (each GPU's current layout), docs/dynamic-mig-publication.md; not %q" (toString $v)) -}}
{{- end -}}
{{- $v -}}
{{- end }}

{{/* The value of dynamicMIGGPUs as the driver's flag takes it, "" when
unset: a string, also when --set made a number of it
(dynamicMIGGPUs=0). */}}
{{- define "nvidia-dra-driver.dynamicMIGGPUs" -}}
{{- if not (kindIs "invalid" .Values.dynamicMIGGPUs) }}{{ toString .Values.dynamicMIGGPUs }}{{ end -}}
{{- end }}

{{/* "true" when some GPU is dynamic MIG: dynamicMIGGPUs set and not
"none", and the DynamicMIG gate (alpha, off by default) on. GPUs named
with the gate off are refused: the driver would refuse them at start. */}}
{{- define "nvidia-dra-driver.dynamicMIG" -}}
{{- $gates := default dict .Values.featureGates -}}
{{- $gpus := include "nvidia-dra-driver.dynamicMIGGPUs" . -}}
{{- $named := and (ne $gpus "") (ne $gpus "none") -}}
{{- $on := eq (toString (get $gates "DynamicMIG")) "true" -}}
{{- if and $named (not $on) (not (hasKey $gates "DynamicMIG")) -}}
{{- fail (printf "dynamicMIGGPUs=%s needs featureGates.DynamicMIG=true: dynamic MIG is alpha and off by default until the GPU check (examples/nvidia/gpucheck) has passed on a Hopper node (values.yaml, featureGates)" $gpus) -}}
{{- end -}}
{{- if and $named $on }}true{{ end -}}
{{- end }}

{{/* "true" when the driver lays its dynamic MIG GPUs out
(--mig-publication=layout): migPublication=layout and some GPU dynamic.
Without a dynamic GPU there is nothing to lay out: the driver then needs
no ledger, planner or webhook, and the chart renders as for placements. */}}
{{- define "nvidia-dra-driver.layout" -}}
{{- if and (eq (include "nvidia-dra-driver.migPublication" .) "layout") (eq (include "nvidia-dra-driver.dynamicMIG" .) "true") }}true{{ end -}}
{{- end }}

{{/* "true" when the webhook runs: webhook.enabled true, or auto (the
default) and the layout publication needs it. false with the layout
publication fails: without the webhook a stale allocation reaches the
node. */}}
{{- define "nvidia-dra-driver.webhookEnabled" -}}
{{- $e := toString .Values.webhook.enabled -}}
{{- $layout := eq (include "nvidia-dra-driver.layout" .) "true" -}}
{{- if not (has $e (list "auto" "true" "false")) -}}
{{- fail (printf "webhook.enabled must be auto (the default: on where migPublication=layout needs it), true or false; not %q" $e) -}}
{{- end -}}
{{- if and $layout (eq $e "false") -}}
{{- fail "migPublication=layout with dynamic MIG GPUs needs the webhook: it admits every allocation of a layout device through the node's layout ledger (docs/dynamic-mig-publication.md). Set webhook.enabled=auto or true, or migPublication=placements" -}}
{{- end -}}
{{- if or (eq $e "true") (and $layout (eq $e "auto")) }}true{{ end -}}
{{- end }}
