package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/crossproxy/crossproxy/core"
)

func newStateCommand() *cobra.Command {
	var (
		manifests []string
		nodeName  string
		output    string
	)
	cmd := &cobra.Command{
		Use:   "state --manifests FILE_OR_DIR... --node NAME",
		Short: "Print the state crossproxy computes for one node from Service, EndpointSlice and Node manifests",
		Long: `state reads Service, EndpointSlice and Node objects from YAML or JSON files (multi-document;
a directory contributes its *.yaml, *.yml and *.json files) and prints what crossproxy decides for
the node: per Service port and IP family the frontends, the endpoint sets for cluster-wide and
node-local traffic, what happens when a set is empty, masquerading, affinity, source ranges and
health checks, every endpoint left out with the reason, the objects ignored on purpose and the
problems found in the input. Nothing on the host is touched.

Give the core option flags the proxy runs with (--cluster-cidr, --detect-local-mode,
--nodeport-addresses, --masquerade-all, --ip-families, --proxy-name).

Exit status: 0 on success, 2 on errors (a bad file names the file, document and field).`,
		Args: cobra.NoArgs,
	}
	f := cmd.Flags()
	f.StringSliceVar(&manifests, "manifests", nil, "files or directories with Service, EndpointSlice and Node objects (repeatable or comma-separated)")
	f.StringVar(&nodeName, "node", "", "the Node (from the manifests) to compute the state for")
	f.StringVarP(&output, "output", "o", "text", "output format: text or json")
	coreOpts := bindOptions(f, coreOptionTable())
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if len(manifests) == 0 {
			return fmt.Errorf("flag --manifests: at least one file or directory is required")
		}
		if nodeName == "" {
			return fmt.Errorf("flag --node: required")
		}
		if output != "text" && output != "json" {
			return fmt.Errorf("flag --output: %q is not text or json", output)
		}
		opts := coreOpts.core()
		st, err := computeFromManifests(opts, manifests, nodeName)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if output == "json" {
			data, err := json.MarshalIndent(st, "", "  ")
			if err != nil {
				return fmt.Errorf("encode state: %w", err)
			}
			_, err = fmt.Fprintf(out, "%s\n", data)
			return err
		}
		return writeStateText(out, st)
	}
	return cmd
}

// writeStateText prints a NodeState for a person: node facts, then each
// Service port with its frontends, endpoint sets, verdicts and exclusions,
// then health checks, ignored objects and problems. Render and explain can
// reuse it.
func writeStateText(w io.Writer, st *core.NodeState) error {
	p := &textPrinter{w: w}
	n := st.Node
	zone := n.Zone
	if zone == "" {
		zone = "(none)"
	}
	p.line("Node %s  zone %s  addresses %s", n.Name, zone, joinAddrs(n.Addresses))
	if len(n.PodCIDRs) > 0 {
		p.line("  pod CIDRs: %s", joinStrings(n.PodCIDRs))
	}
	if n.Deleting {
		p.line("  the Node is being deleted")
	}
	for _, fam := range st.Families {
		ld := st.LocalDetect[fam]
		detect := string(ld.Mode)
		switch {
		case len(ld.CIDRs) > 0:
			detect += " " + joinStrings(ld.CIDRs)
		case ld.Interface != "":
			detect += " " + ld.Interface
		}
		if !ld.Implemented() {
			detect += " (cannot tell local from off-cluster traffic)"
		}
		np := joinAddrs(st.NodePortAddresses[fam])
		if np == "" {
			np = "(none)"
		}
		p.line("  %s: NodePort addresses %s; local traffic detection %s", fam, np, detect)
	}
	ports := st.SortedPorts()
	p.line("")
	p.line("Service ports: %d", len(ports))
	for _, sp := range ports {
		p.line("")
		writePortText(p, sp)
	}
	if len(st.HealthChecks) > 0 {
		p.line("")
		p.line("Health checks:")
		for _, hc := range st.HealthChecks {
			p.line("  %s node port %d: %d local ready endpoint(s)", hc.Service, hc.NodePort, hc.LocalEndpoints)
		}
	}
	if len(st.Ignored) > 0 {
		p.line("")
		p.line("Ignored on purpose:")
		for _, ig := range st.Ignored {
			p.line("  %s %s: %s", ig.Kind, ig.Object, ig.Reason)
		}
	}
	p.line("")
	if len(st.Problems) == 0 {
		p.line("Problems: none")
	} else {
		p.line("Problems (%d, the bad parts were skipped):", len(st.Problems))
		for _, pr := range st.Problems {
			p.line("  %s", pr)
		}
	}
	return p.err
}

