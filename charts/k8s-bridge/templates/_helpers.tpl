{{/* Names, labels and the pieces both bridges' Deployments share. */}}

{{- define "k8s-bridge.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "k8s-bridge.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The prefix of one bridge's resources: <fullname>-slurm, <fullname>-ray. */}}
{{- define "k8s-bridge.slurm" -}}
{{- printf "%s-slurm" (include "k8s-bridge.fullname" .) }}
{{- end }}
{{- define "k8s-bridge.ray" -}}
{{- printf "%s-ray" (include "k8s-bridge.fullname" .) }}
{{- end }}

{{/* Labels; called with (dict "root" $ "component" "slurm-bridge"). */}}
{{- define "k8s-bridge.selectorLabels" -}}
app.kubernetes.io/name: {{ include "k8s-bridge.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "k8s-bridge.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "k8s-bridge.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: k8s-bridge
{{- end }}

{{/* repository@digest, else repository:tag (default: appVersion); called with (dict "root" $ "image" ...). */}}
{{- define "k8s-bridge.image" -}}
{{- if .image.digest }}
{{- printf "%s@%s" .image.repository .image.digest }}
{{- else }}
{{- printf "%s:%s" .image.repository (default .root.Chart.AppVersion .image.tag) }}
{{- end }}
{{- end }}

{{/* The Lease a bridge holds; the same default as the program's (<lease prefix>-<config>). */}}
{{- define "k8s-bridge.slurm.lease" -}}
{{- default (printf "k8s-bridge-slurm-%s" .Values.slurmBridge.config) .Values.slurmBridge.leaderElection.leaseName }}
{{- end }}
{{- define "k8s-bridge.ray.lease" -}}
{{- default (printf "k8s-bridge-ray-%s" .Values.rayBridge.config) .Values.rayBridge.leaderElection.leaseName }}
{{- end }}

{{/* The JWT Secret the Slurm bridge may read: jwtSecret, else the tokenSecretRef of the spec the chart
creates; a dict with namespace and name, empty when neither says. */}}
{{- define "k8s-bridge.slurm.jwtSecret" -}}
{{- $s := .Values.slurmBridge }}
{{- $ref := dict "namespace" $s.jwtSecret.namespace "name" $s.jwtSecret.name }}
{{- if and (not $ref.name) $s.workloadMixing.create }}
{{- $from := dig "slurm" "auth" "tokenSecretRef" (dict) $s.workloadMixing.spec }}
{{- $ref = dict "namespace" (get $from "namespace") "name" (get $from "name") }}
{{- end }}
{{- if $ref.name }}{{ toJson $ref }}{{ else }}{}{{ end }}
{{- end }}

{{/* The arguments every bridge takes (bridge/program/settings.py); called with (dict "root" $ "b" <bridge values> "lease" <name>). */}}
{{- define "k8s-bridge.commonArgs" -}}
- --config={{ .b.config }}
- {{ if .b.leaderElection.enabled }}--leader-elect{{ else }}--no-leader-elect{{ end }}
- --leader-election-namespace={{ .root.Release.Namespace }}
- --leader-election-id={{ .lease }}
- --metrics-bind-address=:{{ .b.metricsPort }}
- --health-probe-bind-address=:{{ .b.healthPort }}
- {{ if .b.mixingController }}--mixing-controller{{ else }}--no-mixing-controller{{ end }}
- --log-format=json
- --log-level={{ .b.logLevel }}
- --max-concurrent-reconciles={{ .b.maxConcurrentReconciles }}
- --graceful-shutdown-timeout={{ .b.gracefulShutdownTimeout }}
{{- end }}

{{/* /healthz and /readyz on the health port (bridge/runtime/probes.py). */}}
{{- define "k8s-bridge.probes" -}}
livenessProbe:
  httpGet:
    path: /healthz
    port: health
  initialDelaySeconds: 15
  periodSeconds: 20
  timeoutSeconds: 2
  failureThreshold: 3
readinessProbe:
  httpGet:
    path: /readyz
    port: health
  initialDelaySeconds: 5
  periodSeconds: 10
  timeoutSeconds: 2
  failureThreshold: 3
{{- end }}

{{/* Pod placement and the pod-level settings both Deployments share; called with (dict "root" $ "b" ...). */}}
{{- define "k8s-bridge.podSettings" -}}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .b.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .b.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .b.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .b.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .root.Values.podSecurityContext | nindent 2 }}
terminationGracePeriodSeconds: {{ add .b.gracefulShutdownTimeout 15 }}
{{- end }}

{{/* Checks the schema cannot express; a failed one stops the render with its message. */}}
{{- define "k8s-bridge.validate" -}}
{{- $s := .Values.slurmBridge }}
{{- $r := .Values.rayBridge }}
{{- if not (or $s.enabled $r.enabled) }}
{{- fail "neither slurmBridge.enabled nor rayBridge.enabled: the chart would install only the CRD" }}
{{- end }}
{{- if and $s.enabled $r.enabled (eq $s.config $r.config) }}
{{- fail (printf "slurmBridge.config and rayBridge.config both name the WorkloadMixing %q: give each bridge its own (the status of a WorkloadMixing is written by the bridge that runs it; docs/adr/0006-one-chart-both-bridges.md)" $s.config) }}
{{- end }}
{{- range $key, $b := dict "slurmBridge" $s "rayBridge" $r }}
{{- if and $b.enabled (gt (int $b.replicas) 1) (not $b.leaderElection.enabled) }}
{{- fail (printf "%s.replicas is %v but %s.leaderElection.enabled is false: replicas would act at once" $key $b.replicas $key) }}
{{- end }}
{{- range $b.extraVolumes }}
{{- if has .name (list "tmp" "webhook-cert") }}
{{- fail (printf "%s.extraVolumes: the volume name %q is the chart's own (tmp, webhook-cert): choose another" $key .name) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and $r.enabled $r.webhook.enabled (eq $r.webhook.certificate.source "secret") }}
{{- if not (and $r.webhook.certificate.secretName $r.webhook.certificate.caBundle) }}
{{- fail "rayBridge.webhook.certificate.source is secret: set secretName (a kubernetes.io/tls Secret in the release namespace) and caBundle (base64 PEM of its CA)" }}
{{- end }}
{{- end }}
{{- $jwt := include "k8s-bridge.slurm.jwtSecret" . | fromJson }}
{{- if and $s.enabled $jwt.name (not $jwt.namespace) }}
{{- fail "slurmBridge.jwtSecret.name is set without its namespace" }}
{{- end }}
{{- end }}

{{/* The Secret holding the webhook's tls.crt and tls.key. */}}
{{- define "k8s-bridge.ray.certSecret" -}}
{{- if eq .Values.rayBridge.webhook.certificate.source "secret" }}
{{- .Values.rayBridge.webhook.certificate.secretName }}
{{- else }}
{{- printf "%s-webhook-cert" (include "k8s-bridge.ray" .) }}
{{- end }}
{{- end }}

{{/* The webhook Service's DNS names: what the serving certificate must cover. */}}
{{- define "k8s-bridge.ray.webhookDNSNames" -}}
{{- $svc := printf "%s-webhook" (include "k8s-bridge.ray" .) }}
{{- toJson (list (printf "%s.%s.svc" $svc .Release.Namespace) (printf "%s.%s.svc.%s" $svc .Release.Namespace .Values.kubernetesClusterDomain)) }}
{{- end }}
