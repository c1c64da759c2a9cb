{{/* Names, labels and the per-role configuration. */}}

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

{{/* The exclusive-placement group of a role and its pod-mode forks: unique per namespace, release and role, and a
valid label value. Params: root, role. */}}
{{- define "areal-workers.exclusiveGroup" -}}
{{- printf "%s/%s/%s" .root.Release.Namespace .root.Release.Name .role | sha256sum | trunc 20 -}}
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

{{- define "areal-workers.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "areal-workers.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

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
The user-name part of the identity pattern of rbac/cluster/admission-policy.yaml's policies (their matchConditions):
ServiceAccounts named areal-controller, areal-reaper, or ending in areal-workers-controller or areal-workers-reaper.
The policies bind by name because a ValidatingAdmissionPolicy sees of the requester only its user name, groups and
extra (no labels of its ServiceAccount), and they live outside the chart: cluster-scoped, applied once by an
administrator with kubectl, so the chart can neither render them nor read that file (.Files stops at the chart).
This copy is what the preflight checks every controller and reaper ServiceAccount of the release against;
tests/chart/test_policy_identity.py fails when it differs from the policies' pattern, and renders a matrix of release
names and overrides against the policies' own pattern.
*/}}
{{- define "areal-workers.policyIdentityPattern" -}}
^(areal-(controller|reaper)|[a-z0-9.-]*areal-workers-(controller|reaper))$
{{- end -}}

{{/*
The name of a ServiceAccount the chart renders for the controller or the reaper (controllerRbac.create), built so that
the admission policy matches it: it always ends in "areal-workers-<component>". "<fullname>-<component>" when the
fullname ends in "areal-workers" (release demo: demo-areal-workers-controller), else
"<fullname>-areal-workers-<component>" (release areal-workers-infra: areal-workers-infra-areal-workers-controller).
A name over 63 characters keeps that suffix and loses the end of its prefix instead: the prefix cut, then "-" and 8 hex
digits of the whole name's sha256, so distinct names stay distinct. Params: root, component.
*/}}
{{- define "areal-workers.identityName" -}}
{{- $suffix := printf "areal-workers-%s" .component -}}
{{- $full := include "areal-workers.fullname" .root -}}
{{- $name := printf "%s-%s" $full $suffix -}}
{{- if hasSuffix "areal-workers" $full -}}
{{- $name = printf "%s-%s" $full .component -}}
{{- end -}}
{{- if gt (len $name) 63 -}}
{{- $prefix := trimSuffix $suffix $name | trunc (sub 63 (add (len $suffix) 10) | int) | trimSuffix "-" -}}
{{- $name = printf "%s-%s-%s" $prefix (sha256sum $name | trunc 8) $suffix -}}
{{- end -}}
{{- $name -}}
{{- end -}}

{{- define "areal-workers.controllerServiceAccountName" -}}
{{- default (include "areal-workers.identityName" (dict "root" . "component" "controller")) .Values.controllerRbac.serviceAccountName -}}
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

{{/* The reaper CronJob's name, at most 52 characters: the CronJob controller names its Jobs "<cronjob>-<minutes since
the epoch>" (11 more characters), and Job names become pod labels (at most 63). Params: root. */}}
{{- define "areal-workers.reaperName" -}}
{{- printf "%s-reaper" (include "areal-workers.fullname" . | trunc 45 | trimSuffix "-") -}}
{{- end -}}

{{/* The reaper pods' ServiceAccount: reaper.serviceAccountName, else the reaper's own one the release renders with
controllerRbac.create (templates/reaper-rbac.yaml, "areal-workers.identityName": the CronJob's name when that ends in
areal-workers-reaper, which a long or overridden fullname does not), else rbac/reaper.yaml's areal-reaper.
Params: root. */}}
{{- define "areal-workers.reaperServiceAccountName" -}}
{{- if .Values.reaper.serviceAccountName -}}
{{- .Values.reaper.serviceAccountName -}}
{{- else if .Values.controllerRbac.create -}}
{{- include "areal-workers.identityName" (dict "root" . "component" "reaper") -}}
{{- else -}}
areal-reaper
{{- end -}}
{{- end -}}

{{/* The reaper image: "repository:tag" or "repository@sha256:..."; no tag means the chart's version (the tag the
release pushes). Params: root. */}}
{{- define "areal-workers.reaperImage" -}}
{{- $image := .Values.reaper.image -}}
{{- $tag := include "areal-workers.scalar" $image.tag | default .Chart.Version -}}
{{- include "areal-workers.imageRef" (dict "repository" $image.repository "tag" $tag) -}}
{{- end -}}

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

{{/* A scalar as a string; whole numbers print without an exponent (YAML numbers arrive as float64). */}}
{{- define "areal-workers.scalar" -}}
{{- if and (kindIs "float64" .) (eq . (float64 (int64 .))) -}}
{{- int64 . -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end -}}

{{/* "$" doubled, so the kubelet does not expand "$(...)" in a value the chart writes into command, args or env. */}}
{{- define "areal-workers.kubeletLiteral" -}}
{{- replace "$" "$$" (toString .) -}}
{{- end -}}

{{/* A word for bash: single-quoted, embedded quotes closed and reopened. */}}
{{- define "areal-workers.shellQuote" -}}
{{- printf "'%s'" (replace "'" "'\\''" (toString .)) -}}
{{- end -}}

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

{{/*
The worker container's env list, as JSON, in an order that lets "$(VAR)" references work (the kubelet
only expands variables defined earlier in the list):
1. set by the chart, reserved (a role may not set them, see _preflight.tpl): POD_NAME, POD_NAMESPACE,
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
