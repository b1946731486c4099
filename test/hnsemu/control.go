package hnsemu

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// The control API: what a test does to the emulated nodes besides the
// proxy's own calls. HTTP with JSON bodies; every answer is JSON, an error
// {"error":…} with a 4xx status.
//
//	GET  /v1/state?node=N     the node's profile, networks, endpoints, load balancers, namespaces, call counts
//	POST /v1/node             {"node","profile","version","reset"}: choose the release profile, optionally another HNS version (and empty the node)
//	POST /v1/cni/network      {"node","layout","name","subnet","nodeIP","remoteSubnets":[{"prefix","providerAddress"}]}
//	POST /v1/cni/endpoint     {"node","network","name","ip","mac","v1","remote","providerAddress"}
//	POST /v1/delete           {"node","kind","id"}: as `hnsdiag delete` would, behind the proxy's back
//	POST /v1/restart          {"node"}: HNS restarts (handles die; objects go or rehydrate by profile)
//	POST /v1/fail             {"node","count","hresult","function"}: the next count calls fail

// State is a node's HNS as the control API dumps it.
type State struct {
	Node          string         `json:"node"`
	Profile       Profile        `json:"profile"`
	Networks      []Network      `json:"networks"`
	Endpoints     []Endpoint     `json:"endpoints"`
	LoadBalancers []LoadBalancer `json:"loadBalancers"`
	Namespaces    []Namespace    `json:"namespaces"`
	// CNI are the ids of what a CNI made (control API), V1 those made
	// through HNS' V1 API.
	CNI   []string       `json:"cni"`
	V1    []string       `json:"v1"`
	Calls map[string]int `json:"calls"`
}

// State returns a copy of a node's HNS.
func (e *Emulator) State(nodeName string) State {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := e.node(nodeName)
	s := State{Node: n.name, Profile: n.profile, Networks: []Network{}, Endpoints: []Endpoint{}, LoadBalancers: []LoadBalancer{},
		Namespaces: []Namespace{}, CNI: []string{}, V1: []string{}, Calls: map[string]int{}}
	clone := func(src, dst any) { b, _ := json.Marshal(src); _ = json.Unmarshal(b, dst) }
	for _, id := range n.ids(kindNetwork) {
		var v Network
		clone(n.networks[id], &v)
		s.Networks = append(s.Networks, v)
	}
	for _, id := range n.ids(kindEndpoint) {
		var v Endpoint
		clone(n.endpoints[id], &v)
		s.Endpoints = append(s.Endpoints, v)
	}
	for _, id := range n.ids(kindLoadBalancer) {
		var v LoadBalancer
		clone(n.lbs[id], &v)
		s.LoadBalancers = append(s.LoadBalancers, v)
	}
	for _, id := range n.ids(kindNamespace) {
		s.Namespaces = append(s.Namespaces, *n.namespaces[id])
	}
	for id := range n.cni {
		s.CNI = append(s.CNI, id)
	}
	for id := range n.v1 {
		s.V1 = append(s.V1, id)
	}
	for k, v := range n.calls {
		s.Calls[k] = v
	}
	return s
}

// SetProfile gives a node a release profile; reset empties its HNS.
func (e *Emulator) SetProfile(nodeName, profile string, reset bool) (Profile, error) {
	return e.SetProfileVersion(nodeName, profile, "", reset)
}

