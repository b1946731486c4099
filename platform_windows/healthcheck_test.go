package hns

import (
	"context"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"

	"github.com/crossproxy/crossproxy/core"
)

// lbPort is a LoadBalancer Service port with ingress IPs; hcnp is its
// healthCheckNodePort (externalTrafficPolicy Local) or 0.
func lbPort(name, cip string, hcnp uint16, eps []core.Endpoint, ingress ...string) *core.ServicePort {
	opts := []func(*core.ServicePort){withNodePort(30080)}
	for _, a := range ingress {
		opts = append(opts, withFrontend(core.FrontendLoadBalancer, a))
	}
	p := port(name, cip, eps, opts...)
	if hcnp != 0 {
		p.ExternalPolicyLocal = true
		p.HealthCheckNodePort = hcnp
	}
	return p
}

func healthLBs(p hnsPlan) []string {
	var out []string
	for _, lb := range p.LoadBalancers {
		if lb.Kind == kindHealthCheck {
			out = append(out, renderLB(lb))
		}
	}
	return out
}

// TestHealthCheckVIPPlan: forwardHealthCheckVip gives every LoadBalancer
// ingress IP one load balancer on the health-check port (the Service's
// healthCheckNodePort, else the healthz port) leading to the host endpoint,
// with the Service's source VIP and no DSR or affinity, as winkernel; none
// while the external set has no ready endpoint, none for the other ports of
// the same Service, none without the host endpoint.
func TestHealthCheckVIPPlan(t *testing.T) {
	gw := ip("10.244.1.3")
	opts := PlanOptions{Network: l2bridge, Features: AllFeatures(), HealthCheckGateway: gw, HealthzPort: 10256}
	eps := []core.Endpoint{local("10.244.1.10", 8080), remote("10.244.2.20", 8080)}

	cluster := lbPort("web-lb", "10.96.0.13", 0, eps, "172.16.0.10", "172.16.0.11")
	cluster.Affinity.ClientIP = true
	got := healthLBs(planState(state(cluster), opts))
	mustEqual(t, strings.Join(got, "\n"), strings.Join([]string{
		"lb default/web-lb:http/TCP/v4 HealthCheckVIP 172.16.0.10:10256 -> :10256 [10.244.1.3] flags=none portflags=none",
		"lb default/web-lb:http/TCP/v4 HealthCheckVIP 172.16.0.11:10256 -> :10256 [10.244.1.3] flags=none portflags=none",
	}, "\n"))

	localPolicy := lbPort("web-lb-local", "10.96.0.14", 32000, eps, "172.16.0.12")
	got = healthLBs(planState(state(localPolicy), PlanOptions{Network: overlay, Features: AllFeatures(), SourceVIP: ip("10.244.1.2"), NodeIP: ip("192.168.0.11"),
		HostMAC: hostMAC, HealthCheckGateway: gw, HealthzPort: 10256}))
	mustEqual(t, strings.Join(got, "\n"),
		"lb default/web-lb-local:http/TCP/v4 HealthCheckVIP 172.16.0.12:32000 -> :32000 [10.244.1.3] flags=none portflags=none sourceVIP=10.244.1.2")

	// Only terminating endpoints (the core's fallback) or none at all: no forwarding.
	term := local("10.244.1.10", 8080)
	term.Ready, term.Terminating = false, true
	for name, p := range map[string]*core.ServicePort{
		"terminating":  lbPort("web-term", "10.96.0.25", 0, []core.Endpoint{term}, "172.16.0.13"),
		"no endpoints": lbPort("web-empty", "10.96.0.26", 0, nil, "172.16.0.14"),
	} {
		if got := healthLBs(planState(state(p), opts)); len(got) != 0 {
			t.Errorf("%s: health-check load balancers %v, want none", name, got)
		}
	}

	// A second port of the Service shares the ingress IP's health-check port.
	second := lbPort("web-lb", "10.96.0.13", 0, eps, "172.16.0.10")
	second.Key.PortName, second.Port = "https", 443
	for i := range second.Frontends {
		second.Frontends[i].Port = 443
	}
	first := lbPort("web-lb", "10.96.0.13", 0, eps, "172.16.0.10")
	pl := planState(state(first, second), opts)
	if got := healthLBs(pl); len(got) != 1 || len(pl.Notices) != 0 {
		t.Errorf("two ports: health-check load balancers %v (want 1), notices %v (want none)", got, pl.Notices)
	}

	// Off (no host endpoint), or an IPv6 ingress IP with an IPv4 host endpoint.
	if got := healthLBs(planState(state(cluster), PlanOptions{Network: l2bridge, Features: AllFeatures(), HealthzPort: 10256})); len(got) != 0 {
		t.Errorf("without the host endpoint: %v", got)
	}
	v6 := lbPort("web6", "fd00:96::13", 0, []core.Endpoint{local("fd00:1::10", 8080)}, "fd00:16::10")
	v6.Key.Family = v1.IPv6Protocol
	pl = planState(state(v6), opts)
	if got := healthLBs(pl); len(got) != 0 || len(pl.Notices) != 1 || pl.Notices[0].Feature != "HealthCheckVIP" {
		t.Errorf("IPv6 ingress, IPv4 host endpoint: %v, notices %v", got, pl.Notices)
	}
	// No healthCheckNodePort and no healthz port: said, not programmed.
	pl = planState(state(cluster), PlanOptions{Network: l2bridge, Features: AllFeatures(), HealthCheckGateway: gw})
	said := 0
	for _, n := range pl.Notices {
		if n.Feature == "HealthCheckVIP" {
			said++
		}
	}
	if got := healthLBs(pl); len(got) != 0 || said != 2 {
		t.Errorf("no port to forward: %v, notices %v", got, pl.Notices)
	}
}

