package winoracle

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crossproxy/crossproxy/core"
	hns "github.com/crossproxy/crossproxy/platform_windows"
)

// crossproxyNode is crossproxy's Windows data plane as `crossproxy run`
// assembles it: the core's tracker turns objects into a NodeState and
// Changes, and the HNS backend (platform_windows) programs its fake HNS.
type crossproxyNode struct {
	fake    *hns.Fake
	backend *hns.Backend
	tracker *core.Tracker
	cni     map[string]bool
	notices *noticeLog
}

// noticeLog records the backend's notices (what HNS cannot express).
type noticeLog struct {
	mu  sync.Mutex
	got []string
}

func (n *noticeLog) Unsupported(svc types.NamespacedName, feature, _ string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.got = append(n.got, svc.Name+" "+feature)
}

func (n *noticeLog) take() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := slices.Compact(slices.Sorted(slices.Values(n.got)))
	n.got = nil
	return out
}

func newCrossproxyNode(sc *scenario) (*crossproxyNode, error) {
	nw := hns.Network{ID: networkID, Name: sc.networkName(), Type: hns.NetworkType(sc.networkType())}
	for _, rs := range sc.remoteSubnets() {
		nw.RemoteSubnets = append(nw.RemoteSubnets, hns.RemoteSubnet{Prefix: netip.MustParsePrefix(rs.prefix), ProviderAddress: netip.MustParseAddr(rs.pa)})
	}
	n := &crossproxyNode{fake: hns.NewFake(nw, allFeatures()), cni: map[string]bool{}, notices: &noticeLog{}}
	for i, ip := range sc.Locals {
		id, err := n.addLocalEndpoint(fmt.Sprintf("cni-%d", i), netip.MustParseAddr(ip))
		if err != nil {
			return nil, err
		}
		n.cni[strings.ToLower(id)] = true
	}
	if sc.Root != "" {
		id, err := n.addLocalEndpoint(rootEndpointName, netip.MustParseAddr(sc.Root))
		if err != nil {
			return nil, err
		}
		n.cni[strings.ToLower(id)] = true
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	cfg := hns.Config{NetworkName: sc.networkName(), EnableDSR: sc.DSR, Ledger: &hns.MemoryLedger{}, Notifier: n.notices,
		ForwardHealthCheckVIP: sc.HealthCheckVIP, RootEndpointName: rootEndpointName, HealthzPort: healthzPort}
	if v := sc.sourceVIP(); v != "" {
		cfg.SourceVIP = netip.MustParseAddr(v)
	}
	// The node's address and the host MAC (for the source-VIP endpoint on
	// overlay), as cmd gives them, where this crossproxy's Config has them.
	setIfPresent(&cfg, "NodeIP", netip.MustParseAddr(nodeIPv4))
	setIfPresent(&cfg, "HostMAC", func(netip.Addr) (string, error) { return hostMAC, nil })
	b, err := hns.New(n.fake, cfg, log)
	if err != nil {
		return nil, fmt.Errorf("crossproxy backend: %w", err)
	}
	n.backend = b
	// crossproxy's defaults: both families, no local-traffic detection
	// (HNS has no use for it), NodePort addresses "primary".
	t, err := core.NewTracker(core.Options{IPFamilies: []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}, LocalDetect: core.LocalDetect{Mode: core.LocalDetectNone}})
	if err != nil {
		return nil, err
	}
	t.SetNode(sc.node())
	n.tracker = t
	return n, nil
}

// apply hands one step's object changes to the tracker and runs the sync the
// runner would run (full the first time, partial afterwards).
func (n *crossproxyNode) apply(prev, cur *objects) error {
	if prev == nil {
		prev = &objects{}
	}
	diffObjects(prev.services, cur.services, n.tracker.UpsertService, func(_, s *v1.Service) { n.tracker.UpsertService(s) }, n.tracker.DeleteService)
	diffObjects(prev.slices, cur.slices, n.tracker.UpsertSlice, func(_, s *discovery.EndpointSlice) { n.tracker.UpsertSlice(s) }, n.tracker.DeleteSlice)
	st, changes := n.tracker.Snapshot()
	if len(st.Problems) > 0 {
		return fmt.Errorf("core problems (scenario objects are wrong): %v", st.Problems)
	}
	if err := n.backend.Sync(context.Background(), st, changes); err != nil {
		return fmt.Errorf("crossproxy sync: %w", err)
	}
	return nil
}

