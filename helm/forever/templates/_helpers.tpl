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
Milliseconds of a Go duration made of integer parts ("10s", "2m", "1m30s",
"500ms"); fails on anything else.
*/}}
{{- define "forever.millis" -}}
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
{{- $ms }}
{{- end }}

{{/* Whole seconds of a duration (forever.millis), rounded up. */}}
{{- define "forever.seconds" -}}
{{- div (add (int (include "forever.millis" .)) 999) 1000 }}
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

{{/*
Bytes of an agentd size (agentd's ParseSize: digits, then K, M, G or T with
an optional i and B, all powers of 1024: 1048576, 64K, 256MiB, 10G); fails
on anything else. The argument is a dict: value, and name for the message.
*/}}
{{- define "forever.bytes" -}}
{{- $s := upper (toString .value) }}
{{- if not (regexMatch "^[0-9]+([KMGT]I?)?B?$" $s) }}
{{- fail (printf "%s %q is not a size: use bytes, or a number with K, M, G or T (KiB, MiB, GiB, TiB), such as 256MiB or 10GiB" .name (toString .value)) }}
{{- end }}
{{- $n := int64 (regexFind "^[0-9]+" $s) }}
{{- $unit := regexReplaceAll "^[0-9]+" $s "" | trimSuffix "B" | trimSuffix "I" }}
{{- $factor := get (dict "" 1 "K" 1024 "M" 1048576 "G" 1073741824 "T" 1099511627776) $unit }}
{{- mul $n $factor }}
{{- end }}

{{/*
Bytes of a Kubernetes quantity made of digits and an optional suffix (Ki,
Mi, Gi, Ti, Pi, Ei, k, M, G, T, P, E), as persistence.size takes it. The
argument is a dict: value, and name for the message.
*/}}
{{- define "forever.quantityBytes" -}}
{{- $s := toString .value }}
{{- if not (regexMatch "^[0-9]+(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$" $s) }}
{{- fail (printf "%s %q is not a quantity such as 20Gi or 500G" .name $s) }}
{{- end }}
{{- $n := int64 (regexFind "^[0-9]+" $s) }}
{{- $unit := regexReplaceAll "^[0-9]+" $s "" }}
{{- $factor := get (dict "" 1 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 "Pi" 1125899906842624 "Ei" 1152921504606846976 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 "P" 1000000000000000 "E" 1000000000000000000) $unit }}
{{- mul $n $factor }}
{{- end }}

{{/* A byte count as a quantity in Mi rounded up, or Gi when whole ("512Mi", "1Gi"). */}}
{{- define "forever.mebibytes" -}}
{{- $mi := div (add (int64 .) 1048575) 1048576 }}
{{- if and $mi (eq (mod $mi 1024) 0) }}
{{- printf "%dGi" (div $mi 1024) }}
{{- else }}
{{- printf "%dMi" $mi }}
{{- end }}
{{- end }}

{{/*
Checks the values a schema cannot: shards dividing partitions, JetStream
limits above 0, a volume that holds the JetStream store, a lease TTL of at
least 1s.
*/}}
{{- define "forever.validate" -}}
{{- $shards := int .Values.agentd.shards }}
{{- if and (gt $shards 1) (ne (mod (int .Values.agentd.partitions) $shards) 0) }}
{{- fail (printf "agentd.shards %d does not divide agentd.partitions %d: partitions must be a multiple of shards (or set shards 0: agentd then keeps a stored layout and picks a count dividing partitions for a new cluster)" $shards (int .Values.agentd.partitions)) }}
{{- end }}
{{- if lt (int (include "forever.millis" .Values.agentd.leaseTtl)) 1000 }}
{{- fail (printf "agentd.leaseTtl %s is below 1s, the granularity of NATS's TTLs" .Values.agentd.leaseTtl) }}
{{- end }}
{{- if not .Values.externalNats.enabled }}
{{- $mem := int64 (include "forever.bytes" (dict "value" .Values.agentd.jetstream.maxMemory "name" "agentd.jetstream.maxMemory")) }}
{{- $store := int64 (include "forever.bytes" (dict "value" .Values.agentd.jetstream.maxStore "name" "agentd.jetstream.maxStore")) }}
{{- if or (eq $mem 0) (eq $store 0) }}
{{- fail "agentd.jetstream.maxMemory and maxStore must be above 0: 0 lets NATS take 75% of the node's memory or disk" }}
{{- end }}
{{- if .Values.persistence.enabled }}
{{- $size := int64 (include "forever.quantityBytes" (dict "value" .Values.persistence.size "name" "persistence.size")) }}
{{- if lt $size $store }}
{{- fail (printf "persistence.size %s is smaller than agentd.jetstream.maxStore %s: JetStream would fill the volume; raise persistence.size or lower maxStore" (toString .Values.persistence.size) .Values.agentd.jetstream.maxStore) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The container's resources: the resources value when set, else sized from
the JetStream limits (see values.yaml).
*/}}
{{- define "forever.resources" -}}
{{- if .Values.resources }}
{{- toYaml .Values.resources }}
{{- else }}
{{- $mem := 0 }}
{{- if not .Values.externalNats.enabled }}
{{- $mem = int64 (include "forever.bytes" (dict "value" .Values.agentd.jetstream.maxMemory "name" "agentd.jetstream.maxMemory")) }}
{{- end }}
{{- $mi := 1048576 -}}
requests:
  cpu: 250m
  memory: {{ include "forever.mebibytes" (add $mem (mul 256 $mi)) }}
  {{- if or .Values.persistence.enabled .Values.externalNats.enabled }}
  ephemeral-storage: 64Mi
  {{- else }}
  ephemeral-storage: {{ include "forever.mebibytes" (add (include "forever.bytes" (dict "value" .Values.agentd.jetstream.maxStore "name" "agentd.jetstream.maxStore")) (mul 64 $mi)) }}
  {{- end }}
limits:
  memory: {{ include "forever.mebibytes" (add $mem (mul 768 $mi)) }}
  {{- if or .Values.persistence.enabled .Values.externalNats.enabled }}
  ephemeral-storage: 1Gi
  {{- end }}
{{- end }}
{{- end }}

{{/*
Whether lookup reaches a cluster: the release's namespace (or, before
--create-namespace made it, "default") is found. helm template, helm lint,
a client-side dry run and Argo CD render without a cluster, where lookup
finds nothing.
*/}}
{{- define "forever.canLookup" -}}
{{- if lookup "v1" "Namespace" "" .Release.Namespace }}true
{{- else if lookup "v1" "Namespace" "" "default" }}true
{{- end }}
{{- end }}
