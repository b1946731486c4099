//go:build windows

package hns

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/Microsoft/hcsshim/hcn"
	"github.com/sirupsen/logrus"

	"github.com/crossproxy/crossproxy/core"
)

// TestHCNLoadBalancerRoundTrip: what crossproxy sends, serialised as HNS
// receives it and read back, compares equal, so an unchanged load balancer
// is not rewritten on every full sync.
func TestHCNLoadBalancerRoundTrip(t *testing.T) {
	for _, lb := range []LoadBalancer{
		{ID: "abc", Protocol: ProtocolTCP, FrontendVIPs: []netip.Addr{ip("10.0.0.11"), ip("192.168.0.11")}, ExternalPort: 30080, InternalPort: 8080,
			SourceVIP: ip("10.244.1.2"), EndpointIDs: []string{"a", "b"}, Flags: LBFlags{DSR: true, VipExternalIP: true}, SourceIPAffinity: true},
		{ID: "def", Protocol: ProtocolUDP, FrontendVIPs: []netip.Addr{ip("fd00:96::10")}, ExternalPort: 53, InternalPort: 53,
			EndpointIDs: []string{"c"}, Flags: LBFlags{IPv6: true, PreserveDIP: true}},
		{ID: "ghi", Protocol: ProtocolTCP, ExternalPort: 30080, InternalPort: 8080,
			EndpointIDs: []string{"d"}, Flags: LBFlags{LocalRoutedVIP: true, VipExternalIP: true}},
	} {
		h := loadBalancerToHCN(lb)
		h.Id = lb.ID
		b, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		var back hcn.HostComputeLoadBalancer
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if got := loadBalancerFromHCN(&back); !reflect.DeepEqual(got, lb) || !sameLB(got, lb) {
			t.Fatalf("round trip of %s:\n got %+v\nwant %+v\njson %s", lb.frontend(), got, lb, b)
		}
	}
	h := loadBalancerToHCN(LoadBalancer{Flags: LBFlags{DSR: true, IPv6: true, LocalRoutedVIP: true, VipExternalIP: true}, SourceIPAffinity: true})
	if h.Flags != hcn.LoadBalancerFlagsDSR|hcn.LoadBalancerFlagsIPv6 || h.PortMappings[0].Flags != hcn.LoadBalancerPortMappingFlagsLocalRoutedVIP|16 ||
		h.PortMappings[0].DistributionType != hcn.LoadBalancerDistributionSourceIP {
		t.Fatalf("HNS bits: %+v", h)
	}
}

