package explain

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("write explain report: %w", err)
	}
	return nil
}

// WriteText writes the report for a person: the four layers in order, then
// every finding, then the verdict line that names the first mismatch.
func (r *Report) WriteText(w io.Writer) error {
	b := bufio.NewWriter(w)
	p := func(indent int, format string, args ...any) {
		b.WriteString(strings.Repeat("  ", indent))
		fmt.Fprintf(b, format, args...)
		b.WriteByte('\n')
	}
	where := r.Node
	if r.Computed.Zone != "" {
		where += " (zone " + r.Computed.Zone + ")"
	}
	p(0, "Service %s on node %s", r.Service, where)
	p(0, "")
	r.textDeclared(p)
	p(0, "")
	r.textPublished(p)
	p(0, "")
	r.textComputed(p)
	p(0, "")
	r.textProgrammed(p)
	p(0, "")
	p(0, "findings:")
	if len(r.Findings) == 0 {
		p(1, "none")
	}
	for _, f := range r.Findings {
		p(1, "[%d %s] %s: %s", f.Layer, layerNames[f.Layer], f.Severity, f.Message)
	}
	p(0, "")
	if f := r.FirstMismatch; f != nil {
		p(0, "FIRST MISMATCH (layer %d, %s): %s", f.Layer, layerNames[f.Layer], f.Message)
	} else {
		p(0, "OK: all four layers agree")
	}
	if err := b.Flush(); err != nil {
		return fmt.Errorf("write explain report: %w", err)
	}
	return nil
}

type printer func(indent int, format string, args ...any)

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func listOrDash(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ", ")
}

func (r *Report) textDeclared(p printer) {
	d := &r.Declared
	p(0, "1. declared")
	if !d.Found {
		p(1, "not found")
		return
	}
	fams := listOrDash(d.IPFamilies)
	if d.IPFamilyPolicy != "" {
		fams += " (" + d.IPFamilyPolicy + ")"
	}
	p(1, "type %s, families %s, cluster IPs %s", d.Type, fams, listOrDash(d.ClusterIPs))
	if len(d.ExternalIPs) > 0 || len(d.LoadBalancerIPs) > 0 {
		p(1, "external IPs %s, load-balancer IPs %s", listOrDash(d.ExternalIPs), listOrDash(d.LoadBalancerIPs))
	}
	if len(d.Ports) == 0 {
		p(1, "no ports")
	}
	for _, sp := range d.Ports {
		line := fmt.Sprintf("port %q %d/%s -> targetPort %s", sp.Name, sp.Port, sp.Protocol, sp.TargetPort)
		if sp.NodePort != 0 {
			line += fmt.Sprintf(", nodePort %d", sp.NodePort)
		}
		p(1, "%s", line)
	}
	policies := fmt.Sprintf("internalTrafficPolicy %s", orDash(d.InternalTrafficPolicy))
	if d.ExternalTrafficPolicy != "" {
		policies += ", externalTrafficPolicy " + d.ExternalTrafficPolicy
	}
	p(1, "%s, trafficDistribution %s", policies, orDash(d.TrafficDistribution))
	aff := orDash(d.SessionAffinity)
	if d.AffinityTimeoutSeconds > 0 {
		aff += fmt.Sprintf(" (timeout %ds)", d.AffinityTimeoutSeconds)
	}
	p(1, "sessionAffinity %s", aff)
	if d.HealthCheckNodePort != 0 {
		p(1, "healthCheckNodePort %d", d.HealthCheckNodePort)
	}
	if d.Selector == nil {
		p(1, "selector: none")
	} else {
		p(1, "selector %s", selectorString(d.Selector))
	}
	if d.PublishNotReadyAddresses {
		p(1, "publishNotReadyAddresses: true")
	}
	if d.Ignored != "" {
		p(1, "not proxied: %s", d.Ignored)
	}
	for _, pr := range d.Problems {
		p(1, "problem: %s", pr)
	}
}

