{{/* Names, labels and the per-role configuration. */}}

{{- define "areal-workers.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "areal-workers.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "areal-workers.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
A valid label value (<= 63 chars of [-_.a-zA-Z0-9], alphanumeric at both ends) from any string.
Over-long values keep a prefix and a hash of the whole string, so distinct inputs stay distinct.
*/}}
{{- define "areal-workers.labelValue" -}}
{{- $raw := toString . -}}
{{- $v := regexReplaceAll "[^-_.a-zA-Z0-9]" $raw "-" -}}
{{- if gt (len $v) 63 -}}
{{- $v = printf "%s-%s" (trunc 54 $v) (sha256sum $raw | trunc 8) -}}
{{- end -}}
{{- trimAll "-_." $v -}}
{{- end -}}

{{/*
Object name of a role's StatefulSet and Service: "<fullname>-<role>" with "_" -> "-".
At most 52 characters, because the StatefulSet controller adds a controller-revision-hash
label "<statefulset>-<10 char hash>" to every pod and label values stop at 63.
Longer names are cut to 43 characters plus "-" and 8 hex digits of the full name's sha256.
Params: root, key.
*/}}
{{- define "areal-workers.objectName" -}}
{{- $full := printf "%s-%s" (include "areal-workers.fullname" .root) (replace "_" "-" .key) -}}
{{- if gt (len $full) 52 -}}
{{- printf "%s-%s" (trunc 43 $full | trimSuffix "-") (sha256sum $full | trunc 8) -}}
{{- else -}}
{{- $full -}}
{{- end -}}
{{- end -}}

