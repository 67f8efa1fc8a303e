{{/* Labels shared by everything the chart creates. */}}
{{- define "network-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: network-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: network-operator
{{- end -}}

{{/* Fixed names: the operator is a singleton and its RBAC (templates/rbac.yaml, generated) names them. */}}
{{- define "network-operator.serviceAccountName" -}}network-operator{{- end -}}

{{/* The operator pod's selector labels (the metrics Service selects them too). */}}
{{- define "network-operator.selectorLabels" -}}
app: network-operator
app.kubernetes.io/component: network-operator
{{- end -}}

{{/*
The operator image: the gpu-operator chart's image, whose `gpu-operator network-operator` command is
this operator. NVIDIA's operator image (nvcr.io/nvidia/cloud-native/network-operator, what upstream's
values.yaml names) is the operator this chart replaces, so a values file naming it gets our image.
*/}}
{{- define "network-operator.image" -}}
{{- $repository := .Values.operator.repository -}}
{{- $image := .Values.operator.image -}}
{{- $tag := .Values.operator.tag | default .Values.operator.version | default .Chart.AppVersion -}}
{{- if and (eq (trimSuffix "/" $repository) "nvcr.io/nvidia/cloud-native") (eq $image "network-operator") -}}
{{- $repository = "ghcr.io/gpu-operator-py" -}}
{{- $image = "gpu-operator" -}}
{{- $tag = .Chart.AppVersion -}}
{{- end -}}
{{- if hasPrefix "sha256:" $tag -}}
{{- printf "%s/%s@%s" (trimSuffix "/" $repository) $image $tag -}}
{{- else -}}
{{- printf "%s/%s:%s" (trimSuffix "/" $repository) $image $tag -}}
{{- end -}}
{{- end -}}

{{/* imagePullSecrets as a pod spec lists them: names, or {name: ...} entries as upstream's examples write. */}}
{{- define "network-operator.imagePullSecrets" -}}
{{- range . }}
- name: {{ if kindIs "map" . }}{{ .name }}{{ else }}{{ . }}{{ end }}
{{- end }}
{{- end -}}

{{/*
Upstream values that would install something this chart does not: fail loudly rather than leave a
component silently missing (upstream's own 24.10 removal of deployCR did exactly that).
*/}}
{{- define "network-operator.unsupported" -}}
{{- $why := list -}}
{{- $operators := dict "sriovNetworkOperator" "SR-IOV Network Operator" "nicConfigurationOperator" "NIC Configuration Operator" "maintenanceOperator" "Maintenance Operator" -}}
{{- range $key := keys $operators | sortAlpha -}}
{{- if (get $.Values $key | default dict).enabled -}}
{{- $why = append $why (printf "%s.enabled: the %s is not part of this chart; install it with its own chart" $key (get $operators $key)) -}}
{{- end -}}
{{- end -}}
{{- if ((.Values.operator.admissionController | default dict).enabled) -}}
{{- $why = append $why "operator.admissionController.enabled: there is no admission webhook; the CRDs' CEL rules validate policies and the operator rejects overlapping NicNodePolicies in their status" -}}
{{- end -}}
{{- if .Values.deployCR -}}
{{- $why = append $why "deployCR: removed upstream in 24.10; set nicClusterPolicy.deploy=true and nicClusterPolicy.spec" -}}
{{- end -}}
{{- if $why -}}
{{- fail (printf "unsupported values:\n- %s" (join "\n- " $why)) -}}
{{- end -}}
{{- end -}}
