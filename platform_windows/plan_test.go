package hns

import (
	"net/netip"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/crossproxy/crossproxy/core"
)

// TestPlanParity has one case per row of the parity table in README.md: it
// plans a NodeState and compares the whole rendered plan.
func TestPlanParity(t *testing.T) {
	all := PlanOptions{Network: overlay, NodeIP: ip("192.168.0.11"), HostMAC: hostMAC, Features: AllFeatures(), SourceVIP: ip("10.244.1.2")}
	two := []core.Endpoint{local("10.244.1.5", 8080), remote("10.244.2.7", 8080)}
	cases := []struct {
		name  string
		opts  PlanOptions
		ports []*core.ServicePort
		want  string
	}{{
		name:  "ClusterIP",
		opts:  all,
		ports: []*core.ServicePort{port("web", "10.96.0.10", two)},
		want: `# HNS plan: 1 load balancers, 2 remote endpoints, 0 unsupported
lb default/web:http/TCP/v4 ClusterIP 10.96.0.10:80 -> :8080 [10.244.1.5 10.244.2.7*] flags=none portflags=none sourceVIP=10.244.1.2
source-vip-endpoint 10.244.1.2 mac=00-15-5d-00-00-11
remote-endpoint 10.96.0.10 pa=192.168.0.11 mac=00-15-5d-00-00-11
remote-endpoint 10.244.2.7 pa=192.168.0.12 mac=02-11-0a-f4-02-07
`,
	}, {
		name:  "NodePort",
		opts:  all,
		ports: []*core.ServicePort{port("web", "10.96.0.10", two, withNodePort(30080, "192.168.0.11", "10.0.0.11"))},
		want: `# HNS plan: 2 load balancers, 2 remote endpoints, 0 unsupported
lb default/web:http/TCP/v4 ClusterIP 10.96.0.10:80 -> :8080 [10.244.1.5 10.244.2.7*] flags=none portflags=none sourceVIP=10.244.1.2
lb default/web:http/TCP/v4 NodePort *:30080 -> :8080 [10.244.1.5 10.244.2.7*] flags=none portflags=LocalRoutedVIP,VipExternalIP sourceVIP=10.244.1.2
source-vip-endpoint 10.244.1.2 mac=00-15-5d-00-00-11
remote-endpoint 10.96.0.10 pa=192.168.0.11 mac=00-15-5d-00-00-11
remote-endpoint 10.244.2.7 pa=192.168.0.12 mac=02-11-0a-f4-02-07
`,
	}, {
		name: "ExternalIP and LoadBalancer ingress",
		opts: all,
		ports: []*core.ServicePort{port("web", "10.96.0.10", two,
			withFrontend(core.FrontendExternalIP, "203.0.113.5"), withFrontend(core.FrontendLoadBalancer, "198.51.100.9"))},
		want: `# HNS plan: 3 load balancers, 2 remote endpoints, 0 unsupported
lb default/web:http/TCP/v4 ClusterIP 10.96.0.10:80 -> :8080 [10.244.1.5 10.244.2.7*] flags=none portflags=none sourceVIP=10.244.1.2
lb default/web:http/TCP/v4 ExternalIP 203.0.113.5:80 -> :8080 [10.244.1.5 10.244.2.7*] flags=none portflags=VipExternalIP sourceVIP=10.244.1.2
lb default/web:http/TCP/v4 LoadBalancer 198.51.100.9:80 -> :8080 [10.244.1.5 10.244.2.7*] flags=none portflags=VipExternalIP sourceVIP=10.244.1.2
source-vip-endpoint 10.244.1.2 mac=00-15-5d-00-00-11
remote-endpoint 10.96.0.10 pa=192.168.0.11 mac=00-15-5d-00-00-11
remote-endpoint 10.244.2.7 pa=192.168.0.12 mac=02-11-0a-f4-02-07
`,
	}, {
		name: "loadBalancerSourceRanges",
		opts: all,
		ports: []*core.ServicePort{port("web", "10.96.0.10", two, withFrontend(core.FrontendLoadBalancer, "198.51.100.9"),
			func(p *core.ServicePort) { p.SourceRanges = []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")} })},
		want: `# HNS plan: 2 load balancers, 2 remote endpoints, 1 unsupported
lb default/web:http/TCP/v4 ClusterIP 10.96.0.10:80 -> :8080 [10.244.1.5 10.244.2.7*] flags=none portflags=none sourceVIP=10.244.1.2
lb default/web:http/TCP/v4 LoadBalancer 198.51.100.9:80 -> :8080 [10.244.1.5 10.244.2.7*] flags=none portflags=VipExternalIP sourceVIP=10.244.1.2
source-vip-endpoint 10.244.1.2 mac=00-15-5d-00-00-11
remote-endpoint 10.96.0.10 pa=192.168.0.11 mac=00-15-5d-00-00-11
remote-endpoint 10.244.2.7 pa=192.168.0.12 mac=02-11-0a-f4-02-07
unsupported default/web LoadBalancerSourceRanges: port http: HNS load balancers cannot filter clients by source; loadBalancerSourceRanges 203.0.113.0/24 are not enforced
`,
	}, {
		name: "session affinity with timeout",
		opts: all,
		ports: []*core.ServicePort{port("web", "10.96.0.10", two,
			func(p *core.ServicePort) { p.Affinity = core.Affinity{ClientIP: true, TimeoutSeconds: 600} })},
		want: `# HNS plan: 1 load balancers, 2 remote endpoints, 1 unsupported
lb default/web:http/TCP/v4 ClusterIP 10.96.0.10:80 -> :8080 [10.244.1.5 10.244.2.7*] flags=none portflags=none affinity=SourceIP sourceVIP=10.244.1.2
source-vip-endpoint 10.244.1.2 mac=00-15-5d-00-00-11
remote-endpoint 10.96.0.10 pa=192.168.0.11 mac=00-15-5d-00-00-11
remote-endpoint 10.244.2.7 pa=192.168.0.12 mac=02-11-0a-f4-02-07
unsupported default/web SessionAffinityTimeout: port http: HNS keeps ClientIP affinity without a timeout; timeoutSeconds=600 is not enforced
`,
	}, {
		name: "session affinity without the HNS feature",
		opts: PlanOptions{Network: overlay, NodeIP: ip("192.168.0.11"), HostMAC: hostMAC, Features: Features{APIV2: true, IPv6DualStack: true}},
		ports: []*core.ServicePort{port("web", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080)},
			func(p *core.ServicePort) { p.Affinity = core.Affinity{ClientIP: true, TimeoutSeconds: 10800} })},
		want: `# HNS plan: 1 load balancers, 1 remote endpoints, 1 unsupported
lb default/web:http/TCP/v4 ClusterIP 10.96.0.10:80 -> :8080 [10.244.1.5] flags=none portflags=none
remote-endpoint 10.96.0.10 pa=192.168.0.11 mac=00-15-5d-00-00-11
unsupported default/web SessionAffinity: port http: this HNS does not support session affinity; connections are spread without ClientIP affinity
`,
	}, {
		name:  "internalTrafficPolicy Local",
		opts:  all,
		ports: []*core.ServicePort{port("web", "10.96.0.10", two, func(p *core.ServicePort) { p.InternalPolicyLocal = true })},
		want: `# HNS plan: 1 load balancers, 1 remote endpoints, 0 unsupported
lb default/web:http/TCP/v4 ClusterIP 10.96.0.10:80 -> :8080 [10.244.1.5] flags=none portflags=none sourceVIP=10.244.1.2
source-vip-endpoint 10.244.1.2 mac=00-15-5d-00-00-11
remote-endpoint 10.96.0.10 pa=192.168.0.11 mac=00-15-5d-00-00-11
`,
	}, {
		name: "externalTrafficPolicy Local without the DSR flag",
		opts: all,
		ports: []*core.ServicePort{port("web", "10.96.0.10", two, withNodePort(30080, "192.168.0.11"),
			func(p *core.ServicePort) { p.ExternalPolicyLocal = true; p.HealthCheckNodePort = 31000 })},
		want: `# HNS plan: 2 load balancers, 2 remote endpoints, 0 unsupported
lb default/web:http/TCP/v4 ClusterIP 10.96.0.10:80 -> :8080 [10.244.1.5 10.244.2.7*] flags=none portflags=none sourceVIP=10.244.1.2
lb default/web:http/TCP/v4 NodePort *:30080 -> :8080 [10.244.1.5] flags=DSR portflags=LocalRoutedVIP,VipExternalIP sourceVIP=10.244.1.2
source-vip-endpoint 10.244.1.2 mac=00-15-5d-00-00-11
remote-endpoint 10.96.0.10 pa=192.168.0.11 mac=00-15-5d-00-00-11
remote-endpoint 10.244.2.7 pa=192.168.0.12 mac=02-11-0a-f4-02-07
`,
	}, {
		name: "externalTrafficPolicy Local on an HNS without DSR",
		opts: PlanOptions{Network: l2bridge, Features: Features{APIV2: true}, EnableDSR: true},
		ports: []*core.ServicePort{port("web", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080)}, withNodePort(30080, "192.168.0.11"),
			func(p *core.ServicePort) { p.ExternalPolicyLocal = true })},
		want: `# HNS plan: 2 load balancers, 0 remote endpoints, 1 unsupported
lb default/web:http/TCP/v4 ClusterIP 10.96.0.10:80 -> :8080 [10.244.1.5] flags=none portflags=none
lb default/web:http/TCP/v4 NodePort *:30080 -> :8080 [10.244.1.5] flags=none portflags=LocalRoutedVIP,VipExternalIP
unsupported default/web ExternalTrafficPolicyLocalSourceIP: port http: externalTrafficPolicy Local uses only this node's endpoints, but this HNS has no DSR, so the client source address is not preserved
`,
	}, {
		name: "externalTrafficPolicy Local with DSR",
		opts: PlanOptions{Network: overlay, NodeIP: ip("192.168.0.11"), HostMAC: hostMAC, Features: AllFeatures(), EnableDSR: true},
		ports: []*core.ServicePort{port("web", "10.96.0.10", two, withFrontend(core.FrontendLoadBalancer, "198.51.100.9"),
			func(p *core.ServicePort) { p.ExternalPolicyLocal = true })},
		want: `# HNS plan: 2 load balancers, 2 remote endpoints, 0 unsupported
lb default/web:http/TCP/v4 ClusterIP 10.96.0.10:80 -> :8080 [10.244.1.5 10.244.2.7*] flags=DSR portflags=none
lb default/web:http/TCP/v4 LoadBalancer 198.51.100.9:80 -> :8080 [10.244.1.5] flags=DSR portflags=VipExternalIP
remote-endpoint 10.96.0.10 pa=192.168.0.11 mac=00-15-5d-00-00-11
remote-endpoint 10.244.2.7 pa=192.168.0.12 mac=02-11-0a-f4-02-07
`,
	}, {
		name:  "DSR requested but not supported",
		opts:  PlanOptions{Network: overlay, NodeIP: ip("192.168.0.11"), HostMAC: hostMAC, Features: Features{APIV2: true, IPv6DualStack: true}, EnableDSR: true},
		ports: []*core.ServicePort{port("web", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080)})},
		want: `# HNS plan: 1 load balancers, 1 remote endpoints, 0 unsupported
lb default/web:http/TCP/v4 ClusterIP 10.96.0.10:80 -> :8080 [10.244.1.5] flags=none portflags=none
remote-endpoint 10.96.0.10 pa=192.168.0.11 mac=00-15-5d-00-00-11
`,
	}, {
		name:  "no endpoints: reject",
		opts:  all,
		ports: []*core.ServicePort{port("web", "10.96.0.10", nil, withNodePort(30080, "192.168.0.11"))},
		want: `# HNS plan: 0 load balancers, 1 remote endpoints, 2 unsupported
source-vip-endpoint 10.244.1.2 mac=00-15-5d-00-00-11
remote-endpoint 10.96.0.10 pa=192.168.0.11 mac=00-15-5d-00-00-11
unsupported default/web RejectWithoutEndpoints: port http ClusterIP: the Service has no endpoints; HNS cannot reject, so connections time out instead of being refused
unsupported default/web RejectWithoutEndpoints: port http NodePort: the Service has no endpoints; HNS cannot reject, so connections time out instead of being refused
`,
	}, {
		name: "no local endpoints: drop",
		opts: all,
		ports: []*core.ServicePort{port("web", "10.96.0.10", []core.Endpoint{remote("10.244.2.7", 8080)}, withNodePort(30080, "192.168.0.11"),
			func(p *core.ServicePort) {
				p.ExternalPolicyLocal = true
				p.ExternalEmpty = core.VerdictDrop
				p.Frontends = p.Frontends[1:]
			})},
		want: `# HNS plan: 0 load balancers, 1 remote endpoints, 0 unsupported
source-vip-endpoint 10.244.1.2 mac=00-15-5d-00-00-11
remote-endpoint 10.96.0.10 pa=192.168.0.11 mac=00-15-5d-00-00-11
`,
	}, {
		name: "terminating fallback",
		opts: all,
		ports: []*core.ServicePort{port("web", "10.96.0.10", []core.Endpoint{
			{Addr: ip("10.244.1.5"), Port: 8080, Serving: true, Terminating: true, Local: true},
		})},
		want: `# HNS plan: 1 load balancers, 1 remote endpoints, 0 unsupported
lb default/web:http/TCP/v4 ClusterIP 10.96.0.10:80 -> :8080 [10.244.1.5] flags=none portflags=none sourceVIP=10.244.1.2
source-vip-endpoint 10.244.1.2 mac=00-15-5d-00-00-11
remote-endpoint 10.96.0.10 pa=192.168.0.11 mac=00-15-5d-00-00-11
`,
	}, {
		name: "topology hints: only the chosen endpoints",
		opts: all,
		ports: []*core.ServicePort{port("web", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080)}, func(p *core.ServicePort) {
			p.TopologyMode = "PreferSameZone"
			p.Excluded = []core.Exclusion{{Addr: "10.244.2.7", Port: 8080, Set: core.SetCluster, Reason: core.ExcludedOtherZone}}
		})},
		want: `# HNS plan: 1 load balancers, 1 remote endpoints, 0 unsupported
lb default/web:http/TCP/v4 ClusterIP 10.96.0.10:80 -> :8080 [10.244.1.5] flags=none portflags=none sourceVIP=10.244.1.2
source-vip-endpoint 10.244.1.2 mac=00-15-5d-00-00-11
remote-endpoint 10.96.0.10 pa=192.168.0.11 mac=00-15-5d-00-00-11
`,
	}, {
		name: "endpoints on different target ports",
		opts: all,
		ports: []*core.ServicePort{port("web", "10.96.0.10", []core.Endpoint{
			local("10.244.1.5", 8080), remote("10.244.2.7", 8080), remote("10.244.2.8", 9090),
		})},
		want: `# HNS plan: 1 load balancers, 2 remote endpoints, 1 unsupported
lb default/web:http/TCP/v4 ClusterIP 10.96.0.10:80 -> :8080 [10.244.1.5 10.244.2.7*] flags=none portflags=none sourceVIP=10.244.1.2
source-vip-endpoint 10.244.1.2 mac=00-15-5d-00-00-11
remote-endpoint 10.96.0.10 pa=192.168.0.11 mac=00-15-5d-00-00-11
remote-endpoint 10.244.2.7 pa=192.168.0.12 mac=02-11-0a-f4-02-07
unsupported default/web MixedTargetPorts: port http ClusterIP: an HNS load balancer has one internal port; 2 endpoints on port 8080 are used, 10.244.2.8:9090 are not
`,
	}, {
		name: "dual-stack",
		opts: PlanOptions{Network: l2bridge, Features: AllFeatures()},
		ports: []*core.ServicePort{
			port("web", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080)}),
			port("web", "fd00:96::10", []core.Endpoint{local("fd00:1::5", 8080), remote("fd00:2::7", 8080)}),
		},
		want: `# HNS plan: 2 load balancers, 1 remote endpoints, 0 unsupported
lb default/web:http/TCP/v4 ClusterIP 10.96.0.10:80 -> :8080 [10.244.1.5] flags=none portflags=none
lb default/web:http/TCP/v6 ClusterIP fd00:96::10:80 -> :8080 [fd00:1::5 fd00:2::7*] flags=IPv6 portflags=none
remote-endpoint fd00:2::7 mac=02-11-07-00-00-00
`,
	}, {
		name: "overlay is single-stack",
		opts: all,
		ports: []*core.ServicePort{
			port("web", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080)}),
			port("web", "fd00:96::10", []core.Endpoint{local("fd00:1::5", 8080), remote("fd00:2::7", 8080)}),
		},
		want: `# HNS plan: 1 load balancers, 1 remote endpoints, 1 unsupported
lb default/web:http/TCP/v4 ClusterIP 10.96.0.10:80 -> :8080 [10.244.1.5] flags=none portflags=none sourceVIP=10.244.1.2
source-vip-endpoint 10.244.1.2 mac=00-15-5d-00-00-11
remote-endpoint 10.96.0.10 pa=192.168.0.11 mac=00-15-5d-00-00-11
unsupported default/web DualStackOverlay: port http: overlay networks carry one IP family (kube-proxy disables dual-stack there); the IPv6 frontends are not proxied
`,
	}, {
		name: "IPv6 without the HNS feature",
		opts: PlanOptions{Network: l2bridge, Features: Features{APIV2: true}},
		ports: []*core.ServicePort{
			port("web", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080)}),
			port("web", "fd00:96::10", []core.Endpoint{local("fd00:1::5", 8080)}),
		},
		want: `# HNS plan: 1 load balancers, 0 remote endpoints, 1 unsupported
lb default/web:http/TCP/v4 ClusterIP 10.96.0.10:80 -> :8080 [10.244.1.5] flags=none portflags=none
unsupported default/web IPv6: port http: this HNS does not support IPv6 load balancers; the IPv6 frontends are not proxied
`,
	}, {
		name: "UDP",
		opts: all,
		ports: []*core.ServicePort{port("dns", "10.96.0.53", []core.Endpoint{local("10.244.1.5", 53)}, func(p *core.ServicePort) {
			p.Key.Protocol, p.Protocol, p.Port, p.Frontends[0].Port = v1.ProtocolUDP, v1.ProtocolUDP, 53, 53
		})},
		want: `# HNS plan: 1 load balancers, 1 remote endpoints, 0 unsupported
lb default/dns:http/UDP/v4 ClusterIP 10.96.0.53:53 -> :53 [10.244.1.5] flags=none portflags=none sourceVIP=10.244.1.2
source-vip-endpoint 10.244.1.2 mac=00-15-5d-00-00-11
remote-endpoint 10.96.0.53 pa=192.168.0.11 mac=00-15-5d-00-00-11
`,
	}, {
		name: "SCTP",
		opts: all,
		ports: []*core.ServicePort{port("sig", "10.96.0.20", two, func(p *core.ServicePort) {
			p.Key.Protocol, p.Protocol = v1.ProtocolSCTP, v1.ProtocolSCTP
		})},
		want: `# HNS plan: 0 load balancers, 1 remote endpoints, 1 unsupported
source-vip-endpoint 10.244.1.2 mac=00-15-5d-00-00-11
remote-endpoint 10.96.0.20 pa=192.168.0.11 mac=00-15-5d-00-00-11
unsupported default/sig ProtocolSCTP: port http: HNS load balancers support TCP and UDP only; SCTP is not proxied on Windows
`,
	}, {
		name:  "L2Bridge remote endpoints need no provider address",
		opts:  PlanOptions{Network: l2bridge, Features: AllFeatures(), SourceVIP: ip("10.244.1.2")},
		ports: []*core.ServicePort{port("web", "10.96.0.10", []core.Endpoint{remote("10.244.9.7", 8080)})},
		want: `# HNS plan: 1 load balancers, 1 remote endpoints, 0 unsupported
lb default/web:http/TCP/v4 ClusterIP 10.96.0.10:80 -> :8080 [10.244.9.7*] flags=none portflags=none
remote-endpoint 10.244.9.7 mac=02-11-0a-f4-09-07
`,
	}, {
		name:  "overlay endpoint outside every remote subnet",
		opts:  all,
		ports: []*core.ServicePort{port("web", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080), remote("10.244.9.7", 8080)})},
		want: `# HNS plan: 1 load balancers, 2 remote endpoints, 0 unsupported
lb default/web:http/TCP/v4 ClusterIP 10.96.0.10:80 -> :8080 [10.244.1.5 10.244.9.7*] flags=none portflags=none sourceVIP=192.168.0.11
source-vip-endpoint 10.244.1.2 mac=00-15-5d-00-00-11
remote-endpoint 10.96.0.10 pa=192.168.0.11 mac=00-15-5d-00-00-11
remote-endpoint 10.244.9.7 pa=192.168.0.11 mac=02-11-0a-f4-09-07
`,
	}, {
		name: "two Services claiming one external IP",
		opts: all,
		ports: []*core.ServicePort{
			port("a", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080)}, withFrontend(core.FrontendExternalIP, "203.0.113.5")),
			port("b", "10.96.0.11", []core.Endpoint{local("10.244.1.6", 8080)}, withFrontend(core.FrontendExternalIP, "203.0.113.5")),
		},
		want: `# HNS plan: 3 load balancers, 2 remote endpoints, 1 unsupported
lb default/a:http/TCP/v4 ClusterIP 10.96.0.10:80 -> :8080 [10.244.1.5] flags=none portflags=none sourceVIP=10.244.1.2
lb default/a:http/TCP/v4 ExternalIP 203.0.113.5:80 -> :8080 [10.244.1.5] flags=none portflags=VipExternalIP sourceVIP=10.244.1.2
lb default/b:http/TCP/v4 ClusterIP 10.96.0.11:80 -> :8080 [10.244.1.6] flags=none portflags=none sourceVIP=10.244.1.2
source-vip-endpoint 10.244.1.2 mac=00-15-5d-00-00-11
remote-endpoint 10.96.0.10 pa=192.168.0.11 mac=00-15-5d-00-00-11
remote-endpoint 10.96.0.11 pa=192.168.0.11 mac=00-15-5d-00-00-11
unsupported default/b FrontendConflict: ExternalIP TCP/203.0.113.5/80 is already used by default/a:http/TCP/v4; HNS allows one load balancer per frontend
`,
	}}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			mustEqual(t, renderPlan(planState(state(c.ports...), c.opts)), c.want)
		})
	}
}

