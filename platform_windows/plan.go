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

// PlanOptions are the node facts the planner needs beyond the NodeState:
// the options `run` takes on Windows and what the backend reads from HNS.
type PlanOptions struct {
	// Network decides how remote endpoints are addressed (overlay needs a
	// provider address from its remote subnets).
	Network Network
	// Features are what this HNS can do; the planner leaves out or notes what it cannot.
	Features Features
	// SourceVIP is the overlay source VIP (--source-vip); on L2Bridge networks
	// load balancers get none, as kube-proxy's.
	SourceVIP netip.Addr
	// AutoSourceVIP says the backend finds the source VIP per node (an IPAM
	// reservation is possible), so OverlayPrerequisites does not ask for one
	// before the first sync.
	AutoSourceVIP bool
	// EnableDSR asks for direct server return on ClusterIP load balancers
	// (NodePort, ExternalIP and LoadBalancer ingress use DSR exactly when
	// externalTrafficPolicy is Local, as kube-proxy's).
	EnableDSR bool
	// NodeIP is this node's address; if invalid, the NodeState's first node
	// address of the planned family. Overlay networks use it as provider
	// address of endpoints off the pod network and as their source VIP.
	NodeIP netip.Addr
	// HostMAC is the MAC of the host interface with NodeIP (overlay: the
	// source VIP endpoint and the ClusterIP remote endpoints use it).
	HostMAC string
	// HealthCheckGateway is the address of the host's own HNS endpoint
	// (kube-proxy's root endpoint, "cbr0") when forwardHealthCheckVip is on
	// and HNS has that endpoint; invalid otherwise. Each LoadBalancer ingress
	// IP then gets a load balancer on its health-check port that leads to it.
	HealthCheckGateway netip.Addr
	// HealthzPort is the health-check VIP's port for Services without a
	// healthCheckNodePort (the proxy's /healthz port; 0: none).
	HealthzPort uint16
}

// kindHealthCheck owns the load balancers that forward a LoadBalancer
// ingress IP's health-check port to the host (forwardHealthCheckVip). It is
// no frontend of the core's: the Service's port owns them in the ledger, and
// Programmed reports them as notes, not as frontends.
const kindHealthCheck core.FrontendKind = "HealthCheckVIP"

// plannedLB is one load balancer the NodeState needs, with its endpoints as
// addresses (the applier resolves them to HNS endpoint ids).
type plannedLB struct {
	Owner core.PortKey
	Kind  core.FrontendKind
	// LB has everything but ID and EndpointIDs.
	LB LoadBalancer
	// Endpoints are the endpoint addresses, sorted; Remote says which of them
	// are on other nodes.
	Endpoints []netip.Addr
	Remote    map[netip.Addr]bool
}

// notice is a core decision HNS cannot express for one Service.
type notice struct {
	Service types.NamespacedName
	Feature string
	Detail  string
}

// hnsPlan is the HNS state a NodeState (or part of one) needs.
type hnsPlan struct {
	// LoadBalancers sorted by owner, then frontend.
	LoadBalancers []plannedLB
	// RemoteEndpoints the load balancers need, sorted by IP; on overlay
	// networks also one per ClusterIP (host MAC, this node's provider
	// address), as kube-proxy creates.
	RemoteEndpoints []Endpoint
	// SourceVIPEndpoint is the local endpoint the overlay source VIP needs
	// (host MAC); nil on L2Bridge.
	SourceVIPEndpoint *Endpoint
	Notices           []notice
}

