package winoracle

import (
	"net/netip"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// The node both proxies run on, and the cluster around it.
const (
	nodeName  = "win-1"
	nodeIPv4  = "192.168.0.11"
	nodeIPv6  = "fd00:c::11"
	hostMAC   = "00-15-5d-00-00-11"
	networkID = "8D9F5A1C-51B0-4E8A-9C35-0000000000B1"
	sourceVIP = "10.244.1.2" // in this node's pod subnet, as the Windows install guides set it
	// rootEndpoint is the host's own HNS endpoint ("cbr0", made by the CNI
	// setup), where forwardHealthCheckVip sends the cloud's health probes.
	rootEndpointName = "cbr0"
	rootEndpoint     = "10.244.1.3"
	healthzPort      = 10256

	// Pods: on this node (their HNS endpoints exist, made by the CNI), on
	// the Linux node lin-1 and on the Windows node win-2.
	local1  = "10.244.1.10"
	local2  = "10.244.1.11"
	local6  = "fd00:1::10"
	remote1 = "10.244.2.20"
	remote2 = "10.244.3.30"
	remote3 = "10.244.2.21"
	remote6 = "fd00:2::20"
	// Endpoints off the pod network: API servers, a hostNetwork pod on lin-1
	// (its node address, lin-1's provider address), a hostNetwork pod on this
	// node, an address outside the cluster.
	apiServer1  = "192.168.0.5"
	apiServer2  = "192.168.0.6"
	linNodeIP   = "192.168.0.12"
	outsideAddr = "203.0.113.10"
)

type remoteSubnet struct{ prefix, pa string }

// scenario is one oracle case: a network, the proxies' options, the pods the
// CNI attached on this node, and one or more steps, each the complete set of
// Services and EndpointSlices at that moment.
type scenario struct {
	Name      string
	Overlay   bool
	DSR       bool
	DualStack bool
	Locals    []string
	Steps     []step
	// HealthCheckVIP is forwardHealthCheckVip; Root the address of the
	// host endpoint (rootEndpointName) the CNI made, "" for none.
	HealthCheckVIP bool
	Root           string
}

type step struct {
	Name    string
	Objects objects
}

func (sc *scenario) networkName() string {
	if sc.Overlay {
		return "vxlan0"
	}
	return "cbr0"
}

func (sc *scenario) networkType() string {
	if sc.Overlay {
		return "Overlay"
	}
	return "L2Bridge"
}

// remoteSubnets are the RemoteSubnetRoute policies the CNI (Flannel VXLAN)
// gives an overlay network: each other node's pod CIDR behind its address.
func (sc *scenario) remoteSubnets() []remoteSubnet {
	if !sc.Overlay {
		return nil
	}
	return []remoteSubnet{{"10.244.2.0/24", linNodeIP}, {"10.244.3.0/24", "192.168.0.13"}}
}

// sourceVIP is --source-vip, given to both proxies on every network (as
// the Windows install guides do; winkernel ignores it on L2Bridge).
func (sc *scenario) sourceVIP() string { return sourceVIP }

func (sc *scenario) node() *v1.Node {
	n := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: map[string]string{v1.LabelTopologyZone: "a", v1.LabelOSStable: "windows"}},
		Status:     v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: nodeIPv4}}},
	}
	if sc.DualStack {
		n.Status.Addresses = append(n.Status.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: nodeIPv6})
	}
	return n
}

// one is a scenario with a single step.
func one(name string, overlay bool, svcs []*v1.Service, slices ...*discovery.EndpointSlice) scenario {
	return scenario{Name: name, Overlay: overlay, Locals: []string{local1, local2}, Steps: []step{{Objects: objects{services: svcs, slices: slices}}}}
}

func dsr(sc scenario) scenario { sc.DSR = true; return sc }

// healthCheckVIP turns forwardHealthCheckVip on, with the host endpoint present.
func healthCheckVIP(sc scenario) scenario { sc.HealthCheckVIP = true; return withRoot(sc) }

// withRoot gives the node its host endpoint (as the CNI setup makes it).
func withRoot(sc scenario) scenario { sc.Root = rootEndpoint; return sc }
func dualStack(sc scenario) scenario {
	sc.DualStack = true
	sc.Locals = append(sc.Locals, local6)
	return sc
}
func svcs(s ...*v1.Service) []*v1.Service {
	return s
}

