// Package hnsemu is an emulator of Windows' Host Networking Service (HNS)
// below hcsshim: stand-ins for computenetwork.dll and vmcompute.dll (dll/,
// built with mingw, loaded by unmodified Windows binaries under Wine)
// forward every call to this process, which holds the HNS state of one or
// more emulated nodes and answers in HNS' JSON and HRESULTs. See README.md.
package hnsemu

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// HRESULTs the emulator answers with. Names are those of
// golang.org/x/sys/windows (zerrors_windows.go) and winerror.h; the
// HCN_E_* are HNS' own facility (0x803b). hcsshim's generated syscalls turn
// a FACILITY_WIN32 HRESULT back into its Win32 code (0x800700b7 → 0xb7,
// hcn/zsyscall_windows.go) and keep 0x803bxxxx whole.
const (
	hrOK                   uint32 = 0
	hrNotImpl              uint32 = 0x80004001 // E_NOTIMPL (hcn IsNotImplemented)
	hrFail                 uint32 = 0x80004005 // E_FAIL
	hrInvalidHandle        uint32 = 0x80070006 // HRESULT_FROM_WIN32(ERROR_INVALID_HANDLE)
	hrInvalidArg           uint32 = 0x80070057 // E_INVALIDARG
	hrAlreadyExists        uint32 = 0x800700b7 // HRESULT_FROM_WIN32(ERROR_ALREADY_EXISTS), kubernetes #139519
	hrElementNotFound      uint32 = 0x80070490 // HRESULT_FROM_WIN32(ERROR_NOT_FOUND) (hcn IsElementNotFoundError)
	hrObjectAlreadyExists  uint32 = 0x80071392 // HRESULT_FROM_WIN32(ERROR_OBJECT_ALREADY_EXISTS), kubernetes #74766
	hrNetworkNotFound      uint32 = 0x803b0001 // HCN_E_NETWORK_NOT_FOUND
	hrEndpointNotFound     uint32 = 0x803b0002 // HCN_E_ENDPOINT_NOT_FOUND
	hrPortAlreadyExists    uint32 = 0x803b0013 // HCN_E_PORT_ALREADY_EXISTS (hcn IsPortAlreadyExistsError)
	hrInvalidJSON          uint32 = 0x803b001b // HCN_E_INVALID_JSON
	hrInvalidJSONReference uint32 = 0x803b001c // HCN_E_INVALID_JSON_REFERENCE, kubernetes #100384
	hrInvalidIP            uint32 = 0x803b001e // HCN_E_INVALID_IP
	hrEntityHasReferences  uint32 = 0x803b002c // HCN_E_ENTITY_HAS_REFERENCES
)

// hnsError is a failed call: its HRESULT and the text HNS puts in the
// result JSON.
type hnsError struct {
	HR  uint32
	Msg string
}

func (e *hnsError) Error() string { return fmt.Sprintf("%s (0x%x)", e.Msg, e.HR) }

func fail(hr uint32, format string, a ...any) *hnsError {
	return &hnsError{HR: hr, Msg: fmt.Sprintf(format, a...)}
}

// resultJSON is the result buffer of a failed HCN call: hcsshim
// (hcn/hcnerrors.go checkForErrors) treats any non-empty result as an error
// and puts it in the error's text; HNS writes {"Success":false,"Error":…,
// "ErrorCode":…} there, the V1 response shape (hcn/hcnglobals.go
// hnsResponse).
func (e *hnsError) resultJSON() string {
	b, _ := json.Marshal(struct {
		Success   bool
		Error     string
		ErrorCode uint32
	}{false, e.Msg, e.HR})
	return string(b)
}

// Kinds of HNS objects.
const (
	kindNetwork      = "Network"
	kindEndpoint     = "Endpoint"
	kindLoadBalancer = "LoadBalancer"
	kindNamespace    = "Namespace"
	kindSdnRoute     = "SdnRoute"
)

// notFound is the HRESULT HNS gives for a missing object of a kind: HNS'
// own codes for networks and endpoints; for load balancers and namespaces
// HNS has no code of its own in x/sys/windows' table, and hcsshim's
// callers test ERROR_NOT_FOUND (hcn IsElementNotFoundError), used here
// (assumed).
func notFound(kind, id string) *hnsError {
	switch kind {
	case kindNetwork:
		return fail(hrNetworkNotFound, "The network was not found. (%s)", id)
	case kindEndpoint:
		return fail(hrEndpointNotFound, "The endpoint was not found. (%s)", id)
	}
	return fail(hrElementNotFound, "Element not found. (%s %s)", kind, id)
}

