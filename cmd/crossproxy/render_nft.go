package main

import (
	"github.com/crossproxy/crossproxy/core"
	nft "github.com/crossproxy/crossproxy/platform_linux"
)

// renderNFT prints the nftables ruleset the Linux backend would program.
func renderNFT(state *core.NodeState) (string, error) {
	o := linuxRenderOptions
	return nft.Render(state, nft.Config{Table: o.Table, LocalhostNodePorts: o.LocalhostNodePorts}), nil
}
