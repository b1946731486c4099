//go:build linux

// Command demo is `make demo`: a one-command lab that shows crossproxy
// working. It starts a real kube-apiserver and etcd (test/harness), builds two
// Linux "nodes" in network namespaces in two zones with pods running echo
// servers and an outside client, runs `crossproxy run` for each node, applies
// sample Services (and writes their EndpointSlices, as there is no
// controller-manager), shows what each client reached and with which source
// address, runs `crossproxy explain` on the broken Service, and tears it all
// down (or, with -keep, waits for Ctrl-C first). Each expectation it shows is
// also checked; the exit status is 1 when one fails, so CI can run it.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/crossproxy/crossproxy/platform/debug"
	"github.com/crossproxy/crossproxy/platform/explain"
	"github.com/crossproxy/crossproxy/test/harness"
)

type demo struct {
	crossproxy string
	echo       string
	rbac       string
	mode       string
	keep       bool

	dir        string
	server     *harness.Server
	kubeconfig string
	procs      []*process
	proxies    map[*node]*process
	debugURL   map[*node]string
	started    time.Time

	checks, failed int
}

func main() {
	d := &demo{proxies: map[*node]*process{}, debugURL: map[*node]string{}, started: time.Now()}
	flag.StringVar(&d.crossproxy, "crossproxy", "bin/crossproxy", "the crossproxy binary")
	flag.StringVar(&d.echo, "echo", "bin/xpd-echo", "the echo server/client binary (test/demo/echo)")
	flag.StringVar(&d.rbac, "rbac", "installer/linux/rbac.yaml", "the RBAC manifest the proxies' identity gets")
	flag.StringVar(&d.mode, "mode", "auto", "how the proxies get their objects: kube (--kubeconfig), manifests (--manifests) or auto")
	flag.BoolVar(&d.keep, "keep", os.Getenv("KEEP") == "1", "keep the lab running until Ctrl-C (also KEEP=1)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := d.run(ctx)
	d.teardown(err != nil || d.failed > 0)
	switch {
	case err != nil:
		fmt.Fprintf(os.Stderr, "\ndemo: FAILED: %v\n", err)
		os.Exit(1)
	case d.failed > 0:
		fmt.Printf("\ndemo: %d of %d checks FAILED (%s)\n", d.failed, d.checks, time.Since(d.started).Round(time.Second))
		os.Exit(1)
	default:
		fmt.Printf("\ndemo: all %d checks passed (%s)\n", d.checks, time.Since(d.started).Round(time.Second))
	}
}

func step(format string, args ...any) { fmt.Printf("\n==> "+format+"\n", args...) }
func say(format string, args ...any)  { fmt.Printf("    "+format+"\n", args...) }

// check records and shows one expectation.
func (d *demo) check(ok bool, format string, args ...any) {
	d.checks++
	mark := "ok  "
	if !ok {
		mark = "FAIL"
		d.failed++
	}
	fmt.Printf("    [%s] %s\n", mark, fmt.Sprintf(format, args...))
}

func (d *demo) run(ctx context.Context) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("the lab creates network namespaces: run as root")
	}
	for _, b := range []*string{&d.crossproxy, &d.echo} {
		abs, err := filepath.Abs(*b)
		if err != nil {
			return err
		}
		if _, err := os.Stat(abs); err != nil {
			return fmt.Errorf("binary %s: %w (make demo builds it)", abs, err)
		}
		*b = abs
	}
	if err := d.chooseMode(); err != nil {
		return err
	}
	var err error
	if d.dir, err = os.MkdirTemp("", "xpd-demo-"); err != nil {
		return err
	}
	removeNamespaces() // leftovers of an interrupted run

	step("starting kube-apiserver and etcd (test/harness)")
	t := time.Now()
	d.server, err = harness.Start(harness.Options{ServiceCIDR: serviceCIDR})
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(d.server.AdminConfig())
	if err != nil {
		return err
	}
	if err := applyRBAC(ctx, client, d.rbac); err != nil {
		return err
	}
	d.kubeconfig = filepath.Join(d.dir, "kubeconfig")
	if err := d.server.WriteKubeconfig(d.kubeconfig, harness.CrossproxyUser); err != nil {
		return err
	}
	say("ready at %s in %s", d.server.URL, time.Since(t).Round(100*time.Millisecond))
	say("applied %s; the proxies (and explain) use its ServiceAccount kube-system/crossproxy: %s", d.rbac, d.kubeconfig)

	step("building the lab network (network namespaces %s*)", Prefix)
	if err := buildNetwork(); err != nil {
		return err
	}
	for _, n := range nodes {
		say("node %-11s zone %s  LAN %s, %s  pods %s, %s", n.Name, n.Zone, n.V4, n.V6, n.PodV4, n.PodV6)
	}
	for _, p := range pods {
		role := "echo server on :8080"
		if !p.Serves {
			role = "client"
		}
		say("pod  %-11s on %s  %s, %s  (%s)", p.Name, p.Node.Name, p.V4, p.V6, role)
	}
	say("outside client %sclient  %s, %s", Prefix, clientV4, clientV6)
	for _, p := range pods {
		if !p.Serves {
			continue
		}
		proc, err := start(d.dir, p.Name, inNS(p.Name, d.echo, "serve", "-name", p.Name, "-listen", ":8080")...)
		if err != nil {
			return err
		}
		d.procs = append(d.procs, proc)
	}

	list := samples()
	step("applying Nodes, Services and their EndpointSlices (no controller-manager: the demo writes the slices)")
	if err := d.applyObjects(ctx, list); err != nil {
		return err
	}
	for _, s := range list {
		ips := strings.Join(s.svc.Spec.ClusterIPs, ", ")
		np := ""
		if p := s.svc.Spec.Ports[0].NodePort; p != 0 {
			np = fmt.Sprintf(", nodePort %d", p)
		}
		var names []string
		for _, p := range s.pods {
			names = append(names, p.Name)
		}
		say("%-10s %s%s -> %s", s.svc.Name, ips, np, strings.Join(names, ", "))
		say("           %s", s.what)
	}

	step("starting crossproxy on each node (%s mode), rules written into the node's namespace", d.mode)
	if err := d.startProxies(); err != nil {
		return err
	}
	if err := d.waitProgrammed(ctx, list); err != nil {
		return err
	}

	step("traffic")
	d.traffic()

	step("crossproxy explain on the broken Service")
	d.explainBroken()

	step("explain reads layer 4 from the kernel: a rule deleted behind the proxy's back")
	d.tamper(ctx)

	if d.keep {
		d.printKeep()
		<-ctx.Done()
	}
	return nil
}

