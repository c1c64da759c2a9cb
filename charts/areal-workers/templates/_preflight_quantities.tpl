{{/* Resource quantities. The schema checks their type only: its pattern's error would print the grammar, not the
value's path and a fix. The grammar is Kubernetes' (resource.Quantity). A memory without a unit counts bytes: below 1Mi
no worker starts, so "1" (one byte, for 1Gi) is refused with the unit it lacks.  Params: root. */}}
{{- define "areal-workers.preflight.quantities" -}}
{{- $v := .Values -}}
{{- $roles := $v.roles | default dict -}}
{{- $forks := $v.forks | default dict -}}
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
