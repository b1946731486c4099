package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/crossproxy/crossproxy/platform/debug"
)

// statusOptions configure `crossproxy status`.
type statusOptions struct {
	remote  remoteOptions
	output  string
	timeout time.Duration
}

func newStatusCommand() *cobra.Command {
	so := &statusOptions{}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show every node's proxy: health, syncs, failures, repairs, other proxies, input problems; unhealthy nodes first",
		Long: `status asks the proxy of every node, through the API server (the pods' proxy
subresource: no SSH, exec or pod IP), for its status: version, last successful sync and
its age, the last full and partial sync durations, sync failures, drift repairs, other
Service proxies found on the node, input problems and the objects programmed. Nodes
that are not healthy come first, with the reason named: a node without a proxy pod, a
pod that is not ready or does not answer, another proxy programming the node, failing
syncs, a failing /healthz.

The proxies' secure endpoint (--secure-address) authorizes every request through the
API server: the caller needs get pods/proxy on the proxy pods, and the token presented
to the endpoint needs get proxies.crossproxy.io. By default status mints a ten-minute
token of the crossproxy-reader ServiceAccount the manifests create (create
serviceaccounts/token on it); --token or --token-file give one instead.

Installed as kubectl-crossproxy on the PATH, it runs as 'kubectl crossproxy status'.

Exit status: 0 when every node is healthy, 1 when one is not, 2 on errors.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return so.run(cmd.Context(), cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	so.remote.bind(f, true, 15*time.Second)
	f.StringVarP(&so.output, "output", "o", "wide", "output format: wide (a table) or json")
	f.DurationVar(&so.timeout, "timeout", time.Minute, "give up after this long")
	return cmd
}

// nodeRow is one node in status's answer.
type nodeRow struct {
	Node string `json:"node"`
	OS   string `json:"os,omitempty"`
	Pod  string `json:"pod,omitempty"`
	// Healthy is the proxy's own verdict and what status sees of its pod.
	Healthy bool     `json:"healthy"`
	Reasons []string `json:"reasons,omitempty"`
	// Status is the proxy's answer; nil when it could not be asked.
	Status *debug.NodeStatus `json:"status,omitempty"`
}

func (so *statusOptions) run(ctx context.Context, out io.Writer) error {
	if so.output != "wide" && so.output != "json" {
		return fmt.Errorf("flag --output: %q is not wide or json", so.output)
	}
	ctx, cancel := context.WithTimeout(ctx, so.timeout)
	defer cancel()
	r, proxies, err := so.remote.connect(ctx)
	if err != nil {
		return err
	}
	rows := collectStatus(ctx, r, proxies, &so.remote)
	if so.output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		err = enc.Encode(rows)
	} else {
		err = writeStatusTable(out, rows)
	}
	if err != nil {
		return err
	}
	bad := 0
	for _, r := range rows {
		if !r.Healthy {
			bad++
		}
	}
	if bad > 0 {
		return &exitError{code: 1, err: fmt.Errorf("%d of %d node(s) not healthy", bad, len(rows))}
	}
	return nil
}

// collectStatus asks every node's proxy for its status and returns the
// rows, unhealthy first, each group by node name.
func collectStatus(ctx context.Context, r *debug.Remote, proxies []debug.Proxy, ro *remoteOptions) []nodeRow {
	rows := make([]nodeRow, len(proxies))
	ro.each(proxies, func(i int, px debug.Proxy) {
		rows[i] = statusOf(ctx, r, px, ro.nodeTimeout)
	})
	slices.SortStableFunc(rows, func(a, b nodeRow) int {
		if a.Healthy != b.Healthy {
			if !a.Healthy {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Node, b.Node)
	})
	return rows
}

// statusOf is one node's row: what the pod says of itself, after what the
// API server says of the pod.
func statusOf(ctx context.Context, r *debug.Remote, px debug.Proxy, timeout time.Duration) nodeRow {
	row := nodeRow{Node: px.Node, OS: px.OS}
	if px.Pod != nil {
		row.Pod = px.Pod.Namespace + "/" + px.Pod.Name
	}
	if px.PodProblem != "" {
		row.Reasons = append(row.Reasons, px.PodProblem)
		return row
	}
	ready := debug.PodReady(px.Pod)
	if !ready {
		row.Reasons = append(row.Reasons, "pod "+row.Pod+" is not ready (its /healthz probe fails)")
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := r.Status(ctx, px)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("no answer within %s (a stopped or overloaded proxy): %w", timeout, err)
		}
		row.Reasons = append(row.Reasons, err.Error())
		return row
	}
	row.Status = st
	row.Reasons = append(row.Reasons, st.Reasons...)
	row.Healthy = ready && st.Healthy
	return row
}

func writeStatusTable(out io.Writer, rows []nodeRow) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tOS\tHEALTHY\tVERSION\tLAST SYNC\tFULL\tPARTIAL\tFAILURES\tREPAIRS\tOTHER PROXIES\tPROBLEMS\tSERVICES\tENDPOINTS\tPOD\tREASON")
	for _, r := range rows {
		health := "yes"
		if !r.Healthy {
			health = "NO"
		}
		reason := strings.Join(r.Reasons, "; ")
		st := r.Status
		if st == nil {
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t%s\t%s\n", r.Node, dash(r.OS), health, dash(r.Pod), reason)
			continue
		}
		if reason == "" && len(st.Warnings) > 0 {
			reason = "warning: " + strings.Join(st.Warnings, "; ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%d\t%d\t%d\t%s\t%s\n",
			r.Node, st.OS+"/"+st.Arch, health, st.Version, syncAge(st), syncDuration(st.LastFull), syncDuration(st.LastPartial),
			st.SyncFailures, st.DriftRepairs, dash(strings.Join(st.OtherProxies, ",")), len(st.InputProblems),
			st.Programmed.Services, st.Programmed.Endpoints, dash(r.Pod), reason)
	}
	return tw.Flush()
}

// syncAge is the last successful sync's age, by the proxy's clock.
func syncAge(st *debug.NodeStatus) string {
	if st.LastSync == nil {
		return "never"
	}
	return st.Now.Sub(st.LastSync.At).Round(time.Second).String() + " ago"
}

func syncDuration(s *debug.SyncSummary) string {
	if s == nil {
		return "-"
	}
	return s.Duration.Round(100 * time.Microsecond).String()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
