package core

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Labels the core reads.
const (
	// LabelServiceProxyName assigns a Service to a named proxy.
	LabelServiceProxyName = "service.kubernetes.io/service-proxy-name"
	// LabelHeadless marks the EndpointSlices of headless Services.
	LabelHeadless = "service.kubernetes.io/headless"
	// AnnotationTriggerTime is the EndpointSlice annotation with the time of
	// the change that caused the slice update.
	AnnotationTriggerTime = "endpoints.kubernetes.io/last-change-trigger-time"
	// AnnotationPreserveDestination is kube-proxy's Windows Service
	// annotation (pkg/proxy/winkernel newServiceInfo: "preserve-destination":
	// "true"), documented on the Kubernetes Windows networking page.
	AnnotationPreserveDestination = "preserve-destination"
)

// serviceResult is everything one Service contributes to the NodeState, so the
// Tracker can replace exactly one Service's share when it changes.
type serviceResult struct {
	// raw are the ports as computed, sorted by key; ports are what the
	// NodeState holds: raw without the frontends another Service keeps
	// (claims.publish), with conflicts saying which.
	raw       []*ServicePort
	ports     []*ServicePort
	created   time.Time
	problems  []Problem
	conflicts []Problem
	ignored   *IgnoredObject
	health    *HealthCheck
}

// svcPort is one validated entry of spec.ports.
type svcPort struct {
	name       string
	protocol   v1.Protocol
	port       uint16
	nodePort   uint16
	targetPort intstr.IntOrString
}

// svcInfo is the validated, family-split view of a Service.
type svcInfo struct {
	nsn          types.NamespacedName
	clusterIP    [2]netip.Addr // by famIndex; invalid when the Service has none
	ports        []svcPort
	externalIPs  []netip.Addr
	lbIPs        []netip.Addr
	sourceRanges []netip.Prefix
	allOpen      [2]bool // by famIndex: a /0 of the family was given
	affinity     Affinity
	external     bool // NodePort, LoadBalancer or ExternalIPs
	nodePorts    bool // NodePort or LoadBalancer type
	itpLocal     bool
	etpLocal     bool
	hcPort       uint16
	needsHC      bool
	// preserveDst is kube-proxy's Windows annotation (AnnotationPreserveDestination).
	preserveDst bool
}

// problemSink collects problems for one object.
type problemSink struct {
	kind, namespace, name string
	svc                   types.NamespacedName
	list                  *[]Problem
}

// add records a problem; a sink without a list discards it (for callers that
// need only the parsed value, such as ServiceFamilies).
func (s problemSink) add(field, format string, args ...any) {
	if s.list == nil {
		return
	}
	*s.list = append(*s.list, Problem{Kind: s.kind, Object: s.namespace + "/" + s.name, Field: field,
		Reason: fmt.Sprintf(format, args...), Service: s.svc})
}

// ignoreReason says why a Service is not proxied at all, or "" when it is.
func ignoreReason(opts Options, svc *v1.Service) string {
	if v, ok := svc.Labels[LabelServiceProxyName]; ok && (opts.ProxyName == "" || v != opts.ProxyName) {
		return fmt.Sprintf("label %s=%q belongs to another proxy", LabelServiceProxyName, v)
	}
	return NotProxied(svc)
}

// computeService builds one Service's ports for every family this node runs.
// list holds the Service's EndpointSlices, sorted by name.
func computeService(e *env, svc *v1.Service, list []*discovery.EndpointSlice) *serviceResult {
	res := &serviceResult{}
	nsn := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
	if r := ignoreReason(e.opts, svc); r != "" {
		res.ignored = &IgnoredObject{Kind: "Service", Object: nsn.String(), Reason: r}
		return res
	}
	sink := problemSink{kind: "Service", namespace: svc.Namespace, name: svc.Name, svc: nsn, list: &res.problems}
	info := parseService(svc, nsn, sink)
	if info.needsHC {
		res.health = &HealthCheck{Service: nsn, NodePort: info.hcPort}
	}
	parsed := parseSlices(e, info, list, &res.problems)
	var localReady map[netip.Addr]struct{}
	if res.health != nil {
		localReady = map[netip.Addr]struct{}{}
	}
	res.ports = make([]*ServicePort, 0, len(e.families)*len(info.ports))
	for _, fam := range e.families {
		cip := info.clusterIP[famIndex(fam)]
		if !cip.IsValid() {
			continue
		}
		for _, p := range info.ports {
			sp := buildPort(e, info, fam, cip, p, parsed[famIndex(fam)], sink)
			res.ports = append(res.ports, sp)
			for _, ep := range sp.LocalEndpoints {
				if ep.Ready && localReady != nil {
					localReady[ep.Addr] = struct{}{}
				}
			}
		}
	}
	if res.health != nil {
		// ETP Local always builds the Local set, so its ready members are the count.
		res.health.LocalEndpoints = len(localReady)
	}
	slices.SortFunc(res.ports, func(a, b *ServicePort) int { return comparePortKey(a.Key, b.Key) })
	res.raw, res.created = res.ports, svc.CreationTimestamp.Time
	return res
}

