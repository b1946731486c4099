package core

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// parsedSlice is one EndpointSlice after validation, reused by every port of its Service.
type parsedSlice struct {
	name  string
	ports []slicePort
	eps   []candidate
}

type slicePort struct {
	name     string
	protocol v1.Protocol
	port     uint16
}

// candidate is one endpoint of a slice, valid or not. It points into the
// slice instead of copying names and hints, to keep the full computation lean.
type candidate struct {
	src   *discovery.Endpoint
	slice string
	place *EndpointPlace // set when valid
	addr  netip.Addr
	// valid is false for an unusable endpoint; bad then says why.
	valid                              bool
	ready, serving, terminating, local bool
	bad                                *Exclusion
}

// raw is the address as written in the slice.
func (c *candidate) raw() string {
	if len(c.src.Addresses) == 0 {
		return ""
	}
	return c.src.Addresses[0]
}

func (c *candidate) nodeName() string { return deref(c.src.NodeName) }

func (c *candidate) servingTerminating() bool { return c.serving && c.terminating }

func (c *candidate) endpoint(port uint16) Endpoint {
	return Endpoint{Addr: c.addr, Port: port, Ready: c.ready, Serving: c.serving, Terminating: c.terminating, Local: c.local, Slice: c.slice, Place: c.place}
}

// zoneHints and nodeHints list the endpoint's topology hints.
func (c *candidate) zoneHints() []string {
	if c.src.Hints == nil {
		return nil
	}
	out := make([]string, 0, len(c.src.Hints.ForZones))
	for _, z := range c.src.Hints.ForZones {
		out = append(out, z.Name)
	}
	return out
}

func (c *candidate) nodeHints() []string {
	if c.src.Hints == nil {
		return nil
	}
	out := make([]string, 0, len(c.src.Hints.ForNodes))
	for _, n := range c.src.Hints.ForNodes {
		out = append(out, n.Name)
	}
	return out
}

