package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/platform"
	"github.com/crossproxy/crossproxy/platform/config"
	"github.com/crossproxy/crossproxy/platform/debug"
	"github.com/crossproxy/crossproxy/platform/explain"
	"github.com/crossproxy/crossproxy/platform/kube"
	"github.com/crossproxy/crossproxy/platform/manifest"
)

// explainOptions is everything `crossproxy explain` is configured with.
type explainOptions struct {
	nodeName   string
	configFile string
	changed    func(flag string) bool
	output     string
	manifests  []string
	kubeconfig string
	debugURL   string
	timeout    time.Duration
	backend    platform.BackendConfig
	opts       *optionSet
	// remote and local choose where layers 3 and 4 come from (remoteMode).
	remote     remoteOptions
	forceLocal bool
}

func newExplainCommand() *cobra.Command {
	eo := &explainOptions{}
	cmd := &cobra.Command{
		Use:   "explain NAMESPACE/SERVICE",
		Short: "Show one Service in four layers (declared, published, computed, programmed) and name the first mismatch",
		Long: `explain shows one Service the way it can fail, layer by layer:
  1. declared: the Service (type, families, ports, traffic policies, trafficDistribution, affinity, selector);
  2. published: its EndpointSlices (addresses, ports, conditions, node, zone, hints);
  3. computed: what crossproxy decides for this node (per frontend the eligible endpoints,
     and every other endpoint with the reason it was left out);
  4. programmed: what this node's data plane holds, read back from nftables or HNS (plus the
     live conntrack entries on Linux), compared with layer 3.
It names the first mismatch in plain words.

The objects come from --manifests, or from the API server (--kubeconfig, $KUBECONFIG or the
in-cluster config). Layer 3 is computed here with the core option flags, so give the flags
the proxy runs with. With --debug-url, all four layers come from a running proxy's debug
endpoint (crossproxy run --debug-address) instead, exactly as that proxy sees them.

From an operator's machine (not in a pod, and none of --local, --manifests, --netns,
--config or --debug-url given), explain asks the proxy of node --node through the API
server (its secure endpoint, as crossproxy status does), so all four layers are that
node's, conntrack included on Linux. Without --node it asks every node's proxy and
prints the nodes that differ. In a pod (kubectl exec into the proxy) or with --local it
reads this host's data plane as before.

Exit status: 0 when the four layers agree (on every node asked), 1 when a mismatch is
found, 2 on errors.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return eo.run(cmd.Context(), cmd.OutOrStdout(), args[0])
		},
	}
	f := cmd.Flags()
	f.StringVar(&eo.nodeName, "node", "", "the node to explain for (default: the host name)")
	f.StringVar(&eo.configFile, "config", "", "the proxy's config file (KubeProxyConfiguration or CrossproxyConfiguration): core options, kubeconfig, node name and nftables table come from it; flags given explicitly win")
	f.StringVarP(&eo.output, "output", "o", "text", "output format: text or json")
	f.StringSliceVar(&eo.manifests, "manifests", nil, "read Service, EndpointSlice and Node objects from these files or directories instead of the API server")
	f.StringVar(&eo.kubeconfig, "kubeconfig", "", "kubeconfig file (default $KUBECONFIG, else the in-cluster config)")
	f.StringVar(&eo.debugURL, "debug-url", "", "fetch the report from a running proxy's debug endpoint, e.g. http://"+debug.DefaultAddress)
	f.DurationVar(&eo.timeout, "timeout", 30*time.Second, "give up after this long")
	f.StringVar(&eo.backend.TableName, "nftables-table", "crossproxy", "Linux: the nftables table crossproxy owns")
	f.StringVar(&eo.backend.NetNSPath, "netns", "", "Linux: read the rules of this network namespace (path such as /run/netns/NAME)")
	f.StringVar(&eo.backend.NetworkName, "network-name", "", "Windows: the HNS network the load balancers attach to")
	f.BoolVar(&eo.forceLocal, "local", false, "read this host's data plane even from outside a pod (a host-service install, a shell on the node)")
	eo.remote.bind(f, false, 15*time.Second)
	eo.opts = bindOptions(f, coreOptionTable())
	eo.changed = cmd.Flags().Changed
	return cmd
}

func (eo *explainOptions) run(ctx context.Context, out io.Writer, arg string) error {
	if eo.output != "text" && eo.output != "json" {
		return fmt.Errorf("flag --output: %q is not text or json", eo.output)
	}
	svc, err := debug.ParseService(arg)
	if err != nil {
		return err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, eo.timeout)
	defer cancel()

	if eo.remoteMode() {
		eo.remote.kubeconfig = eo.kubeconfig
		if eo.nodeName == "" {
			return eo.everyNode(ctx, out, svc)
		}
	}
	var rep *explain.Report
	if eo.remoteMode() {
		if rep, err = eo.oneNode(ctx, svc); err != nil {
			return err
		}
	} else if eo.debugURL != "" {
		if rep, err = debug.Fetch(ctx, eo.debugURL, svc); err != nil {
			return err
		}
	} else if rep, err = eo.local(ctx, svc); err != nil {
		return err
	}
	if eo.output == "json" {
		err = rep.WriteJSON(out)
	} else {
		err = rep.WriteText(out)
	}
	if err != nil {
		return err
	}
	if f := rep.FirstMismatch; f != nil {
		return &exitError{code: 1, err: fmt.Errorf("%s: mismatch in layer %d: %s", svc, f.Layer, f.Message)}
	}
	return nil
}

// local builds the report on this node: objects from the manifests or the API
// server, layer 3 computed here, layer 4 read from the local data plane.
func (eo *explainOptions) local(ctx context.Context, svc types.NamespacedName) (*explain.Report, error) {
	opts, err := eo.options()
	if err != nil {
		return nil, err
	}
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("invalid options: %w", err)
	}
	if eo.nodeName == "" {
		if eo.nodeName, err = os.Hostname(); err != nil {
			return nil, fmt.Errorf("flag --node: not set and the host name is unknown: %w", err)
		}
	}
	var obj *v1.Service
	var slices []*discovery.EndpointSlice
	var node *v1.Node
	if len(eo.manifests) > 0 {
		obj, slices, node, err = fromManifests(eo.manifests, svc, eo.nodeName)
	} else {
		obj, slices, node, err = eo.fromAPIServer(ctx, svc)
	}
	if err != nil {
		return nil, err
	}
	from, with := "the API server", "the options given"
	if len(eo.manifests) > 0 {
		from = "the manifests"
	}
	if eo.configFile != "" {
		with = "the options of " + eo.configFile + " and the flags given"
	}
	in := explain.Input{Service: svc, NodeName: eo.nodeName, Object: obj, Slices: slices,
		StateSource: fmt.Sprintf("computed by explain from %s with %s", from, with)}
	if node == nil {
		in.StateUnavailable = fmt.Sprintf("node %q not found", eo.nodeName)
	} else {
		var svcs []*v1.Service
		if obj != nil {
			svcs = append(svcs, obj)
		}
		if in.State, err = core.Compute(opts, node, svcs, slices); err != nil {
			return nil, err
		}
	}
	eo.readProgrammed(ctx, &in)
	return explain.Build(in), nil
}

// options are the core options from the flags, or from the proxy's config
// file with the flags given explicitly on top (as run merges them), so layer
// 3 is computed as the proxy computes it. The config file also supplies the
// kubeconfig, node name and nftables table unless their flags were given.
func (eo *explainOptions) options() (core.Options, error) {
	if eo.configFile == "" {
		return eo.opts.core(), nil
	}
	cfg, err := config.Load(eo.configFile, runtime.GOOS)
	if err != nil {
		return core.Options{}, err
	}
	eo.opts.merge(&cfg)
	for flag, pair := range map[string][2]*string{
		"kubeconfig":     {&eo.kubeconfig, &cfg.Kubeconfig},
		"node":           {&eo.nodeName, &cfg.HostnameOverride},
		"nftables-table": {&eo.backend.TableName, &cfg.Backend.TableName},
		"network-name":   {&eo.backend.NetworkName, &cfg.Backend.NetworkName},
	} {
		if !eo.changed(flag) && *pair[1] != "" {
			*pair[0] = *pair[1]
		}
	}
	return cfg.Core, nil
}

// readProgrammed fills layer 4 from this node's data plane. A platform without
// one, or a data plane that cannot be read (no privileges, no rules yet), makes
// the layer unavailable rather than the command fail: the other three still
// help. A failed read on a platform with a data plane counts as a mismatch
// when the Service should have rules (see explain.Input.ProgrammedFailed).
func (eo *explainOptions) readProgrammed(ctx context.Context, in *explain.Input) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	cfg := eo.backend
	cfg.NodeName = eo.nodeName
	b, err := newBackend(cfg, log.WithField("command", "explain"))
	if err != nil {
		in.ProgrammedUnavailable = err.Error()
		return
	}
	in.Backend = b.Name()
	if d, ok := b.(platform.OtherProxyDetector); ok {
		if others, err := d.OtherProxies(ctx); err == nil {
			in.OtherProxies = others
		}
	}
	ps, err := b.Programmed(ctx, in.Service)
	if err != nil {
		in.ProgrammedUnavailable = fmt.Sprintf("read %s: %v", b.Name(), err)
		in.ProgrammedFailed = !errors.Is(err, platform.ErrUnsupported)
		return
	}
	in.Programmed = ps
}

// fromManifests finds the Service, its slices and the node in files.
func fromManifests(paths []string, svc types.NamespacedName, nodeName string) (*v1.Service, []*discovery.EndpointSlice, *v1.Node, error) {
	set, err := manifest.Load(paths...)
	if err != nil {
		return nil, nil, nil, err
	}
	var obj *v1.Service
	for _, s := range set.Services {
		if s.Namespace == svc.Namespace && s.Name == svc.Name {
			obj = s
			break
		}
	}
	var slices []*discovery.EndpointSlice
	for _, s := range set.Slices {
		if s.Namespace == svc.Namespace && s.Labels[discovery.LabelServiceName] == svc.Name {
			slices = append(slices, s)
		}
	}
	node, _ := set.Node(nodeName) // a missing node makes layer 3 unavailable, not the command fail
	return obj, slices, node, nil
}

// fromAPIServer lists the Service and the Node by name and the slices by
// label: the proxy's RBAC grants list, not get, so its kubeconfig works here too.
func (eo *explainOptions) fromAPIServer(ctx context.Context, svc types.NamespacedName) (*v1.Service, []*discovery.EndpointSlice, *v1.Node, error) {
	cfg, err := kube.ClientConfig(eo.kubeconfig, 0, 0)
	if err != nil {
		return nil, nil, nil, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	svcs, err := client.CoreV1().Services(svc.Namespace).List(ctx, metav1.ListOptions{FieldSelector: byName(svc.Name)})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("list service %s: %w", svc, err)
	}
	var obj *v1.Service
	if len(svcs.Items) > 0 {
		obj = &svcs.Items[0]
	}
	sel := labels.SelectorFromSet(labels.Set{discovery.LabelServiceName: svc.Name}).String()
	list, err := client.DiscoveryV1().EndpointSlices(svc.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("list endpointslices of %s: %w", svc, err)
	}
	slices := make([]*discovery.EndpointSlice, 0, len(list.Items))
	for i := range list.Items {
		slices = append(slices, &list.Items[i])
	}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: byName(eo.nodeName)})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("list node %s: %w", eo.nodeName, err)
	}
	var node *v1.Node
	if len(nodes.Items) > 0 {
		node = &nodes.Items[0]
	}
	return obj, slices, node, nil
}

// byName is the field selector of one object name.
func byName(name string) string { return fields.OneTermEqualSelector("metadata.name", name).String() }
