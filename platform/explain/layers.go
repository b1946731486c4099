package explain

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/platform"
)

// declared copies the fields of the Service that decide how it is proxied.
func declared(in *Input) Declared {
	svc := in.Object
	if svc == nil {
		return Declared{}
	}
	s := &svc.Spec
	d := Declared{
		Found:                    true,
		Type:                     string(s.Type),
		ClusterIPs:               slices.Clone(s.ClusterIPs),
		ExternalIPs:              slices.Clone(s.ExternalIPs),
		SessionAffinity:          string(s.SessionAffinity),
		PublishNotReadyAddresses: s.PublishNotReadyAddresses,
		Selector:                 maps.Clone(s.Selector),
	}
	if d.Type == "" {
		d.Type = string(v1.ServiceTypeClusterIP)
	}
	if d.SessionAffinity == "" {
		d.SessionAffinity = string(v1.ServiceAffinityNone)
	}
	if len(d.ClusterIPs) == 0 && s.ClusterIP != "" {
		d.ClusterIPs = []string{s.ClusterIP}
	}
	for _, f := range s.IPFamilies {
		d.IPFamilies = append(d.IPFamilies, string(f))
	}
	if s.IPFamilyPolicy != nil {
		d.IPFamilyPolicy = string(*s.IPFamilyPolicy)
	}
	for _, p := range s.Ports {
		d.Ports = append(d.Ports, DeclaredPort{Name: p.Name, Protocol: string(core.ProtocolOrTCP(p.Protocol)), Port: p.Port,
			TargetPort: targetPort(p), NodePort: p.NodePort})
	}
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if ing.IP != "" {
			d.LoadBalancerIPs = append(d.LoadBalancerIPs, ing.IP)
		}
	}
	if isExternal(svc) {
		d.ExternalTrafficPolicy = string(s.ExternalTrafficPolicy)
		if d.ExternalTrafficPolicy == "" {
			d.ExternalTrafficPolicy = string(v1.ServiceExternalTrafficPolicyCluster)
		}
	}
	d.InternalTrafficPolicy = string(v1.ServiceInternalTrafficPolicyCluster)
	if s.InternalTrafficPolicy != nil {
		d.InternalTrafficPolicy = string(*s.InternalTrafficPolicy)
	}
	if s.TrafficDistribution != nil {
		d.TrafficDistribution = *s.TrafficDistribution
	}
	if s.SessionAffinity == v1.ServiceAffinityClientIP {
		d.AffinityTimeoutSeconds = core.DefaultAffinityTimeoutSeconds
		if c := s.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
			d.AffinityTimeoutSeconds = *c.ClientIP.TimeoutSeconds
		}
	}
	if s.Type == v1.ServiceTypeLoadBalancer {
		d.HealthCheckNodePort = s.HealthCheckNodePort
	}
	return d
}

// targetPort is the port's targetPort as Kubernetes defaults it (the port itself).
func targetPort(p v1.ServicePort) string {
	if p.TargetPort.IntVal == 0 && p.TargetPort.StrVal == "" {
		return fmt.Sprint(p.Port)
	}
	return p.TargetPort.String()
}

// isExternal reports whether the Service has frontends reached from outside.
func isExternal(svc *v1.Service) bool {
	t := svc.Spec.Type
	return t == v1.ServiceTypeNodePort || t == v1.ServiceTypeLoadBalancer || len(svc.Spec.ExternalIPs) > 0
}