// SetProfileVersion is SetProfile with the HNS version the node reports
// instead of the profile's ("MAJOR.MINOR"; "" keeps the profile's): a
// Server 2019 node reporting 9.5 (kubernetes #137530), a patched 2025.
func (e *Emulator) SetProfileVersion(nodeName, profile, version string, reset bool) (Profile, error) {
	p, err := profileNamed(profile)
	if err != nil {
		return Profile{}, err
	}
	if version != "" {
		var v Version
		if _, err := fmt.Sscanf(version, "%d.%d", &v.Major, &v.Minor); err != nil || v.Major < 0 || v.Minor < 0 {
			return Profile{}, fmt.Errorf("HNS version %q: want MAJOR.MINOR", version)
		}
		p.Version = v
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	n := e.node(nodeName)
	n.profile = p
	if reset {
		n.reset()
		n.epoch++
	}
	return p, nil
}

// RemoteSubnet is another node's pod subnet and its address (flannel's
// RemoteSubnetRoute policy).
type RemoteSubnet struct {
	Prefix          string `json:"prefix"`
	ProviderAddress string `json:"providerAddress"`
}

// CNINetwork asks for a CNI's network.
type CNINetwork struct {
	Node string `json:"node"`
	// Layout is how the CNI builds it, as platform_windows/layouts_test.go
	// describes each (cited there part by part):
	//   "flannel-host-gw": Microsoft SDN flannel l2bridge, layout (b2): an
	//     External L2Bridge network 192.168.255.0/30 first, then cbr0
	//     (L2Bridge, the node's pod subnet, gateway .1) and its host
	//     endpoint cbr0_ep at the subnet's .2 through the V1 API;
	//   "l2bridge": the same cbr0 without External or cbr0_ep (a network as
	//     win-bridge's conf names it, made by the node's scripts);
	//   "flannel-vxlan": sig-windows-tools HostProcess flannel, layout (a):
	//     External (Overlay, 192.168.255.0/30, VSID 9999) first, then
	//     flannel.4096 (Overlay, the node's lease in Ipams, a
	//     RemoteSubnetRoute policy per other node's lease, VNI 4096).
	Layout        string         `json:"layout"`
	Name          string         `json:"name"`
	Subnet        string         `json:"subnet"`
	NodeIP        string         `json:"nodeIP"`
	RemoteSubnets []RemoteSubnet `json:"remoteSubnets"`
}

// CreateCNINetwork builds a CNI's network (and what comes with it) and
// returns the pod network.
func (e *Emulator) CreateCNINetwork(req CNINetwork) (Network, error) {
	prefix, err := netip.ParsePrefix(req.Subnet)
	if err != nil {
		return Network{}, fmt.Errorf("subnet: %w", err)
	}
	prefix = prefix.Masked()
	gw := prefix.Addr().Next()
	ipam := func(p netip.Prefix, gw netip.Addr) []Ipam {
		return []Ipam{{Type: "Static", Subnets: []Subnet{{IpAddressPrefix: p.String(),
			Routes: []Route{{NextHop: gw.String(), DestinationPrefix: "0.0.0.0/0"}}}}}}
	}
	ext := netip.MustParsePrefix("192.168.255.0/30")
	e.mu.Lock()
	defer e.mu.Unlock()
	n := e.node(req.Node)
	var pod Network
	var external *Network
	var hostEP *Endpoint
	switch req.Layout {
	case "flannel-host-gw", "l2bridge":
		name := req.Name
		if name == "" {
			name = "cbr0"
		}
		pod = Network{Name: name, Type: "L2Bridge", Ipams: ipam(prefix, gw)}
		if req.Layout == "flannel-host-gw" {
			external = &Network{Name: "External", Type: "L2Bridge", Ipams: ipam(ext, ext.Addr().Next())}
			hostEP = &Endpoint{Name: name + "_ep", IpConfigurations: []IpConfig{{IpAddress: gw.Next().String()}}}
		}
	case "flannel-vxlan":
		name := req.Name
		if name == "" {
			name = "flannel.4096"
		}
		pod = Network{Name: name, Type: "Overlay", Ipams: ipam(prefix, gw)}
		for _, rs := range req.RemoteSubnets {
			s, _ := json.Marshal(map[string]any{"DestinationPrefix": rs.Prefix, "IsolationId": 4096,
				"ProviderAddress": rs.ProviderAddress, "DistributedRouterMacAddress": "66-66-66-66-66-66"})
			pod.Policies = append(pod.Policies, Policy{Type: "RemoteSubnetRoute", Settings: s})
		}
		vsid, _ := json.Marshal(map[string]any{"Isolation": 9999})
		external = &Network{Name: "External", Type: "Overlay", Ipams: ipam(ext, ext.Addr().Next()),
			Policies: []Policy{{Type: "VSID", Settings: vsid}}}
	default:
		return Network{}, fmt.Errorf("unknown layout %q (have flannel-host-gw, l2bridge, flannel-vxlan)", req.Layout)
	}
	if external != nil && !n.hasNetwork("External") {
		id := newGUID()
		if err := n.addNetwork(id, external); err != nil {
			return Network{}, err
		}
		n.cni[id] = true
	}
	id := newGUID()
	if err := n.addNetwork(id, &pod); err != nil {
		return Network{}, err
	}
	n.cni[id] = true
	if hostEP != nil {
		eid := newGUID()
		if err := n.addEndpoint(eid, &pod, hostEP); err != nil {
			return Network{}, err
		}
		n.cni[eid], n.v1[eid] = true, true
	}
	return pod, nil
}

func (n *node) hasNetwork(name string) bool {
	for _, nw := range n.networks {
		if strings.EqualFold(nw.Name, name) {
			return true
		}
	}
	return false
}

// CNIEndpoint asks for a pod's endpoint as the CNI makes it: win-bridge (no
// MAC sent: HNS assigns one), flannel's and Calico's overlay plugins
// (0E-2A-<ip>, layouts_test.go overlayMAC), through V1 when V1 is set.
type CNIEndpoint struct {
	Node            string `json:"node"`
	Network         string `json:"network"`
	Name            string `json:"name"`
	IP              string `json:"ip"`
	MAC             string `json:"mac"`
	V1              bool   `json:"v1"`
	Remote          bool   `json:"remote"`
	ProviderAddress string `json:"providerAddress"`
}

// CreateCNIEndpoint makes a pod's (or host's) endpoint on a named network.
func (e *Emulator) CreateCNIEndpoint(req CNIEndpoint) (Endpoint, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := e.node(req.Node)
	var nw *Network
	for _, id := range n.ids(kindNetwork) {
		if strings.EqualFold(n.networks[id].Name, req.Network) {
			nw = n.networks[id]
		}
	}
	if nw == nil {
		return Endpoint{}, fmt.Errorf("no network named %q", req.Network)
	}
	a, err := netip.ParseAddr(req.IP)
	if err != nil {
		return Endpoint{}, fmt.Errorf("ip: %w", err)
	}
	mac := req.MAC
	if mac == "" && strings.EqualFold(nw.Type, "Overlay") && a.Is4() {
		b := a.As4()
		mac = fmt.Sprintf("0E-2A-%02X-%02X-%02X-%02X", b[0], b[1], b[2], b[3])
	}
	ep := &Endpoint{Name: req.Name, MacAddress: mac, IpConfigurations: []IpConfig{{IpAddress: a.String()}}}
	if req.Remote {
		ep.Flags |= endpointFlagRemote
	}
	if req.ProviderAddress != "" {
		s, _ := json.Marshal(map[string]string{"ProviderAddress": req.ProviderAddress})
		ep.Policies = append(ep.Policies, Policy{Type: "ProviderAddress", Settings: s})
	}
	id := newGUID()
	if herr := n.addEndpoint(id, nw, ep); herr != nil {
		return Endpoint{}, herr
	}
	n.cni[id] = true
	if req.V1 {
		n.v1[id] = true
	}
	return *ep, nil
}

// AddRemoteSubnet is the CNI adding a RemoteSubnetRoute policy to an
// overlay network for a node that joined (flannel
// pkg/backend/vxlan/vxlan_network_windows.go handleSubnetEvents), in the
// settings flannel-vxlan's layout gives the others.
func (e *Emulator) AddRemoteSubnet(nodeName, network string, rs RemoteSubnet) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := e.node(nodeName)
	for _, id := range n.ids(kindNetwork) {
		nw := n.networks[id]
		if !strings.EqualFold(nw.Name, network) {
			continue
		}
		s, _ := json.Marshal(map[string]any{"DestinationPrefix": rs.Prefix, "IsolationId": 4096,
			"ProviderAddress": rs.ProviderAddress, "DistributedRouterMacAddress": "66-66-66-66-66-66"})
		nw.Policies = append(nw.Policies, Policy{Type: "RemoteSubnetRoute", Settings: s})
		return nil
	}
	return fmt.Errorf("no network %q on node %s", network, n.name)
}

