package hns

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
)

// sigWindowsToolsFlannel is sig-windows-tools' HostProcess flannel
// configuration as its start.ps1 writes it to C:\etc\cni\net.d\10-flannel.conf
// (hostprocess/flannel/flanneld/flannel-overlay.yml, the policies filled in):
// flannel's meta plugin, cniVersion 0.3.0 (0.2.0 is Microsoft SDN's and
// the old kube-proxy start script's source-VIP request, not flannel's),
// delegating to sdnoverlay; flannel names its HNS network flannel.<VNI>
// (pkg/backend/vxlan/vxlan_windows.go). sig-windows-tools' earlier wins-based
// kube-flannel.yml cni-conf.json has the same name and cniVersion 0.3.0,
// delegating to win-overlay.
const sigWindowsToolsFlannel = `{
  "name": "flannel.4096",
  "cniVersion": "0.3.0",
  "type": "flannel",
  "capabilities": {"portMappings": true, "dns": true},
  "delegate": {
    "type": "sdnoverlay",
    "AdditionalArgs": [
      {"Name": "EndpointPolicy", "Value": {"Type": "OutBoundNAT", "Settings": {"Exceptions": ["10.96.0.0/12", "10.244.0.0/16"]}}},
      {"Name": "EndpointPolicy", "Value": {"Type": "SDNROUTE", "Settings": {"DestinationPrefix": "10.96.0.0/12", "NeedEncap": true}}},
      {"Name": "EndpointPolicy", "Value": {"Type": "ProviderAddress", "Settings": {"ProviderAddress": "192.168.0.11"}}}
    ]
  }
}`

// sdnFlannelOverlay is flannel's overlay layout from Microsoft's SDN scripts
// (microsoft/SDN Kubernetes/flannel/overlay: C:\k\cni\config\cni.conf, the
// network named vxlan0 in flannel's net-conf.json), delegating to win-overlay.
const sdnFlannelOverlay = `{
  "cniVersion": "0.2.0",
  "name": "vxlan0",
  "type": "flannel",
  "delegate": {"type": "win-overlay", "dns": {"Nameservers": ["10.96.0.10"]}, "Policies": [{"Name": "EndpointPolicy", "Value": {"Type": "OutBoundNAT"}}]}
}`

// calicoVXLAN is Calico for Windows' configuration with calico-ipam
// (node/windows-packaging/CalicoWindows/cni.conf.template, filled in).
const calicoVXLAN = `{
  "name": "Calico",
  "windows_use_single_network": true,
  "cniVersion": "0.3.1",
  "type": "calico",
  "mode": "vxlan",
  "vxlan_mac_prefix": "0E-2A",
  "vxlan_vni": 4096,
  "policy": {"type": "k8s"},
  "ipam": {"type": "calico-ipam", "subnet": "usePodCidr"}
}`

// winOverlayList is a .conflist with host-local given explicitly, its store
// in a dataDir of its own.
const winOverlayList = `{
  "cniVersion": "1.0.0",
  "name": "overlay0",
  "plugins": [
    {"type": "win-overlay", "ipam": {"type": "host-local", "dataDir": "C:\\var\\lib\\cni\\overlay0", "ranges": [[{"subnet": "10.244.1.0/24"}]]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}`

// tempDir is t.TempDir that also works under Wine 8, whose os.RemoveAll
// fails (test/mk/windows.mk): what is left there is the Wine prefix's.
func tempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "crossproxy-cni")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func writeConf(t *testing.T, dir, name, body string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReadCNIConfig: the first directory holding a configuration wins, and
// in it the first file in name order that parses (as containerd picks it);
// flannel's gives host-local by default, Calico's its calico-ipam, a
// .conflist its first plugin's IPAM; none found names the directories.
func TestReadCNIConfig(t *testing.T) {
	root := tempDir(t)
	etc, containerd, k := filepath.Join(root, "etc-cni-net.d"), filepath.Join(root, "containerd-conf"), filepath.Join(root, "k-cni-config")
	writeConf(t, containerd, "0-containerd-nat.json", `{"cniVersion": "0.2.0", "name": "nat", "type": "nat", "master": "Ethernet"}`)
	writeConf(t, etc, "05-broken.conf", `{"name": `)
	writeConf(t, etc, "10-flannel.conf", sigWindowsToolsFlannel)
	writeConf(t, etc, "20-other.conf", calicoVXLAN)
	c, err := ReadCNIConfig([]string{filepath.Join(root, "missing"), etc, containerd, k})
	if err != nil {
		t.Fatal(err)
	}
	if c.File != filepath.Join(etc, "10-flannel.conf") || c.Name != "flannel.4096" || c.Type != "flannel" || c.IPAMType != "host-local" || c.CNIVersion != "0.3.0" || c.DataDir != "" {
		t.Fatalf("sig-windows-tools' flannel: %s", c)
	}
	writeConf(t, k, "cni.conf", calicoVXLAN)
	if c, err := ReadCNIConfig([]string{k}); err != nil || c.Name != "Calico" || c.IPAMType != "calico-ipam" || len(c.Subnets) != 0 {
		t.Fatalf("Calico: %s %v", c, err)
	}
	list := filepath.Join(root, "list")
	writeConf(t, list, "10-overlay.conflist", winOverlayList)
	c, err = ReadCNIConfig([]string{list})
	if err != nil || c.Name != "overlay0" || c.Type != "win-overlay" || c.IPAMType != "host-local" || c.DataDir != `C:\var\lib\cni\overlay0` ||
		len(c.Subnets) != 1 || c.Subnets[0] != podCIDR || c.CNIVersion != "1.0.0" {
		t.Fatalf("conflist: %s %v", c, err)
	}
	_, err = ReadCNIConfig([]string{filepath.Join(root, "missing")})
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "no CNI configuration in "+filepath.Join(root, "missing")) {
		t.Fatalf("no configuration: %v", err)
	}
}

