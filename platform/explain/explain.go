package explain

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/crossproxy/crossproxy/core"
)

// Build assembles the four layers of in.Service and walks them in order:
// declared problems, then what the slices publish, then what the core computed
// for this node, then what the data plane holds compared with it. Every
// finding is kept; the first of severity mismatch becomes FirstMismatch.
func Build(in Input) *Report {
	r := &Report{
		Service:    in.Service.String(),
		Node:       in.NodeName,
		Declared:   declared(&in),
		Published:  published(&in),
		Computed:   computed(&in),
		Programmed: programmed(&in),
		Findings:   []Finding{},
	}
	if r.Node == "" && in.State != nil {
		r.Node = in.State.Node.Name
	}
	a := &analysis{in: &in, r: r, ports: servicePorts(&in)}
	a.declaredLayer()
	a.publishedLayer()
	a.computedLayer()
	a.programmedLayer()
	for i := range r.Findings {
		if r.Findings[i].Severity == SeverityMismatch {
			f := r.Findings[i]
			r.FirstMismatch = &f
			break
		}
	}
	return r
}

// analysis carries what one layer learns to the next.
type analysis struct {
	in    *Input
	r     *Report
	ports []*core.ServicePort
	// ignored is set when crossproxy deliberately does not proxy the Service.
	ignored bool
}

func (a *analysis) add(layer int, sev Severity, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	for _, f := range a.r.Findings {
		if f.Layer == layer && f.Message == msg {
			return // the same words from another port or family add nothing
		}
	}
	a.r.Findings = append(a.r.Findings, Finding{Layer: layer, Severity: sev, Message: msg})
}

// problems returns the core's problems of kind affecting the Service.
func (a *analysis) problems(kind string) []string {
	if a.in.State == nil {
		return nil
	}
	var out []string
	for _, p := range a.in.State.Problems {
		if p.Kind == kind && (p.Service == a.in.Service || (kind == "Service" && p.Object == a.in.Service.String())) {
			out = append(out, fmt.Sprintf("%s %s: %s: %s", p.Kind, p.Object, p.Field, p.Reason))
		}
	}
	return out
}

// ignoreReason is why crossproxy skips the Service on purpose, or "".
func (a *analysis) ignoreReason() string {
	if a.in.State != nil {
		for _, o := range a.in.State.Ignored {
			if o.Kind == "Service" && o.Object == a.in.Service.String() {
				return o.Reason
			}
		}
		return ""
	}
	// Without a computed state, the core still says which Services no
	// options could make it proxy.
	if svc := a.in.Object; svc != nil {
		return core.NotProxied(svc)
	}
	return ""
}

func (a *analysis) declaredLayer() {
	d := &a.r.Declared
	svc := a.in.Object
	if svc == nil {
		a.add(LayerDeclared, SeverityMismatch, "Service %s does not exist", a.in.Service)
		return
	}
	if why := a.ignoreReason(); why != "" {
		d.Ignored = why
		a.ignored = true
		a.add(LayerDeclared, SeverityNote, "crossproxy does not proxy this Service: %s", why)
		return
	}
	d.Problems = a.problems("Service")
	for _, p := range d.Problems {
		a.add(LayerDeclared, SeverityMismatch, "%s", p)
	}
	if len(svc.Spec.Ports) == 0 {
		a.add(LayerDeclared, SeverityMismatch, "the Service declares no ports")
	}
	if st := a.in.State; st != nil && len(st.Families) > 0 {
		fams := core.ServiceFamilies(svc)
		if len(fams) > 0 && !slices.ContainsFunc(fams, func(f v1.IPFamily) bool { return slices.Contains(st.Families, f) }) {
			a.add(LayerDeclared, SeverityMismatch, "the Service has only %s cluster IPs but this node runs %s",
				joinFamilies(fams), joinFamilies(st.Families))
		}
	}
	if svc.Spec.Selector == nil {
		a.add(LayerDeclared, SeverityNote, "no selector: its EndpointSlices are written by hand or by another controller, not derived from pods")
	}
}

func joinFamilies(fams []v1.IPFamily) string {
	s := make([]string, 0, len(fams))
	for _, f := range fams {
		s = append(s, string(f))
	}
	return strings.Join(s, " and ")
}

