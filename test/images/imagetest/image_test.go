//go:build image

package imagetest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"debug/elf"
	"debug/pe"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func env(t *testing.T, k string) string {
	t.Helper()
	v := os.Getenv(k)
	if v == "" {
		t.Fatalf("%s is not set: run this through make test-image", k)
	}
	return v
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations"`
	Platform    *struct {
		Architecture string `json:"architecture"`
		OS           string `json:"os"`
		OSVersion    string `json:"os.version"`
	} `json:"platform"`
}

type index struct {
	MediaType string       `json:"mediaType"`
	Manifests []descriptor `json:"manifests"`
}

type manifest struct {
	Config descriptor   `json:"config"`
	Layers []descriptor `json:"layers"`
}

type config struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Config       struct {
		Entrypoint []string `json:"Entrypoint"`
	} `json:"config"`
}

func blob(t *testing.T, layout, digest string, v any) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(layout, "blobs", "sha256", strings.TrimPrefix(digest, "sha256:")))
	if err != nil {
		t.Fatal(err)
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v", digest, err)
		}
	}
	return b
}

// layerFile returns the one regular file in a gzipped layer.
func layerFile(t *testing.T, gz []byte) (string, []byte) {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var name string
	var data []byte
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if name != "" {
				t.Fatalf("layer has two files: %s and %s", name, h.Name)
			}
			name = h.Name
			data, _ = io.ReadAll(tr)
		}
	}
	return name, data
}

// topIndex reads the layout's index.json and the image index it names.
func topIndex(t *testing.T, layout string) (descriptor, index) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(layout, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var top index
	if err := json.Unmarshal(b, &top); err != nil {
		t.Fatal(err)
	}
	if len(top.Manifests) != 1 || top.Manifests[0].MediaType != "application/vnd.oci.image.index.v1+json" {
		t.Fatalf("index.json = %s, want one image index", b)
	}
	var idx index
	blob(t, layout, top.Manifests[0].Digest, &idx)
	return top.Manifests[0], idx
}

// The index holds exactly the three platforms, each manifest's config and
// layer agree with its platform, the entrypoint is the binary, and the
// binary is the one `make cross` built for that platform.
func TestIndexPlatformsEntrypoints(t *testing.T) {
	layout := env(t, "XP_IMAGE_LAYOUT")
	version := env(t, "XP_IMAGE_VERSION")
	top, idx := topIndex(t, layout)
	if got := top.Annotations["io.containerd.image.name"]; got != env(t, "XP_IMAGE_REF") {
		t.Errorf("image name %q, want %q", got, os.Getenv("XP_IMAGE_REF"))
	}
	type want struct {
		file, entrypoint, dist string
		check                  func([]byte) error
	}
	wants := map[string]want{
		"linux/amd64":   {"usr/local/bin/crossproxy", "/usr/local/bin/crossproxy", "linux-amd64", elfMachine(elf.EM_X86_64)},
		"linux/arm64":   {"usr/local/bin/crossproxy", "/usr/local/bin/crossproxy", "linux-arm64", elfMachine(elf.EM_AARCH64)},
		"windows/amd64": {"Files/crossproxy.exe", "crossproxy.exe", "windows-amd64.exe", peMachine(pe.IMAGE_FILE_MACHINE_AMD64)},
	}
	if len(idx.Manifests) != len(wants) {
		t.Fatalf("index has %d manifests, want %d", len(idx.Manifests), len(wants))
	}
	dist := filepath.Dir(layout)
	for _, d := range idx.Manifests {
		if d.Platform == nil {
			t.Fatalf("manifest %s has no platform", d.Digest)
		}
		key := d.Platform.OS + "/" + d.Platform.Architecture
		w, ok := wants[key]
		if !ok {
			t.Fatalf("unexpected platform %s", key)
		}
		delete(wants, key)
		// HostProcess images carry no os.version: containerd's Windows
		// matcher then accepts them on every Windows build.
		if d.Platform.OSVersion != "" {
			t.Errorf("%s: os.version %q, want none (a HostProcess image runs on every Windows version)", key, d.Platform.OSVersion)
		}
		var m manifest
		blob(t, layout, d.Digest, &m)
		var c config
		blob(t, layout, m.Config.Digest, &c)
		if c.OS != d.Platform.OS || c.Architecture != d.Platform.Architecture {
			t.Errorf("%s: config says %s/%s", key, c.OS, c.Architecture)
		}
		if len(c.Config.Entrypoint) != 1 || c.Config.Entrypoint[0] != w.entrypoint {
			t.Errorf("%s: entrypoint %v, want [%s]", key, c.Config.Entrypoint, w.entrypoint)
		}
		if len(m.Layers) != 1 {
			t.Fatalf("%s: %d layers, want 1", key, len(m.Layers))
		}
		name, data := layerFile(t, blob(t, layout, m.Layers[0].Digest, nil))
		if name != w.file {
			t.Errorf("%s: layer file %s, want %s", key, name, w.file)
		}
		built, err := os.ReadFile(filepath.Join(dist, "crossproxy-"+version+"-"+w.dist))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(built, data) {
			t.Errorf("%s: the image's binary is not dist/crossproxy-%s-%s", key, version, w.dist)
		}
		if err := w.check(data); err != nil {
			t.Errorf("%s: %v", key, err)
		}
	}
}

