{{/* Name of the chart, possibly overridden. */}}
{{- define "sso.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name of the objects: <release>-<chart>, or <release> when it contains the chart name. */}}
{{- define "sso.fullname" -}}
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

{{- define "sso.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Selector labels: the immutable subset. */}}
{{- define "sso.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sso.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "sso.labels" -}}
helm.sh/chart: {{ include "sso.chart" . }}
{{ include "sso.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sidecarset-operator
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "sso.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "sso.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Name of both webhook configurations (also passed to the operator). */}}
{{- define "sso.webhookConfigName" -}}
{{- default (include "sso.fullname" .) .Values.webhook.configurationName | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "sso.webhookServiceName" -}}
{{- printf "%s-webhook" (include "sso.fullname" . | trunc 55 | trimSuffix "-") }}
{{- end }}

{{- define "sso.metricsServiceName" -}}
{{- printf "%s-metrics" (include "sso.fullname" . | trunc 55 | trimSuffix "-") }}
{{- end }}

{{/* Secret the operator keeps its own CA and serving certificate in (self-managed mode). */}}
{{- define "sso.certSecretName" -}}
{{- default (printf "%s-webhook-certs" (include "sso.fullname" . | trunc 49 | trimSuffix "-")) .Values.certs.secretName }}
{{- end }}

{{/* Secret cert-manager writes the serving certificate to. */}}
{{- define "sso.certManagerSecretName" -}}
{{- printf "%s-webhook-tls" (include "sso.fullname" . | trunc 51 | trimSuffix "-") }}
{{- end }}

{{- define "sso.certManagerCertificateName" -}}
{{- printf "%s-webhook" (include "sso.fullname" . | trunc 55 | trimSuffix "-") }}
{{- end }}

{{/* "self" when the operator manages its certificates, "files" when they are mounted. */}}
{{- define "sso.certMode" -}}
{{- if and .Values.certManager.enabled .Values.externalCerts.enabled }}
{{- fail "certManager.enabled and externalCerts.enabled are mutually exclusive: choose one source of webhook certificates" }}
{{- end }}
{{- if or .Values.certManager.enabled .Values.externalCerts.enabled }}files{{ else }}self{{ end }}
{{- end }}

{{/* Where mounted certificates are read from (files mode); also where OLM mounts them. */}}
{{- define "sso.certDir" -}}
/tmp/k8s-webhook-server/serving-certs
{{- end }}

{{/* Namespaces excluded from pod injection: the release namespace first, then skipNamespaces. */}}
{{- define "sso.excludedNamespaces" -}}
{{- $out := list .Release.Namespace }}
{{- range .Values.skipNamespaces }}
{{- if not (has . $out) }}{{ $out = append $out . }}{{ end }}
{{- end }}
{{- toJson $out }}
{{- end }}

{{- define "sso.imageRepository" -}}
{{- $registry := trimSuffix "/" (((.Values.global | default dict).imageRegistry) | default "") }}
{{- if $registry }}{{ printf "%s/%s" $registry .Values.image.repository }}{{ else }}{{ .Values.image.repository }}{{ end }}
{{- end }}

{{- define "sso.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" (include "sso.imageRepository" .) .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" (include "sso.imageRepository" .) (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Annotations of the webhook configurations. caBundle is never rendered (see README.md). */}}
{{- define "sso.webhookAnnotations" -}}
{{- $a := dict }}
{{- if .Values.certManager.enabled }}
{{- $_ := set $a "cert-manager.io/inject-ca-from" (printf "%s/%s" .Release.Namespace (include "sso.certManagerCertificateName" .)) }}
{{- end }}
{{- $a = merge $a (.Values.webhook.annotations | default dict) }}
{{- with $a }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* failurePolicy of the pod webhook: webhook.failurePolicy, Ignore next to OpenKruise. */}}
{{- define "sso.podFailurePolicy" -}}
{{- if .Values.openkruise.coexistence }}Ignore{{ else }}{{ .Values.webhook.failurePolicy }}{{ end }}
{{- end }}

{{/* failurePolicy of the SidecarSet webhooks: Fail, Ignore next to OpenKruise (whose own
  webhooks default and validate SidecarSets meanwhile), so that SidecarSet writes are never
  refused while the operator does not serve. */}}
{{- define "sso.sidecarsetFailurePolicy" -}}
{{- if .Values.openkruise.coexistence }}Ignore{{ else }}Fail{{ end }}
{{- end }}

{{/* clientConfig of one webhook: the Service, or webhook.url (an operator outside the cluster). */}}
{{- define "sso.clientConfig" -}}
{{- $ := index . 0 }}
{{- $path := index . 1 }}
{{- if $.Values.webhook.url }}
url: {{ printf "%s%s" (trimSuffix "/" $.Values.webhook.url) $path | quote }}
{{- else }}
service:
  name: {{ include "sso.webhookServiceName" $ }}
  namespace: {{ $.Release.Namespace }}
  path: {{ $path }}
  port: {{ $.Values.webhook.servicePort }}
{{- end }}
{{- end }}

{{- define "sso.leaseName" -}}
{{- default (include "sso.fullname" .) .Values.leaderElection.leaseName }}
{{- end }}

{{- /*
  The pod CREATE webhook's matchConditions. The operator keeps them to the SidecarSets'
  selectors (condition "selected-by-a-sidecarset"); the chart must never narrow what it wrote, and
  must never send every pod of the cluster to a webhook no replica answers yet:
  - the configuration exists (helm upgrade, or an install over one left behind): its conditions,
    as they are (an upgrade changes nothing the operator wrote);
  - new, and SidecarSets already exist (an install next to or after OpenKruise): no condition,
    every pod goes to the webhook until the operator narrows it (no pod a SidecarSet selects is
    created without its sidecars);
  - new, and no SidecarSet exists: a condition that matches nothing ("false"), so a pod is never
    sent to a webhook that no replica answers (an image that cannot be pulled blocks nothing);
    no SidecarSet can be created before a replica answers (its webhooks are Fail), and the
    operator widens the condition to cover one before admitting it.
  `helm template` (no cluster) renders the last case. With features.podMatchConditions off the
  operator keeps no condition, so none is rendered (every pod is sent).
*/ -}}
{{- define "sso.podMatchConditions" -}}
{{- if .Values.features.podMatchConditions -}}
{{- $live := lookup "admissionregistration.k8s.io/v1" "MutatingWebhookConfiguration" "" (include "sso.webhookConfigName" .) -}}
{{- $entry := dict -}}
{{- range ($live.webhooks | default list) -}}
{{- if eq .name "mpod.sidecarset-operator.io" -}}{{- $entry = . -}}{{- end -}}
{{- end -}}
{{- if $entry -}}
{{- with $entry.matchConditions -}}{{- toYaml . -}}{{- end -}}
{{- else -}}
{{- $existing := dict -}}
{{- if .Capabilities.APIVersions.Has "apps.kruise.io/v1beta1/SidecarSet" -}}
{{- $existing = lookup "apps.kruise.io/v1beta1" "SidecarSet" "" "" -}}
{{- end -}}
{{- if not ($existing.items | default list) -}}
- name: selected-by-a-sidecarset
  expression: "false"
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
