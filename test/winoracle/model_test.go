package winoracle

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// LB is one HNS load balancer as either proxy programmed it, in a form both
// normalise to: addresses as strings, flags by their HNS names, endpoints by
// address (HNS ids differ between the two mocks).
type LB struct {
	// VIPs are the frontend VIPs, sorted; none means every host address.
	VIPs         []string
	Protocol     string
	ExternalPort uint16
	InternalPort uint16
	// LBFlags are the load balancer flags (DSR, IPv6).
	LBFlags []string
	// PortMappingFlags are the port mapping flags (ILB, LocalRoutedVIP,
	// UseMux, PreserveDIP, VipExternalIP).
	PortMappingFlags []string
	// Distribution is the port mapping's distribution type (None, SourceIP).
	Distribution string
	SourceVIP    string
	// Backends are the addresses of the HNS endpoints, sorted.
	Backends []string
}

// Key names a load balancer by its frontend, as HNS checks duplicates.
func (lb LB) Key() string {
	vips := "*"
	if len(lb.VIPs) > 0 {
		vips = strings.Join(lb.VIPs, ",")
	}
	if lb.ipv6() && len(lb.VIPs) == 0 {
		vips = "*v6"
	}
	return fmt.Sprintf("%s %s:%d", lb.Protocol, vips, lb.ExternalPort)
}

func (lb LB) ipv6() bool { return slices.Contains(lb.LBFlags, "IPv6") }

func (lb LB) String() string {
	return fmt.Sprintf("%s -> %v:%d lb=%s pm=%s dist=%s src=%s", lb.Key(), lb.Backends, lb.InternalPort,
		list(lb.LBFlags), list(lb.PortMappingFlags), lb.Distribution, orNone(lb.SourceVIP))
}

// Endpoint is an HNS endpoint the proxy created (remote endpoints, and on
// overlay winkernel's source-VIP endpoint); the CNI's local endpoints, which
// both mocks start with, are not listed.
type Endpoint struct {
	IP              string
	Remote          bool
	ProviderAddress string
	MAC             string
}

func (e Endpoint) String() string {
	kind := "local"
	if e.Remote {
		kind = "remote"
	}
	return fmt.Sprintf("%s %s pa=%s mac=%s", e.IP, kind, orNone(e.ProviderAddress), orNone(e.MAC))
}

// Programmed is what one proxy left in HNS after a sync.
type Programmed struct {
	LBs       []LB
	Endpoints []Endpoint
}

// Diff is one difference between winkernel and crossproxy.
type Diff struct {
	// Object is the load balancer's key (winkernel's when both have one) or
	// "endpoint <ip>".
	Object string
	// Field is "loadBalancer" or "endpoint" (present on one side only), or
	// the field that differs: frontendVIPs, protocol, internalPort, lbFlags,
	// portMappingFlags, distribution, sourceVIP, backends, remote,
	// providerAddress, mac.
	Field      string
	Winkernel  string
	Crossproxy string
}

func (d Diff) String() string {
	return fmt.Sprintf("%s %s: winkernel %s, crossproxy %s", d.Object, d.Field, d.Winkernel, d.Crossproxy)
}

// Compare lists the differences of got (crossproxy) from want (winkernel).
// Load balancers are paired by frontend; those left over are paired by
// protocol, external port and family when that is unambiguous (so a NodePort
// load balancer with other VIPs shows as a frontendVIPs difference, not as
// two unrelated load balancers).
func Compare(want, got Programmed) []Diff {
	var diffs []Diff
	wl, gl := byKey(want.LBs), byKey(got.LBs)
	var wLeft, gLeft []LB
	for _, k := range sortedKeys(wl) {
		if g, ok := gl[k]; ok {
			diffs = append(diffs, compareLB(k, wl[k], g)...)
			delete(gl, k)
		} else {
			wLeft = append(wLeft, wl[k])
		}
	}
	for _, k := range sortedKeys(gl) {
		gLeft = append(gLeft, gl[k])
	}
	port := func(lb LB) string { return fmt.Sprintf("%s/%d/%v", lb.Protocol, lb.ExternalPort, lb.ipv6()) }
	count := func(lbs []LB, p string) int {
		n := 0
		for _, lb := range lbs {
			if port(lb) == p {
				n++
			}
		}
		return n
	}
	var wRest []LB
	for _, w := range wLeft {
		p := port(w)
		if count(wLeft, p) != 1 || count(gLeft, p) != 1 {
			wRest = append(wRest, w)
			continue
		}
		i := slices.IndexFunc(gLeft, func(g LB) bool { return port(g) == p })
		diffs = append(diffs, compareLB(w.Key(), w, gLeft[i])...)
		gLeft = slices.Delete(gLeft, i, i+1)
	}
	for _, w := range wRest {
		diffs = append(diffs, Diff{w.Key(), "loadBalancer", w.String(), "none"})
	}
	for _, g := range gLeft {
		diffs = append(diffs, Diff{g.Key(), "loadBalancer", "none", g.String()})
	}

	we, ge := map[string]Endpoint{}, map[string]Endpoint{}
	for _, e := range want.Endpoints {
		we[e.IP] = e
	}
	for _, e := range got.Endpoints {
		ge[e.IP] = e
	}
	for _, ip := range sortedKeys(we) {
		w := we[ip]
		obj := "endpoint " + ip
		g, ok := ge[ip]
		if !ok {
			diffs = append(diffs, Diff{obj, "endpoint", w.String(), "none"})
			continue
		}
		delete(ge, ip)
		if w.Remote != g.Remote {
			diffs = append(diffs, Diff{obj, "remote", fmt.Sprint(w.Remote), fmt.Sprint(g.Remote)})
		}
		if w.ProviderAddress != g.ProviderAddress {
			diffs = append(diffs, Diff{obj, "providerAddress", orNone(w.ProviderAddress), orNone(g.ProviderAddress)})
		}
		if !strings.EqualFold(w.MAC, g.MAC) {
			diffs = append(diffs, Diff{obj, "mac", orNone(w.MAC), orNone(g.MAC)})
		}
	}
	for _, ip := range sortedKeys(ge) {
		diffs = append(diffs, Diff{"endpoint " + ip, "endpoint", "none", ge[ip].String()})
	}
	return diffs
}