func writePortText(p *textPrinter, sp *core.ServicePort) {
	k := sp.Key
	name := k.PortName
	if name == "" {
		name = "(unnamed)"
	}
	p.line("%s port %s %s/%s %s", k.Service, name, k.Protocol, portOrNone(sp.Port), k.Family)
	tw := tabwriter.NewWriter(p, 0, 0, 1, ' ', 0)
	row := func(label, format string, args ...any) {
		fmt.Fprintf(tw, "  %s:\t%s\n", label, fmt.Sprintf(format, args...))
	}
	fes := make([]string, 0, len(sp.Frontends))
	for _, f := range sp.Frontends {
		fes = append(fes, f.String())
	}
	row("frontends", "%s", strings.Join(fes, ", "))
	if sp.External() {
		row("traffic policy", "internal %s, external %s", sp.InternalPolicy(), sp.ExternalPolicy())
	} else {
		row("traffic policy", "internal %s (no external frontend)", sp.InternalPolicy())
	}
	if sp.Affinity.ClientIP {
		row("affinity", "ClientIP, %ds", sp.Affinity.TimeoutSeconds)
	}
	if len(sp.SourceRanges) > 0 {
		row("source ranges", "%s", joinStrings(sp.SourceRanges))
	}
	row("masquerade", "%s", masqueradeText(sp.Masquerade))
	if sp.HealthCheckNodePort != 0 {
		row("health check", "node port %d", sp.HealthCheckNodePort)
	}
	if sp.TopologyMode != "" {
		row("topology", "%s hints narrow the cluster endpoints", sp.TopologyMode)
	}
	if sp.TopologyNote != "" {
		row("topology", "%s", sp.TopologyNote)
	}
	row("internal traffic", "%s", setText(sp.InternalEndpoints(), sp.InternalEmpty))
	if sp.External() {
		row("external traffic", "%s", setText(sp.ExternalEndpoints(), sp.ExternalEmpty))
	}
	_ = tw.Flush()
	if !sp.InternalPolicyLocal || sp.External() {
		writeEndpoints(p, "cluster endpoints", sp.ClusterEndpoints)
	}
	if sp.InternalPolicyLocal || sp.ExternalPolicyLocal {
		writeEndpoints(p, "local endpoints", sp.LocalEndpoints)
	}
	if len(sp.Excluded) > 0 {
		p.line("  left out:")
		for _, x := range sp.Excluded {
			addr := x.Addr
			if a, err := netip.ParseAddr(x.Addr); err == nil && x.Port != 0 {
				addr = netip.AddrPortFrom(a, x.Port).String()
			} else if x.Port != 0 {
				addr = fmt.Sprintf("%q port %d", x.Addr, x.Port)
			} else if addr == "" {
				addr = `""`
			}
			p.line("    %s (slice %s) from %s: %s: %s", addr, x.Slice, setName(x.Set), x.Reason, x.Detail)
		}
	}
}

func writeEndpoints(p *textPrinter, label string, eps []core.Endpoint) {
	if len(eps) == 0 {
		p.line("  %s: none", label)
		return
	}
	p.line("  %s (%d):", label, len(eps))
	for _, e := range eps {
		var facts []string
		if e.NodeName() != "" {
			facts = append(facts, "node "+e.NodeName())
		}
		if e.Zone() != "" {
			facts = append(facts, "zone "+e.Zone())
		}
		if e.Local {
			facts = append(facts, "local")
		}
		switch {
		case e.Ready:
			facts = append(facts, "ready")
		case e.Serving && e.Terminating:
			facts = append(facts, "serving, terminating")
		}
		facts = append(facts, "slice "+e.Slice)
		p.line("    %s  %s", e.AddrPort(), strings.Join(facts, ", "))
	}
}

func setText(eps []core.Endpoint, v core.Verdict) string {
	switch {
	case len(eps) > 0:
		return fmt.Sprintf("%d endpoint(s)", len(eps))
	case v == core.VerdictReject:
		return "no endpoint: reject (the Service has no usable endpoint)"
	case v == core.VerdictDrop:
		return "no endpoint: drop (endpoints exist, none on this node for the Local policy)"
	}
	return "no endpoint"
}

func setName(s core.EndpointSet) string {
	switch s {
	case core.SetCluster:
		return "cluster set"
	case core.SetLocal:
		return "local set"
	}
	return "every set"
}

func masqueradeText(m core.Masquerade) string {
	var parts []string
	if m.All {
		parts = append(parts, "all connections (masqueradeAll)")
	}
	if m.OffClusterInternal {
		parts = append(parts, "off-cluster sources to the ClusterIP")
	}
	if m.External {
		parts = append(parts, "external connections")
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}

func portOrNone(p uint16) string { return fmt.Sprint(p) }

func joinAddrs(list []netip.Addr) string { return joinStrings(list) }

func joinStrings[T fmt.Stringer](list []T) string {
	out := make([]string, 0, len(list))
	for _, v := range list {
		out = append(out, v.String())
	}
	return strings.Join(out, ", ")
}

// textPrinter writes lines and keeps the first write error.
type textPrinter struct {
	w   io.Writer
	err error
}

func (p *textPrinter) Write(b []byte) (int, error) {
	if p.err != nil {
		return 0, p.err
	}
	n, err := p.w.Write(b)
	p.err = err
	return n, err
}

func (p *textPrinter) line(format string, args ...any) {
	fmt.Fprintf(p, format+"\n", args...)
}
