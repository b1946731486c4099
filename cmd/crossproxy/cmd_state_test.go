package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/internal/golden"
	"github.com/crossproxy/crossproxy/platform/manifest"
)

const rulesDir = "../../test/manifests/rules"

// runCLI runs the crossproxy command line in-process and returns its output.
func runStateCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

// TestStateGolden runs `crossproxy state` on the manifest set that exercises
// every core rule and compares the output with the committed golden files
// (go test ./cmd/crossproxy -run TestStateGolden -update rewrites them).
func TestStateGolden(t *testing.T) {
	cases := []struct {
		golden string
		args   []string
	}{
		{"expected-state.txt", []string{"state", "--manifests", rulesDir, "--node", "node-a",
			"--nodeport-addresses", "primary,203.0.113.0/24", "--cluster-cidr", "10.244.0.0/16,fd00:244::/48"}},
		// Rule 7: a family the node does not run is ignored.
		{"expected-state-ipv4-only.txt", []string{"state", "--manifests", filepath.Join(rulesDir, "00-nodes.yaml"),
			"--manifests", filepath.Join(rulesDir, "07-dual-stack.yaml"), "--node", "node-a", "--ip-families", "IPv4",
			"--detect-local-mode", "NodeCIDR", "--masquerade-all"}},
	}
	for _, tc := range cases {
		t.Run(tc.golden, func(t *testing.T) {
			got, err := runStateCLI(t, tc.args...)
			if err != nil {
				t.Fatalf("state: %v\n%s", err, got)
			}
			golden.Check(t, filepath.Join(rulesDir, "golden", tc.golden), got)
		})
	}
}

// TestStateJSON checks that -o json is the NodeState itself: decoding it gives
// what core.Compute returns for the same objects.
func TestStateJSON(t *testing.T) {
	out, err := runStateCLI(t, "state", "--manifests", rulesDir, "--node", "node-a", "-o", "json")
	if err != nil {
		t.Fatalf("state: %v", err)
	}
	var got core.NodeState
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("decode: %v\n%s", err, out)
	}
	set, err := manifest.Load(rulesDir)
	if err != nil {
		t.Fatal(err)
	}
	node, _ := set.Node("node-a")
	want, err := core.Compute(core.Options{IPFamilies: got.Families}, node, set.Services, set.Slices)
	if err != nil {
		t.Fatal(err)
	}
	wj, _ := json.Marshal(want)
	gj, _ := json.Marshal(&got)
	if string(wj) != string(gj) {
		t.Fatalf("JSON output is not the computed NodeState:\nwant %s\n got %s", wj, gj)
	}
	if len(got.Ports) != 27 || len(got.Problems) != 6 {
		t.Fatalf("ports %d problems %d", len(got.Ports), len(got.Problems))
	}
}

func TestStateErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: v1\nkind: Node\nmetadata: {name: node-n}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {ports: [{port: \"eighty\"}]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"bad file names file and document", []string{"state", "--manifests", bad, "--node", "node-n"}, "bad.yaml: document 2"},
		{"missing file", []string{"state", "--manifests", filepath.Join(dir, "nope.yaml"), "--node", "node-n"}, "nope.yaml"},
		{"unknown node", []string{"state", "--manifests", rulesDir, "--node", "node-z"}, `node "node-z" not found`},
		{"no node flag", []string{"state", "--manifests", rulesDir}, "flag --node: required"},
		{"no manifests", []string{"state", "--node", "node-a"}, "flag --manifests"},
		{"bad output", []string{"state", "--manifests", rulesDir, "--node", "node-a", "-o", "yaml"}, `flag --output: "yaml"`},
		{"bad option", []string{"state", "--manifests", rulesDir, "--node", "node-a", "--nodeport-addresses", "10.0.0.0/33"}, `nodePortAddresses[0]: "10.0.0.0/33" is not a CIDR or "primary"`},
		{"bad family", []string{"state", "--manifests", rulesDir, "--node", "node-a", "--ip-families", "IPv5"}, "--ip-families"},
		{"bad mode", []string{"state", "--manifests", rulesDir, "--node", "node-a", "--detect-local-mode", "Magic"}, "localDetect.mode"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runStateCLI(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if exitCode(err) != 2 {
				t.Fatalf("exit code %d, want 2", exitCode(err))
			}
		})
	}
}
