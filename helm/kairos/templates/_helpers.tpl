{{/*
Names, labels and the pod spec every tier shares. A tier is one of api, scheduler, executor; each
runs `kairos <tier>` from the same image.
*/}}

{{- define "kairos.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kairos.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "kairos.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kairos.labels" -}}
helm.sh/chart: {{ include "kairos.chart" . }}
{{ include "kairos.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "kairos.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kairos.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels of one tier: (dict "root" $ "tier" "api"). */}}
{{- define "kairos.tierLabels" -}}
{{ include "kairos.labels" .root }}
app.kubernetes.io/component: {{ .tier }}
{{- end }}

{{- define "kairos.tierSelectorLabels" -}}
{{ include "kairos.selectorLabels" .root }}
app.kubernetes.io/component: {{ .tier }}
{{- end }}

{{- define "kairos.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kairos.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "kairos.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "kairos.secretName" -}}
{{- default (printf "%s-secrets" (include "kairos.fullname" .)) .Values.secrets.existingSecret }}
{{- end }}

{{/* The environment of every kairos process: settings, region, and the secrets. */}}
{{- define "kairos.env" -}}
- name: KAIROS_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "kairos.secretName" . }}
      key: {{ .Values.secrets.databaseUrlKey }}
- name: KAIROS_ADMIN_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "kairos.secretName" . }}
      key: {{ .Values.secrets.adminTokenKey }}
- name: KAIROS_SECRET_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "kairos.secretName" . }}
      key: {{ .Values.secrets.secretKeyKey }}
- name: KAIROS_REGION
  value: {{ .Values.region | quote }}
- name: KAIROS_PRIMARY_REGION
  value: {{ .Values.primaryRegion | quote }}
- name: KAIROS_REGION_TAKEOVER_GRACE_S
  value: {{ .Values.regionTakeoverGraceSeconds | quote }}
- name: KAIROS_REGION_FAILBACK
  value: {{ ternary "1" "0" .Values.regionFailback | quote }}
- name: KAIROS_HOME
  value: /var/lib/kairos
- name: KAIROS_API_HOST
  value: "0.0.0.0"
- name: KAIROS_API_PORT
  value: {{ .Values.ports.http | quote }}
- name: KAIROS_GRPC_HOST
  value: "0.0.0.0"
- name: KAIROS_GRPC_PORT
  value: {{ .Values.ports.grpc | quote }}
- name: KAIROS_METRICS_PORT
  value: {{ .Values.ports.metrics | quote }}
{{- /* The pod's address, not 0.0.0.0: the kubelet's probes and Prometheus reach it, and the port's per-tenant
series need the token below as well (docs/observability.md). */}}
- name: KAIROS_METRICS_HOST
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: KAIROS_METRICS_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "kairos.secretName" . }}
      key: {{ .Values.secrets.metricsTokenKey }}
{{- /* Identity tokens' iss: executors sign with it and the API serves it in /.well-known/openid-configuration,
so every tier gets the same one (docs/http-delivery.md). */}}
- name: KAIROS_OIDC_ISSUER
  value: {{ .Values.oidcIssuer | default (printf "http://%s-api.%s.svc:%v" (include "kairos.fullname" .) .Release.Namespace .Values.ports.http) | quote }}
- name: KAIROS_LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
- name: KAIROS_LOG_FORMAT
  value: json
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "kairos.topologySpread" -}}
{{- $root := .root }}
{{- $spread := $root.Values.topologySpread }}
{{- range $key := list "zone" "node" }}
{{- $rule := index $spread $key }}
- maxSkew: {{ $spread.maxSkew }}
  topologyKey: {{ $rule.topologyKey }}
  whenUnsatisfiable: {{ $rule.whenUnsatisfiable }}
  labelSelector:
    matchLabels:
      {{- include "kairos.tierSelectorLabels" (dict "root" $root "tier" $.tier) | nindent 6 }}
{{- end }}
{{- end }}