func (r *Report) textPublished(p printer) {
	pub := &r.Published
	p(0, "2. published: %s", plural(len(pub.Slices), "EndpointSlice"))
	for _, s := range pub.Slices {
		ports := make([]string, 0, len(s.Ports))
		for _, q := range s.Ports {
			port := "unset"
			if q.Port != 0 {
				port = fmt.Sprint(q.Port)
			}
			ports = append(ports, fmt.Sprintf("%q %s/%s", q.Name, port, q.Protocol))
		}
		p(1, "slice %s (%s), ports %s", s.Name, s.AddressType, listOrDash(ports))
		if s.Ignored != "" {
			p(2, "ignored: %s", s.Ignored)
		}
		if len(s.Endpoints) == 0 {
			p(2, "no endpoints")
		}
		for _, e := range s.Endpoints {
			var cond []string
			for _, c := range []struct {
				on   bool
				name string
			}{{e.Ready, "ready"}, {e.Serving, "serving"}, {e.Terminating, "terminating"}} {
				if c.on {
					cond = append(cond, c.name)
				} else if c.name != "terminating" {
					cond = append(cond, "not-"+c.name)
				}
			}
			line := fmt.Sprintf("%s  %s  node %s  zone %s", listOrDash(e.Addresses), strings.Join(cond, ","), orDash(e.Node), orDash(e.Zone))
			if len(e.HintZones) > 0 || len(e.HintNodes) > 0 {
				line += fmt.Sprintf("  hints zones=%s nodes=%s", listOrDash(e.HintZones), listOrDash(e.HintNodes))
			}
			p(2, "%s", line)
		}
	}
	for _, pr := range pub.Problems {
		p(1, "problem: %s", pr)
	}
}

func (r *Report) textComputed(p printer) {
	c := &r.Computed
	if !c.Available {
		p(0, "3. computed: unavailable (%s)", c.Unavailable)
		return
	}
	p(0, "3. computed for node %s (families %s)", orDash(c.Node), listOrDash(c.Families))
	if c.Source != "" {
		p(1, "source: %s", c.Source)
	}
	if len(c.Ports) == 0 {
		p(1, "no ports")
	}
	for _, cp := range c.Ports {
		name := cp.Name
		if name == "" {
			name = `""`
		}
		line := fmt.Sprintf("port %s/%s %s: internal %s, external %s", name, cp.Protocol, cp.Family, cp.InternalTrafficPolicy, cp.ExternalTrafficPolicy)
		if cp.Affinity != "" {
			line += ", affinity " + cp.Affinity
		}
		if cp.TopologyMode != "" {
			line += ", topology " + cp.TopologyMode
		}
		p(1, "%s", line)
		if cp.TopologyNote != "" {
			p(2, "topology: %s", cp.TopologyNote)
		}
		for _, f := range cp.Frontends {
			p(2, "%s %s/%s -> %s", f.Kind, f.Address, f.Protocol, endpointsOrVerdict(f.Set, f.Endpoints, f.Verdict))
		}
		for _, e := range cp.Excluded {
			addr := e.Address
			if e.Port != 0 {
				addr = fmt.Sprintf("%s port %d", addr, e.Port)
			}
			set := e.Set + " set"
			if e.Set == "all" {
				set = "every set"
			}
			p(2, "left out of %s: %s (slice %s): %s: %s", set, orDash(addr), e.Slice, e.Reason, e.Detail)
		}
	}
}

func endpointsOrVerdict(set string, eps []string, verdict string) string {
	prefix := ""
	if set != "" {
		prefix = set + " set "
	}
	if len(eps) == 0 {
		return prefix + "empty: " + orDash(verdict)
	}
	return prefix + strings.Join(eps, ", ")
}

func (r *Report) textProgrammed(p printer) {
	pr := &r.Programmed
	if !pr.Available {
		p(0, "4. programmed: unavailable (%s)", pr.Unavailable)
		return
	}
	p(0, "4. programmed in %s", orDash(pr.Backend))
	if len(pr.Frontends) == 0 {
		p(1, "no frontends")
	}
	for _, f := range pr.Frontends {
		p(1, "%s %s/%s -> %s", orDash(f.Kind), f.Address, f.Protocol, endpointsOrVerdict("", f.Endpoints, f.Verdict))
	}
	for _, c := range pr.Connections {
		p(1, "connection %s %s -> %s -> %s %s", c.Protocol, c.Client, c.Frontend, c.Endpoint, c.State)
	}
	for _, n := range pr.Notes {
		p(1, "note: %s", n)
	}
}
