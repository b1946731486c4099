package hns

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crossproxy/crossproxy/core"
)

// PlanOptions are the node facts the planner needs beyond the NodeState.
type PlanOptions struct {
	// Network decides how remote endpoints are addressed (overlay needs a
	// provider address from its remote subnets).
	Network Network
	// Features are what this HNS can do; the planner leaves out or notes what it cannot.
	Features Features
	// SourceVIP is set on every load balancer (overlay networks need it).
	SourceVIP netip.Addr
	// EnableDSR asks for direct server return where HNS supports it.
	EnableDSR bool
}

// PlannedLB is one load balancer the NodeState needs, with its endpoints as
// addresses (the applier resolves them to HNS endpoint ids).
type PlannedLB struct {
	Owner core.PortKey
	Kind  core.FrontendKind
	// LB has everything but ID and EndpointIDs.
	LB LoadBalancer
	// Endpoints are the endpoint addresses, sorted; Remote says which of them
	// are on other nodes.
	Endpoints []netip.Addr
	Remote    map[netip.Addr]bool
}

// Notice is a core decision HNS cannot express for one Service.
type Notice struct {
	Service types.NamespacedName
	Feature string
	Detail  string
}

// Plan is the HNS state a NodeState (or part of one) needs.
type Plan struct {
	// LoadBalancers sorted by owner, then frontend.
	LoadBalancers []PlannedLB
	// RemoteEndpoints the load balancers need, sorted by IP.
	RemoteEndpoints []Endpoint
	Notices         []Notice
}

// PlanState plans every port of state.
func PlanState(state *core.NodeState, opts PlanOptions) Plan {
	keys := make([]core.PortKey, 0, len(state.Ports))
	for k := range state.Ports {
		keys = append(keys, k)
	}
	return PlanPorts(state, keys, opts)
}

// PlanPorts plans only the given ports of state (a partial sync); keys absent
// from state plan to nothing, which removes their load balancers.
func PlanPorts(state *core.NodeState, keys []core.PortKey, opts PlanOptions) Plan {
	sortKeys(keys)
	var plan Plan
	remotes := map[netip.Addr]Endpoint{}
	frontends := map[string]core.PortKey{}
	for _, k := range keys {
		p := state.Ports[k]
		if p == nil {
			continue
		}
		lbs, notices := planPort(p, opts)
		for _, n := range notices {
			// The families of one port share their notices.
			if !slices.Contains(plan.Notices, n) {
				plan.Notices = append(plan.Notices, n)
			}
		}
		for _, lb := range lbs {
			f := lb.LB.Frontend()
			if other, dup := frontends[f]; dup {
				plan.Notices = append(plan.Notices, Notice{k.Service, "FrontendConflict",
					fmt.Sprintf("%s %s is already used by %s; HNS allows one load balancer per frontend", lb.Kind, f, other)})
				continue
			}
			frontends[f] = k
			kept := lb.Endpoints[:0:0]
			for _, ip := range lb.Endpoints {
				if !lb.Remote[ip] {
					kept = append(kept, ip)
					continue
				}
				ep, ok := remotes[ip]
				if !ok {
					var err error
					ep, err = remoteEndpoint(ip, opts.Network)
					if err != nil {
						plan.Notices = append(plan.Notices, Notice{k.Service, "RemoteEndpoint", err.Error()})
						continue
					}
					remotes[ip] = ep
				}
				kept = append(kept, ip)
			}
			if len(kept) == 0 {
				continue
			}
			lb.Endpoints = kept
			plan.LoadBalancers = append(plan.LoadBalancers, lb)
		}
	}
	for _, ep := range remotes {
		plan.RemoteEndpoints = append(plan.RemoteEndpoints, ep)
	}
	sort.Slice(plan.RemoteEndpoints, func(i, j int) bool {
		return plan.RemoteEndpoints[i].IP.Less(plan.RemoteEndpoints[j].IP)
	})
	return plan
}

func sortKeys(keys []core.PortKey) {
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
}

