{{/* The release's version: image.tag, else the chart's appVersion. */}}
{{- define "crossproxy.version" -}}
{{- .Values.image.tag | default .Chart.AppVersion -}}
{{- end -}}

{{/* The image of one OS's pods: linux.image / windows.image, else repository:version. */}}
{{- define "crossproxy.image" -}}
{{- $os := index .root.Values .os -}}
{{- $os.image | default (printf "%s:%s" .root.Values.image.repository (include "crossproxy.version" .root)) -}}
{{- end -}}

{{/* The labels every object carries (as the plain manifests). */}}
{{- define "crossproxy.labels" -}}
app.kubernetes.io/name: crossproxy
app.kubernetes.io/version: {{ include "crossproxy.version" . | quote }}
{{- end -}}

{{/* A duration of whole seconds or minutes ("30s", "1m") in seconds. */}}
{{- define "crossproxy.seconds" -}}
{{- if hasSuffix "m" . -}}{{ mul (trimSuffix "m" . | atoi) 60 }}{{- else -}}{{ trimSuffix "s" . | atoi }}{{- end -}}
{{- end -}}

{{/* The longer syncPeriod of the enabled OSes, in seconds. */}}
{{- define "crossproxy.syncPeriodSeconds" -}}
{{- $p := 0 -}}
{{- range $os := list "linux" "windows" -}}
{{- $v := index $.Values $os -}}
{{- if $v.enabled -}}{{- $p = max $p (include "crossproxy.seconds" $v.config.syncPeriod | atoi) -}}{{- end -}}
{{- end -}}
{{- $p -}}
{{- end -}}

{{/*
The container of one OS's DaemonSet: args, env (node name, GOMEMLIMIT when
a memory limit is set, the API server's address), ports, probes, resources.
*/}}
{{- define "crossproxy.env" -}}
{{- $os := index .root.Values .os -}}
- name: NODE_NAME
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
{{- if (($os.resources).limits).memory }}
- name: GOMEMLIMIT
  valueFrom:
    resourceFieldRef:
      containerName: crossproxy
      resource: limits.memory
{{- end }}
- name: KUBERNETES_SERVICE_HOST
  valueFrom:
    configMapKeyRef:
      name: crossproxy-{{ .os }}
      key: apiserver-host
      optional: true
- name: KUBERNETES_SERVICE_PORT
  valueFrom:
    configMapKeyRef:
      name: crossproxy-{{ .os }}
      key: apiserver-port
      optional: true
{{- end -}}

{{- define "crossproxy.portsAndProbes" -}}
ports:
  - name: healthz
    containerPort: {{ .Values.ports.healthz }}
    protocol: TCP
  - name: metrics
    containerPort: {{ .Values.ports.metrics }}
    protocol: TCP
readinessProbe:
  httpGet:
    path: /healthz
    port: {{ .Values.ports.healthz }}
  periodSeconds: 10
  failureThreshold: 3
livenessProbe:
  httpGet:
    path: /livez
    port: {{ .Values.ports.healthz }}
  initialDelaySeconds: 15
  periodSeconds: 20
  failureThreshold: 5
{{- end -}}

{{/* The ConfigMap data keys for the API server's address, when set. */}}
{{- define "crossproxy.apiserverData" -}}
{{- with .Values.apiServer.host }}apiserver-host: {{ . | quote }}
{{ end -}}
{{- with .Values.apiServer.port }}apiserver-port: {{ . | toString | quote }}
{{ end -}}
{{- end -}}

{{/* Whether to render the Prometheus Operator objects. */}}
{{- define "crossproxy.monitoring" -}}
{{- $m := .Values.monitoring.enabled -}}
{{- if or (eq (toString $m) "true") (and (eq (toString $m) "auto") (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1")) -}}
true
{{- end -}}
{{- end -}}

{{/* The Linux ConfigMap's data (installer/linux/configmap.yaml). */}}
{{- define "crossproxy.linuxData" -}}
{{- $c := .Values.linux.config -}}
{{- include "crossproxy.apiserverData" . -}}
config.yaml: |
  apiVersion: kubeproxy.config.k8s.io/v1alpha1
  kind: KubeProxyConfiguration
  mode: nftables
  clientConnection:
    kubeconfig: ""
  clusterCIDR: {{ $c.clusterCIDR | quote }}
  detectLocalMode: {{ $c.detectLocalMode }}
  healthzBindAddress: 0.0.0.0:{{ .Values.ports.healthz }}
  metricsBindAddress: 0.0.0.0:{{ .Values.ports.metrics }}
  nodePortAddresses: {{ $c.nodePortAddresses | toJson }}
  masqueradeAll: {{ $c.masqueradeAll }}
  syncPeriod: {{ $c.syncPeriod }}
  minSyncPeriod: {{ $c.minSyncPeriod }}
  # 0 leaves the kernel's conntrack sysctls alone: the pod's /proc/sys is
  # read-only.
  conntrack:
    maxPerCore: 0
    min: 0
    tcpEstablishedTimeout: 0s
    tcpCloseWaitTimeout: 0s
{{- end -}}

{{/* The Windows ConfigMap's data (installer/windows/configmap.yaml). */}}
{{- define "crossproxy.windowsData" -}}
{{- $c := .Values.windows.config -}}
{{- include "crossproxy.apiserverData" . -}}
config.yaml: |
  apiVersion: kubeproxy.config.k8s.io/v1alpha1
  kind: KubeProxyConfiguration
  mode: kernelspace
  clientConnection:
    kubeconfig: ""
  clusterCIDR: {{ $c.clusterCIDR | quote }}
  healthzBindAddress: 0.0.0.0:{{ .Values.ports.healthz }}
  metricsBindAddress: 0.0.0.0:{{ .Values.ports.metrics }}
  syncPeriod: {{ $c.syncPeriod }}
  minSyncPeriod: {{ $c.minSyncPeriod }}
  winkernel:
    networkName: {{ $c.networkName | quote }}
    sourceVip: {{ $c.sourceVip | quote }}
    enableDSR: {{ $c.enableDSR }}
    forwardHealthCheckVip: {{ $c.forwardHealthCheckVip }}
{{- end -}}