func elfMachine(m elf.Machine) func([]byte) error {
	return func(b []byte) error {
		f, err := elf.NewFile(bytes.NewReader(b))
		if err != nil {
			return fmt.Errorf("not an ELF binary: %w", err)
		}
		if f.Machine != m {
			return fmt.Errorf("ELF machine %v, want %v", f.Machine, m)
		}
		return nil
	}
}

func peMachine(m uint16) func([]byte) error {
	return func(b []byte) error {
		f, err := pe.NewFile(bytes.NewReader(b))
		if err != nil {
			return fmt.Errorf("not a PE binary: %w", err)
		}
		if f.Machine != m {
			return fmt.Errorf("PE machine %#x, want %#x", f.Machine, m)
		}
		return nil
	}
}

var imageLine = regexp.MustCompile(`(?m)^\s+image:\s*"?([^"\s]+)"?\s*$`)

// The shipped DaemonSets name exactly the image `make image` tagged, and
// their command is the binary where the image put it.
func TestDaemonSetsNameTheBuiltImage(t *testing.T) {
	ref := env(t, "XP_IMAGE_REF")
	for _, c := range []struct{ env, command string }{
		{"XP_MANIFEST", `command: ["/usr/local/bin/crossproxy"]`},
		{"XP_WINDOWS_MANIFEST", `command: ["%CONTAINER_SANDBOX_MOUNT_POINT%\\crossproxy.exe"]`},
	} {
		b, err := os.ReadFile(env(t, c.env))
		if err != nil {
			t.Fatal(err)
		}
		m := imageLine.FindAllSubmatch(b, -1)
		if len(m) != 1 || string(m[0][1]) != ref {
			t.Errorf("%s: image lines %q, want one naming %s", os.Getenv(c.env), m, ref)
		}
		if !bytes.Contains(b, []byte(c.command)) {
			t.Errorf("%s: no %s", os.Getenv(c.env), c.command)
		}
	}
}