// planPort turns one Service port into its load balancers: one per ClusterIP,
// ExternalIP and LoadBalancer ingress frontend, one for all NodePort addresses.
func planPort(p *core.ServicePort, opts PlanOptions) ([]PlannedLB, []Notice) {
	svc := p.Key.Service
	var notices []Notice
	note := func(feature, format string, args ...any) {
		notices = append(notices, Notice{svc, feature, fmt.Sprintf(format, args...)})
	}
	var proto Protocol
	switch p.Protocol {
	case v1.ProtocolTCP:
		proto = ProtocolTCP
	case v1.ProtocolUDP:
		proto = ProtocolUDP
	default:
		note("Protocol"+string(p.Protocol), "port %s: HNS load balancers support TCP and UDP only; %s is not proxied on Windows", p.Key.PortName, p.Protocol)
		return nil, notices
	}
	ipv6 := p.Key.Family == v1.IPv6Protocol
	p = familyOnly(p)
	if ipv6 && !opts.Features.IPv6DualStack {
		note("IPv6", "port %s: this HNS does not support IPv6 load balancers; the IPv6 frontends are not proxied", p.Key.PortName)
		return nil, notices
	}
	affinity := false
	if p.Affinity.ClientIP {
		if opts.Features.SessionAffinity {
			affinity = true
			note("SessionAffinityTimeout", "port %s: HNS keeps ClientIP affinity without a timeout; timeoutSeconds=%d is not enforced", p.Key.PortName, p.Affinity.TimeoutSeconds)
		} else {
			note("SessionAffinity", "port %s: this HNS does not support session affinity; connections are spread without ClientIP affinity", p.Key.PortName)
		}
	}
	dsr := opts.EnableDSR && opts.Features.DSR
	hasLB, hasExternal := false, false
	for _, f := range p.Frontends {
		hasLB = hasLB || f.Kind == core.FrontendLoadBalancer
		hasExternal = hasExternal || f.Kind.External()
	}
	if len(p.SourceRanges) > 0 && hasLB {
		note("LoadBalancerSourceRanges", "port %s: HNS load balancers cannot filter clients by source; loadBalancerSourceRanges %s are not enforced", p.Key.PortName, prefixes(p.SourceRanges))
	}
	if p.ExternalPolicyLocal && !dsr && hasExternal {
		note("ExternalTrafficPolicyLocalSourceIP", "port %s: externalTrafficPolicy Local uses only this node's endpoints, but without DSR HNS does not preserve the client source address", p.Key.PortName)
	}

	base := LoadBalancer{Protocol: proto, SourceVIP: opts.SourceVIP, Flags: LBFlags{DSR: dsr, IPv6: ipv6}, SourceIPAffinity: affinity}
	var lbs []PlannedLB
	emit := func(kind core.FrontendKind, vips []netip.Addr, port uint16, eps []core.Endpoint, verdict core.Verdict, localRouted bool) {
		if len(eps) == 0 {
			if verdict == core.VerdictReject {
				note("RejectWithoutEndpoints", "port %s %s: the Service has no endpoints; HNS cannot reject, so connections time out instead of being refused", p.Key.PortName, kind)
			}
			return
		}
		internal, used, skipped := targetPortGroup(eps)
		if len(skipped) > 0 {
			note("MixedTargetPorts", "port %s %s: an HNS load balancer has one internal port; %d endpoints on port %d are used, %s are not", p.Key.PortName, kind, len(used), internal, strings.Join(skipped, " "))
		}
		lb := base
		lb.FrontendVIPs = vips
		lb.ExternalPort = port
		lb.InternalPort = internal
		lb.Flags.LocalRoutedVIP = localRouted
		pl := PlannedLB{Owner: p.Key, Kind: kind, LB: lb, Remote: map[netip.Addr]bool{}}
		for _, e := range used {
			pl.Endpoints = append(pl.Endpoints, e.Addr)
			if !e.Local {
				pl.Remote[e.Addr] = true
			}
		}
		sort.Slice(pl.Endpoints, func(i, j int) bool { return pl.Endpoints[i].Less(pl.Endpoints[j]) })
		lbs = append(lbs, pl)
	}
	var nodePortVIPs []netip.Addr
	for _, f := range p.Frontends {
		switch f.Kind {
		case core.FrontendClusterIP:
			emit(f.Kind, []netip.Addr{f.Addr}, f.Port, p.InternalEndpoints(), p.InternalEmpty, true)
		case core.FrontendNodePort:
			nodePortVIPs = append(nodePortVIPs, f.Addr)
		default:
			emit(f.Kind, []netip.Addr{f.Addr}, f.Port, p.ExternalEndpoints(), p.ExternalEmpty, false)
		}
	}
	if len(nodePortVIPs) > 0 {
		sort.Slice(nodePortVIPs, func(i, j int) bool { return nodePortVIPs[i].Less(nodePortVIPs[j]) })
		emit(core.FrontendNodePort, nodePortVIPs, p.NodePort, p.ExternalEndpoints(), p.ExternalEmpty, true)
	}
	return lbs, notices
}

