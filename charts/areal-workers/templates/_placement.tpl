{{/* Where a worker's pods go: node and pod affinity, topology spread, exclusive placement. */}}

{{/* The exclusive-placement group of a role and its pod-mode forks: unique per namespace, release and role, and a
valid label value. Params: root, role. */}}
{{- define "areal-workers.exclusiveGroup" -}}
{{- printf "%s/%s/%s" .root.Release.Namespace .root.Release.Name .role | sha256sum | trunc 20 -}}
{{- end -}}

{{/* The exclusive-placement group a workload's pods carry: its role's, or a pod-mode fork's target's (the target's terms
then admit the fork beside the target's workers); "" without exclusiveTopology. Params: root, workload. */}}
{{- define "areal-workers.workloadExclusiveGroup" -}}
{{- if .workload.config.exclusiveTopology -}}
{{- include "areal-workers.exclusiveGroup" (dict "root" .root "role" (ternary .workload.target .workload.name (eq .workload.kind "fork"))) -}}
{{- end -}}
{{- end -}}

{{/* Appends a required pod affinity term (with) and a required pod anti-affinity term (apart) to affinity, after the
terms the values set. Mutates affinity. Params: affinity, with, apart. */}}
{{- define "areal-workers.requirePodTerms" -}}
{{- range $kind, $term := dict "podAffinity" .with "podAntiAffinity" .apart -}}
{{- $terms := get $.affinity $kind | default dict -}}
{{- $_ := set $terms "requiredDuringSchedulingIgnoredDuringExecution" (append ($terms.requiredDuringSchedulingIgnoredDuringExecution | default list) $term) -}}
{{- $_ = set $.affinity $kind $terms -}}
{{- end -}}
{{- end -}}

{{/*
A workload's pod affinity, as JSON: the values' affinity, then
- for a pod-mode fork: one fork pod per node, on nodes that run a pod of the target role;
- with exclusiveTopology: together in one domain, apart from every other group's workers in all namespaces.
Params: root, workload.
*/}}
{{- define "areal-workers.workerAffinity" -}}
{{- $w := .workload -}}
{{- $affinity := deepCopy ($w.config.affinity | default dict) -}}
{{- if eq $w.kind "fork" -}}
{{- $target := include "areal-workers.workloadSelectorLabels" (dict "root" .root "workload" (dict "name" $w.target)) | fromYaml -}}
{{- $self := include "areal-workers.workloadSelectorLabels" . | fromYaml -}}
{{- include "areal-workers.requirePodTerms" (dict "affinity" $affinity
  "with" (dict "topologyKey" "kubernetes.io/hostname" "labelSelector" (dict "matchLabels" $target))
  "apart" (dict "topologyKey" "kubernetes.io/hostname" "labelSelector" (dict "matchLabels" $self))) -}}
{{- end -}}
{{- with $w.config.exclusiveTopology -}}
{{- $group := include "areal-workers.workloadExclusiveGroup" $ -}}
{{- $others := list (dict "key" "areal.io/role" "operator" "Exists") (dict "key" "areal.io/exclusive-group" "operator" "NotIn" "values" (list $group)) -}}
{{- include "areal-workers.requirePodTerms" (dict "affinity" $affinity
  "with" (dict "topologyKey" . "labelSelector" (dict "matchLabels" (dict "areal.io/exclusive-group" $group)))
  "apart" (dict "topologyKey" . "namespaceSelector" (dict) "labelSelector" (dict "matchExpressions" $others))) -}}
{{- end -}}
{{- toJson $affinity -}}
{{- end -}}

{{/* A workload's topologySpreadConstraints, as a JSON list: a constraint without a labelSelector selects the
workload's own pods. Params: root, workload. */}}
{{- define "areal-workers.workerSpread" -}}
{{- $spread := list -}}
{{- range $c := .workload.config.topologySpreadConstraints -}}
{{- $c = deepCopy $c -}}
{{- if not (hasKey $c "labelSelector") -}}
{{- $_ := set $c "labelSelector" (dict "matchLabels" (include "areal-workers.workloadSelectorLabels" $ | fromYaml)) -}}
{{- end -}}
{{- $spread = append $spread $c -}}
{{- end -}}
{{- toJson $spread -}}
{{- end -}}