// parseService validates the Service fields the core uses; each bad field is a
// Problem and the field is left out, the rest of the Service still works.
func parseService(svc *v1.Service, nsn types.NamespacedName, sink problemSink) *svcInfo {
	spec := &svc.Spec
	info := &svcInfo{nsn: nsn}
	for _, a := range parseClusterIPs(spec, sink) {
		info.clusterIP[famIndex(familyOf(a))] = a
	}
	info.nodePorts = spec.Type == v1.ServiceTypeNodePort || spec.Type == v1.ServiceTypeLoadBalancer
	info.itpLocal = spec.InternalTrafficPolicy != nil && *spec.InternalTrafficPolicy == v1.ServiceInternalTrafficPolicyLocal
	info.ports = parsePorts(spec.Ports, info.nodePorts, sink)
	for i, s := range spec.ExternalIPs {
		a, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil || a.Zone() != "" {
			sink.add(fmt.Sprintf("spec.externalIPs[%d]", i), "%q is not an IP address", s)
			continue
		}
		info.externalIPs = append(info.externalIPs, a.Unmap())
	}
	// External frontends (NodePort, LoadBalancer type or a usable external
	// IP) are what externalTrafficPolicy applies to.
	info.external = info.nodePorts || len(info.externalIPs) > 0
	info.etpLocal = info.external && spec.ExternalTrafficPolicy == v1.ServiceExternalTrafficPolicyLocal
	if spec.Type == v1.ServiceTypeLoadBalancer {
		parseLoadBalancer(svc, info, sink)
	}
	info.affinity = parseAffinity(spec, sink)
	info.preserveDst = svc.Annotations[AnnotationPreserveDestination] == "true"
	return info
}

// parsePorts validates spec.ports; nodePorts says whether the type has node ports.
func parsePorts(ports []v1.ServicePort, nodePorts bool, sink problemSink) []svcPort {
	var out []svcPort
	for i, p := range ports {
		proto := ProtocolOrTCP(p.Protocol)
		switch proto {
		case v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP:
		default:
			sink.add(fmt.Sprintf("spec.ports[%d].protocol", i), "%q is not TCP, UDP or SCTP", p.Protocol)
			continue
		}
		if p.Port < 1 || p.Port > 65535 {
			sink.add(fmt.Sprintf("spec.ports[%d].port", i), "%d is out of range 1-65535", p.Port)
			continue
		}
		if slices.ContainsFunc(out, func(o svcPort) bool { return o.name == p.Name && o.protocol == proto }) {
			sink.add(fmt.Sprintf("spec.ports[%d].name", i), "port name %q with protocol %s is used twice; only the first is proxied", p.Name, proto)
			continue
		}
		sp := svcPort{name: p.Name, protocol: proto, port: uint16(p.Port), targetPort: p.TargetPort}
		switch {
		case p.NodePort < 0 || p.NodePort > 65535:
			sink.add(fmt.Sprintf("spec.ports[%d].nodePort", i), "%d is out of range 1-65535; no NodePort frontend", p.NodePort)
		case nodePorts:
			sp.nodePort = uint16(p.NodePort)
		}
		out = append(out, sp)
	}
	return out
}

