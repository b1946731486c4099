{{/*
The monitors' relabelings: every series gets job="crossproxy" (the alerts
select on it, whatever the monitor's kind) and the node's name.
*/}}
{{- define "crossproxy.relabelings" -}}
relabelings:
  - targetLabel: job
    replacement: crossproxy
  - sourceLabels: [__meta_kubernetes_pod_node_name]
    targetLabel: node
{{- end -}}

{{/*
The alert rules, as a Prometheus rule file's body (groups:). The metric names
are the binary's (platform/metrics): kube-proxy's kubeproxy_* where they mean
the same, crossproxy_* otherwise. Every series carries job="crossproxy": the
monitors relabel it so; a hand-written scrape config names its job so.
*/}}
{{- define "crossproxy.rules" -}}
{{- $for := .Values.monitoring.rules.for -}}
{{- $runbooks := .Values.monitoring.rules.runbookBaseURL -}}
{{- $stall := mul 2 (include "crossproxy.syncPeriodSeconds" . | atoi) -}}
groups:
  - name: crossproxy
    rules:
      - alert: CrossproxyDown
        expr: up{job="crossproxy"} == 0
        for: {{ $for }}
        labels:
          severity: critical
        annotations:
          runbook_url: {{ printf "%s%s.md" $runbooks "CrossproxyDown" }}
          summary: crossproxy on {{ "{{ $labels.instance }}" }} cannot be scraped
          description: >-
            Prometheus has not reached crossproxy's metrics on {{ "{{ $labels.instance }}" }}
            for {{ $for }}. Service rules stay in force while it is down, but no
            change reaches that node: check the crossproxy pod there.
      - alert: CrossproxyAbsent
        expr: absent(up{job="crossproxy"})
        for: {{ $for }}
        labels:
          severity: critical
        annotations:
          runbook_url: {{ printf "%s%s.md" $runbooks "CrossproxyAbsent" }}
          summary: no crossproxy target is scraped at all
          description: >-
            No series with job="crossproxy" exist: the DaemonSets are gone or
            the PodMonitor/ServiceMonitor no longer selects their pods.
      - alert: CrossproxySyncStalled
        # The age of the last successful sync at each scrape (its time
        # minus the gauge; the process start stands in before the first
        # sync), against twice the longest syncPeriod ({{ $stall }}s): a
        # healthy proxy syncs at least once a syncPeriod.
        expr: >-
          timestamp(kubeproxy_sync_proxy_rules_last_timestamp_seconds{job="crossproxy"})
          - (kubeproxy_sync_proxy_rules_last_timestamp_seconds{job="crossproxy"} > process_start_time_seconds{job="crossproxy"}
             or process_start_time_seconds{job="crossproxy"})
          > {{ $stall }}
        labels:
          severity: critical
        annotations:
          runbook_url: {{ printf "%s%s.md" $runbooks "CrossproxySyncStalled" }}
          summary: crossproxy on {{ "{{ $labels.instance }}" }} has not synced for {{ "{{ $value | humanizeDuration }}" }}
          description: >-
            No successful sync for more than {{ $stall }}s (2 x syncPeriod). Service
            changes are not reaching this node's rules; its log and
            crossproxy_sync_failures_total say why.
      - alert: CrossproxySyncFailing
        expr: sum by (job, instance, node, reason) (increase(crossproxy_sync_failures_total{job="crossproxy"}[10m])) > 2
        for: {{ $for }}
        labels:
          severity: warning
        annotations:
          runbook_url: {{ printf "%s%s.md" $runbooks "CrossproxySyncFailing" }}
          summary: crossproxy on {{ "{{ $labels.instance }}" }} keeps failing to sync ({{ "{{ $labels.reason }}" }})
          description: >-
            {{ "{{ $value | humanize }}" }} failed syncs (reason {{ "{{ $labels.reason }}" }}) in
            the last 10 minutes. Each failure is retried with a full sync; rules
            stay as they were until one succeeds.
      - alert: CrossproxyInputProblems
        expr: sum by (job, instance, node, kind) (crossproxy_input_problems{job="crossproxy"}) > 0
        for: {{ $for }}
        labels:
          severity: info
        annotations:
          runbook_url: {{ printf "%s%s.md" $runbooks "CrossproxyInputProblems" }}
          summary: crossproxy rejects {{ "{{ $value }}" }} object(s) of kind {{ "{{ $labels.kind }}" }} on {{ "{{ $labels.instance }}" }}
          description: >-
            Services or EndpointSlices the core cannot express as they are (a
            broken targetPort, a bad address, ...). `crossproxy explain NS/SVC`
            names each one; the Service's owner must fix it.
      - alert: CrossproxyOtherProxyDetected
        expr: max by (job, instance, node, proxy) (crossproxy_other_proxy_detected{job="crossproxy"}) > 0
        for: {{ $for }}
        labels:
          severity: warning
        annotations:
          runbook_url: {{ printf "%s%s.md" $runbooks "CrossproxyOtherProxyDetected" }}
          summary: another Service proxy ({{ "{{ $labels.proxy }}" }}) programs {{ "{{ $labels.instance }}" }} beside crossproxy
          description: >-
            {{ "{{ $labels.proxy }}" }}'s rules are on this node too, so two proxies answer
            for the same Services. Finish the migration (installer/README.md,
            or the chart's takeover value) and clean its rules.
{{- end -}}
