package hns

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sirupsen/logrus"
)

// externalNetworkName is the HNS network the node's boot scripts make before
// any pod network exists, only so the vSwitch is there when the CNI starts:
// Calico's node-service.ps1 (an Overlay network with VSID 9999, or
// L2Bridge, 192.168.255.0/30), Microsoft SDN's helper.psm1
// CreateExternalNetwork, and sig-windows-tools' HostProcess flannel
// setup.ps1 ("External", Overlay, 192.168.255.0/30, VSID 9999). No pod is
// ever on it, so it never carries Service load balancers, even when it is
// the only network on the node (as at every boot, before the CNI's).
const externalNetworkName = "External"

// antreaNetworkName is the HNS network Antrea's Windows agent makes
// (antrea-io/antrea pkg/agent/util: LocalHNSNetwork, type Transparent with
// the OVS extension). Antrea forwards Service traffic itself (AntreaProxy in
// OVS), not through HNS load balancers, so crossproxy has nothing to program
// on such a node.
const antreaNetworkName = "antrea-hnsnetwork"

// errAntrea refuses an Antrea node, naming the proxy that serves it.
func errAntrea(what string) error {
	return fmt.Errorf("hns: %w: %s: Antrea on Windows forwards Services itself (AntreaProxy, in OVS), not through HNS load balancers; "+
		"crossproxy has nothing to program on this node: keep it off Antrea's Windows nodes (the DaemonSet's nodeSelector or affinity) "+
		"and leave Service proxying to Antrea", ErrInvalid, what)
}

// findNetwork settles the HNS network, in this order:
//  1. the one named (flag --network-name, KUBE_NETWORK): never looked for again;
//  2. the one the node's CNI configuration names (sdnoverlay, win-overlay
//     and win-bridge look their network up by the configuration's name,
//     flannel names its network as its configuration does, flannel.4096 in
//     sig-windows-tools' layout, and Calico's is "Calico"), once HNS has it.
//     While the configuration names a network HNS does not have yet, the
//     sync waits for it (ErrNotFound, retried): never another network;
//  3. with no CNI configuration, the only Overlay or L2Bridge network that
//     is not the boot-time External network.
//
// The CNI configuration is read again (Config.CNISource) on every call until
// a network is settled from it and on every full sync after that, so a
// HostProcess CNI installed after crossproxy is seen and a network found by
// the fallback gives way to the one a configuration written later names.
// Several candidates are a configuration error naming them; none yet (the
// CNI makes its network when it starts) is retried by the next sync.
func (b *Backend) findNetwork(ctx context.Context, full bool) error {
	if b.explicitNetwork {
		if b.networkFrom == "" {
			b.networkFrom = "the configuration (flag --network-name or KUBE_NETWORK)"
		}
		return nil
	}
	if b.cfg.NetworkName == "" || b.networkByFallback || full {
		b.reloadCNI()
	}
	if c := b.cfg.CNI; c != nil && strings.EqualFold(c.Type, "antrea") {
		return errAntrea("the CNI configuration " + c.File + " is Antrea's")
	}
	if c := b.cfg.CNI; c != nil && c.Name != "" {
		if strings.EqualFold(b.cfg.NetworkName, c.Name) && !b.networkByFallback {
			return nil
		}
		_, err := b.hns.GetNetwork(ctx, c.Name)
		switch {
		case err == nil:
			if b.cfg.NetworkName != "" && !strings.EqualFold(b.cfg.NetworkName, c.Name) {
				b.log.WithFields(logrus.Fields{"was": b.cfg.NetworkName, "now": c.Name}).Warn("the CNI configuration names another HNS network: programming that one")
			}
			b.networkByFallback = false
			b.useNetworkName(c.Name, "the CNI configuration "+c.File)
			return nil
		case !errors.Is(err, ErrNotFound):
			return fmt.Errorf("hns: find the network of the CNI configuration %s: %w", c.File, err)
		case b.cfg.NetworkName != "" && !b.networkByFallback:
			// The configuration changed to a network HNS lacks: keep the
			// one in use until the new one exists.
			b.log.WithFields(logrus.Fields{"network": c.Name, "inUse": b.cfg.NetworkName}).Warn("the CNI configuration names an HNS network that does not exist (yet): keeping the one in use")
			return nil
		}
		return fmt.Errorf("hns: waiting for the HNS network %q the CNI configuration %s names (the CNI makes it when it starts; "+
			"no other network is used meanwhile, the boot-time %q least of all): %w", c.Name, c.File, externalNetworkName, ErrNotFound)
	}
	if b.cfg.NetworkName != "" {
		return nil // found by the fallback; no CNI configuration yet
	}
	nws, err := b.hns.ListNetworks(ctx)
	if err != nil {
		return fmt.Errorf("hns: find the network (no --network-name): %w", err)
	}
	var all, fit []string
	for _, nw := range nws {
		all = append(all, fmt.Sprintf("%s (%s)", nw.Name, nw.Type))
		if strings.EqualFold(nw.Name, antreaNetworkName) {
			return errAntrea(fmt.Sprintf("HNS has Antrea's network %q (%s)", nw.Name, nw.Type))
		}
		if strings.EqualFold(nw.Name, externalNetworkName) {
			continue
		}
		if nw.isOverlay() || strings.EqualFold(string(nw.Type), string(NetworkL2Bridge)) {
			fit = append(fit, nw.Name)
		}
	}
	switch len(fit) {
	case 1:
		b.networkByFallback = true
		b.useNetworkName(fit[0], "the only Overlay or L2Bridge network on the node besides "+externalNetworkName+" (no CNI configuration found)")
		return nil
	case 0:
		return fmt.Errorf("hns: no HNS network named (flag --network-name, KUBE_NETWORK), no CNI configuration found, and no Overlay or L2Bridge network "+
			"on the node yet besides the boot-time %q (networks: %s); the CNI makes it when it starts: %w", externalNetworkName, orNone(all), ErrNotFound)
	}
	return fmt.Errorf("hns: %w: no HNS network named (flag --network-name, KUBE_NETWORK), no CNI configuration found, and %d Overlay or L2Bridge networks on the node: %s; "+
		"name one with --network-name", ErrInvalid, len(fit), strings.Join(fit, ", "))
}

// reloadCNI reads the node's CNI configuration again through
// Config.CNISource, when there is one: a configuration that appeared or
// changed since replaces the one in use, with its IPAM (a reservation
// already made keeps the store it was made in, see ipam).
func (b *Backend) reloadCNI() {
	if b.cfg.CNISource == nil {
		return
	}
	c, ipam := b.cfg.CNISource()
	if c == nil || c.same(b.cfg.CNI) {
		return
	}
	b.log.WithFields(logrus.Fields{"cni": c.String(), "was": b.cfg.CNI.String()}).Info("CNI configuration read")
	b.cfg.CNI = c
	if ipam != nil {
		b.cfg.IPAM = ipam
	}
}

// useNetworkName settles the network found and says how.
func (b *Backend) useNetworkName(name, from string) {
	if b.cfg.NetworkName != "" && !strings.EqualFold(b.cfg.NetworkName, name) {
		b.synced = false // the next sync reads the new network whole
	}
	b.cfg.NetworkName, b.networkFrom = name, from
	b.log.WithFields(logrus.Fields{"network": name, "foundBy": from}).Info("HNS network found")
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
