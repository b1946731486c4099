package hnsemu

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestControlAPI: the HTTP control API drives the same state the DLL calls
// see: a layout, a V1 endpoint shown by V1 and hidden from V2, an injected
// failure, a delete behind the proxy's back, bad requests refused.
func TestControlAPI(t *testing.T) {
	s, err := Start("127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	base := "http://" + s.ControlAddr
	post := func(path, body string) (int, map[string]any) {
		r, err := http.Post(base+path, "application/json", bytes.NewBufferString(body))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(r.Body).Decode(&m)
		return r.StatusCode, m
	}
	if code, _ := post("/v1/node", `{"node":"w","profile":"ws2019","reset":true}`); code != 200 {
		t.Fatalf("node: %d", code)
	}
	if code, m := post("/v1/node", `{"node":"w","profile":"ws1803"}`); code != 400 || !strings.Contains(m["error"].(string), "unknown profile") {
		t.Errorf("unknown profile: %d %v", code, m)
	}
	if code, m := post("/v1/node", `{"node":"w","profile":"ws2019","version":"nine"}`); code != 400 {
		t.Errorf("bad version: %d %v", code, m)
	}
	// A Server 2019 node reporting HNS 9.5 (kubernetes #137530).
	if code, _ := post("/v1/node", `{"node":"v","profile":"ws2019","version":"9.5"}`); code != 200 {
		t.Errorf("version 9.5: %d", code)
	}
	if hr, _, out, _ := s.Call("v", "HNSCall", []*string{ptr("GET"), ptr("/globals/version"), ptr("")}); hr != 0 || out == nil || !strings.Contains(*out, `{"Major":9,"Minor":5}`) {
		t.Errorf("version 9.5: HRESULT 0x%x, answer %v", hr, out)
	}
	if code, _ := post("/v1/cni/network", `{"node":"w","layout":"flannel-vxlan","subnet":"10.244.1.0/24","remoteSubnets":[{"prefix":"10.244.2.0/24","providerAddress":"192.168.0.12"}]}`); code != 200 {
		t.Fatalf("network: %d", code)
	}
	if code, _ := post("/v1/cni/network", `{not json`); code != 400 {
		t.Errorf("malformed request: %d", code)
	}
	code, ep := post("/v1/cni/endpoint", `{"node":"w","network":"flannel.4096","name":"v1ep","ip":"10.244.1.9","v1":true,"remote":true,"providerAddress":"192.168.0.12"}`)
	if code != 200 || ep["MacAddress"] != "0E-2A-0A-F4-01-09" {
		t.Fatalf("endpoint: %d %v", code, ep)
	}
	e := s.Emulator
	call := func(fn string, args ...string) (uint32, string) {
		var a []*string
		for i := range args {
			a = append(a, &args[i])
		}
		hr, _, out, _ := e.Call("w", fn, a)
		if out == nil {
			return hr, ""
		}
		return hr, *out
	}
	// ws2019 hides V1 endpoints from V2 listings; V1 shows it with its PA.
	if _, out := call("HcnEnumerateEndpoints", `{"SchemaVersion":{"Major":2,"Minor":0}}`); out != "[]" {
		t.Errorf("V2 listing shows the V1 endpoint: %s", out)
	}
	if _, out := call("HNSCall", "GET", "/endpoints/", ""); !strings.Contains(out, `"PA":"192.168.0.12","Type":"PA"`) || !strings.Contains(out, `"IsRemoteEndpoint":true`) {
		t.Errorf("V1 listing: %s", out)
	}
	// Two injected failures of listings, then success; closes never fail.
	if code, _ := post("/v1/fail", `{"node":"w","count":2,"hresult":2151350304,"function":"Enumerate"}`); code != 200 {
		t.Fatal(code)
	}
	for i := 0; i < 2; i++ {
		if hr, _ := call("HcnEnumerateNetworks", ""); hr != 0x803b0020 {
			t.Errorf("injected failure %d: 0x%x", i, hr)
		}
	}
	if hr, out := call("HcnEnumerateNetworks", ""); hr != 0 || strings.Count(out, "-") != 8 {
		t.Errorf("after the injected failures: 0x%x %s", hr, out)
	}
	// Delete behind the proxy's back; unknown ids refused.
	id := ep["ID"].(string)
	if code, _ := post("/v1/delete", `{"node":"w","kind":"endpoint","id":"`+strings.ToLower(id)+`"}`); code != 200 {
		t.Errorf("delete: %d", code)
	}
	if code, _ := post("/v1/delete", `{"node":"w","kind":"endpoint","id":"`+id+`"}`); code != 400 {
		t.Errorf("delete again: %d", code)
	}
	r, err := http.Get(base + "/v1/state?node=w")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var st State
	if err := json.NewDecoder(r.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	if st.Profile.Name != "ws2019" || len(st.Networks) != 2 || len(st.Endpoints) != 0 || len(st.Networks[1].Policies) != 1 {
		t.Errorf("state: %+v", st)
	}
}
