{{/* The per-role configuration: workerDefaults merged with each role, the pod-mode forks, and every workload's
name and ports. */}}

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
A pod-mode fork runs its target's settings without GPUs, RDMA, hostNetwork and offload, with its own
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
{{- $_ = set $cfg.offload "enabled" false -}}
{{- if $fork.command -}}
{{- $_ = set $cfg "command" $fork.command -}}
{{- end -}}
{{- include "areal-workers.mergeInto" (dict "dst" $cfg "src" ($fork.overrides | default dict)) -}}
{{- $items = append $items (dict "name" $key "kind" "fork" "target" $fork.target "replicas" (int $target.replicas) "config" $cfg "source" (printf "forks.%s.overrides, roles.%s or workerDefaults" $key $fork.target)) -}}
{{- end -}}
{{- end -}}
{{- range $w := $items -}}
{{- $limit := ternary 45 52 (not (empty ($w.config.kueue | default dict).queueName)) -}}
{{- $_ := set $w "objectName" (include "areal-workers.objectName" (dict "root" $ "key" $w.name "limit" $limit)) -}}
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