// TestDSRChoice: DSR as kube-proxy sets it: on ClusterIP load balancers
// exactly with --enable-dsr, on NodePort, ExternalIP and LoadBalancer
// ingress ones exactly with externalTrafficPolicy Local, flag or not; never
// where HNS lacks DSR.
func TestDSRChoice(t *testing.T) {
	for _, c := range []struct {
		flag, etpLocal, hnsDSR bool
		cluster, external      bool
	}{
		{false, false, true, false, false},
		{true, false, true, true, false},
		{false, true, true, false, true},
		{true, true, true, true, true},
		{true, true, false, false, false},
	} {
		f := AllFeatures()
		f.DSR = c.hnsDSR
		p := port("web", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080)}, withNodePort(30080, "192.168.0.11"),
			withFrontend(core.FrontendExternalIP, "203.0.113.5"), withFrontend(core.FrontendLoadBalancer, "198.51.100.9"),
			func(p *core.ServicePort) { p.ExternalPolicyLocal = c.etpLocal })
		plan := planState(state(p), PlanOptions{Network: l2bridge, Features: f, EnableDSR: c.flag})
		if len(plan.LoadBalancers) != 4 {
			t.Fatalf("%+v: %s", c, renderPlan(plan))
		}
		for _, lb := range plan.LoadBalancers {
			want := c.external
			if lb.Kind == core.FrontendClusterIP {
				want = c.cluster
			}
			if lb.LB.Flags.DSR != want {
				t.Errorf("flag=%v etpLocal=%v hnsDSR=%v: %s", c.flag, c.etpLocal, c.hnsDSR, renderLB(lb))
			}
		}
	}
}

