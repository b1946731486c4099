package hns

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/crossproxy/crossproxy/core"
)

// SourceVIPAnnotation on a Node gives that node's overlay source VIP
// explicitly (cmd reads it at start); it wins over an existing endpoint and
// an IPAM reservation, and loses to the flag and the config file.
const SourceVIPAnnotation = "crossproxy.io/source-vip"

// calicoSourceVIPEndpoint is the host endpoint calico-node makes on its
// VXLAN network "Calico"; Calico's own kube-proxy start script
// (projectcalico/calico node/windows-packaging/CalicoWindows/kubernetes/
// kube-proxy-service.ps1) waits for it and passes its address as
// --source-vip. Its address comes from Calico's IP block, which calico-ipam
// keeps from pods.
const calicoSourceVIPEndpoint = "Calico_ep"

// calicoNetworkName is the HNS network Calico's Windows install makes.
const calicoNetworkName = "Calico"

// defaultCalicoWait bounds how long an overlay node on Calico's network
// waits for calico-node's Calico_ep before reserving a source VIP itself:
// calico-node makes it at start, so minutes mean it is not coming.
const defaultCalicoWait = 2 * time.Minute

// errWaitingForCalico fails a sync while Calico_ep is awaited: nothing is
// programmed (an overlay load balancer needs its source VIP) and the runner
// retries.
var errWaitingForCalico = errors.New("waiting for Calico's host endpoint")

// chooseSourceVIP settles this node's overlay source VIP within the
// network's own subnets (Network.Subnets; the Node's spec.podCIDRs only when
// HNS reports none), in this order:
//  1. the explicit one (flag, config file, Node annotation), which must lie
//     in those subnets (on Calico's network only when HNS reports them:
//     the Node's pod CIDR is not Calico's block);
//  2. on Calico's network, calico-node's Calico_ep once it exists, even
//     over an address chosen before it appeared. In VXLAN mode calico-node
//     makes it a remote endpoint (IsRemoteEndpoint, its provider address
//     the node's management IP, the host's MAC) at the second address of
//     the node's block, through the V1 API (projectcalico/calico
//     cni-plugin/pkg/dataplane/windows/dataplane_windows.go
//     createAndAttachVxlanHostEP); in BGP mode (L2Bridge) a local one
//     (CreateAndAttachHostEP). Either is used as it is: nothing is reserved
//     and no endpoint made. One a V2 listing does not show (V1-created,
//     kubernetes #110591) is found by name;
//  3. the one chosen before by this process;
//  4. a source-VIP endpoint already on the network in those subnets:
//     crossproxy's, kube-proxy's (a local endpoint with the host's MAC) or
//     Calico's, so a restart or a move from kube-proxy keeps it;
//  5. on Calico's network, nothing until Calico_ep appears or CalicoWait has
//     passed (the sync fails with errWaitingForCalico meanwhile);
//  6. the reservation recorded in the ledger (a restart whose endpoint is gone);
//  7. a new reservation from those subnets through the network's IPAM
//     plugin, recorded in the ledger so cleanup releases it.
//
// It logs the address and the path that chose it whenever that changes.
func (b *Backend) chooseSourceVIP(ctx context.Context, state *core.NodeState, nodeIP netip.Addr) error {
	cidrs, where := b.vipSubnets(state, nodeIP)
	inSubnets := func(a netip.Addr) bool {
		return len(cidrs) == 0 || slices.ContainsFunc(cidrs, func(p netip.Prefix) bool { return p.Contains(a) })
	}
	// Calico's block is the network's subnet; without HNS reporting it the
	// Node's pod CIDR stands in, which calico-ipam does not use.
	calicoLoose := b.isCalico() && where.kind != subnetOfNetwork
	calico, haveCalico, err := b.calicoEndpoint(ctx, func(a netip.Addr) bool { return calicoLoose || inSubnets(a) })
	if err != nil {
		return err
	}
	vip, from := netip.Addr{}, ""
	switch {
	case b.cfg.SourceVIP.IsValid():
		origin := cmp.Or(b.cfg.SourceVIPOrigin, "configuration")
		if !inSubnets(b.cfg.SourceVIP) && !calicoLoose {
			return fmt.Errorf("%w: the source VIP %s (%s) is outside the %s: HNS would source-NAT to an address "+
				"the node's pods are not reached on; give an address of the node's own pod subnet", ErrInvalid, b.cfg.SourceVIP, origin, where.at(prefixes(cidrs)))
		}
		vip, from = b.cfg.SourceVIP, origin
	case haveCalico:
		kind := "local"
		if calico.Remote {
			kind = "remote, Calico's VXLAN mode"
		}
		vip, from = calico.IP, fmt.Sprintf("the existing HNS endpoint %q (calico-node's, %s)", calico.Name, kind)
	case b.sourceVIP.IsValid() && inSubnets(b.sourceVIP):
		vip, from = b.sourceVIP, b.sourceVIPFrom
	default:
		if ep, ok := b.existingSourceVIPEndpoint(inSubnets); ok {
			vip, from = ep.IP, fmt.Sprintf("the existing HNS endpoint %q", ep.Name)
			if ep.Name == "" {
				from = "the existing HNS endpoint with the host's MAC (kube-proxy's source-VIP endpoint)"
			}
			break
		}
		if err := b.awaitCalico(); err != nil {
			return err
		}
		var err error
		if vip, from, err = b.reserveSourceVIP(ctx, state, cidrs, where); err != nil {
			return err
		}
	}
	if vip != b.sourceVIP || from != b.sourceVIPFrom {
		b.log.WithFields(logrus.Fields{"sourceVIP": vip, "chosenBy": from, "subnets": where.at(prefixes(cidrs))}).Info("overlay source VIP chosen")
	}
	b.sourceVIP, b.sourceVIPFrom = vip, from
	return nil
}

