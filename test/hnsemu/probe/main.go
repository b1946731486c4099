//go:build windows

// Command probe calls hcsshim's hcn and V1 functions that crossproxy's
// backend uses (platform_windows/hcn_windows.go, hcn_byname_windows.go)
// against whatever computenetwork.dll and vmcompute.dll the process loads,
// and prints one JSON line per call: what hcn returned and how hcn's own
// error predicates classify its error. Run under Wine in the emulator's
// prefix it shows the DLL stand-ins and the emulator through hcn's real
// parsing, independently of crossproxy.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/Microsoft/hcsshim"
	"github.com/Microsoft/hcsshim/hcn"
)

type line struct {
	Call          string `json:"call"`
	OK            bool   `json:"ok"`
	Result        any    `json:"result,omitempty"`
	Error         string `json:"error,omitempty"`
	NotFound      bool   `json:"notFound,omitempty"`
	ElementNF     bool   `json:"elementNotFound,omitempty"`
	PortExists    bool   `json:"portAlreadyExists,omitempty"`
	NotImpl       bool   `json:"notImplemented,omitempty"`
	AlreadyExists bool   `json:"alreadyExists,omitempty"`
}

func emit(call string, v any, err error) {
	l := line{Call: call, OK: err == nil, Result: v}
	if err != nil {
		l.Result = nil
		l.Error = err.Error()
		l.NotFound = hcn.IsNotFoundError(err)
		l.ElementNF = hcn.IsElementNotFoundError(err)
		l.PortExists = hcn.IsPortAlreadyExistsError(err)
		l.NotImpl = hcn.IsNotImplemented(err)
		l.AlreadyExists = hcn.CheckErrorWithCode(err, 0xb7)
	}
	b, _ := json.Marshal(l)
	fmt.Println(string(b))
}

func main() {
	network := "cbr0"
	if len(os.Args) > 1 {
		network = os.Args[1]
	}
	g, err := hcn.GetGlobals()
	emit("GetGlobals", g, err)
	nws, err := hcn.ListNetworks()
	emit("ListNetworks", nws, err)
	nw, err := hcn.GetNetworkByName(network)
	emit("GetNetworkByName", nw, err)
	_, err = hcn.GetNetworkByName("no-such-network")
	emit("GetNetworkByName(missing)", nil, err)
	if nw == nil {
		os.Exit(1)
	}
	eps, err := hcn.ListEndpointsOfNetwork(nw.Id)
	emit("ListEndpointsOfNetwork", eps, err)
	var ids []string
	for _, ep := range eps {
		ids = append(ids, ep.Id)
	}
	lb := &hcn.HostComputeLoadBalancer{HostComputeEndpoints: ids, FrontendVIPs: []string{"10.96.99.1"},
		PortMappings:  []hcn.LoadBalancerPortMapping{{Protocol: 6, InternalPort: 8080, ExternalPort: 80}},
		SchemaVersion: hcn.V2SchemaVersion()}
	got, err := lb.Create()
	emit("CreateLoadBalancer", got, err)
	_, err = lb.Create()
	emit("CreateLoadBalancer(identical)", nil, err)
	other := *lb
	other.PortMappings = []hcn.LoadBalancerPortMapping{{Protocol: 6, InternalPort: 9090, ExternalPort: 80}}
	_, err = other.Create()
	emit("CreateLoadBalancer(same frontend)", nil, err)
	bad := *lb
	bad.HostComputeEndpoints = []string{"01234567-89ab-4def-8123-456789abcdef"}
	bad.FrontendVIPs = []string{"10.96.99.2"}
	_, err = bad.Create()
	emit("CreateLoadBalancer(unknown endpoint)", nil, err)
	if got != nil {
		_, err = lb.Update(got.Id)
		emit("UpdateLoadBalancer", nil, err)
		lbs, err := hcn.ListLoadBalancers()
		emit("ListLoadBalancers", lbs, err)
		emit("DeleteLoadBalancer", nil, (&hcn.HostComputeLoadBalancer{Id: got.Id}).Delete())
		emit("DeleteLoadBalancer(again)", nil, (&hcn.HostComputeLoadBalancer{Id: got.Id}).Delete())
	}
	emit("DeleteEndpoint(missing)", nil, (&hcn.HostComputeEndpoint{Id: "01234567-89ab-4def-8123-456789abcdef"}).Delete())
	v1, err := hcsshim.GetHNSEndpointByName(network + "_ep")
	emit("V1 GetHNSEndpointByName", v1, err)
	_, err = hcsshim.GetHNSEndpointByName("no-such-endpoint")
	emit("V1 GetHNSEndpointByName(missing)", nil, err)
	feats, err := hcn.GetCachedSupportedFeatures()
	emit("GetCachedSupportedFeatures", feats, err)
}