// TestPlanPortsPartial checks that a partial plan covers only the given ports
// and that a removed port plans to nothing.
func TestPlanPortsPartial(t *testing.T) {
	a := port("a", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080)})
	b := port("b", "10.96.0.11", []core.Endpoint{local("10.244.1.6", 8080)})
	gone := core.PortKey{Service: b.Key.Service, PortName: "old", Protocol: v1.ProtocolTCP, Family: v1.IPv4Protocol}
	got := renderPlan(planPorts(state(a, b), []core.PortKey{b.Key, gone}, PlanOptions{Features: AllFeatures()}))
	mustEqual(t, got, `# HNS plan: 1 load balancers, 0 remote endpoints, 0 unsupported
lb default/b:http/TCP/v4 ClusterIP 10.96.0.11:80 -> :8080 [10.244.1.6] flags=none portflags=none
`)
}

// TestPlanEmptyProtocolIsNotTCP: the core defaults a missing protocol to
// TCP; a port that still has none is not proxied, with a notice, as on
// Linux, rather than guessed to be TCP here.
func TestPlanEmptyProtocolIsNotTCP(t *testing.T) {
	p := port("web", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080)}, func(p *core.ServicePort) {
		p.Protocol, p.Key.Protocol = "", ""
	})
	plan := planState(state(p), PlanOptions{Network: overlay, NodeIP: ip("192.168.0.11"), HostMAC: hostMAC, Features: AllFeatures()})
	if len(plan.LoadBalancers) != 0 || len(plan.Notices) != 1 {
		t.Errorf("want no load balancer and one notice: %+v", plan)
	}
}

