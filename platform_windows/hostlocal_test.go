package hns

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/invoke"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/sirupsen/logrus"
)

// hostLocalBin is Debian's containernetworking-plugins (test/setup-host.sh).
const hostLocalBin = "/usr/lib/cni"

func needHostLocal(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("host-local here is the Linux plugin; Windows runs host-local.exe the same way")
	}
	if _, err := os.Stat(filepath.Join(hostLocalBin, "host-local")); err != nil {
		t.Fatalf("the host-local plugin is missing (apt-get install containernetworking-plugins; test/setup-host.sh installs it): %v", err)
	}
}

// podADD is what flannel's meta plugin makes its delegate run for a pod
// (flannel-io/cni-plugin flannel_windows.go): host-local with the node's
// subnet, under the configuration's name and cniVersion, for the pod's
// container id. It returns the pod's address.
func podADD(t *testing.T, c *CNIConfig, dataDir, container string, subnet netip.Prefix) netip.Addr {
	t.Helper()
	conf, err := json.Marshal(map[string]any{"cniVersion": c.CNIVersion, "name": c.Name,
		"ipam": map[string]any{"type": "host-local", "subnet": subnet.String(), "dataDir": dataDir}})
	if err != nil {
		t.Fatal(err)
	}
	args := &invoke.Args{Command: "ADD", ContainerID: container, NetNS: "none", IfName: "eth0", Path: hostLocalBin}
	raw, err := invoke.ExecPluginWithResult(context.Background(), filepath.Join(hostLocalBin, "host-local"), conf, args, nil)
	if err != nil {
		t.Fatalf("pod %s ADD: %v", container, err)
	}
	res, err := current.NewResultFromResult(raw)
	if err != nil || len(res.IPs) == 0 {
		t.Fatalf("pod %s ADD result %v: %v", container, raw, err)
	}
	a, _ := netip.AddrFromSlice(res.IPs[0].Address.IP)
	return a.Unmap()
}

