{{/* Image references the kubelet cannot pull fail only on the node, as ErrImagePull; the CLI refuses them before
anything is applied (release/image_reference.py), and so does the chart, with the same grammar (distribution/reference)
and the same advice for an uppercase path.  Params: root, items. */}}
{{- define "areal-workers.preflight.images" -}}
{{- $v := .root.Values -}}
{{- $images := list -}}
{{- range $w := .items -}}
{{- $from := ternary (printf "roles.%s.image, workerDefaults.image or image" $w.name) (printf "forks.%s.overrides.image, roles.%s.image, workerDefaults.image or image" $w.name $w.target) (eq $w.kind "role") -}}
{{- $images = append $images (list (printf "the image of %s.%s" (ternary "roles" "forks" (eq $w.kind "role")) $w.name) (include "areal-workers.image" (dict "root" $.root "image" ($w.config.image | default dict))) $from) -}}
{{- end -}}
{{- if and $v.tests.enabled .items -}}
{{- $images = append $images (list "the test Pod's image" (include "areal-workers.image" (dict "root" $.root "image" $v.tests.image)) "tests.image or image") -}}
{{- end -}}
{{- if and $v.reaper.enabled (trim $v.reaper.image.repository) -}}
{{- $images = append $images (list "the reaper's image" (include "areal-workers.reaperImage" $.root) "reaper.image") -}}
{{- end -}}
{{- range $image := $images -}}
{{- $problem := include "areal-workers.imageProblem" (index $image 1) -}}
{{- if $problem -}}
{{- fail (printf "%s, %q (from %s), is not a container image reference: %s" (index $image 0) (index $image 1) (index $image 2) $problem) -}}
{{- end -}}
{{- end -}}
{{- end -}}

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