// Emulator holds the emulated nodes' HNS state. Its methods are safe for
// concurrent use; it never panics on what a caller sends.
type Emulator struct {
	mu      sync.Mutex
	nodes   map[string]*node
	handles map[uint64]handleRef
	next    uint64
}

type handleRef struct {
	node, kind, id string
	epoch          int // the node's HNS restart count when opened
}

// node is one emulated Windows node's HNS.
type node struct {
	name       string
	profile    Profile
	epoch      int
	seq        int
	created    map[string]int // id → creation order (listings come in it)
	networks   map[string]*Network
	endpoints  map[string]*Endpoint
	lbs        map[string]*LoadBalancer
	namespaces map[string]*Namespace
	// cni: endpoints and networks a CNI made (control API); v1: endpoints
	// made through HNS' V1 API.
	cni map[string]bool
	v1  map[string]bool
	// failN calls (whose name contains failFn) fail with failHR.
	failN  int
	failHR uint32
	failFn string
	calls  map[string]int
}

// New returns an emulator without nodes; a node is made, with the default
// profile, on its first call or by the control API.
func New() *Emulator {
	return &Emulator{nodes: map[string]*node{}, handles: map[uint64]handleRef{}}
}

func (e *Emulator) node(name string) *node {
	if name == "" {
		name = "default"
	}
	n := e.nodes[name]
	if n == nil {
		p, _ := profileNamed("")
		n = &node{name: name, profile: p}
		n.reset()
		e.nodes[name] = n
	}
	return n
}

func (n *node) reset() {
	n.created = map[string]int{}
	n.networks = map[string]*Network{}
	n.endpoints = map[string]*Endpoint{}
	n.lbs = map[string]*LoadBalancer{}
	n.namespaces = map[string]*Namespace{}
	n.cni = map[string]bool{}
	n.v1 = map[string]bool{}
	n.calls = map[string]int{}
}

// newGUID returns a random GUID in upper case, as hnsdiag and the V1 dumps
// print HNS' ids (calico #4682; platform_windows/testdata/hns-recorded).
func newGUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return strings.ToUpper(fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]))
}

const zeroGUID = "00000000-0000-0000-0000-000000000000"

// canonGUID checks and upper-cases a GUID string ("" for one that is not).
func canonGUID(s string) string {
	s = strings.Trim(strings.TrimSpace(s), "{}")
	if len(s) != 36 {
		return ""
	}
	for i, c := range s {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return ""
			}
		default:
			if !strings.ContainsRune("0123456789abcdefABCDEF", c) {
				return ""
			}
		}
	}
	return strings.ToUpper(s)
}

func (n *node) add(id string) {
	n.seq++
	n.created[id] = n.seq
}

// ids returns a kind's ids in creation order.
func (n *node) ids(kind string) []string {
	var out []string
	switch kind {
	case kindNetwork:
		for id := range n.networks {
			out = append(out, id)
		}
	case kindEndpoint:
		for id := range n.endpoints {
			out = append(out, id)
		}
	case kindLoadBalancer:
		for id := range n.lbs {
			out = append(out, id)
		}
	case kindNamespace:
		for id := range n.namespaces {
			out = append(out, id)
		}
	}
	sort.Slice(out, func(i, j int) bool { return n.created[out[i]] < n.created[out[j]] })
	return out
}

// object returns an object as HNS reports it, or nil.
func (n *node) object(kind, id string) any {
	id = strings.ToUpper(id)
	switch kind {
	case kindNetwork:
		if v, ok := n.networks[id]; ok {
			return v
		}
	case kindEndpoint:
		if v, ok := n.endpoints[id]; ok {
			return v
		}
	case kindLoadBalancer:
		if v, ok := n.lbs[id]; ok {
			return v
		}
	case kindNamespace:
		if v, ok := n.namespaces[id]; ok {
			return v
		}
	}
	return nil
}

