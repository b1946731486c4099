package hns

import (
	"fmt"
	"net/netip"
	"strings"
)

// Render prints a plan as text, one object per line, for `crossproxy render
// --platform windows` and for readable whole-plan test comparisons. Remote
// endpoints are marked with "*".
func Render(p Plan) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "# HNS plan: %d load balancers, %d remote endpoints, %d unsupported\n",
		len(p.LoadBalancers), len(p.RemoteEndpoints), len(p.Notices))
	for _, lb := range p.LoadBalancers {
		sb.WriteString(RenderLB(lb))
		sb.WriteByte('\n')
	}
	for _, ep := range p.RemoteEndpoints {
		fmt.Fprintf(&sb, "remote-endpoint %s", ep.IP)
		if ep.ProviderAddress.IsValid() {
			fmt.Fprintf(&sb, " pa=%s", ep.ProviderAddress)
		}
		fmt.Fprintf(&sb, " mac=%s\n", ep.MAC)
	}
	for _, n := range p.Notices {
		fmt.Fprintf(&sb, "unsupported %s %s: %s\n", n.Service, n.Feature, n.Detail)
	}
	return sb.String()
}

// RenderLB prints one planned load balancer on one line.
func RenderLB(p PlannedLB) string {
	eps := make([]string, len(p.Endpoints))
	for i, ip := range p.Endpoints {
		eps[i] = ip.String()
		if p.Remote[ip] {
			eps[i] += "*"
		}
	}
	lb := p.LB
	s := fmt.Sprintf("lb %s %s %s:%d -> :%d [%s] flags=%s", p.Owner, p.Kind, vipList(lb.FrontendVIPs), lb.ExternalPort, lb.InternalPort, strings.Join(eps, " "), lb.Flags)
	if lb.SourceIPAffinity {
		s += " affinity=SourceIP"
	}
	if lb.SourceVIP.IsValid() {
		s += " sourceVIP=" + lb.SourceVIP.String()
	}
	return s
}

func vipList(vips []netip.Addr) string {
	s := make([]string, len(vips))
	for i, v := range vips {
		s[i] = v.String()
	}
	return strings.Join(s, ",")
}