// TestHealthCheckVIPBackend: the backend finds the host endpoint by name,
// creates the health-check load balancers with the Service's, reports them
// as notes (not frontends) to explain, and deletes them with the ingress IP.
func TestHealthCheckVIPBackend(t *testing.T) {
	f := NewFake(l2bridge, AllFeatures())
	f.AddLocalEndpoint("pod", ip("10.244.1.10"))
	rootID := f.AddLocalEndpoint("cbr0", ip("10.244.1.3"))
	b, err := New(f, Config{NetworkName: "cbr0", Ledger: &MemoryLedger{}, ForwardHealthCheckVIP: true, HealthzPort: 10256}, logrus.New())
	if err != nil {
		t.Fatal(err)
	}
	p := lbPort("web-lb", "10.96.0.13", 0, []core.Endpoint{local("10.244.1.10", 8080)}, "172.16.0.10")
	ctx := context.Background()
	if err := b.Sync(ctx, state(p), full()); err != nil {
		t.Fatal(err)
	}
	var health []LoadBalancer
	for _, lb := range f.LoadBalancers() {
		if lb.ExternalPort == 10256 {
			health = append(health, lb)
		}
	}
	if len(health) != 1 || len(health[0].EndpointIDs) != 1 || !strings.EqualFold(health[0].EndpointIDs[0], rootID) || len(f.LoadBalancers()) != 3 {
		t.Fatalf("health-check load balancer %+v (of %d), want one leading to the host endpoint %s", health, len(f.LoadBalancers()), rootID)
	}
	prog, err := b.Programmed(ctx, p.Key.Service)
	if err != nil {
		t.Fatal(err)
	}
	if len(prog.Frontends) != 2 || !strings.Contains(strings.Join(prog.Notes, "\n"), "HealthCheckVIP: TCP 172.16.0.10:10256 forwarded to the host endpoint cbr0") {
		t.Fatalf("Programmed: frontends %v, notes %v", prog.Frontends, prog.Notes)
	}
	// The ingress IP goes: its health-check load balancer goes with it.
	p2 := port("web-lb", "10.96.0.13", []core.Endpoint{local("10.244.1.10", 8080)}, withNodePort(30080))
	if err := b.Sync(ctx, state(p2), partial(p2.Key)); err != nil {
		t.Fatal(err)
	}
	for _, lb := range f.LoadBalancers() {
		if lb.ExternalPort == 10256 || len(f.LoadBalancers()) != 1 {
			t.Fatalf("after the ingress IP went: %v", f.LoadBalancers())
		}
	}
}
