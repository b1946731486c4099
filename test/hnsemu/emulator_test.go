package hnsemu

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// call is a DLL call as the stand-ins make it.
func call(e *Emulator, fn string, args ...any) (uint32, uint64, string, string) {
	var a []*string
	for _, v := range args {
		switch v := v.(type) {
		case nil:
			a = append(a, nil)
		case string:
			s := v
			a = append(a, &s)
		}
	}
	hr, h, out, res := e.Call("n", fn, a)
	var o, r string
	if out != nil {
		o = *out
	}
	if res != nil {
		r = *res
	}
	return hr, h, o, r
}

func handleArg(h uint64) string { return strconv.FormatUint(h, 10) }

// TestBadInput: malformed JSON, unknown ids and handles, NULL arguments and
// unknown functions get HNS' error codes and a result document, never a
// panic or a success.
func TestBadInput(t *testing.T) {
	e := New()
	if _, err := e.CreateCNINetwork(CNINetwork{Node: "n", Layout: "l2bridge", Subnet: "10.244.1.0/24"}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		fn   string
		args []any
		want uint32
	}{
		{"malformed LB JSON", "HcnCreateLoadBalancer", []any{zeroGUID, "{not json"}, hrInvalidJSON},
		{"NULL settings", "HcnCreateLoadBalancer", []any{zeroGUID, nil}, hrInvalidArg},
		{"malformed query", "HcnEnumerateNetworks", []any{"[1,"}, hrInvalidJSON},
		{"malformed filter", "HcnEnumerateEndpoints", []any{`{"Filter":"{x"}`}, hrInvalidJSON},
		{"bad GUID", "HcnOpenNetwork", []any{"not-a-guid"}, hrInvalidArg},
		{"unknown network", "HcnOpenNetwork", []any{"01234567-89ab-4def-8123-456789abcdef"}, hrNetworkNotFound},
		{"unknown endpoint", "HcnOpenEndpoint", []any{"01234567-89ab-4def-8123-456789abcdef"}, hrEndpointNotFound},
		{"unknown LB delete", "HcnDeleteLoadBalancer", []any{"01234567-89ab-4def-8123-456789abcdef"}, hrElementNotFound},
		{"unknown handle", "HcnQueryNetworkProperties", []any{"999", ""}, hrInvalidHandle},
		{"garbage handle", "HcnCloseEndpoint", []any{"x"}, hrInvalidHandle},
		{"endpoint on unknown handle", "HcnCreateEndpoint", []any{"0", zeroGUID, "{}"}, hrInvalidHandle},
		{"LB with unknown endpoint", "HcnCreateLoadBalancer", []any{zeroGUID,
			`{"HostComputeEndpoints":["01234567-89ab-4def-8123-456789abcdef"],"FrontendVIPs":["10.96.0.1"],"PortMappings":[{"Protocol":6,"InternalPort":80,"ExternalPort":80}]}`}, hrInvalidJSONReference},
		{"LB protocol 1", "HcnCreateLoadBalancer", []any{zeroGUID, `{"PortMappings":[{"Protocol":1,"InternalPort":80,"ExternalPort":80}]}`}, hrInvalidArg},
		{"unknown function", "HcnFrobnicate", nil, hrNotImpl},
	}
	for _, c := range cases {
		hr, _, _, res := call(e, c.fn, c.args...)
		if hr != c.want {
			t.Errorf("%s: HRESULT 0x%x, want 0x%x (%s)", c.name, hr, c.want, res)
		}
		var doc struct {
			Success   bool
			Error     string
			ErrorCode uint32
		}
		if err := json.Unmarshal([]byte(res), &doc); err != nil || doc.Success || doc.ErrorCode != c.want || doc.Error == "" {
			t.Errorf("%s: result %q, want an HNS error document with code 0x%x", c.name, res, c.want)
		}
	}
	// V1: a malformed or unknown path answers a failed response document.
	_, _, out, _ := call(e, "HNSCall", "GET", "/endpoints/zzz", "")
	if !strings.Contains(out, `"Success":false`) {
		t.Errorf("V1 unknown endpoint: %s", out)
	}
}