// Call is one DLL call: node, the exported function's name and its
// arguments (nil for a NULL pointer). It returns the HRESULT, the handle a
// Create or Open made, the output string and the result string (nil: NULL).
func (e *Emulator) Call(nodeName, fn string, args []*string) (hr uint32, handle uint64, out, result *string) {
	defer func() {
		if r := recover(); r != nil { // never: but a test's HNS must not die of a caller's input
			err := fail(hrFail, "emulator: internal error in %s: %v", fn, r)
			s := err.resultJSON()
			hr, handle, out, result = err.HR, 0, nil, &s
		}
	}()
	e.mu.Lock()
	defer e.mu.Unlock()
	n := e.node(nodeName)
	n.calls[fn]++
	arg := func(i int) string {
		if i < len(args) && args[i] != nil {
			return *args[i]
		}
		return ""
	}
	isNull := func(i int) bool { return i >= len(args) || args[i] == nil }
	var err *hnsError
	var o string
	hasOut := false
	if n.failN > 0 && !strings.HasPrefix(fn, "HcnClose") && strings.Contains(fn, n.failFn) {
		n.failN--
		err = fail(n.failHR, "emulator: injected failure of %s", fn)
	} else {
		switch {
		case fn == "HNSCall":
			o, hasOut = e.hnsCall(n, arg(0), arg(1), arg(2)), true
		case strings.HasPrefix(fn, "HcnEnumerate"):
			o, err = e.enumerate(n, kindOf(strings.TrimSuffix(strings.TrimPrefix(fn, "HcnEnumerate"), "s")), arg(0), isNull(0))
			hasOut = err == nil
		case strings.HasPrefix(fn, "HcnOpen"):
			handle, err = e.open(n, kindOf(strings.TrimPrefix(fn, "HcnOpen")), arg(0))
		case strings.HasPrefix(fn, "HcnClose"):
			err = e.closeHandle(n, kindOf(strings.TrimPrefix(fn, "HcnClose")), arg(0))
		case strings.HasPrefix(fn, "HcnQuery") && strings.HasSuffix(fn, "Properties"):
			o, err = e.query(n, kindOf(strings.TrimSuffix(strings.TrimPrefix(fn, "HcnQuery"), "Properties")), arg(0))
			hasOut = err == nil
		case fn == "HcnCreateEndpoint":
			handle, err = e.createEndpoint(n, arg(0), arg(1), arg(2), isNull(2))
		case strings.HasPrefix(fn, "HcnCreate"):
			handle, err = e.create(n, kindOf(strings.TrimPrefix(fn, "HcnCreate")), arg(0), arg(1), isNull(1))
		case strings.HasPrefix(fn, "HcnModify"):
			err = e.modify(n, kindOf(strings.TrimPrefix(fn, "HcnModify")), arg(0), arg(1), isNull(1))
		case strings.HasPrefix(fn, "HcnDelete"):
			err = e.remove(n, kindOf(strings.TrimPrefix(fn, "HcnDelete")), arg(0))
		default:
			err = fail(hrNotImpl, "emulator: %s is not emulated", fn)
		}
	}
	if err != nil {
		s := err.resultJSON()
		return err.HR, 0, nil, &s
	}
	if hasOut {
		return hrOK, handle, &o, nil
	}
	return hrOK, handle, nil, nil
}

func kindOf(s string) string {
	switch s {
	case "Network", "Endpoint", "LoadBalancer", "Namespace", "SdnRoute":
		return s
	}
	return "?" + s
}

// enumerate answers HcnEnumerate*: a JSON array of ids (hcn unmarshals it
// into []guid.GUID, then opens and queries each), filtered by the query's
// Filter, a JSON map of field to value.
func (e *Emulator) enumerate(n *node, kind, query string, null bool) (string, *hnsError) {
	if kind == kindSdnRoute {
		return "[]", nil
	}
	filter := map[string]json.RawMessage{}
	if !null && strings.TrimSpace(query) != "" {
		var q Query
		if err := json.Unmarshal([]byte(query), &q); err != nil {
			return "", fail(hrInvalidJSON, "The JSON document is invalid: query: %v", err)
		}
		if q.Filter != "" {
			if err := json.Unmarshal([]byte(q.Filter), &filter); err != nil {
				return "", fail(hrInvalidJSON, "The JSON document is invalid: filter: %v", err)
			}
		}
	}
	ids := []string{}
	for _, id := range n.ids(kind) {
		if kind == kindEndpoint && n.profile.HideV1Endpoints && n.v1[id] {
			continue // kubernetes #110591
		}
		if matches(n.object(kind, id), filter) {
			ids = append(ids, id)
		}
	}
	b, _ := json.Marshal(ids)
	return string(b), nil
}

