{{/*
Checks of value combinations that the schema cannot express. Each message names the value to change.
Run first by "areal-workers.workloads", which every workload-dependent template uses, but the helm test Pod's: helm
renders templates/tests/ before the others and names the template that failed, so its test-health.yaml takes
"areal-workers.workloadItems" and the error names a template of the release's own objects (statefulset.yaml).
*/}}
{{- define "areal-workers.preflight" -}}
{{- $v := .Values -}}
{{- $roles := $v.roles | default dict -}}
{{- $forks := $v.forks | default dict -}}
{{- $colocations := $v.colocations | default dict -}}
{{- $roleList := keys $roles | sortAlpha | join ", " | default "none, roles is empty" -}}

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

{{- /* Resource quantities. The schema checks their type only: its pattern's error would print the grammar, not the
value's path and a fix. The grammar is Kubernetes' (resource.Quantity). A memory without a unit counts bytes: below 1Mi
no worker starts, so "1" (one byte, for 1Gi) is refused with the unit it lacks. */ -}}
{{- $quantityPattern := "^(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$" -}}
{{- $settingsOf := list (list "workerDefaults" ($v.workerDefaults | default dict)) -}}
{{- range $key, $role := $roles -}}
{{- $settingsOf = append $settingsOf (list (printf "roles.%s" $key) ($role | default dict)) -}}
{{- end -}}
{{- range $key, $fork := $forks -}}
{{- $settingsOf = append $settingsOf (list (printf "forks.%s.overrides" $key) ($fork.overrides | default dict)) -}}
{{- end -}}
{{- range $entry := $settingsOf -}}
{{- $resources := (index $entry 1).resources | default dict -}}
{{- $shm := (index $entry 1).shm | default dict -}}
{{- range $field := list (list "resources.cpu" $resources "cpu" "4 or 500m") (list "resources.memory" $resources "memory" "16Gi or 512Mi") (list "shm.sizeLimit" $shm "sizeLimit" "16Gi") -}}
{{- $in := index $field 1 -}}
{{- if hasKey $in (index $field 2) -}}
{{- $quantity := include "areal-workers.scalar" (get $in (index $field 2)) -}}
{{- $path := printf "%s.%s" (index $entry 0) (index $field 0) -}}
{{- if not (regexMatch $quantityPattern $quantity) -}}
{{- fail (printf "%s: %q is not a Kubernetes quantity: write a number with an optional unit, e.g. %s (Ki, Mi, Gi, Ti: powers of 1024; k, M, G, T: of 1000; m: a thousandth)" $path $quantity (index $field 3)) -}}
{{- end -}}
{{- if and (eq (index $field 0) "resources.memory") (lt (include "areal-workers.quantityValue" $quantity | float64) 1048576.0) -}}
{{- $suggestion := ternary (printf "%sGi" $quantity) "1Gi" (regexMatch "^[0-9]+(\\.[0-9]+)?$" $quantity) -}}
{{- fail (printf "%s: %q is less than 1Mi, too little memory to start a worker (a memory without a unit counts bytes): write its unit, e.g. %q" $path $quantity $suggestion) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- $items := (include "areal-workers.workloadItems" . | fromJson).items -}}

{{- /* Roles and pod-mode forks must not map to the same StatefulSet/Service name. */ -}}
{{- $owners := dict -}}
{{- range $w := $items -}}
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
{{- $hostNet := list -}}
{{- range $w := $items -}}
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
{{- if $cfg.hostNetwork -}}
{{- $portPath := ternary (printf "roles.%s.guardPort" $w.name) (printf "forks.%s.overrides.guardPort" $w.name) (eq $w.kind "role") -}}
{{- $hostNet = append $hostNet (list $w.name (int $w.guardPort) (int $last) $portPath) -}}
{{- end -}}
{{- end -}}

{{- /* Image references the kubelet cannot pull fail only on the node, as ErrImagePull; the CLI refuses them before
anything is applied (release/image_reference.py), and so does the chart, with the same grammar (distribution/reference)
and the same advice for an uppercase path. */ -}}
{{- $images := list -}}
{{- range $w := $items -}}
{{- $from := ternary (printf "roles.%s.image, workerDefaults.image or image" $w.name) (printf "forks.%s.overrides.image, roles.%s.image, workerDefaults.image or image" $w.name $w.target) (eq $w.kind "role") -}}
{{- $images = append $images (list (printf "the image of %s.%s" (ternary "roles" "forks" (eq $w.kind "role")) $w.name) (include "areal-workers.image" (dict "root" $ "image" ($w.config.image | default dict))) $from) -}}
{{- end -}}
{{- if and $v.tests.enabled $items -}}
{{- $images = append $images (list "the test Pod's image" (include "areal-workers.image" (dict "root" $ "image" $v.tests.image)) "tests.image or image") -}}
{{- end -}}
{{- if and $v.reaper.enabled (trim $v.reaper.image.repository) -}}
{{- $images = append $images (list "the reaper's image" (include "areal-workers.reaperImage" $) "reaper.image") -}}
{{- end -}}
{{- range $image := $images -}}
{{- $problem := include "areal-workers.imageProblem" (index $image 1) -}}
{{- if $problem -}}
{{- fail (printf "%s, %q (from %s), is not a container image reference: %s" (index $image 0) (index $image 1) (index $image 2) $problem) -}}
{{- end -}}
{{- end -}}

