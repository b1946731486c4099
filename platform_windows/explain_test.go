package hns

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/types"
)

// nodeNotesOf runs Programmed on a backend that never synced, as
// `crossproxy explain` on the node does, and returns its notes; it fails
// the test if the read changed HNS.
func nodeNotesOf(t *testing.T, f *Fake, cfg Config) string {
	t.Helper()
	log := logrus.New()
	log.SetOutput(testWriter{t})
	b, err := New(f, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	f.ResetCalls()
	p, err := b.Programmed(context.Background(), types.NamespacedName{Namespace: "default", Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	for m := range f.Calls() {
		if !strings.HasPrefix(m, "Get") && !strings.HasPrefix(m, "List") && m != "Features" {
			t.Fatalf("explain's read made %v", f.Calls())
		}
	}
	return strings.Join(p.Notes, "\n")
}

// TestExplainOnNode: explain on the node (a backend that never synced)
// shows, from a fresh read of HNS, the network and what found it, the CNI
// configuration read, and the source VIP with the path that chose it: Calico's
// Calico_ep; the ledger's reservation while host-local's store holds it,
// and that the next sync reserves anew once it does not.
func TestExplainOnNode(t *testing.T) {
	calico := &CNIConfig{File: `C:\etc\cni\net.d\10-calico.conf`, Name: "Calico", CNIVersion: "0.3.1", Type: "calico", IPAMType: "calico-ipam"}
	got := nodeNotesOf(t, calicoFake(true), Config{CNI: calico, Ledger: &MemoryLedger{}})
	for _, want := range []string{
		`HNSNetwork: Calico (Overlay, id 00000000-0000-4000-8000-00000000BEEF, subnets 192.168.45.64/26), found by the CNI configuration C:\etc\cni\net.d\10-calico.conf`,
		`CNIConfig: C:\etc\cni\net.d\10-calico.conf (network "Calico", type calico, IPAM calico-ipam, cniVersion 0.3.1)`,
		`SourceVIP: overlay source VIP 192.168.45.66, chosen by the existing HNS endpoint "Calico_ep" (calico-node's)`,
	} {
		if !strings.Contains(got, want) {
			t.Fatalf("Calico notes:\n%s\nwant a line %q", got, want)
		}
	}

	nw := overlay
	nw.Subnets = []netip.Prefix{podCIDR}
	f := NewFake(nw, AllFeatures())
	ledger := &MemoryLedger{}
	_ = ledger.Save(ledgerData{SourceVIP: &reservation{Address: ip("10.244.1.2"), Subnet: podCIDR, Network: "vxlan0"}})
	ipam := &fakeIPAM{held: map[netip.Prefix]netip.Addr{podCIDR: ip("10.244.1.2")}}
	cfg := Config{NetworkName: "vxlan0", Ledger: ledger, IPAM: ipam}
	if got := nodeNotesOf(t, f, cfg); !strings.Contains(got, "SourceVIP: overlay source VIP 10.244.1.2, chosen by the reservation recorded in the ledger (subnet 10.244.1.0/24), still held by the IPAM store") ||
		!strings.Contains(got, "found by the configuration (flag --network-name or KUBE_NETWORK)") || !strings.Contains(got, "CNIConfig: none found") {
		t.Fatalf("flannel notes with a reservation:\n%s", got)
	}
	ipam.held = nil // the store wiped
	if got := nodeNotesOf(t, f, cfg); !strings.Contains(got, "SourceVIP: none yet: the reservation 10.244.1.2 recorded in the ledger is no longer held by the IPAM store") {
		t.Fatalf("flannel notes after the store was wiped:\n%s", got)
	}
}