// matches reports whether obj's top-level fields hold the filter's values
// (strings compared case-insensitively, as ids come in either case). An
// endpoint's "VirtualNetwork" (hcn ListEndpointsOfNetwork) is its
// HostComputeNetwork. A field the object lacks matches nothing.
func matches(obj any, filter map[string]json.RawMessage) bool {
	if len(filter) == 0 {
		return true
	}
	b, _ := json.Marshal(obj)
	fields := map[string]json.RawMessage{}
	_ = json.Unmarshal(b, &fields)
	if _, ok := obj.(*Endpoint); ok {
		if v, ok := fields["HostComputeNetwork"]; ok {
			fields["VirtualNetwork"] = v
		}
	}
	for k, want := range filter {
		got, ok := fields[k]
		if !ok {
			return false
		}
		var ws, gs string
		if json.Unmarshal(want, &ws) == nil && json.Unmarshal(got, &gs) == nil {
			if !strings.EqualFold(ws, gs) {
				return false
			}
			continue
		}
		if string(want) != string(got) {
			return false
		}
	}
	return true
}

func (e *Emulator) newHandle(n *node, kind, id string) uint64 {
	e.next++
	e.handles[e.next] = handleRef{node: n.name, kind: kind, id: id, epoch: n.epoch}
	return e.next
}

func (e *Emulator) open(n *node, kind, g string) (uint64, *hnsError) {
	id := canonGUID(g)
	if id == "" {
		return 0, fail(hrInvalidArg, "The parameter is incorrect: id %q", g)
	}
	if kind == kindSdnRoute || n.object(kind, id) == nil {
		return 0, notFound(kind, id)
	}
	return e.newHandle(n, kind, id), nil
}

// handle resolves a handle of kind on n; a handle from before an HNS
// restart is no longer valid.
func (e *Emulator) handle(n *node, kind, h string) (handleRef, *hnsError) {
	v, err := strconv.ParseUint(h, 10, 64)
	ref, ok := e.handles[v]
	if err != nil || !ok || ref.node != n.name || ref.kind != kind || ref.epoch != n.epoch {
		return handleRef{}, fail(hrInvalidHandle, "The handle is invalid.")
	}
	return ref, nil
}

func (e *Emulator) closeHandle(n *node, kind, h string) *hnsError {
	if _, err := e.handle(n, kind, h); err != nil {
		return err
	}
	v, _ := strconv.ParseUint(h, 10, 64)
	delete(e.handles, v)
	return nil
}

func (e *Emulator) query(n *node, kind, h string) (string, *hnsError) {
	ref, err := e.handle(n, kind, h)
	if err != nil {
		return "", err
	}
	obj := n.object(kind, ref.id)
	if obj == nil {
		return "", notFound(kind, ref.id) // deleted while open
	}
	b, _ := json.Marshal(obj)
	return string(b), nil
}

// newID is the id of a created object: the caller's when it gave one that
// is not zero (hcn always passes the zero GUID and lets HNS choose).
func (n *node) newID(kind, g string) (string, *hnsError) {
	id := canonGUID(g)
	if g != "" && id == "" {
		return "", fail(hrInvalidArg, "The parameter is incorrect: id %q", g)
	}
	if id == "" || id == zeroGUID {
		return newGUID(), nil
	}
	if n.object(kind, id) != nil {
		return "", fail(hrAlreadyExists, "Cannot create a file when that file already exists. (%s %s)", kind, id)
	}
	return id, nil
}

func decode(settings string, null bool, v any) *hnsError {
	if null || strings.TrimSpace(settings) == "" {
		return fail(hrInvalidArg, "The parameter is incorrect: no settings")
	}
	if err := json.Unmarshal([]byte(settings), v); err != nil {
		return fail(hrInvalidJSON, "The JSON document is invalid: %v", err)
	}
	return nil
}