// TestHostLocalLayouts runs the real host-local plugin through the CNI
// configuration of two real layouts, with no network name and no IPAM flag
// given: sig-windows-tools' HostProcess flannel (C:\etc\cni\net.d\10-flannel.conf,
// cniVersion 0.3.0, network flannel.4096) and Microsoft's SDN flannel
// overlay (C:\k\cni\config\cni.conf, network vxlan0). host-local's default
// dataDir is moved to a temporary directory (the one thing the test
// changes). The network and the IPAM come from the configuration; pods'
// ADDs after the reservation never get the source VIP; after the store is
// wiped (and a pod took the old address), a restart reserves anew rather
// than share the pod's address.
func TestHostLocalLayouts(t *testing.T) {
	needHostLocal(t)
	for _, layout := range []struct {
		name, dir, file, body string
	}{
		{"sig-windows-tools flannel", "etc/cni/net.d", "10-flannel.conf", sigWindowsToolsFlannel},
		{"Microsoft SDN flannel overlay", "k/cni/config", "cni.conf", sdnFlannelOverlay},
	} {
		t.Run(layout.name, func(t *testing.T) {
			ctx := context.Background()
			root := t.TempDir()
			writeConf(t, filepath.Join(root, layout.dir), layout.file, layout.body)
			conf, err := ReadCNIConfig([]string{filepath.Join(root, "etc/cni/net.d"), filepath.Join(root, "k/cni/config")})
			if err != nil {
				t.Fatal(err)
			}
			store := filepath.Join(root, "var/lib/cni/networks")
			ipam := conf.IPAM([]string{filepath.Join(root, "no-plugins-here"), hostLocalBin})
			ipam.DataDir = store // host-local's default, moved
			// flannel's network reports the node's subnet (device_windows.go).
			nw := overlay
			nw.Name, nw.Subnets = conf.Name, []netip.Prefix{podCIDR}
			ledger := FileLedger{Path: filepath.Join(root, "hns-owned.json")}
			start := func() (*Fake, *Backend) {
				f := NewFake(nw, AllFeatures())
				f.AddLocalEndpoint("pod", ip("10.244.1.5"))
				log := logrus.New()
				log.SetOutput(testWriter{t})
				b, err := New(f, Config{CNI: conf, IPAM: ipam, NodeIP: ip("192.168.0.11"), HostMAC: hostMACOf, Ledger: ledger}, log)
				if err != nil {
					t.Fatal(err)
				}
				if err := b.Sync(ctx, vipState(), full()); err != nil {
					t.Fatal(err)
				}
				return f, b
			}
			f, b := start()
			vip := ip(lbSourceVIPs(f))
			if b.cfg.NetworkName != conf.Name || !podCIDR.Contains(vip) {
				t.Fatalf("network %q (want %q), source VIP %s", b.cfg.NetworkName, conf.Name, vip)
			}
			if held, err := ipam.Holds(ctx, podCIDR, vip); err != nil || !held {
				t.Fatalf("host-local's store (%s/%s) does not hold the source VIP %s for crossproxy: %v", store, conf.Name, vip, err)
			}
			for i := range 20 {
				if got := podADD(t, conf, store, fmt.Sprintf("pod-%d", i), podCIDR); got == vip {
					t.Fatalf("pod-%d got the source VIP %s", i, vip)
				}
			}
			// The store wiped (a node reinstalled, C:\var\lib\cni cleared): a
			// new pod takes the first address, the old source VIP.
			if err := os.RemoveAll(store); err != nil {
				t.Fatal(err)
			}
			pod := podADD(t, conf, store, "pod-after-wipe", podCIDR)
			if pod != vip {
				t.Fatalf("after the wipe the first pod got %s; the test expects host-local to start over at %s", pod, vip)
			}
			// A restart after HNS lost the source-VIP endpoint: the ledger's
			// reservation is no longer in the store, so a new one is made.
			f2, _ := start()
			vip2 := ip(lbSourceVIPs(f2))
			if vip2 == pod || !podCIDR.Contains(vip2) {
				t.Fatalf("after the wipe the source VIP is %s, the pod has %s", vip2, pod)
			}
			if held, err := ipam.Holds(ctx, podCIDR, vip2); err != nil || !held {
				t.Fatalf("the new source VIP %s is not held for crossproxy: %v", vip2, err)
			}
		})
	}
}

