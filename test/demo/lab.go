//go:build linux

package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Prefix names every network namespace and link the demo creates, so
// teardown (and a later run after a crash) can find exactly its own.
const Prefix = "xpd-"

// The lab's addresses. The LAN joins the two nodes and the outside client;
// each node routes its pod CIDR to per-pod veths (no pod bridge, so traffic
// between two pods of one node still crosses the node's IP layer).
const (
	lanV4Prefix = "192.168.77."
	lanV6Prefix = "fd77::"
	clusterCIDR = "10.244.0.0/16,fd00:10:244::/56"
	serviceCIDR = "10.96.0.0/16,fd00:10:96::/112"
	clientV4    = "192.168.77.100"
	clientV6    = "fd77::100"
)

// node is one lab node: a network namespace standing in for a host.
type node struct {
	Name string // also the Node object and namespace name
	Zone string
	V4   string // LAN addresses
	V6   string
	// PodV4 and PodV6 are the pod CIDRs; the gateway is .1 / ::1 of each.
	PodV4, PodV6 string
	podNet       int // 1 or 2: the third octet of the pod CIDR
}

func (n *node) gw4() string { return fmt.Sprintf("10.244.%d.1", n.podNet) }
func (n *node) gw6() string { return fmt.Sprintf("fd00:10:244:%d::1", n.podNet) }

// pod is a network namespace behind a node with one echo server or client.
type pod struct {
	Name   string // namespace name and the name the echo server answers with
	Node   *node
	V4, V6 string
	Serves bool // runs an echo server on :8080
}

var (
	nodeA = &node{Name: "xpd-node-a", Zone: "a", V4: lanV4Prefix + "11", V6: lanV6Prefix + "11",
		PodV4: "10.244.1.0/24", PodV6: "fd00:10:244:1::/64", podNet: 1}
	nodeB = &node{Name: "xpd-node-b", Zone: "b", V4: lanV4Prefix + "12", V6: lanV6Prefix + "12",
		PodV4: "10.244.2.0/24", PodV6: "fd00:10:244:2::/64", podNet: 2}
	nodes = []*node{nodeA, nodeB}

	podA1 = newPod("xpd-pod-a1", nodeA, 11, true)
	podA2 = newPod("xpd-pod-a2", nodeA, 12, true)
	podB1 = newPod("xpd-pod-b1", nodeB, 11, true)
	podB2 = newPod("xpd-pod-b2", nodeB, 12, true)
	cliA  = newPod("xpd-cli-a", nodeA, 100, false)
	cliB  = newPod("xpd-cli-b", nodeB, 100, false)
	pods  = []*pod{podA1, podA2, podB1, podB2, cliA, cliB}
)

func newPod(name string, n *node, host int, serves bool) *pod {
	return &pod{Name: name, Node: n, Serves: serves,
		V4: fmt.Sprintf("10.244.%d.%d", n.podNet, host), V6: fmt.Sprintf("fd00:10:244:%d::%d", n.podNet, host)}
}

// sh runs one command and returns its combined output, failing with both.
func sh(args ...string) (string, error) {
	cmd := exec.Command(args[0], args[1:]...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// script runs commands in order and stops at the first failure.
func script(cmds [][]string) error {
	for _, c := range cmds {
		if _, err := sh(c...); err != nil {
			return err
		}
	}
	return nil
}

// noDAD turns off IPv6 duplicate address detection in a namespace, so new
// links (and their link-local addresses) work at once instead of after ~2 s.
func noDAD(ns string) []string {
	return sysctl(ns, "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0")
}

// sysctl sets net.* keys inside a namespace by writing /proc/sys (which shows
// the namespace of the writing process), so the lab needs no procps.
func sysctl(ns string, kvs ...string) []string {
	var sets []string
	for _, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		sets = append(sets, fmt.Sprintf("echo %s > /proc/sys/%s", v, strings.ReplaceAll(k, ".", "/")))
	}
	return inNS(ns, "sh", "-c", strings.Join(sets, " && "))
}

func inNS(ns string, args ...string) []string {
	return append([]string{"ip", "netns", "exec", ns}, args...)
}

// labNamespaces are the names of every namespace the lab creates.
func labNamespaces() []string {
	names := []string{Prefix + "lan", Prefix + "client"}
	for _, n := range nodes {
		names = append(names, n.Name)
	}
	for _, p := range pods {
		names = append(names, p.Name)
	}
	return names
}

// ownNamespaces lists the lab's network namespaces that exist now.
func ownNamespaces() []string {
	out, _ := sh("ip", "netns", "list")
	var list []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && slices.Contains(labNamespaces(), f[0]) {
			list = append(list, f[0])
		}
	}
	return list
}