func (e *Emulator) create(n *node, kind, g, settings string, null bool) (uint64, *hnsError) {
	id, err := n.newID(kind, g)
	if err != nil {
		return 0, err
	}
	switch kind {
	case kindNetwork:
		var nw Network
		if err := decode(settings, null, &nw); err != nil {
			return 0, err
		}
		if err := n.addNetwork(id, &nw); err != nil {
			return 0, err
		}
	case kindLoadBalancer:
		var lb LoadBalancer
		if err := decode(settings, null, &lb); err != nil {
			return 0, err
		}
		lb.ID = id
		if err := n.validateLB(&lb, ""); err != nil {
			return 0, err
		}
		n.lbs[id] = &lb
		n.add(id)
	case kindNamespace:
		ns := Namespace{ID: id, Rest: map[string]json.RawMessage{}}
		if err := decode(settings, null, &ns.Rest); err != nil {
			return 0, err
		}
		delete(ns.Rest, "ID")
		n.namespaces[id] = &ns
		n.add(id)
	default:
		return 0, fail(hrNotImpl, "emulator: creating a %s is not emulated", strings.TrimPrefix(kind, "?"))
	}
	return e.newHandle(n, kind, id), nil
}

func (n *node) addNetwork(id string, nw *Network) *hnsError {
	if nw.Type == "" {
		return fail(hrInvalidArg, "The parameter is incorrect: network without Type")
	}
	for _, other := range n.networks {
		if nw.Name != "" && strings.EqualFold(other.Name, nw.Name) {
			return fail(hrAlreadyExists, "Cannot create a file when that file already exists. (network %s)", nw.Name)
		}
	}
	nw.ID = id
	if nw.SchemaVersion == (Version{}) {
		nw.SchemaVersion = Version{2, 0}
	}
	n.networks[id] = nw
	n.add(id)
	return nil
}

func (e *Emulator) createEndpoint(n *node, nwHandle, g, settings string, null bool) (uint64, *hnsError) {
	ref, err := e.handle(n, kindNetwork, nwHandle)
	if err != nil {
		return 0, err
	}
	nw := n.networks[ref.id]
	if nw == nil {
		return 0, notFound(kindNetwork, ref.id)
	}
	id, err := n.newID(kindEndpoint, g)
	if err != nil {
		return 0, err
	}
	var ep Endpoint
	if err := decode(settings, null, &ep); err != nil {
		return 0, err
	}
	if err := n.addEndpoint(id, nw, &ep); err != nil {
		return 0, err
	}
	return e.newHandle(n, kindEndpoint, id), nil
}

// addEndpoint validates and stores an endpoint on nw, as platform_windows
// fake.go createEndpoint checks it: an address, no other endpoint of the
// network at it, a provider address for a remote endpoint on an overlay.
func (n *node) addEndpoint(id string, nw *Network, ep *Endpoint) *hnsError {
	if len(ep.IpConfigurations) == 0 {
		// HNS would allocate from the network's subnet; not emulated.
		return fail(hrInvalidArg, "The parameter is incorrect: endpoint without IpConfigurations (address allocation by HNS is not emulated)")
	}
	for _, c := range ep.IpConfigurations {
		a, perr := netip.ParseAddr(c.IpAddress)
		if perr != nil {
			return fail(hrInvalidIP, "An invalid IP address was specified: %q", c.IpAddress)
		}
		for _, oid := range n.ids(kindEndpoint) {
			other := n.endpoints[oid]
			if !sameID(other.HostComputeNetwork, nw.ID) {
				continue
			}
			for _, oc := range other.IpConfigurations {
				if b, err := netip.ParseAddr(oc.IpAddress); err == nil && b == a {
					return fail(hrObjectAlreadyExists, "The object already exists: address %s is used by endpoint %s", a, oid)
				}
			}
		}
	}
	if ep.Flags&endpointFlagRemote != 0 && strings.EqualFold(nw.Type, "Overlay") && !hasPA(ep.Policies) {
		return fail(hrInvalidArg, "The parameter is incorrect: remote endpoint on an overlay network without a provider address")
	}
	ep.ID = id
	ep.HostComputeNetwork = nw.ID
	if ep.MacAddress == "" {
		// HNS takes one from the network's MAC pool; Hyper-V's OUI 00-15-5D.
		ep.MacAddress = fmt.Sprintf("00-15-5D-%02X-%02X-%02X", n.seq>>16&0xff, n.seq>>8&0xff, n.seq&0xff)
	}
	if ep.SchemaVersion == (Version{}) {
		ep.SchemaVersion = Version{2, 0}
	}
	n.endpoints[id] = ep
	n.add(id)
	return nil
}