// TestNetworkFound: with no network named, the CNI configuration's network
// is used when HNS has it, and while it does not, none (the sync waits: the
// boot-time External network that Calico's node-service.ps1, Microsoft
// SDN's helper.psm1 CreateExternalNetwork and sig-windows-tools' flannel
// setup.ps1 make before the CNI's network is never taken). Without a CNI
// configuration, the only Overlay or L2Bridge network besides External (nat
// does not count); several candidates are refused naming them and the flag;
// none yet is an error the next sync retries (not ErrInvalid). Antrea's
// node is refused naming Antrea's own proxy.
func TestNetworkFound(t *testing.T) {
	ctx := context.Background()
	nat := Network{ID: "nat-id", Name: "nat", Type: "NAT"}
	// External as sig-windows-tools' flannel setup.ps1 and Calico's
	// node-service.ps1 make it: Overlay, 192.168.255.0/30, VSID 9999.
	external := Network{ID: "ext-id", Name: "External", Type: NetworkOverlay, Subnets: []netip.Prefix{netip.MustParsePrefix("192.168.255.0/30")}}
	flannel := &CNIConfig{File: `C:\etc\cni\net.d\10-flannel.conf`, Name: "flannel.4096", Type: "flannel", IPAMType: "host-local"}
	calico := &CNIConfig{File: `C:\etc\cni\net.d\10-calico.conf`, Name: "Calico", Type: "calico", IPAMType: "calico-ipam"}
	antrea := &CNIConfig{File: `C:\etc\cni\net.d\10-antrea.conflist`, Name: "antrea", Type: "antrea", IPAMType: "host-local"}
	for _, c := range []struct {
		name    string
		network Network
		others  []Network
		cni     *CNIConfig
		want    string
		wantErr error
	}{
		{"the CNI configuration's", Network{Name: "flannel.4096", Type: NetworkOverlay}, []Network{nat, external, {ID: "x", Name: "vxlan1", Type: NetworkOverlay}}, flannel,
			`the CNI configuration C:\etc\cni\net.d\10-flannel.conf`, nil},
		{"the CNI configuration's, not there yet", Network{Name: "vxlan0", Type: "overlay"}, []Network{nat}, flannel,
			`waiting for the HNS network "flannel.4096" the CNI configuration C:\etc\cni\net.d\10-flannel.conf names`, ErrNotFound},
		{"Calico at boot: only External", external, []Network{nat}, calico,
			`waiting for the HNS network "Calico" the CNI configuration C:\etc\cni\net.d\10-calico.conf names`, ErrNotFound},
		{"no CNI configuration at boot: only External", external, []Network{nat}, nil,
			`no Overlay or L2Bridge network on the node yet besides the boot-time "External" (networks: External (Overlay), nat (NAT))`, ErrNotFound},
		{"the only L2Bridge, no CNI configuration", Network{Name: "cbr0", Type: NetworkL2Bridge}, []Network{nat, external}, nil,
			"the only Overlay or L2Bridge network on the node besides External (no CNI configuration found)", nil},
		{"two candidates", Network{Name: "vxlan0", Type: NetworkOverlay}, []Network{{ID: "x", Name: "cbr0", Type: NetworkL2Bridge}}, nil,
			"2 Overlay or L2Bridge networks on the node: vxlan0, cbr0; name one with --network-name", ErrInvalid},
		{"none yet", nat, nil, nil, "no Overlay or L2Bridge network on the node yet besides the boot-time \"External\" (networks: nat (NAT))", ErrNotFound},
		// Antrea's agent makes a Transparent network with the OVS extension
		// (antrea-io/antrea pkg/agent/util, LocalHNSNetwork "antrea-hnsnetwork").
		{"Antrea's network", Network{Name: "antrea-hnsnetwork", Type: "Transparent"}, []Network{nat}, nil, "AntreaProxy", ErrInvalid},
		{"Antrea's CNI configuration", Network{Name: "antrea-hnsnetwork", Type: "Transparent"}, []Network{nat}, antrea, "AntreaProxy", ErrInvalid},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := NewFake(c.network, AllFeatures())
			for _, o := range c.others {
				f.AddNetwork(o)
			}
			log := logrus.New()
			log.SetOutput(testWriter{t})
			b, err := New(f, Config{Ledger: &MemoryLedger{}, CNI: c.cni}, log)
			if err != nil {
				t.Fatal(err)
			}
			// Preflight finds the network (and then refuses an overlay one
			// without the node's address, which does not matter here).
			err = b.Preflight(ctx)
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("sync: %v, want %v naming %q", err, c.wantErr, c.want)
				}
				return
			}
			if (err != nil && !errors.Is(err, ErrInvalid)) || b.cfg.NetworkName != c.network.Name || !strings.Contains(b.networkFrom, c.want) {
				t.Fatalf("preflight: %v; network %q found by %q, want %q by %q", err, b.cfg.NetworkName, b.networkFrom, c.network.Name, c.want)
			}
		})
	}
}
