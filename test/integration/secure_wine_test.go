//go:build integration && linux

package integration

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crossproxy/crossproxy/test/harness"
)

// TestSecureEndpointOfTheWindowsBinaryUnderWine runs the Windows binary
// (built with -tags fakehns: the HNS it programs is the in-memory fake, an
// L2Bridge network as on a flannel host-gw or Calico VXLAN-less Windows
// node) under Wine against the real API server, as a Windows node's proxy
// with the shipped RBAC, and reads it as an operator does from Linux:
// `crossproxy status` shows the Windows node healthy with its HNS backend,
// and `explain --node` gets its programmed layer through the API server.
func TestSecureEndpointOfTheWindowsBinaryUnderWine(t *testing.T) {
	wine, err := filepath.Abs("../wine/wine-exec")
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(t.TempDir(), "crossproxy.exe")
	build := exec.Command("go", "build", "-tags", "fakehns", "-o", exe, "github.com/crossproxy/crossproxy/cmd/crossproxy")
	build.Env = append(os.Environ(), "GOOS=windows", "GOARCH=amd64", "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the Windows binary: %v\n%s", err, out)
	}
	e := newEnv(t)
	applyShippedRBAC(t, e)
	n, err := e.admin.CoreV1().Nodes().Get(e.ctx, e.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Labels["kubernetes.io/os"] = "windows"
	if _, err := e.admin.CoreV1().Nodes().Update(e.ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	kc, err := e.api.Kubeconfig(harness.CrossproxyUser)
	if err != nil {
		t.Fatal(err)
	}
	hostIP := hostAddress(t)
	secure := net.JoinHostPort(hostIP, strconv.Itoa(freePort(t, hostIP)))
	// The test build's fake HNS, with the network --network-name names
	// (Wine hands the environment to the Windows process).
	t.Setenv("CROSSPROXY_FAKE_HNS_NETWORK", "cbr0")
	// Wine maps the Linux root to drive Z:.
	winPath := "Z:" + strings.ReplaceAll(kc, "/", `\`)
	startProcess(e, "crossproxy-windows", wine, exe, "run",
		"--kubeconfig", winPath,
		"--hostname-override", e.node,
		"--network-name", "cbr0",
		"--ip-families", "IPv4",
		"--min-sync-period", "100ms",
		"--healthz-bind-address", freeAddr(t),
		"--metrics-bind-address", freeAddr(t),
		"--secure-address", secure,
	)
	web := e.service("web")
	// The backend runs on another node: a remote endpoint, which the proxy
	// creates in HNS itself (a local one is the CNI's to create).
	slice := e.endpointSlice("web", "web-1", backendAddrs[0])
	other := "win-2"
	slice.Endpoints[0].NodeName = &other
	e.createSlice(slice)
	e.proxyPod("crossproxy-windows-x1", hostIP, secure)
	admin, err := e.api.Kubeconfig(harness.AdminUser)
	if err != nil {
		t.Fatal(err)
	}
	rows := waitStatus(t, admin, 60*time.Second)
	st := rows[0].Status
	if st.OS != "windows" || st.Backend != "kernelspace" || !rows[0].Healthy {
		t.Errorf("status of the Windows node: %+v", st)
	}
	table, _ := cli(t, "status", "--kubeconfig", admin)
	t.Logf("crossproxy status of the Windows node:\n%s", table)
	svc := types.NamespacedName{Namespace: web.Namespace, Name: web.Name}
	out, code := cli(t, "explain", svc.String(), "--node", e.node, "--kubeconfig", admin)
	if code != 0 || !strings.Contains(out, backendAddrs[0]) || !strings.Contains(out, "hns") {
		t.Errorf("explain --node of the Windows node: exit %d, want 0 with the HNS load balancer to %s:\n%s", code, backendAddrs[0], out)
	}
	t.Logf("crossproxy explain --node %s (Windows, fake HNS):\n%s", e.node, out)
}
