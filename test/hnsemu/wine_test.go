//go:build hnsemu

package hnsemu

// The proof of the emulator's first slice (issue 49): the release
// crossproxy.exe, built as `make release` builds it and unmodified, runs
// under Wine with the computenetwork.dll and vmcompute.dll stand-ins and
// programs the emulated HNS through hcsshim's real hcn path. Run with
// `make test-hnsemu` (test/mk/hnsemu.mk) or
// `go test -tags hnsemu -count=1 -v ./test/hnsemu/`.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	nodeName = "win-1"
	// syncPeriod is crossproxy's --sync-period and --full-sync-period: a
	// full sync, which reads HNS and repairs what is missing, at least this
	// often.
	syncPeriod = 2 * time.Second
)

type env struct {
	t       *testing.T
	root    string
	prefix  string // the emulator's Wine prefix, with the DLL stand-ins
	srv     *Server
	control string
	node    string // the emulated node the DLLs' calls name (HNSEMU_NODE)
}

func setup(t *testing.T) *env {
	t.Helper()
	for _, bin := range []string{"wine", "wineserver", "x86_64-w64-mingw32-gcc"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s not installed (test/setup-host.sh installs it): %v", bin, err)
		}
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, err := exec.Command("bash", filepath.Join(root, "test/hnsemu/dll/build.sh")).Output()
	if err != nil {
		t.Fatalf("dll/build.sh: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	prefix := lines[len(lines)-1]
	t.Logf("DLL stand-ins built and installed in %s in %s", prefix, time.Since(start).Round(time.Millisecond))
	if def := filepath.Join(root, "test/.cache/wine/drive_c/windows/system32/computenetwork.dll"); fileExists(def) {
		t.Fatalf("%s exists: the default test prefix must stay without the stand-ins (TestHCNBackendFailsCleanly)", def)
	}
	srv, err := Start("127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	e := &env{t: t, root: root, prefix: prefix, srv: srv, control: "http://" + srv.ControlAddr, node: nodeName}
	t.Cleanup(func() {
		k := exec.Command("wineserver", "-k")
		k.Env = e.wineEnv()
		_ = k.Run()
	})
	return e
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func (e *env) wineEnv() []string {
	return append(os.Environ(), "WINEPREFIX="+e.prefix, "WINEDEBUG=-all", "WINEARCH=win64",
		"HNSEMU_ADDR="+e.srv.DLLAddr, "HNSEMU_NODE="+e.node)
}

// wine runs a Windows program in the emulator's prefix.
func (e *env) wine(ctx context.Context, exe string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "wine", append([]string{exe}, args...)...)
	cmd.Env = e.wineEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// post calls the control API.
func (e *env) post(path string, req, resp any) {
	e.t.Helper()
	b, _ := json.Marshal(req)
	r, err := http.Post(e.control+path, "application/json", bytes.NewReader(b))
	if err != nil {
		e.t.Fatal(err)
	}
	defer r.Body.Close()
	if r.StatusCode != http.StatusOK {
		var msg map[string]string
		_ = json.NewDecoder(r.Body).Decode(&msg)
		e.t.Fatalf("control API %s: %s: %s", path, r.Status, msg["error"])
	}
	if resp != nil {
		if err := json.NewDecoder(r.Body).Decode(resp); err != nil {
			e.t.Fatal(err)
		}
	}
}

// state reads the node's HNS through the control API.
func (e *env) state() State {
	e.t.Helper()
	r, err := http.Get(e.control + "/v1/state?node=" + e.node)
	if err != nil {
		e.t.Fatal(err)
	}
	defer r.Body.Close()
	var s State
	if err := json.NewDecoder(r.Body).Decode(&s); err != nil {
		e.t.Fatal(err)
	}
	return s
}

func winPath(p string) string { return "Z:" + strings.ReplaceAll(p, "/", `\`) }

// release is crossproxy.exe built once per test process.
var release struct {
	sync.Mutex
	exe string
}

// buildRelease builds crossproxy.exe exactly as the release does (no
// fakehns tag), once per test process.
func (e *env) buildRelease() string {
	e.t.Helper()
	release.Lock()
	defer release.Unlock()
	if release.exe != "" {
		return release.exe
	}
	dir, err := os.MkdirTemp("", "hnsemu-release-")
	if err != nil {
		e.t.Fatal(err)
	}
	exe := filepath.Join(dir, "crossproxy.exe")
	start := time.Now()
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", exe, "./cmd/crossproxy")
	cmd.Dir = e.root
	cmd.Env = append(os.Environ(), "GOOS=windows", "GOARCH=amd64", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		e.t.Fatalf("release build: %v\n%s", err, out)
	}
	e.t.Logf("crossproxy.exe built (GOOS=windows GOARCH=amd64 CGO_ENABLED=0 go build -trimpath -ldflags '-s -w') in %s", time.Since(start).Round(time.Millisecond))
	release.exe = exe
	return exe
}

// proxy is `crossproxy run` under Wine.
type proxy struct {
	e       *env
	cmd     *exec.Cmd
	exited  chan error
	logPath string
	started time.Time
}

// startProxy runs `crossproxy run` in standalone mode on the manifests.
func (e *env) startProxy(exe, work, manifest string, args ...string) *proxy {
	e.t.Helper()
	objects := filepath.Join(work, "objects.yaml")
	if err := os.WriteFile(objects, []byte(manifest), 0o644); err != nil {
		e.t.Fatal(err)
	}
	// A ledger from an earlier run names load balancers of an earlier emulator.
	_ = os.RemoveAll(filepath.Join(e.prefix, "drive_c/ProgramData/crossproxy"))
	p := &proxy{e: e, exited: make(chan error, 1), logPath: filepath.Join(work, "run.log")}
	logFile, err := os.Create(p.logPath)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { logFile.Close() })
	full := append([]string{"run", "--manifests", winPath(objects), "--node", e.node, "--ip-families", "IPv4",
		"--sync-period", syncPeriod.String(), "--full-sync-period", syncPeriod.String(), "--min-sync-period", "100ms",
		"--healthz-bind-address=", "--metrics-bind-address="}, args...)
	p.cmd = e.wine(context.Background(), exe, full...)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	p.started = time.Now()
	if err := p.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	e.t.Cleanup(p.stop)
	t := e.t
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(p.logPath)
			t.Logf("crossproxy run's log:\n%s", b)
		}
	})
	return p
}

// alive fails the test if crossproxy exited.
func (p *proxy) alive() {
	select {
	case err := <-p.exited:
		b, _ := os.ReadFile(p.logPath)
		p.e.t.Fatalf("crossproxy run exited: %v\n%s", err, b)
	default:
	}
}

// stop ends crossproxy (SIGTERM to Wine's process group, then SIGKILL).
func (p *proxy) stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	}
	p.cmd = nil
	if b, _ := os.ReadFile(p.logPath); !strings.Contains(string(b), "rules in sync") {
		p.e.t.Errorf("no sync in crossproxy's log:\n%s", b)
	}
}

// cleanupLeavesCNI runs `crossproxy cleanup` under Wine and checks that
// exactly what the CNI made (cniMade) is left.
func (e *env) cleanupLeavesCNI(exe, network string, cniMade State) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := e.wine(ctx, exe, "cleanup", "--network-name", network).CombinedOutput()
	if err != nil {
		e.t.Fatalf("crossproxy cleanup: %v\n%s", err, out)
	}
	after := e.state()
	if len(after.LoadBalancers) != 0 {
		e.t.Errorf("after cleanup: load balancers %+v remain", after.LoadBalancers)
	}
	ids := func(s State) (nw, ep []string) {
		for _, n := range s.Networks {
			nw = append(nw, n.ID)
		}
		for _, x := range s.Endpoints {
			ep = append(ep, x.ID)
		}
		slices.Sort(nw)
		slices.Sort(ep)
		return nw, ep
	}
	nw0, ep0 := ids(cniMade)
	nw1, ep1 := ids(after)
	if !slices.Equal(nw0, nw1) || !slices.Equal(ep0, ep1) {
		e.t.Errorf("after cleanup: networks %v endpoints %v, want the CNI's %v %v", nw1, ep1, nw0, ep0)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	e.t.Logf("cleanup: %s; HNS calls this node saw (per DLL export): %v", lines[len(lines)-1], after.Calls)
}

const manifests = `apiVersion: v1
kind: Node
metadata:
  name: win-1
  labels: {kubernetes.io/os: windows}
spec:
  podCIDR: 10.244.1.0/24
  podCIDRs: [10.244.1.0/24]
status:
  addresses: [{type: InternalIP, address: 192.168.0.11}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  type: ClusterIP
  clusterIP: 10.96.0.10
  clusterIPs: [10.96.0.10]
  ipFamilies: [IPv4]
  ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-abc
  namespace: default
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- addresses: [10.244.1.5]
  nodeName: win-1
  conditions: {ready: true, serving: true, terminating: false}
- addresses: [10.244.1.6]
  nodeName: win-1
  conditions: {ready: true, serving: true, terminating: false}
`

// clusterIPLB returns the load balancer of 10.96.0.10:80/TCP, if any.
func clusterIPLB(s State) *LoadBalancer {
	for i, lb := range s.LoadBalancers {
		if slices.Contains(lb.FrontendVIPs, "10.96.0.10") && len(lb.PortMappings) == 1 &&
			lb.PortMappings[0].Protocol == 6 && lb.PortMappings[0].ExternalPort == 80 {
			return &s.LoadBalancers[i]
		}
	}
	return nil
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < d {
		if cond() {
			return time.Since(start)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s", d, what)
	return 0
}

// TestReleaseBinaryOnEmulatedHNS: a Windows Server 2022 node whose CNI is
// flannel host-gw (cbr0, L2Bridge, with External and cbr0_ep) and two pods
// win-bridge attached; the release crossproxy.exe in standalone mode
// programs the ClusterIP load balancer with both pods' endpoints, puts it
// back within one sync period after it is deleted behind its back, ends
// with exactly one after an HNS restart that rehydrates it under a new id,
// comes back after two injected HNS failures, and `crossproxy cleanup`
// leaves exactly what the CNI made.
func TestReleaseBinaryOnEmulatedHNS(t *testing.T) {
	e := setup(t)
	work := t.TempDir()
	exe := e.buildRelease()
	e.post("/v1/node", map[string]any{"node": nodeName, "profile": "ws2022", "reset": true}, nil)
	var cbr0 Network
	e.post("/v1/cni/network", CNINetwork{Node: nodeName, Layout: "flannel-host-gw", Subnet: "10.244.1.0/24", NodeIP: "192.168.0.11"}, &cbr0)
	var pods []Endpoint
	for i, ip := range []string{"10.244.1.5", "10.244.1.6"} {
		var ep Endpoint
		e.post("/v1/cni/endpoint", CNIEndpoint{Node: nodeName, Network: "cbr0", Name: fmt.Sprintf("pod-%d_eth0", i), IP: ip}, &ep)
		pods = append(pods, ep)
	}
	cniMade := e.state()
	if len(cniMade.Networks) != 2 || len(cniMade.Endpoints) != 3 {
		t.Fatalf("the CNI's layout: %d networks, %d endpoints; want External and cbr0, cbr0_ep and two pods", len(cniMade.Networks), len(cniMade.Endpoints))
	}
	p := e.startProxy(exe, work, manifests, "--network-name", "cbr0")

	// 1. The ClusterIP load balancer holds both pods' endpoints.
	want := []string{pods[0].ID, pods[1].ID}
	slices.Sort(want)
	var first *LoadBalancer
	waitFor(t, 90*time.Second, "the ClusterIP load balancer with both endpoints", func() bool {
		p.alive()
		first = clusterIPLB(e.state())
		if first == nil {
			return false
		}
		got := slices.Clone(first.HostComputeEndpoints)
		slices.Sort(got)
		return slices.Equal(got, want)
	})
	t.Logf("ClusterIP load balancer %s (10.96.0.10:80 -> 8080, endpoints %v) in HNS %s after the Wine start", first.ID, first.HostComputeEndpoints, time.Since(p.started).Round(time.Millisecond))
	if first.PortMappings[0].InternalPort != 8080 || first.SourceVIP != "" {
		t.Errorf("load balancer %+v: want internal port 8080 and no source VIP (L2Bridge)", *first)
	}

	// 2. Deleted behind its back, it is back within one sync period.
	e.post("/v1/delete", map[string]string{"node": nodeName, "kind": "loadbalancer", "id": first.ID}, nil)
	deleted := time.Now()
	var again *LoadBalancer
	waitFor(t, 30*time.Second, "the deleted load balancer to come back", func() bool {
		again = clusterIPLB(e.state())
		return again != nil
	})
	back := time.Since(deleted)
	t.Logf("load balancer deleted behind crossproxy's back: back as %s after %s (sync period %s)", again.ID, back.Round(time.Millisecond), syncPeriod)
	// One sync period, plus the sync's own time under Wine (tens of ms) and
	// this poll's 50 ms.
	if back > syncPeriod+time.Second {
		t.Errorf("load balancer back after %s: more than one sync period (%s)", back, syncPeriod)
	}
	got := slices.Clone(again.HostComputeEndpoints)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("recreated load balancer's endpoints %v, want %v", got, want)
	}

	// 3. HNS restarts (ws2022: the load balancers come back under new ids,
	// kubernetes #139519; handles die). crossproxy ends with exactly one
	// load balancer on the frontend, with both endpoints, and keeps it as
	// its own (cleanup below removes it).
	e.post("/v1/restart", map[string]string{"node": nodeName}, nil)
	restarted := time.Now()
	rehydrated := clusterIPLB(e.state())
	if rehydrated == nil || rehydrated.ID == again.ID {
		t.Fatalf("the emulator's restart did not rehydrate the load balancer under a new id: %+v", rehydrated)
	}
	callsBefore := e.state().Calls["HcnEnumerateLoadBalancers"]
	waitFor(t, 30*time.Second, "two full syncs after the HNS restart", func() bool {
		return e.state().Calls["HcnEnumerateLoadBalancers"] >= callsBefore+2
	})
	s := e.state()
	n := 0
	for _, lb := range s.LoadBalancers {
		if slices.Contains(lb.FrontendVIPs, "10.96.0.10") {
			n++
		}
	}
	if lb := clusterIPLB(s); n != 1 || lb == nil {
		t.Errorf("after the HNS restart: %d load balancers on 10.96.0.10:80, want 1: %+v", n, s.LoadBalancers)
	} else {
		got := slices.Clone(lb.HostComputeEndpoints)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("after the HNS restart: endpoints %v, want %v", got, want)
		}
		t.Logf("HNS restart: load balancer rehydrated as %s; %s later crossproxy holds %s (creates %d, deletes %d so far)",
			rehydrated.ID, time.Since(restarted).Round(time.Millisecond), lb.ID, s.Calls["HcnCreateLoadBalancer"], s.Calls["HcnDeleteLoadBalancer"])
	}

	// 4. HNS fails: the next two load balancer creates answer
	// HCN_E_MANAGER_STOPPED (0x803b0020) after the load balancer is deleted
	// behind crossproxy's back. crossproxy stays up and the load balancer is
	// back once HNS answers again, within three sync periods.
	cur := clusterIPLB(e.state())
	e.post("/v1/fail", map[string]any{"node": e.node, "count": 2, "hresult": 0x803b0020, "function": "HcnCreateLoadBalancer"}, nil)
	e.post("/v1/delete", map[string]string{"node": e.node, "kind": "loadbalancer", "id": cur.ID}, nil)
	failedAt := time.Now()
	failedBefore := e.state().Calls["HcnCreateLoadBalancer"]
	waitFor(t, 30*time.Second, "the load balancer back after two failed creates", func() bool {
		p.alive()
		return clusterIPLB(e.state()) != nil
	})
	back = time.Since(failedAt)
	creates := e.state().Calls["HcnCreateLoadBalancer"] - failedBefore
	t.Logf("two creates failed with HCN_E_MANAGER_STOPPED: back after %s and %d create calls", back.Round(time.Millisecond), creates)
	if creates < 3 {
		t.Errorf("load balancer back after %d create calls, want at least 3 (two failed)", creates)
	}
	if back > 3*syncPeriod+time.Second {
		t.Errorf("load balancer back after %s, more than three sync periods", back)
	}
	p.stop()
	if b, _ := os.ReadFile(p.logPath); !strings.Contains(string(b), "0x803b0020") {
		t.Errorf("crossproxy's log does not report HNS' failure 0x803b0020:\n%s", b)
	}

	// 5. crossproxy cleanup leaves only what the CNI made.
	e.cleanupLeavesCNI(exe, "cbr0", cniMade)
}

// hostAddress is HostAddress, or a skip.
func hostAddress(t *testing.T) (string, string) {
	ip, mac, ok := HostAddress()
	if !ok {
		t.Skip("no host interface with an IPv4 address and a MAC for the overlay node's address")
	}
	return ip, mac
}

const overlayManifests = `apiVersion: v1
kind: Node
metadata:
  name: win-2
  labels: {kubernetes.io/os: windows}
spec:
  podCIDR: 10.244.1.0/24
  podCIDRs: [10.244.1.0/24]
status:
  addresses: [{type: InternalIP, address: NODEIP}]
---
apiVersion: v1
kind: Node
metadata:
  name: lin-1
  labels: {kubernetes.io/os: linux}
spec:
  podCIDR: 10.244.2.0/24
  podCIDRs: [10.244.2.0/24]
status:
  addresses: [{type: InternalIP, address: 192.168.0.12}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  type: NodePort
  clusterIP: 10.96.0.10
  clusterIPs: [10.96.0.10]
  ipFamilies: [IPv4]
  ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP, nodePort: 30080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-abc
  namespace: default
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- addresses: [10.244.1.5]
  nodeName: win-2
  conditions: {ready: true, serving: true, terminating: false}
- addresses: [10.244.2.7]
  nodeName: lin-1
  conditions: {ready: true, serving: true, terminating: false}
`

func endpointNamed(s State, name string) *Endpoint {
	for i, ep := range s.Endpoints {
		if ep.Name == name {
			return &s.Endpoints[i]
		}
	}
	return nil
}

// TestReleaseBinaryOverlay: a second emulated node, win-2, on Windows Server
// 2019, 2022 and 2025 (HNS 15.5: modify in place), with
// sig-windows-tools' flannel VXLAN layout (External, flannel.4096 with a
// RemoteSubnetRoute to the Linux node lin-1's pods) and one local pod; a
// NodePort Service with a local and a remote endpoint. The release
// crossproxy.exe (source VIP given by --source-vip: host-local is not run
// here) creates the source VIP endpoint and the remote endpoint with its
// provider address, and the ClusterIP and NodePort load balancers with the
// source VIP; a remote endpoint, the source VIP endpoint and a load balancer
// deleted behind its back are back within one sync period; so is everything
// after an HNS restart, with no duplicate; cleanup leaves what flannel made.
func TestReleaseBinaryOverlay(t *testing.T) {
	for _, profile := range []string{"ws2019", "ws2022", "ws2025-15.5"} {
		t.Run(profile, func(t *testing.T) { testOverlay(t, profile) })
	}
}

func testOverlay(t *testing.T, profile string) {
	e := setup(t)
	e.node = "win-2"
	nodeIP, mac := hostAddress(t)
	exe := e.buildRelease()
	e.post("/v1/node", map[string]any{"node": e.node, "profile": profile, "reset": true}, nil)
	e.post("/v1/cni/network", CNINetwork{Node: e.node, Layout: "flannel-vxlan", Subnet: "10.244.1.0/24", NodeIP: nodeIP,
		RemoteSubnets: []RemoteSubnet{{Prefix: "10.244.2.0/24", ProviderAddress: "192.168.0.12"}}}, nil)
	var pod Endpoint
	e.post("/v1/cni/endpoint", CNIEndpoint{Node: e.node, Network: "flannel.4096", Name: "pod-a_eth0", IP: "10.244.1.5"}, &pod)
	cniMade := e.state()
	p := e.startProxy(exe, t.TempDir(), strings.Replace(overlayManifests, "NODEIP", nodeIP, 1),
		"--network-name", "flannel.4096", "--source-vip", "10.244.1.2")

	var remote, svip *Endpoint
	var cip, np *LoadBalancer
	programmed := func() bool {
		p.alive()
		s := e.state()
		remote, svip = endpointNamed(s, "crossproxy-remote-10.244.2.7"), endpointNamed(s, "crossproxy-source-vip")
		cip, np = clusterIPLB(s), nil
		for i, lb := range s.LoadBalancers {
			if len(lb.PortMappings) == 1 && lb.PortMappings[0].ExternalPort == 30080 {
				np = &s.LoadBalancers[i]
			}
		}
		if remote == nil || svip == nil || cip == nil || np == nil {
			return false
		}
		want := []string{pod.ID, remote.ID}
		slices.Sort(want)
		for _, lb := range []*LoadBalancer{cip, np} {
			got := slices.Clone(lb.HostComputeEndpoints)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				return false
			}
		}
		return true
	}
	waitFor(t, 90*time.Second, "the source VIP endpoint, the remote endpoint and both load balancers", programmed)
	t.Logf("programmed %s after the Wine start: source VIP endpoint %s (MAC %s), remote endpoint %s, ClusterIP LB %s, NodePort LB %s",
		time.Since(p.started).Round(time.Millisecond), svip.ID, svip.MacAddress, remote.ID, cip.ID, np.ID)
	if remote.Flags&endpointFlagRemote == 0 || len(remote.Policies) != 1 || remote.Policies[0].Type != "ProviderAddress" ||
		!strings.Contains(string(remote.Policies[0].Settings), `"192.168.0.12"`) {
		t.Errorf("remote endpoint %+v: want flag remote and the ProviderAddress policy 192.168.0.12 (flannel's RemoteSubnetRoute)", *remote)
	}
	if svip.Flags&endpointFlagRemote != 0 || svip.IpConfigurations[0].IpAddress != "10.244.1.2" || !strings.EqualFold(strings.ReplaceAll(svip.MacAddress, "-", ":"), mac) {
		t.Errorf("source VIP endpoint %+v: want a local endpoint at 10.244.1.2 with the host's MAC %s", *svip, mac)
	}
	if cip.SourceVIP != "10.244.1.2" || np.SourceVIP != "10.244.1.2" || len(np.FrontendVIPs) != 0 || np.PortMappings[0].Flags != 2|16 {
		t.Errorf("load balancers %+v / %+v: want source VIP 10.244.1.2 on both, the NodePort without VIP and with LocalRoutedVIP|VipExternalIP", *cip, *np)
	}

	// Each deleted behind crossproxy's back is back within one sync period.
	// (A deleted endpoint makes crossproxy rebuild the load balancers that
	// used it: new ids, so each victim is looked up when its turn comes.)
	for _, victim := range []struct {
		what, kind string
		id         func() string
	}{
		{"remote endpoint", "endpoint", func() string { return remote.ID }},
		{"source VIP endpoint", "endpoint", func() string { return svip.ID }},
		{"NodePort load balancer", "loadbalancer", func() string { return np.ID }},
	} {
		e.post("/v1/delete", map[string]string{"node": e.node, "kind": victim.kind, "id": victim.id()}, nil)
		deleted := time.Now()
		waitFor(t, 30*time.Second, victim.what+" back and the load balancers whole again", programmed)
		back := time.Since(deleted)
		t.Logf("%s deleted behind crossproxy's back: all back after %s (sync period %s)", victim.what, back.Round(time.Millisecond), syncPeriod)
		if back > syncPeriod+time.Second {
			t.Errorf("%s back after %s: more than one sync period (%s)", victim.what, back, syncPeriod)
		}
	}

	// HNS restarts: ws2019 loses the load balancers and every endpoint no
	// CNI made (remote, source VIP), later releases rehydrate the load
	// balancers under new ids. Either way crossproxy ends with everything
	// back and no second load balancer on a frontend.
	before := e.state()
	e.post("/v1/restart", map[string]string{"node": e.node}, nil)
	restarted := time.Now()
	waitFor(t, 30*time.Second, "everything back after the HNS restart", programmed)
	t.Logf("HNS restart (%s): everything back after %s", profile, time.Since(restarted).Round(time.Millisecond))
	enumerations := e.state().Calls["HcnEnumerateLoadBalancers"]
	waitFor(t, 30*time.Second, "two more full syncs", func() bool {
		return e.state().Calls["HcnEnumerateLoadBalancers"] >= enumerations+2
	})
	after := e.state()
	if !programmed() || len(after.LoadBalancers) != 2 || len(after.Endpoints) != len(before.Endpoints) {
		t.Errorf("after the HNS restart and two full syncs: %d load balancers, %d endpoints; want 2 and %d: %+v",
			len(after.LoadBalancers), len(after.Endpoints), len(before.Endpoints), after)
	}
	t.Logf("%s: DLL calls during the run: creates LB %d, modifies LB %d, deletes LB %d, creates endpoint %d, deletes endpoint %d",
		profile, after.Calls["HcnCreateLoadBalancer"], after.Calls["HcnModifyLoadBalancer"], after.Calls["HcnDeleteLoadBalancer"],
		after.Calls["HcnCreateEndpoint"], after.Calls["HcnDeleteEndpoint"])

	p.stop()
	e.cleanupLeavesCNI(exe, "flannel.4096", cniMade)
}

// TestHCNProbe runs hcsshim's own functions (test/hnsemu/probe) through the
// stand-ins on each release profile: the HNS version hcn reads, and how hcn's
// error predicates classify the emulator's HRESULTs.
func TestHCNProbe(t *testing.T) {
	e := setup(t)
	work := t.TempDir()
	exe := filepath.Join(work, "probe.exe")
	cmd := exec.Command("go", "build", "-o", exe, "./test/hnsemu/probe")
	cmd.Dir = e.root
	cmd.Env = append(os.Environ(), "GOOS=windows", "GOARCH=amd64", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("probe build: %v\n%s", err, out)
	}
	for _, p := range []struct {
		profile, version string
		modify           bool
	}{{"ws2019", "10.2", false}, {"ws2022", "13.2", false}, {"ws2025", "15.4", true}} {
		t.Run(p.profile, func(t *testing.T) {
			e.t = t
			e.post("/v1/node", map[string]any{"node": nodeName, "profile": p.profile, "reset": true}, nil)
			e.post("/v1/cni/network", CNINetwork{Node: nodeName, Layout: "flannel-host-gw", Subnet: "10.244.1.0/24"}, nil)
			e.post("/v1/cni/endpoint", CNIEndpoint{Node: nodeName, Network: "cbr0", Name: "pod", IP: "10.244.1.5"}, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			out, err := e.wine(ctx, exe, "cbr0").Output()
			if err != nil {
				t.Fatalf("probe: %v\n%s", err, out)
			}
			res := map[string]map[string]any{}
			for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				var m map[string]any
				if json.Unmarshal([]byte(l), &m) == nil {
					res[m["call"].(string)] = m
				}
			}
			check := func(call, key string, want any) {
				t.Helper()
				if got := res[call][key]; got != want {
					t.Errorf("%s: %s = %v, want %v (%v)", call, key, got, want, res[call])
				}
			}
			if v, _ := json.Marshal(res["GetGlobals"]["result"]); !strings.Contains(string(v), fmt.Sprintf(`{"Major":%s,"Minor":%s}`, strings.Split(p.version, ".")[0], strings.Split(p.version, ".")[1])) {
				t.Errorf("GetGlobals: %s, want %s", v, p.version)
			}
			check("GetNetworkByName", "ok", true)
			check("GetNetworkByName(missing)", "notFound", true)
			check("CreateLoadBalancer", "ok", true)
			check("CreateLoadBalancer(identical)", "alreadyExists", true)
			check("CreateLoadBalancer(same frontend)", "portAlreadyExists", true)
			check("CreateLoadBalancer(unknown endpoint)", "ok", false)
			check("UpdateLoadBalancer", "ok", p.modify)
			if !p.modify {
				check("UpdateLoadBalancer", "notImplemented", true)
			}
			check("DeleteLoadBalancer", "ok", true)
			check("DeleteLoadBalancer(again)", "elementNotFound", true)
			check("DeleteEndpoint(missing)", "ok", false)
			check("V1 GetHNSEndpointByName", "ok", true) // cbr0_ep, made through V1
			check("V1 GetHNSEndpointByName(missing)", "ok", false)
			if t.Failed() {
				t.Logf("probe output:\n%s", out)
			}
		})
	}
}
