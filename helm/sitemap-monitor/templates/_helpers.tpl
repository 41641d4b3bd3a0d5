{{/*
The chart name, truncated to 63 characters (the DNS label limit).
*/}}
{{- define "sitemap-monitor.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
A fully qualified app name, truncated to 63 characters. When the release name already contains
the chart name it is not repeated.
*/}}
{{- define "sitemap-monitor.fullname" -}}
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

{{/*
Chart name and version, for the helm.sh/chart label.
*/}}
{{- define "sitemap-monitor.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Common labels. helm.sh/chart changes on every chart release, so it never goes into a selector.
*/}}
{{- define "sitemap-monitor.labels" -}}
helm.sh/chart: {{ include "sitemap-monitor.chart" . }}
{{ include "sitemap-monitor.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sitemap-monitor
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Selector labels: stable for the life of the release.
*/}}
{{- define "sitemap-monitor.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sitemap-monitor.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The ServiceAccount the daemon runs as.
*/}}
{{- define "sitemap-monitor.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "sitemap-monitor.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The image reference: a digest wins over a tag; the tag defaults to the appVersion.
*/}}
{{- define "sitemap-monitor.image" -}}
{{- $registry := .Values.image.registry }}
{{- $repository := .Values.image.repository }}
{{- $ref := ternary $repository (printf "%s/%s" $registry $repository) (empty $registry) }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" $ref .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $ref (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
True ("true") when the database is SQLite: one replica, Recreate, a volume for the file.
*/}}
{{- define "sitemap-monitor.sqlite" -}}
{{- if eq .Values.database.type "sqlite" }}true{{ end }}
{{- end }}

{{/*
The Secret that holds the database URL and channel secrets.
*/}}
{{- define "sitemap-monitor.secretName" -}}
{{- default (include "sitemap-monitor.fullname" .) .Values.database.existingSecret }}
{{- end }}

{{/*
The database URL the chart stores in its own Secret: the value given, else SQLite on the volume.
*/}}
{{- define "sitemap-monitor.databaseUrl" -}}
{{- if .Values.database.url }}
{{- .Values.database.url }}
{{- else if include "sitemap-monitor.sqlite" . }}
{{- printf "sqlite:///%s/sitemap-monitor.db" .Values.persistence.mountPath }}
{{- else }}
{{- fail "database.type=postgresql needs database.url or database.existingSecret" }}
{{- end }}
{{- end }}

{{/*
The body of the chart's Secret, shared by the release Secret and the migration hook's copy.
*/}}
{{- define "sitemap-monitor.secretData" -}}
{{ .Values.database.existingSecretKey }}: {{ include "sitemap-monitor.databaseUrl" . | b64enc | quote }}
{{- range $key, $value := .Values.secretEnv }}
{{ $key }}: {{ $value | toString | b64enc | quote }}
{{- end }}
{{- end }}

{{/*
Environment shared by the daemon, its init container and the migration Job.
$secret is the name of the Secret to read the database URL from.
*/}}
{{- define "sitemap-monitor.env" -}}
{{- $root := index . 0 }}
{{- $secret := index . 1 -}}
- name: SITEMAP_MONITOR_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $root.Values.database.existingSecretKey }}
{{- range $key, $_ := $root.Values.secretEnv }}
- name: {{ $key }}
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $key }}
{{- end }}
{{- with $root.Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
The daemon's configuration file, rendered from values.config. The listen address follows the
container port so the probes and the Service always agree with the daemon.
*/}}
{{- define "sitemap-monitor.config" -}}
{{- $config := deepCopy .Values.config }}
{{- $_ := set $config "listen" (printf "0.0.0.0:%d" (int .Values.containerPort)) }}
{{- $web := dict }}
{{- if .Values.web.usersSecret }}
{{- $_ := set $web "basic_auth_users_file" "/etc/sitemap-monitor-web/users.yaml" }}
{{- $_ := set $web "protect_metrics" .Values.web.protectMetrics }}
{{- end }}
{{- if .Values.web.tlsSecret }}
{{- $_ := set $web "tls_cert_file" "/etc/sitemap-monitor-tls/tls.crt" }}
{{- $_ := set $web "tls_key_file" "/etc/sitemap-monitor-tls/tls.key" }}
{{- end }}
{{- if $web }}
{{- $_ := set $config "web" $web }}
{{- end }}
{{- if .Values.indexnow.enabled }}
{{- $defaults := default dict $config.defaults }}
{{- $indexnow := default dict $defaults.indexnow }}
{{- $_ := set $indexnow "enabled" true }}
{{- $_ := set $indexnow "key_file" "/etc/sitemap-monitor-indexnow/key" }}
{{- with .Values.indexnow.keyLocation }}{{ $_ := set $indexnow "key_location" . }}{{ end }}
{{- with .Values.indexnow.endpoint }}{{ $_ := set $indexnow "endpoint" . }}{{ end }}
{{- with .Values.indexnow.submit }}{{ $_ := set $indexnow "submit" . }}{{ end }}
{{- $_ := set $defaults "indexnow" $indexnow }}
{{- $_ := set $config "defaults" $defaults }}
{{- end }}
{{- toYaml $config }}
{{- end }}

