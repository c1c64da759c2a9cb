{{/* The worker container: its command, args, resources and security context, each as JSON. */}}

{{/* The container command: the role's command, wrapped in bash only when something must run before the worker:
setupCommands, then the offload preload ("areal-workers.offloadScript"). Params: root, workload. */}}
{{- define "areal-workers.workerCommand" -}}
{{- $cfg := .workload.config -}}
{{- $script := $cfg.setupCommands | default list -}}
{{- if $cfg.offload.enabled -}}
{{- $script = append $script (include "areal-workers.offloadScript" .) -}}
{{- end -}}
{{- $command := $cfg.command -}}
{{- if $script -}}
{{- $command = concat (list "bash" "-c" (join " && " (append $script "exec \"$@\"")) "--") $cfg.command -}}
{{- end -}}
{{- toJson $command -}}
{{- end -}}

{{/* The container args: --host and --port (per pod), AReaL's flags from "areal-workers.workerFlags" ("$" doubled in
values: the kubelet must not expand them; the index is the pod's), then the role's extraArgs. Params: root, workload. */}}
{{- define "areal-workers.workerArgs" -}}
{{- $w := .workload -}}
{{- $flags := include "areal-workers.workerFlags" (dict "root" .root "role" $w.name "index" "$(AREAL_WORKER_INDEX)" "escape" true) | fromJsonArray -}}
{{- $args := concat (list "--host" "$(POD_IP)" "--port" (toString $w.guardPort)) $flags -}}
{{- toJson (concat $args ($w.config.extraArgs | default list)) -}}
{{- end -}}

{{/* The container's resources, requests and limits alike: cpu, memory, the GPUs and the RDMA devices. Params: config. */}}
{{- define "areal-workers.workerResources" -}}
{{- $cfg := .config -}}
{{- $quantities := dict "cpu" (include "areal-workers.scalar" $cfg.resources.cpu) "memory" (include "areal-workers.scalar" $cfg.resources.memory) -}}
{{- if gt (int $cfg.resources.gpu) 0 -}}
{{- $_ := set $quantities $cfg.resources.gpuResourceName (toString (int $cfg.resources.gpu)) -}}
{{- end -}}
{{- if $cfg.rdma.enabled -}}
{{- $_ := set $quantities $cfg.rdma.resourceName (toString (int $cfg.rdma.count)) -}}
{{- end -}}
{{- toJson $quantities -}}
{{- end -}}

{{/* The container's securityContext: the role's, with IPC_LOCK added for RDMA. Params: config. */}}
{{- define "areal-workers.workerSecurityContext" -}}
{{- $cfg := .config -}}
{{- $context := deepCopy ($cfg.containerSecurityContext | default dict) -}}
{{- if $cfg.rdma.enabled -}}
{{- $caps := $context.capabilities | default dict -}}
{{- $_ := set $caps "add" (append ($caps.add | default list) "IPC_LOCK" | uniq) -}}
{{- $_ = set $context "capabilities" $caps -}}
{{- end -}}
{{- toJson $context -}}
{{- end -}}
