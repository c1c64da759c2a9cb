{{/* Scalars and quoting: values written into YAML, into the kubelet's command, args and env, and into bash. */}}

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
