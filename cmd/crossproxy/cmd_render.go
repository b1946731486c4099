package main

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/crossproxy/crossproxy/core"
)

// linuxRenderOptions are the nftables settings beyond the NodeState (table
// name, localhost NodePorts) that the render flags set for the linux renderer.
var linuxRenderOptions struct {
	Table              string
	LocalhostNodePorts bool
}

// renderers maps a platform name to a function that prints the rules that
// platform would program for a NodeState. Each lives in an untagged file
// (render_nft.go, render_hns.go), so every OS can render every platform.
var renderers = map[string]func(*core.NodeState) (string, error){"linux": renderNFT, "windows": renderHNS}

// renderJSON names the platforms whose renderer also prints JSON (-o json);
// renderOutput is the chosen format, which those renderers read.
var (
	renderJSON   = map[string]bool{"windows": true}
	renderOutput string
)

func newRenderCommand() *cobra.Command {
	var (
		platformName string
		manifests    []string
		nodeName     string
	)
	cmd := &cobra.Command{
		Use:   "render",
		Short: "Print the rules a platform would program for the given manifests",
		Long: `render computes this node's state from Service, EndpointSlice and Node manifests and
prints what the chosen data plane would program: an nft ruleset for --platform linux,
the HNS load balancers for --platform windows. It changes nothing on this machine.`,
		Args: cobra.NoArgs,
	}
	f := cmd.Flags()
	f.StringVar(&platformName, "platform", "linux", "data plane to render: "+strings.Join(renderNames(), ", "))
	f.StringSliceVar(&manifests, "manifests", nil, "files or directories with Service, EndpointSlice and Node objects")
	f.StringVar(&nodeName, "node", "", "name of the Node to render for")
	f.StringVar(&linuxRenderOptions.Table, "nftables-table", "crossproxy", "Linux: the nftables table name")
	f.BoolVar(&linuxRenderOptions.LocalhostNodePorts, "localhost-nodeports", false, "Linux: NodePorts on 127.0.0.1 too")
	f.StringVarP(&renderOutput, "output", "o", "text", "output format: text, or json (windows)")
	addWindowsRenderFlags(f)
	coreOpts := bindOptions(f, coreOptionTable())
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		render, ok := renderers[platformName]
		if !ok {
			return fmt.Errorf("flag --platform: %q is not one of %s", platformName, strings.Join(renderNames(), ", "))
		}
		if renderOutput != "text" && (renderOutput != "json" || !renderJSON[platformName]) {
			return fmt.Errorf("flag --output: %q is not supported for --platform %s", renderOutput, platformName)
		}
		if len(manifests) == 0 {
			return fmt.Errorf("flag --manifests: required")
		}
		if nodeName == "" {
			return fmt.Errorf("flag --node: required")
		}
		opts := coreOpts.core()
		state, err := computeFromManifests(opts, manifests, nodeName)
		if err != nil {
			return err
		}
		text, err := render(state)
		if err != nil {
			return fmt.Errorf("render %s: %w", platformName, err)
		}
		return writeRender(cmd.OutOrStdout(), cmd.ErrOrStderr(), text, state)
	}
	return cmd
}

// writeRender prints the rules, and the input problems on stderr so the
// output stays loadable (nft -f).
func writeRender(out, errOut io.Writer, text string, state *core.NodeState) error {
	for _, p := range state.Problems {
		fmt.Fprintf(errOut, "problem: %s\n", p)
	}
	_, err := io.WriteString(out, text)
	return err
}

func renderNames() []string {
	names := make([]string, 0, len(renderers))
	for n := range renderers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