func TestHCNNetworkAndEndpoints(t *testing.T) {
	s, _ := json.Marshal(hcn.RemoteSubnetRoutePolicySetting{DestinationPrefix: "10.244.2.0/24", ProviderAddress: "192.168.0.12"})
	nw, err := networkFromHCN(&hcn.HostComputeNetwork{Id: "NET-ID", Name: "vxlan0", Type: hcn.Overlay, Policies: []hcn.NetworkPolicy{
		{Type: hcn.RemoteSubnetRoute, Settings: s}, {Type: hcn.ProviderAddress, Settings: json.RawMessage(`{"ProviderAddress":"192.168.0.11"}`)},
	},
		// flannel's vxlan backend (pkg/backend/vxlan/device_windows.go)
		// creates vxlan0 with one static IPAM subnet, the node's pod subnet,
		// routed through its .1; a prefix Go cannot read is skipped.
		Ipams: []hcn.Ipam{{Type: "Static", Subnets: []hcn.Subnet{
			{IpAddressPrefix: "10.244.1.0/24", Routes: []hcn.Route{{NextHop: "10.244.1.1", DestinationPrefix: "0.0.0.0/0"}}},
			{IpAddressPrefix: "not-a-prefix"},
		}}},
	})
	// The id stays as HNS wrote it: HNS queries take it back.
	want := Network{ID: "NET-ID", Name: "vxlan0", Type: NetworkOverlay, RemoteSubnets: []RemoteSubnet{{netip.MustParsePrefix("10.244.2.0/24"), ip("192.168.0.12")}},
		Subnets: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")}}
	if err != nil || !reflect.DeepEqual(nw, want) {
		t.Fatalf("network %+v %v", nw, err)
	}
	if _, err := networkFromHCN(&hcn.HostComputeNetwork{Name: "bad", Policies: []hcn.NetworkPolicy{{Type: hcn.RemoteSubnetRoute, Settings: json.RawMessage(`{"DestinationPrefix":"x"}`)}}}); err == nil {
		t.Fatal("a malformed remote subnet must be an error")
	}

	local, err := endpointToHCN(Endpoint{Name: sourceVIPEndpointName, IP: ip("10.244.1.2"), MAC: hostMAC})
	if err != nil || local.Flags&hcn.EndpointFlagsRemoteEndpoint != 0 || len(local.Policies) != 0 || local.MacAddress != hostMAC {
		t.Fatalf("source VIP endpoint: %+v %v", local, err)
	}
	req, err := endpointToHCN(Endpoint{Name: remoteEndpointPrefix + "10.244.2.7", IP: ip("10.244.2.7"), Remote: true, ProviderAddress: ip("192.168.0.12"), MAC: "02-11-0a-f4-02-07"})
	if err != nil {
		t.Fatal(err)
	}
	req.Id = "EP-1"
	req.IpConfigurations = append(req.IpConfigurations, hcn.IpConfig{IpAddress: "fd00:2::7"})
	got := endpointsFromHCN(req)
	base := Endpoint{ID: "ep-1", Name: remoteEndpointPrefix + "10.244.2.7", Remote: true, ProviderAddress: ip("192.168.0.12"), MAC: "02-11-0a-f4-02-07"}
	v4, v6 := base, base
	v4.IP, v6.IP = ip("10.244.2.7"), ip("fd00:2::7")
	if !reflect.DeepEqual(got, []Endpoint{v4, v6}) {
		t.Fatalf("endpoints %+v", got)
	}
}

func TestHCNErrorMapping(t *testing.T) {
	if err := mapErr(hcn.LoadBalancerNotFoundError{LoadBalancerId: "x"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("not found: %v", err)
	}
	if err := mapErr(errors.New("hcnCreateLoadBalancer failed in Win32: Cannot create a file when that file already exists. (0xb7)")); !errors.Is(err, ErrAlreadyExists) {
		t.Fatalf("0xb7: %v", err)
	}
	other := errors.New("other")
	if err := mapErr(other); err != other {
		t.Fatalf("other errors pass through: %v", err)
	}
}

// TestHCNBackendFailsCleanly drives the real hcn layer: under Wine (no HNS)
// and on Windows (no such network) a sync must fail with an error that says
// which step failed, never panic or touch anything.
func TestHCNBackendFailsCleanly(t *testing.T) {
	ledger := &MemoryLedger{}
	b, err := New(HCN{}, Config{NetworkName: "crossproxy-test-no-such-network", Ledger: ledger}, logrus.New())
	if err != nil {
		t.Fatal(err)
	}
	err = b.Sync(context.Background(), state(port("web", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080)})), core.Changes{Full: true})
	if err == nil || !(strings.Contains(err.Error(), "detect HNS features") || strings.Contains(err.Error(), `get HNS network "crossproxy-test-no-such-network"`)) {
		t.Fatalf("want a failure naming the step, got %v", err)
	}
	t.Logf("sync error (expected): %v", err)
	if d, _ := ledger.Load(); len(d.LoadBalancers) != 0 {
		t.Fatalf("ledger changed: %+v", d)
	}
}

// TestHCNHonoursContext: a cancelled context stops every hcn method before
// it calls HNS.
func TestHCNHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	h := HCN{}
	_, e1 := h.Features(ctx)
	_, e2 := h.GetNetwork(ctx, "x")
	_, e3 := h.ListEndpoints(ctx, "x")
	_, e4 := h.CreateRemoteEndpoint(ctx, "x", Endpoint{IP: ip("10.244.2.7")})
	_, e5 := h.CreateLocalEndpoint(ctx, "x", Endpoint{IP: ip("10.244.1.2")})
	e6 := h.DeleteEndpoint(ctx, "x")
	_, e7 := h.ListLoadBalancers(ctx)
	_, e8 := h.CreateLoadBalancer(ctx, LoadBalancer{})
	_, e9 := h.UpdateLoadBalancer(ctx, "x", LoadBalancer{})
	e10 := h.DeleteLoadBalancer(ctx, "x")
	_, e11 := h.GetEndpointByName(ctx, "x")
	_, e12 := h.ListNetworks(ctx)
	for i, err := range []error{e1, e2, e3, e4, e5, e6, e7, e8, e9, e10, e11, e12} {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("method %d: %v, want context.Canceled", i+1, err)
		}
	}
}