{{/*
One tier's Deployment: (dict "root" $ "tier" "scheduler" "values" .Values.scheduler "replicas" 2
"ports" (list ...) "probePort" "metrics" "env" (list ...)). The api probes its own HTTP port; the
scheduler and executor serve /metrics, /healthz and /readyz on KAIROS_METRICS_PORT.
*/}}
{{- define "kairos.deployment" -}}
{{- $root := .root }}
{{- $v := .values }}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "kairos.fullname" $root }}-{{ .tier }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "kairos.tierLabels" . | nindent 4 }}
spec:
  {{- if not (kindIs "invalid" .replicas) }}
  replicas: {{ .replicas }}
  {{- end }}
  revisionHistoryLimit: 5
  strategy:
    type: RollingUpdate
    rollingUpdate:
      maxSurge: 25%
      maxUnavailable: 0
  selector:
    matchLabels:
      {{- include "kairos.tierSelectorLabels" . | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "kairos.tierSelectorLabels" . | nindent 8 }}
        {{- with $root.Values.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      annotations:
        {{- /* A changed chart-managed secret restarts the pods. */}}
        {{- if not $root.Values.secrets.existingSecret }}
        checksum/secret: {{ include (print $root.Template.BasePath "/secret.yaml") $root | sha256sum }}
        {{- end }}
        {{- with $root.Values.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      serviceAccountName: {{ include "kairos.serviceAccountName" $root }}
      automountServiceAccountToken: false
      enableServiceLinks: false
      terminationGracePeriodSeconds: {{ $v.terminationGracePeriodSeconds }}
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        {{- toYaml $root.Values.podSecurityContext | nindent 8 }}
      {{- if $root.Values.topologySpread.enabled }}
      topologySpreadConstraints:
        {{- include "kairos.topologySpread" . | trim | nindent 8 }}
      {{- end }}
      {{- with $v.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
        - name: {{ .tier }}
          image: {{ include "kairos.image" $root }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          args: [{{ .tier | quote }}]
          env:
            {{- include "kairos.env" $root | nindent 12 }}
            {{- with .env }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
            {{- with $v.env }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          ports:
            {{- toYaml .ports | nindent 12 }}
          startupProbe:
            httpGet:
              path: /healthz
              port: {{ .probePort }}
            periodSeconds: {{ $root.Values.probes.startup.periodSeconds }}
            failureThreshold: {{ $root.Values.probes.startup.failureThreshold }}
          livenessProbe:
            httpGet:
              path: /healthz
              port: {{ .probePort }}
            periodSeconds: {{ $root.Values.probes.liveness.periodSeconds }}
            timeoutSeconds: {{ $root.Values.probes.liveness.timeoutSeconds }}
            failureThreshold: {{ $root.Values.probes.liveness.failureThreshold }}
          readinessProbe:
            httpGet:
              path: /readyz
              port: {{ .probePort }}
            periodSeconds: {{ $root.Values.probes.readiness.periodSeconds }}
            timeoutSeconds: {{ $root.Values.probes.readiness.timeoutSeconds }}
            failureThreshold: {{ $root.Values.probes.readiness.failureThreshold }}
          resources:
            {{- toYaml $v.resources | nindent 12 }}
          securityContext:
            {{- toYaml $root.Values.securityContext | nindent 12 }}
          volumeMounts:
            {{- include "kairos.volumeMounts" $root | nindent 12 }}
      volumes:
        {{- include "kairos.volumes" $root | nindent 8 }}
{{- end }}

{{/* The writable directories (KAIROS_HOME, /tmp) and the database CA, for a pod spec. */}}
{{- define "kairos.volumeMounts" -}}
- name: home
  mountPath: /var/lib/kairos
- name: tmp
  mountPath: /tmp
{{- if .Values.secrets.databaseCaKey }}
- name: database-ca
  mountPath: /etc/kairos/db-ca.crt
  subPath: db-ca.crt
  readOnly: true
{{- end }}
{{- end }}

{{- define "kairos.volumes" -}}
- name: home
  emptyDir:
    sizeLimit: 64Mi
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
{{- if .Values.secrets.databaseCaKey }}
- name: database-ca
  secret:
    secretName: {{ include "kairos.secretName" . }}
    defaultMode: 0444
    items:
      - key: {{ .Values.secrets.databaseCaKey }}
        path: db-ca.crt
{{- end }}
{{- end }}

{{/* One tier's PodDisruptionBudget: (dict "root" $ "tier" "api" "pdb" .Values.api.pdb). */}}
{{- define "kairos.pdb" -}}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "kairos.fullname" .root }}-{{ .tier }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "kairos.tierLabels" . | nindent 4 }}
spec:
  {{- if hasKey .pdb "minAvailable" }}
  minAvailable: {{ .pdb.minAvailable }}
  {{- else }}
  maxUnavailable: {{ .pdb.maxUnavailable }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "kairos.tierSelectorLabels" . | nindent 6 }}
{{- end }}
