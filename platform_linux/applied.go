package nft

import (
	"net/netip"

	"github.com/crossproxy/crossproxy/core"
)

// applied is what the backend last programmed successfully: the input of the
// next partial sync's diff. Counts track how many ports use each shared
// cluster-ips and hairpin element.
//
// Of each port it keeps only what the objects were built from: the core's
// ServicePort (shared with the NodeState, which the core never modifies once
// handed out, so unchanged ports cost nothing here) and the local detection.
// A partial sync builds the old objects of the ports it changes again
// (objects), which buildPort does identically; keeping the objects instead
// cost about 17 MiB at 10,000 Services x 10 endpoints, mostly one DNAT rule
// per endpoint.
type applied struct {
	Table   string
	Shards  int
	Globals *globals
	Ports   map[core.PortKey]appliedPort
	// cfg is the configuration the ports were built with (Shards set).
	cfg        Config
	clusterIPs useCounts
	hairpin    useCounts
	// sizes are the sizes the main table's sets were declared with
	// (sizes.go), elems the number of elements each holds.
	sizes map[string]uint32
	elems map[string]int
}

// setSizes records the sizes and element counts of main, the main table
// the full sync that made a wrote.
func (a *applied) setSizes(main *tableContent) {
	a.sizes = sizedSets(main)
	a.elems = make(map[string]int, len(main.Counts))
	for n, c := range main.Counts {
		a.elems[n] = c
	}
}

// overflow names a set that the element changes delta would fill beyond
// its declared size ("" when none would): the kernel would refuse the
// batch, so it is sent as a full sync instead, which sizes the sets anew.
func (a *applied) overflow(delta map[string]int) string {
	for n, d := range delta {
		if size := a.sizes[n]; size > 0 && a.elems[n]+d > int(size) {
			return n
		}
	}
	return ""
}

// useCounts counts, per address, the ports whose objects use it. IPv4
// addresses are keyed by their 4 bytes, IPv6 ones by their 16, each with a
// 4-byte count: an IPv4 entry takes 8 bytes instead of netip.Addr's 24 and
// an int's 8, and at 10,000 Services x 10 endpoints the hairpin counts alone
// are 100,000 entries. The core's addresses have no zone and are never
// IPv4-mapped IPv6, so each address has one key.
type useCounts struct {
	v4 map[[4]byte]int32
	v6 map[[16]byte]int32
}

// newUseCounts sizes the IPv4 counts for n addresses.
func newUseCounts(n int) useCounts {
	return useCounts{v4: make(map[[4]byte]int32, n), v6: map[[16]byte]int32{}}
}

// get is the number of ports using a.
func (u useCounts) get(a netip.Addr) int {
	if a.Is4() {
		return int(u.v4[a.As4()])
	}
	return int(u.v6[a.As16()])
}

// add changes a's count by d, forgetting a when no port uses it.
func (u useCounts) add(a netip.Addr, d int) {
	if a.Is4() {
		addCount(u.v4, a.As4(), d)
	} else {
		addCount(u.v6, a.As16(), d)
	}
}

// len is the number of addresses counted.
func (u useCounts) len() int { return len(u.v4) + len(u.v6) }

func addCount[K comparable](m map[K]int32, k K, d int) {
	if n := m[k] + int32(d); n > 0 {
		m[k] = n
	} else {
		delete(m, k)
	}
}

// appliedPort is what one programmed port was built from.
type appliedPort struct {
	port *core.ServicePort
	det  *core.FamilyLocalDetect
	// slots are a shared-map port's slot orders (nil for other ports): the
	// one thing not derived from port, since a change keeps every slot it can.
	slots *portSlots
}

// newApplied records a fully programmed ruleset, built with cfg.
func newApplied(rs *ruleset, cfg Config) *applied {
	eps := 0
	for _, p := range rs.Ports {
		eps += len(p.Endpoints)
	}
	cfg.Shards = rs.Shards
	a := newAppliedSized(rs.Table, rs.Globals, cfg, len(rs.Ports), eps)
	for _, p := range rs.Ports {
		a.record(p)
	}
	a.setSizes(rs.tables()[0])
	return a
}

// newAppliedSized is an empty record for about ports ports and eps endpoint
// addresses, built with cfg (Shards set).
func newAppliedSized(table string, g *globals, cfg Config, ports, eps int) *applied {
	return &applied{Table: table, Shards: cfg.Shards, Globals: g, Ports: make(map[core.PortKey]appliedPort, ports), cfg: cfg,
		clusterIPs: newUseCounts(ports), hairpin: newUseCounts(eps)}
}

// record adds one programmed port.
func (a *applied) record(p *portObjects) {
	a.Ports[p.Key] = p.From
	a.count(p, 1)
}

// objects builds the programmed objects of port k again, nil when k is not
// programmed.
func (a *applied) objects(k core.PortKey) *portObjects {
	ap, ok := a.Ports[k]
	if !ok {
		return nil
	}
	return buildPort(ap.port, ap.det, a.cfg, ap.slots)
}

func (a *applied) count(p *portObjects, d int) {
	if p.ClusterIP.IsValid() {
		a.clusterIPs.add(p.ClusterIP, d)
	}
	for _, e := range p.Endpoints {
		a.hairpin.add(e, d)
	}
}
