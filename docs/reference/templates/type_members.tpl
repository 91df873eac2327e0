{{- define "type_members" -}}
{{- $field := . -}}
{{- if eq $field.Name "metadata" -}}
Refer to the Kubernetes API documentation for the fields of `metadata`.
{{- else -}}
{{ template "doc" $field.Doc }}
{{- end -}}
{{- end -}}

{{- /* doc renders a doc comment in one table cell: wrapped lines join into one line and
paragraphs are separated by a line break. */ -}}
{{- define "doc" -}}
{{ . | trim | replace "\n\n" "\x00" | replace "\n" " " | replace "\x00" "\n" | markdownRenderFieldDoc }}
{{- end -}}

{{- /* validation renders what the API server checks of a field or type: Required first,
then the OpenAPI constraints, then the message of each CEL rule. Optional is left out:
every field that does not say Required is optional. */ -}}
{{- define "validation" -}}
{{- $out := list -}}
{{- if has "Required: {}" .Validation }}{{ $out = append $out "Required" }}{{ end -}}
{{- range .Validation }}{{ if not (has . (list "Required: {}" "Optional: {}")) }}{{ $out = append $out (markdownRenderFieldDoc .) }}{{ end }}{{ end -}}
{{- range index .Markers "kubebuilder:validation:XValidation" }}{{ $out = append $out (printf "Rule: %s" (.Message | default .Rule) | markdownRenderFieldDoc) }}{{ end -}}
{{- join " <br />" $out -}}
{{- end -}}
