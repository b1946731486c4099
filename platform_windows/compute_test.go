package hns

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/platform/manifest"
)

// nodeYAML is the Windows node the objects are computed for: zone a, one
// address per family.
const nodeYAML = `apiVersion: v1
kind: Node
metadata:
  name: win-1
  labels: {topology.kubernetes.io/zone: a}
status:
  addresses: [{type: InternalIP, address: 192.168.0.11}, {type: InternalIP, address: "fd00:c::11"}]
`

// planObjects runs Kubernetes objects through core.Compute and the planner:
// the path from API objects to HNS objects that a Windows node takes.
func planObjects(t *testing.T, objects string, opts PlanOptions) string {
	t.Helper()
	set, err := manifest.Parse("test.yaml", []byte(nodeYAML+"---\n"+objects))
	if err != nil {
		t.Fatal(err)
	}
	node, err := set.Node("win-1")
	if err != nil {
		t.Fatal(err)
	}
	st, err := core.Compute(core.Options{IPFamilies: []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}, LocalDetect: core.LocalDetect{Mode: core.LocalDetectNone}},
		node, set.Services, set.Slices)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range st.Problems {
		t.Errorf("core problem: %s", p)
	}
	return renderPlan(planState(st, opts))
}

func svcYAML(name, spec string) string {
	return "apiVersion: v1\nkind: Service\nmetadata: {name: " + name + ", namespace: default}\nspec:\n" + spec + "---\n"
}

func sliceYAML(name, svc, family, port string, endpoints ...string) string {
	return "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: " + name + "\n  namespace: default\n  labels: {kubernetes.io/service-name: " + svc + "}\n" +
		"addressType: " + family + "\nports: [{name: http, port: " + port + ", protocol: TCP}]\nendpoints:\n" + strings.Join(endpoints, "") + "---\n"
}

// epYAML is one endpoint; cond is ready/serving/terminating as "r s t" booleans.
func epYAML(addr, node, zone, ready, serving, terminating, hints string) string {
	s := "- addresses: [\"" + addr + "\"]\n  nodeName: " + node + "\n  zone: " + zone + "\n  conditions: {ready: " + ready + ", serving: " + serving + ", terminating: " + terminating + "}\n"
	if hints != "" {
		s += "  hints: {forZones: [{name: " + hints + "}]}\n"
	}
	return s
}

func readyEP(addr, node, zone string) string {
	return epYAML(addr, node, zone, "true", "true", "false", "")
}

