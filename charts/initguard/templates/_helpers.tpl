{{/* The release's name for every object (fits the 63-character label limit). */}}
{{- define "initguard.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "initguard.labels" -}}
app.kubernetes.io/name: initguard
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The pods' selector: the same name label the static pods carry (job="initguard"). */}}
{{- define "initguard.selector" -}}
app.kubernetes.io/name: initguard
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end -}}

{{- define "initguard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "initguard.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "initguard.image" -}}
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
