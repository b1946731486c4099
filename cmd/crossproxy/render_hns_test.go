package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestRenderWindowsGolden renders the same manifests as the Linux golden test
// through the real core and the HNS planner, and compares the plan with a
// golden file.
func TestRenderWindowsGolden(t *testing.T) {
	var out, errOut bytes.Buffer
	root := newRootCommand()
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs([]string{"render", "--platform", "windows", "--manifests", "testdata/render-linux/manifests.yaml",
		"--node", "node-a", "--cluster-cidr", "10.244.0.0/16,fd00:244::/56"})
	if err := root.Execute(); err != nil {
		t.Fatalf("render: %v (%s)", err, errOut.String())
	}
	path := filepath.Join("testdata", "render-windows", "plan.txt")
	if *updateRender {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (go test -update-render): %v", err)
	}
	if !bytes.Equal(want, out.Bytes()) {
		t.Errorf("render differs from %s; got:\n%s", path, out.String())
	}
}