// published copies the slices, sorted by name, with their conditions resolved.
func published(in *Input) Published {
	p := Published{Slices: []Slice{}}
	list := slices.Clone(in.Slices)
	slices.SortFunc(list, func(a, b *discovery.EndpointSlice) int { return cmp.Compare(a.Name, b.Name) })
	for _, s := range list {
		out := Slice{Name: s.Name, AddressType: string(s.AddressType), Ports: []SlicePort{}, Endpoints: []SliceEndpoint{},
			Ignored: sliceIgnored(in, s)}
		for _, sp := range s.Ports {
			q := SlicePort{Name: ptrString(sp.Name), Protocol: string(core.SlicePortProtocol(sp))}
			if sp.Port != nil {
				q.Port = *sp.Port
			}
			out.Ports = append(out.Ports, q)
		}
		for _, ep := range s.Endpoints {
			e := SliceEndpoint{Addresses: slices.Clone(ep.Addresses)}
			e.Ready, e.Serving, e.Terminating = core.EndpointConditions(ep.Conditions)
			if ep.NodeName != nil {
				e.Node = *ep.NodeName
			}
			if ep.Zone != nil {
				e.Zone = *ep.Zone
			}
			if ep.Hints != nil {
				for _, z := range ep.Hints.ForZones {
					e.HintZones = append(e.HintZones, z.Name)
				}
				for _, n := range ep.Hints.ForNodes {
					e.HintNodes = append(e.HintNodes, n.Name)
				}
			}
			out.Endpoints = append(out.Endpoints, e)
		}
		p.Slices = append(p.Slices, out)
	}
	return p
}

// sliceIgnored is the core's reason for skipping a slice on purpose, or "".
func sliceIgnored(in *Input, s *discovery.EndpointSlice) string {
	if in.State != nil {
		for _, o := range in.State.Ignored {
			if o.Kind == "EndpointSlice" && o.Object == s.Namespace+"/"+s.Name {
				return o.Reason
			}
		}
	}
	return core.IgnoredSlice(s)
}

// servicePorts returns the computed ports of one Service, sorted by key.
func servicePorts(in *Input) []*core.ServicePort {
	if in.State == nil {
		return nil
	}
	var out []*core.ServicePort
	for k, sp := range in.State.Ports {
		if k.Service == in.Service {
			out = append(out, sp)
		}
	}
	slices.SortFunc(out, func(a, b *core.ServicePort) int { return a.Key.Compare(b.Key) })
	return out
}

// frontendSet is the endpoint set and empty verdict that traffic to f uses.
func frontendSet(sp *core.ServicePort, f core.Frontend) (set string, eps []core.Endpoint, verdict core.Verdict) {
	if f.Kind.External() {
		set = string(core.SetCluster)
		if sp.ExternalPolicyLocal {
			set = string(core.SetLocal)
		}
		return set, sp.ExternalEndpoints(), sp.ExternalEmpty
	}
	set = string(core.SetCluster)
	if sp.InternalPolicyLocal {
		set = string(core.SetLocal)
	}
	return set, sp.InternalEndpoints(), sp.InternalEmpty
}

// computed renders the core's decisions for the Service.
func computed(in *Input) Computed {
	if in.State == nil {
		why := in.StateUnavailable
		if why == "" {
			why = "no computed state was given"
		}
		return Computed{Unavailable: why, Node: in.NodeName}
	}
	st := in.State
	c := Computed{Available: true, Source: in.StateSource, Node: st.Node.Name, Zone: st.Node.Zone}
	if c.Node == "" {
		c.Node = in.NodeName
	}
	for _, f := range st.Families {
		c.Families = append(c.Families, string(f))
	}
	for _, sp := range servicePorts(in) {
		cp := ComputedPort{
			Key:                   sp.Key.String(),
			Name:                  sp.Key.PortName,
			Protocol:              string(sp.Protocol),
			Family:                string(sp.Key.Family),
			InternalTrafficPolicy: sp.InternalPolicy(),
			ExternalTrafficPolicy: sp.ExternalPolicy(),
			TopologyMode:          sp.TopologyMode,
			TopologyNote:          sp.TopologyNote,
			Frontends:             []ComputedFrontend{},
			ClusterEndpoints:      computedEndpoints(sp.ClusterEndpoints),
			LocalEndpoints:        computedEndpoints(sp.LocalEndpoints),
		}
		if sp.Affinity.ClientIP {
			cp.Affinity = fmt.Sprintf("ClientIP %ds", sp.Affinity.TimeoutSeconds)
		}
		for _, f := range sp.Frontends {
			set, eps, verdict := frontendSet(sp, f)
			cf := ComputedFrontend{Kind: string(f.Kind), Address: netip.AddrPortFrom(f.Addr, f.Port).String(),
				Protocol: string(sp.Protocol), Set: set, Endpoints: addrPorts(eps)}
			if len(eps) == 0 {
				cf.Verdict = string(verdict)
			}
			cp.Frontends = append(cp.Frontends, cf)
		}
		for _, x := range sp.Excluded {
			cp.Excluded = append(cp.Excluded, Excluded{Address: x.Addr, Port: x.Port, Slice: x.Slice, Set: string(x.Set),
				Reason: string(x.Reason), Detail: x.Detail})
		}
		c.Ports = append(c.Ports, cp)
	}
	return c
}