{{- /* hostNetwork pods of two roles on one node would bind the same ports. */ -}}
{{- range $i, $a := $hostNet -}}
{{- range $j, $b := $hostNet -}}
{{- if and (lt $i $j) (le (index $a 1) (index $b 2)) (le (index $b 1) (index $a 2)) -}}
{{- fail (printf "%s (ports %d-%d) and %s (ports %d-%d) both use hostNetwork with overlapping ports; set %s to %d or higher so their workers can share a node" (index $a 0) (index $a 1) (index $a 2) (index $b 0) (index $b 1) (index $b 2) (index $b 3) (add (index $a 2) 1)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- /* The API server refuses an object with two controller owners. */ -}}
{{- $controllers := list -}}
{{- range $i, $ref := $v.ownerReferences | default list -}}
{{- if $ref.controller -}}
{{- $controllers = append $controllers $i -}}
{{- end -}}
{{- end -}}
{{- if gt (len $controllers) 1 -}}
{{- fail (printf "ownerReferences[%d] and ownerReferences[%d] both set controller: true, and an object has at most one controller; set controller: false on all but one" (index $controllers 0) (index $controllers 1)) -}}
{{- end -}}

{{- /* The reaper has no default image: AReaL's runtime image has neither areal-workers nor helm. */ -}}
{{- if and $v.reaper.enabled (not (trim $v.reaper.image.repository)) -}}
{{- fail "reaper.enabled is true but reaper.image.repository is empty: set it to an image with areal-workers and helm on its PATH (AReaL's runtime image has neither): images/reaper/Dockerfile builds one and make release REGISTRY=R pushes it, then --set reaper.image.repository=R/areal-workers/reaper (its tag defaults to the chart's version)" -}}
{{- end -}}

{{- /* A controller or reaper ServiceAccount that rbac/cluster/admission-policy.yaml does not match could mint a token of any
ServiceAccount of the namespace: refuse to render one or run the reaper as one ("areal-workers.policyIdentityPattern").
The names the chart builds end in areal-workers-<component>; an explicit name is checked as given. Each entry: the
value that names it, the name, the component, whether the value gave it. */ -}}
{{- $pattern := include "areal-workers.policyIdentityPattern" . -}}
{{- $identities := list -}}
{{- if $v.controllerRbac.create -}}
{{- $identities = append $identities (list "controllerRbac.serviceAccountName" (include "areal-workers.controllerServiceAccountName" .) "controller" (not (empty $v.controllerRbac.serviceAccountName))) -}}
{{- end -}}
{{- if $v.reaper.enabled -}}
{{- $identities = append $identities (list "reaper.serviceAccountName" (include "areal-workers.reaperServiceAccountName" .) "reaper" (not (empty $v.reaper.serviceAccountName))) -}}
{{- if $v.controllerRbac.create -}}
{{- $identities = append $identities (list "reaper.serviceAccountName" (include "areal-workers.identityName" (dict "root" . "component" "reaper")) "reaper" false) -}}
{{- end -}}
{{- end -}}
{{- range $identity := $identities -}}
{{- $key := index $identity 0 -}}
{{- $name := index $identity 1 -}}
{{- $component := index $identity 2 -}}
{{- if not (regexMatch $pattern $name) -}}
{{- $risk := ternary "create a token Secret of any ServiceAccount of the namespace and act as it" "overwrite or delete any Secret of the namespace" (eq $component "controller") -}}
{{- $policy := printf "is not matched by rbac/cluster/admission-policy.yaml, whose policies act on the ServiceAccounts named areal-controller or areal-reaper or ending in areal-workers-controller or areal-workers-reaper: a %s identity they do not match could %s" $component $risk -}}
{{- if index $identity 3 -}}
{{- $stem := regexReplaceAll "-?(controller|reaper)$" (regexReplaceAll "[^a-z0-9]+" (lower $name) "-") "" | trunc 30 | trimAll "-" | default "my" -}}
{{- fail (printf "%s %q %s. Set %s to a name ending in areal-workers-%s (e.g. %q), or leave it empty for the chart's own" $key $name $policy $key $component (printf "%s-areal-workers-%s" $stem $component)) -}}
{{- else -}}
{{- fail (printf "the %s ServiceAccount %q, built from the release name, fullnameOverride and nameOverride, %s. Use only lowercase letters, digits and '-' in nameOverride and fullnameOverride" $component $name $policy) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- with $v.sharedStorage -}}
{{- if and .enabled (not .claimName) (not .volume) -}}
{{- fail "sharedStorage.enabled is true but names no volume: set sharedStorage.claimName to a ReadWriteMany PersistentVolumeClaim of the release namespace, or sharedStorage.volume to a volume source (e.g. {nfs: {server: ..., path: ...}})" -}}
{{- end -}}
{{- if and .enabled .claimName .volume -}}
{{- fail "sharedStorage sets both claimName and volume: keep one of them" -}}
{{- end -}}
{{- end -}}
{{- $uncovered := (include "areal-workers.uncoveredPaths" . | fromJson).items -}}
{{- if and $uncovered (eq $v.sharedStorage.uncoveredPaths "fail") -}}
{{- fail (printf "%s: on no volume every worker mounts, so AReaL's workers and trainer would not see each other's files (name_resolve type nfs); set sharedStorage.enabled with a claimName and put cluster.fileroot and cluster.nameResolve.nfsRecordRoot under sharedStorage.mountPath (%s), use cluster.nameResolve.type etcd3, or set sharedStorage.uncoveredPaths=warn" (join ", " $uncovered) $v.sharedStorage.mountPath) -}}
{{- end -}}

{{- with $v.networkPolicy -}}
{{- if and .enabled .allocatedPorts.enabled (gt (int .allocatedPorts.start) (int .allocatedPorts.end)) -}}
{{- fail (printf "networkPolicy.allocatedPorts.start (%d) is greater than networkPolicy.allocatedPorts.end (%d); swap them" (int .allocatedPorts.start) (int .allocatedPorts.end)) -}}
{{- end -}}
{{- if and .enabled (not .controller.podSelector) (not .controller.namespaceSelector) (not .controller.cidrs) -}}
{{- fail "networkPolicy.controller admits nobody, so the trainer could not reach the workers: set networkPolicy.controller.podSelector, .namespaceSelector or .cidrs, or set networkPolicy.enabled=false" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A quantity's value as a number (bytes for a memory). Param: a quantity string the preflight's pattern accepts. */}}
{{- define "areal-workers.quantityValue" -}}
{{- $number := regexFind "^[0-9]*\\.?[0-9]*" . -}}
{{- $unit := trimPrefix $number . -}}
{{- $scale := dict "" 1.0 "n" 0.000000001 "u" 0.000001 "m" 0.001 "k" 1000.0 "M" 1000000.0 "G" 1000000000.0 "T" 1000000000000.0 "P" 1000000000000000.0 "E" 1000000000000000000.0 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "Pi" 1125899906842624.0 "Ei" 1152921504606846976.0 -}}
{{- if hasKey $scale $unit -}}
{{- mulf (float64 $number) (get $scale $unit) -}}
{{- else -}}
{{- float64 . -}}
{{- end -}}
{{- end -}}

{{/*
What is wrong with an image reference, as the kubelet parses it (distribution/reference: [registry/]path[:tag][@digest],
the path lowercase); empty when nothing is. Only sha256 digests render ("areal-workers.imageRef"). The CLI's
release/image_reference.py says the same in more cases; tests/chart/test_image_refs.py holds the two together.
*/}}
{{- define "areal-workers.imageProblem" -}}
{{- $path := "[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*" -}}
{{- $domainPart := "(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])" -}}
{{- $domain := printf "(?:%s(?:\\.%s)*|\\[[a-fA-F0-9:]+\\])(?::[0-9]+)?" $domainPart $domainPart -}}
{{- $reference := printf "^(?:%s/)?%s(?:/%s)*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?$" $domain $path $path -}}
{{- if not (regexMatch $reference .) -}}
{{- $digest := regexFind "@.*$" . -}}
{{- $rest := trimSuffix $digest . -}}
{{- $tag := regexFind ":[^/:]*$" $rest -}}
{{- $components := splitList "/" (trimSuffix $tag $rest) -}}
{{- $first := first $components -}}
{{- $keepFirst := and (gt (len $components) 1) (or (eq $first "localhost") (contains "." $first) (contains ":" $first) (contains "[" $first)) -}}
{{- $lowered := list -}}
{{- range $i, $c := $components -}}
{{- $lowered = append $lowered (ternary $c (lower $c) (and $keepFirst (eq $i 0))) -}}
{{- end -}}
{{- $candidate := printf "%s%s%s" (join "/" $lowered) $tag $digest -}}
{{- if and (ne $candidate .) (regexMatch $reference $candidate) -}}
{{- printf "the repository path must be lowercase: use %q" $candidate -}}
{{- else -}}
{{- print "write [registry/]path[:tag][@sha256:<64 hex digits>], the path in lowercase letters and digits separated by '.', '_', '__' or '-', the tag in letters, digits, '_', '.' and '-'" -}}
{{- end -}}
{{- end -}}
{{- end -}}