{{/*
A probe of the values, over HTTPS when web.tlsSecret is set. Call with (list $ probe).
*/}}
{{- define "sitemap-monitor.probe" -}}
{{- $root := index . 0 }}
{{- $probe := deepCopy (index . 1) }}
{{- if and $root.Values.web.tlsSecret $probe.httpGet }}
{{- $_ := set $probe.httpGet "scheme" "HTTPS" }}
{{- end }}
{{- toYaml $probe }}
{{- end }}

{{/*
The container securityContext, used by every container of the chart.
*/}}
{{- define "sitemap-monitor.securityContext" -}}
{{- toYaml .Values.securityContext }}
{{- end }}

{{/*
A size in bytes, as a decimal integer: from a number of bytes, or from a Kubernetes quantity
such as 10Gi, 500Mi or 10G (rounded up to a whole byte, as Kubernetes does).
*/}}
{{- define "sitemap-monitor.bytes" -}}
{{- if kindIs "string" . }}
{{- $quantity := trim . }}
{{- if not (regexMatch "^[0-9]+(\\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$" $quantity) }}
{{- fail (printf "%q is not a number of bytes or a Kubernetes quantity such as 10Gi, 500Mi or 10G" $quantity) }}
{{- end }}
{{- $number := regexFind "^[0-9.]+" $quantity }}
{{- $units := dict "" 1 "k" 1e3 "M" 1e6 "G" 1e9 "T" 1e12 "P" 1e15 "E" 1e18 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 "Pi" 1125899906842624 "Ei" 1152921504606846976 }}
{{- printf "%d" (mulf $number (index $units (trimPrefix $number $quantity)) | ceil | int64) }}
{{- else }}
{{- printf "%d" (. | ceil | int64) }}
{{- end }}
{{- end }}

{{/*
The size in bytes the database may reach, for the database alerts: prometheusRule.databaseBytesLimit,
else the size of the chart's own SQLite volume; empty when neither applies (PostgreSQL, an
existing claim or an emptyDir), and the database alerts are left out.
*/}}
{{- define "sitemap-monitor.databaseBytesLimit" -}}
{{- $limit := .Values.prometheusRule.databaseBytesLimit }}
{{- if and (not (kindIs "invalid" $limit)) (ne (toString $limit) "") }}
{{- include "sitemap-monitor.bytes" $limit }}
{{- else if and (include "sitemap-monitor.sqlite" .) .Values.persistence.enabled (not .Values.persistence.existingClaim) }}
{{- include "sitemap-monitor.bytes" .Values.persistence.size }}
{{- end }}
{{- end }}

{{/*
The Secret that holds the IndexNow key: an existing one, or the chart's own.
*/}}
{{- define "sitemap-monitor.indexnowSecret" -}}
{{- if .Values.indexnow.existingSecret }}
{{- .Values.indexnow.existingSecret }}
{{- else }}
{{- printf "%s-indexnow" (include "sitemap-monitor.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/*
The URL-health states the daemon counts as broken (its error states: a redirect or a canonical
elsewhere is a warning), as a PromQL regex for a state=~ matcher. The dashboard spells out the
same list; tests/chart compares both with the daemon's.
*/}}
{{- define "sitemap-monitor.brokenStates" -}}
not-found|gone|forbidden|client-error|server-error|noindex|soft-404|disallowed
{{- end }}
