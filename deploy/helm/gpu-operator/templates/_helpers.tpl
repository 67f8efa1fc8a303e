{{/* Labels shared by everything the chart creates. */}}
{{- define "gpu-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: gpu-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpu-operator
{{- end -}}

{{/* Fixed names: the operator is a singleton and its RBAC (templates/rbac.yaml) names them. */}}
{{- define "gpu-operator.serviceAccountName" -}}gpu-operator{{- end -}}

{{/*
The operator image; it is also the image every operand runs unless the policy names another.
NVIDIA's operator image (nvcr.io/nvidia/gpu-operator, what upstream's values.yaml names) is the
operator this chart replaces, so a values file naming it gets this chart's own image.
*/}}
{{- define "gpu-operator.image" -}}
{{- $repository := .Values.operator.repository -}}
{{- $image := .Values.operator.image -}}
{{- $version := .Values.operator.version | default .Chart.AppVersion -}}
{{- if and (eq (trimSuffix "/" $repository) "nvcr.io/nvidia") (eq $image "gpu-operator") -}}
{{- $repository = "ghcr.io/gpu-operator-py" -}}
{{- $version = .Chart.AppVersion -}}
{{- end -}}
{{- if hasPrefix "sha256:" $version -}}
{{- printf "%s/%s@%s" $repository $image $version -}}
{{- else -}}
{{- printf "%s/%s:%s" $repository $image $version -}}
{{- end -}}
{{- end -}}

{{/*
A copy of a map without empty values (empty strings, lists and maps, nulls), recursively; booleans
and numbers are kept, false and 0 included. Values files keep NVIDIA's keys with empty defaults, and
an empty field must mean "absent" in the ClusterPolicy (absent image fields select the operator's
own image; absent flags take the operator's defaults).
*/}}
{{- define "gpu-operator.prune" -}}
{{- $out := dict -}}
{{- range $key, $value := . -}}
{{- if kindIs "map" $value -}}
{{- $inner := include "gpu-operator.prune" $value | fromYaml -}}
{{- if $inner -}}{{- $_ := set $out $key $inner -}}{{- end -}}
{{- else if or (kindIs "bool" $value) (kindIs "float64" $value) (kindIs "int64" $value) (kindIs "int" $value) -}}
{{- $_ := set $out $key $value -}}
{{- else if $value -}}
{{- $_ := set $out $key $value -}}
{{- end -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* A named-config section (devicePlugin, dcgmExporter, migManager) without the chart-only keys. */}}
{{- define "gpu-operator.withoutChartKeys" -}}
{{- $section := deepCopy . -}}
{{- if $section.config -}}
{{- $_ := set $section "config" (omit $section.config "create" "data") -}}
{{- end -}}
{{- toYaml $section -}}
{{- end -}}

{{- /*
driver.upgradePolicy as the CRD spells it: Helm's (and upstream's) gpuPodDeletion block is the CRD's
podDeletion; a podDeletion given as well wins.
*/}}
{{- define "gpu-operator.upgradePolicy" -}}
{{- $policy := omit (. | default dict) "gpuPodDeletion" }}
{{- if and (hasKey (. | default dict) "gpuPodDeletion") (not (hasKey $policy "podDeletion")) }}
{{- $_ := set $policy "podDeletion" .gpuPodDeletion }}
{{- end }}
{{- toYaml $policy }}
{{- end -}}
