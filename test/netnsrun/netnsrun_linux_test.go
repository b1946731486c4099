package netnsrun

import (
	"net"
	"os/exec"
	"testing"

	"github.com/crossproxy/crossproxy/internal/testenv"
)

// TestDoOpensSocketsInTheNamespace binds an address that exists only inside a
// fresh namespace: it works through Do and fails outside it.
func TestDoOpensSocketsInTheNamespace(t *testing.T) {
	testenv.RequireRoot(t, "network namespaces")
	name := "xpn-unit"
	_ = exec.Command("ip", "netns", "del", name).Run()
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	for _, args := range [][]string{
		{"-n", name, "addr", "add", "198.18.77.1/32", "dev", "lo"},
		{"-n", name, "link", "set", "lo", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v %s", args, err, out)
		}
	}
	err := Do(name, func() error {
		ln, err := net.Listen("tcp", "198.18.77.1:0")
		if err != nil {
			return err
		}
		return ln.Close()
	})
	if err != nil {
		t.Fatalf("listen inside the namespace: %v", err)
	}
	if ln, err := net.Listen("tcp", "198.18.77.1:0"); err == nil {
		ln.Close()
		t.Fatal("the address should exist only inside the namespace")
	}
	if err := Do("xpn-does-not-exist", func() error { return nil }); err == nil {
		t.Fatal("a missing namespace must be an error")
	}
}