// subnetSource names whose subnets a source VIP was checked against, for
// errors and logs: "pod CIDR 10.244.1.0/24 of Node win-1".
type subnetSource struct{ kind, owner string }

// subnetOfNetwork is the subnetSource kind of the HNS network's own subnets.
const subnetOfNetwork = "subnet"

func (s subnetSource) at(prefixes string) string { return s.kind + " " + prefixes + " of " + s.owner }

// vipSubnets are the subnets of the node address's family a source VIP must
// lie in, and where they come from: the HNS network's own (its IPAM
// configuration), else the ranges the CNI configuration gives its IPAM,
// else the Node's spec.podCIDRs. With calico-ipam the
// network's subnet is Calico's IP block, outside the Node's pod CIDR.
func (b *Backend) vipSubnets(state *core.NodeState, nodeIP netip.Addr) ([]netip.Prefix, subnetSource) {
	var cidrs []netip.Prefix
	for _, p := range b.network.Subnets {
		if p.Addr().Is4() == nodeIP.Is4() {
			cidrs = append(cidrs, p)
		}
	}
	if len(cidrs) > 0 {
		return cidrs, subnetSource{subnetOfNetwork, fmt.Sprintf("HNS network %q", b.network.Name)}
	}
	if c := b.cfg.CNI; c != nil {
		for _, p := range c.Subnets {
			if p.Addr().Is4() == nodeIP.Is4() {
				cidrs = append(cidrs, p)
			}
		}
		if len(cidrs) > 0 {
			return cidrs, subnetSource{"range", "the CNI configuration " + c.File}
		}
	}
	for _, p := range state.Node.PodCIDRs {
		if p.Addr().Is4() == nodeIP.Is4() {
			cidrs = append(cidrs, p)
		}
	}
	return cidrs, subnetSource{"pod CIDR", "Node " + state.Node.Name}
}

// isCalico reports whether the network is Calico's: named as Calico's
// Windows install names it, or carrying its host endpoint's name.
func (b *Backend) isCalico() bool {
	if strings.EqualFold(b.network.Name, calicoNetworkName) {
		return true
	}
	for _, ep := range b.byIP {
		if isCalicoEndpointName(ep.Name, b.network.Name) {
			return true
		}
	}
	return b.calicoByName.IP.IsValid()
}

