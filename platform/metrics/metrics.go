// Package metrics exports crossproxy's Prometheus metrics. Where a metric
// means what a kube-proxy metric means, it has kube-proxy's name (subsystem
// kubeproxy), so dashboards and alerts written for kube-proxy keep working;
// crossproxy's own metrics start with crossproxy_. It uses its own registry,
// never the global one, so tests and embedders get exactly these series.
package metrics

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/platform"
)

const kubeProxySubsystem = "kubeproxy"

// Metrics holds every series crossproxy exports.
type Metrics struct {
	Registry *prometheus.Registry

	SyncDuration        prometheus.Histogram
	SyncFullDuration    prometheus.Histogram
	SyncPartialDuration prometheus.Histogram
	NetworkProgramming  prometheus.Histogram
	LastSync            prometheus.Gauge
	LastQueued          prometheus.Gauge
	ServiceChanges      prometheus.Counter
	EndpointChanges     prometheus.Counter
	NoLocalEndpoints    *prometheus.GaugeVec
	Programmed          *prometheus.GaugeVec
	SyncFailures        *prometheus.CounterVec
	Problems            *prometheus.GaugeVec
	Repairs             *prometheus.CounterVec
	OtherProxies        *prometheus.GaugeVec
	ConntrackFullNow    prometheus.Gauge
	ConntrackFullTimes  prometheus.Counter

	now func() time.Time
	// otherNames are the other proxies ever reported, whose gauge drops to
	// 0 when they go.
	otherNames []string
}

// syncBuckets are kube-proxy's buckets for the sync duration histograms
// (1 ms doubling to ~16 s).
var syncBuckets = prometheus.ExponentialBuckets(0.001, 2, 15)

// programmingBuckets are kube-proxy's buckets for network programming
// latency: 0.25 s steps to 1 s, 1 s steps to a minute, then coarser.
func programmingBuckets() []float64 {
	b := []float64{0.25, 0.5}
	b = append(b, prometheus.LinearBuckets(1, 1, 59)...)
	b = append(b, prometheus.LinearBuckets(60, 5, 12)...)
	b = append(b, prometheus.LinearBuckets(120, 30, 7)...)
	return b
}

// New creates the metrics in a fresh registry, with the Go and process
// collectors that kube-proxy's endpoint also serves.
func New() *Metrics {
	m := &Metrics{Registry: prometheus.NewRegistry(), now: time.Now}
	m.SyncDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Subsystem: kubeProxySubsystem, Name: "sync_proxy_rules_duration_seconds",
		Help: "SyncProxyRules latency in seconds", Buckets: syncBuckets})
	m.SyncFullDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Subsystem: kubeProxySubsystem, Name: "sync_full_proxy_rules_duration_seconds",
		Help: "SyncProxyRules latency in seconds for full resyncs", Buckets: syncBuckets})
	m.SyncPartialDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Subsystem: kubeProxySubsystem, Name: "sync_partial_proxy_rules_duration_seconds",
		Help: "SyncProxyRules latency in seconds for partial resyncs", Buckets: syncBuckets})
	m.NetworkProgramming = prometheus.NewHistogram(prometheus.HistogramOpts{
		Subsystem: kubeProxySubsystem, Name: "network_programming_duration_seconds",
		Help: "In Cluster Network Programming Latency in seconds", Buckets: programmingBuckets()})
	m.LastSync = prometheus.NewGauge(prometheus.GaugeOpts{
		Subsystem: kubeProxySubsystem, Name: "sync_proxy_rules_last_timestamp_seconds",
		Help: "The last time proxy rules were successfully synced"})
	m.LastQueued = prometheus.NewGauge(prometheus.GaugeOpts{
		Subsystem: kubeProxySubsystem, Name: "sync_proxy_rules_last_queued_timestamp_seconds",
		Help: "The last time a sync of proxy rules was queued"})
	m.ServiceChanges = prometheus.NewCounter(prometheus.CounterOpts{
		Subsystem: kubeProxySubsystem, Name: "sync_proxy_rules_service_changes_total",
		Help: "Cumulative proxy rules Service changes"})
	m.EndpointChanges = prometheus.NewCounter(prometheus.CounterOpts{
		Subsystem: kubeProxySubsystem, Name: "sync_proxy_rules_endpoint_changes_total",
		Help: "Cumulative proxy rules Endpoint changes"})
	m.NoLocalEndpoints = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Subsystem: kubeProxySubsystem, Name: "sync_proxy_rules_no_local_endpoints_total",
		Help: "Number of services with a Local traffic policy and no endpoints"}, []string{"traffic_policy"})
	m.Programmed = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "crossproxy_programmed_objects",
		Help: "Objects in force after the last successful sync, by kind (service_ports, frontends, endpoints, health_checks)"},
		[]string{"kind"})
	m.SyncFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "crossproxy_sync_failures_total",
		Help: "Failed syncs by reason (unsupported, timeout, canceled, backend)"}, []string{"reason"})
	m.Problems = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "crossproxy_input_problems",
		Help: "Objects (or parts of them) the core rejected in the last computed state, by kind"}, []string{"kind"})
	m.Repairs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "crossproxy_drift_repairs_total",
		Help: "Data plane objects found changed or missing behind crossproxy's back and put back, by object kind"}, []string{"object"})

	m.OtherProxies = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "crossproxy_other_proxy_detected",
		Help: "1 while another Service proxy (kube-proxy's tables or chains) programs this node beside crossproxy, 0 once it is gone, by proxy"}, []string{"proxy"})

	m.ConntrackFullNow = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "crossproxy_conntrack_table_full",
		Help: "1 while the node's conntrack table is full (the kernel drops new connections to every Service), 0 once it has room again"})
	m.ConntrackFullTimes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "crossproxy_conntrack_table_full_episodes_total",
		Help: "Times the node's conntrack table was found full"})

	m.Registry.MustRegister(m.SyncDuration, m.SyncFullDuration, m.SyncPartialDuration, m.NetworkProgramming,
		m.LastSync, m.LastQueued, m.ServiceChanges, m.EndpointChanges, m.NoLocalEndpoints,
		m.Programmed, m.SyncFailures, m.Problems, m.Repairs, m.OtherProxies,
		m.ConntrackFullNow, m.ConntrackFullTimes,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, p := range []string{"internal", "external"} {
		m.NoLocalEndpoints.WithLabelValues(p)
	}
	for _, k := range []string{"service_ports", "frontends", "endpoints", "health_checks"} {
		m.Programmed.WithLabelValues(k)
	}
	return m
}

