package main

import (
	"github.com/crossproxy/crossproxy/core"
	hns "github.com/crossproxy/crossproxy/platform_windows"
)

func init() { renderers["windows"] = renderHNS }

// renderHNSHeader states what render assumes about the node, since it reads no
// HNS: the network type decides whether remote endpoints need a provider address.
const renderHNSHeader = "# assumed: an L2Bridge HNS network, every HNS feature, no DSR, no source VIP; endpoints marked * are remote\n"

// renderHNS prints the HNS load balancers and remote endpoints a Windows node
// would program for state, and what HNS cannot express.
func renderHNS(state *core.NodeState) (string, error) {
	plan := hns.PlanState(state, hns.PlanOptions{
		Network:  hns.Network{Name: "render", Type: hns.NetworkL2Bridge},
		Features: hns.AllFeatures,
	})
	return renderHNSHeader + hns.Render(plan), nil
}
