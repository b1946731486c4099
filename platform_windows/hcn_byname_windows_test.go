//go:build windows

package hns

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/Microsoft/hcsshim"
	"github.com/Microsoft/hcsshim/hcn"
)

// TestHCNEndpointFromV1 converts V1 endpoints as HNS' V1 API returns them
// (hcsshim internal/hns HNSEndpoint JSON). The first is Calico's VXLAN host
// endpoint as calico's createAndAttachVxlanHostEP makes it: remote, at the
// block's .2, the host's MAC, the V1 PA policy; its other fields follow the
// Get-HNSEndpoint dump in projectcalico/calico #4682 (upper-case ID,
// OutBoundNAT and ROUTE policies before the PA).
func TestHCNEndpointFromV1(t *testing.T) {
	for _, c := range []struct {
		name, json string
		want       Endpoint
	}{
		{"Calico_ep remote with PA", `{
			"ID": "89958F54-AEE8-4050-B1E1-CB12A86CE8BC", "Name": "Calico_ep", "VirtualNetworkName": "Calico",
			"IPAddress": "192.168.45.66", "MacAddress": "00-15-5D-8A-0B-21", "IsRemoteEndpoint": true,
			"Policies": [
				{"ExceptionList": ["10.152.183.0/24"], "Type": "OutBoundNAT"},
				{"DestinationPrefix": "10.152.183.0/24", "NeedEncap": true, "Type": "ROUTE"},
				{"PA": "10.0.0.4", "Type": "PA"}
			]}`,
			Endpoint{ID: "89958f54-aee8-4050-b1e1-cb12a86ce8bc", Name: "Calico_ep", IP: ip("192.168.45.66"), Remote: true,
				ProviderAddress: ip("10.0.0.4"), MAC: "00-15-5D-8A-0B-21"}},
		{"local, no PA: the provider address is not reported", `{
			"ID": "C5E3F398-2E83-47EF-9DAA-5D992B9A5807", "Name": "cbr0_ep", "IPAddress": "10.244.1.2", "MacAddress": "00-15-5D-01-02-03",
			"Policies": [{"Type": "L2Driver"}]}`,
			Endpoint{ID: "c5e3f398-2e83-47ef-9daa-5d992b9a5807", Name: "cbr0_ep", IP: ip("10.244.1.2"), MAC: "00-15-5D-01-02-03"}},
		{"IPv6 only", `{"ID": "AB", "Name": "v6", "IPv6Address": "fd00:2::7", "IsRemoteEndpoint": true, "Policies": [{"Type": "PA", "PA": "not-an-address"}]}`,
			Endpoint{ID: "ab", Name: "v6", IP: ip("fd00:2::7"), Remote: true}},
	} {
		var v1 hcsshim.HNSEndpoint
		if err := json.Unmarshal([]byte(c.json), &v1); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := endpointFromV1(&v1); got != c.want {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, c.want)
		}
	}
}

// TestHCNEndpointFromHCNNamed: a by-name lookup answered by the V2 API gives
// the endpoint's first address, and an endpoint without a usable address is
// still found, with an invalid IP.
func TestHCNEndpointFromHCNNamed(t *testing.T) {
	var ep hcn.HostComputeEndpoint
	if err := json.Unmarshal([]byte(`{"ID": "9F6E3C7A-0000-4000-8000-000000000001", "Name": "crossproxy-source-vip", "MacAddress": "00-15-5D-8A-0B-21",
		"IpConfigurations": [{"IpAddress": "10.244.1.2", "PrefixLength": 24}, {"IpAddress": "fd00:1::2"}],
		"Policies": [{"Type": "ProviderAddress", "Settings": {"ProviderAddress": "192.168.0.11"}}]}`), &ep); err != nil {
		t.Fatal(err)
	}
	want := Endpoint{ID: "9f6e3c7a-0000-4000-8000-000000000001", Name: "crossproxy-source-vip", IP: ip("10.244.1.2"), MAC: "00-15-5D-8A-0B-21", ProviderAddress: ip("192.168.0.11")}
	if got := endpointFromHCNNamed(&ep); got != want {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	ep.IpConfigurations = []hcn.IpConfig{{IpAddress: ""}}
	want.IP = netip.Addr{}
	if got := endpointFromHCNNamed(&ep); got != want {
		t.Fatalf("without address: got %+v\nwant %+v", got, want)
	}
}

// TestFakeGetEndpointByName: the fake finds endpoints by name whatever the
// case, counts the call, and says ErrNotFound for a name it does not hold.
func TestFakeGetEndpointByName(t *testing.T) {
	f := NewFake(overlay, AllFeatures(),
		Endpoint{Name: "pod-b", IP: ip("10.244.1.9")},
		Endpoint{Name: "Calico_ep", IP: ip("10.244.1.2"), Remote: true, ProviderAddress: ip("192.168.0.11")},
		Endpoint{Name: "calico_EP", IP: ip("10.244.1.3")})
	ctx := context.Background()
	got, err := f.GetEndpointByName(ctx, "CALICO_EP")
	if err != nil || got.IP != ip("10.244.1.2") || !got.Remote || got.ID == "" {
		t.Fatalf("got %+v %v, want the remote Calico_ep at 10.244.1.2 (first by address)", got, err)
	}
	if _, err := f.GetEndpointByName(ctx, "cbr0"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("absent name: %v, want ErrNotFound", err)
	}
	if n := f.Calls()["GetEndpointByName"]; n != 2 {
		t.Fatalf("calls %d, want 2", n)
	}
	if _, err := (HCN{}).GetEndpointByName(canceled(), "Calico_ep"); !errors.Is(err, context.Canceled) {
		t.Fatalf("HCN with a cancelled context: %v", err)
	}
}

// TestHCNGetEndpointByNameFallsBack drives the real lookup where HNS cannot
// answer (under Wine computenetwork.dll is missing; on Windows an HNS that
// is not running): the V1 API is asked after the V2 failure, the error names
// both, and it is not ErrNotFound, since a failing HNS is not a missing
// endpoint.
func TestHCNGetEndpointByNameFallsBack(t *testing.T) {
	_, err := (HCN{}).GetEndpointByName(context.Background(), "crossproxy-test-no-such-endpoint")
	if err == nil {
		t.Fatal("HNS has an endpoint named crossproxy-test-no-such-endpoint: remove it")
	}
	t.Logf("error (expected): %v", err)
	if errors.Is(err, ErrNotFound) {
		// A real HNS that has no such endpoint says so through both APIs.
		if !strings.Contains(err.Error(), "V2, then V1 API") {
			t.Fatalf("not found without asking V1: %v", err)
		}
		return
	}
	if !strings.Contains(err.Error(), "V2 API") || !strings.Contains(err.Error(), "V1 API") {
		t.Fatalf("the error must say both APIs failed: %v", err)
	}
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}