// hints reports how many zone and node hints the endpoint has and whether one
// names zone or node.
func (c *candidate) hints(zone, node string) (zones, nodes int, forZone, forNode bool) {
	h := c.src.Hints
	if h == nil {
		return 0, 0, false, false
	}
	for _, z := range h.ForZones {
		forZone = forZone || z.Name == zone
	}
	for _, n := range h.ForNodes {
		forNode = forNode || n.Name == node
	}
	return len(h.ForZones), len(h.ForNodes), forZone, forNode
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// parseSlices validates a Service's slices once and splits them by family.
// Slices of a family the node does not run, or that the Service has no
// ClusterIP for, and FQDN slices are left out without a problem: they are
// legitimate, just not ours to proxy.
func parseSlices(e *env, info *svcInfo, list []*discovery.EndpointSlice, probs *[]Problem) [2][]*parsedSlice {
	var out [2][]*parsedSlice
	for _, s := range list {
		sink := problemSink{kind: "EndpointSlice", namespace: s.Namespace, name: s.Name, svc: info.nsn, list: probs}
		fam, why, bad := sliceSkip(s.AddressType, info.hasClusterIP, e.runs)
		if bad {
			sink.add("addressType", "%s; slice skipped", why)
		}
		if why != "" {
			continue
		}
		out[famIndex(fam)] = append(out[famIndex(fam)], parseSlice(e, info, s, fam, sink))
	}
	return out
}

func parseSlice(e *env, info *svcInfo, s *discovery.EndpointSlice, fam v1.IPFamily, sink problemSink) *parsedSlice {
	ps := &parsedSlice{name: s.Name}
	for j, p := range s.Ports {
		sp := slicePort{name: deref(p.Name), protocol: SlicePortProtocol(p)}
		switch sp.protocol {
		case v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP:
		default:
			sink.add(fmt.Sprintf("ports[%d].protocol", j), "%q is not TCP, UDP or SCTP; port skipped", sp.protocol)
			continue
		}
		if p.Port == nil {
			sink.add(fmt.Sprintf("ports[%d].port", j), "missing; port skipped")
			continue
		}
		if *p.Port < 1 || *p.Port > 65535 {
			sink.add(fmt.Sprintf("ports[%d].port", j), "%d is out of range 1-65535; port skipped", *p.Port)
			continue
		}
		sp.port = uint16(*p.Port)
		if slices.ContainsFunc(ps.ports, func(o slicePort) bool { return o.name == sp.name && o.protocol == sp.protocol }) {
			sink.add(fmt.Sprintf("ports[%d].name", j), "port name %q with protocol %s appears twice; the first is used", sp.name, sp.protocol)
			continue
		}
		ps.ports = append(ps.ports, sp)
	}
	ps.eps = make([]candidate, 0, len(s.Endpoints))
	for i := range s.Endpoints {
		c := parseEndpoint(e, info, s, i, fam, sink)
		if c.valid {
			c.place = e.place(deref(c.src.NodeName), deref(c.src.Zone))
		}
		ps.eps = append(ps.eps, c)
	}
	return ps
}

func parseEndpoint(e *env, info *svcInfo, s *discovery.EndpointSlice, i int, fam v1.IPFamily, sink problemSink) candidate {
	ep := &s.Endpoints[i]
	c := candidate{src: ep, slice: s.Name}
	if len(ep.Addresses) == 0 {
		sink.add(fmt.Sprintf("endpoints[%d].addresses", i), "empty; endpoint skipped")
		c.bad = &Exclusion{Reason: ExcludedInvalid, Detail: fmt.Sprintf("endpoints[%d] in slice %s has no address", i, s.Name)}
		return c
	}
	raw := ep.Addresses[0]
	a, err := netip.ParseAddr(raw)
	if err != nil {
		a, err = netip.ParseAddr(strings.TrimSpace(raw))
	}
	field := func() string { return fmt.Sprintf("endpoints[%d].addresses[0]", i) }
	switch {
	case err != nil || a.Zone() != "" || a.Unmap().IsUnspecified():
		sink.add(field(), "%q is not a usable IP address; endpoint skipped", raw)
		c.bad = &Exclusion{Reason: ExcludedInvalid, Detail: fmt.Sprintf("%q in slice %s is not a usable IP address", raw, s.Name)}
		return c
	case familyOf(a) != fam:
		sink.add(field(), "%s is not an %s address but the slice's addressType is %s; endpoint skipped", raw, fam, s.AddressType)
		c.bad = &Exclusion{Reason: ExcludedWrongFamily, Detail: fmt.Sprintf("%s is not %s, the addressType of slice %s", raw, fam, s.Name)}
		return c
	}
	c.valid = true
	c.addr = a.Unmap()
	// publishNotReadyAddresses is not read here: the EndpointSlice
	// controller already publishes such a Service's endpoints as ready, and
	// kube-proxy, like crossproxy, trusts what the slice says.
	c.ready, c.serving, c.terminating = EndpointConditions(ep.Conditions)
	c.local = ep.NodeName != nil && *ep.NodeName != "" && *ep.NodeName == e.node.Name
	return c
}

// pick is one candidate offered to one Service port, with the slice's port number.
type pick struct {
	c    *candidate
	port uint16
}

// chooseEndpoints fills the endpoint sets, verdicts, topology and exclusions of sp.
func chooseEndpoints(e *env, info *svcInfo, sp *ServicePort, p svcPort, parsed []*parsedSlice) {
	picks, excl := offer(p, parsed)
	anyReady, hasAny := false, false
	for _, k := range picks {
		anyReady = anyReady || k.c.ready
		hasAny = hasAny || k.c.ready || k.c.servingTerminating()
	}
	// Per pick, why it is outside the cluster and the local set (nil: used
	// or set not built); nil slices while no pick is left out.
	var clusterWhy, localWhy []*Exclusion
	if !info.itpLocal || info.external {
		clusterWhy = clusterSet(e, sp, picks, anyReady)
	}
	if info.itpLocal || info.etpLocal {
		localWhy = localSet(e, sp, picks)
	}
	excl = appendSetExclusions(excl, picks, clusterWhy, localWhy)

	sp.InternalEmpty = emptyVerdict(len(sp.InternalEndpoints()), hasAny)
	if info.external {
		sp.ExternalEmpty = emptyVerdict(len(sp.ExternalEndpoints()), hasAny)
	}
	if len(excl) > 0 {
		sortExclusions(excl)
		sp.Excluded = excl
	}
}

// offer lists the candidates of every slice that can serve port p, one per
// destination, sorted by address and port; excl says why the others cannot
// (invalid, no matching slice port, a duplicate of a better copy).
func offer(p svcPort, parsed []*parsedSlice) (picks []pick, excl []Exclusion) {
	n := 0
	for _, ps := range parsed {
		n += len(ps.eps)
	}
	picks = make([]pick, 0, n)
	for _, ps := range parsed {
		port := uint16(0)
		for _, q := range ps.ports {
			if q.name == p.name && q.protocol == p.protocol {
				port = q.port
				break
			}
		}
		for i := range ps.eps {
			c := &ps.eps[i]
			switch {
			case !c.valid:
				excl = append(excl, Exclusion{Addr: c.raw(), Port: port, Slice: ps.name, Set: SetAll, Reason: c.bad.Reason, Detail: c.bad.Detail})
			case port == 0:
				excl = append(excl, Exclusion{Addr: c.raw(), Slice: ps.name, Set: SetAll, Reason: ExcludedNoMatchingPort,
					Detail: noPortDetail(p, ps)})
			default:
				picks = append(picks, pick{c: c, port: port})
			}
		}
	}
	// Sort by destination; among copies of one destination the best comes
	// first (not terminating, then ready), then the earliest slice.
	slices.SortStableFunc(picks, func(a, b pick) int {
		return cmp.Or(
			a.c.addr.Compare(b.c.addr),
			cmp.Compare(a.port, b.port),
			boolFirst(!a.c.terminating, !b.c.terminating),
			boolFirst(a.c.ready, b.c.ready),
		)
	})
	kept := picks[:0]
	for _, k := range picks {
		if len(kept) > 0 {
			last := kept[len(kept)-1]
			if last.port == k.port && last.c.addr == k.c.addr {
				excl = append(excl, Exclusion{Addr: k.c.raw(), Port: k.port, Slice: k.c.slice, Set: SetAll, Reason: ExcludedDuplicate,
					Detail: fmt.Sprintf("%s is also in slice %s, whose copy is used (non-terminating, then ready copies win)",
						netip.AddrPortFrom(k.c.addr, k.port), last.c.slice)})
				continue
			}
		}
		kept = append(kept, k)
	}
	return kept, excl
}

// clusterSet fills sp.ClusterEndpoints (and the topology fields): ready
// endpoints narrowed by hints, or serving-terminating ones when none is
// ready. It returns, per pick, why the pick is not in the set.
func clusterSet(e *env, sp *ServicePort, picks []pick, anyReady bool) (why []*Exclusion) {
	mode, unused := topologyMode(picks, e.node.Name, e.node.Zone)
	sp.TopologyMode, sp.HintsUnused, sp.TopologyNote = mode, unused, hintsNote(unused, e.node.Name, e.node.Zone)
	sp.ClusterEndpoints = make([]Endpoint, 0, len(picks))
	for i, k := range picks {
		var x *Exclusion
		switch {
		case anyReady && !k.c.ready:
			x = unusedReason(k.c, true, "ready endpoints exist")
		case anyReady:
			x = topologyReason(k.c, mode, e.node)
		case !k.c.servingTerminating():
			x = unusedReason(k.c, false, "")
		}
		if x == nil {
			sp.ClusterEndpoints = append(sp.ClusterEndpoints, k.c.endpoint(k.port))
			continue
		}
		x.Set = SetCluster
		why = noteAt(why, len(picks), i, x)
	}
	if len(sp.ClusterEndpoints) == 0 {
		sp.ClusterEndpoints = nil
	}
	return why
}

// localSet fills sp.LocalEndpoints: this node's ready endpoints, or its
// serving-terminating ones when none of them is ready. It returns, per pick,
// why the pick is not in the set.
func localSet(e *env, sp *ServicePort, picks []pick) (why []*Exclusion) {
	localReady := false
	for _, k := range picks {
		localReady = localReady || (k.c.local && k.c.ready)
	}
	for i, k := range picks {
		var x *Exclusion
		switch {
		case !k.c.local:
			x = &Exclusion{Reason: ExcludedOtherNode, Detail: otherNodeDetail(k.c.nodeName(), e.node.Name)}
		case localReady && !k.c.ready:
			x = unusedReason(k.c, true, "ready local endpoints exist")
		case !localReady && !k.c.servingTerminating():
			x = unusedReason(k.c, false, "")
		}
		if x == nil {
			sp.LocalEndpoints = append(sp.LocalEndpoints, k.c.endpoint(k.port))
			continue
		}
		x.Set = SetLocal
		why = noteAt(why, len(picks), i, x)
	}
	return why
}

// noteAt sets why[i] = x, making why (of length n) on first use, so a port
// whose every pick is used allocates nothing.
func noteAt(why []*Exclusion, n, i int, x *Exclusion) []*Exclusion {
	if why == nil {
		why = make([]*Exclusion, n)
	}
	why[i] = x
	return why
}

// appendSetExclusions adds the per-set exclusions to excl, with the pick's
// address, port and slice; a pick left out of both sets for the same reason
// is listed once, for all sets.
func appendSetExclusions(excl []Exclusion, picks []pick, clusterWhy, localWhy []*Exclusion) []Exclusion {
	if clusterWhy == nil && localWhy == nil {
		return excl
	}
	for i := range picks {
		var cw, lw *Exclusion
		if clusterWhy != nil {
			cw = clusterWhy[i]
		}
		if localWhy != nil {
			lw = localWhy[i]
		}
		if cw != nil && lw != nil && cw.Reason == lw.Reason && cw.Detail == lw.Detail {
			cw.Set, lw = SetAll, nil
		}
		for _, w := range []*Exclusion{cw, lw} {
			if w != nil {
				w.Addr, w.Port, w.Slice = picks[i].c.raw(), picks[i].port, picks[i].c.slice
				excl = append(excl, *w)
			}
		}
	}
	return excl
}

// emptyVerdict: no usable endpoint anywhere rejects; usable endpoints that a
// Local policy cannot use from this node drop, as kube-proxy does.
func emptyVerdict(n int, hasAny bool) Verdict {
	switch {
	case n > 0:
		return VerdictNone
	case hasAny:
		return VerdictDrop
	default:
		return VerdictReject
	}
}

// boolFirst orders true before false.
func boolFirst(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	default:
		return 1
	}
}