// programmed reads the fake HNS back through the HNS interface (the list
// calls the backend itself makes).
func (n *crossproxyNode) programmed() (Programmed, error) {
	var out Programmed
	ctx := context.Background()
	eps, err := n.fake.ListEndpoints(ctx, networkID)
	if err != nil {
		return out, fmt.Errorf("list crossproxy's HNS endpoints: %w", err)
	}
	lbs, err := n.fake.ListLoadBalancers(ctx)
	if err != nil {
		return out, fmt.Errorf("list crossproxy's HNS load balancers: %w", err)
	}
	ipOf := map[string]string{}
	for _, ep := range eps {
		ipOf[strings.ToLower(ep.ID)] = ep.IP.String() // HNS reports ids in its own case
		if n.cni[strings.ToLower(ep.ID)] {
			continue
		}
		e := Endpoint{IP: ep.IP.String(), Remote: ep.Remote, MAC: ep.MAC}
		if ep.ProviderAddress.IsValid() {
			e.ProviderAddress = ep.ProviderAddress.String()
		}
		out.Endpoints = append(out.Endpoints, e)
	}
	for _, lb := range lbs {
		o := LB{Protocol: lb.Protocol.String(), ExternalPort: lb.ExternalPort, InternalPort: lb.InternalPort, Distribution: "None"}
		for _, v := range lb.FrontendVIPs {
			o.VIPs = append(o.VIPs, v.String())
		}
		sort.Strings(o.VIPs)
		if lb.SourceVIP.IsValid() {
			o.SourceVIP = lb.SourceVIP.String()
		}
		if lb.SourceIPAffinity {
			o.Distribution = "SourceIP"
		}
		o.LBFlags, o.PortMappingFlags = flagNames(lb.Flags)
		o.Backends = backendIPs(lb.EndpointIDs, ipOf)
		out.LBs = append(out.LBs, o)
	}
	return out, nil
}

// addLocalEndpoint adds the CNI's endpoint for a pod on this node. The fake
// has had two ways (a helper, later the HNS call CreateLocalEndpoint); both
// are looked up dynamically so the oracle builds against either.
func (n *crossproxyNode) addLocalEndpoint(name string, ip netip.Addr) (string, error) {
	switch f := any(n.fake).(type) {
	case interface {
		AddLocalEndpoint(string, netip.Addr) string
	}:
		return f.AddLocalEndpoint(name, ip), nil
	case interface {
		CreateLocalEndpoint(context.Context, string, hns.Endpoint) (hns.Endpoint, error)
	}:
		ep, err := f.CreateLocalEndpoint(context.Background(), networkID, hns.Endpoint{Name: name, IP: ip, MAC: conjureMAC("00-15", ip.String())})
		return ep.ID, err
	}
	return "", fmt.Errorf("hns.Fake has neither AddLocalEndpoint nor CreateLocalEndpoint")
}

// allFeatures is hns.AllFeatures, a variable once and a function later.
func allFeatures() hns.Features {
	v := reflect.ValueOf(hns.AllFeatures)
	if v.Kind() == reflect.Func {
		v = v.Call(nil)[0]
	}
	return v.Interface().(hns.Features)
}

// lbFlagNames are the HNS load balancer flags; every other boolean of
// hns.LBFlags is a port mapping flag of the same name. Reading the struct by
// reflection keeps the oracle compiling, and comparing, as flags are added.
var lbFlagNames = map[string]bool{"DSR": true, "IPv6": true}

func flagNames(f hns.LBFlags) (lb, pm []string) {
	v := reflect.ValueOf(f)
	for i := range v.NumField() {
		field := v.Type().Field(i)
		if field.Type.Kind() != reflect.Bool || !v.Field(i).Bool() {
			continue
		}
		if lbFlagNames[field.Name] {
			lb = append(lb, field.Name)
		} else {
			pm = append(pm, field.Name)
		}
	}
	slices.Sort(lb)
	slices.Sort(pm)
	return lb, pm
}

// objects is the complete set of Services and EndpointSlices at one step.
type objects struct {
	services []*v1.Service
	slices   []*discovery.EndpointSlice
}

type named interface {
	comparable
	GetNamespace() string
	GetName() string
}

// diffObjects calls add, update or del for each object that is new, changed
// or gone between prev and cur (matched by namespace/name).
func diffObjects[T named](prev, cur []T, add func(T), update func(old, cur T), del func(T)) {
	key := func(o T) string { return o.GetNamespace() + "/" + o.GetName() }
	old := map[string]T{}
	for _, o := range prev {
		old[key(o)] = o
	}
	for _, o := range cur {
		p, ok := old[key(o)]
		switch {
		case !ok:
			add(o)
		case !reflect.DeepEqual(p, o):
			update(p, o)
		}
		delete(old, key(o))
	}
	for _, k := range sortedKeys(old) {
		del(old[k])
	}
}

func conjureMAC(prefix, ip string) string {
	a := netip.MustParseAddr(ip).As16()
	return strings.ToLower(fmt.Sprintf("%s-%02x-%02x-%02x-%02x", prefix, a[12], a[13], a[14], a[15]))
}

// setIfPresent sets the field name of *cfg to v if the struct has such a
// field of v's type, so the oracle runs against the backend before and after
// the fields were added (issue 10's fixes add them).
func setIfPresent[T any](cfg *T, name string, v any) {
	f := reflect.ValueOf(cfg).Elem().FieldByName(name)
	if f.IsValid() && f.CanSet() && reflect.TypeOf(v).AssignableTo(f.Type()) {
		f.Set(reflect.ValueOf(v))
	}
}