// parseLoadBalancer reads what only a LoadBalancer Service has: its ingress
// IPs, source ranges and, with externalTrafficPolicy Local, the health-check
// node port.
func parseLoadBalancer(svc *v1.Service, info *svcInfo, sink problemSink) {
	spec := &svc.Spec
	for i, ing := range svc.Status.LoadBalancer.Ingress {
		if ing.IP == "" {
			continue // hostname only: the load balancer proxies itself
		}
		if ing.IPMode != nil && *ing.IPMode == v1.LoadBalancerIPModeProxy {
			continue // the load balancer rewrites the destination; nothing to capture here
		}
		a, err := netip.ParseAddr(strings.TrimSpace(ing.IP))
		if err != nil || a.Zone() != "" {
			sink.add(fmt.Sprintf("status.loadBalancer.ingress[%d].ip", i), "%q is not an IP address", ing.IP)
			continue
		}
		info.lbIPs = append(info.lbIPs, a.Unmap())
	}
	for i, s := range spec.LoadBalancerSourceRanges {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err == nil {
			// An IPv4-mapped prefix shorter than the mapping (::ffff:0:0/96)
			// has no IPv4 form: PrefixFrom makes it invalid.
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-unmapBits(p.Addr())).Masked()
		}
		if err != nil || !p.IsValid() {
			sink.add(fmt.Sprintf("spec.loadBalancerSourceRanges[%d]", i), "%q is not a CIDR; range ignored", s)
			continue
		}
		if p.Bits() == 0 {
			info.allOpen[famIndex(familyOf(p.Addr()))] = true
		}
		info.sourceRanges = append(info.sourceRanges, p)
	}
	if info.etpLocal {
		if spec.HealthCheckNodePort < 1 || spec.HealthCheckNodePort > 65535 {
			sink.add("spec.healthCheckNodePort", "%d is not a valid port; externalTrafficPolicy Local on a LoadBalancer needs one", spec.HealthCheckNodePort)
		} else {
			info.needsHC, info.hcPort = true, uint16(spec.HealthCheckNodePort)
		}
	}
}

// parseAffinity reads ClientIP session affinity; a bad timeout is a Problem and the default is used.
func parseAffinity(spec *v1.ServiceSpec, sink problemSink) Affinity {
	var out Affinity
	if spec.SessionAffinity == v1.ServiceAffinityClientIP {
		out = Affinity{ClientIP: true, TimeoutSeconds: DefaultAffinityTimeoutSeconds}
		if c := spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
			t := *c.ClientIP.TimeoutSeconds
			if t < 1 || t > 86400 {
				sink.add("spec.sessionAffinityConfig.clientIP.timeoutSeconds", "%d is out of range 1-86400; using %d", t, DefaultAffinityTimeoutSeconds)
			} else {
				out.TimeoutSeconds = t
			}
		}
	}
	return out
}

// parseClusterIPs returns the Service's usable cluster IPs, unmapped, at most
// one per family, in the order the Service lists them.
func parseClusterIPs(spec *v1.ServiceSpec, sink problemSink) []netip.Addr {
	ips, field := spec.ClusterIPs, "spec.clusterIPs[%d]"
	if len(ips) > 0 && spec.ClusterIP != "" && spec.ClusterIP != ips[0] {
		sink.add("spec.clusterIP", "%q differs from spec.clusterIPs[0] %q; clusterIPs is used", spec.ClusterIP, ips[0])
	}
	if len(ips) == 0 {
		ips, field = []string{spec.ClusterIP}, "spec.clusterIP%.0d"
	}
	var out []netip.Addr
	for i, s := range ips {
		a, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil || a.Zone() != "" {
			sink.add(fmt.Sprintf(field, i), "%q is not an IP address", s)
			continue
		}
		a = a.Unmap()
		f := familyOf(a)
		if slices.ContainsFunc(out, func(o netip.Addr) bool { return familyOf(o) == f }) {
			sink.add(fmt.Sprintf(field, i), "second %s address %s; only the first is used", f, a)
			continue
		}
		out = append(out, a)
	}
	return out
}

// unmapBits is how many prefix bits an IPv4-mapped IPv6 address spends on the mapping.
func unmapBits(a netip.Addr) int {
	if a.Is4In6() {
		return 96
	}
	return 0
}

