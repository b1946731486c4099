package health

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/internal/testenv"
	"github.com/crossproxy/crossproxy/test/netnsrun"
)

// TestNodePortsListenOnlyOnNodePortAddresses: in a namespace of its own with
// two addresses (loopback aliases), a health-check node port answers on the NodePort address and
// refuses connections on the other one, as kube-proxy binds only the
// nodePortAddresses; when the NodePort addresses change, the port moves.
func TestNodePortsListenOnlyOnNodePortAddresses(t *testing.T) {
	testenv.RequireRoot(t, "network namespaces")
	ns := fmt.Sprintf("xph-%d", os.Getpid())
	_ = exec.Command("ip", "netns", "del", ns).Run()
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	nodeAddr, otherAddr := netip.MustParseAddr("198.18.90.1"), netip.MustParseAddr("198.18.90.2")
	for _, args := range [][]string{
		{"-n", ns, "addr", "add", nodeAddr.String() + "/32", "dev", "lo"},
		{"-n", ns, "addr", "add", otherAddr.String() + "/32", "dev", "lo"},
		{"-n", ns, "link", "set", "lo", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v %s", args, err, out)
		}
	}
	const port = 32100
	state := func(npa netip.Addr) *core.NodeState {
		return &core.NodeState{
			Families:          []v1.IPFamily{v1.IPv4Protocol},
			NodePortAddresses: map[v1.IPFamily][]netip.Addr{v1.IPv4Protocol: {npa}},
			HealthChecks:      []core.HealthCheck{{Service: types.NamespacedName{Namespace: "ns", Name: "web"}, NodePort: port, LocalEndpoints: 1}},
		}
	}
	n := &NodePorts{}
	t.Cleanup(n.Close)
	check := func(answers, refuses netip.Addr) {
		t.Helper()
		err := netnsrun.Do(ns, func() error {
			if err := n.SyncState(state(answers)); err != nil {
				return err
			}
			// Dial here, on the namespace's thread: http.Client would dial
			// from another goroutine, outside the namespace.
			status, err := getOnThisThread(net.JoinHostPort(answers.String(), strconv.Itoa(port)))
			if err != nil {
				return fmt.Errorf("NodePort address %s: %w", answers, err)
			}
			if status != http.StatusOK {
				return fmt.Errorf("NodePort address %s: status %d", answers, status)
			}
			c, err := net.DialTimeout("tcp", net.JoinHostPort(refuses.String(), strconv.Itoa(port)), 5*time.Second)
			if err == nil {
				c.Close()
				return fmt.Errorf("health-check node port %d answers on %s, which is not a NodePort address", port, refuses)
			}
			if !errors.Is(err, syscall.ECONNREFUSED) {
				return fmt.Errorf("dial %s: %w, want connection refused", refuses, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	check(nodeAddr, otherAddr)
	check(otherAddr, nodeAddr) // the NodePort address changed: the port moved with it
}

// getOnThisThread sends one GET to addr over a connection dialled on the calling thread.
func getOnThisThread(addr string) (int, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
	if err != nil {
		return 0, err
	}
	if err := req.Write(c); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}
