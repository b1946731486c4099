package nft

import (
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"
)

type fakeSysctl struct {
	vals   map[string]string
	failOn string
}

func (f *fakeSysctl) Get(n string) (string, error) { return f.vals[n] + "\n", nil }
func (f *fakeSysctl) Set(n, v string) error {
	if n == f.failOn {
		return errors.New("read-only file system")
	}
	f.vals[n] = v
	return nil
}

func TestEnsureSysctls(t *testing.T) {
	f := &fakeSysctl{vals: map[string]string{"net.ipv4.ip_forward": "0", "net.ipv6.conf.all.forwarding": "1",
		"net.ipv4.conf.all.route_localnet": "0"}, failOn: "net.ipv4.conf.all.route_localnet"}
	res := ensureSysctls(f, []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}, true)
	if len(res) != 3 {
		t.Fatalf("want 3 results, got %v", res)
	}
	if !res[0].Set || f.vals["net.ipv4.ip_forward"] != "1" {
		t.Errorf("ip_forward not set: %v", res[0])
	}
	if res[1].Set || res[1].Err != nil || res[1].Was != "1" {
		t.Errorf("forwarding v6 should be left alone: %+v", res[1])
	}
	if res[2].Err == nil {
		t.Errorf("route_localnet failure not reported: %+v", res[2])
	}
	for _, r := range res {
		if r.String() == "" {
			t.Error("empty report")
		}
	}
}
