package main

import "github.com/crossproxy/crossproxy/platform/config"

// nftOptionTable is run's options for the Linux backend (nftables).
func nftOptionTable() []option {
	return []option{
		field("nftables-table", "Linux: the nftables table crossproxy owns", stringFlag,
			func(c *config.Config) *string { return &c.Backend.TableName }),
		field("localhost-nodeports", "Linux: answer NodePorts on 127.0.0.1 too (sets route_localnet)", boolFlag,
			func(c *config.Config) *bool { return &c.Backend.LocalhostNodePorts }),
		always(field("netns", "Linux: program the rules in this network namespace (path such as /run/netns/NAME) instead of the current one", stringFlag,
			func(c *config.Config) *string { return &c.Backend.NetNSPath })),
	}
}