// TestHCNFeaturesOfVersion checks feature detection against hcn's version
// tables and crossproxy's own for in-place modify.
func TestHCNFeaturesOfVersion(t *testing.T) {
	for _, c := range []struct {
		v    hcn.Version
		want Features
	}{
		{hcn.Version{Major: 9, Minor: 1}, Features{}},
		{hcn.Version{Major: 9, Minor: 3}, Features{APIV2: true, DSR: true, RemoteSubnet: true}},
		{hcn.Version{Major: 10, Minor: 1}, Features{APIV2: true, RemoteSubnet: true}}, // DSR came back in 10.2
		{hcn.Version{Major: 12, Minor: 0}, Features{APIV2: true, DSR: true, RemoteSubnet: true, IPv6DualStack: true, SessionAffinity: true}},
		{hcn.Version{Major: 15, Minor: 3}, Features{APIV2: true, DSR: true, RemoteSubnet: true, IPv6DualStack: true, SessionAffinity: true}},
		// HNS 15.4 (Windows Server 2025) accepts ModifyLoadBalancer and
		// keeps the old endpoints (kubernetes #131466): no modify there.
		{hcn.Version{Major: 15, Minor: 4}, Features{APIV2: true, DSR: true, RemoteSubnet: true, IPv6DualStack: true, SessionAffinity: true}},
		{hcn.Version{Major: 15, Minor: 5}, AllFeatures()},
		{hcn.Version{Major: 15, Minor: 99}, AllFeatures()},
		{hcn.Version{Major: 16, Minor: 0}, AllFeatures()},
		{hcn.Version{Major: 17, Minor: 2}, AllFeatures()},
	} {
		if got := featuresOf(c.v); got != c.want {
			t.Errorf("HNS %d.%d: got %+v, want %+v", c.v.Major, c.v.Minor, got, c.want)
		}
	}
}

// TestHCNModifyLoadBalancerTable pins crossproxy's in-place modify table to
// microsoft/hnslib hcn/hcnglobals.go ModifyLoadbalancerVersion as of hnslib
// commit 1fbf93f (15.5 to 15.x, and 16.0 on), and checks it differs from
// hcsshim's: when hcsshim adopts hnslib's ranges (or hnslib changes them
// again), this test says so and the table is reviewed, not silently kept.
func TestHCNModifyLoadBalancerTable(t *testing.T) {
	want := hcn.VersionRanges{
		{MinVersion: hcn.Version{Major: 15, Minor: 5}, MaxVersion: hcn.Version{Major: 15, Minor: math.MaxInt32}},
		{MinVersion: hcn.Version{Major: 16, Minor: 0}, MaxVersion: hcn.Version{Major: math.MaxInt32, Minor: math.MaxInt32}},
	}
	if !reflect.DeepEqual(modifyLoadBalancerVersions, want) {
		t.Fatalf("crossproxy's modify table %+v, want hnslib's %+v", modifyLoadBalancerVersions, want)
	}
	if reflect.DeepEqual(hcn.ModifyLoadbalancerVersion, want) {
		t.Fatal("hcsshim's hcn.ModifyLoadbalancerVersion now equals hnslib's: use it and drop crossproxy's copy")
	}
	if !inRanges(hcn.Version{Major: 15, Minor: 4}, hcn.ModifyLoadbalancerVersion) {
		t.Fatal("hcsshim's table no longer includes 15.4: review modifyLoadBalancerVersions against it")
	}
	// Every version on a range's edge, both sides.
	for v, want := range map[hcn.Version]bool{
		{Major: 15, Minor: 4}: false, {Major: 15, Minor: 5}: true, {Major: 15, Minor: math.MaxInt32}: true,
		{Major: 16, Minor: 0}: true, {Major: 14, Minor: 9}: false, {Major: math.MaxInt32, Minor: math.MaxInt32}: true,
	} {
		if got := inRanges(v, modifyLoadBalancerVersions); got != want {
			t.Errorf("HNS %d.%d: modify %v, want %v", v.Major, v.Minor, got, want)
		}
	}
}