// TestHostLocalOlderVersion: a host-local that speaks CNI up to 0.4.0 (plugins
// before v1.0) and refuses 1.0.0 is asked its versions and spoken to in one
// it has; one that speaks only 0.2.0 answers in 0.2.0's result format.
func TestHostLocalOlderVersion(t *testing.T) {
	needHostLocal(t)
	for _, versions := range []string{`"0.1.0","0.2.0","0.3.0","0.3.1","0.4.0"`, `"0.1.0","0.2.0"`} {
		dir := t.TempDir()
		// The wrapper answers VERSION for an older host-local and refuses a
		// configuration in any other version, as the old plugin does.
		script := fmt.Sprintf(`#!/bin/sh
if [ "$CNI_COMMAND" = VERSION ]; then echo '{"cniVersion":"0.2.0","supportedVersions":[%s]}'; exit 0; fi
conf=$(cat)
v=$(printf '%%s' "$conf" | sed -n 's/.*"cniVersion":"\([^"]*\)".*/\1/p')
case ',%s,' in *"\"$v\""*) ;; *) echo "{\"code\":1,\"msg\":\"unsupported CNI version $v\"}"; exit 1;; esac
printf '%%s' "$conf" | exec %s/host-local
`, versions, versions, hostLocalBin)
		if err := os.WriteFile(filepath.Join(dir, "host-local"), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		ipam := CNIIPAM{BinDirs: []string{dir}, Network: "vxlan0", DataDir: filepath.Join(dir, "store"), CNIVersion: "1.0.0"}
		a, err := ipam.Reserve(context.Background(), podCIDR)
		if err != nil || !podCIDR.Contains(a) {
			t.Fatalf("host-local speaking %s: %s %v", versions, a, err)
		}
		if held, err := ipam.Holds(context.Background(), podCIDR, a); err != nil || !held {
			t.Fatalf("host-local speaking %s: %s not held: %v", versions, a, err)
		}
	}
}

// TestNonHostLocalIPAM: Calico's calico-ipam cannot reserve the source VIP
// through crossproxy: the error names the IPAM and the options to set.
func TestNonHostLocalIPAM(t *testing.T) {
	dir := tempDir(t)
	writeConf(t, dir, "10-calico.conf", calicoVXLAN)
	conf, err := ReadCNIConfig([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	_, err = conf.IPAM([]string{hostLocalBin}).Reserve(context.Background(), calicoBlock)
	if err == nil || !strings.Contains(err.Error(), `IPAM "calico-ipam"`) || !strings.Contains(err.Error(), "--source-vip") || !strings.Contains(err.Error(), SourceVIPAnnotation) {
		t.Fatalf("calico-ipam: %v", err)
	}
}

// TestHostLocalFileName: the file host-local keeps a reservation in is named
// after the address, with every ':' replaced by '_' on Windows only
// (containernetworking/plugins host-local disk backend, GetEscapedPath).
func TestHostLocalFileName(t *testing.T) {
	for _, c := range []struct{ goos, addr, want string }{
		{"windows", "10.244.1.2", "10.244.1.2"},
		{"linux", "10.244.1.2", "10.244.1.2"},
		{"windows", "fd00:10:244:1::2", "fd00_10_244_1__2"},
		{"linux", "fd00:10:244:1::2", "fd00:10:244:1::2"},
		{"windows", "::1", "__1"},
	} {
		if got := hostLocalFileName(c.goos, netip.MustParseAddr(c.addr)); got != c.want {
			t.Errorf("hostLocalFileName(%s, %s) = %q, want %q", c.goos, c.addr, got, c.want)
		}
	}
}

// TestHoldsFindsIPv6Reservation: Holds finds an IPv6 reservation in a store
// laid out the way host-local writes it on this OS (the file names are
// spelled out here, not derived); under Wine that is the Windows name, with
// '_' for ':'. Neither the other OS's name nor another container's
// reservation counts as held.
func TestHoldsFindsIPv6Reservation(t *testing.T) {
	// os.MkdirTemp, not t.TempDir: Wine 8 cannot remove a tree (see test/mk/windows.mk).
	dir, err := os.MkdirTemp("", "hostlocal-store-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	subnet := netip.MustParsePrefix("fd00:10:244:1::/64")
	held, other, foreign := netip.MustParseAddr("fd00:10:244:1::2"), netip.MustParseAddr("fd00:10:244:1::3"), netip.MustParseAddr("fd00:10:244:1::4")
	names := map[string]map[netip.Addr]string{
		"windows": {held: "fd00_10_244_1__2", other: "fd00:10:244:1::3", foreign: "fd00_10_244_1__4"},
		"linux":   {held: "fd00:10:244:1::2", other: "fd00_10_244_1__3", foreign: "fd00:10:244:1::4"},
	}[runtime.GOOS]
	if names == nil {
		t.Skipf("no host-local store layout for %s", runtime.GOOS)
	}
	store := filepath.Join(dir, "vxlan0")
	if err := os.MkdirAll(store, 0o755); err != nil {
		t.Fatal(err)
	}
	// host-local writes the container id, CRLF, the interface name.
	owner := map[netip.Addr]string{held: sourceVIPContainerID, other: sourceVIPContainerID, foreign: "pod-a"}
	for a, name := range names {
		if err := os.WriteFile(filepath.Join(store, name), []byte(owner[a]+"\r\neth0"), 0o644); err != nil {
			t.Fatalf("lay out the store (%s): %v", name, err)
		}
	}
	ipam := CNIIPAM{Network: "vxlan0", DataDir: dir}
	for a, want := range map[netip.Addr]bool{held: true, other: false, foreign: false} {
		got, err := ipam.Holds(context.Background(), subnet, a)
		if err != nil || got != want {
			t.Errorf("Holds(%s) on %s = %v, %v; want %v (store file %q)", a, runtime.GOOS, got, err, want, names[a])
		}
	}
}
