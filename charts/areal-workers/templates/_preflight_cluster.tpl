{{/* Checks of what the cluster must accept: one controller owner, a reaper image, ServiceAccounts the admission policy
matches, a shared volume, a NetworkPolicy that admits the trainer. */}}

{{/* The API server refuses an object with two controller owners.  Params: root. */}}
{{- define "areal-workers.preflight.owners" -}}
{{- $v := .Values -}}
{{- $controllers := list -}}
{{- range $i, $ref := $v.ownerReferences | default list -}}
{{- if $ref.controller -}}
{{- $controllers = append $controllers $i -}}
{{- end -}}
{{- end -}}
{{- if gt (len $controllers) 1 -}}
{{- fail (printf "ownerReferences[%d] and ownerReferences[%d] both set controller: true, and an object has at most one controller; set controller: false on all but one" (index $controllers 0) (index $controllers 1)) -}}
{{- end -}}
{{- end -}}

{{/* The reaper has no default image: AReaL's runtime image has neither areal-workers nor helm.  Params: root. */}}
{{- define "areal-workers.preflight.reaper" -}}
{{- $v := .Values -}}
{{- if and $v.reaper.enabled (not (trim $v.reaper.image.repository)) -}}
{{- fail "reaper.enabled is true but reaper.image.repository is empty: set it to an image with areal-workers and helm on its PATH (AReaL's runtime image has neither): images/reaper/Dockerfile builds one and make release REGISTRY=R pushes it, then --set reaper.image.repository=R/areal-workers/reaper (its tag defaults to the chart's version)" -}}
{{- end -}}
{{- end -}}

{{/* A controller or reaper ServiceAccount that rbac/cluster/admission-policy.yaml does not match could mint a token of any
ServiceAccount of the namespace: refuse to render one or run the reaper as one ("areal-workers.policyIdentityPattern").
The names the chart builds end in areal-workers-<component>; an explicit name is checked as given. Each entry: the
value that names it, the name, the component, whether the value gave it.  Params: root. */}}
{{- define "areal-workers.preflight.identities" -}}
{{- $v := .Values -}}
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
{{- end -}}

{{/* Shared storage names one volume, and covers the nfs paths of name_resolve unless told to warn. Params: root. */}}
{{- define "areal-workers.preflight.storage" -}}
{{- $v := .Values -}}
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
{{- end -}}

{{/* The NetworkPolicy admits the trainer, and its allocated port range is a range. Params: root. */}}
{{- define "areal-workers.preflight.networkPolicy" -}}
{{- $v := .Values -}}
{{- with $v.networkPolicy -}}
{{- if and .enabled .allocatedPorts.enabled (gt (int .allocatedPorts.start) (int .allocatedPorts.end)) -}}
{{- fail (printf "networkPolicy.allocatedPorts.start (%d) is greater than networkPolicy.allocatedPorts.end (%d); swap them" (int .allocatedPorts.start) (int .allocatedPorts.end)) -}}
{{- end -}}
{{- if and .enabled (not .controller.podSelector) (not .controller.namespaceSelector) (not .controller.cidrs) -}}
{{- fail "networkPolicy.controller admits nobody, so the trainer could not reach the workers: set networkPolicy.controller.podSelector, .namespaceSelector or .cidrs, or set networkPolicy.enabled=false" -}}
{{- end -}}
{{- end -}}
{{- end -}}
