package hns

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sirupsen/logrus"
)

// findNetwork settles the HNS network when none is named (flag,
// KUBE_NETWORK): the network the node's CNI configuration names, when HNS
// has it (sdnoverlay, win-overlay and win-bridge look their network up by
// the configuration's name, flannel names its network as its configuration
// does, flannel.4096 in sig-windows-tools' layout, and Calico's is
// "Calico"), else the only Overlay or L2Bridge network on the node. Several
// candidates are a configuration error naming them; none yet (the CNI makes
// its network when it starts) is retried by the next sync.
func (b *Backend) findNetwork(ctx context.Context) error {
	if b.cfg.NetworkName != "" {
		if b.networkFrom == "" {
			b.networkFrom = "the configuration (flag --network-name or KUBE_NETWORK)"
		}
		return nil
	}
	cni := "no CNI configuration found"
	if c := b.cfg.CNI; c != nil && c.Name != "" {
		_, err := b.hns.GetNetwork(ctx, c.Name)
		if err == nil {
			b.useNetworkName(c.Name, "the CNI configuration "+c.File)
			return nil
		}
		if !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("hns: find the network of the CNI configuration %s: %w", c.File, err)
		}
		cni = fmt.Sprintf("HNS has no network %q of the CNI configuration %s", c.Name, c.File)
	}
	nws, err := b.hns.ListNetworks(ctx)
	if err != nil {
		return fmt.Errorf("hns: find the network (no --network-name): %w", err)
	}
	var all, fit []string
	for _, nw := range nws {
		all = append(all, fmt.Sprintf("%s (%s)", nw.Name, nw.Type))
		if nw.isOverlay() || strings.EqualFold(string(nw.Type), string(NetworkL2Bridge)) {
			fit = append(fit, nw.Name)
		}
	}
	switch len(fit) {
	case 1:
		b.useNetworkName(fit[0], "the only Overlay or L2Bridge network on the node ("+cni+")")
		return nil
	case 0:
		return fmt.Errorf("hns: no HNS network named (flag --network-name, KUBE_NETWORK), %s, and no Overlay or L2Bridge network on the node yet "+
			"(networks: %s); the CNI makes it when it starts: %w", cni, orNone(all), ErrNotFound)
	}
	return fmt.Errorf("hns: %w: no HNS network named (flag --network-name, KUBE_NETWORK), %s, and %d Overlay or L2Bridge networks on the node: %s; "+
		"name one with --network-name", ErrInvalid, cni, len(fit), strings.Join(fit, ", "))
}

// useNetworkName settles the network found and says how.
func (b *Backend) useNetworkName(name, from string) {
	b.cfg.NetworkName, b.networkFrom = name, from
	b.log.WithFields(logrus.Fields{"network": name, "foundBy": from}).Info("HNS network found")
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
