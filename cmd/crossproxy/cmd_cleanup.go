package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/crossproxy/crossproxy/platform"
	"github.com/crossproxy/crossproxy/platform/logging"
)

func newCleanupCommand() *cobra.Command {
	var cfg platform.BackendConfig
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "Remove everything crossproxy installed in this node's data plane",
		Long: `cleanup removes the rules crossproxy programmed (on Linux its nftables table, on
Windows its HNS load balancers) and nothing else. Run it after stopping crossproxy.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logging.New(cmd.ErrOrStderr(), "text", "info")
			if err != nil {
				return err
			}
			cfg.Cleanup = true
			b, err := newBackend(cfg, log.WithField("command", "cleanup"))
			if err != nil {
				return err
			}
			if err := b.Cleanup(cmd.Context()); err != nil {
				return fmt.Errorf("cleanup %s: %w", b.Name(), err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed crossproxy's %s state\n", b.Name())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.TableName, "nftables-table", "crossproxy", "Linux: the nftables table crossproxy owns")
	f.StringVar(&cfg.NetNSPath, "netns", "", "Linux: clean up in this network namespace (path such as /run/netns/NAME)")
	f.StringVar(&cfg.NetworkName, "network-name", "", "Windows: the HNS network the load balancers attach to")
	return cmd
}
