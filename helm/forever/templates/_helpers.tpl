{{/* Chart name. */}}
{{- define "forever.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name. */}}
{{- define "forever.fullname" -}}
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

{{/* Common labels. */}}
{{- define "forever.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "forever.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Selector labels. */}}
{{- define "forever.selectorLabels" -}}
app.kubernetes.io/name: {{ include "forever.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Service account name. */}}
{{- define "forever.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "forever.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Whether agentd runs with auth (tenants): auth.enabled with the embedded NATS server. */}}
{{- define "forever.auth" -}}
{{- if and .Values.auth.enabled (not .Values.externalNats.enabled) }}true{{- end }}
{{- end }}

{{/* The Secret holding the secret the pods derive auth's keys from. */}}
{{- define "forever.authSecretName" -}}
{{- default (printf "%s-auth" (include "forever.fullname" .)) .Values.auth.existingSecret }}
{{- end }}

{{/* Whether the pods run a NATS cluster: embedded server and more than one replica. */}}
{{- define "forever.clustered" -}}
{{- if and (not .Values.externalNats.enabled) (gt (int .Values.replicaCount) 1) }}true{{- end }}
{{- end }}

{{/*
JetStream replicas of Forever's streams and KV buckets: externalNats.replicas
with an external NATS, else min(3, replicaCount) (internal/chartargs.Replicas).
*/}}
{{- define "forever.replicas" -}}
{{- if .Values.externalNats.enabled }}
{{- int .Values.externalNats.replicas }}
{{- else }}
{{- max 1 (min 3 (int .Values.replicaCount)) }}
{{- end }}
{{- end }}

{{/*
NATS route URLs of every pod, through the headless service, comma-separated.
Each pod lists itself too: nats-server ignores a route to itself.
*/}}
{{- define "forever.routes" -}}
{{- $fullname := include "forever.fullname" . }}
{{- $routes := list }}
{{- range $i := until (int .Values.replicaCount) }}
{{- $routes = append $routes (printf "nats://%s-%d.%s-headless.%s.svc.%s:%d" $fullname $i $fullname $.Release.Namespace $.Values.clusterDomain (int $.Values.service.clusterPort)) }}
{{- end }}
{{- join "," $routes }}
{{- end }}

{{/*
Whole seconds of a Go duration made of integer parts ("10s", "2m", "1m30s",
"500ms", rounded up); fails on anything else.
*/}}
{{- define "forever.seconds" -}}
{{- $d := toString . }}
{{- if not (regexMatch "^([0-9]+(h|ms|m|s))+$" $d) }}
{{- fail (printf "duration %q: use whole numbers with h, m, s or ms, such as 10s or 1m30s" $d) }}
{{- end }}
{{- $ms := 0 }}
{{- range $part := regexFindAll "[0-9]+(h|ms|m|s)" $d -1 }}
{{- $n := int (regexFind "^[0-9]+" $part) }}
{{- $unit := regexReplaceAll "^[0-9]+" $part "" }}
{{- if eq $unit "h" }}{{ $ms = add $ms (mul $n 3600000) }}
{{- else if eq $unit "m" }}{{ $ms = add $ms (mul $n 60000) }}
{{- else if eq $unit "s" }}{{ $ms = add $ms (mul $n 1000) }}
{{- else }}{{ $ms = add $ms $n }}
{{- end }}
{{- end }}
{{- div (add $ms 999) 1000 }}
{{- end }}

{{/*
terminationGracePeriodSeconds: the value if set, else long enough for the
partition handoff and every shutdown step (see values.yaml).
*/}}
{{- define "forever.terminationGracePeriodSeconds" -}}
{{- if .Values.terminationGracePeriodSeconds }}
{{- int .Values.terminationGracePeriodSeconds }}
{{- else }}
{{- $ttl := int (include "forever.seconds" .Values.agentd.leaseTtl) }}
{{- $step := int (include "forever.seconds" .Values.agentd.shutdownTimeout) }}
{{- add (int .Values.preStopSleepSeconds) $ttl (mul 4 $step) 10 }}
{{- end }}
{{- end }}