// Delete removes an object behind the proxy's back, as `hnsdiag delete`
// does: no reference checks.
func (e *Emulator) Delete(nodeName, kind, id string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := e.node(nodeName)
	k := map[string]string{"network": kindNetwork, "networks": kindNetwork, "endpoint": kindEndpoint, "endpoints": kindEndpoint,
		"loadbalancer": kindLoadBalancer, "loadbalancers": kindLoadBalancer, "namespace": kindNamespace, "namespaces": kindNamespace}[strings.ToLower(kind)]
	cid := canonGUID(id)
	if k == "" || cid == "" || n.object(k, cid) == nil {
		return fmt.Errorf("no %s %q on node %s", kind, id, n.name)
	}
	n.drop(k, cid)
	return nil
}

// Restart is an HNS restart: every handle dies; by the profile, the load
// balancers come back under new ids (RehydrateAfterRestart) or are gone
// together with every endpoint no CNI made (remote endpoints, a proxy's
// source-VIP endpoint), as platform_windows fake_helpers_test.go Restart and
// RestartLosingState model it. Networks and the CNI's endpoints stay.
func (e *Emulator) Restart(nodeName string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := e.node(nodeName)
	n.epoch++
	for h, ref := range e.handles {
		if ref.node == n.name {
			delete(e.handles, h)
		}
	}
	lbs := n.ids(kindLoadBalancer)
	if n.profile.RehydrateAfterRestart {
		for _, id := range lbs {
			lb := n.lbs[id]
			n.drop(kindLoadBalancer, id)
			lb.ID = newGUID()
			n.lbs[lb.ID] = lb
			n.add(lb.ID)
		}
		return
	}
	for _, id := range lbs {
		n.drop(kindLoadBalancer, id)
	}
	for _, id := range n.ids(kindEndpoint) {
		if !n.cni[id] {
			n.drop(kindEndpoint, id)
		}
	}
}