// familyOnly returns p, or a copy without the frontends and endpoints whose
// address is invalid or of the other family. The core never produces them,
// but HNS would refuse such a load balancer on every sync, failing every
// sync; the Linux backend leaves the same addresses out.
func familyOnly(p *core.ServicePort) *core.ServicePort {
	v6 := p.Key.Family == v1.IPv6Protocol
	ok := func(a netip.Addr) bool { return a.IsValid() && a.Is6() == v6 && !a.Is4In6() }
	okFE := func(f core.Frontend) bool { return ok(f.Addr) }
	okEP := func(e core.Endpoint) bool { return ok(e.Addr) }
	if allOf(p.Frontends, okFE) && allOf(p.ClusterEndpoints, okEP) && allOf(p.LocalEndpoints, okEP) {
		return p
	}
	c := *p
	c.Frontends = filter(p.Frontends, okFE)
	c.ClusterEndpoints = filter(p.ClusterEndpoints, okEP)
	c.LocalEndpoints = filter(p.LocalEndpoints, okEP)
	return &c
}

func allOf[T any](xs []T, keep func(T) bool) bool {
	for _, x := range xs {
		if !keep(x) {
			return false
		}
	}
	return true
}

func filter[T any](xs []T, keep func(T) bool) []T {
	var out []T
	for _, x := range xs {
		if keep(x) {
			out = append(out, x)
		}
	}
	return out
}

// targetPortGroup picks the endpoints an HNS load balancer can serve: HNS maps
// one internal port per load balancer, so endpoints of one Service port on
// different target ports (a rollout renaming a container port) are grouped by
// port and the largest group is used (ties: the lowest port). The others are
// returned as text for the notice.
func targetPortGroup(eps []core.Endpoint) (uint16, []core.Endpoint, []string) {
	count := map[uint16]int{}
	for _, e := range eps {
		count[e.Port]++
	}
	var best uint16
	for port, n := range count {
		if n > count[best] || (n == count[best] && port < best) {
			best = port
		}
	}
	var used []core.Endpoint
	var skipped []string
	seen := map[netip.Addr]bool{}
	for _, e := range eps {
		switch {
		case e.Port != best:
			skipped = append(skipped, e.AddrPort().String())
		case seen[e.Addr]:
			// HNS endpoints are addresses: a second port on one address cannot be told apart.
		default:
			seen[e.Addr] = true
			used = append(used, e)
		}
	}
	sort.Strings(skipped)
	return best, used, skipped
}

// remoteEndpoint describes the HNS remote endpoint for a pod on another node.
// Overlay networks route it to the provider address of the remote subnet that
// holds it; L2Bridge networks reach it directly.
func remoteEndpoint(ip netip.Addr, nw Network) (Endpoint, error) {
	ep := Endpoint{Name: RemoteEndpointPrefix + ip.String(), IP: ip, Remote: true, MAC: conjureMAC(ip)}
	if nw.Type != NetworkOverlay {
		return ep, nil
	}
	for _, s := range nw.RemoteSubnets {
		if s.Prefix.Contains(ip) {
			ep.ProviderAddress = s.ProviderAddress
			return ep, nil
		}
	}
	return ep, fmt.Errorf("endpoint %s is in no remote subnet of overlay network %q; it is not used until the CNI adds its node's subnet", ip, nw.Name)
}

// RemoteEndpointPrefix begins the HNS name of every remote endpoint crossproxy
// creates; it is how crossproxy recognises its own remote endpoints.
const RemoteEndpointPrefix = "crossproxy-remote-"

// conjureMAC derives a stable locally administered MAC from an IPv4 address,
// as HNS remote endpoints need one; IPv6 endpoints use the low four bytes.
func conjureMAC(ip netip.Addr) string {
	b := ip.As16()
	return fmt.Sprintf("02-11-%02x-%02x-%02x-%02x", b[12], b[13], b[14], b[15])
}

func prefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}