func hasPA(ps []Policy) bool {
	for _, p := range ps {
		if strings.EqualFold(p.Type, "ProviderAddress") || strings.EqualFold(p.Type, "PA") {
			return true
		}
	}
	return false
}

// validateLB checks a load balancer as platform_windows fake.go validate
// does; self is the id being modified.
func (n *node) validateLB(lb *LoadBalancer, self string) *hnsError {
	if len(lb.PortMappings) != 1 {
		return fail(hrInvalidArg, "The parameter is incorrect: want one port mapping, have %d", len(lb.PortMappings))
	}
	pm := lb.PortMappings[0]
	if pm.Protocol != 6 && pm.Protocol != 17 {
		return fail(hrInvalidArg, "The parameter is incorrect: protocol %d", pm.Protocol)
	}
	if pm.InternalPort == 0 || pm.ExternalPort == 0 {
		return fail(hrInvalidArg, "The parameter is incorrect: port 0")
	}
	v := n.profile.Version
	ipv6 := lb.Flags&lbFlagIPv6 != 0
	if lb.Flags&lbFlagDSR != 0 && !v.dsr() {
		return fail(hrInvalidArg, "The parameter is incorrect: DSR needs HNS 9.3/10.2, this is %s", v)
	}
	if pm.DistributionType != 0 && !v.sessionAffinity() {
		return fail(hrInvalidArg, "The parameter is incorrect: distribution type %d needs HNS 12.0, this is %s", pm.DistributionType, v)
	}
	vips := map[netip.Addr]bool{}
	for _, s := range lb.FrontendVIPs {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return fail(hrInvalidIP, "An invalid IP address was specified: frontend VIP %q", s)
		}
		if a.Is6() != ipv6 || (a.Is6() && !v.ipv6DualStack()) {
			return fail(hrInvalidArg, "The parameter is incorrect: VIP %s with IPv6 flag %t on HNS %s", a, ipv6, v)
		}
		vips[a] = true
	}
	if lb.SourceVIP != "" {
		if _, err := netip.ParseAddr(lb.SourceVIP); err != nil {
			return fail(hrInvalidIP, "An invalid IP address was specified: source VIP %q", lb.SourceVIP)
		}
	}
	for i, id := range lb.HostComputeEndpoints {
		ep := n.endpoints[strings.ToUpper(id)]
		if ep == nil {
			return fail(hrInvalidJSONReference, "The reference is invalid in the JSON document: endpoint %s", id)
		}
		for _, c := range ep.IpConfigurations {
			if a, err := netip.ParseAddr(c.IpAddress); err == nil && a.Is6() != ipv6 {
				return fail(hrInvalidArg, "The parameter is incorrect: endpoint %s (%s) is of the other IP family", id, a)
			}
		}
		lb.HostComputeEndpoints[i] = ep.ID // HNS' own spelling of the id
	}
	for _, oid := range n.ids(kindLoadBalancer) {
		other := n.lbs[oid]
		if oid == self || len(other.PortMappings) != 1 {
			continue
		}
		opm := other.PortMappings[0]
		if opm.Protocol != pm.Protocol || opm.ExternalPort != pm.ExternalPort || (other.Flags&lbFlagIPv6 != 0) != ipv6 {
			continue
		}
		overlap := len(other.FrontendVIPs) == 0 && len(vips) == 0
		for _, s := range other.FrontendVIPs {
			if a, err := netip.ParseAddr(s); err == nil && vips[a] {
				overlap = true
			}
		}
		if !overlap {
			continue
		}
		if self == "" && sameLB(other, lb) {
			return fail(hrAlreadyExists, "Cannot create a file when that file already exists. (load balancer %s)", oid)
		}
		return fail(hrPortAlreadyExists, "The port already exists. (load balancer %s)", oid)
	}
	return nil
}

// sameLB: everything but the id equal (endpoint order aside).
func sameLB(a, b *LoadBalancer) bool {
	x, y := *a, *b
	x.ID, y.ID = "", ""
	x.HostComputeEndpoints = sortedUpper(x.HostComputeEndpoints)
	y.HostComputeEndpoints = sortedUpper(y.HostComputeEndpoints)
	bx, _ := json.Marshal(x)
	by, _ := json.Marshal(y)
	return string(bx) == string(by)
}