// Service builders: one port "http", 80 -> 8080/TCP, ClusterIP by default.
type svcOpt func(*v1.Service)

func service(name, clusterIP string, opts ...svcOpt) *v1.Service {
	fam := v1.IPv4Protocol
	if netip.MustParseAddr(clusterIP).Is6() {
		fam = v1.IPv6Protocol
	}
	s := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: v1.ServiceSpec{
			Type: v1.ServiceTypeClusterIP, ClusterIP: clusterIP, ClusterIPs: []string{clusterIP},
			IPFamilies: []v1.IPFamily{fam}, IPFamilyPolicy: ptr.To(v1.IPFamilyPolicySingleStack),
			InternalTrafficPolicy: ptr.To(v1.ServiceInternalTrafficPolicyCluster),
			Ports:                 []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}},
			SessionAffinity:       v1.ServiceAffinityNone,
		},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

func nodePort(np int32) svcOpt {
	return func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeNodePort
		s.Spec.Ports[0].NodePort = np
		if s.Spec.ExternalTrafficPolicy == "" {
			s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyCluster
		}
	}
}

func loadBalancer(np int32, ingress ...string) svcOpt {
	return func(s *v1.Service) {
		nodePort(np)(s)
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		for _, ip := range ingress {
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, v1.LoadBalancerIngress{IP: ip})
		}
	}
}

func externalIPs(ips ...string) svcOpt {
	return func(s *v1.Service) {
		s.Spec.ExternalIPs = ips
		if s.Spec.ExternalTrafficPolicy == "" {
			s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyCluster
		}
	}
}

// etpLocal sets externalTrafficPolicy Local (apply after the type option).
func etpLocal(healthCheckNodePort int32) svcOpt {
	return func(s *v1.Service) {
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		if s.Spec.Type == v1.ServiceTypeLoadBalancer {
			s.Spec.HealthCheckNodePort = healthCheckNodePort
		}
	}
}

func itpLocal(s *v1.Service) {
	s.Spec.InternalTrafficPolicy = ptr.To(v1.ServiceInternalTrafficPolicyLocal)
}

func affinity(s *v1.Service) {
	s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
	s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](10800)}}
}

func udp(s *v1.Service) { s.Spec.Ports[0].Protocol = v1.ProtocolUDP }

func namedTarget(s *v1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromString("web") }

func preferClose(s *v1.Service) {
	s.Spec.TrafficDistribution = ptr.To(v1.ServiceTrafficDistributionPreferClose)
}

func port(p, target int32) svcOpt {
	return func(s *v1.Service) {
		s.Spec.Ports[0].Port = p
		s.Spec.Ports[0].TargetPort = intstr.FromInt32(target)
		s.Spec.Ports[0].Name = "https"
	}
}

func alsoIPv6(clusterIP string) svcOpt {
	return func(s *v1.Service) {
		s.Spec.ClusterIPs = append(s.Spec.ClusterIPs, clusterIP)
		s.Spec.IPFamilies = append(s.Spec.IPFamilies, v1.IPv6Protocol)
		s.Spec.IPFamilyPolicy = ptr.To(v1.IPFamilyPolicyRequireDualStack)
	}
}

// Endpoint builders.
type epOpt func(*discovery.Endpoint)

func ep(addr, node string, opts ...epOpt) discovery.Endpoint {
	e := discovery.Endpoint{
		Addresses:  []string{addr},
		NodeName:   ptr.To(node),
		Zone:       ptr.To(map[string]string{nodeName: "a", "lin-1": "b", "win-2": "a"}[node]),
		Conditions: discovery.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
	}
	for _, o := range opts {
		o(&e)
	}
	return e
}

func terminating(serving bool) epOpt {
	return func(e *discovery.Endpoint) {
		e.Conditions = discovery.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(serving), Terminating: ptr.To(true)}
	}
}

func hintZone(zone string) epOpt {
	return func(e *discovery.Endpoint) {
		e.Hints = &discovery.EndpointHints{ForZones: []discovery.ForZone{{Name: zone}}}
	}
}

