package hns

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	"github.com/crossproxy/crossproxy/core"
)

// RenderText prints, one object per line, what the backend would program
// for state: what `crossproxy render --platform windows` shows on any OS.
func RenderText(state *core.NodeState, opts PlanOptions) string {
	return renderPlan(planState(state, opts))
}

// RenderJSON is RenderText's plan as `crossproxy render --platform windows
// -o json` prints it.
func RenderJSON(state *core.NodeState, opts PlanOptions) ([]byte, error) {
	return json.MarshalIndent(planToJSON(planState(state, opts)), "", "  ")
}

// renderPlan prints a plan as text, one object per line, for RenderText
// and for readable whole-plan test comparisons. Remote
// endpoints are marked with "*".
func renderPlan(p hnsPlan) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "# HNS plan: %d load balancers, %d remote endpoints, %d unsupported\n",
		len(p.LoadBalancers), len(p.RemoteEndpoints), len(p.Notices))
	for _, lb := range p.LoadBalancers {
		sb.WriteString(renderLB(lb))
		sb.WriteByte('\n')
	}
	if ep := p.SourceVIPEndpoint; ep != nil {
		fmt.Fprintf(&sb, "source-vip-endpoint %s mac=%s\n", ep.IP, ep.MAC)
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

// renderLB prints one planned load balancer on one line.
func renderLB(p plannedLB) string {
	eps := make([]string, len(p.Endpoints))
	for i, ip := range p.Endpoints {
		eps[i] = ip.String()
		if p.Remote[ip] {
			eps[i] += "*"
		}
	}
	lb := p.LB
	s := fmt.Sprintf("lb %s %s %s:%d -> :%d [%s] flags=%s portflags=%s", p.Owner, p.Kind, vipList(lb.FrontendVIPs), lb.ExternalPort, lb.InternalPort,
		strings.Join(eps, " "), names(lb.Flags.loadBalancerNames()), names(lb.Flags.portMappingNames()))
	if lb.SourceIPAffinity {
		s += " affinity=SourceIP"
	}
	if lb.SourceVIP.IsValid() {
		s += " sourceVIP=" + lb.SourceVIP.String()
	}
	return s
}

func names(n []string) string {
	if len(n) == 0 {
		return "none"
	}
	return strings.Join(n, ",")
}

// vipList prints the frontend VIPs; "*" is a load balancer without VIP
// (every host address).
func vipList(vips []netip.Addr) string {
	if len(vips) == 0 {
		return "*"
	}
	s := make([]string, len(vips))
	for i, v := range vips {
		s[i] = v.String()
	}
	return strings.Join(s, ",")
}

// planJSON is a plan in the form `crossproxy render --platform windows -o
// json` prints: per load balancer its frontend, both flag sets by name, the
// source VIP and the backends; the endpoints crossproxy creates; what HNS
// cannot express.
type planJSON struct {
	LoadBalancers     []loadBalancerJSON `json:"loadBalancers"`
	SourceVIPEndpoint *endpointJSON      `json:"sourceVIPEndpoint,omitempty"`
	RemoteEndpoints   []endpointJSON     `json:"remoteEndpoints"`
	Unsupported       []noticeJSON       `json:"unsupported"`
}

// loadBalancerJSON is one planned HNS load balancer.
type loadBalancerJSON struct {
	Service string `json:"service"`
	Port    string `json:"port"`
	Family  string `json:"family"`
	Kind    string `json:"kind"`
	// FrontendVIPs is empty for a load balancer on every host address (NodePort).
	FrontendVIPs      []string      `json:"frontendVIPs"`
	Protocol          string        `json:"protocol"`
	ExternalPort      uint16        `json:"externalPort"`
	InternalPort      uint16        `json:"internalPort"`
	LoadBalancerFlags []string      `json:"loadBalancerFlags"`
	PortMappingFlags  []string      `json:"portMappingFlags"`
	Distribution      string        `json:"distribution"`
	SourceVIP         string        `json:"sourceVIP,omitempty"`
	Backends          []backendJSON `json:"backends"`
}

// backendJSON is one endpoint of a load balancer.
type backendJSON struct {
	IP     string `json:"ip"`
	Remote bool   `json:"remote"`
}

// endpointJSON is an HNS endpoint crossproxy creates.
type endpointJSON struct {
	Name            string `json:"name"`
	IP              string `json:"ip"`
	Remote          bool   `json:"remote"`
	ProviderAddress string `json:"providerAddress,omitempty"`
	MAC             string `json:"mac"`
}

// noticeJSON is a core decision HNS cannot express.
type noticeJSON struct {
	Service string `json:"service"`
	Feature string `json:"feature"`
	Detail  string `json:"detail"`
}

// planToJSON converts a plan to its JSON form.
func planToJSON(p hnsPlan) planJSON {
	out := planJSON{LoadBalancers: []loadBalancerJSON{}, RemoteEndpoints: []endpointJSON{}, Unsupported: []noticeJSON{}}
	for _, pl := range p.LoadBalancers {
		lb := pl.LB
		j := loadBalancerJSON{
			Service: pl.Owner.Service.String(), Port: pl.Owner.PortName, Family: string(pl.Owner.Family), Kind: string(pl.Kind),
			FrontendVIPs: []string{}, Protocol: lb.Protocol.String(), ExternalPort: lb.ExternalPort, InternalPort: lb.InternalPort,
			LoadBalancerFlags: lb.Flags.loadBalancerNames(), PortMappingFlags: lb.Flags.portMappingNames(), Distribution: "None",
			Backends: []backendJSON{},
		}
		for _, v := range lb.FrontendVIPs {
			j.FrontendVIPs = append(j.FrontendVIPs, v.String())
		}
		if lb.SourceIPAffinity {
			j.Distribution = "SourceIP"
		}
		if lb.SourceVIP.IsValid() {
			j.SourceVIP = lb.SourceVIP.String()
		}
		for _, ip := range pl.Endpoints {
			j.Backends = append(j.Backends, backendJSON{IP: ip.String(), Remote: pl.Remote[ip]})
		}
		out.LoadBalancers = append(out.LoadBalancers, j)
	}
	if ep := p.SourceVIPEndpoint; ep != nil {
		e := endpointToJSON(*ep)
		out.SourceVIPEndpoint = &e
	}
	for _, ep := range p.RemoteEndpoints {
		out.RemoteEndpoints = append(out.RemoteEndpoints, endpointToJSON(ep))
	}
	for _, n := range p.Notices {
		out.Unsupported = append(out.Unsupported, noticeJSON{Service: n.Service.String(), Feature: n.Feature, Detail: n.Detail})
	}
	return out
}

func endpointToJSON(ep Endpoint) endpointJSON {
	e := endpointJSON{Name: ep.Name, IP: ep.IP.String(), Remote: ep.Remote, MAC: ep.MAC}
	if ep.ProviderAddress.IsValid() {
		e.ProviderAddress = ep.ProviderAddress.String()
	}
	return e
}
