package hns

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"
	current "github.com/containernetworking/cni/pkg/types/100"
)

// IPAM reserves the overlay source VIP from this node's pod CIDR the way the
// network's CNI reserves pod addresses, so the CNI never gives it to a pod.
type IPAM interface {
	// Reserve returns an address of subnet held for crossproxy (the backend
	// records it in its ledger and asks again only when it has none).
	Reserve(ctx context.Context, subnet netip.Prefix) (netip.Addr, error)
	// Release gives crossproxy's reservation in subnet back.
	Release(ctx context.Context, subnet netip.Prefix) error
}

// sourceVIPContainerID is the container id crossproxy's reservation is held
// under in the IPAM plugin's store (host-local writes it next to the address),
// so an operator reading the store sees whose address it is.
const sourceVIPContainerID = "crossproxy-source-vip"

// defaultIPAMPlugin is the IPAM plugin the overlay CNIs on Windows use
// (flannel's and Calico's VXLAN setups): host-local.
const defaultIPAMPlugin = "host-local"

// CNIIPAM runs a CNI IPAM plugin binary (host-local) through the CNI
// library's plugin invocation, as a container runtime would for a pod: ADD
// with crossproxy's container id reserves, DEL releases. host-local keeps its
// reservations per network name in its data directory, so Network and DataDir
// must be the ones the network's CNI configuration gives the pods' IPAM.
type CNIIPAM struct {
	// Plugin is the IPAM plugin's name (defaultIPAMPlugin if empty).
	Plugin string
	// BinDirs are where the plugin binaries are (CNI_PATH).
	BinDirs []string
	// Network is the CNI network name the pods' reservations are kept under.
	Network string
	// DataDir is host-local's dataDir; empty: the plugin's default.
	DataDir string
	// Timeout bounds one plugin run (30 s if 0).
	Timeout time.Duration
}

// netconf is the network configuration the plugin reads on stdin: only the
// ipam section matters to an IPAM plugin called directly.
func (c CNIIPAM) netconf(subnet netip.Prefix) ([]byte, error) {
	type rangeEntry struct {
		Subnet string `json:"subnet"`
	}
	ipam := map[string]any{
		"type":   c.plugin(),
		"ranges": [][]rangeEntry{{{Subnet: subnet.String()}}},
	}
	if c.DataDir != "" {
		ipam["dataDir"] = c.DataDir
	}
	return json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": c.Network, "ipam": ipam})
}

func (c CNIIPAM) plugin() string {
	if c.Plugin == "" {
		return defaultIPAMPlugin
	}
	return c.Plugin
}

// run invokes the plugin with command (ADD or DEL).
func (c CNIIPAM) run(ctx context.Context, command string, subnet netip.Prefix, result bool) (*current.Result, error) {
	if c.Network == "" {
		return nil, fmt.Errorf("%s %s: %w: no CNI network name", c.plugin(), command, ErrInvalid)
	}
	path, err := invoke.FindInPath(c.plugin(), c.BinDirs)
	if err != nil {
		return nil, fmt.Errorf("find the IPAM plugin %q in %v: %w", c.plugin(), c.BinDirs, err)
	}
	conf, err := c.netconf(subnet)
	if err != nil {
		return nil, fmt.Errorf("IPAM network configuration: %w", err)
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// The plugin needs no network namespace; CNI requires the variable for ADD.
	args := &invoke.Args{Command: command, ContainerID: sourceVIPContainerID, NetNS: "none", IfName: "eth0", Path: joinPaths(c.BinDirs)}
	if !result {
		if err := invoke.ExecPluginWithoutResult(ctx, path, conf, args, nil); err != nil {
			return nil, fmt.Errorf("%s %s (network %q, subnet %s): %w", c.plugin(), command, c.Network, subnet, err)
		}
		return nil, nil
	}
	raw, err := invoke.ExecPluginWithResult(ctx, path, conf, args, nil)
	if err != nil {
		return nil, fmt.Errorf("%s %s (network %q, subnet %s): %w", c.plugin(), command, c.Network, subnet, err)
	}
	res, err := current.NewResultFromResult(raw)
	if err != nil {
		return nil, fmt.Errorf("%s %s: read its result: %w", c.plugin(), command, err)
	}
	return res, nil
}

// Reserve implements IPAM. host-local refuses a second ADD for one
// container id; a reservation left by an earlier run whose ledger is lost is
// therefore released and made again (the address may change; no pod has it).
func (c CNIIPAM) Reserve(ctx context.Context, subnet netip.Prefix) (netip.Addr, error) {
	res, err := c.run(ctx, "ADD", subnet, true)
	if err != nil {
		if c.Release(ctx, subnet) != nil {
			return netip.Addr{}, err
		}
		if res, err = c.run(ctx, "ADD", subnet, true); err != nil {
			return netip.Addr{}, err
		}
	}
	for _, ipc := range res.IPs {
		if a, ok := netip.AddrFromSlice(ipc.Address.IP); ok && subnet.Contains(a.Unmap()) {
			return a.Unmap(), nil
		}
	}
	return netip.Addr{}, fmt.Errorf("%s ADD (subnet %s) returned no address of the subnet: %v", c.plugin(), subnet, res.IPs)
}

// Release implements IPAM.
func (c CNIIPAM) Release(ctx context.Context, subnet netip.Prefix) error {
	_, err := c.run(ctx, "DEL", subnet, false)
	return err
}

// joinPaths joins directories as CNI_PATH lists them (the OS's list separator).
func joinPaths(dirs []string) string {
	return strings.Join(dirs, string(os.PathListSeparator))
}