// isCalicoEndpointName recognises calico-node's host endpoint: "Calico_ep",
// or "<network>_ep" on a Calico network given another name.
func isCalicoEndpointName(name, network string) bool {
	return strings.EqualFold(name, calicoSourceVIPEndpoint) || (network != "" && strings.EqualFold(name, network+"_ep"))
}

// calicoEndpoint finds calico-node's host endpoint Calico_ep (or
// "<network>_ep"), local or remote, among the network's endpoints; on a
// network named Calico's where the listing shows none, by name (HNS' V1
// lookup sees what a V2 listing may hide), at most once per full sync
// (calicoLookup) while it is not there.
func (b *Backend) calicoEndpoint(ctx context.Context, fits func(netip.Addr) bool) (Endpoint, bool, error) {
	var found []Endpoint
	for _, ep := range b.byIP {
		if isCalicoEndpointName(ep.Name, b.network.Name) && fits(ep.IP) {
			found = append(found, ep)
		}
	}
	if len(found) > 0 {
		b.calicoByName = Endpoint{}
		slices.SortFunc(found, func(x, y Endpoint) int { return x.IP.Compare(y.IP) })
		return found[0], true, nil
	}
	if b.calicoLookup && strings.EqualFold(b.network.Name, calicoNetworkName) {
		b.calicoLookup = false
		was := b.calicoByName
		b.calicoByName = Endpoint{}
		for _, name := range []string{calicoSourceVIPEndpoint, b.network.Name + "_ep"} {
			ep, err := b.hns.GetEndpointByName(ctx, name)
			switch {
			case errors.Is(err, ErrNotFound):
				continue
			case err != nil:
				return Endpoint{}, false, fmt.Errorf("look up calico-node's host endpoint %q by name: %w", name, err)
			}
			if ep.IP.IsValid() && fits(ep.IP) {
				if ep == was {
					b.calicoByName = ep
					break
				}
				b.log.WithFields(logrus.Fields{"endpoint": ep.Name, "ip": ep.IP, "remote": ep.Remote}).
					Info("calico-node's host endpoint is not in HNS' V2 listing of the network (made through the V1 API); found by name")
				b.calicoByName = ep
				break
			}
		}
	}
	if b.calicoByName.IP.IsValid() {
		return b.calicoByName, true, nil
	}
	return Endpoint{}, false, nil
}

// awaitCalico holds a source-VIP reservation back on Calico's network until
// Calico_ep appears or CalicoWait has passed since the first sync that
// looked for it, logging the start and the end of the wait once each.
func (b *Backend) awaitCalico() error {
	if !b.isCalico() {
		return nil
	}
	now := b.now()
	if b.calicoWaitFrom.IsZero() {
		b.calicoWaitFrom = now
		b.log.WithFields(logrus.Fields{"network": b.network.Name, "endpoint": calicoSourceVIPEndpoint, "wait": b.cfg.CalicoWait.String()}).
			Info("Calico network without calico-node's host endpoint yet: waiting for it before reserving a source VIP")
	}
	if waited := now.Sub(b.calicoWaitFrom); waited < b.cfg.CalicoWait {
		return fmt.Errorf("%w %q on network %q (%s of %s; calico-node makes it at start): %w", errWaitingForCalico, calicoSourceVIPEndpoint,
			b.network.Name, waited.Round(time.Second), b.cfg.CalicoWait, ErrNotFound)
	}
	if !b.calicoGaveUp {
		b.calicoGaveUp = true
		b.log.WithFields(logrus.Fields{"network": b.network.Name, "endpoint": calicoSourceVIPEndpoint, "waited": b.cfg.CalicoWait.String()}).
			Warn("calico-node's host endpoint did not appear: reserving a source VIP through the IPAM plugin; Calico_ep is used once it appears")
	}
	return nil
}

