{{/* AReaL's worker flags: the command line every worker gets. */}}

{{/*
The release-wide AReaL worker flags that follow the per-worker ones, as a JSON list of raw strings:
--name-resolve-type X --nfs-record-root Y --etcd3-addr Z --fileroot F (AReaL's order). A value removed
with null is left out, as AReaL's fork_workers leaves out unset ones. Written into the topology
ConfigMap as "worker_flags", so the adapter's process forks get exactly what the pods get. Params: root.
*/}}
{{- define "areal-workers.clusterFlags" -}}
{{- $cluster := .Values.cluster | default dict -}}
{{- $resolve := $cluster.nameResolve | default dict -}}
{{- $flags := list -}}
{{- range $pair := list (list "--name-resolve-type" $resolve.type) (list "--nfs-record-root" $resolve.nfsRecordRoot) (list "--etcd3-addr" $resolve.etcd3Addr) (list "--fileroot" $cluster.fileroot) -}}
{{- $value := index $pair 1 -}}
{{- if and (not (kindIs "invalid" $value)) (ne (toString $value) "") -}}
{{- $flags = concat $flags (list (index $pair 0) (include "areal-workers.scalar" $value)) -}}
{{- end -}}
{{- end -}}
{{- toJson $flags -}}
{{- end -}}

{{/*
AReaL's worker flags for one worker of a workload, as a JSON list, in the order of AReaL's LocalScheduler:
--experiment-name E --trial-name T --role R --worker-index I, then "areal-workers.clusterFlags".
The one source of a worker's command line (the StatefulSet args use it; the topology ConfigMap records
its release-wide part). Params: root, role, index (written as given, e.g. "$(AREAL_WORKER_INDEX)"),
escape (true: "$" in the values is doubled for the kubelet; the index is not touched).
*/}}
{{- define "areal-workers.workerFlags" -}}
{{- $v := .root.Values -}}
{{- $values := list (include "areal-workers.scalar" $v.experiment) (include "areal-workers.scalar" $v.trial) (toString .role) -}}
{{- $cluster := include "areal-workers.clusterFlags" .root | fromJsonArray -}}
{{- if .escape -}}
{{- $escaped := list -}}
{{- range $values -}}{{- $escaped = append $escaped (include "areal-workers.kubeletLiteral" .) -}}{{- end -}}
{{- $values = $escaped -}}
{{- $escaped = list -}}
{{- range $cluster -}}{{- $escaped = append $escaped (include "areal-workers.kubeletLiteral" .) -}}{{- end -}}
{{- $cluster = $escaped -}}
{{- end -}}
{{- $flags := list "--experiment-name" (index $values 0) "--trial-name" (index $values 1) "--role" (index $values 2) "--worker-index" (toString .index) -}}
{{- toJson (concat $flags $cluster) -}}
{{- end -}}