func computedEndpoints(eps []core.Endpoint) []ComputedEndpoint {
	out := make([]ComputedEndpoint, 0, len(eps))
	for _, e := range eps {
		out = append(out, ComputedEndpoint{Address: e.AddrPort().String(), Node: e.NodeName(), Zone: e.Zone(), Slice: e.Slice,
			Ready: e.Ready, Serving: e.Serving, Terminating: e.Terminating, Local: e.Local})
	}
	return out
}

// addrPorts lists endpoint destinations, sorted, without repeats.
func addrPorts(eps []core.Endpoint) []string {
	aps := make([]netip.AddrPort, 0, len(eps))
	for _, e := range eps {
		aps = append(aps, e.AddrPort())
	}
	return sortedAddrPorts(aps)
}

func sortedAddrPorts(aps []netip.AddrPort) []string {
	aps = slices.Clone(aps)
	for i, a := range aps {
		aps[i] = unmap(a)
	}
	slices.SortFunc(aps, netip.AddrPort.Compare)
	aps = slices.Compact(aps)
	out := make([]string, 0, len(aps))
	for _, a := range aps {
		out = append(out, a.String())
	}
	return out
}

// programmed renders what the data plane holds.
func programmed(in *Input) Programmed {
	ps := in.Programmed
	if ps == nil {
		why := in.ProgrammedUnavailable
		if why == "" {
			why = "the data plane was not read"
		}
		return Programmed{Unavailable: why, Backend: in.Backend}
	}
	p := Programmed{Available: true, Backend: in.Backend, Notes: slices.Clone(ps.Notes)}
	fronts := slices.Clone(ps.Frontends)
	slices.SortStableFunc(fronts, compareProgrammed)
	for _, f := range fronts {
		p.Frontends = append(p.Frontends, ProgrammedFrontend{Kind: string(f.Kind), Address: netip.AddrPortFrom(f.Addr, f.Port).String(),
			Protocol: string(core.ProtocolOrTCP(f.Protocol)), Endpoints: sortedAddrPorts(f.Endpoints), Verdict: string(f.Verdict)})
	}
	for _, c := range ps.Connections {
		p.Connections = append(p.Connections, Connection{Protocol: string(core.ProtocolOrTCP(c.Protocol)), Client: c.Client.String(),
			Frontend: c.Frontend.String(), Endpoint: c.Endpoint.String(), State: c.State})
	}
	return p
}

func compareProgrammed(a, b platform.ProgrammedFrontend) int {
	return cmp.Or(cmp.Compare(kindOrder(a.Kind), kindOrder(b.Kind)), a.Addr.Compare(b.Addr), cmp.Compare(a.Port, b.Port),
		cmp.Compare(a.Protocol, b.Protocol))
}

func kindOrder(k core.FrontendKind) int {
	switch k {
	case core.FrontendClusterIP:
		return 0
	case core.FrontendNodePort:
		return 1
	case core.FrontendExternalIP:
		return 2
	case core.FrontendLoadBalancer:
		return 3
	}
	return 4
}
