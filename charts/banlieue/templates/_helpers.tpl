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
          resources:
            {{- toYaml .values.resources | nindent 12 }}
          securityContext:
            {{- toYaml $root.Values.securityContext | nindent 12 }}
          volumeMounts:
            - { name: tmp, mountPath: /tmp }
      volumes:
        - name: tmp
          emptyDir: {}
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
