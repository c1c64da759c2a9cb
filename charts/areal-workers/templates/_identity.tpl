{{/* The ServiceAccounts the release's pods run as, and the names the cluster's admission policy accepts for the
controller and the reaper. */}}

{{- define "areal-workers.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "areal-workers.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
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