{{/* Labels shared by every object. Params: root. */}}
{{- define "areal-workers.labels" -}}
{{ include "areal-workers.selectorLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: areal
helm.sh/chart: {{ include "areal-workers.chart" . | quote }}
areal.io/experiment: {{ include "areal-workers.labelValue" .Values.experiment | quote }}
areal.io/trial: {{ include "areal-workers.labelValue" .Values.trial | quote }}
{{- end -}}

{{/* Stable labels of the release: the only ones selectors may use, with areal.io/role. */}}
{{- define "areal-workers.selectorLabels" -}}
app.kubernetes.io/name: {{ include "areal-workers.name" . | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end -}}

{{/* Raw (unsanitized) names, for humans and the adapter. Params: root. */}}
{{- define "areal-workers.annotations" -}}
areal.io/experiment-name: {{ .Values.experiment | quote }}
areal.io/trial-name: {{ .Values.trial | quote }}
{{- end -}}

{{/* Role keys are valid label values already (schema pattern, <= 40 chars). Params: root, workload. */}}
{{- define "areal-workers.workloadSelectorLabels" -}}
{{ include "areal-workers.selectorLabels" .root }}
areal.io/role: {{ .workload.name | quote }}
{{- end -}}

{{- define "areal-workers.workloadLabels" -}}
{{ include "areal-workers.labels" .root }}
app.kubernetes.io/component: worker
areal.io/role: {{ .workload.name | quote }}
{{- if .workload.target }}
areal.io/fork-target: {{ .workload.target | quote }}
{{- end }}
{{- end -}}

{{- define "areal-workers.workloadAnnotations" -}}
{{ include "areal-workers.annotations" .root }}
areal.io/role-name: {{ .workload.name | quote }}
{{- end -}}

{{/* "repository:tag", or "repository@sha256:..." for a digest. Params: repository, tag. */}}
{{- define "areal-workers.imageRef" -}}
{{- if hasPrefix "sha256:" .tag -}}
{{- printf "%s@%s" .repository .tag -}}
{{- else -}}
{{- printf "%s:%s" .repository .tag -}}
{{- end -}}
{{- end -}}

{{/* Image of a role: its own fields, else the top-level image. Params: root, image (role image map). */}}
{{- define "areal-workers.image" -}}
{{- $top := .root.Values.image -}}
{{- $tag := .image.tag | default $top.tag | default (printf "v%s" .root.Chart.AppVersion) -}}
{{- include "areal-workers.imageRef" (dict "repository" (.image.repository | default $top.repository) "tag" (toString $tag)) -}}
{{- end -}}

{{- define "areal-workers.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "areal-workers.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "areal-workers.controllerServiceAccountName" -}}
{{- default (printf "%s-controller" (include "areal-workers.fullname" .)) .Values.controllerRbac.serviceAccountName -}}
{{- end -}}

{{/*
Recursive merge of .src into .dst (mutates .dst). Maps merge key by key; lists and scalars
replace. Keys are tested with range/hasKey semantics, so false, 0 and "" override a default,
unlike sprig's merge/mergeOverwrite which treat them as empty. A null value keeps the default.
*/}}
{{- define "areal-workers.mergeInto" -}}
{{- $dst := .dst -}}
{{- range $k, $v := .src -}}
{{- if kindIs "invalid" $v -}}
{{- else if and (kindIs "map" $v) (hasKey $dst $k) (kindIs "map" (get $dst $k)) -}}
{{- include "areal-workers.mergeInto" (dict "dst" (get $dst $k) "src" $v) -}}
{{- else -}}
{{- $_ := set $dst $k (deepCopy $v) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* workerDefaults merged with one role's settings, as JSON. Params: root, role. */}}
{{- define "areal-workers.roleConfig" -}}
{{- $cfg := deepCopy .root.Values.workerDefaults -}}
{{- include "areal-workers.mergeInto" (dict "dst" $cfg "src" (omit (.role | default dict) "replicas")) -}}
{{- toJson $cfg -}}
{{- end -}}

{{/* The role's guard port: its own guardPort, else guard.port. Params: root, config. */}}
{{- define "areal-workers.guardPort" -}}
{{- if gt (int .config.guardPort) 0 -}}
{{- int .config.guardPort -}}
{{- else -}}
{{- int .root.Values.guard.port -}}
{{- end -}}
{{- end -}}

{{/*
Everything that runs pods, as JSON {"items": [...]}, sorted: roles, then pod-mode forks.
Each item: name (AReaL role), objectName, kind (role|fork), target (fork target or ""),
replicas, guardPort, extraPorts (list), config (merged settings), source (values it comes from).
A pod-mode fork runs its target's settings without GPUs, RDMA and hostNetwork, with its own
command if given, then its overrides; one pod per target worker.
*/}}
{{- define "areal-workers.workloads" -}}
{{- include "areal-workers.preflight" . -}}
{{- include "areal-workers.workloadItems" . -}}
{{- end -}}

{{/* The body of "areal-workers.workloads" without the preflight checks (which use it). */}}
{{- define "areal-workers.workloadItems" -}}
{{- $items := list -}}
{{- $roles := .Values.roles | default dict -}}
{{- range $key, $role := $roles -}}
{{- $cfg := include "areal-workers.roleConfig" (dict "root" $ "role" $role) | fromJson -}}
{{- $items = append $items (dict "name" $key "kind" "role" "target" "" "replicas" (int $role.replicas) "config" $cfg "source" (printf "roles.%s or workerDefaults" $key)) -}}
{{- end -}}
{{- range $key, $fork := .Values.forks | default dict -}}
{{- if eq (default "process" $fork.mode) "pod" -}}
{{- $target := get $roles $fork.target -}}
{{- $cfg := include "areal-workers.roleConfig" (dict "root" $ "role" $target) | fromJson -}}
{{- $_ := set $cfg.resources "gpu" 0 -}}
{{- $_ = set $cfg.rdma "enabled" false -}}
{{- $_ = set $cfg "hostNetwork" false -}}
{{- if $fork.command -}}
{{- $_ = set $cfg "command" $fork.command -}}
{{- end -}}
{{- include "areal-workers.mergeInto" (dict "dst" $cfg "src" ($fork.overrides | default dict)) -}}
{{- $items = append $items (dict "name" $key "kind" "fork" "target" $fork.target "replicas" (int $target.replicas) "config" $cfg "source" (printf "forks.%s.overrides, roles.%s or workerDefaults" $key $fork.target)) -}}
{{- end -}}
{{- end -}}
{{- range $w := $items -}}
{{- $_ := set $w "objectName" (include "areal-workers.objectName" (dict "root" $ "key" $w.name)) -}}
{{- $port := int (include "areal-workers.guardPort" (dict "root" $ "config" $w.config)) -}}
{{- $_ = set $w "guardPort" $port -}}
{{- $extra := list -}}
{{- range $i := until (int $w.config.extraPorts) -}}
{{- $extra = append $extra (add $port $i 1) -}}
{{- end -}}
{{- $_ = set $w "extraPorts" $extra -}}
{{- end -}}
{{- toJson (dict "items" $items) -}}
{{- end -}}

{{/* A scalar as a string; whole numbers print without an exponent (YAML numbers arrive as float64). */}}
{{- define "areal-workers.scalar" -}}
{{- if and (kindIs "float64" .) (eq . (float64 (int64 .))) -}}
{{- int64 . -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end -}}