// TestLoadBalancerRules: duplicate frontends, identical objects, endpoint
// address clashes and modify by profile, with the HRESULTs hcn branches on.
func TestLoadBalancerRules(t *testing.T) {
	e := New()
	if _, err := e.CreateCNINetwork(CNINetwork{Node: "n", Layout: "l2bridge", Subnet: "10.244.1.0/24"}); err != nil {
		t.Fatal(err)
	}
	ep, err := e.CreateCNIEndpoint(CNIEndpoint{Node: "n", Network: "cbr0", Name: "pod", IP: "10.244.1.5"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.CreateCNIEndpoint(CNIEndpoint{Node: "n", Network: "cbr0", Name: "dup", IP: "10.244.1.5"}); err == nil || !strings.Contains(err.Error(), "0x80071392") {
		t.Errorf("endpoint address clash: %v, want ERROR_OBJECT_ALREADY_EXISTS", err)
	}
	lb := `{"HostComputeEndpoints":["` + strings.ToLower(ep.ID) + `"],"FrontendVIPs":["10.96.0.10"],"PortMappings":[{"Protocol":6,"InternalPort":8080,"ExternalPort":80}]}`
	hr, h, _, res := call(e, "HcnCreateLoadBalancer", zeroGUID, lb)
	if hr != hrOK || h == 0 || res != "" {
		t.Fatalf("create: 0x%x %s", hr, res)
	}
	if hr, _, _, _ := call(e, "HcnCreateLoadBalancer", zeroGUID, lb); hr != hrAlreadyExists {
		t.Errorf("identical load balancer: 0x%x, want 0x%x", hr, hrAlreadyExists)
	}
	other := strings.Replace(lb, "8080", "9090", 1)
	if hr, _, _, _ := call(e, "HcnCreateLoadBalancer", zeroGUID, other); hr != hrPortAlreadyExists {
		t.Errorf("same frontend: 0x%x, want 0x%x", hr, hrPortAlreadyExists)
	}
	_, _, props, _ := call(e, "HcnQueryLoadBalancerProperties", handleArg(h), "")
	var got LoadBalancer
	if err := json.Unmarshal([]byte(props), &got); err != nil || len(got.HostComputeEndpoints) != 1 || got.HostComputeEndpoints[0] != ep.ID {
		t.Errorf("read back %s: endpoint ids in HNS' spelling expected", props)
	}
	// ws2022: no modify. ws2025 (15.4): modify keeps the old endpoints.
	if hr, _, _, _ := call(e, "HcnModifyLoadBalancer", handleArg(h), other); hr != hrNotImpl {
		t.Errorf("modify on ws2022: 0x%x, want E_NOTIMPL", hr)
	}
	if _, err := e.SetProfile("n", "ws2025", false); err != nil {
		t.Fatal(err)
	}
	noEP := `{"FrontendVIPs":["10.96.0.10"],"PortMappings":[{"Protocol":6,"InternalPort":9090,"ExternalPort":80}]}`
	if hr, _, _, res := call(e, "HcnModifyLoadBalancer", handleArg(h), noEP); hr != hrOK {
		t.Fatalf("modify on ws2025: 0x%x %s", hr, res)
	}
	s := e.State("n")
	if len(s.LoadBalancers) != 1 || len(s.LoadBalancers[0].HostComputeEndpoints) != 1 || s.LoadBalancers[0].PortMappings[0].InternalPort != 9090 {
		t.Errorf("ws2025 modify: %+v, want the new port and the old endpoint", s.LoadBalancers)
	}
	// The endpoint is in use: HNS refuses its delete (as fake.go).
	if hr, _, _, _ := call(e, "HcnDeleteEndpoint", ep.ID); hr != hrInvalidArg {
		t.Errorf("delete of a used endpoint: 0x%x", hr)
	}
	// A restart invalidates handles and, on ws2025, rehydrates under a new id.
	old := s.LoadBalancers[0].ID
	e.Restart("n")
	if hr, _, _, _ := call(e, "HcnQueryLoadBalancerProperties", handleArg(h), ""); hr != hrInvalidHandle {
		t.Errorf("handle after restart: 0x%x", hr)
	}
	s = e.State("n")
	if len(s.LoadBalancers) != 1 || s.LoadBalancers[0].ID == old {
		t.Errorf("after restart: %+v, want the load balancer under a new id", s.LoadBalancers)
	}
	if _, _, out, _ := call(e, "HNSCall", "GET", "/globals/version", ""); out != `{"Success":true,"Output":{"Major":15,"Minor":4}}` {
		t.Errorf("version: %s", out)
	}
}

// TestWire: the DLLs' framing, and a request that does not parse closes the
// connection without harming the server.
func TestWire(t *testing.T) {
	s, err := Start("127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	send := func(payload []byte) []byte {
		c, err := net.Dial("tcp", s.DLLAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = c.Write(payload)
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(c)
		return buf.Bytes()
	}
	if got := send([]byte{0xff, 0xff, 0xff, 0x7f, 1, 2}); len(got) != 0 {
		t.Errorf("garbage got an answer: %x", got)
	}
	var req bytes.Buffer
	fields := []*string{ptr("n"), ptr("HNSCall"), ptr("GET"), ptr("/globals/version"), nil}
	_ = binary.Write(&req, binary.LittleEndian, uint32(len(fields)))
	for _, f := range fields {
		if f == nil {
			_ = binary.Write(&req, binary.LittleEndian, uint32(wireNull))
			continue
		}
		_ = binary.Write(&req, binary.LittleEndian, uint32(len(*f)))
		req.WriteString(*f)
	}
	got := send(req.Bytes())
	if len(got) < 16 || binary.LittleEndian.Uint32(got) != 0 {
		t.Fatalf("answer %x", got)
	}
	n := binary.LittleEndian.Uint32(got[12:])
	if body := string(got[16 : 16+n]); body != `{"Success":true,"Output":{"Major":13,"Minor":2}}` {
		t.Errorf("HNSCall answer %q", body)
	}
}

func ptr(s string) *string { return &s }
