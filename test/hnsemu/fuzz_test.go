package hnsemu

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzCall: whatever a caller sends (any export name, any arguments, NULLs),
// the emulator answers S_OK without a result document or a failure HRESULT
// with one, and never reaches its panic guard. Seeds run in every `go test`;
// `go test -fuzz FuzzCall ./test/hnsemu/` explores.
func FuzzCall(f *testing.F) {
	lb := `{"HostComputeEndpoints":["ID"],"FrontendVIPs":["10.96.0.10"],"PortMappings":[{"Protocol":6,"InternalPort":80,"ExternalPort":80}]}`
	for _, seed := range [][4]string{
		{"HcnCreateLoadBalancer", zeroGUID, lb, ""},
		{"HcnCreateLoadBalancer", zeroGUID, `{"PortMappings":[{"Protocol":17,"InternalPort":1,"ExternalPort":1}],"Flags":3}`, ""},
		{"HcnEnumerateEndpoints", `{"Filter":"{\"VirtualNetwork\":\"x\"}"}`, "", ""},
		{"HcnOpenNetwork", "NET", "", ""},
		{"HcnCreateEndpoint", "1", zeroGUID, `{"IpConfigurations":[{"IpAddress":"10.244.1.9"}],"Flags":1}`},
		{"HcnModifyNetwork", "1", `{"ResourceType":"Policy","RequestType":"Remove","Settings":{"Policies":[{"Type":"X"}]}}`, ""},
		{"HcnModifyLoadBalancer", "2", lb, ""},
		{"HcnQueryLoadBalancerProperties", "2", "", ""},
		{"HcnDeleteEndpoint", "ID", "", ""},
		{"HcnCreateNamespace", zeroGUID, `{"Type":"HostDefault"}`, ""},
		{"HNSCall", "GET", "/endpoints/ID", ""},
		{"HNSCall", "POST", "/networks", "{}"},
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3], uint8(0))
	}
	f.Fuzz(func(t *testing.T, fn, a, b, c string, nulls uint8) {
		e := New()
		if _, err := e.SetProfile("n", "ws2025", false); err != nil {
			t.Fatal(err)
		}
		nw, err := e.CreateCNINetwork(CNINetwork{Node: "n", Layout: "flannel-vxlan", Subnet: "10.244.1.0/24",
			RemoteSubnets: []RemoteSubnet{{Prefix: "10.244.2.0/24", ProviderAddress: "192.168.0.12"}}})
		if err != nil {
			t.Fatal(err)
		}
		ep, err := e.CreateCNIEndpoint(CNIEndpoint{Node: "n", Network: nw.Name, Name: "pod", IP: "10.244.1.5"})
		if err != nil {
			t.Fatal(err)
		}
		// Handle 1: the network; handle 2: a load balancer.
		e.Call("n", "HcnOpenNetwork", []*string{&nw.ID})
		e.Call("n", "HcnCreateLoadBalancer", []*string{ptr(zeroGUID), ptr(strings.ReplaceAll(lb, "ID", ep.ID))})
		sub := func(s string) string { return strings.NewReplacer("NET", nw.ID, "ID", ep.ID).Replace(s) }
		args := []*string{ptr(sub(a)), ptr(sub(b)), ptr(sub(c))}
		for i := range args {
			if nulls&(1<<i) != 0 {
				args[i] = nil
			}
		}
		hr, _, out, result := e.Call("n", fn, args)
		if hr&0x80000000 == 0 {
			if hr != 0 || result != nil {
				t.Fatalf("%s: success 0x%x with result %v", fn, hr, result)
			}
			if out != nil && fn != "HNSCall" && !json.Valid([]byte(*out)) {
				t.Fatalf("%s: output is not JSON: %q", fn, *out)
			}
			return
		}
		if result == nil || !json.Valid([]byte(*result)) {
			t.Fatalf("%s: failure 0x%x without an error document", fn, hr)
		}
		if strings.Contains(*result, "internal error") {
			t.Fatalf("%s(%q, %q, %q): %s", fn, a, b, c, *result)
		}
		// The state still dumps as JSON.
		if _, err := json.Marshal(e.State("n")); err != nil {
			t.Fatal(err)
		}
	})
}