func noPortDetail(p svcPort, ps *parsedSlice) string {
	have := make([]string, 0, len(ps.ports))
	for _, q := range ps.ports {
		have = append(have, fmt.Sprintf("%q/%s", q.name, q.protocol))
	}
	list := "none"
	if len(have) > 0 {
		list = strings.Join(have, ", ")
	}
	return fmt.Sprintf("service port %q/%s (targetPort %s) matches no port in slice %s (slice ports: %s)", p.name, p.protocol, p.targetPort.String(), ps.name, list)
}

func otherNodeDetail(epNode, node string) string {
	if epNode == "" {
		return fmt.Sprintf("has no nodeName, so it is not on this node %q", node)
	}
	return fmt.Sprintf("runs on node %q, not on this node %q", epNode, node)
}

// unusedReason explains why a candidate is outside a set: in ready mode the
// set holds ready endpoints; otherwise it holds serving-terminating ones.
func unusedReason(c *candidate, readyMode bool, because string) *Exclusion {
	switch {
	case readyMode && c.servingTerminating():
		return &Exclusion{Reason: ExcludedTerminating, Detail: "serving but terminating; not used while " + because}
	case c.terminating:
		return &Exclusion{Reason: ExcludedTerminating, Detail: "terminating and not serving"}
	case readyMode:
		return &Exclusion{Reason: ExcludedNotReady, Detail: "not ready"}
	default:
		return &Exclusion{Reason: ExcludedNotReady, Detail: "not ready and not terminating (with no ready endpoint only serving-terminating ones are used)"}
	}
}

