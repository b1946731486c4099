package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/crossproxy/crossproxy/platform"
	hns "github.com/crossproxy/crossproxy/platform_windows"
)

// TestAnnotatedSourceVIP: the Node annotation is read by listing the Node
// by name (the RBAC has no get); a Node without it gives "", a missing Node
// an error naming it.
func TestAnnotatedSourceVIP(t *testing.T) {
	client := fake.NewClientset(
		&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "win-1", Annotations: map[string]string{hns.SourceVIPAnnotation: "10.244.1.2"}}},
		&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "win-2"}},
	)
	ctx := context.Background()
	if v, err := annotatedSourceVIP(ctx, client, "win-1"); err != nil || v != "10.244.1.2" {
		t.Fatalf("win-1: %q, %v", v, err)
	}
	if v, err := annotatedSourceVIP(ctx, client, "win-2"); err != nil || v != "" {
		t.Fatalf("win-2: %q, %v", v, err)
	}
	if _, err := annotatedSourceVIP(ctx, client, "win-3"); err == nil {
		t.Fatal("a missing Node gave no error")
	}
}

// TestHNSOptions: the Windows flags given win over the file, the
// health-check VIP's port comes from the healthz address, and the source
// VIP's origin is recorded.
func TestHNSOptions(t *testing.T) {
	path := writeConfig(t, `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
healthzBindAddress: 0.0.0.0:10266
winkernel:
  sourceVip: 10.244.1.2
  rootHnsEndpointName: from-file
`)
	ro, _ := newTestRun(t, "--config", path, "--forward-healthcheck-vip")
	if _, err := ro.kube.apply(ro); err != nil {
		t.Fatal(err)
	}
	b := ro.backend
	if !b.ForwardHealthCheckVIP || b.RootHNSEndpointName != "from-file" || b.HealthzPort != 10266 || b.SourceVIPOrigin != "config file" {
		t.Fatalf("merged %+v", b)
	}
	ro, _ = newTestRun(t, "--config", path, "--source-vip", "10.244.1.3", "--healthz-bind-address", "", "--cni-network", "vxlan0")
	if _, err := ro.kube.apply(ro); err != nil {
		t.Fatal(err)
	}
	if b := ro.backend; b.SourceVIPOrigin != "flag --source-vip" || b.SourceVIP != "10.244.1.3" || b.HealthzPort != 0 || b.CNINetwork != "vxlan0" {
		t.Fatalf("merged %+v", b)
	}
}

// TestNodeCNI: the IPAM comes from the CNI configuration in --cni-conf-dir
// (name, plugin, dataDir, cniVersion), its plugin looked for in CNI_PATH
// then the usual directories; each flag overrides what it names; no
// configuration leaves the network name to the backend.
func TestNodeCNI(t *testing.T) {
	dir := t.TempDir()
	conf := `{"cniVersion": "0.3.1", "name": "overlay0", "plugins": [{"type": "win-overlay", "ipam": {"type": "host-local", "dataDir": "D:\\cni"}}]}`
	if err := os.WriteFile(filepath.Join(dir, "10-overlay.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	cniPath := strings.Join([]string{"/cni/a", "/cni/b"}, string(os.PathListSeparator))
	c, ipam := nodeCNI(platform.BackendConfig{CNIConfDir: dir}, cniPath, log)
	want := hns.CNIIPAM{Plugin: "host-local", BinDirs: append([]string{"/cni/a", "/cni/b"}, hns.CNIBinDirs...), Network: "overlay0", DataDir: `D:\cni`, CNIVersion: "0.3.1"}
	if c == nil || c.Name != "overlay0" || !reflect.DeepEqual(ipam, want) {
		t.Fatalf("from the configuration: %s\n%+v\nwant %+v", c, ipam, want)
	}
	_, ipam = nodeCNI(platform.BackendConfig{CNIConfDir: dir, CNIBinDir: "/bin/x", CNINetwork: "n", CNIDataDir: "/d"}, cniPath, log)
	if ipam.Network != "n" || ipam.DataDir != "/d" || !reflect.DeepEqual(ipam.BinDirs, []string{"/bin/x"}) || ipam.Plugin != "host-local" {
		t.Fatalf("flags override: %+v", ipam)
	}
	c, ipam = nodeCNI(platform.BackendConfig{CNIConfDir: filepath.Join(dir, "missing")}, "", log)
	if c != nil || ipam.Network != "" || !reflect.DeepEqual(ipam.BinDirs, hns.CNIBinDirs) {
		t.Fatalf("no configuration: %s %+v", c, ipam)
	}
}

// TestHostProcessConfigHint: a config missing at its path but present under
// the HostProcess container's mount point (containerd before 1.7) gets an
// error saying the DaemonSet needs containerd 1.7; otherwise the error is
// unchanged.
func TestHostProcessConfigHint(t *testing.T) {
	mount := t.TempDir()
	path := filepath.Join(string(filepath.Separator), "etc", "crossproxy", "config.yaml")
	if err := os.MkdirAll(filepath.Join(mount, "etc", "crossproxy"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mount, "etc", "crossproxy", "config.yaml"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := fmt.Errorf("read config: %w", fs.ErrNotExist)
	err := hostProcessConfigHint(path, mount, missing)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "the DaemonSet needs containerd 1.7 or later") {
		t.Fatalf("config under the mount point: %v", err)
	}
	for name, c := range map[string]struct {
		mount string
		err   error
	}{
		"not in a HostProcess container": {"", missing},
		"not under the mount point":      {t.TempDir(), missing},
		"another error":                  {mount, errors.New("parse YAML: bad")},
	} {
		if got := hostProcessConfigHint(path, c.mount, c.err); got != c.err {
			t.Errorf("%s: %v, want the error unchanged", name, got)
		}
	}
}
