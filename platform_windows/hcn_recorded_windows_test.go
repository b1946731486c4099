//go:build windows

package hns

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/Microsoft/hcsshim"
	"github.com/Microsoft/hcsshim/hcn"
)

const recordedDir = "testdata/hns-recorded"

// TestHCNRecorded reads every file of testdata/hns-recorded (HNS objects as
// HNS returned them, and labelled variants; the directory's README.md says
// where each comes from) into hcn's or hcsshim's types and through the real
// conversions, and compares the result with what crossproxy must see. A file
// without an expectation here, or not described in the README, fails.
func TestHCNRecorded(t *testing.T) {
	remoteEP := Endpoint{ID: "8f109901-9970-4fda-bb2b-e9882fb3e8fb", Name: "remote_10.244.2.141", IP: ip("10.244.2.141"), Remote: true,
		ProviderAddress: ip("10.123.74.74"), MAC: "0E-2A-0a-f4-02-8d"}
	noPA := remoteEP
	noPA.ProviderAddress = netip.Addr{}
	clusterIP := LoadBalancer{ID: "37aa41cf-ff54-4626-9dd6-eb6eb236aaa1", Protocol: ProtocolTCP, FrontendVIPs: []netip.Addr{ip("10.98.164.216")},
		ExternalPort: 443, InternalPort: 443, EndpointIDs: []string{"90726009-0478-4888-b521-b0a259dbc268"}, Flags: LBFlags{DSR: true}}
	clusterIPUpper := clusterIP
	clusterIPUpper.EndpointIDs = []string{"0a1b2c3d-0000-4000-8000-00000000000f", "90726009-0478-4888-b521-b0a259dbc268"}
	l2NoSourceVIP := clusterIP
	l2NoSourceVIP.Flags = LBFlags{}
	l2NodeIP := l2NoSourceVIP
	l2NodeIP.SourceVIP = ip("10.10.253.10")
	nodePort := LoadBalancer{ID: "0be07c06-353c-4fbf-8ebc-5531f877e68a", Protocol: ProtocolTCP, ExternalPort: 31416, InternalPort: 80,
		SourceVIP: ip("10.10.253.194"), EndpointIDs: []string{"fd6bec0f-7b88-4b61-b5af-70897ab0960b"}, Flags: LBFlags{LocalRoutedVIP: true}}
	nodePortExtra := nodePort
	nodePortExtra.Flags.VipExternalIP = true

	want := map[string]any{
		"endpoint-v1-flannel-remote.json": remoteEP,
		"endpoint-v1-calico-pod.json": Endpoint{ID: "89958f54-aee8-4050-b1e1-cb12a86ce8bc",
			Name: "0dd146321a68d26b7d32e1bdf87ed5967296e58d97918858fb27c2ca55e3b586_Calico", IP: ip("10.1.18.67"), MAC: "0E-2A-0a-01-12-43"},
		"endpoint-v2-remote-variant-pa-v2.json":                    []Endpoint{remoteEP},
		"endpoint-v2-remote-variant-pa-v1style.json":               []Endpoint{remoteEP},
		"endpoint-v2-remote-variant-pa-v1-toplevel.json":           []Endpoint{noPA},
		"endpoint-v2-remote-variant-pa-missing.json":               []Endpoint{noPA},
		"endpoint-v2-remote-variant-upper-ids.json":                []Endpoint{remoteEP},
		"loadbalancer-clusterip-calico.json":                       clusterIP,
		"loadbalancer-clusterip-variant-upper-ids.json":            clusterIPUpper,
		"loadbalancer-l2bridge-variant-sourcevip-unspecified.json": l2NoSourceVIP,
		"loadbalancer-l2bridge-variant-sourcevip-nodeip.json":      l2NodeIP,
		"loadbalancer-nodeport-calico.json":                        nodePort,
		"loadbalancer-nodeport-variant-frontendvips-nodeip.json":   nodePort,
		"loadbalancer-nodeport-variant-extra-flag-bits.json":       nodePortExtra,
		"network-calico-remotesubnetroutes.json": Network{ID: "B5A22566-BEBC-400C-ABEF-B6717DE7AF59", Name: "Calico", Type: NetworkOverlay,
			RemoteSubnets: []RemoteSubnet{
				{Prefix: netip.MustParsePrefix("10.5.22.0/26"), ProviderAddress: ip("192.168.85.160")},
				{Prefix: netip.MustParsePrefix("10.5.179.128/26"), ProviderAddress: ip("192.168.85.161")},
			}},
	}
	readme, err := os.ReadFile(filepath.Join(recordedDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(recordedDir, "*.json"))
	if err != nil || len(files) != len(want) {
		t.Fatalf("%d recorded files (%v), %d expectations", len(files), err, len(want))
	}
	for _, path := range files {
		name := filepath.Base(path)
		w, ok := want[name]
		if !ok {
			t.Errorf("%s: no expectation", name)
			continue
		}
		if !strings.Contains(string(readme), "`"+name+"`") {
			t.Errorf("%s: not described in %s/README.md", name, recordedDir)
		}
		got, err := convertRecorded(path)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !reflect.DeepEqual(got, w) {
			t.Errorf("%s:\n got %+v\nwant %+v", name, got, w)
		}
	}
	// The NodePort load balancer keeps the identity crossproxy created it
	// with whether HNS reports its VIP or not.
	for _, name := range []string{"loadbalancer-nodeport-calico.json", "loadbalancer-nodeport-variant-frontendvips-nodeip.json"} {
		lb := want[name].(LoadBalancer)
		if f := lb.frontend(); f != "TCP/*/31416" {
			t.Errorf("%s: frontend %s", name, f)
		}
	}
}

// convertRecorded reads one recorded file with the type its name gives and
// converts it as crossproxy does.
func convertRecorded(path string) (any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	switch name := filepath.Base(path); {
	case strings.HasPrefix(name, "network-"):
		var nw hcn.HostComputeNetwork
		if err := json.Unmarshal(b, &nw); err != nil {
			return nil, err
		}
		return networkFromHCN(&nw)
	case strings.HasPrefix(name, "endpoint-v1-"):
		var ep hcsshim.HNSEndpoint
		if err := json.Unmarshal(b, &ep); err != nil {
			return nil, err
		}
		return endpointFromV1(&ep), nil
	case strings.HasPrefix(name, "endpoint-v2-"):
		var ep hcn.HostComputeEndpoint
		if err := json.Unmarshal(b, &ep); err != nil {
			return nil, err
		}
		return endpointsFromHCN(&ep), nil
	case strings.HasPrefix(name, "loadbalancer-"):
		var lb hcn.HostComputeLoadBalancer
		if err := json.Unmarshal(b, &lb); err != nil {
			return nil, err
		}
		return loadBalancerFromHCN(&lb), nil
	}
	return nil, os.ErrInvalid
}