// Handler serves the registry in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}

// Repaired implements platform.RepairCounter: n objects of one kind were
// found drifted and put back.
func (m *Metrics) Repaired(object string, n int) {
	m.Repairs.WithLabelValues(object).Add(float64(n))
}

// ConntrackFull implements platform.ConntrackReporter: the conntrack table
// became full (an episode begins) or has room again.
func (m *Metrics) ConntrackFull(full bool) {
	if full {
		m.ConntrackFullNow.Set(1)
		m.ConntrackFullTimes.Inc()
		return
	}
	m.ConntrackFullNow.Set(0)
}

// Queued records that a sync was queued (platform.Runner.OnQueued).
func (m *Metrics) Queued(at time.Time) {
	m.LastQueued.Set(float64(at.UnixNano()) / 1e9)
}

// ObserveSync records one finished sync (platform.Runner.OnSync).
func (m *Metrics) ObserveSync(res platform.SyncResult) {
	m.ServiceChanges.Add(float64(res.Changes.ServiceChanges))
	m.EndpointChanges.Add(float64(res.Changes.EndpointChanges))
	if res.State != nil {
		problems := map[string]int{}
		for _, p := range res.State.Problems {
			problems[p.Kind]++
		}
		m.Problems.Reset()
		for k, n := range problems {
			m.Problems.WithLabelValues(k).Set(float64(n))
		}
	}
	m.observeOthers(res.OtherProxies)
	if res.Err != nil {
		m.SyncFailures.WithLabelValues(FailureReason(res.Err)).Inc()
		return
	}
	if len(res.Repair) > 0 {
		// The backend rewrote rules others had changed (the Linux backend
		// reports them to the runner; Windows counts its own per object).
		m.Repaired("ruleset", 1)
	}
	d := res.Duration.Seconds()
	m.SyncDuration.Observe(d)
	if res.Full {
		m.SyncFullDuration.Observe(d)
	} else {
		m.SyncPartialDuration.Observe(d)
	}
	done := res.Start.Add(res.Duration)
	m.LastSync.Set(float64(done.UnixNano()) / 1e9)
	for _, t := range res.Changes.TriggerTimes {
		if lat := done.Sub(t); lat >= 0 {
			m.NetworkProgramming.Observe(lat.Seconds())
		}
	}
	if res.State != nil {
		m.observeState(res.State)
	}
}

// observeOthers sets the gauge of each other proxy found to 1 and of each one
// seen before and gone to 0, so an alert on it resolves.
func (m *Metrics) observeOthers(found []platform.OtherProxy) {
	is := map[string]bool{}
	for _, o := range found {
		is[o.Name] = true
	}
	for _, name := range m.otherNames {
		if !is[name] {
			m.OtherProxies.WithLabelValues(name).Set(0)
		}
	}
	for _, o := range found {
		m.OtherProxies.WithLabelValues(o.Name).Set(1)
		if !slices.Contains(m.otherNames, o.Name) {
			m.otherNames = append(m.otherNames, o.Name)
		}
	}
}

func (m *Metrics) observeState(st *core.NodeState) {
	var frontends, endpoints, noLocalInternal, noLocalExternal int
	for _, p := range st.Ports {
		frontends += len(p.Frontends)
		endpoints += len(p.ClusterEndpoints)
		noLocal := len(p.LocalEndpoints) == 0 && len(p.ClusterEndpoints) > 0
		if noLocal && p.InternalPolicyLocal {
			noLocalInternal++
		}
		if noLocal && p.ExternalPolicyLocal && p.External() {
			noLocalExternal++
		}
	}
	m.Programmed.WithLabelValues("service_ports").Set(float64(len(st.Ports)))
	m.Programmed.WithLabelValues("frontends").Set(float64(frontends))
	m.Programmed.WithLabelValues("endpoints").Set(float64(endpoints))
	m.Programmed.WithLabelValues("health_checks").Set(float64(len(st.HealthChecks)))
	m.NoLocalEndpoints.WithLabelValues("internal").Set(float64(noLocalInternal))
	m.NoLocalEndpoints.WithLabelValues("external").Set(float64(noLocalExternal))
}

// FailureReason classifies a sync error for crossproxy_sync_failures_total.
func FailureReason(err error) string {
	switch {
	case errors.Is(err, platform.ErrUnsupported):
		return "unsupported"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return "backend"
}
