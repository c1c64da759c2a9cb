{{/*
Checks of value combinations that the schema cannot express. Each message names the value to change.
Run first by "areal-workers.workloads", which every workload-dependent template uses, but the helm test Pod's: helm
renders templates/tests/ before the others and names the template that failed, so its test-health.yaml takes
"areal-workers.workloadItems" and the error names a template of the release's own objects (statefulset.yaml).
The checks run in this order (the first that fails is the error): this file's, then _preflight_quantities.tpl,
_preflight_workloads.tpl and _preflight_images.tpl (each workload), then _preflight_cluster.tpl (what the cluster
must accept).
*/}}
{{- define "areal-workers.preflight" -}}
{{- include "areal-workers.preflight.names" . -}}
{{- include "areal-workers.preflight.roleNames" . -}}
{{- include "areal-workers.preflight.quantities" . -}}
{{- $workloads := dict "root" . "items" (include "areal-workers.workloadItems" . | fromJson).items -}}
{{- include "areal-workers.preflight.workloads" $workloads -}}
{{- include "areal-workers.preflight.images" $workloads -}}
{{- include "areal-workers.preflight.hostNetwork" $workloads -}}
{{- include "areal-workers.preflight.owners" . -}}
{{- include "areal-workers.preflight.reaper" . -}}
{{- include "areal-workers.preflight.identities" . -}}
{{- include "areal-workers.preflight.storage" . -}}
{{- include "areal-workers.preflight.networkPolicy" . -}}
{{- end -}}

{{/* The release name, experiment and trial. Params: root. */}}
{{- define "areal-workers.preflight.names" -}}
{{- $v := .Values -}}
{{- /* Helm accepts release names (1abc, a.b) that the Services named after them cannot have: refuse them before
anything is applied. A DNS-1035 label, as naming.release_name_problem checks it. */ -}}
{{- if not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" .Release.Name) -}}
{{- fail (printf "release name %q cannot start the chart's Service names: use a DNS-1035 label (lowercase letters, digits and '-', starting with a letter and ending with a letter or digit), e.g. %q" .Release.Name (printf "aw-%s" (regexReplaceAll "[^a-z0-9]+" (lower .Release.Name) "-") | trimSuffix "-")) -}}
{{- end -}}
{{- if not (trim (toString $v.experiment)) -}}
{{- fail "experiment is empty: set experiment to the AReaL experiment_name (e.g. --set experiment=gsm8k-grpo)" -}}
{{- end -}}
{{- if not (trim (toString $v.trial)) -}}
{{- fail "trial is empty: set trial to the AReaL trial_name (e.g. --set trial=trial0)" -}}
{{- end -}}
{{- /* The schema refuses "/" and NUL; "." and ".." are one component that leaves the trial's directory. */ -}}
{{- range $key := list "experiment" "trial" -}}
{{- if has (toString (get $v $key)) (list "." "..") -}}
{{- fail (printf "%s is %q: it becomes a directory of name_resolve's records and the fileroot, and %q names another one; choose another name" $key (toString (get $v $key)) (toString (get $v $key))) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Roles, colocations and forks: one name each, targets that exist. Params: root. */}}
{{- define "areal-workers.preflight.roleNames" -}}
{{- $v := .Values -}}
{{- $roles := $v.roles | default dict -}}
{{- $forks := $v.forks | default dict -}}
{{- $colocations := $v.colocations | default dict -}}
{{- $roleList := keys $roles | sortAlpha | join ", " | default "none, roles is empty" -}}

{{- /* One AReaL role name lives in exactly one of roles, colocations, forks. */ -}}
{{- range $key, $_ := $forks -}}
{{- if hasKey $roles $key -}}
{{- fail (printf "forks.%s: %q is also defined in roles; rename the fork or remove roles.%s" $key $key $key) -}}
{{- end -}}
{{- end -}}
{{- range $key, $_ := $colocations -}}
{{- if hasKey $roles $key -}}
{{- fail (printf "colocations.%s: %q is also defined in roles; rename the colocation or remove roles.%s" $key $key $key) -}}
{{- end -}}
{{- if hasKey $forks $key -}}
{{- fail (printf "colocations.%s: %q is also defined in forks; remove colocations.%s or forks.%s" $key $key $key $key) -}}
{{- end -}}
{{- end -}}

{{- range $key, $target := $colocations -}}
{{- if not (hasKey $roles $target) -}}
{{- fail (printf "colocations.%s targets %q, which is not in roles; add roles.%s or set colocations.%s to one of: %s" $key $target $target $key $roleList) -}}
{{- end -}}
{{- end -}}

{{- range $key, $fork := $forks -}}
{{- $mode := default "process" $fork.mode -}}
{{- if not (hasKey $roles $fork.target) -}}
{{- fail (printf "forks.%s.target is %q, which is not in roles; add roles.%s or set forks.%s.target to one of: %s" $key $fork.target $fork.target $key $roleList) -}}
{{- end -}}
{{- if and $fork.overrides (ne $mode "pod") -}}
{{- fail (printf "forks.%s.overrides only applies to forks.%s.mode=pod (a process fork runs inside its target's container); remove forks.%s.overrides or set forks.%s.mode=pod" $key $key $key $key) -}}
{{- end -}}
{{- $target := get $roles $fork.target -}}
{{- if and (hasKey $fork "replicas") (ne (int $fork.replicas) (int $target.replicas)) -}}
{{- fail (printf "forks.%s.replicas is %d but its target roles.%s.replicas is %d; a %s-mode fork runs one worker per target worker: set forks.%s.replicas to %d or remove it" $key (int $fork.replicas) $fork.target (int $target.replicas) $mode $key (int $target.replicas)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
