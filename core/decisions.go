package core

import (
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// The functions in this file expose, for one Service and its EndpointSlices,
// decisions Compute makes before it builds ports: whether the Service is
// proxied, in which families, and which slices are read. Compute uses the
// same code, so `crossproxy explain` can say why a Service has no ports
// without a second copy of the rules.

// NotProxied says why no node proxies svc, whatever the Options: ExternalName,
// headless (clusterIP None) or no cluster IP allocated; "" when it may be
// proxied. Compute also skips Services labelled for another proxy, which
// depends on Options.ProxyName; NodeState.Ignored lists both kinds.
func NotProxied(svc *v1.Service) string {
	switch {
	case svc.Spec.Type == v1.ServiceTypeExternalName:
		return "type ExternalName is answered by DNS, not proxied"
	case svc.Spec.ClusterIP == v1.ClusterIPNone:
		return "headless (clusterIP None)"
	case svc.Spec.ClusterIP == "" && len(svc.Spec.ClusterIPs) == 0:
		return "no clusterIP allocated"
	}
	return ""
}

// ServiceFamilies are the families of svc's usable cluster IPs, in the order
// the Service lists them. Compute builds the Service's ports in each of these
// families the node runs, and in no other.
func ServiceFamilies(svc *v1.Service) []v1.IPFamily {
	ips := parseClusterIPs(&svc.Spec, problemSink{})
	out := make([]v1.IPFamily, 0, len(ips))
	for _, a := range ips {
		out = append(out, familyOf(a))
	}
	return out
}

// IgnoredSlice says why the core skips EndpointSlice s on purpose (it is
// labelled as a headless Service's), or "". NodeState.Ignored lists such
// slices with this reason.
func IgnoredSlice(s *discovery.EndpointSlice) string {
	if hasKey(s.Labels, LabelHeadless) {
		return fmt.Sprintf("labelled %s: endpoints of a headless Service are not proxied", LabelHeadless)
	}
	return ""
}

// SliceUnused says why Compute reads no endpoint of s, an EndpointSlice of
// svc, on a node that runs families, or "" when it reads them. A nil svc
// leaves out the check of the Service's cluster IPs, empty families the check
// of the node's.
func SliceUnused(svc *v1.Service, s *discovery.EndpointSlice, families []v1.IPFamily) string {
	if why := IgnoredSlice(s); why != "" {
		return why
	}
	hasClusterIP := func(v1.IPFamily) bool { return true }
	if svc != nil {
		fams := ServiceFamilies(svc)
		hasClusterIP = func(f v1.IPFamily) bool { return slices.Contains(fams, f) }
	}
	runs := func(f v1.IPFamily) bool { return len(families) == 0 || slices.Contains(families, f) }
	_, why, _ := sliceSkip(s.AddressType, hasClusterIP, runs)
	return why
}

// sliceSkip decides whether a slice of addressType t is read: fam is its
// family; why says why not ("" when it is read); bad marks an address type
// that is wrong (a Problem) rather than merely not ours to proxy.
func sliceSkip(t discovery.AddressType, hasClusterIP, runs func(v1.IPFamily) bool) (fam v1.IPFamily, why string, bad bool) {
	switch t {
	case discovery.AddressTypeIPv4:
		fam = v1.IPv4Protocol
	case discovery.AddressTypeIPv6:
		fam = v1.IPv6Protocol
	case discovery.AddressTypeFQDN:
		return "", "addressType FQDN: names are not proxied", false
	default:
		return "", fmt.Sprintf("%q is not IPv4, IPv6 or FQDN", t), true
	}
	switch {
	case !hasClusterIP(fam):
		return fam, fmt.Sprintf("the Service has no %s cluster IP", fam), false
	case !runs(fam):
		return fam, fmt.Sprintf("this node does not run %s", fam), false
	}
	return fam, "", false
}

// hasClusterIP reports whether the Service has a usable cluster IP of family f.
func (info *svcInfo) hasClusterIP(f v1.IPFamily) bool { return info.clusterIP[famIndex(f)].IsValid() }

// EndpointConditions resolves an endpoint's conditions as Kubernetes defines
// them and the core reads them: unset ready and serving mean true, unset
// terminating means false.
func EndpointConditions(c discovery.EndpointConditions) (ready, serving, terminating bool) {
	return c.Ready == nil || *c.Ready, c.Serving == nil || *c.Serving, c.Terminating != nil && *c.Terminating
}

// ProtocolOrTCP is p, or TCP when p is unset, as Kubernetes defaults the
// protocol of a Service port and of an EndpointSlice port.
func ProtocolOrTCP(p v1.Protocol) v1.Protocol {
	if p == "" {
		return v1.ProtocolTCP
	}
	return p
}

// SlicePortProtocol is the protocol of EndpointSlice port p (TCP when unset).
func SlicePortProtocol(p discovery.EndpointPort) v1.Protocol {
	if p.Protocol == nil {
		return v1.ProtocolTCP
	}
	return *p.Protocol
}

// SlicePortFor is the port of slice s that serves Service port p, or nil:
// the first one with p's name and protocol. The EndpointSlice controller
// names a slice port after the Service port, and Compute matches them so.
func SlicePortFor(s *discovery.EndpointSlice, p v1.ServicePort) *discovery.EndpointPort {
	proto := ProtocolOrTCP(p.Protocol)
	for i := range s.Ports {
		q := &s.Ports[i]
		if deref(q.Name) == p.Name && SlicePortProtocol(*q) == proto {
			return q
		}
	}
	return nil
}