// OverlayPrerequisites says why an overlay node cannot be programmed, as
// kube-proxy refuses to start: overlay load balancers need a source VIP,
// HNS' remote subnet support, and the node's address (checked only with a
// state). It is nil on L2Bridge.
func OverlayPrerequisites(opts PlanOptions, state *core.NodeState) error {
	if !opts.Network.isOverlay() {
		return nil
	}
	var missing []string
	if !opts.SourceVIP.IsValid() && !opts.AutoSourceVIP {
		missing = append(missing, "a source VIP (flag --source-vip)")
	}
	if !opts.Features.RemoteSubnet {
		missing = append(missing, "HNS remote subnet support (Windows Server 2019 or later)")
	}
	if state != nil && !opts.nodeIP(state).IsValid() {
		missing = append(missing, "the node's address (the Node has none)")
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("overlay network %q needs %s: %w", opts.Network.Name, strings.Join(missing, ", "), ErrInvalid)
}

// nodeIP is NodeIP, or the first node address of the overlay family (the
// NodeIP's, IPv4 by default).
func (o PlanOptions) nodeIP(state *core.NodeState) netip.Addr {
	if o.NodeIP.IsValid() {
		return o.NodeIP
	}
	for _, a := range state.Node.Addresses {
		if a.Is4() {
			return a
		}
	}
	if len(state.Node.Addresses) > 0 {
		return state.Node.Addresses[0]
	}
	return netip.Addr{}
}

// planState plans every port of state.
func planState(state *core.NodeState, opts PlanOptions) hnsPlan {
	keys := make([]core.PortKey, 0, len(state.Ports))
	for k := range state.Ports {
		keys = append(keys, k)
	}
	return planPorts(state, keys, opts)
}

// planPorts plans only the given ports of state (a partial sync); keys absent
// from state plan to nothing, which removes their load balancers.
func planPorts(state *core.NodeState, keys []core.PortKey, opts PlanOptions) hnsPlan {
	sortKeys(keys)
	pl := planner{opts: opts, state: state, nodeIP: opts.nodeIP(state),
		remotes: map[netip.Addr]Endpoint{}, frontends: map[string]core.PortKey{}}
	if opts.Network.isOverlay() && opts.SourceVIP.IsValid() {
		// A local endpoint: kube-proxy gives it the host MAC and no provider
		// address policy (HNS takes one for remote endpoints only).
		pl.plan.SourceVIPEndpoint = &Endpoint{Name: sourceVIPEndpointName, IP: opts.SourceVIP, MAC: opts.HostMAC}
	}
	for _, k := range keys {
		if p := state.Ports[k]; p != nil {
			pl.port(k, p)
		}
	}
	for _, ep := range pl.remotes {
		pl.plan.RemoteEndpoints = append(pl.plan.RemoteEndpoints, ep)
	}
	sort.Slice(pl.plan.RemoteEndpoints, func(i, j int) bool {
		return pl.plan.RemoteEndpoints[i].IP.Less(pl.plan.RemoteEndpoints[j].IP)
	})
	return pl.plan
}

// planner accumulates one plan.
type planner struct {
	opts      PlanOptions
	state     *core.NodeState
	nodeIP    netip.Addr
	plan      hnsPlan
	remotes   map[netip.Addr]Endpoint
	frontends map[string]core.PortKey
}

func (pl *planner) notice(n notice) {
	// The families of one port share their notices.
	if !slices.Contains(pl.plan.Notices, n) {
		pl.plan.Notices = append(pl.plan.Notices, n)
	}
}

// port plans one Service port: its overlay ClusterIP remote endpoint, its
// load balancers, and the remote endpoints they use.
func (pl *planner) port(k core.PortKey, p *core.ServicePort) {
	overlay := pl.opts.Network.isOverlay()
	if overlay && p.ClusterIP.IsValid() && pl.familyOK(p) {
		// kube-proxy gives every ClusterIP a remote endpoint on overlay
		// networks (host MAC, this node as provider address).
		pl.remotes[p.ClusterIP] = Endpoint{Name: remoteEndpointPrefix + p.ClusterIP.String(), IP: p.ClusterIP, Remote: true,
			MAC: pl.opts.HostMAC, ProviderAddress: pl.nodeIP}
	}
	lbs, notices := pl.planPort(p)
	for _, n := range notices {
		pl.notice(n)
	}
	for _, lb := range lbs {
		f := lb.LB.frontend()
		if other, dup := pl.frontends[f]; dup {
			if lb.Kind == kindHealthCheck && other.Service == k.Service {
				continue // the Service's other ports share the ingress IP's health-check port
			}
			pl.plan.Notices = append(pl.plan.Notices, notice{k.Service, "FrontendConflict",
				fmt.Sprintf("%s %s is already used by %s; HNS allows one load balancer per frontend", lb.Kind, f, other)})
			continue
		}
		pl.frontends[f] = k
		kept := lb.Endpoints[:0:0]
		for _, ip := range lb.Endpoints {
			if lb.Remote[ip] {
				if _, ok := pl.remotes[ip]; !ok {
					pl.remotes[ip] = pl.remoteEndpoint(ip)
				}
			}
			kept = append(kept, ip)
		}
		lb.Endpoints = kept
		pl.plan.LoadBalancers = append(pl.plan.LoadBalancers, lb)
	}
}

// familyOK reports whether the port's family is programmed: overlay networks
// carry one family, the node address's (kube-proxy disables dual-stack there).
func (pl *planner) familyOK(p *core.ServicePort) bool {
	if !pl.opts.Network.isOverlay() {
		return true
	}
	v6 := p.Key.Family == v1.IPv6Protocol
	if pl.nodeIP.IsValid() {
		return pl.nodeIP.Is6() == v6
	}
	return !v6
}

// sortKeys orders ports as the core does (core.PortKey.Compare).
func sortKeys(keys []core.PortKey) {
	slices.SortFunc(keys, core.PortKey.Compare)
}

// planPort turns one Service port into its load balancers: one per ClusterIP,
// ExternalIP and LoadBalancer ingress frontend, one without VIP (every host
// address) for the NodePort.
func (pl *planner) planPort(p *core.ServicePort) ([]plannedLB, []notice) {
	opts := pl.opts
	svc := p.Key.Service
	var notices []notice
	note := func(feature, format string, args ...any) {
		notices = append(notices, notice{svc, feature, fmt.Sprintf(format, args...)})
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
	// The core guarantees a family-pure, valid port (core.ServicePort), so
	// no address here can make HNS refuse the load balancer.
	ipv6 := p.Key.Family == v1.IPv6Protocol
	if !pl.familyOK(p) {
		note("DualStackOverlay", "port %s: overlay networks carry one IP family (kube-proxy disables dual-stack there); the %s frontends are not proxied", p.Key.PortName, p.Key.Family)
		return nil, notices
	}
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
	hasLB, hasExternal := false, false
	for _, f := range p.Frontends {
		hasLB = hasLB || f.Kind == core.FrontendLoadBalancer
		hasExternal = hasExternal || f.Kind.External()
	}
	if p.PreserveDestination && hasLB {
		note("PreserveDestination", "port %s: the annotation %s=\"true\" is not applied: crossproxy does not program kube-proxy's "+
			"preserve-destination mode (DSR, UseMux and PreserveDIP on the LoadBalancer ingress, local endpoints only), so ingress traffic "+
			"reaches the endpoints translated to their own address as for any Service; externalTrafficPolicy: Local keeps the client's address", p.Key.PortName, core.AnnotationPreserveDestination)
	}
	if len(p.SourceRanges) > 0 && hasLB {
		note("LoadBalancerSourceRanges", "port %s: HNS load balancers cannot filter clients by source; loadBalancerSourceRanges %s are not enforced", p.Key.PortName, prefixes(p.SourceRanges))
	}
	// DSR as kube-proxy: ClusterIP with --enable-dsr; external frontends
	// exactly when externalTrafficPolicy is Local (the client address is kept).
	clusterDSR := opts.EnableDSR && opts.Features.DSR
	externalDSR := p.ExternalPolicyLocal && opts.Features.DSR
	if p.ExternalPolicyLocal && !externalDSR && hasExternal {
		note("ExternalTrafficPolicyLocalSourceIP", "port %s: externalTrafficPolicy Local uses only this node's endpoints, but this HNS has no DSR, so the client source address is not preserved", p.Key.PortName)
	}
	internal := pl.usable(p.InternalEndpoints(), note)
	external := pl.usable(p.ExternalEndpoints(), note)
	sourceVIP := pl.sourceVIP(internal, external)

	base := LoadBalancer{Protocol: proto, SourceVIP: sourceVIP, Flags: LBFlags{IPv6: ipv6}, SourceIPAffinity: affinity}
	var lbs []plannedLB
	emit := func(kind core.FrontendKind, vips []netip.Addr, port uint16, eps []core.Endpoint, verdict core.Verdict, flags LBFlags) {
		if len(eps) == 0 {
			if verdict == core.VerdictReject {
				note("RejectWithoutEndpoints", "port %s %s: the Service has no endpoints; HNS cannot reject, so connections time out instead of being refused", p.Key.PortName, kind)
			}
			return
		}
		internalPort, used, skipped := targetPortGroup(eps)
		if len(skipped) > 0 {
			note("MixedTargetPorts", "port %s %s: an HNS load balancer has one internal port; %d endpoints on port %d are used, %s are not", p.Key.PortName, kind, len(used), internalPort, strings.Join(skipped, " "))
		}
		lb := base
		lb.FrontendVIPs = vips
		lb.ExternalPort = port
		lb.InternalPort = internalPort
		lb.Flags = flags
		lb.Flags.IPv6 = ipv6
		plb := plannedLB{Owner: p.Key, Kind: kind, LB: lb, Remote: map[netip.Addr]bool{}}
		for _, e := range used {
			plb.Endpoints = append(plb.Endpoints, e.Addr)
			if !e.Local {
				plb.Remote[e.Addr] = true
			}
		}
		sort.Slice(plb.Endpoints, func(i, j int) bool { return plb.Endpoints[i].Less(plb.Endpoints[j]) })
		lbs = append(lbs, plb)
	}
	nodePort := false
	for _, f := range p.Frontends {
		switch f.Kind {
		case core.FrontendClusterIP:
			emit(f.Kind, []netip.Addr{f.Addr}, f.Port, internal, p.InternalEmpty, LBFlags{DSR: clusterDSR})
		case core.FrontendNodePort:
			nodePort = true
		default:
			emit(f.Kind, []netip.Addr{f.Addr}, f.Port, external, p.ExternalEmpty, LBFlags{DSR: externalDSR, VipExternalIP: true})
		}
	}
	if nodePort {
		// No VIP: HNS serves the NodePort on every host address, as kube-proxy's.
		emit(core.FrontendNodePort, nil, p.NodePort, external, p.ExternalEmpty, LBFlags{DSR: externalDSR, LocalRoutedVIP: true, VipExternalIP: true})
	}
	lbs = append(lbs, pl.healthCheckLBs(p, base, external, note)...)
	return lbs, notices
}

// healthCheckLBs forwards the health-check port of each LoadBalancer ingress
// IP to the host's own endpoint (forwardHealthCheckVip), as kube-proxy's
// winkernel: cloud load balancers that probe the ingress IP on the Service's
// healthCheckNodePort (else the proxy's healthz port) then reach this node's
// health server instead of nothing. Like winkernel it forwards only while the
// external set holds a ready endpoint: with none (no local endpoint under
// externalTrafficPolicy Local, or only terminating ones) the probe fails and
// the cloud takes the node out, which is what the probe is for.
func (pl *planner) healthCheckLBs(p *core.ServicePort, base LoadBalancer, external []core.Endpoint, note func(feature, format string, args ...any)) []plannedLB {
	gw := pl.opts.HealthCheckGateway
	if !gw.IsValid() || !slices.ContainsFunc(external, func(e core.Endpoint) bool { return e.Ready }) {
		return nil
	}
	port := p.HealthCheckNodePort
	if port == 0 {
		port = pl.opts.HealthzPort
	}
	var out []plannedLB
	for _, f := range p.Frontends {
		if f.Kind != core.FrontendLoadBalancer {
			continue
		}
		if port == 0 {
			note("HealthCheckVIP", "port %s: forwardHealthCheckVip is on but the Service has no healthCheckNodePort and the proxy serves no healthz port: %s is not forwarded", p.Key.PortName, f.Addr)
			continue
		}
		if f.Addr.Is6() != gw.Is6() {
			note("HealthCheckVIP", "port %s: the host endpoint %s is of the other IP family: the health-check port of %s is not forwarded", p.Key.PortName, gw, f.Addr)
			continue
		}
		lb := base
		lb.FrontendVIPs = []netip.Addr{f.Addr}
		lb.ExternalPort, lb.InternalPort = port, port
		// No DSR, no affinity: the probe is answered by the host itself.
		lb.Flags = LBFlags{IPv6: f.Addr.Is6()}
		lb.SourceIPAffinity = false
		out = append(out, plannedLB{Owner: p.Key, Kind: kindHealthCheck, LB: lb, Endpoints: []netip.Addr{gw}, Remote: map[netip.Addr]bool{}})
	}
	return out
}

// usable leaves out the local endpoints at this node's own address
// (hostNetwork pods): HNS has no endpoint for them, and kube-proxy skips them
// too. Waiting for one would retry the port forever.
func (pl *planner) usable(eps []core.Endpoint, note func(feature, format string, args ...any)) []core.Endpoint {
	host := func(e core.Endpoint) bool {
		return e.Local && (e.Addr == pl.nodeIP || slices.Contains(pl.state.Node.Addresses, e.Addr))
	}
	if !slices.ContainsFunc(eps, host) {
		return eps
	}
	var out []core.Endpoint
	for _, e := range eps {
		if host(e) {
			note("HostNetworkEndpoint", "endpoint %s is this node's own address (a hostNetwork pod): HNS has no endpoint for it, so this node does not use it (as kube-proxy)", e.Addr)
			continue
		}
		out = append(out, e)
	}
	return out
}

// sourceVIP picks a load balancer's source VIP as kube-proxy does: none on
// L2Bridge; on overlay the node IP when an endpoint is off the pod network
// (no remote subnet holds it) or is another node's own address, else the
// configured source VIP.
func (pl *planner) sourceVIP(sets ...[]core.Endpoint) netip.Addr {
	nw := pl.opts.Network
	if !nw.isOverlay() {
		return netip.Addr{}
	}
	for _, eps := range sets {
		for _, e := range eps {
			if e.Local {
				continue
			}
			if _, inSubnet := nw.providerAddress(e.Addr); !inSubnet || nw.isProviderAddress(e.Addr) {
				return pl.nodeIP
			}
		}
	}
	return pl.opts.SourceVIP
}

// remoteEndpoint describes the HNS remote endpoint for an endpoint on
// another node. Overlay networks route it to the provider address of the
// remote subnet that holds it, or of the node it is the address of; an
// address outside the pod network (API server, an external backend) goes out
// through this node, as kube-proxy. L2Bridge networks reach it directly.
func (pl *planner) remoteEndpoint(ip netip.Addr) Endpoint {
	ep := Endpoint{Name: remoteEndpointPrefix + ip.String(), IP: ip, Remote: true, MAC: conjureMAC(ip)}
	if !pl.opts.Network.isOverlay() {
		return ep
	}
	pa, ok := pl.opts.Network.providerAddress(ip)
	if !ok {
		pa = pl.nodeIP
	}
	ep.ProviderAddress = pa
	return ep
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

// remoteEndpointPrefix begins the HNS name of every remote endpoint crossproxy
// creates; it is how crossproxy recognises its own remote endpoints.
const remoteEndpointPrefix = "crossproxy-remote-"

// sourceVIPEndpointName is the HNS name of the overlay source VIP endpoint
// crossproxy creates when the network has none.
const sourceVIPEndpointName = "crossproxy-source-vip"

// conjureMAC derives a stable locally administered MAC from an address, as
// HNS remote endpoints need one: the IPv4 bytes in order, for IPv6 the last
// four bytes in reverse, as kube-proxy's conjureMac.
func conjureMAC(ip netip.Addr) string {
	b := ip.As16()
	if ip.Is4() || ip.Is4In6() {
		return fmt.Sprintf("02-11-%02x-%02x-%02x-%02x", b[12], b[13], b[14], b[15])
	}
	return fmt.Sprintf("02-11-%02x-%02x-%02x-%02x", b[15], b[14], b[13], b[12])
}

func prefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}
