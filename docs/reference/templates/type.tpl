{{- define "type" -}}
{{- $type := . -}}
{{- if markdownShouldRenderType $type }}
#### {{ $type.Name }}
{{ if $type.IsAlias }}
_Underlying type:_ _{{ markdownRenderTypeLink $type.UnderlyingType }}_
{{ end }}
{{ $type.Doc | trim }}
{{ if or (without $type.Validation "Optional: {}") (index $type.Markers "kubebuilder:validation:XValidation") }}
_Validation:_ {{ template "validation" $type }}
{{ end }}
{{- if $type.References }}
_Appears in:_
{{- range $type.SortedReferences }}
- {{ markdownRenderTypeLink . }}
{{- end }}
{{ end }}
{{- if $type.Members }}
| Field | Description | Default | Validation |
| --- | --- | --- | --- |
{{- if $type.GVK }}
| `apiVersion` _string_ | `{{ $type.GVK.Group }}/{{ $type.GVK.Version }}` | | |
| `kind` _string_ | `{{ $type.GVK.Kind }}` | | |
{{- end }}
{{- range $type.Members }}
| `{{ .Name }}` _{{ markdownRenderType .Type }}_ | {{ template "type_members" . }} | {{ markdownRenderDefault .Default }} | {{ template "validation" . }} |
{{- end }}
{{ end }}
{{- if $type.EnumValues }}
| Value | Description |
| --- | --- |
{{- range $type.EnumValues }}
| `{{ .Name }}` | {{ template "doc" .Doc }} |
{{- end }}
{{ end }}
{{- end -}}
{{- end -}}
