{{/* Shared storage: the nfs paths of name_resolve that no shared volume covers. */}}

{{/*
The nfs name_resolve paths (cluster.fileroot, cluster.nameResolve.nfsRecordRoot) that lie on no volume every worker
mounts (sharedStorage, workerDefaults.extraVolumeMounts), as {"items": ["<value> <path>", ...]}; none for etcd3.
Params: root.
*/}}
{{- define "areal-workers.uncoveredPaths" -}}
{{- $v := .Values -}}
{{- $mounts := list -}}
{{- if $v.sharedStorage.enabled -}}
{{- $mounts = append $mounts $v.sharedStorage.mountPath -}}
{{- end -}}
{{- range $v.workerDefaults.extraVolumeMounts | default list -}}
{{- $mounts = append $mounts .mountPath -}}
{{- end -}}
{{- $uncovered := list -}}
{{- if eq (toString $v.cluster.nameResolve.type) "nfs" -}}
{{- range $name, $path := dict "cluster.fileroot" $v.cluster.fileroot "cluster.nameResolve.nfsRecordRoot" $v.cluster.nameResolve.nfsRecordRoot -}}
{{- $covered := false -}}
{{- range $mount := $mounts -}}
{{- $base := trimSuffix "/" (toString $mount) -}}
{{- if or (eq $path $base) (hasPrefix (printf "%s/" $base) $path) -}}
{{- $covered = true -}}
{{- end -}}
{{- end -}}
{{- if not $covered -}}
{{- $uncovered = append $uncovered (printf "%s %s" $name $path) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson (dict "items" $uncovered) -}}
{{- end -}}