// topologyReason says why a ready endpoint is filtered out by hints, or nil.
func topologyReason(c *candidate, mode string, node NodeInfo) *Exclusion {
	_, _, forZone, forNode := c.hints(node.Zone, node.Name)
	switch {
	case mode == v1.ServiceTrafficDistributionPreferSameNode && !forNode:
		return &Exclusion{Reason: ExcludedOtherNode, Detail: fmt.Sprintf("hint forNodes %v does not include this node %q", c.nodeHints(), node.Name)}
	case mode == v1.ServiceTrafficDistributionPreferSameZone && !forZone:
		return &Exclusion{Reason: ExcludedOtherZone, Detail: fmt.Sprintf("hint forZones %v does not include this node's zone %q", c.zoneHints(), node.Zone)}
	}
	return nil
}

// topologyMode decides, as kube-proxy does, whether hints narrow the cluster
// set: node hints when every ready endpoint has one and one names this node,
// else zone hints likewise, else none. unused says why hints that were
// present were not used.
func topologyMode(picks []pick, node, zone string) (mode string, unused []HintsUnused) {
	allNode, allZone := true, true
	forNode, forZone := false, false
	anyNodeHint, anyZoneHint, anyReady := false, false, false
	for _, k := range picks {
		c := k.c
		if !c.ready {
			continue
		}
		anyReady = true
		zones, nodes, fz, fn := c.hints(zone, node)
		if nodes == 0 {
			allNode = false
		} else {
			anyNodeHint = true
			forNode = forNode || fn
		}
		if zones == 0 {
			allZone = false
		} else {
			anyZoneHint = true
			forZone = forZone || (fz && zone != "")
		}
	}
	switch {
	case !anyReady:
		return "", nil
	case allNode && forNode:
		return v1.ServiceTrafficDistributionPreferSameNode, nil
	case allZone && forZone:
		return v1.ServiceTrafficDistributionPreferSameZone, nil
	}
	if anyNodeHint {
		if !allNode {
			unused = append(unused, HintsNodeIncomplete)
		} else {
			unused = append(unused, HintsNodeNotHere)
		}
	}
	if anyZoneHint {
		switch {
		case !allZone:
			unused = append(unused, HintsZoneIncomplete)
		case zone == "":
			unused = append(unused, HintsNodeWithoutZone)
		default:
			unused = append(unused, HintsZoneNotHere)
		}
	}
	return "", unused
}

