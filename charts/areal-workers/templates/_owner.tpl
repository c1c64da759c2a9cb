{{/* The release's objects' owner, and whether the release is a trial at all. */}}

{{/*
metadata.ownerReferences of the release's objects, from the ownerReferences value: the one place that writes them.
Written at the indentation of a top-level object's metadata keys (2), with its own leading newline, so an empty
value leaves no line behind: include it under metadata in a left-trimming action, after the namespace.
Used by the StatefulSets, Services, topology ConfigMap, workers' ServiceAccount and NetworkPolicy. Not used by:
- pod templates: the StatefulSet controller makes each StatefulSet its pods' owner;
- the helm test hook Pod (templates/tests/): helm deletes hooks itself, and an owner would make a test Pod vanish
  mid-test when the trainer goes;
- the controllerRbac objects: they are the trainer's own permissions and exist before it (it runs as that
  ServiceAccount), so owned by a trainer Pod they would be gone when its Job starts a replacement Pod.
Params: root.
*/}}
{{- define "areal-workers.ownerReferences" -}}
{{- with .Values.ownerReferences }}
{{- printf "ownerReferences:\n%s" (toYaml . | indent 2) | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
"true" when the release is a trial (renders a trial's objects), "" for a reaper-only release: reaper.enabled with no
roles, colocations or forks. Such a release is namespace infrastructure holding the reaper CronJob, so it renders no
topology ConfigMap (the CLI finds trials by it: `areal-workers status` would list an empty trial, and commands that
pick the namespace's only trial would find two), no workers' ServiceAccount, no NetworkPolicy and no helm test Pod.
Giving it a role later makes it a trial like any other. A release without the reaper is always a trial, even with no
roles (an adapter-driven release between its last role's deletion and its uninstall keeps its topology ConfigMap).
Params: root.
*/}}
{{- define "areal-workers.isTrial" -}}
{{- if or (not .Values.reaper.enabled) .Values.roles .Values.colocations .Values.forks -}}
true
{{- end -}}
{{- end -}}