// TestComputedParity proves parity rows end to end: Kubernetes objects,
// core's decisions, HNS plan.
func TestComputedParity(t *testing.T) {
	all := PlanOptions{Network: Network{Name: "cbr0", Type: NetworkL2Bridge}, Features: AllFeatures()}
	cases := []struct{ name, objects, want string }{{
		name: "LoadBalancer with externalTrafficPolicy Local, sourceRanges, affinity",
		objects: svcYAML("web", `  type: LoadBalancer
  clusterIP: 10.96.0.10
  clusterIPs: [10.96.0.10]
  ipFamilies: [IPv4]
  externalTrafficPolicy: Local
  healthCheckNodePort: 31000
  sessionAffinity: ClientIP
  sessionAffinityConfig: {clientIP: {timeoutSeconds: 600}}
  loadBalancerSourceRanges: [203.0.113.0/24]
  ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30080, protocol: TCP}]
status:
  loadBalancer: {ingress: [{ip: 198.51.100.9}]}
`) + sliceYAML("web-1", "web", "IPv4", "8080", readyEP("10.244.1.5", "win-1", "a"), readyEP("10.244.2.7", "lin-1", "a")),
		want: `# HNS plan: 3 load balancers, 1 remote endpoints, 2 unsupported
lb default/web:http/TCP/v4 ClusterIP 10.96.0.10:80 -> :8080 [10.244.1.5 10.244.2.7*] flags=none portflags=none affinity=SourceIP
lb default/web:http/TCP/v4 LoadBalancer 198.51.100.9:80 -> :8080 [10.244.1.5] flags=DSR portflags=VipExternalIP affinity=SourceIP
lb default/web:http/TCP/v4 NodePort *:30080 -> :8080 [10.244.1.5] flags=DSR portflags=LocalRoutedVIP,VipExternalIP affinity=SourceIP
remote-endpoint 10.244.2.7 mac=02-11-0a-f4-02-07
unsupported default/web SessionAffinityTimeout: port http: HNS keeps ClientIP affinity without a timeout; timeoutSeconds=600 is not enforced
unsupported default/web LoadBalancerSourceRanges: port http: HNS load balancers cannot filter clients by source; loadBalancerSourceRanges 203.0.113.0/24 are not enforced
`,
	}, {
		name: "terminating fallback",
		objects: svcYAML("web", "  clusterIP: 10.96.0.10\n  clusterIPs: [10.96.0.10]\n  ipFamilies: [IPv4]\n  ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP}]\n") +
			sliceYAML("web-1", "web", "IPv4", "8080",
				epYAML("10.244.1.5", "win-1", "a", "false", "true", "true", ""),
				epYAML("10.244.2.7", "lin-1", "a", "false", "false", "true", "")),
		want: `# HNS plan: 1 load balancers, 0 remote endpoints, 0 unsupported
lb default/web:http/TCP/v4 ClusterIP 10.96.0.10:80 -> :8080 [10.244.1.5] flags=none portflags=none
`,
	}, {
		name: "terminating fallback for NodePort and LoadBalancer, Cluster and Local policy",
		objects: svcYAML("web", `  type: LoadBalancer
  clusterIP: 10.96.0.10
  clusterIPs: [10.96.0.10]
  ipFamilies: [IPv4]
  ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30080, protocol: TCP}]
status:
  loadBalancer: {ingress: [{ip: 198.51.100.9}]}
`) + svcYAML("loc", `  type: LoadBalancer
  clusterIP: 10.96.0.11
  clusterIPs: [10.96.0.11]
  ipFamilies: [IPv4]
  externalTrafficPolicy: Local
  healthCheckNodePort: 31001
  ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30081, protocol: TCP}]
status:
  loadBalancer: {ingress: [{ip: 198.51.100.10}]}
`) + sliceYAML("web-1", "web", "IPv4", "8080",
			epYAML("10.244.1.5", "win-1", "a", "false", "true", "true", ""),
			epYAML("10.244.2.7", "lin-1", "a", "false", "true", "true", "")) +
			sliceYAML("loc-1", "loc", "IPv4", "8080",
				epYAML("10.244.1.6", "win-1", "a", "false", "true", "true", ""),
				readyEP("10.244.2.8", "lin-1", "a")),
		want: `# HNS plan: 6 load balancers, 2 remote endpoints, 0 unsupported
lb default/loc:http/TCP/v4 ClusterIP 10.96.0.11:80 -> :8080 [10.244.2.8*] flags=none portflags=none
lb default/loc:http/TCP/v4 LoadBalancer 198.51.100.10:80 -> :8080 [10.244.1.6] flags=DSR portflags=VipExternalIP
lb default/loc:http/TCP/v4 NodePort *:30081 -> :8080 [10.244.1.6] flags=DSR portflags=LocalRoutedVIP,VipExternalIP
lb default/web:http/TCP/v4 ClusterIP 10.96.0.10:80 -> :8080 [10.244.1.5 10.244.2.7*] flags=none portflags=none
lb default/web:http/TCP/v4 LoadBalancer 198.51.100.9:80 -> :8080 [10.244.1.5 10.244.2.7*] flags=none portflags=VipExternalIP
lb default/web:http/TCP/v4 NodePort *:30080 -> :8080 [10.244.1.5 10.244.2.7*] flags=none portflags=LocalRoutedVIP,VipExternalIP
remote-endpoint 10.244.2.7 mac=02-11-0a-f4-02-07
remote-endpoint 10.244.2.8 mac=02-11-0a-f4-02-08
`,
	}, {
		name: "topology hints",
		objects: svcYAML("web", "  clusterIP: 10.96.0.10\n  clusterIPs: [10.96.0.10]\n  ipFamilies: [IPv4]\n  trafficDistribution: PreferSameZone\n  ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP}]\n") +
			sliceYAML("web-1", "web", "IPv4", "8080",
				epYAML("10.244.1.5", "win-1", "a", "true", "true", "false", "a"),
				epYAML("10.244.2.7", "lin-1", "a", "true", "true", "false", "a"),
				epYAML("10.244.3.9", "lin-2", "b", "true", "true", "false", "b")),
		want: `# HNS plan: 1 load balancers, 1 remote endpoints, 0 unsupported
lb default/web:http/TCP/v4 ClusterIP 10.96.0.10:80 -> :8080 [10.244.1.5 10.244.2.7*] flags=none portflags=none
remote-endpoint 10.244.2.7 mac=02-11-0a-f4-02-07
`,
	}, {
		name: "internalTrafficPolicy Local",
		objects: svcYAML("web", "  clusterIP: 10.96.0.10\n  clusterIPs: [10.96.0.10]\n  ipFamilies: [IPv4]\n  internalTrafficPolicy: Local\n  ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP}]\n") +
			sliceYAML("web-1", "web", "IPv4", "8080", readyEP("10.244.1.5", "win-1", "a"), readyEP("10.244.2.7", "lin-1", "a")),
		want: `# HNS plan: 1 load balancers, 0 remote endpoints, 0 unsupported
lb default/web:http/TCP/v4 ClusterIP 10.96.0.10:80 -> :8080 [10.244.1.5] flags=none portflags=none
`,
	}, {
		name: "endpoints on different target ports",
		objects: svcYAML("web", "  clusterIP: 10.96.0.10\n  clusterIPs: [10.96.0.10]\n  ipFamilies: [IPv4]\n  ports: [{name: http, port: 80, targetPort: http, protocol: TCP}]\n") +
			sliceYAML("web-old", "web", "IPv4", "8080", readyEP("10.244.1.5", "win-1", "a")) +
			sliceYAML("web-new", "web", "IPv4", "9090", readyEP("10.244.2.7", "lin-1", "a"), readyEP("10.244.2.8", "lin-1", "a")),
		want: `# HNS plan: 1 load balancers, 2 remote endpoints, 1 unsupported
lb default/web:http/TCP/v4 ClusterIP 10.96.0.10:80 -> :9090 [10.244.2.7* 10.244.2.8*] flags=none portflags=none
remote-endpoint 10.244.2.7 mac=02-11-0a-f4-02-07
remote-endpoint 10.244.2.8 mac=02-11-0a-f4-02-08
unsupported default/web MixedTargetPorts: port http ClusterIP: an HNS load balancer has one internal port; 2 endpoints on port 9090 are used, 10.244.1.5:8080 are not
`,
	}, {
		name: "dual-stack",
		objects: svcYAML("web", "  clusterIP: 10.96.0.10\n  clusterIPs: [10.96.0.10, \"fd00:96::10\"]\n  ipFamilies: [IPv4, IPv6]\n  ipFamilyPolicy: RequireDualStack\n  ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP}]\n") +
			sliceYAML("web-4", "web", "IPv4", "8080", readyEP("10.244.1.5", "win-1", "a")) +
			sliceYAML("web-6", "web", "IPv6", "8080", readyEP("fd00:1::5", "win-1", "a")),
		want: `# HNS plan: 2 load balancers, 0 remote endpoints, 0 unsupported
lb default/web:http/TCP/v4 ClusterIP 10.96.0.10:80 -> :8080 [10.244.1.5] flags=none portflags=none
lb default/web:http/TCP/v6 ClusterIP fd00:96::10:80 -> :8080 [fd00:1::5] flags=IPv6 portflags=none
`,
	}, {
		name: "no endpoints and no local endpoints",
		objects: svcYAML("empty", "  clusterIP: 10.96.0.20\n  clusterIPs: [10.96.0.20]\n  ipFamilies: [IPv4]\n  ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP}]\n") +
			svcYAML("far", "  type: NodePort\n  clusterIP: 10.96.0.21\n  clusterIPs: [10.96.0.21]\n  ipFamilies: [IPv4]\n  externalTrafficPolicy: Local\n  ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30081, protocol: TCP}]\n") +
			sliceYAML("far-1", "far", "IPv4", "8080", readyEP("10.244.2.7", "lin-1", "a")),
		want: `# HNS plan: 1 load balancers, 1 remote endpoints, 1 unsupported
lb default/far:http/TCP/v4 ClusterIP 10.96.0.21:80 -> :8080 [10.244.2.7*] flags=none portflags=none
remote-endpoint 10.244.2.7 mac=02-11-0a-f4-02-07
unsupported default/empty RejectWithoutEndpoints: port http ClusterIP: the Service has no endpoints; HNS cannot reject, so connections time out instead of being refused
`,
	}}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			mustEqual(t, planObjects(t, c.objects, all), c.want)
		})
	}
}