func sortedUpper(ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = strings.ToUpper(id)
	}
	sort.Strings(out)
	return out
}

// modify answers HcnModify*. A load balancer modify needs HNS 15.4 (hcn
// ModifyLoadbalancerVersion; earlier: E_NOTIMPL) and on a profile with
// ModifyKeepsEndpoints keeps the old endpoints (kubernetes #131466). A
// network takes policy additions and removals (hcn ModifyNetworkSettings:
// {"ResourceType":"Policy","RequestType":"Add"|"Remove","Settings":
// {"Policies":[…]}}), as flannel adds a joining node's RemoteSubnetRoute.
func (e *Emulator) modify(n *node, kind, h, settings string, null bool) *hnsError {
	ref, err := e.handle(n, kind, h)
	if err != nil {
		return err
	}
	if n.object(kind, ref.id) == nil {
		return notFound(kind, ref.id)
	}
	switch kind {
	case kindLoadBalancer:
		if !n.profile.Version.modifyLoadBalancer() {
			return fail(hrNotImpl, "Not implemented: load balancer modify on HNS %s", n.profile.Version)
		}
		var lb LoadBalancer
		if err := decode(settings, null, &lb); err != nil {
			return err
		}
		lb.ID = ref.id
		if err := n.validateLB(&lb, ref.id); err != nil {
			return err
		}
		if n.profile.ModifyKeepsEndpoints {
			lb.HostComputeEndpoints = append([]string(nil), n.lbs[ref.id].HostComputeEndpoints...)
		}
		n.lbs[ref.id] = &lb
		return nil
	case kindNetwork:
		var req struct {
			ResourceType string
			RequestType  string
			Settings     struct{ Policies []Policy }
		}
		if err := decode(settings, null, &req); err != nil {
			return err
		}
		nw := n.networks[ref.id]
		if !strings.EqualFold(req.ResourceType, "Policy") {
			return fail(hrNotImpl, "emulator: network modify of resource %q is not emulated", req.ResourceType)
		}
		switch strings.ToLower(req.RequestType) {
		case "add":
			nw.Policies = append(nw.Policies, req.Settings.Policies...)
		case "remove":
			var keep []Policy
			for _, p := range nw.Policies {
				drop := false
				for _, r := range req.Settings.Policies {
					if p.Type == r.Type && string(p.Settings) == string(r.Settings) {
						drop = true
					}
				}
				if !drop {
					keep = append(keep, p)
				}
			}
			nw.Policies = keep
		default:
			return fail(hrInvalidArg, "The parameter is incorrect: request type %q", req.RequestType)
		}
		return nil
	}
	return fail(hrNotImpl, "emulator: modifying a %s is not emulated", kind)
}

// remove answers HcnDelete*. An endpoint a load balancer uses is refused,
// as fake.go does (what HNS does is not known); a network with endpoints
// is refused with HCN_E_ENTITY_HAS_REFERENCES (assumed).
func (e *Emulator) remove(n *node, kind, g string) *hnsError {
	id := canonGUID(g)
	if id == "" {
		return fail(hrInvalidArg, "The parameter is incorrect: id %q", g)
	}
	if n.object(kind, id) == nil {
		return notFound(kind, id)
	}
	switch kind {
	case kindEndpoint:
		for _, lbID := range n.ids(kindLoadBalancer) {
			for _, ref := range n.lbs[lbID].HostComputeEndpoints {
				if sameID(ref, id) {
					return fail(hrInvalidArg, "The parameter is incorrect: endpoint %s is used by load balancer %s", id, lbID)
				}
			}
		}
	case kindNetwork:
		for _, ep := range n.endpoints {
			if sameID(ep.HostComputeNetwork, id) {
				return fail(hrEntityHasReferences, "The entity has references: network %s has endpoint %s", id, ep.ID)
			}
		}
	}
	n.drop(kind, id)
	return nil
}

func (n *node) drop(kind, id string) {
	switch kind {
	case kindNetwork:
		delete(n.networks, id)
	case kindEndpoint:
		delete(n.endpoints, id)
	case kindLoadBalancer:
		delete(n.lbs, id)
	case kindNamespace:
		delete(n.namespaces, id)
	}
	delete(n.created, id)
	delete(n.cni, id)
	delete(n.v1, id)
}