// hintsNote says in words why hints were not used, for TopologyNote.
func hintsNote(unused []HintsUnused, node, zone string) string {
	if len(unused) == 0 {
		return ""
	}
	why := make([]string, 0, len(unused))
	for _, u := range unused {
		switch u {
		case HintsNodeIncomplete:
			why = append(why, "some ready endpoints have no forNodes hint")
		case HintsNodeNotHere:
			why = append(why, fmt.Sprintf("no forNodes hint names this node %q", node))
		case HintsZoneIncomplete:
			why = append(why, "some ready endpoints have no forZones hint")
		case HintsNodeWithoutZone:
			why = append(why, "this node has no "+v1.LabelTopologyZone+" label")
		case HintsZoneNotHere:
			why = append(why, fmt.Sprintf("no forZones hint names this node's zone %q", zone))
		}
	}
	return "hints ignored: " + strings.Join(why, "; ") + "; all endpoints are used"
}

// sortExclusions orders by address (numerically where it parses), port, slice, set.
func sortExclusions(list []Exclusion) {
	slices.SortFunc(list, func(a, b Exclusion) int {
		pa, ea := netip.ParseAddr(a.Addr)
		pb, eb := netip.ParseAddr(b.Addr)
		c := 0
		switch {
		case ea == nil && eb == nil:
			c = pa.Compare(pb)
		case ea == nil:
			c = -1
		case eb == nil:
			c = 1
		default:
			c = cmp.Compare(a.Addr, b.Addr)
		}
		return cmp.Or(c, cmp.Compare(a.Port, b.Port), cmp.Compare(a.Slice, b.Slice),
			cmp.Compare(a.Set, b.Set), cmp.Compare(a.Reason, b.Reason), cmp.Compare(a.Detail, b.Detail))
	})
}
