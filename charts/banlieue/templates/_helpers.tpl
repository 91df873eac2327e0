{{/* The labels of every object of the release. */}}
{{- define "banlieue.labels" -}}
app.kubernetes.io/name: banlieue
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* The selector labels of one component: controller, or provider-<class>. */}}
{{- define "banlieue.selectorLabels" -}}
app.kubernetes.io/name: banlieue
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/*
The generated RBAC (make generate copies config/rbac/role.yaml and
config/rbac/provider/role.yaml into files/rbac/): the documents of one file, as a list.
*/}}
{{- define "banlieue.generatedRBAC" -}}
{{- $docs := list }}
{{- range $doc := splitList "\n---" (.root.Files.Get .file) }}
{{- $obj := fromYaml $doc }}
{{- if $obj.kind }}{{ $docs = append $docs $obj }}{{ end }}
{{- end }}
{{- toYaml (dict "docs" $docs) }}
{{- end }}

{{/*
The RBAC of one process, from its generated file (files/rbac/<file>): the ClusterRole,
bound cluster-wide, and each namespaced Role, bound in its namespace only. The namespaces
in the markers are the kustomize defaults and stand for values here: banlieue-system is
the release's namespace, infra is .Values.providersNamespace; a Role generated for any
other namespace fails the render. Roles that land in one namespace (a release installed
into the Providers' namespace) are merged into one. Arguments: root, name, component, file.
*/}}
{{- define "banlieue.rbac" -}}
{{- $root := .root }}
{{- $name := .name }}
{{- $component := .component }}
{{- $file := .file }}
{{- $namespaced := dict }}
{{- range $doc := (include "banlieue.generatedRBAC" (dict "root" $root "file" $file) | fromYaml).docs }}
{{- if eq $doc.kind "ClusterRole" }}
---
# Generated from the RBAC markers (make generate).
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ $name }}
  labels:
    {{- include "banlieue.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ $component }}
rules:
  {{- toYaml $doc.rules | nindent 2 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ $name }}
  labels:
    {{- include "banlieue.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ $component }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ $name }}
subjects:
  - kind: ServiceAccount
    name: {{ $name }}
    namespace: {{ $root.Release.Namespace }}
{{- else if eq $doc.kind "Role" }}
{{- $namespace := "" }}
{{- if eq $doc.metadata.namespace "banlieue-system" }}
{{- $namespace = $root.Release.Namespace }}
{{- else if eq $doc.metadata.namespace "infra" }}
{{- $namespace = $root.Values.providersNamespace }}
{{- else }}
{{- fail (printf "%s holds a Role in the namespace %s: map it to a value in the chart's banlieue.rbac" $file $doc.metadata.namespace) }}
{{- end }}
{{- $_ := set $namespaced $namespace (concat (get $namespaced $namespace | default (list)) $doc.rules) }}
{{- else }}
{{- fail (printf "%s holds a %s: the chart binds ClusterRoles and Roles only" $file $doc.kind) }}
{{- end }}
{{- end }}
{{- range $namespace, $rules := $namespaced }}
---
# Generated from the RBAC markers (make generate).
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ $name }}
  namespace: {{ $namespace }}
  labels:
    {{- include "banlieue.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ $component }}
rules:
  {{- toYaml $rules | nindent 2 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $name }}
  namespace: {{ $namespace }}
  labels:
    {{- include "banlieue.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ $component }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ $name }}
subjects:
  - kind: ServiceAccount
    name: {{ $name }}
    namespace: {{ $root.Release.Namespace }}
{{- end }}
{{- end }}

{{/*
One banlieue Deployment. Arguments: root, name, component, args, values (replicas,
resources, extraArgs, nodeSelector, tolerations, affinity).
*/}}
{{- define "banlieue.deployment" -}}
{{- $root := .root }}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "banlieue.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
spec:
  replicas: {{ .values.replicas }}
  selector:
    matchLabels:
      {{- include "banlieue.selectorLabels" (dict "root" $root "component" .component) | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "banlieue.selectorLabels" (dict "root" $root "component" .component) | nindent 8 }}
    spec:
      serviceAccountName: {{ .name }}
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        {{- toYaml $root.Values.podSecurityContext | nindent 8 }}
      containers:
        - name: {{ .component | trunc 63 }}
          image: "{{ $root.Values.image.repository }}:{{ $root.Values.image.tag }}"
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          args:
            {{- range .args }}
            - {{ . | quote }}
            {{- end }}
            - --leader-elect
            - --metrics-bind-address=:8080
            - --health-probe-bind-address=:8081
            {{- range .values.extraArgs }}
            - {{ . | quote }}
            {{- end }}
          ports:
            - { name: metrics, containerPort: 8080 }
            - { name: probes, containerPort: 8081 }
          livenessProbe:
            httpGet: { path: /healthz, port: probes }
            initialDelaySeconds: 15
            periodSeconds: 20
          readinessProbe:
            httpGet: { path: /readyz, port: probes }
            initialDelaySeconds: 5
            periodSeconds: 10
          # No GOMEMLIMIT: banlieue sets the Go runtime's soft memory limit itself from the
          # container's memory limit, less 50 MiB for the binary's mapped pages and what the
          # runtime holds beyond it (docs/operations.md, Sizing). A GOMEMLIMIT set here wins.
          resources:
            {{- toYaml .values.resources | nindent 12 }}
          securityContext:
            {{- toYaml $root.Values.securityContext | nindent 12 }}
          volumeMounts:
            - { name: tmp, mountPath: /tmp }
      volumes:
        - name: tmp
          {{- if .tmpSizeLimit }}
          # Image imports download through /tmp: bounded, so that a large one evicts
          # this pod rather than filling the node's disk.
          emptyDir: { sizeLimit: {{ .tmpSizeLimit | quote }} }
          {{- else }}
          emptyDir: {}
          {{- end }}
      {{- with .values.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .values.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .values.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end }}

{{/* The ServiceAccount and metrics Service of one process. Arguments: root, name, component. */}}
{{- define "banlieue.identityAndMetrics" -}}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ .name }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "banlieue.labels" .root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
{{- if .root.Values.metrics.service.enabled }}
---
apiVersion: v1
kind: Service
metadata:
  name: {{ .name }}-metrics
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "banlieue.labels" .root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
spec:
  selector:
    {{- include "banlieue.selectorLabels" (dict "root" .root "component" .component) | nindent 4 }}
  ports:
    - name: metrics
      port: 8080
      targetPort: metrics
      protocol: TCP
{{- end }}
{{- end }}
