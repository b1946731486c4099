package netnsrun

import (
	"crypto/rand"
	"encoding/hex"
	"os/exec"
	"strings"
	"testing"
)

// Lab is a node as a kubeadm worker with a CNI bridge sees it, in three
// network namespaces: the node, where a proxy runs and programs its rules, a
// client on the node's network and a pod network behind the node.
//
//	cli NET.1.2 ── NET.1.1 node NET.2.1 ── NET.2.2/.3/.4 pods
//
// The node has no default route, so a packet no rule rewrites goes nowhere
// outside the lab. The suites give each their own NET (10.200, 10.201), so
// their labs never share an address.
type Lab struct {
	// ID names the lab's namespaces and the node's two links:
	// ClientLink() and PodLink().
	ID                 string
	prefix             string
	Node, Client, Back string
	// NodeAddr is the node's address on the client network, ClientAddr the
	// client's, PodGateway the node's on the pod network, Pods the pods'.
	NodeAddr, ClientAddr, PodGateway string
	Pods                             []string
}

// Run runs a command and fails the test with its output when it fails.
func Run(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// NewLab creates the namespaces, named prefix-ID-node, -cli and -pod, on
// the network net ("10.201"), and deletes them when the test ends.
func NewLab(t testing.TB, prefix, net string) *Lab {
	t.Helper()
	buf := make([]byte, 3)
	_, _ = rand.Read(buf)
	id := hex.EncodeToString(buf)
	l := &Lab{ID: id, prefix: prefix, Node: prefix + "-" + id + "-node", Client: prefix + "-" + id + "-cli", Back: prefix + "-" + id + "-pod",
		NodeAddr: net + ".1.1", ClientAddr: net + ".1.2", PodGateway: net + ".2.1",
		Pods: []string{net + ".2.2", net + ".2.3", net + ".2.4"}}
	t.Cleanup(func() {
		for _, ns := range []string{l.Client, l.Back, l.Node} {
			_ = exec.Command("ip", "netns", "del", ns).Run()
		}
	})
	for _, ns := range []string{l.Node, l.Client, l.Back} {
		Run(t, "ip", "netns", "add", ns)
		Run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	link := func(peer, nodeIf, nodeIP, peerIP string) {
		Run(t, "ip", "-n", l.Node, "link", "add", nodeIf, "type", "veth", "peer", "name", "eth0", "netns", peer)
		Run(t, "ip", "-n", l.Node, "addr", "add", nodeIP+"/24", "dev", nodeIf)
		Run(t, "ip", "-n", peer, "addr", "add", peerIP+"/24", "dev", "eth0")
		Run(t, "ip", "-n", l.Node, "link", "set", nodeIf, "up")
		Run(t, "ip", "-n", peer, "link", "set", "eth0", "up")
		Run(t, "ip", "-n", peer, "route", "add", "default", "via", nodeIP)
	}
	link(l.Client, l.ClientLink(), l.NodeAddr, l.ClientAddr)
	link(l.Back, l.PodLink(), l.PodGateway, l.Pods[0])
	for _, a := range l.Pods[1:] {
		Run(t, "ip", "-n", l.Back, "addr", "add", a+"/24", "dev", "eth0")
	}
	Run(t, "ip", "netns", "exec", l.Node, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	return l
}

// ClientLink is the node's link to the client network.
func (l *Lab) ClientLink() string { return l.prefix + "c" + l.ID }

// PodLink is the node's link to the pod network.
func (l *Lab) PodLink() string { return l.prefix + "b" + l.ID }

// NetNS is the node namespace's path, for crossproxy --netns and nsenter.
func (l *Lab) NetNS() string { return "/run/netns/" + l.Node }