// served reports whether the core reads the slice's endpoints on this node
// (the core's decision: address type, the Service's cluster IP families, the
// node's families, the headless label).
func (a *analysis) served(s *discovery.EndpointSlice) bool {
	var fams []v1.IPFamily
	if st := a.in.State; st != nil {
		fams = st.Families
	}
	return core.SliceUnused(a.in.Object, s, fams) == ""
}

// servedSlices are the Service's slices this node proxies, sorted by name.
func (a *analysis) servedSlices() []*discovery.EndpointSlice {
	var out []*discovery.EndpointSlice
	for _, s := range a.in.Slices {
		if a.served(s) {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (a *analysis) publishedLayer() {
	if a.ignored {
		return
	}
	p := &a.r.Published
	p.Problems = a.problems("EndpointSlice")
	svc := a.in.Object
	if len(a.in.Slices) == 0 {
		msg := fmt.Sprintf("no EndpointSlice is labelled %s=%s", discovery.LabelServiceName, a.in.Service.Name)
		if svc != nil && len(svc.Spec.Selector) > 0 {
			msg += fmt.Sprintf(" (does selector %s match any pod?)", selectorString(svc.Spec.Selector))
		}
		a.add(LayerPublished, SeverityMismatch, "%s", msg)
		return
	}
	served := a.servedSlices()
	if len(served) == 0 {
		var found []string
		for _, s := range a.in.Slices {
			what := string(s.AddressType)
			if why := sliceIgnored(a.in, s); why != "" {
				what += ", ignored: " + why
			}
			found = append(found, fmt.Sprintf("%s (%s)", s.Name, what))
		}
		sort.Strings(found)
		a.add(LayerPublished, SeverityMismatch, "none of the Service's EndpointSlices is proxied on this node (found: %s)",
			strings.Join(found, "; "))
		return
	}
	for _, msg := range p.Problems {
		a.add(LayerPublished, SeverityMismatch, "%s", msg)
	}
	total := 0
	var names []string
	for _, s := range served {
		total += len(s.Endpoints)
		names = append(names, s.Name)
	}
	if total == 0 {
		a.add(LayerPublished, SeverityMismatch, "EndpointSlice %s holds no endpoints", strings.Join(names, ", "))
		return
	}
	if svc != nil {
		a.portMatches(svc, served)
	}
	ready, servingTerminating := 0, 0
	for _, s := range served {
		for _, ep := range s.Endpoints {
			switch isReady, serving, terminating := core.EndpointConditions(ep.Conditions); {
			case isReady:
				ready++
			case serving && terminating:
				servingTerminating++
			}
		}
	}
	switch {
	case ready > 0:
	case servingTerminating > 0:
		a.add(LayerPublished, SeverityNote, "no endpoint is ready: %s serving but terminating take the traffic",
			plural(servingTerminating, "endpoint"))
	default:
		a.add(LayerPublished, SeverityMismatch, "none of the %s is ready", plural(total, "endpoint"))
	}
}

// portMatches checks every Service port against the ports of every slice with
// endpoints: the EndpointSlice controller names a slice port after the Service
// port, so a port missing by name means the slice cannot serve that port.
func (a *analysis) portMatches(svc *v1.Service, served []*discovery.EndpointSlice) {
	for _, sp := range svc.Spec.Ports {
		proto := core.ProtocolOrTCP(sp.Protocol)
		tp := targetPort(sp)
		for _, s := range served {
			if len(s.Endpoints) == 0 {
				continue
			}
			match := core.SlicePortFor(s, sp)
			switch {
			case match == nil:
				a.add(LayerPublished, SeverityMismatch, "targetPort %s matches no port in slice %s (Service port %q/%s; slice ports: %s)",
					tp, s.Name, sp.Name, proto, slicePorts(s))
			case match.Port != nil && sp.TargetPort.Type == 0 && sp.TargetPort.IntVal != 0 && *match.Port != sp.TargetPort.IntVal:
				a.add(LayerPublished, SeverityMismatch, "targetPort %s of Service port %q/%s, but slice %s publishes port %d for it",
					tp, sp.Name, proto, s.Name, *match.Port)
			}
		}
	}
}

func slicePorts(s *discovery.EndpointSlice) string {
	if len(s.Ports) == 0 {
		return "none"
	}
	var out []string
	for _, q := range s.Ports {
		proto := core.SlicePortProtocol(q)
		port := "unset"
		if q.Port != nil {
			port = fmt.Sprint(*q.Port)
		}
		out = append(out, fmt.Sprintf("%q %s/%s", ptrString(q.Name), port, proto))
	}
	return strings.Join(out, ", ")
}

func ptrString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func selectorString(sel map[string]string) string {
	keys := slices.Sorted(maps.Keys(sel))
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+sel[k])
	}
	return strings.Join(parts, ",")
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func (a *analysis) computedLayer() {
	if a.ignored {
		return
	}
	st := a.in.State
	if st == nil {
		a.add(LayerComputed, SeverityNote, "layer 3 not computed: %s", a.r.Computed.Unavailable)
		return
	}
	svc := a.in.Object
	if len(a.ports) == 0 {
		if svc != nil && len(svc.Spec.Ports) > 0 {
			a.add(LayerComputed, SeverityMismatch, "crossproxy computed no port of this Service for node %s", a.r.Computed.Node)
		}
		return
	}
	for _, sp := range a.ports {
		a.verdicts(sp)
	}
	for _, sp := range a.ports {
		a.topology(sp)
	}
}

// portName is how a port is named in findings: "http/TCP IPv4".
func portName(sp *core.ServicePort) string {
	name := sp.Key.PortName
	if name == "" {
		name = fmt.Sprint(sp.Port)
	}
	return fmt.Sprintf("port %s/%s %s", name, sp.Protocol, sp.Key.Family)
}

// verdicts explains empty endpoint sets: no endpoint at all rejects (a broken
// Service), none on this node under a Local policy drops (intended).
func (a *analysis) verdicts(sp *core.ServicePort) {
	node := a.r.Computed.Node
	cip := netip.AddrPortFrom(sp.ClusterIP, sp.Port)
	rejected := false
	if len(sp.InternalEndpoints()) == 0 {
		switch sp.InternalEmpty {
		case core.VerdictReject:
			rejected = true
			a.add(LayerComputed, SeverityMismatch, "%s has no usable endpoint: connections to %s are rejected", portName(sp), cip)
		case core.VerdictDrop:
			a.add(LayerComputed, SeverityNote, "%s: internalTrafficPolicy Local and no endpoint on node %s: connections from this node to %s are dropped",
				portName(sp), node, cip)
		}
	}
	var ext []string
	for _, f := range sp.Frontends {
		if f.Kind.External() {
			ext = append(ext, fmt.Sprintf("%s %s", f.Kind, netip.AddrPortFrom(f.Addr, f.Port)))
		}
	}
	if len(ext) == 0 || len(sp.ExternalEndpoints()) > 0 {
		return
	}
	switch sp.ExternalEmpty {
	case core.VerdictReject:
		if !rejected {
			a.add(LayerComputed, SeverityMismatch, "%s has no usable endpoint for external traffic: connections to %s are rejected",
				portName(sp), strings.Join(ext, ", "))
		}
	case core.VerdictDrop:
		a.add(LayerComputed, SeverityNote, "%s: externalTrafficPolicy Local and no endpoint on node %s: external connections to %s are dropped",
			portName(sp), node, strings.Join(ext, ", "))
	}
}

// topology explains a trafficDistribution or hints that did not narrow the
// cluster set, in the core's words (HintsUnused, TopologyNote).
func (a *analysis) topology(sp *core.ServicePort) {
	if sp.TopologyMode != "" {
		return
	}
	if slices.Contains(sp.HintsUnused, core.HintsZoneNotHere) {
		a.add(LayerComputed, SeverityMismatch, "no ready endpoint in zone %s: using all zones", a.r.Computed.Zone)
		return
	}
	if sp.TopologyNote != "" {
		a.add(LayerComputed, SeverityMismatch, "%s: %s", portName(sp), sp.TopologyNote)
		return
	}
	// The core found no hint on the ready endpoints (HintsUnused is empty).
	td := a.r.Declared.TrafficDistribution
	if td != "" && len(sp.ClusterEndpoints) > 0 {
		a.add(LayerComputed, SeverityNote, "trafficDistribution %s is set but no endpoint carries hints: all zones are used", td)
	}
}
