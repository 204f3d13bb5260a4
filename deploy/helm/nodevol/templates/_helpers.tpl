{{/*
nodevol.image is an image reference from an image block of the values:
repository@digest when digest is set (what runs is then exactly what was
built), else repository:tag.
*/}}
{{- define "nodevol.image" -}}
{{- if .digest -}}
{{ .repository }}@{{ .digest }}
{{- else -}}
{{ .repository }}:{{ required "an image tag or digest is required" .tag }}
{{- end -}}
{{- end -}}
