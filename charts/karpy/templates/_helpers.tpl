{{/* The chart's name, overridable by nameOverride. */}}
{{- define "karpy.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The name of every object the chart makes: the release name, or fullnameOverride. */}}
{{- define "karpy.fullname" -}}
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

{{/* Labels on every object: the chart's, then additionalLabels. */}}
{{- define "karpy.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "karpy.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.additionalLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The labels the Deployment selects its pods by (and the PDB and Service too). */}}
{{- define "karpy.selectorLabels" -}}
app.kubernetes.io/name: {{ include "karpy.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The ServiceAccount karpy runs as: made by the chart, or one the operator names. */}}
{{- define "karpy.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "karpy.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
An object's annotations block: additionalAnnotations and the object's own ("own"),
its own winning; nothing when both are empty. Called with (dict "root" $ "own" MAP).
*/}}
{{- define "karpy.annotations" -}}
{{- $annotations := merge (dict) (.own | default dict) .root.Values.additionalAnnotations }}
{{- with $annotations -}}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
karpy's image: repository:tag (the chart's appVersion unless given), @digest when given.
Karpenter's controller image (a values file written for Karpenter) is replaced by the chart's default.
*/}}
{{- define "karpy.image" -}}
{{- $image := .Values.controller.image }}
{{- if include "karpy.karpenterImage" . }}
{{- $image = dict "repository" "karpy" }}{{/* values.yaml's default (tests/test_chart.py keeps them equal) */}}
{{- end }}
{{- printf "%s:%s" $image.repository (default .Chart.AppVersion $image.tag) }}
{{- with $image.digest }}@{{ . }}{{ end }}
{{- end }}

{{/*
The pod's affinity: the affinity value, where a pod (anti-)affinity term that
selects no pods selects karpy's own, as in Karpenter's chart.
*/}}
{{- define "karpy.affinity" -}}
{{- $affinity := deepCopy (.Values.affinity | default dict) }}
{{- $selector := dict "matchLabels" (include "karpy.selectorLabels" . | fromYaml) }}
{{- range $kind := list "podAffinity" "podAntiAffinity" }}
{{- with get $affinity $kind }}
{{- range $term := get . "requiredDuringSchedulingIgnoredDuringExecution" | default list }}
{{- if not (hasKey $term "labelSelector") }}{{ $_ := set $term "labelSelector" $selector }}{{ end }}
{{- end }}
{{- range $weighted := get . "preferredDuringSchedulingIgnoredDuringExecution" | default list }}
{{- with $weighted.podAffinityTerm }}
{{- if not (hasKey . "labelSelector") }}{{ $_ := set . "labelSelector" $selector }}{{ end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- toYaml $affinity }}
{{- end }}

{{/* The topology spread constraints, each selecting karpy's pods unless it says otherwise. */}}
{{- define "karpy.topologySpreadConstraints" -}}
{{- $constraints := deepCopy (.Values.topologySpreadConstraints | default list) }}
{{- $selector := dict "matchLabels" (include "karpy.selectorLabels" . | fromYaml) }}
{{- range $constraint := $constraints }}
{{- if not (hasKey $constraint "labelSelector") }}{{ $_ := set $constraint "labelSelector" $selector }}{{ end }}
{{- end }}
{{- toYaml $constraints }}
{{- end }}

{{/*
The container's security context: controller.securityContext without its empty maps, so that
Karpenter's appArmorProfile: {}, seLinuxOptions: {} and seccompProfile: {} mean "not set", as there.
*/}}
{{- define "karpy.containerSecurityContext" -}}
{{- $context := dict }}
{{- range $name, $value := .Values.controller.securityContext | default dict }}
{{- if not (and (kindIs "map" $value) (empty $value)) }}{{ $_ := set $context $name $value }}{{ end }}
{{- end }}
{{- toYaml $context }}
{{- end }}
