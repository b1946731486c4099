package explain

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/platform"
)

// frontendKey identifies a frontend in both layers: the data plane may not
// know which kind of frontend an address is, so the kind is not part of it.
type frontendKey struct {
	addr  netip.AddrPort
	proto v1.Protocol
}

func (k frontendKey) String() string { return fmt.Sprintf("%s/%s", k.addr, k.proto) }

func keyOf(addr netip.Addr, port uint16, proto v1.Protocol) frontendKey {
	return frontendKey{addr: netip.AddrPortFrom(addr.Unmap(), port), proto: core.ProtocolOrTCP(proto)}
}

// verdictWords says what a frontend does with a new connection when its set is empty.
// suffix conjugates the verb for a singular or plural subject.
func verdictWords(v core.Verdict, suffix string) string {
	switch v {
	case core.VerdictReject:
		return "reject" + suffix + " new connections"
	case core.VerdictDrop:
		return "drop" + suffix + " new connections"
	}
	if suffix == "" {
		return "have no verdict"
	}
	return "has no verdict"
}

// programmedLayer compares what the data plane holds with what was computed:
// frontends missing or extra, endpoints missing or extra per frontend, and the
// verdict of frontends without endpoints. Live connections that go to an
// endpoint no longer programmed are noted (stale conntrack entries).
func (a *analysis) programmedLayer() {
	if len(a.ports) > 0 && !a.ignored {
		// Whichever proxy's rules a packet meets first translate it: the
		// Service works by one proxy's rules or the other's, not as layer 3
		// says.
		for _, o := range a.in.OtherProxies {
			a.add(LayerProgrammed, SeverityMismatch, "another Service proxy programs this node too: %s; it translates this Service's addresses its own way", o)
		}
	}
	ps := a.in.Programmed
	if ps == nil {
		sev := SeverityNote
		if a.in.ProgrammedFailed && len(a.ports) > 0 && !a.ignored {
			sev = SeverityMismatch
		}
		a.add(LayerProgrammed, sev, "layer 4 not read: %s", a.r.Programmed.Unavailable)
		return
	}
	for _, n := range ps.Notes {
		a.add(LayerProgrammed, SeverityNote, "%s", n)
	}
	prog, progOrder := indexProgrammed(ps)
	if a.in.Object == nil || a.ignored {
		if len(progOrder) > 0 {
			a.add(LayerProgrammed, SeverityMismatch, "programmed rules hold %s for a Service that crossproxy does not proxy: %s",
				plural(len(progOrder), "frontend"), joinKeys(progOrder))
		}
		return
	}
	if a.in.State == nil {
		a.add(LayerProgrammed, SeverityNote, "layer 4 not compared: there is no computed state to compare it with")
		return
	}
	computed, missing, diffs := a.compareFrontends(prog)
	if len(missing) > 0 {
		a.add(LayerProgrammed, SeverityMismatch, "programmed rules miss %s that the computed state has: %s",
			plural(len(missing), "frontend"), strings.Join(missing, ", "))
	}
	for _, d := range diffs {
		a.reportDiff(d)
	}
	var extra []frontendKey
	for _, k := range progOrder {
		if !computed[k] {
			extra = append(extra, k)
		}
	}
	if len(extra) > 0 {
		a.add(LayerProgrammed, SeverityMismatch, "programmed rules hold %s that the computed state does not have: %s",
			plural(len(extra), "frontend"), joinKeys(extra))
	}
	a.staleConnections(ps, prog)
}

// indexProgrammed keys the programmed frontends by address, port and
// protocol; order lists the keys as first found.
func indexProgrammed(ps *platform.ProgrammedService) (prog map[frontendKey]*platform.ProgrammedFrontend, order []frontendKey) {
	prog = map[frontendKey]*platform.ProgrammedFrontend{}
	for i := range ps.Frontends {
		f := &ps.Frontends[i]
		k := keyOf(f.Addr, f.Port, f.Protocol)
		if _, dup := prog[k]; !dup {
			order = append(order, k)
		}
		prog[k] = f
	}
	return prog, order
}

// frontendDiff is how one frontend's programmed endpoints differ from the computed ones.
type frontendDiff struct {
	what    string
	missing []string
	extra   []string
	verdict string
}