// FailNext makes the next count calls (those whose function name contains
// function; all when empty; closes never) fail with hresult (default
// E_FAIL).
func (e *Emulator) FailNext(nodeName string, count int, hresult uint32, function string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := e.node(nodeName)
	if hresult == 0 {
		hresult = hrFail
	}
	n.failN, n.failHR, n.failFn = count, hresult, function
}

// Handler is the control API.
func (e *Emulator) Handler() http.Handler {
	mux := http.NewServeMux()
	reply := func(w http.ResponseWriter, v any, err error) {
		w.Header().Set("Content-Type", "application/json")
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
			return
		}
		_ = json.NewEncoder(w).Encode(v)
	}
	body := func(r *http.Request, v any) error {
		if err := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<20)).Decode(v); err != nil {
			return fmt.Errorf("request body: %w", err)
		}
		return nil
	}
	mux.HandleFunc("GET /v1/state", func(w http.ResponseWriter, r *http.Request) {
		reply(w, e.State(r.URL.Query().Get("node")), nil)
	})
	mux.HandleFunc("POST /v1/node", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Node, Profile, Version string
			Reset                  bool
		}
		if err := body(r, &req); err != nil {
			reply(w, nil, err)
			return
		}
		p, err := e.SetProfileVersion(req.Node, req.Profile, req.Version, req.Reset)
		reply(w, p, err)
	})
	mux.HandleFunc("POST /v1/cni/network", func(w http.ResponseWriter, r *http.Request) {
		var req CNINetwork
		if err := body(r, &req); err != nil {
			reply(w, nil, err)
			return
		}
		nw, err := e.CreateCNINetwork(req)
		reply(w, nw, err)
	})
	mux.HandleFunc("POST /v1/cni/endpoint", func(w http.ResponseWriter, r *http.Request) {
		var req CNIEndpoint
		if err := body(r, &req); err != nil {
			reply(w, nil, err)
			return
		}
		ep, err := e.CreateCNIEndpoint(req)
		reply(w, ep, err)
	})
	mux.HandleFunc("POST /v1/delete", func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Node, Kind, ID string }
		if err := body(r, &req); err != nil {
			reply(w, nil, err)
			return
		}
		reply(w, map[string]string{"deleted": req.ID}, e.Delete(req.Node, req.Kind, req.ID))
	})
	mux.HandleFunc("POST /v1/restart", func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Node string }
		if err := body(r, &req); err != nil {
			reply(w, nil, err)
			return
		}
		e.Restart(req.Node)
		reply(w, map[string]string{"restarted": req.Node}, nil)
	})
	mux.HandleFunc("POST /v1/fail", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Node     string
			Count    int
			HResult  uint32
			Function string
		}
		if err := body(r, &req); err != nil {
			reply(w, nil, err)
			return
		}
		e.FailNext(req.Node, req.Count, req.HResult, req.Function)
		reply(w, map[string]int{"failing": req.Count}, nil)
	})
	return mux
}
