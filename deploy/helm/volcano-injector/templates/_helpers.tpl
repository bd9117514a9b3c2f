{{/* The prefix of every object's name (deploy/ uses volcano-injector). */}}
{{- define "vi.name" -}}
{{- .Values.fullnameOverride | default "volcano-injector" | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels on every object of the release. */}}
{{- define "vi.labels" -}}
app.kubernetes.io/part-of: volcano-injector
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The webhook Pods' selector labels. */}}
{{- define "vi.selector" -}}
app.kubernetes.io/name: {{ include "vi.name" . }}
app.kubernetes.io/component: webhook
{{- end -}}

{{- define "vi.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The Secret the database settings are read from. */}}
{{- define "vi.dbSecret" -}}
{{- if eq .Values.database.mode "cloudnative-pg" -}}
{{ include "vi.name" . }}-pg-app
{{- else if eq .Values.database.mode "trial" -}}
{{ include "vi.name" . }}-db
{{- else -}}
{{ .Values.database.existingSecret }}
{{- end -}}
{{- end -}}

{{/* Env of every container that reads the database and the Django key: files of mounted Secrets. */}}
{{- define "vi.secretEnv" -}}
- name: DJANGO_SECRET_KEY_FILE
  value: /etc/volcano-injector/django/secret-key
{{- if eq .Values.database.mode "cloudnative-pg" }}
- name: DB_NAME_FILE
  value: /etc/volcano-injector/db/dbname
- name: DB_USER_FILE
  value: /etc/volcano-injector/db/username
- name: DB_PASSWORD_FILE
  value: /etc/volcano-injector/db/password
- name: DATABASE_DIRECT_URL_FILE
  value: /etc/volcano-injector/db/uri
{{- else }}
- name: DATABASE_URL_FILE
  value: /etc/volcano-injector/db/DATABASE_URL
{{- end }}
{{- end -}}

{{- define "vi.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{- define "vi.podSecurity" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The pod template annotation that rolls Pods when the settings change (kustomize's hashed ConfigMap name). */}}
{{- define "vi.configChecksum" -}}
checksum/config: {{ include (print .Template.BasePath "/configmap.yaml") . | sha256sum }}
{{- end -}}

{{/*
A CronJob running one manage.py command with the webhook's image, settings and Secrets
(deploy/base/cronjob-retention.yaml and the components' CronJobs). Arguments: a dict with root, name,
component, schedule, startingDeadlineSeconds, backoffLimit, activeDeadlineSeconds, ttlSecondsAfterFinished,
serviceAccount, container, command, memoryLimit, apiToken (mount a projected token of its account).
*/}}
{{- define "vi.cronjob" -}}
{{- $root := .root -}}
apiVersion: batch/v1
kind: CronJob
metadata:
  name: {{ .name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    app.kubernetes.io/name: {{ include "vi.name" $root }}
    app.kubernetes.io/component: {{ .component }}
    {{- include "vi.labels" $root | nindent 4 }}
spec:
  schedule: {{ .schedule | quote }}
  timeZone: Etc/UTC
  concurrencyPolicy: Forbid
  startingDeadlineSeconds: {{ .startingDeadlineSeconds }}
  successfulJobsHistoryLimit: 1
  failedJobsHistoryLimit: 3
  jobTemplate:
    spec:
      backoffLimit: {{ .backoffLimit }}
      activeDeadlineSeconds: {{ .activeDeadlineSeconds }}
      ttlSecondsAfterFinished: {{ .ttlSecondsAfterFinished }}
      template:
        metadata:
          labels:
            app.kubernetes.io/name: {{ include "vi.name" $root }}
            app.kubernetes.io/component: {{ .component }}
          annotations:
            {{- include "vi.configChecksum" $root | nindent 12 }}
        spec:
          restartPolicy: Never
          {{- with .serviceAccount }}
          serviceAccountName: {{ . }}
          {{- end }}
          automountServiceAccountToken: false
          enableServiceLinks: false
          {{- with $root.Values.imagePullSecrets }}
          imagePullSecrets:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          securityContext:
            {{- include "vi.podSecurity" $root | nindent 12 }}
          containers:
            - name: {{ .container }}
              image: {{ include "vi.image" $root }}
              imagePullPolicy: {{ $root.Values.image.pullPolicy }}
              command: {{ toJson .command }}
              envFrom:
                - configMapRef:
                    name: {{ include "vi.name" $root }}-config
              env:
                {{- include "vi.secretEnv" $root | nindent 16 }}
                {{- range .extraEnv }}
                - name: {{ .name }}
                  value: {{ .value | quote }}
                {{- end }}
              securityContext:
                {{- include "vi.containerSecurity" $root | nindent 16 }}
              resources:
                requests:
                  cpu: 50m
                  memory: 128Mi
                limits:
                  cpu: 500m
                  memory: {{ .memoryLimit }}
              volumeMounts:
                - name: django-secret
                  mountPath: /etc/volcano-injector/django
                  readOnly: true
                - name: db
                  mountPath: /etc/volcano-injector/db
                  readOnly: true
                {{- if .apiToken }}
                - name: kube-api-access
                  mountPath: /var/run/secrets/kubernetes.io/serviceaccount
                  readOnly: true
                {{- end }}
                - name: tmp
                  mountPath: /tmp
                - name: prometheus
                  mountPath: /tmp/prometheus
          volumes:
            - name: django-secret
              secret:
                secretName: {{ $root.Values.djangoSecret }}
                defaultMode: 0440
            - name: db
              secret:
                secretName: {{ include "vi.dbSecret" $root }}
                defaultMode: 0440
            {{- if .apiToken }}
            - name: kube-api-access
              projected:
                defaultMode: 0444
                sources:
                  - serviceAccountToken:
                      path: token
                      expirationSeconds: 3600
                  - configMap:
                      name: kube-root-ca.crt
                      items:
                        - key: ca.crt
                          path: ca.crt
                  - downwardAPI:
                      items:
                        - path: namespace
                          fieldRef:
                            fieldPath: metadata.namespace
            {{- end }}
            - name: tmp
              emptyDir:
                sizeLimit: 64Mi
            - name: prometheus
              emptyDir:
                medium: Memory
                sizeLimit: 16Mi
{{- end -}}

{{/*
A CronJob's ServiceAccount, ClusterRole and ClusterRoleBinding. Arguments: root, name, component, rules.
*/}}
{{- define "vi.jobRbac" -}}
{{- $root := .root -}}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ .name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    app.kubernetes.io/name: {{ include "vi.name" $root }}
    app.kubernetes.io/component: {{ .component }}
    {{- include "vi.labels" $root | nindent 4 }}
automountServiceAccountToken: false
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ .name }}
  labels:
    app.kubernetes.io/name: {{ include "vi.name" $root }}
    app.kubernetes.io/component: {{ .component }}
    {{- include "vi.labels" $root | nindent 4 }}
rules:
  {{- toYaml .rules | nindent 2 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ .name }}
  labels:
    app.kubernetes.io/name: {{ include "vi.name" $root }}
    app.kubernetes.io/component: {{ .component }}
    {{- include "vi.labels" $root | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ .name }}
subjects:
  - kind: ServiceAccount
    name: {{ .name }}
    namespace: {{ $root.Release.Namespace }}
{{- end -}}

{{/* The init container that applies migrations before a Pod of a new version serves (both Deployments). */}}
{{- define "vi.migrate" -}}
- name: migrate
  image: {{ include "vi.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command: ["python", "manage.py", "apply_migrations"]
  envFrom:
    - configMapRef:
        name: {{ include "vi.name" . }}-config
  env:
    {{- include "vi.secretEnv" . | nindent 4 }}
  securityContext:
    {{- include "vi.containerSecurity" . | nindent 4 }}
  resources:
    {{- toYaml .Values.migrate.resources | nindent 4 }}
  volumeMounts:
    - name: django-secret
      mountPath: /etc/volcano-injector/django
      readOnly: true
    - name: db
      mountPath: /etc/volcano-injector/db
      readOnly: true
    - name: tmp
      mountPath: /tmp
    - name: prometheus
      mountPath: /tmp/prometheus
{{- end -}}