// compareFrontends walks the computed frontends: computed holds their keys,
// missing those the data plane lacks, diffs the endpoint and verdict
// comparison of the others.
func (a *analysis) compareFrontends(prog map[frontendKey]*platform.ProgrammedFrontend) (computed map[frontendKey]bool, missing []string, diffs []frontendDiff) {
	computed = map[frontendKey]bool{}
	for _, sp := range a.ports {
		for _, f := range sp.Frontends {
			k := keyOf(f.Addr, f.Port, sp.Protocol)
			if computed[k] {
				continue
			}
			computed[k] = true
			what := fmt.Sprintf("%s %s", f.Kind, k)
			pf, ok := prog[k]
			if !ok {
				missing = append(missing, what)
				continue
			}
			diffs = append(diffs, diffFrontend(what, sp, f, pf))
		}
	}
	return computed, missing, diffs
}

// diffFrontend compares one frontend's computed endpoint set (or empty-set
// verdict) with what the data plane holds for it.
func diffFrontend(what string, sp *core.ServicePort, f core.Frontend, pf *platform.ProgrammedFrontend) frontendDiff {
	_, eps, verdict := frontendSet(sp, f)
	want := addrPortSet(eps)
	have := map[netip.AddrPort]bool{}
	for _, e := range pf.Endpoints {
		have[unmap(e)] = true
	}
	d := frontendDiff{what: what}
	for _, e := range sortedKeys(want) {
		if !have[e] {
			d.missing = append(d.missing, e.String())
		}
	}
	for _, e := range sortedKeys(have) {
		if !want[e] {
			d.extra = append(d.extra, e.String())
		}
	}
	if len(want) == 0 && len(have) == 0 && pf.Verdict != verdict {
		d.verdict = fmt.Sprintf("%s: the computed state %s, the programmed rules %s", what, verdictWords(verdict, "s"), verdictWords(pf.Verdict, ""))
	}
	return d
}

// reportDiff adds the mismatches of one frontend, endpoints first.
func (a *analysis) reportDiff(d frontendDiff) {
	if len(d.missing) > 0 {
		a.add(LayerProgrammed, SeverityMismatch, "programmed rules miss %s that the computed state has, for %s: %s",
			plural(len(d.missing), "endpoint"), d.what, strings.Join(d.missing, ", "))
	}
	if len(d.extra) > 0 {
		a.add(LayerProgrammed, SeverityMismatch, "programmed rules hold %s that the computed state does not have, for %s: %s",
			plural(len(d.extra), "endpoint"), d.what, strings.Join(d.extra, ", "))
	}
	if d.verdict != "" {
		a.add(LayerProgrammed, SeverityMismatch, "%s", d.verdict)
	}
}

// staleConnections notes tracked connections whose endpoint is no longer
// programmed for their frontend: they keep going to the old endpoint until
// conntrack forgets them, which matters most for UDP.
func (a *analysis) staleConnections(ps *platform.ProgrammedService, prog map[frontendKey]*platform.ProgrammedFrontend) {
	var stale []string
	for _, c := range ps.Connections {
		pf, ok := prog[keyOf(c.Frontend.Addr(), c.Frontend.Port(), c.Protocol)]
		if !ok || !c.Endpoint.IsValid() {
			continue
		}
		if !slices.ContainsFunc(pf.Endpoints, func(e netip.AddrPort) bool { return unmap(e) == unmap(c.Endpoint) }) {
			stale = append(stale, fmt.Sprintf("%s %s -> %s via %s", core.ProtocolOrTCP(c.Protocol), c.Client, c.Endpoint, c.Frontend))
		}
	}
	if len(stale) > 0 {
		a.add(LayerProgrammed, SeverityNote, "%s still go to endpoints that are no longer programmed: %s",
			plural(len(stale), "tracked connection"), strings.Join(stale, "; "))
	}
}

func unmap(ap netip.AddrPort) netip.AddrPort { return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()) }

func addrPortSet(eps []core.Endpoint) map[netip.AddrPort]bool {
	out := make(map[netip.AddrPort]bool, len(eps))
	for _, e := range eps {
		out[unmap(e.AddrPort())] = true
	}
	return out
}

func sortedKeys(m map[netip.AddrPort]bool) []netip.AddrPort {
	out := make([]netip.AddrPort, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.SortFunc(out, netip.AddrPort.Compare)
	return out
}

func joinKeys(keys []frontendKey) string {
	s := make([]string, 0, len(keys))
	for _, k := range keys {
		s = append(s, k.String())
	}
	return strings.Join(s, ", ")
}
