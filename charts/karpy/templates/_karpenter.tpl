{{/*
The keys of Karpenter's chart that karpy does not act on (karpenter-keys.yaml), as set in
the values: a list of {key, karpenter, karpy} for those of the given kind ("refused" or
"ignored") set to a value other than their default. Called with (dict "root" $ "kind" KIND);
returns the list as JSON (a template can only return text).
*/}}
{{- define "karpy.karpenterKeysSet" -}}
{{- $table := .root.Files.Get "karpenter-keys.yaml" | fromYaml }}
{{- $found := list }}
{{- range $key, $entry := get $table .kind }}
{{- $value := $.root.Values }}
{{- $set := true }}
{{- range $part := splitList "." $key }}
{{- if and $set (kindIs "map" $value) (hasKey $value $part) }}
{{- $value = get $value $part }}
{{- else }}
{{- $set = false }}
{{- end }}
{{- end }}
{{- if and $set (not (kindIs "invalid" $value)) }}
{{- $text := ternary (toJson $value) (toString $value) (or (kindIs "map" $value) (kindIs "slice" $value)) }}
{{- $default := ternary (toJson $entry.default) (toString $entry.default) (or (kindIs "map" $entry.default) (kindIs "slice" $entry.default)) }}
{{- if ne $text $default }}
{{- $found = append $found (dict "key" $key "karpenter" $entry.karpenter "karpy" $entry.karpy) }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $found }}
{{- end }}

{{/*
Fail the install, in words, for what karpy cannot run as asked: every refused key of
Karpenter's chart set to another value than karpy's behaviour (all of them, one line each),
and the aws cloud provider without a cluster name.
*/}}
{{- define "karpy.checkValues" -}}
{{- $problems := list }}
{{- range $refused := include "karpy.karpenterKeysSet" (dict "root" . "kind" "refused") | fromJsonArray }}
{{- $problems = append $problems (printf "karpy does not support %s (Karpenter: %s); %s." $refused.key $refused.karpenter $refused.karpy) }}
{{- end }}
{{- if and (eq .Values.settings.cloudProvider "aws") (not (trim .Values.settings.clusterName)) }}
{{- $problems = append $problems "settings.clusterName is required with settings.cloudProvider=aws: it tags every instance karpy launches (--set settings.clusterName=NAME)." }}
{{- end }}
{{- with $problems }}
{{- fail (printf "\n%s" (join "\n" .)) }}
{{- end }}
{{- end }}


{{/*
Whether controller.image is Karpenter's controller (public.ecr.aws/karpenter/controller, or a
mirror of it), as a values file from `helm show values` of Karpenter's chart has it: "true" or "".
karpy then runs its own image (karpy.image), and the notes say so.
*/}}
{{- define "karpy.karpenterImage" -}}
{{- if hasSuffix "karpenter/controller" .Values.controller.image.repository }}true{{ end }}
{{- end }}
