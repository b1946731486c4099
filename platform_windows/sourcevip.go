package hns

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/crossproxy/crossproxy/core"
)

// SourceVIPAnnotation on a Node gives that node's overlay source VIP
// explicitly (cmd reads it at start); it wins over an existing endpoint and
// an IPAM reservation, and loses to the flag and the config file.
const SourceVIPAnnotation = "crossproxy.io/source-vip"

// calicoSourceVIPEndpoint is the local endpoint Calico's Windows install
// makes for the node; its address serves as the source VIP there.
const calicoSourceVIPEndpoint = "Calico_ep"

// chooseSourceVIP settles this node's overlay source VIP, in this order:
//  1. the explicit one (flag, config file, Node annotation), which must lie
//     in the node's pod CIDR when the Node has one;
//  2. the one chosen before by this process;
//  3. a source-VIP endpoint already on the network in the pod CIDR:
//     crossproxy's, kube-proxy's (a local endpoint with the host's MAC) or
//     Calico's Calico_ep, so a restart or a move from kube-proxy keeps it;
//  4. the reservation recorded in the ledger (a restart whose endpoint is gone);
//  5. a new reservation from the pod CIDR through the network's IPAM plugin,
//     recorded in the ledger so cleanup releases it.
//
// It logs the address and the path that chose it whenever that changes.
func (b *Backend) chooseSourceVIP(ctx context.Context, state *core.NodeState, nodeIP netip.Addr) error {
	var cidrs []netip.Prefix
	for _, p := range state.Node.PodCIDRs {
		if p.Addr().Is4() == nodeIP.Is4() {
			cidrs = append(cidrs, p)
		}
	}
	inPodCIDR := func(a netip.Addr) bool {
		return len(cidrs) == 0 || slices.ContainsFunc(cidrs, func(p netip.Prefix) bool { return p.Contains(a) })
	}
	vip, from := netip.Addr{}, ""
	switch {
	case b.cfg.SourceVIP.IsValid():
		origin := cmp.Or(b.cfg.SourceVIPOrigin, "configuration")
		if !inPodCIDR(b.cfg.SourceVIP) {
			return fmt.Errorf("%w: the source VIP %s (%s) is outside the pod CIDR %s of Node %s: HNS would source-NAT to an address "+
				"the node's pods are not reached on; give an address of the node's own pod subnet", ErrInvalid, b.cfg.SourceVIP, origin, prefixes(cidrs), state.Node.Name)
		}
		vip, from = b.cfg.SourceVIP, origin
	case b.sourceVIP.IsValid() && inPodCIDR(b.sourceVIP):
		vip, from = b.sourceVIP, b.sourceVIPFrom
	default:
		if ep, ok := b.existingSourceVIPEndpoint(inPodCIDR); ok {
			vip, from = ep.IP, fmt.Sprintf("the existing HNS endpoint %q", ep.Name)
			if ep.Name == "" {
				from = "the existing HNS endpoint with the host's MAC (kube-proxy's source-VIP endpoint)"
			}
			break
		}
		var err error
		if vip, from, err = b.reserveSourceVIP(ctx, state, cidrs); err != nil {
			return err
		}
	}
	if vip != b.sourceVIP || from != b.sourceVIPFrom {
		b.log.WithFields(logrus.Fields{"sourceVIP": vip, "chosenBy": from}).Info("overlay source VIP chosen")
	}
	b.sourceVIP, b.sourceVIPFrom = vip, from
	return nil
}

// existingSourceVIPEndpoint finds a source-VIP endpoint some proxy already
// made on the network: a local endpoint in the pod CIDR named as crossproxy's
// or Calico's, or carrying the host's MAC (kube-proxy's has no name; the
// CNI's pod endpoints never have the host's MAC). crossproxy's wins, then the
// lowest address.
func (b *Backend) existingSourceVIPEndpoint(inPodCIDR func(netip.Addr) bool) (Endpoint, bool) {
	var found []Endpoint
	for _, ep := range b.byIP {
		if ep.Remote || !inPodCIDR(ep.IP) {
			continue
		}
		if ep.Name == sourceVIPEndpointName || ep.Name == calicoSourceVIPEndpoint || (b.hostMAC != "" && sameMAC(ep.MAC, b.hostMAC)) {
			found = append(found, ep)
		}
	}
	slices.SortFunc(found, func(x, y Endpoint) int {
		if (x.Name == sourceVIPEndpointName) != (y.Name == sourceVIPEndpointName) {
			if x.Name == sourceVIPEndpointName {
				return -1
			}
			return 1
		}
		return x.IP.Compare(y.IP)
	})
	if len(found) == 0 {
		return Endpoint{}, false
	}
	return found[0], true
}

