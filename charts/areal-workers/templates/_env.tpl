{{/* The worker container's environment. */}}

{{/*
The worker container's env list, as JSON, in an order that lets "$(VAR)" references work (the kubelet
only expands variables defined earlier in the list):
1. set by the chart, reserved (a role may not set them, see _preflight_workloads.tpl): POD_NAME, POD_NAMESPACE,
   POD_IP, AREAL_WORKER_INDEX (downward API), then the AReaL identity AREAL_EXPERIMENT_NAME,
   AREAL_TRIAL_NAME, AREAL_ROLE and AREAL_WORKER_ID ("<role>/<index>");
2. the role's env (merged from workerDefaults), sorted by name;
3. what AReaL's launchers give every worker (BASE_ENVIRONS in areal/infra/utils/launcher.py) and, with
   offload.enabled, the torch_memory_saver switches (areal/utils/offload.py), each left out when the
   role's env sets it, so the role wins as its env_vars do in AReaL. They come after the role's env because
   the cache paths refer to $(USER) and $(AREAL_CACHE_DIR), which a role may set.
Params: root, workload.
*/}}
{{- define "areal-workers.workerEnv" -}}
{{- $root := .root -}}
{{- $w := .workload -}}
{{- $cfg := $w.config -}}
{{- $roleEnv := $cfg.env | default dict -}}
{{- $env := list
  (dict "name" "POD_NAME" "valueFrom" (dict "fieldRef" (dict "fieldPath" "metadata.name")))
  (dict "name" "POD_NAMESPACE" "valueFrom" (dict "fieldRef" (dict "fieldPath" "metadata.namespace")))
  (dict "name" "POD_IP" "valueFrom" (dict "fieldRef" (dict "fieldPath" "status.podIP")))
  (dict "name" "AREAL_WORKER_INDEX" "valueFrom" (dict "fieldRef" (dict "fieldPath" "metadata.labels['apps.kubernetes.io/pod-index']")))
  (dict "name" "AREAL_EXPERIMENT_NAME" "value" (include "areal-workers.kubeletLiteral" (include "areal-workers.scalar" $root.Values.experiment)))
  (dict "name" "AREAL_TRIAL_NAME" "value" (include "areal-workers.kubeletLiteral" (include "areal-workers.scalar" $root.Values.trial)))
  (dict "name" "AREAL_ROLE" "value" (include "areal-workers.kubeletLiteral" $w.name))
  (dict "name" "AREAL_WORKER_ID" "value" (printf "%s/$(AREAL_WORKER_INDEX)" (include "areal-workers.kubeletLiteral" $w.name))) -}}
{{- range $name, $value := $roleEnv -}}
{{- if kindIs "map" $value -}}
{{- $env = append $env (merge (dict "name" $name) $value) -}}
{{- else -}}
{{- $env = append $env (dict "name" $name "value" (include "areal-workers.scalar" $value)) -}}
{{- end -}}
{{- end -}}
{{- /* AReaL: AREAL_CACHE_DIR defaults to /tmp/areal-<user>, the caches live in <cache dir>/.cache/<user>/. */ -}}
{{- $userCache := ternary "$(AREAL_CACHE_DIR)/.cache/$(USER)" "$(AREAL_CACHE_DIR)/.cache" (hasKey $roleEnv "USER") -}}
{{- $base := list
  (list "AREAL_CACHE_DIR" (ternary "/tmp/areal-$(USER)" "/tmp/areal" (hasKey $roleEnv "USER")))
  (list "TOKENIZERS_PARALLELISM" "true")
  (list "PYTORCH_KERNEL_CACHE_PATH" (printf "%s/torch/kernels/" $userCache))
  (list "TRITON_CACHE_DIR" (printf "%s/triton/" $userCache))
  (list "VLLM_CACHE_ROOT" (printf "%s/vllm/" $userCache))
  (list "CUDA_DEVICE_MAX_CONNECTIONS" "1") -}}
{{- if $cfg.offload.enabled -}}
{{- $base = concat $base (list (list "TMS_INIT_ENABLE" "1") (list "TMS_INIT_ENABLE_CPU_BACKUP" "1")) -}}
{{- end -}}
{{- range $pair := $base -}}
{{- if not (hasKey $roleEnv (index $pair 0)) -}}
{{- $env = append $env (dict "name" (index $pair 0) "value" (index $pair 1)) -}}
{{- end -}}
{{- end -}}
{{- toJson $env -}}
{{- end -}}