// slice is svc's EndpointSlice of one family (taken from the first
// endpoint), with the Service port's name and protocol on targetPort.
func slice(svc *v1.Service, suffix string, targetPort int32, eps ...discovery.Endpoint) *discovery.EndpointSlice {
	at := discovery.AddressTypeIPv4
	if len(eps) > 0 && netip.MustParseAddr(eps[0].Addresses[0]).Is6() {
		at = discovery.AddressTypeIPv6
	}
	name := svc.Spec.Ports[0].Name // slices name their ports after the Service port
	return &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: svc.Name + "-" + suffix, Namespace: svc.Namespace, Labels: map[string]string{discovery.LabelServiceName: svc.Name}},
		AddressType: at,
		Endpoints:   eps,
		Ports:       []discovery.EndpointPort{{Name: ptr.To(name), Port: ptr.To(targetPort), Protocol: ptr.To(svc.Spec.Ports[0].Protocol)}},
	}
}

// localAndRemote is the usual endpoint set: a pod here and one on lin-1.
func localAndRemote() []discovery.Endpoint {
	return []discovery.Endpoint{ep(local1, nodeName), ep(remote1, "lin-1")}
}

// scenarios is the oracle's table. Each name says what it holds crossproxy
// to; the allowlist refers to these names.
func scenarios() []scenario {
	web := service("web", "10.96.0.10")
	webNP := service("web-np", "10.96.0.11", nodePort(30080))
	webNPLocal := service("web-np-local", "10.96.0.12", nodePort(30081), etpLocal(0))
	webLB := service("web-lb", "10.96.0.13", loadBalancer(30082, "172.16.0.10", "172.16.0.11"))
	webLBLocal := service("web-lb-local", "10.96.0.14", loadBalancer(30083, "172.16.0.12"), etpLocal(32000))
	webEIP := service("web-eip", "10.96.0.15", externalIPs("198.51.100.10"))
	webEIPLocal := service("web-eip-local", "10.96.0.16", externalIPs("198.51.100.11"), etpLocal(0))
	webITP := service("web-itp", "10.96.0.17", itpLocal)
	webITPETP := service("web-itp-etp", "10.96.0.18", nodePort(30084), etpLocal(0), itpLocal)
	webAff := service("web-aff", "10.96.0.19", nodePort(30085), affinity)
	dns := service("dns", "10.96.0.53", port(53, 53), udp)
	dual := service("web-dual", "10.96.0.20", alsoIPv6("fd00:96::20"))
	dualNP := service("web-dual-np", "10.96.0.21", alsoIPv6("fd00:96::21"), nodePort(30086))
	named := service("web-named", "10.96.0.22", namedTarget)
	close := service("web-close", "10.96.0.23", preferClose)
	empty := service("web-empty", "10.96.0.24", nodePort(30087))
	kubernetes := service("kubernetes", "10.96.0.1", port(443, 6443))
	hostNet := service("node-exporter", "10.96.0.30", port(9100, 9100))
	outside := service("legacy-db", "10.96.0.31", port(5432, 5432))
	termLB := service("web-term-lb", "10.96.0.25", loadBalancer(30088, "172.16.0.13"))
	termNP := service("web-term-np", "10.96.0.26", nodePort(30089))
	affEIP := service("web-aff-eip", "10.96.0.27", externalIPs("198.51.100.12"), affinity)
	dsrAll := service("web-dsr", "10.96.0.28", loadBalancer(30090, "172.16.0.14"))
	dsrLocal := service("web-dsr-local", "10.96.0.29", loadBalancer(30091, "172.16.0.15"), etpLocal(32001))
	upd := service("web-upd", "10.96.0.40", nodePort(30092))

	withSlices := func(s *v1.Service, eps ...discovery.Endpoint) []*discovery.EndpointSlice {
		return []*discovery.EndpointSlice{slice(s, "a", 8080, eps...)}
	}
	single := func(name string, overlay bool, s *v1.Service, eps ...discovery.Endpoint) scenario {
		return one(name, overlay, svcs(s), withSlices(s, eps...)...)
	}

	sc := []scenario{
		single("l2bridge: ClusterIP", false, web, localAndRemote()...),
		one("l2bridge: ClusterIP UDP", false, svcs(dns), slice(dns, "a", 53, ep(local1, nodeName), ep(remote1, "lin-1"))),
		single("l2bridge: NodePort, externalTrafficPolicy Cluster", false, webNP, localAndRemote()...),
		single("l2bridge: NodePort, externalTrafficPolicy Local", false, webNPLocal, localAndRemote()...),
		single("l2bridge: LoadBalancer ingress IPs, externalTrafficPolicy Cluster", false, webLB, localAndRemote()...),
		single("l2bridge: LoadBalancer ingress IP, externalTrafficPolicy Local", false, webLBLocal, localAndRemote()...),
		single("l2bridge: ExternalIPs, externalTrafficPolicy Cluster", false, webEIP, localAndRemote()...),
		single("l2bridge: ExternalIPs, externalTrafficPolicy Local", false, webEIPLocal, localAndRemote()...),
		single("l2bridge: internalTrafficPolicy Local", false, webITP, localAndRemote()...),
		single("l2bridge: internal and external traffic policy Local", false, webITPETP, localAndRemote()...),
		single("l2bridge: session affinity ClientIP, NodePort", false, webAff, localAndRemote()...),
		dualStack(one("l2bridge: dual-stack ClusterIP", false, svcs(dual),
			slice(dual, "v4", 8080, ep(local1, nodeName), ep(remote1, "lin-1")),
			slice(dual, "v6", 8080, ep(local6, nodeName), ep(remote6, "lin-1")))),
		dualStack(one("l2bridge: dual-stack NodePort", false, svcs(dualNP),
			slice(dualNP, "v4", 8080, ep(local1, nodeName), ep(remote1, "lin-1")),
			slice(dualNP, "v6", 8080, ep(local6, nodeName), ep(remote6, "lin-1")))),
		single("l2bridge: one endpoint terminating, ClusterIP", false, web, ep(local1, nodeName), ep(remote1, "lin-1", terminating(true))),
		single("l2bridge: all endpoints terminating, NodePort", false, termNP, ep(local1, nodeName, terminating(true)), ep(remote1, "lin-1", terminating(true))),
		single("l2bridge: all endpoints terminating, LoadBalancer", false, termLB, ep(local1, nodeName, terminating(true)), ep(remote1, "lin-1", terminating(true))),
		dsr(single("l2bridge: DSR on, LoadBalancer externalTrafficPolicy Cluster", false, dsrAll, localAndRemote()...)),
		dsr(single("l2bridge: DSR on, LoadBalancer externalTrafficPolicy Local", false, dsrLocal, localAndRemote()...)),
		single("l2bridge: DSR off, LoadBalancer externalTrafficPolicy Local", false, dsrLocal, localAndRemote()...),
		one("l2bridge: named target port", false, svcs(named), slice(named, "a", 8443, ep(local1, nodeName), ep(remote1, "lin-1"))),
		single("l2bridge: trafficDistribution PreferClose", false, close,
			ep(local1, nodeName, hintZone("a")), ep(remote1, "lin-1", hintZone("b")), ep(remote2, "win-2", hintZone("a"))),
		single("l2bridge: NodePort without endpoints", false, empty),
		single("l2bridge: externalTrafficPolicy Local without local endpoints", false, webNPLocal, ep(remote1, "lin-1"), ep(remote2, "win-2")),
		one("l2bridge: hostNetwork pod on this node", false, svcs(hostNet), slice(hostNet, "a", 9100, ep(nodeIPv4, nodeName), ep(local1, nodeName))),

		single("overlay: ClusterIP, local and remote pods", true, web, ep(local1, nodeName), ep(remote1, "lin-1"), ep(remote2, "win-2")),
		single("overlay: NodePort, externalTrafficPolicy Cluster", true, webNP, localAndRemote()...),
		single("overlay: LoadBalancer ingress IPs, externalTrafficPolicy Cluster", true, webLB, localAndRemote()...),
		single("overlay: LoadBalancer ingress IP, externalTrafficPolicy Local, DSR off", true, webLBLocal, localAndRemote()...),
		dsr(single("overlay: DSR on, NodePort externalTrafficPolicy Cluster", true, webNP, localAndRemote()...)),
		dsr(single("overlay: DSR on, ExternalIPs externalTrafficPolicy Local", true, webEIPLocal, localAndRemote()...)),
		one("overlay: kubernetes Service (API server endpoints)", true, svcs(kubernetes),
			slice(kubernetes, "a", 6443, ep(apiServer1, "master-1"), ep(apiServer2, "master-2"))),
		one("overlay: hostNetwork pod on a remote node", true, svcs(hostNet), slice(hostNet, "a", 9100, ep(linNodeIP, "lin-1"), ep(local1, nodeName))),
		one("overlay: endpoint outside the cluster", true, svcs(outside), slice(outside, "a", 5432, ep(outsideAddr, "external"))),
		dualStack(one("overlay: dual-stack Service", true, svcs(dual),
			slice(dual, "v4", 8080, ep(local1, nodeName), ep(remote1, "lin-1")),
			slice(dual, "v6", 8080, ep(local6, nodeName), ep(remote6, "lin-1")))),
		single("overlay: session affinity ClientIP, ExternalIPs", true, affEIP, localAndRemote()...),
		single("overlay: all endpoints terminating, LoadBalancer", true, termLB, ep(local1, nodeName, terminating(true)), ep(remote1, "lin-1", terminating(true))),
		single("overlay: internal and external traffic policy Local", true, webITPETP, localAndRemote()...),
	}
	// forwardHealthCheckVip (kubernetes PR 99287), on and off, on both networks.
	sc = append(sc,
		healthCheckVIP(single("l2bridge: forwardHealthCheckVip, LoadBalancer externalTrafficPolicy Cluster", false, webLB, localAndRemote()...)),
		healthCheckVIP(single("l2bridge: forwardHealthCheckVip, LoadBalancer externalTrafficPolicy Local", false, webLBLocal, localAndRemote()...)),
		withRoot(single("l2bridge: forwardHealthCheckVip off, LoadBalancer externalTrafficPolicy Local", false, webLBLocal, localAndRemote()...)),
		healthCheckVIP(single("l2bridge: forwardHealthCheckVip, no local endpoint under externalTrafficPolicy Local", false, webLBLocal, ep(remote1, "lin-1"))),
		healthCheckVIP(single("l2bridge: forwardHealthCheckVip, all endpoints terminating", false, termLB,
			ep(local1, nodeName, terminating(true)), ep(remote1, "lin-1", terminating(true)))),
		healthCheckVIP(single("l2bridge: forwardHealthCheckVip, ExternalIPs (no ingress IP)", false, webEIP, localAndRemote()...)),
		healthCheckVIP(single("overlay: forwardHealthCheckVip, LoadBalancer externalTrafficPolicy Cluster", true, webLB, localAndRemote()...)),
		healthCheckVIP(single("overlay: forwardHealthCheckVip, LoadBalancer externalTrafficPolicy Local", true, webLBLocal, localAndRemote()...)),
		withRoot(single("overlay: forwardHealthCheckVip off, LoadBalancer externalTrafficPolicy Cluster", true, webLB, localAndRemote()...)),
	)
	// kube-proxy's Windows annotation preserve-destination (winkernel
	// newServiceInfo: DSR, UseMux and PreserveDIP on the ingress).
	preserve := service("web-pd", "10.96.0.41", loadBalancer(30091, "172.16.0.20"), func(s *v1.Service) {
		s.Annotations = map[string]string{"preserve-destination": "true"}
	})
	sc = append(sc, single("l2bridge: LoadBalancer with preserve-destination", false, preserve, localAndRemote()...))
	noHost := healthCheckVIP(single("l2bridge: forwardHealthCheckVip without the host endpoint", false, webLB, localAndRemote()...))
	noHost.Root = ""
	sc = append(sc, noHost)
	for _, overlay := range []bool{false, true} {
		name := "l2bridge: updates"
		if overlay {
			name = "overlay: updates"
		}
		sc = append(sc, scenario{Name: name, Overlay: overlay, Locals: []string{local1, local2}, Steps: []step{
			{"1 initial", objects{svcs(upd), withSlices(upd, ep(local1, nodeName), ep(remote1, "lin-1"))}},
			{"2 endpoint added", objects{svcs(upd), withSlices(upd, ep(local1, nodeName), ep(remote1, "lin-1"), ep(remote2, "win-2"))}},
			{"3 endpoint removed", objects{svcs(upd), withSlices(upd, ep(local1, nodeName), ep(remote2, "win-2"))}},
			{"4 scaled to zero", objects{svcs(upd), withSlices(upd)}},
			{"5 scaled back", objects{svcs(upd), withSlices(upd, ep(local2, nodeName), ep(remote3, "lin-1"))}},
			{"6 Service deleted", objects{}},
		}})
	}
	return sc
}