// reserveSourceVIP takes the ledger's reservation or makes one through the
// IPAM plugin from the node's pod CIDR of the node address's family.
func (b *Backend) reserveSourceVIP(ctx context.Context, state *core.NodeState, cidrs []netip.Prefix) (netip.Addr, string, error) {
	if len(cidrs) == 0 {
		return netip.Addr{}, "", fmt.Errorf("%w: no source VIP (flag --source-vip), none in the config file (winkernel.sourceVip) or the Node annotation %s, "+
			"no source-VIP endpoint on the network, and Node %s has no spec.podCIDRs of its address family to reserve one from", ErrInvalid, SourceVIPAnnotation, state.Node.Name)
	}
	if r := b.ledger.SourceVIP; r != nil && slices.Contains(cidrs, r.Subnet) && r.Subnet.Contains(r.Address) {
		return r.Address, fmt.Sprintf("the reservation recorded in the ledger (pod CIDR %s)", r.Subnet), nil
	}
	ipam := b.ipam(nil)
	if ipam == nil {
		return netip.Addr{}, "", fmt.Errorf("%w: no source VIP (flag --source-vip), none in the config file (winkernel.sourceVip) or the Node annotation %s, "+
			"no source-VIP endpoint on the network, and no IPAM plugin to reserve one from pod CIDR %s", ErrInvalid, SourceVIPAnnotation, cidrs[0])
	}
	if old := b.ledger.SourceVIP; old != nil {
		// The Node's pod CIDR changed: give the old reservation back first.
		if err := b.ipam(old).Release(ctx, old.Subnet); err != nil {
			b.log.WithError(err).WithField("subnet", old.Subnet).Warn("release the source VIP reserved in a former pod CIDR")
		}
		b.ledger.SourceVIP = nil
	}
	subnet := cidrs[0]
	a, err := ipam.Reserve(ctx, subnet)
	if err != nil {
		return netip.Addr{}, "", fmt.Errorf("reserve a source VIP from pod CIDR %s through the IPAM plugin: %w", subnet, err)
	}
	if !subnet.Contains(a) {
		return netip.Addr{}, "", errors.Join(fmt.Errorf("%w: the IPAM plugin reserved %s, outside pod CIDR %s", ErrInvalid, a, subnet), ipam.Release(ctx, subnet))
	}
	r := &reservation{Address: a, Subnet: subnet}
	if c, ok := ipam.(CNIIPAM); ok {
		r.Network, r.DataDir = c.Network, c.DataDir
	}
	b.ledger.SourceVIP = r
	if err := b.writeLedger(); err != nil {
		return netip.Addr{}, "", errors.Join(err, ipam.Release(ctx, subnet))
	}
	return a, fmt.Sprintf("a new reservation from pod CIDR %s through the IPAM plugin", subnet), nil
}

// releaseSourceVIP gives the ledger's reservation back (cleanup).
func (b *Backend) releaseSourceVIP(ctx context.Context) error {
	r := b.ledger.SourceVIP
	if r == nil {
		return nil
	}
	ipam := b.ipam(r)
	if ipam == nil {
		return fmt.Errorf("release the source VIP %s reserved in pod CIDR %s: no IPAM plugin configured", r.Address, r.Subnet)
	}
	if err := ipam.Release(ctx, r.Subnet); err != nil {
		return fmt.Errorf("release the source VIP %s reserved in pod CIDR %s: %w", r.Address, r.Subnet, err)
	}
	b.log.WithFields(logrus.Fields{"sourceVIP": r.Address, "subnet": r.Subnet}).Info("source VIP reservation released")
	b.ledger.SourceVIP = nil
	return nil
}

// ipam is the configured IPAM; a CNIIPAM without a network name takes the
// HNS network's, and one releasing a reservation takes the network and store
// the reservation was made in.
func (b *Backend) ipam(r *reservation) IPAM {
	c, ok := b.cfg.IPAM.(CNIIPAM)
	if !ok {
		return b.cfg.IPAM
	}
	c.Network = cmp.Or(c.Network, b.cfg.NetworkName, b.ledger.Network)
	if r != nil && r.Network != "" {
		c.Network, c.DataDir = r.Network, r.DataDir
	}
	return c
}

// sameMAC compares MACs as HNS and Go write them (dashes or colons, any case).
func sameMAC(a, b string) bool {
	norm := func(s string) string { return strings.ToLower(strings.ReplaceAll(s, ":", "-")) }
	return norm(a) == norm(b)
}
