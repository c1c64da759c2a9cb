{{/* Names, labels and image references of the release's objects. Each other concern has a file of its own:
_owner.tpl and _identity.tpl (who owns the objects, who may act on them), _workloads.tpl (the per-role
configuration), _placement.tpl and _container.tpl (a worker's pod), _flags.tpl and _env.tpl (its command line and
environment), _offload.tpl, _storage.tpl, _text.tpl (scalars and quoting), and the checks, _preflight*.tpl. */}}

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
A role queued in Kueue stops at 45: Kueue labels its pods with its Workload's name,
"statefulset-<statefulset>-<5 char hash>", and a longer one breaks admission.
Params: root, key, limit (optional, default 52).
*/}}
{{- define "areal-workers.objectName" -}}
{{- $full := printf "%s-%s" (include "areal-workers.fullname" .root) (replace "_" "-" .key) -}}
{{- $limit := .limit | default 52 | int -}}
{{- if gt (len $full) $limit -}}
{{- printf "%s-%s" (trunc (sub $limit 9 | int) $full | trimSuffix "-") (sha256sum $full | trunc 8) -}}
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

{{/* Kueue's labels on a role's StatefulSet (not its pods: Kueue labels those of the group itself). Params: config. */}}
{{- define "areal-workers.kueueLabels" -}}
{{- with .config.kueue }}
{{- if .queueName }}
kueue.x-k8s.io/queue-name: {{ .queueName | quote }}
{{- with .priorityClass }}
kueue.x-k8s.io/priority-class: {{ . | quote }}
{{- end }}
{{- end }}
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

{{/* The reaper image: "repository:tag" or "repository@sha256:..."; no tag means the chart's version (the tag the
release pushes). Params: root. */}}
{{- define "areal-workers.reaperImage" -}}
{{- $image := .Values.reaper.image -}}
{{- $tag := include "areal-workers.scalar" $image.tag | default .Chart.Version -}}
{{- include "areal-workers.imageRef" (dict "repository" $image.repository "tag" $tag) -}}
{{- end -}}
