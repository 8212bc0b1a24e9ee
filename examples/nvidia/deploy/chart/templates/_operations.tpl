{{/*
Operating the driver: logging, feature gates, the seamless rolling
update and its probes, shared by the driver, the webhook and the
defragmenter.
*/}}

{{/* The driver binary in the image (deploy.BuildImage's entrypoint). */}}
{{- define "nvidia-dra-driver.binary" -}}
/nvidia-dra-driver
{{- end }}

{{/* The probe socket, in the pod's own /tmp: an exec probe reaches this
pod's driver, also while the other pod of a rolling update holds the
HTTP port on the host's network. */}}
{{- define "nvidia-dra-driver.probeSocket" -}}
/tmp/probe.sock
{{- end }}

{{/* The feature gates passed to every component, "A=true,B=false":
featureGates, plus MIGDefragmenter=true when defrag.enabled and the
gate is not set (defrag.enabled predates the gate). */}}
{{- define "nvidia-dra-driver.featureGates" -}}
{{- $gates := deepCopy (default dict .Values.featureGates) }}
{{- if and .Values.defrag.enabled (not (hasKey $gates "MIGDefragmenter")) }}
{{- $_ := set $gates "MIGDefragmenter" true }}
{{- end }}
{{- $out := list }}
{{- range $k, $v := $gates }}
{{- $out = append $out (printf "%s=%t" $k (eq (toString $v) "true")) }}
{{- end }}
{{- join "," $out }}
{{- end }}

{{/* "true" when the defragmenter runs: featureGates.MIGDefragmenter if
set, else defrag.enabled. */}}
{{- define "nvidia-dra-driver.defragEnabled" -}}
{{- $gates := default dict .Values.featureGates }}
{{- if hasKey $gates "MIGDefragmenter" }}
{{- eq (toString (get $gates "MIGDefragmenter")) "true" }}
{{- else }}
{{- .Values.defrag.enabled }}
{{- end }}
{{- end }}

{{/* The logging and gate flags of every component (component-base's). */}}
{{- define "nvidia-dra-driver.componentArgs" -}}
- --logging-format={{ .Values.logging.format }}
- -v={{ .Values.logVerbosity }}
{{- with include "nvidia-dra-driver.featureGates" . }}
- --feature-gates={{ . }}
{{- end }}
{{- end }}

{{/* The driver's own operating flags: the component flags, the seamless
rolling update (the pod's UID) and the probe socket. */}}
{{- define "nvidia-dra-driver.driverArgs" -}}
{{ include "nvidia-dra-driver.componentArgs" . }}
- --pod-uid=$(POD_UID)
- --probe-socket={{ include "nvidia-dra-driver.probeSocket" . }}
{{- end }}

{{/* The driver's liveness and readiness probes: exec probes through the
probe socket (httpGet on the host's network could reach the other pod
of a rolling update). */}}
{{- define "nvidia-dra-driver.probes" -}}
livenessProbe:
  exec:
    command: [{{ include "nvidia-dra-driver.binary" . }}, probe, --socket={{ include "nvidia-dra-driver.probeSocket" . }}, /healthz]
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 3
readinessProbe:
  exec:
    command: [{{ include "nvidia-dra-driver.binary" . }}, probe, --socket={{ include "nvidia-dra-driver.probeSocket" . }}, /readyz]
  periodSeconds: 3
  timeoutSeconds: 5
{{- end }}
