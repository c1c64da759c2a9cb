{{/* Each workload (role or pod-mode fork): its object name, ports, env, labels, Kueue settings and annotations.
Params: root, items ("areal-workers.workloadItems"). */}}
{{- define "areal-workers.preflight.workloads" -}}
{{- /* Roles and pod-mode forks must not map to the same StatefulSet/Service name. */ -}}
{{- $owners := dict -}}
{{- range $w := .items -}}
{{- $path := printf "%s.%s" (ternary "roles" "forks" (eq $w.kind "role")) $w.name -}}
{{- if hasKey $owners $w.objectName -}}
{{- fail (printf "%s and %s both become the object name %q (\"_\" turns into \"-\", long names are cut); rename one of them" (get $owners $w.objectName) $path $w.objectName) -}}
{{- end -}}
{{- $_ := set $owners $w.objectName $path -}}
{{- end -}}

{{- /* Env variables the chart sets ("areal-workers.workerEnv") -> where their value comes from. */ -}}
{{- $reservedEnv := dict
  "POD_NAME" "the downward API" "POD_NAMESPACE" "the downward API" "POD_IP" "the downward API" "AREAL_WORKER_INDEX" "the downward API"
  "AREAL_EXPERIMENT_NAME" "experiment" "AREAL_TRIAL_NAME" "trial" "AREAL_ROLE" "the role name"
  "AREAL_WORKER_ID" "the role name and AREAL_WORKER_INDEX" -}}
{{- range $w := .items -}}
{{- $cfg := $w.config -}}
{{- $last := add $w.guardPort (int $cfg.extraPorts) -}}
{{- if gt $last 65535 -}}
{{- fail (printf "%s: guard port %d plus extraPorts %d exceeds 65535; lower extraPorts or guardPort (or guard.port) in %s" $w.name (int $w.guardPort) (int $cfg.extraPorts) $w.source) -}}
{{- end -}}
{{- range $name, $from := $reservedEnv -}}
{{- if hasKey ($cfg.env | default dict) $name -}}
{{- fail (printf "env.%s, set in %s, is set by the chart from %s; remove it" $name $w.source $from) -}}
{{- end -}}
{{- end -}}
{{- range $label, $_ := $cfg.podLabels -}}
{{- if or (hasPrefix "app.kubernetes.io/" $label) (hasPrefix "areal.io/" $label) (hasPrefix "helm.sh/" $label) -}}
{{- fail (printf "podLabels.%s, set in %s, is a label the chart manages; remove it" $label $w.source) -}}
{{- end -}}
{{- end -}}
{{- range $label, $_ := $cfg.podLabels -}}
{{- if hasPrefix "kueue.x-k8s.io/" $label -}}
{{- fail (printf "podLabels.%s, set in %s: Kueue labels on pods would queue each worker alone; set kueue.queueName (and kueue.priorityClass) instead, which queue the role as one group" $label $w.source) -}}
{{- end -}}
{{- end -}}
{{- $kueue := $cfg.kueue | default dict -}}
{{- range $level := list "requiredTopology" "preferredTopology" -}}
{{- if and (get $kueue $level) (not $kueue.queueName) -}}
{{- fail (printf "%s: kueue.%s %q is set without kueue.queueName (in %s): Kueue places only the workers it admits; set kueue.queueName to a LocalQueue whose ResourceFlavor has a Topology, or use exclusiveTopology (the kube-scheduler's own placement)" $w.name $level (get $kueue $level) $w.source) -}}
{{- end -}}
{{- end -}}
{{- if and $kueue.requiredTopology $kueue.preferredTopology -}}
{{- fail (printf "%s: kueue.requiredTopology and kueue.preferredTopology are both set (in %s); Kueue takes one: keep requiredTopology for a hard requirement, preferredTopology for a wish" $w.name $w.source) -}}
{{- end -}}
{{- if and $kueue.priorityClass (not $kueue.queueName) -}}
{{- fail (printf "%s: kueue.priorityClass %q is set without kueue.queueName (in %s); set kueue.queueName to the role's LocalQueue or remove kueue.priorityClass" $w.name $kueue.priorityClass $w.source) -}}
{{- end -}}
{{- range $ann, $_ := $cfg.podAnnotations -}}
{{- if hasPrefix "areal.io/" $ann -}}
{{- fail (printf "podAnnotations.%s, set in %s, is an annotation the chart manages; remove it" $ann $w.source) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* hostNetwork pods of two roles on one node would bind the same ports. Params: root, items. */}}
{{- define "areal-workers.preflight.hostNetwork" -}}
{{- $hostNet := list -}}
{{- range $w := .items -}}
{{- if $w.config.hostNetwork -}}
{{- $last := add $w.guardPort (int $w.config.extraPorts) -}}
{{- $portPath := ternary (printf "roles.%s.guardPort" $w.name) (printf "forks.%s.overrides.guardPort" $w.name) (eq $w.kind "role") -}}
{{- $hostNet = append $hostNet (list $w.name (int $w.guardPort) (int $last) $portPath) -}}
{{- end -}}
{{- end -}}
{{- range $i, $a := $hostNet -}}
{{- range $j, $b := $hostNet -}}
{{- if and (lt $i $j) (le (index $a 1) (index $b 2)) (le (index $b 1) (index $a 2)) -}}
{{- fail (printf "%s (ports %d-%d) and %s (ports %d-%d) both use hostNetwork with overlapping ports; set %s to %d or higher so their workers can share a node" (index $a 0) (index $a 1) (index $a 2) (index $b 0) (index $b 1) (index $b 2) (index $b 3) (add (index $a 2) 1)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
