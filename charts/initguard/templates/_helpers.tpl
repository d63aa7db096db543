{{/* The app name: the app.kubernetes.io/name label and the Prometheus job. */}}
{{- define "initguard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's name for every object (fits the 63-character label limit). */}}
{{- define "initguard.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "initguard.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "initguard.labels" -}}
app.kubernetes.io/name: {{ include "initguard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The pods' selector: the same name label the static pods carry (job="initguard"). */}}
{{- define "initguard.selector" -}}
app.kubernetes.io/name: {{ include "initguard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end -}}

{{/* The job label the alerts select: the chart's monitor's (the name), or prometheusRule.job. */}}
{{- define "initguard.job" -}}
{{- if .Values.prometheusRule.job -}}
{{- .Values.prometheusRule.job -}}
{{- else if or .Values.metrics.podMonitor.enabled .Values.metrics.serviceMonitor.enabled -}}
{{- include "initguard.name" . -}}
{{- else -}}
{{- fail "prometheusRule.job: no chart monitor is enabled (metrics.podMonitor or metrics.serviceMonitor), so set the job label your own scrape config gives initguard; otherwise InitguardAbsent fires forever" -}}
{{- end -}}
{{- end -}}

{{/* priorityClassName: system-cluster-critical in kube-system unless set; none elsewhere. */}}
{{- define "initguard.priorityClassName" -}}
{{- if .Values.priorityClassName -}}
{{- .Values.priorityClassName -}}
{{- else if eq .Release.Namespace "kube-system" -}}
system-cluster-critical
{{- end -}}
{{- end -}}

{{- define "initguard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "initguard.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "initguard.image" -}}
{{- if and (eq .Values.image.repository "registry.example.com/initguard") (not .Values.image.allowPlaceholder) -}}
{{- fail "image.repository is the placeholder registry.example.com/initguard: build and push deploy/Dockerfile (README \"Install\"), then --set image.repository=REGISTRY/initguard (or image.allowPlaceholder=true to render anyway)" -}}
{{- end -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The guard's config.yaml: the user's settings plus what the chart owns. */}}
{{- define "initguard.config" -}}
{{- $config := deepCopy .Values.config -}}
{{- $_ := set $config "listen" "127.0.0.1:9777" -}}
{{- $_ := set $config "secureListen" (printf "0.0.0.0:%v" .Values.securePort) -}}
{{- if .Values.tlsSecretName -}}
{{- $_ := set $config "tls" (dict "certFile" "/etc/initguard/tls/tls.crt" "keyFile" "/etc/initguard/tls/tls.key") -}}
{{- end -}}
{{- $_ := set $config "leaderElection" (dict "enabled" true "namespace" .Release.Namespace "name" .Values.leaderElection.name "leaseDuration" .Values.leaderElection.leaseDuration) -}}
{{- toYaml $config -}}
{{- end -}}
