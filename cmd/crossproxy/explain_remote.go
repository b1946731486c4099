package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"k8s.io/apimachinery/pkg/types"

	"github.com/crossproxy/crossproxy/platform/debug"
	"github.com/crossproxy/crossproxy/platform/explain"
)

// remoteMode reports whether explain asks the nodes' proxies through the API
// server: nothing names a local source (manifests, a network namespace, a
// config file, a debug URL, --local) and explain does not run in a pod. In
// the proxy's pod the in-cluster environment is set and the local data plane
// is the node's own.
func (eo *explainOptions) remoteMode() bool {
	if eo.forceLocal || len(eo.manifests) > 0 || eo.debugURL != "" || eo.backend.NetNSPath != "" || eo.configFile != "" {
		return false
	}
	return os.Getenv("KUBERNETES_SERVICE_HOST") == ""
}

// oneNode asks node eo.nodeName's proxy for its report of svc.
func (eo *explainOptions) oneNode(ctx context.Context, svc types.NamespacedName) (*explain.Report, error) {
	r, proxies, err := eo.remote.connect(ctx)
	if err != nil {
		return nil, err
	}
	for _, px := range proxies {
		if px.Node != eo.nodeName {
			continue
		}
		if px.PodProblem != "" {
			return nil, fmt.Errorf("node %s: %s (on the node itself, crossproxy explain --local reads its data plane)", px.Node, px.PodProblem)
		}
		ctx, cancel := context.WithTimeout(ctx, eo.remote.nodeTimeout)
		defer cancel()
		return r.Explain(ctx, px, svc)
	}
	return nil, fmt.Errorf("flag --node: no node %q in the cluster", eo.nodeName)
}

// nodeReport is one node's answer in explain's every-node mode.
type nodeReport struct {
	Node   string          `json:"node"`
	Report *explain.Report `json:"report,omitempty"`
	// Error says why the node's proxy could not be asked.
	Error string `json:"error,omitempty"`
}

// everyNode explains svc on every node with a proxy and prints, per node,
// whether its four layers agree and, when not, the first mismatch; then the
// first differing node's whole report, so one run shows both the spread and
// the detail. Nodes whose proxy could not be asked are listed, and count as
// differing: the operator cannot tell whether they serve the Service.
func (eo *explainOptions) everyNode(ctx context.Context, out io.Writer, svc types.NamespacedName) error {
	r, proxies, err := eo.remote.connect(ctx)
	if err != nil {
		return err
	}
	res := make([]nodeReport, len(proxies))
	eo.remote.each(proxies, func(i int, px debug.Proxy) {
		res[i].Node = px.Node
		if px.PodProblem != "" {
			res[i].Error = px.PodProblem
			return
		}
		ctx, cancel := context.WithTimeout(ctx, eo.remote.nodeTimeout)
		defer cancel()
		rep, err := r.Explain(ctx, px, svc)
		if err != nil {
			res[i].Error = err.Error()
			return
		}
		res[i].Report = rep
	})
	var differ []string
	var first *explain.Report
	for _, nr := range res {
		if nr.Report == nil || !nr.Report.OK() {
			differ = append(differ, nr.Node)
			if first == nil && nr.Report != nil {
				first = nr.Report
			}
		}
	}
	if eo.output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else if err := writeEveryNode(out, svc, res, differ, first); err != nil {
		return err
	}
	if len(differ) > 0 {
		return &exitError{code: 1, err: fmt.Errorf("%s: %d of %d node(s) differ: %s", svc, len(differ), len(res), strings.Join(differ, ", "))}
	}
	return nil
}

func writeEveryNode(out io.Writer, svc types.NamespacedName, res []nodeReport, differ []string, first *explain.Report) error {
	fmt.Fprintf(out, "%s on %d node(s):\n", svc, len(res))
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tRESULT")
	for _, nr := range res {
		switch {
		case nr.Report == nil:
			fmt.Fprintf(tw, "%s\tnot asked: %s\n", nr.Node, nr.Error)
		case nr.Report.OK():
			fmt.Fprintf(tw, "%s\tok: the four layers agree\n", nr.Node)
		default:
			f := nr.Report.FirstMismatch
			fmt.Fprintf(tw, "%s\tmismatch in layer %d: %s\n", nr.Node, f.Layer, f.Message)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(differ) == 0 {
		fmt.Fprintln(out, "\nevery node agrees.")
		return nil
	}
	fmt.Fprintf(out, "\nnodes that differ: %s\n", strings.Join(differ, ", "))
	if first == nil {
		return nil
	}
	fmt.Fprintf(out, "\nnode %s in full:\n\n", first.Node)
	return first.WriteText(out)
}
