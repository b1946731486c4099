package main

import (
	"context"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/internal/testenv"
	"github.com/crossproxy/crossproxy/platform"
	"github.com/crossproxy/crossproxy/platform/manifest"
)

// explainNS creates a fresh network namespace, removed at cleanup (also when
// the test fails).
func explainNS(t *testing.T) string {
	t.Helper()
	testenv.RequireRoot(t, "network namespaces")
	name := fmt.Sprintf("xpd-u-%d-%d", os.Getpid(), rand.Intn(1_000_000))
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	return name
}

func nftIn(t *testing.T, ns string, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"netns", "exec", ns, "nft"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("nft %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestExplainReadsTheKernel programs the manifests' state with the real
// nftables backend in a fresh namespace, then checks that explain agrees with
// the kernel's rules, and names what is missing once rules are removed behind
// the proxy's back.
func TestExplainReadsTheKernel(t *testing.T) {
	ns := explainNS(t)
	dir := writeManifests(t)
	set, err := manifest.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	node, err := set.Node("n1")
	if err != nil {
		t.Fatal(err)
	}
	st, err := core.Compute(core.Options{IPFamilies: []v1.IPFamily{v1.IPv4Protocol}}, node, set.Services, set.Slices)
	if err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	b, err := newBackend(platform.BackendConfig{NodeName: "n1", TableName: "crossproxy", NetNSPath: "/run/netns/" + ns}, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Sync(context.Background(), st, core.Changes{Full: true}); err != nil {
		t.Fatalf("sync: %v", err)
	}
	explainOK := func() (string, int) {
		return runCLI(t, "explain", "default/ok", "--manifests", dir, "--node", "n1", "--ip-families", "IPv4",
			"--netns", "/run/netns/"+ns)
	}

	out, code := explainOK()
	if code != 0 || !strings.Contains(out, "4. programmed in nftables") ||
		!strings.Contains(out, "ClusterIP 10.96.0.11:80/TCP -> 10.244.1.6:8080") || !strings.Contains(out, "OK: all four layers agree") {
		t.Fatalf("freshly programmed: exit %d\n%s", code, out)
	}
	// The broken Service is programmed as computed (reject), so its first
	// mismatch stays in the slices.
	out, code = runCLI(t, "explain", "default/web", "--manifests", dir, "--node", "n1", "--ip-families", "IPv4", "--netns", "/run/netns/"+ns)
	if code != 1 || !strings.Contains(out, "ClusterIP 10.96.0.10:80/TCP -> empty: reject") ||
		!strings.Contains(out, "FIRST MISMATCH (layer 2, published): targetPort http matches no port in slice web-7x2k") {
		t.Errorf("broken service: exit %d\n%s", code, out)
	}

	// Remove the Service's endpoint from the endpoint map behind the proxy's back.
	elem := "{ 10.96.0.11 . tcp . 80 . 0x00000000 }"
	nftIn(t, ns, "delete", "element", "inet", "crossproxy", "endpoints-v4-1", elem)
	out, code = explainOK()
	want := "FIRST MISMATCH (layer 4, programmed): programmed rules miss 1 endpoint that the computed state has, for ClusterIP 10.96.0.11:80/TCP: 10.244.1.6:8080"
	if code != 1 || !strings.Contains(out, want) {
		t.Errorf("after deleting %s: exit %d, want %q\n%s", elem, code, want, out)
	}

	// No table at all: nothing confirms the rules, which is a mismatch too.
	nftIn(t, ns, "flush", "ruleset") // the main table and its shards
	out, code = explainOK()
	if code != 1 || !strings.Contains(out, "FIRST MISMATCH (layer 4, programmed): layer 4 not read: read nftables:") {
		t.Errorf("without a table: exit %d\n%s", code, out)
	}
}