// buildPort assembles one ServicePort of one family.
func buildPort(e *env, info *svcInfo, fam v1.IPFamily, cip netip.Addr, p svcPort, parsed []*parsedSlice, sink problemSink) *ServicePort {
	sp := &ServicePort{
		Key:                 PortKey{Service: info.nsn, PortName: p.name, Protocol: p.protocol, Family: fam},
		ClusterIP:           cip,
		Port:                p.port,
		NodePort:            p.nodePort,
		Protocol:            p.protocol,
		Affinity:            info.affinity,
		InternalPolicyLocal: info.itpLocal,
		ExternalPolicyLocal: info.etpLocal,
	}
	nfe := 1 + len(info.externalIPs) + len(info.lbIPs)
	if p.nodePort != 0 {
		nfe += len(e.nodePort[fam])
	}
	sp.Frontends = make([]Frontend, 1, nfe)
	sp.Frontends[0] = Frontend{Kind: FrontendClusterIP, Addr: cip, Port: p.port}
	if p.nodePort != 0 {
		for _, a := range e.nodePort[fam] {
			sp.Frontends = append(sp.Frontends, Frontend{Kind: FrontendNodePort, Addr: a, Port: p.nodePort})
		}
	}
	sp.Frontends = appendFrontends(sp.Frontends, FrontendExternalIP, info.externalIPs, fam, p.port)
	sp.Frontends = appendFrontends(sp.Frontends, FrontendLoadBalancer, info.lbIPs, fam, p.port)
	sp.Frontends = uniqueFrontends(sp.Frontends, sp.Protocol, sink)
	if !info.allOpen[famIndex(fam)] {
		for _, r := range info.sourceRanges {
			if familyOf(r.Addr()) == fam {
				sp.SourceRanges = append(sp.SourceRanges, r)
			}
		}
		slices.SortFunc(sp.SourceRanges, comparePrefix)
		sp.SourceRanges = slices.Compact(sp.SourceRanges)
	}
	if info.needsHC {
		sp.HealthCheckNodePort = info.hcPort
	}
	sp.PreserveDestination = info.preserveDst
	ld := e.localDetect[fam]
	sp.Masquerade = Masquerade{
		All:                e.opts.MasqueradeAll,
		OffClusterInternal: !e.opts.MasqueradeAll && ld.Implemented(),
		External:           info.external && !info.etpLocal,
	}
	chooseEndpoints(e, info, sp, p, parsed)
	return sp
}

// appendFrontends adds one frontend per address of the family, sorted and without repeats.
func appendFrontends(out []Frontend, kind FrontendKind, addrs []netip.Addr, fam v1.IPFamily, port uint16) []Frontend {
	start := len(out)
	for _, a := range addrs {
		if familyOf(a) == fam {
			out = append(out, Frontend{Kind: kind, Addr: a, Port: port})
		}
	}
	added := out[start:]
	slices.SortFunc(added, func(a, b Frontend) int { return a.Addr.Compare(b.Addr) })
	return append(out[:start], slices.Compact(added)...)
}

// frontendRank orders the kinds that may claim one address:port: a ClusterIP
// or NodePort is the node's own, and a load balancer address keeps its source
// ranges, so each wins over the kinds after it.
var frontendRank = map[FrontendKind]int{FrontendClusterIP: 0, FrontendNodePort: 1, FrontendLoadBalancer: 2, FrontendExternalIP: 3}

// frontendField names the Service field a frontend kind comes from.
var frontendField = map[FrontendKind]string{FrontendClusterIP: "spec.clusterIPs", FrontendNodePort: "spec.ports.nodePort",
	FrontendLoadBalancer: "status.loadBalancer.ingress", FrontendExternalIP: "spec.externalIPs"}

// uniqueFrontends keeps one frontend per address:port of a Service port. A
// data plane maps a destination to one place: nftables refuses a whole batch
// that maps one address:port two ways (an externalIP equal to the clusterIP,
// or to a load balancer IP with source ranges), and HNS allows one load
// balancer per frontend. The frontend of the lower-ranked kind is skipped
// with a Problem; the order of the rest is kept.
func uniqueFrontends(fes []Frontend, proto v1.Protocol, sink problemSink) []Frontend {
	if len(fes) < 2 {
		return fes
	}
	best := make(map[netip.AddrPort]Frontend, len(fes))
	for _, f := range fes {
		k := netip.AddrPortFrom(f.Addr, f.Port)
		if b, ok := best[k]; !ok || frontendRank[f.Kind] < frontendRank[b.Kind] {
			best[k] = f
		}
	}
	if len(best) == len(fes) {
		return fes
	}
	out := fes[:0]
	for _, f := range fes {
		b := best[netip.AddrPortFrom(f.Addr, f.Port)]
		if b == f {
			out = append(out, f)
			continue
		}
		sink.add(frontendField[f.Kind], "%s %s/%s is also this Service's %s frontend; the %s frontend is skipped",
			f.Kind, netip.AddrPortFrom(f.Addr, f.Port), proto, b.Kind, f.Kind)
	}
	return out
}

func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return cmp.Compare(a.Bits(), b.Bits())
}

func comparePortKey(a, b PortKey) int {
	return cmp.Or(
		cmp.Compare(a.Service.Namespace, b.Service.Namespace),
		cmp.Compare(a.Service.Name, b.Service.Name),
		cmp.Compare(a.PortName, b.PortName),
		cmp.Compare(a.Protocol, b.Protocol),
		cmp.Compare(a.Family, b.Family),
	)
}