// removeNamespaces deletes every namespace the demo (or an earlier, crashed
// run) created. Links inside die with their namespace.
func removeNamespaces() {
	for _, ns := range ownNamespaces() {
		_, _ = sh("ip", "netns", "del", ns)
	}
}

// buildNetwork creates the LAN, the nodes, the pods and the outside client.
func buildNetwork() error {
	lan := Prefix + "lan"
	cmds := [][]string{
		{"ip", "netns", "add", lan},
		noDAD(lan),
		inNS(lan, "ip", "link", "add", "br0", "type", "bridge"),
		inNS(lan, "ip", "link", "set", "br0", "up"),
		inNS(lan, "ip", "link", "set", "lo", "up"),
	}
	attach := func(ns, short, v4, v6 string) {
		cmds = append(cmds,
			[]string{"ip", "netns", "add", ns},
			noDAD(ns),
			[]string{"ip", "-n", lan, "link", "add", "l-" + short, "type", "veth", "peer", "name", "eth0", "netns", ns},
			inNS(lan, "ip", "link", "set", "l-"+short, "master", "br0", "up"),
			inNS(ns, "ip", "link", "set", "lo", "up"),
			inNS(ns, "ip", "link", "set", "eth0", "up"),
			inNS(ns, "ip", "addr", "add", v4+"/24", "dev", "eth0"),
			inNS(ns, "ip", "addr", "add", v6+"/64", "dev", "eth0", "nodad"),
		)
	}
	for _, n := range nodes {
		attach(n.Name, n.Zone, n.V4, n.V6)
		cmds = append(cmds,
			sysctl(n.Name, "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1",
				"net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0"))
	}
	attach(Prefix+"client", "client", clientV4, clientV6)
	// Each node reaches the other node's pods through the other node.
	for _, n := range nodes {
		for _, o := range nodes {
			if o != n {
				cmds = append(cmds,
					inNS(n.Name, "ip", "route", "add", o.PodV4, "via", o.V4),
					inNS(n.Name, "ip", "-6", "route", "add", o.PodV6, "via", o.V6))
			}
		}
	}
	for _, p := range pods {
		host := "v-" + strings.TrimPrefix(p.Name, Prefix)
		n := p.Node.Name
		cmds = append(cmds,
			[]string{"ip", "netns", "add", p.Name},
			noDAD(p.Name),
			[]string{"ip", "-n", n, "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", p.Name},
			inNS(n, "ip", "link", "set", host, "up"),
			inNS(n, "ip", "addr", "add", p.Node.gw4()+"/32", "dev", host),
			inNS(n, "ip", "addr", "add", p.Node.gw6()+"/128", "dev", host, "nodad"),
			inNS(n, "ip", "route", "add", p.V4+"/32", "dev", host),
			inNS(n, "ip", "-6", "route", "add", p.V6+"/128", "dev", host),
			inNS(p.Name, "ip", "link", "set", "lo", "up"),
			inNS(p.Name, "ip", "link", "set", "eth0", "up"),
			inNS(p.Name, "ip", "addr", "add", p.V4+"/32", "dev", "eth0"),
			inNS(p.Name, "ip", "addr", "add", p.V6+"/128", "dev", "eth0", "nodad"),
			inNS(p.Name, "ip", "route", "add", p.Node.gw4(), "dev", "eth0"),
			inNS(p.Name, "ip", "route", "add", "default", "via", p.Node.gw4()),
			inNS(p.Name, "ip", "-6", "route", "add", p.Node.gw6(), "dev", "eth0"),
			inNS(p.Name, "ip", "-6", "route", "add", "default", "via", p.Node.gw6()),
		)
	}
	return script(cmds)
}

// process is a child the demo started; it dies with the demo (Pdeathsig).
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// start runs args with output to logDir/name.log.
func start(logDir, name string, args ...string) (*process, error) {
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process group, then SIGKILL after a grace period.
func (p *process) stop() {
	if p.exited() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(3 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// tail returns the last lines of the process log.
func (p *process) tail(n int) string {
	data, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