func compareLB(obj string, w, g LB) []Diff {
	var d []Diff
	add := func(field, a, b string) {
		if a != b {
			d = append(d, Diff{obj, field, a, b})
		}
	}
	add("frontendVIPs", list(w.VIPs), list(g.VIPs))
	add("protocol", w.Protocol, g.Protocol)
	add("internalPort", fmt.Sprint(w.InternalPort), fmt.Sprint(g.InternalPort))
	add("lbFlags", list(w.LBFlags), list(g.LBFlags))
	add("portMappingFlags", list(w.PortMappingFlags), list(g.PortMappingFlags))
	add("distribution", w.Distribution, g.Distribution)
	add("sourceVIP", orNone(w.SourceVIP), orNone(g.SourceVIP))
	add("backends", list(w.Backends), list(g.Backends))
	return d
}

func byKey(lbs []LB) map[string]LB {
	m := make(map[string]LB, len(lbs))
	for _, lb := range lbs {
		m[lb.Key()] = lb
	}
	return m
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func list(xs []string) string {
	if len(xs) == 0 {
		return "[]"
	}
	return "[" + strings.Join(xs, " ") + "]"
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// AllowEntry is one allowlisted difference: the rows (scenario, and step for
// multi-step scenarios, as "scenario / step") it applies to, the field, and
// optionally the object; Scenario and Object may hold * wildcards.
type AllowEntry struct {
	Scenario string `json:"scenario"`
	Field    string `json:"field"`
	Object   string `json:"object,omitempty"`
	Reason   string `json:"reason"`

	scenario, object *regexp.Regexp
	used             int
}

func (e *AllowEntry) compile() error {
	if e.Scenario == "" || e.Field == "" || e.Reason == "" {
		return fmt.Errorf("allowlist entry %+v: scenario, field and reason are required", *e)
	}
	e.scenario = glob(e.Scenario)
	if e.Object != "" {
		e.object = glob(e.Object)
	}
	return nil
}

func (e *AllowEntry) matches(row string, d Diff) bool {
	return e.scenario.MatchString(row) && e.Field == d.Field && (e.object == nil || e.object.MatchString(d.Object))
}

func (e *AllowEntry) String() string {
	s := fmt.Sprintf("scenario %q field %q", e.Scenario, e.Field)
	if e.Object != "" {
		s += fmt.Sprintf(" object %q", e.Object)
	}
	return s
}

func glob(p string) *regexp.Regexp {
	parts := strings.Split(p, "*")
	for i := range parts {
		parts[i] = regexp.QuoteMeta(parts[i])
	}
	return regexp.MustCompile("^" + strings.Join(parts, ".*") + "$")
}

// Allowlist checks differences against the allowlist and remembers which
// entries were used, so unused (stale) ones can be reported.
type Allowlist struct{ Entries []*AllowEntry }

// Reasons returns, per difference, the reason of the first entry that allows
// it ("" for a difference nothing allows).
func (a *Allowlist) Reasons(row string, diffs []Diff) []string {
	out := make([]string, len(diffs))
	for i, d := range diffs {
		for _, e := range a.Entries {
			if e.matches(row, d) {
				e.used++
				out[i] = e.Reason
				break
			}
		}
	}
	return out
}

// Stale returns the entries that allowed no difference.
func (a *Allowlist) Stale() []*AllowEntry {
	var s []*AllowEntry
	for _, e := range a.Entries {
		if e.used == 0 {
			s = append(s, e)
		}
	}
	return s
}

// backendIPs maps a load balancer's HNS endpoint ids to their addresses
// (ipOf is keyed by lower-case id: HNS reports ids in its own case), sorted;
// an id HNS does not know shows as such.
func backendIPs(ids []string, ipOf map[string]string) []string {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		ip, ok := ipOf[strings.ToLower(id)]
		if !ok {
			ip = "unknown-endpoint-" + id
		}
		out = append(out, ip)
	}
	slices.Sort(out)
	return out
}