// chooseMode picks API-server mode when this crossproxy's run has --kubeconfig.
func (d *demo) chooseMode() error {
	out, _ := exec.Command(d.crossproxy, "run", "--help").CombinedOutput()
	hasKube := strings.Contains(string(out), "--kubeconfig")
	switch d.mode {
	case "auto":
		d.mode = "manifests"
		if hasKube {
			d.mode = "kube"
		}
	case "kube":
		if !hasKube {
			return fmt.Errorf("-mode kube: %s run has no --kubeconfig flag", d.crossproxy)
		}
	case "manifests":
	default:
		return fmt.Errorf("-mode %q: want kube, manifests or auto", d.mode)
	}
	return nil
}

func (d *demo) applyObjects(ctx context.Context, list []*sample) error {
	client, err := kubernetes.NewForConfig(d.server.AdminConfig())
	if err != nil {
		return err
	}
	if err := apply(ctx, client, list); err != nil {
		return err
	}
	if d.mode == "manifests" {
		return writeManifests(d.dir, list)
	}
	return nil
}

// freeLoopbackPort returns a port nothing listens on right now.
func freeLoopbackPort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func (d *demo) startProxies() error {
	help, _ := exec.Command(d.crossproxy, "run", "--help").CombinedOutput()
	for _, n := range nodes {
		addr, err := freeLoopbackPort()
		if err != nil {
			return err
		}
		// Node b's proxy repairs a foreign change no sooner than
		// repairDelay after its last sync (its drift watcher sees the
		// change at once): the tamper step needs that long to look.
		minSync := 200 * time.Millisecond
		if n == nodeB {
			minSync = repairDelay
		}
		args := []string{d.crossproxy, "run", "--hostname-override", n.Name, "--netns", "/run/netns/" + n.Name,
			"--cluster-cidr", clusterCIDR, "--debug-address", addr, "--min-sync-period", minSync.String(), "--sync-period", syncPeriod.String(), "--full-sync-period", syncPeriod.String()}
		if d.mode == "kube" {
			args = append(args, "--kubeconfig", d.kubeconfig)
		} else {
			args = append(args, "--manifests", d.dir+"/objects.yaml")
		}
		// Both proxies share the host's network namespace for their own
		// sockets: give each its own metrics and healthz ports where run has them.
		for _, f := range []string{"--metrics-bind-address", "--healthz-bind-address"} {
			if strings.Contains(string(help), f) {
				a, err := freeLoopbackPort()
				if err != nil {
					return err
				}
				args = append(args, f, a)
			}
		}
		p, err := start(d.dir, "crossproxy-"+n.Name, args...)
		if err != nil {
			return err
		}
		d.proxies[n] = p
		d.procs = append(d.procs, p)
		d.debugURL[n] = "http://" + addr
		say("%s: %s", n.Name, strings.Join(args[1:], " "))
	}
	return nil
}

