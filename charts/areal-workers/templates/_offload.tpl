{{/* Offload (AReaL's enable_offload): the bash that preloads torch_memory_saver before the worker starts. */}}

{{/*
bash that finds torch_memory_saver's LD_PRELOAD library with the image's python and exports LD_PRELOAD,
for offload.enabled (AReaL's enable_offload). AReaL (get_tms_env_vars in areal/utils/offload.py) takes
<dir of the package's parent>/torch_memory_saver_hook_mode_preload.abi3.so; find_spec gives the same path
without importing the package (which imports torch). The path depends on the image, so it is found when
the container starts; a missing package stops the worker with a message in the container log.
An LD_PRELOAD the role already sets is kept after it. The chart's text is escaped for the kubelet; the
interpreter (offload.python, else the command's first word) is not, like the command it comes from.
Params: workload.
*/}}
{{- define "areal-workers.offloadScript" -}}
{{- $cfg := .workload.config -}}
{{- $python := $cfg.offload.python | default (first $cfg.command) -}}
{{- $find := `import importlib.util as u, os; s = u.find_spec("torch_memory_saver"); print(os.path.join(os.path.dirname(os.path.dirname(s.origin)), "torch_memory_saver_hook_mode_preload.abi3.so") if s and s.origin else "")` -}}
{{- $hint := printf "install torch_memory_saver in the image or set offload.enabled=false (in %s)" .workload.source -}}
{{- $lines := list
  "{ tms_python=%[1]s"
  "tms_lib=$(\"$tms_python\" -c '%[2]s')"
  "if [ -z \"$tms_lib\" ]; then echo \"areal-workers: offload.enabled is true but torch_memory_saver is not installed for $tms_python; %[3]s\" >&2; exit 1; fi"
  "if [ ! -f \"$tms_lib\" ]; then echo \"areal-workers: offload.enabled is true but torch_memory_saver's preload library $tms_lib does not exist; %[3]s\" >&2; exit 1; fi"
  "export LD_PRELOAD=\"$tms_lib${LD_PRELOAD:+:$LD_PRELOAD}\"; }" -}}
{{- printf (include "areal-workers.kubeletLiteral" (join "\n" $lines)) (include "areal-workers.shellQuote" $python) (include "areal-workers.kubeletLiteral" $find) $hint -}}
{{- end -}}
