package winoracle

import (
	"strings"
	"testing"
)

// TestCompareAndAllowlist checks the comparison and the allowlist rules the
// oracle relies on: load balancers paired by frontend and then by port, an
// entry allowing only what it names, and an unused entry reported stale.
func TestCompareAndAllowlist(t *testing.T) {
	wk := Programmed{
		LBs: []LB{
			{VIPs: []string{"10.96.0.10"}, Protocol: "TCP", ExternalPort: 80, InternalPort: 8080, Distribution: "None", Backends: []string{"10.244.1.10"}},
			{Protocol: "TCP", ExternalPort: 30080, InternalPort: 8080, PortMappingFlags: []string{"LocalRoutedVIP", "VipExternalIP"}, Distribution: "None", Backends: []string{"10.244.1.10"}},
		},
		Endpoints: []Endpoint{{IP: "10.244.2.20", Remote: true, ProviderAddress: "192.168.0.12", MAC: "02-11-0a-f4-02-14"}},
	}
	cp := Programmed{
		LBs: []LB{
			{VIPs: []string{"10.96.0.10"}, Protocol: "TCP", ExternalPort: 80, InternalPort: 8080, Distribution: "None", Backends: []string{"10.244.1.10"}},
			{VIPs: []string{"192.168.0.11"}, Protocol: "TCP", ExternalPort: 30080, InternalPort: 8080, PortMappingFlags: []string{"LocalRoutedVIP"}, Distribution: "None", Backends: []string{"10.244.1.10"}},
		},
		Endpoints: []Endpoint{{IP: "10.244.2.20", Remote: true, MAC: "02-11-0A-F4-02-14"}},
	}
	diffs := Compare(wk, cp)
	var got []string
	for _, d := range diffs {
		got = append(got, d.Object+" "+d.Field)
	}
	want := "TCP *:30080 frontendVIPs|TCP *:30080 portMappingFlags|endpoint 10.244.2.20 providerAddress"
	if strings.Join(got, "|") != want {
		t.Fatalf("diffs %q, want %q", strings.Join(got, "|"), want)
	}
	if d := Compare(wk, wk); len(d) != 0 {
		t.Fatalf("a state differs from itself: %v", d)
	}

	a := &Allowlist{Entries: []*AllowEntry{
		{Scenario: "overlay: *", Field: "frontendVIPs", Object: "* *:30*", Reason: "NodePort VIP"},
		{Scenario: "overlay: *", Field: "providerAddress", Reason: "fallback"},
		{Scenario: "l2bridge: *", Field: "portMappingFlags", Reason: "other network"},
	}}
	for _, e := range a.Entries {
		if err := e.compile(); err != nil {
			t.Fatal(err)
		}
	}
	reasons := a.Reasons("overlay: NodePort", diffs)
	if strings.Join(reasons, "|") != "NodePort VIP||fallback" {
		t.Fatalf("reasons %q", reasons)
	}
	if s := a.Stale(); len(s) != 1 || s[0].Reason != "other network" {
		t.Fatalf("stale %v, want the l2bridge entry", s)
	}
	if err := (&AllowEntry{Scenario: "x", Field: "y"}).compile(); err == nil {
		t.Fatal("an entry without a reason was accepted")
	}
}