// existingSourceVIPEndpoint finds a source-VIP endpoint some proxy already
// made on the network: a local endpoint in the subnets named as crossproxy's
// or Calico's, or carrying the host's MAC (kube-proxy's has no name; the
// CNI's pod endpoints never have the host's MAC). crossproxy's wins, then the
// lowest address.
func (b *Backend) existingSourceVIPEndpoint(inSubnets func(netip.Addr) bool) (Endpoint, bool) {
	var found []Endpoint
	for _, ep := range b.byIP {
		if !inSubnets(ep.IP) {
			continue
		}
		if ep.Remote && !isCalicoEndpointName(ep.Name, b.network.Name) {
			continue // only Calico's VXLAN host endpoint is remote
		}
		if ep.Name == sourceVIPEndpointName || isCalicoEndpointName(ep.Name, b.network.Name) || (b.hostMAC != "" && sameMAC(ep.MAC, b.hostMAC)) {
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
// IPAM plugin from the first subnet of the node address's family (where
// says whose subnets they are).
func (b *Backend) reserveSourceVIP(ctx context.Context, state *core.NodeState, cidrs []netip.Prefix, where subnetSource) (netip.Addr, string, error) {
	if len(cidrs) == 0 {
		return netip.Addr{}, "", fmt.Errorf("%w: no source VIP (flag --source-vip), none in the config file (winkernel.sourceVip) or the Node annotation %s, "+
			"no source-VIP endpoint on the network, HNS network %q reports no subnet, and Node %s has no spec.podCIDRs of its address family to reserve one from",
			ErrInvalid, SourceVIPAnnotation, b.network.Name, state.Node.Name)
	}
	if r := b.ledger.SourceVIP; r != nil && slices.Contains(cidrs, r.Subnet) && r.Subnet.Contains(r.Address) {
		held, err := true, error(nil)
		if ipam := b.ipam(r); ipam != nil {
			held, err = ipam.Holds(ctx, r.Subnet, r.Address)
		}
		switch {
		case err != nil:
			return netip.Addr{}, "", fmt.Errorf("check that the IPAM store still holds the source VIP %s: %w", r.Address, err)
		case held:
			return r.Address, fmt.Sprintf("the reservation recorded in the ledger (subnet %s), still held by the IPAM store", r.Subnet), nil
		}
		// The store was wiped since: the address may be a pod's now.
		b.log.WithFields(logrus.Fields{"sourceVIP": r.Address, "subnet": r.Subnet}).Warn("the IPAM store no longer holds the source VIP reserved before (wiped?): reserving anew")
		b.ledger.SourceVIP = nil
	}
	ipam := b.ipam(nil)
	if ipam == nil {
		return netip.Addr{}, "", fmt.Errorf("%w: no source VIP (flag --source-vip), none in the config file (winkernel.sourceVip) or the Node annotation %s, "+
			"no source-VIP endpoint on the network, and no IPAM plugin to reserve one from %s", ErrInvalid, SourceVIPAnnotation, where.at(cidrs[0].String()))
	}
	if old := b.ledger.SourceVIP; old != nil {
		// The subnet changed: give the old reservation back first.
		if err := b.ipam(old).Release(ctx, old.Subnet); err != nil {
			b.log.WithError(err).WithField("subnet", old.Subnet).Warn("release the source VIP reserved in a former subnet")
		}
		b.ledger.SourceVIP = nil
	}
	subnet := cidrs[0]
	a, err := ipam.Reserve(ctx, subnet)
	if err != nil {
		return netip.Addr{}, "", fmt.Errorf("reserve a source VIP from %s through the IPAM plugin: %w", where.at(subnet.String()), err)
	}
	if !subnet.Contains(a) {
		return netip.Addr{}, "", errors.Join(fmt.Errorf("%w: the IPAM plugin reserved %s, outside %s", ErrInvalid, a, subnet), ipam.Release(ctx, subnet))
	}
	r := &reservation{Address: a, Subnet: subnet}
	if c, ok := ipam.(CNIIPAM); ok {
		r.Network, r.DataDir = c.Network, c.DataDir
	}
	b.ledger.SourceVIP = r
	if err := b.writeLedger(); err != nil {
		return netip.Addr{}, "", errors.Join(err, ipam.Release(ctx, subnet))
	}
	return a, fmt.Sprintf("a new reservation from %s through the IPAM plugin", where.at(subnet.String())), nil
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
