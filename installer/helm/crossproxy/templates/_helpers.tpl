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
  - name: secure
    containerPort: {{ .Values.ports.secure }}
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

{{/*
The API server address the pods use, as JSON {host, port, source}: the
values when set; else, when Helm can read the cluster (install, upgrade),
the server of kubeadm's kube-public/cluster-info kubeconfig, else of
kube-proxy's own kubeconfig (kube-system/kube-proxy, kubeconfig.conf, as
Cilium's k8sServiceHost: auto reads it), else what this release's Linux or
Windows ConfigMap already holds (kube-proxy's ConfigMap is gone after a
takeover); else nothing, and the pods fall back to the kubernetes Service's
ClusterIP, which a rebooted node cannot reach before some proxy's rules
exist. `helm template` reads no cluster, so its output stays the plain
manifests'.
*/}}
{{- define "crossproxy.apiServer" -}}
{{- $a := .Values.apiServer -}}
{{- $found := dict -}}
{{- if $a.host -}}
{{- $found = dict "host" $a.host "port" (toString $a.port) "source" "the values apiServer.host and apiServer.port" -}}
{{- else -}}
{{- $sources := list
  (list "kube-public" "cluster-info" "kubeconfig" "kubeadm's kube-public/cluster-info ConfigMap")
  (list .Values.takeover.kubeProxy.namespace .Values.takeover.kubeProxy.configMap "kubeconfig.conf" (printf "kube-proxy's kubeconfig (%s/%s ConfigMap)" .Values.takeover.kubeProxy.namespace .Values.takeover.kubeProxy.configMap)) -}}
{{- range $src := $sources -}}
{{- if not $found.host -}}
{{- $cm := lookup "v1" "ConfigMap" (index $src 0) (index $src 1) -}}
{{- $kc := (($cm).data | default dict) | dig (index $src 2) "" -}}
{{- if $kc -}}
{{- $server := "" -}}
{{- range (fromYaml $kc).clusters -}}
{{- if not $server -}}{{- $server = (.cluster).server | default "" -}}{{- end -}}
{{- end -}}
{{- $m := regexFindAll "^https://(\\[[0-9A-Fa-f:.]+\\]|[A-Za-z0-9.-]+)(:([0-9]+))?/?$" $server 1 -}}
{{- if $m -}}
{{- $hp := trimPrefix "https://" $server | trimSuffix "/" -}}
{{- $port := "443" -}}
{{- $host := $hp -}}
{{- if regexMatch ":[0-9]+$" $hp -}}
{{- $port = regexFind "[0-9]+$" $hp -}}
{{- $host = regexReplaceAll ":[0-9]+$" $hp "" -}}
{{- end -}}
{{- $found = dict "host" (trimAll "[]" $host) "port" $port "source" (printf "%s (server %s)" (index $src 3) $server) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $os := list "linux" "windows" -}}
{{- if not $found.host -}}
{{- $own := lookup "v1" "ConfigMap" $.Release.Namespace (printf "crossproxy-%s" $os) -}}
{{- with ($own).data -}}
{{- if and (index . "apiserver-host") (index . "apiserver-port") -}}
{{- $found = dict "host" (index . "apiserver-host") "port" (index . "apiserver-port") "source" (printf "this release's ConfigMap crossproxy-%s, as before" $os) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson $found -}}
{{- end -}}

{{/* The ConfigMap data keys for the API server's address, when known. */}}
{{- define "crossproxy.apiserverData" -}}
{{- $a := include "crossproxy.apiServer" . | fromJson -}}
{{- with $a.host }}apiserver-host: {{ . | quote }}
{{ end -}}
{{- with $a.port }}apiserver-port: {{ . | toString | quote }}
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
  logging:
    verbosity: {{ .Values.logVerbosity }}
  clusterCIDR: {{ $c.clusterCIDR | quote }}
  detectLocalMode: {{ $c.detectLocalMode }}
  detectLocal:
    bridgeInterface: {{ $c.detectLocal.bridgeInterface | quote }}
    interfaceNamePrefix: {{ $c.detectLocal.interfaceNamePrefix | quote }}
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
  logging:
    verbosity: {{ .Values.logVerbosity }}
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