// TestPreserveDestinationNoticed: kube-proxy's Windows annotation
// preserve-destination ("true") asks winkernel for DSR, UseMux and
// PreserveDIP on the LoadBalancer ingress with local endpoints only;
// crossproxy does not program that mode and says so once per Service, never
// silently, and programs the Service as any other.
func TestPreserveDestinationNoticed(t *testing.T) {
	p := port("web", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080)}, withFrontend(core.FrontendLoadBalancer, "203.0.113.10"),
		func(p *core.ServicePort) { p.PreserveDestination = true })
	plan := planState(state(p), PlanOptions{Network: l2bridge, Features: AllFeatures()})
	if len(plan.LoadBalancers) != 2 {
		t.Fatalf("want the ClusterIP and ingress load balancers: %+v", plan.LoadBalancers)
	}
	if len(plan.Notices) != 1 || plan.Notices[0].Feature != "PreserveDestination" || !strings.Contains(plan.Notices[0].Detail, `preserve-destination="true" is not applied`) {
		t.Fatalf("want one PreserveDestination notice: %+v", plan.Notices)
	}
	q := port("plain", "10.96.0.11", []core.Endpoint{local("10.244.1.5", 8080)}, withFrontend(core.FrontendLoadBalancer, "203.0.113.11"))
	if n := planState(state(q), PlanOptions{Network: l2bridge, Features: AllFeatures()}).Notices; len(n) != 0 {
		t.Fatalf("a Service without the annotation: notices %+v", n)
	}
}