// waitProgrammed polls both proxies' debug endpoints until every Service
// agrees on all four layers (the broken one: until it is programmed).
func (d *demo) waitProgrammed(ctx context.Context, list []*sample) error {
	step("waiting until both proxies have programmed every Service (asking their debug endpoints)")
	t := time.Now()
	deadline := t.Add(60 * time.Second)
	for {
		pending := ""
		for _, n := range nodes {
			if p := d.proxies[n]; p.exited() {
				return fmt.Errorf("crossproxy on %s exited:\n%s", n.Name, p.tail(20))
			}
			for _, s := range list {
				if why := d.notReady(ctx, n, s); why != "" {
					pending = fmt.Sprintf("%s %s: %s", n.Name, s.svc.Name, why)
					break
				}
			}
			if pending != "" {
				break
			}
		}
		if pending == "" {
			say("all Services programmed on both nodes in %s", time.Since(t).Round(100*time.Millisecond))
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not programmed after 60s: %s\n%s", pending, d.proxies[nodeA].tail(20))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
}

func (d *demo) notReady(ctx context.Context, n *node, s *sample) string {
	rep, err := debug.Fetch(ctx, d.debugURL[n], types.NamespacedName{Namespace: "default", Name: s.svc.Name})
	switch {
	case err != nil:
		return err.Error()
	case !rep.Computed.Available:
		return rep.Computed.Unavailable
	case !rep.Programmed.Available:
		return rep.Programmed.Unavailable
	case s.port != "": // the broken sample: programmed, and the mismatch is in the slices
		if len(rep.Programmed.Frontends) == 0 {
			return "no frontend programmed yet"
		}
		return ""
	case rep.FirstMismatch != nil:
		return rep.FirstMismatch.Message
	}
	return ""
}

// get runs the echo client in a namespace and returns one line per request.
func (d *demo) get(ns, addr string, n int) []string {
	args := inNS(ns, d.echo, "get", addr, "-n", fmt.Sprint(n), "-timeout", "1s")
	say("$ %s", strings.Join(append([]string{"ip", "netns", "exec", ns, "xpd-echo"}, args[5:]...), " "))
	out, err := exec.Command(args[0], args[1:]...).Output()
	if err != nil {
		return []string{"error: " + err.Error()}
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for _, l := range lines {
		say("      %s", l)
	}
	return lines
}

// answers splits "pod saw addr" lines; other lines (timeout, refused) give "".
func answers(lines []string) (pods, seen []string) {
	for _, l := range lines {
		name, addr, ok := strings.Cut(l, " saw ")
		if !ok {
			name, addr = "", ""
		}
		pods, seen = append(pods, name), append(seen, addr)
	}
	return pods, seen
}

func all(list []string, f func(string) bool) bool {
	for _, s := range list {
		if !f(s) {
			return false
		}
	}
	return len(list) > 0
}

func distinct(list []string) []string {
	var out []string
	for _, s := range list {
		if !contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (d *demo) traffic() {
	is := func(want ...string) func(string) bool { return func(s string) bool { return contains(want, s) } }
	client := Prefix + "client"

	fmt.Println("\n  web: ClusterIP from a pod on node a, then NodePort (externalTrafficPolicy Cluster) from outside via node b")
	pods, seen := answers(d.get(cliA.Name, "10.96.0.10:80", 6))
	d.check(all(pods, is(podA1.Name, podB1.Name)), "every request answered by a web pod (%s)", strings.Join(distinct(pods), ", "))
	d.check(all(seen, is(cliA.V4)), "pods saw the client pod's own address %s: no masquerade inside the cluster", cliA.V4)
	pods, seen = answers(d.get(client, nodeB.V4+":30080", 4))
	d.check(all(pods, is(podA1.Name, podB1.Name)), "NodePort on node b answered by web pods on either node")
	d.check(all(seen, func(s string) bool { return s != "" && s != clientV4 }),
		"pods saw a node address (%s), not the outside client %s: externalTrafficPolicy Cluster masquerades", strings.Join(distinct(seen), ", "), clientV4)

	fmt.Println("\n  web-local: NodePort with externalTrafficPolicy Local (its only pod runs on node a)")
	pods, seen = answers(d.get(client, nodeA.V4+":30081", 2))
	d.check(all(pods, is(podA2.Name)) && all(seen, is(clientV4)), "via node a: %s saw the real client address %s", podA2.Name, clientV4)
	lines := d.get(client, nodeB.V4+":30081", 1)
	d.check(all(lines, func(s string) bool { return strings.HasPrefix(s, "timeout") }), "via node b: dropped, node b has no local endpoint")

	fmt.Println("\n  web-dual: one Service, an IPv4 and an IPv6 ClusterIP")
	pods, seen = answers(d.get(cliA.Name, "10.96.0.12:80", 1))
	d.check(all(pods, is(podB2.Name)) && all(seen, is(cliA.V4)), "IPv4 ClusterIP reached %s from %s", podB2.Name, cliA.V4)
	pods, seen = answers(d.get(cliA.Name, "[fd00:10:96::12]:80", 1))
	d.check(all(pods, is(podB2.Name)) && all(seen, is(cliA.V6)), "IPv6 ClusterIP reached %s from %s", podB2.Name, cliA.V6)

	fmt.Println("\n  web-sticky: sessionAffinity ClientIP over four pods")
	pa, _ := answers(d.get(cliA.Name, "10.96.0.13:80", 6))
	pb, _ := answers(d.get(cliB.Name, "10.96.0.13:80", 6))
	d.check(len(distinct(pa)) == 1 && pa[0] != "" && len(distinct(pb)) == 1 && pb[0] != "",
		"each client stayed on one pod (%s: %s, %s: %s)", cliA.Name, strings.Join(distinct(pa), ","), cliB.Name, strings.Join(distinct(pb), ","))

	fmt.Println("\n  web-zonal: trafficDistribution PreferSameZone, one pod per zone, hints in the slices")
	pa, _ = answers(d.get(cliA.Name, "10.96.0.14:80", 6))
	pb, _ = answers(d.get(cliB.Name, "10.96.0.14:80", 6))
	d.check(all(pa, is(podA1.Name)), "client in zone a only reached %s (zone a)", podA1.Name)
	d.check(all(pb, is(podB1.Name)), "client in zone b only reached %s (zone b)", podB1.Name)

	fmt.Println("\n  web-broken: targetPort \"http\" matches no port of its slices")
	lines = d.get(cliA.Name, "10.96.0.15:80", 1)
	d.check(all(lines, is("refused")), "connections are rejected at once (no usable endpoint)")
}

// explainBroken runs crossproxy explain as a person on node a would: objects
// from the API server (or the manifests), rules read back from the node.
func (d *demo) explainBroken() {
	args := []string{"explain", "default/web-broken", "--node", nodeA.Name, "--netns", "/run/netns/" + nodeA.Name,
		"--cluster-cidr", clusterCIDR}
	if d.mode == "kube" {
		args = append(args, "--kubeconfig", d.kubeconfig)
	} else {
		args = append(args, "--manifests", d.dir+"/objects.yaml")
	}
	say("$ crossproxy %s", strings.Join(args, " "))
	cmd := exec.Command(d.crossproxy, args...)
	out, err := cmd.CombinedOutput()
	for _, l := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		say("  %s", l)
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		code = -1
	}
	want := "FIRST MISMATCH (layer 2, published): targetPort http matches no port in slice web-broken-v4"
	d.check(code == 1 && strings.Contains(string(out), want), "explain exits 1 and names the first mismatch (exit %d)", code)
	d.check(strings.Contains(string(out), "4. programmed in nftables") && strings.Contains(string(out), "ClusterIP 10.96.0.15:80/TCP -> empty: reject"),
		"layer 4 read back from node a's nftables: the ClusterIP rejects")

	say("")
	say("the same question to node b's running proxy, for a healthy Service:")
	say("$ crossproxy explain default/web --debug-url %s", d.debugURL[nodeB])
	rep, err := debug.Fetch(context.Background(), d.debugURL[nodeB], types.NamespacedName{Namespace: "default", Name: "web"})
	ok := err == nil && rep.OK()
	if err == nil {
		var b strings.Builder
		_ = rep.WriteText(&b)
		lines := strings.Split(strings.TrimSpace(b.String()), "\n")
		say("  ... %s", lines[len(lines)-1])
	}
	d.check(ok, "node b's proxy reports all four layers agree for web (%v)", errOr(err, rep))
}

// syncID returns the number of the proxy's last successful sync (from the
// debug endpoint's /debug/state header).
func (d *demo) syncID(ctx context.Context, n *node) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, d.debugURL[n]+debug.StatePath, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	return resp.Header.Get("X-Crossproxy-Sync"), nil
}

// waitNextSync returns once the proxy of n has finished another sync.
func (d *demo) waitNextSync(ctx context.Context, n *node) error {
	first, err := d.syncID(ctx, n)
	if err != nil {
		return err
	}
	for deadline := time.Now().Add(2 * syncPeriod); time.Now().Before(deadline); {
		if id, err := d.syncID(ctx, n); err == nil && id != first {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("no sync within %s", 2*syncPeriod)
}

// syncPeriod is the proxies' sync and full-sync period.
const syncPeriod = 10 * time.Second

// repairDelay is node b's --min-sync-period: the drift watcher asks for a
// repair the moment nft deletes the element, and the runner starts it no
// sooner than this after the last sync, which leaves the tamper step time
// to ask explain and to send a request first (about 1.2 s).
const repairDelay = 4 * time.Second

// tamper deletes node b's NodePort frontend of web with the nft CLI, shows
// explain naming it from the kernel's rules and the NodePort not answering,
// then waits for node b's proxy, which saw the foreign change, to put it back.
func (d *demo) tamper(ctx context.Context) {
	// Start right after a sync, so the repair comes repairDelay later, not
	// before explain and the request have looked.
	say("waiting for node b's next periodic full sync, so the change stays in place while we look")
	if err := d.waitNextSync(ctx, nodeB); err != nil {
		d.check(false, "next sync of %s: %v", nodeB.Name, err)
		return
	}
	// The frontend is an element of the main table's gate set
	// (service-frontends-v4) or, for a port with chains of its own, of a
	// shard's frontend map (crossproxy-N frontends-v4): find which in the
	// ruleset.
	key := fmt.Sprintf("%s . tcp . 30080", nodeB.V4)
	ruleset, err := sh(inNS(nodeB.Name, "nft", "list", "ruleset")...)
	table, object := frontendHolding(ruleset, key)
	if err != nil || table == "" {
		d.check(false, "find the set holding %s: %v", key, err)
		return
	}
	elem := "{ " + key + " }"
	args := inNS(nodeB.Name, "nft", "delete", "element", "inet", table, object, elem)
	say("$ %s", strings.Join(args, " "))
	if out, err := sh(args...); err != nil {
		d.check(false, "delete the NodePort element: %v %s", err, out)
		return
	}
	web := types.NamespacedName{Namespace: "default", Name: "web"}
	rep, err := debug.Fetch(ctx, d.debugURL[nodeB], web)
	msg := errOr(err, rep)
	say("$ crossproxy explain default/web --debug-url %s", d.debugURL[nodeB])
	say("  ... %s", msg)
	want := fmt.Sprintf("programmed rules miss 1 frontend that the computed state has: NodePort %s:30080/TCP", nodeB.V4)
	d.check(msg == want, "explain names the missing frontend (layer 4 is read back, not remembered)")
	lines := d.get(Prefix+"client", nodeB.V4+":30080", 1)
	d.check(all(lines, func(s string) bool { return !strings.Contains(s, " saw ") }), "the NodePort on node b no longer answers")

	say("waiting for node b's proxy to repair it (it saw the change; a repair waits --min-sync-period %s after the last sync)", repairDelay)
	t := time.Now()
	for time.Since(t) < 3*syncPeriod && ctx.Err() == nil {
		if rep, err := debug.Fetch(ctx, d.debugURL[nodeB], web); err == nil && rep.OK() {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	rep, err = debug.Fetch(ctx, d.debugURL[nodeB], web)
	d.check(err == nil && rep.OK(), "repaired after %s: %s", time.Since(t).Round(100*time.Millisecond), errOr(err, rep))
	pods, _ := answers(d.get(Prefix+"client", nodeB.V4+":30080", 1))
	d.check(all(pods, func(s string) bool { return s != "" }), "the NodePort on node b answers again")
}

func errOr(err error, rep *explain.Report) string {
	if err != nil {
		return err.Error()
	}
	if rep.FirstMismatch != nil {
		return rep.FirstMismatch.Message
	}
	return "ok"
}

func (d *demo) printKeep() {
	step("the lab keeps running (KEEP=1); press Ctrl-C here to tear it down")
	say("enter a namespace from another shell, for example:")
	say("  ip netns exec %sclient %s get %s:30081", Prefix, d.echo, nodeA.V4)
	say("  ip netns exec %s %s get 10.96.0.14:80 -n 5", cliA.Name, d.echo)
	say("  ip netns exec %s nft list ruleset", nodeA.Name)
	say("  ip netns exec %s conntrack -L", nodeA.Name)
	if d.mode == "kube" {
		say("  %s explain default/web-zonal --kubeconfig %s --node %s --netns /run/netns/%s --cluster-cidr %s",
			d.crossproxy, d.kubeconfig, nodeB.Name, nodeB.Name, clusterCIDR)
	}
	for _, n := range nodes {
		say("  %s explain default/web --debug-url %s   (proxy of %s)", d.crossproxy, d.debugURL[n], n.Name)
	}
	say("logs: %s", d.dir)
}

// teardown stops every process and removes the namespaces, the API server and
// the work directory.
func (d *demo) teardown(keepLogs bool) {
	step("tearing down")
	for i := len(d.procs) - 1; i >= 0; i-- {
		d.procs[i].stop()
	}
	if d.server != nil {
		if err := d.server.Close(); err != nil {
			say("stop API server: %v", err)
		}
	}
	removeNamespaces()
	if left := ownNamespaces(); len(left) > 0 {
		say("namespaces left behind: %s", strings.Join(left, ", "))
	}
	switch {
	case d.dir == "":
	case keepLogs:
		say("logs kept in %s", d.dir)
	default:
		os.RemoveAll(d.dir)
	}
	say("done")
}

// frontendHolding returns the inet table and the frontend set or map (the
// main table's service-frontends-v4, a shard's frontends-v4) whose elements
// in an `nft list ruleset` output contain needle, or "", "".
func frontendHolding(ruleset, needle string) (table, object string) {
	for _, line := range strings.Split(ruleset, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[0] == "table" && f[1] == "inet":
			table, object = f[2], ""
		case len(f) >= 2 && (f[0] == "set" || f[0] == "map"):
			object = f[1]
		case len(f) >= 1 && f[0] == "chain":
			object = ""
		}
		if (object == "service-frontends-v4" || object == "frontends-v4") && strings.Contains(line, needle) {
			return table, object
		}
	}
	return "", ""
}
