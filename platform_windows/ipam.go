package hns

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
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
	// Holds reports whether the plugin's store still holds a for
	// crossproxy: a store wiped since the reservation (a node reinstalled,
	// the data directory cleared) would hand the address to a pod.
	Holds(ctx context.Context, subnet netip.Prefix, a netip.Addr) (bool, error)
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
	// CNIVersion is the version the node's CNI configuration speaks: used
	// when the plugin supports it, else the newest both sides know.
	CNIVersion string
	// Timeout bounds one plugin run (30 s if 0).
	Timeout time.Duration
}

// hostLocalDataDir is host-local's default dataDir
// (containernetworking/plugins plugins/ipam/host-local/backend/disk), which
// on Windows lies on the current drive (C:\var\lib\cni\networks).
const hostLocalDataDir = "/var/lib/cni/networks"

// spokenVersions are the CNI versions crossproxy can read a result of,
// newest first: host-local of plugins v0.8 speaks at most 0.4.0, earlier
// ones 0.3.1 or 0.2.0 (as sig-windows-tools' flannel configuration does).
var spokenVersions = []string{"1.1.0", "1.0.0", "0.4.0", "0.3.1", "0.3.0", "0.2.0"}

// netconf is the network configuration the plugin reads on stdin: only the
// ipam section matters to an IPAM plugin called directly.
func (c CNIIPAM) netconf(subnet netip.Prefix, version string) ([]byte, error) {
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
	return json.Marshal(map[string]any{"cniVersion": version, "name": c.Network, "ipam": ipam})
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
	if c.plugin() != defaultIPAMPlugin {
		return nil, fmt.Errorf("%w: the CNI configuration gives the pods IPAM %q, and crossproxy reserves a source VIP only through host-local: "+
			"give the source VIP with --source-vip, the config file's winkernel.sourceVip or the Node annotation %s", ErrInvalid, c.plugin(), SourceVIPAnnotation)
	}
	path, err := invoke.FindInPath(c.plugin(), c.BinDirs)
	if err != nil {
		return nil, fmt.Errorf("find the IPAM plugin %q in %v: %w", c.plugin(), c.BinDirs, err)
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	version, err := c.version(ctx, path)
	if err != nil {
		return nil, err
	}
	conf, err := c.netconf(subnet, version)
	if err != nil {
		return nil, fmt.Errorf("IPAM network configuration: %w", err)
	}
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

// version asks the plugin which CNI versions it speaks (the VERSION
// command) and picks the configuration's when the plugin has it, else the
// newest both sides know.
func (c CNIIPAM) version(ctx context.Context, path string) (string, error) {
	info, err := invoke.GetVersionInfo(ctx, path, nil)
	if err != nil {
		return "", fmt.Errorf("%s VERSION: %w", c.plugin(), err)
	}
	supported := info.SupportedVersions()
	if c.CNIVersion != "" && slices.Contains(supported, c.CNIVersion) && slices.Contains(spokenVersions, c.CNIVersion) {
		return c.CNIVersion, nil
	}
	for _, v := range spokenVersions {
		if slices.Contains(supported, v) {
			return v, nil
		}
	}
	return "", fmt.Errorf("%s speaks CNI %v, crossproxy %v: %w", c.plugin(), supported, spokenVersions, ErrInvalid)
}

// Holds implements IPAM from host-local's store: one file per address in
// dataDir/<network>, holding the container id on its first line
// (containernetworking/plugins plugins/ipam/host-local/backend/disk). A
// missing file is no error: the store no longer holds it.
func (c CNIIPAM) Holds(_ context.Context, _ netip.Prefix, a netip.Addr) (bool, error) {
	dir := c.DataDir
	if dir == "" {
		dir = hostLocalDataDir
	}
	b, err := os.ReadFile(filepath.Join(dir, c.Network, hostLocalFileName(runtime.GOOS, a)))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read host-local's store: %w", err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(first) == sourceVIPContainerID, nil
}

// hostLocalFileName is the name of the file host-local keeps a's reservation
// in on goos. On Windows host-local replaces every ':' of the name with '_'
// (its disk backend's GetEscapedPath), because ':' cannot be in a Windows file
// name. Read under its plain name, an IPv6 reservation is never found again:
// crossproxy would take it for wiped and reserve anew, perhaps another address,
// at every check. goos is a parameter so the Windows rule is tested on any OS.
func hostLocalFileName(goos string, a netip.Addr) string {
	name := a.String()
	if goos == "windows" {
		name = strings.ReplaceAll(name, ":", "_")
	}
	return name
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