// run runs a command and returns its combined output, failing the test on error.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// startContainerd runs a private containerd (no CRI) under dir and returns
// its socket; it is stopped and its state removed when the test ends.
func startContainerd(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("containerd needs root")
	}
	dir, err := os.MkdirTemp("", "xp-image-ctrd-")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "containerd.sock")
	cfg := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), sock)
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("containerd", "--config", filepath.Join(dir, "config.toml"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			if b, err := os.ReadFile(filepath.Join(dir, "containerd.log")); err == nil {
				t.Logf("containerd log:\n%s", b)
			}
		}
		// Snapshot mounts must go before the directory does.
		_ = exec.Command("sh", "-c", "grep -o ' "+dir+"[^ ]*' /proc/mounts | sort -r | xargs -r -n1 umount -l").Run()
		_ = os.RemoveAll(dir)
		// ctr run and containerd 1.6's shims use these fixed directories;
		// no other containerd runs here, so remove them once empty
		// (os.Remove leaves a directory that is not).
		for _, d := range []string{"/run/containerd/runc/k8s.io", "/run/containerd/runc",
			"/run/containerd/fifo", "/run/containerd/s", "/run/containerd"} {
			_ = os.Remove(d)
		}
	})
	for deadline := time.Now().Add(30 * time.Second); ; {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return sock
		}
		if time.Now().After(deadline) {
			t.Fatalf("containerd did not start on %s", sock)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The archive imports with ctr into the namespace the kubelet's CRI uses,
// and the Linux image runs: its entrypoint starts crossproxy, and the binary
// reports the version it was built as.
func TestLinuxImageRunsUnderContainerd(t *testing.T) {
	ref := env(t, "XP_IMAGE_REF")
	sock := startContainerd(t)
	ctr := func(args ...string) string {
		return run(t, "ctr", append([]string{"-a", sock, "-n", "k8s.io"}, args...)...)
	}
	ctr("images", "import", env(t, "XP_IMAGE_ARCHIVE"))
	if ls := ctr("images", "ls", "-q"); !strings.Contains(ls, ref) {
		t.Fatalf("imported images:\n%s\nwant %s", ls, ref)
	}
	out := ctr("run", "--rm", ref, "xp-image-version", "/usr/local/bin/crossproxy", "version")
	if want := "crossproxy " + env(t, "XP_IMAGE_VERSION") + " linux/amd64"; !strings.Contains(out, want) {
		t.Errorf("crossproxy version in the container: %q, want %q", out, want)
	}
	// No arguments: the image's own entrypoint runs (crossproxy's help).
	if out := ctr("run", "--rm", ref, "xp-image-entrypoint"); !strings.Contains(out, "crossproxy") || !strings.Contains(out, "run") {
		t.Errorf("entrypoint output %q, want crossproxy's usage", out)
	}
}

// `make push` puts the index into a registry (crane's, inside a network
// namespace of this test's own) with the layout's digest and all three
// platforms.
func TestPushToRegistry(t *testing.T) {
	crane := env(t, "XP_CRANE")
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	ns := fmt.Sprintf("xpimg-%d", os.Getpid())
	run(t, "ip", "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	reg := exec.Command("ip", "netns", "exec", ns, crane, "registry", "serve", "--address", "127.0.0.1:5000")
	var regLog bytes.Buffer
	reg.Stdout, reg.Stderr = &regLog, &regLog
	if err := reg.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = reg.Process.Kill()
		_ = reg.Wait()
		if t.Failed() {
			t.Logf("registry log:\n%s", regLog.String())
		}
	})
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	version := env(t, "XP_IMAGE_VERSION")
	var pushErr error
	for i := 0; i < 50; i++ { // the registry needs a moment to listen
		out, err := exec.Command("ip", "netns", "exec", ns, "make", "-C", root, "--no-print-directory", "push",
			"REGISTRY=127.0.0.1:5000/xp", "VERSION="+version).CombinedOutput()
		if pushErr = err; err == nil {
			break
		}
		if !strings.Contains(string(out), "connection refused") {
			t.Fatalf("make push: %v\n%s", err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if pushErr != nil {
		t.Fatalf("make push: %v", pushErr)
	}
	top, _ := topIndex(t, env(t, "XP_IMAGE_LAYOUT"))
	pushed := "127.0.0.1:5000/xp/crossproxy:" + version
	if d := strings.TrimSpace(run(t, "ip", "netns", "exec", ns, crane, "digest", pushed)); d != top.Digest {
		t.Errorf("pushed digest %s, layout's index %s", d, top.Digest)
	}
	var idx index
	if err := json.Unmarshal([]byte(run(t, "ip", "netns", "exec", ns, crane, "manifest", pushed)), &idx); err != nil {
		t.Fatal(err)
	}
	var plats []string
	for _, m := range idx.Manifests {
		plats = append(plats, m.Platform.OS+"/"+m.Platform.Architecture)
	}
	if strings.Join(plats, " ") != "linux/amd64 linux/arm64 windows/amd64" {
		t.Errorf("pushed platforms %v", plats)
	}
}