{{/*
The pod template's metadata of one OS's DaemonSet: the selector labels, the
version, podLabels; the config hash (a changed config rolls the pods: the
file is read at start only) and podAnnotations.
*/}}
{{- define "crossproxy.podMetadata" -}}
{{- $root := .root -}}
labels:
  app.kubernetes.io/name: crossproxy
  app.kubernetes.io/component: {{ .os }}
  app.kubernetes.io/version: {{ include "crossproxy.version" $root | quote }}
  {{- with $root.Values.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
annotations:
  crossproxy.io/config-hash: {{ include (printf "crossproxy.%sData" .os) $root | sha256sum | trunc 16 }}
  {{- with $root.Values.podAnnotations }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end -}}

{{/* The DaemonSets' updateStrategy (validate.yaml refuses a surge). */}}
{{- define "crossproxy.updateStrategy" -}}
{{- $u := .Values.updateStrategy -}}
type: {{ $u.type }}
{{- if eq $u.type "RollingUpdate" }}
rollingUpdate:
  maxUnavailable: {{ $u.rollingUpdate.maxUnavailable | toJson }}
  maxSurge: 0
{{- end }}
{{- end -}}

{{/* The run flags every OS gets after --config and --hostname-override. */}}
{{- define "crossproxy.commonArgs" -}}
- --full-sync-period={{ .Values.fullSyncPeriod }}
- --secure-address=:{{ .Values.ports.secure }}
{{- end -}}

{{/* imagePullSecrets and affinity of one OS's pods, when given. */}}
{{- define "crossproxy.podScheduling" -}}
{{- $os := index .root.Values .os -}}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $os.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* A duration of the schema's forms (500ms, 30s, 1m, 1h) in milliseconds. */}}
{{- define "crossproxy.millis" -}}
{{- if hasSuffix "ms" . -}}{{ trimSuffix "ms" . | atoi }}
{{- else if hasSuffix "s" . -}}{{ mul (trimSuffix "s" . | atoi) 1000 }}
{{- else if hasSuffix "m" . -}}{{ mul (trimSuffix "m" . | atoi) 60000 }}
{{- else if hasSuffix "h" . -}}{{ mul (trimSuffix "h" . | atoi) 3600000 }}
{{- else -}}0{{- end -}}
{{- end -}}

{{/*
The cleanup-on-delete container of one OS's pods (cmd/crossproxy
cmd_cleanup_on_delete.go): on the pod's stop it removes the node's rules
only when the DaemonSet is being deleted (installer/README.md, Uninstall).
*/}}
{{- define "crossproxy.cleanupContainer" -}}
{{- $root := .root -}}
- name: cleanup-on-delete
  image: {{ include "crossproxy.image" (dict "root" $root "os" .os) | quote }}
  imagePullPolicy: {{ $root.Values.image.pullPolicy }}
  {{- if eq .os "linux" }}
  command: ["/usr/local/bin/crossproxy"]
  {{- else }}
  command: ["%CONTAINER_SANDBOX_MOUNT_POINT%\\crossproxy.exe"]
  {{- end }}
  args:
    - cleanup-on-delete
    - --daemonset={{ $root.Release.Namespace }}/crossproxy-{{ .os }}
    {{- if eq .os "linux" }}
    - --config=/etc/crossproxy/config.yaml
    {{- else }}
    - --config=C:\etc\crossproxy\config.yaml
    {{- end }}
  env:
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
  {{- with $root.Values.cleanupOnDelete.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- if eq .os "linux" }}
  securityContext:
    runAsUser: 0
    runAsNonRoot: false
    privileged: false
    allowPrivilegeEscalation: false
    readOnlyRootFilesystem: true
    seccompProfile:
      type: RuntimeDefault
    capabilities:
      drop: ["ALL"]
      add: ["NET_ADMIN"]
  volumeMounts:
    - name: config
      mountPath: /etc/crossproxy
      readOnly: true
  {{- else }}
  volumeMounts:
    - name: config
      mountPath: C:\etc\crossproxy
      readOnly: true
  {{- end }}
{{- end -}}
