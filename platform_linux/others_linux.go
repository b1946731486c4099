package nft

import (
	"context"
	"errors"
	"fmt"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/crossproxy/crossproxy/platform"
)

var _ platform.OtherProxyDetector = (*Backend)(nil)

// kubeProxySigns are what kube-proxy leaves in nftables while it runs: its
// nftables mode's tables, and the KUBE-SERVICES chain its iptables mode
// writes through iptables-nft. (kube-proxy over iptables-legacy writes to
// x_tables, which netlink's nf_tables messages do not show.)
var kubeProxySigns = []struct {
	family       uint8
	table, chain string
	what         string
}{
	{unix.NFPROTO_IPV4, "kube-proxy", "", "nftables table ip kube-proxy"},
	{unix.NFPROTO_IPV6, "kube-proxy", "", "nftables table ip6 kube-proxy"},
	{unix.NFPROTO_IPV4, "nat", "KUBE-SERVICES", "iptables chain KUBE-SERVICES in table nat"},
	{unix.NFPROTO_IPV6, "nat", "KUBE-SERVICES", "ip6tables chain KUBE-SERVICES in table nat"},
}

// OtherProxies looks for kube-proxy's tables and chains in the backend's
// namespace: four lookups by name, whatever the size of the ruleset.
func (b *Backend) OtherProxies(ctx context.Context) ([]platform.OtherProxy, error) {
	if err := b.lockOpen(ctx); err != nil {
		return nil, err
	}
	defer b.mu.Unlock()
	var evidence []string
	for _, s := range kubeProxySigns {
		found, err := b.batches.exists(b.ns, s.family, s.table, s.chain)
		if err != nil {
			return nil, fmt.Errorf("look for %s: %w", s.what, err)
		}
		if found {
			evidence = append(evidence, s.what)
		}
	}
	if evidence == nil {
		return nil, nil
	}
	return []platform.OtherProxy{{Name: "kube-proxy", Evidence: evidence}}, nil
}

// exists reports whether a table (chain "") or a chain of a table is in the
// ruleset, by asking the kernel for it by name.
func (c *batchConn) exists(ns *netNS, family uint8, table, chain string) (bool, error) {
	ae := netlink.NewAttributeEncoder()
	msg := unix.NFT_MSG_GETTABLE
	if chain == "" {
		ae.String(unix.NFTA_TABLE_NAME, table)
	} else {
		msg = unix.NFT_MSG_GETCHAIN
		ae.String(unix.NFTA_CHAIN_TABLE, table)
		ae.String(unix.NFTA_CHAIN_NAME, chain)
	}
	attrs, err := ae.Encode()
	if err != nil {
		return false, err
	}
	_, err = c.query(ns, msg, family, false, attrs)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.ENOENT):
		return false, nil
	}
	return false, err
}
