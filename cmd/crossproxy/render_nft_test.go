package main

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/crossproxy/crossproxy/internal/golden"
)

// TestRenderLinuxGolden renders manifests through the real core and compares
// the nft text with a golden file.
func TestRenderLinuxGolden(t *testing.T) {
	var out, errOut bytes.Buffer
	root := newRootCommand()
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs([]string{"render", "--platform", "linux", "--manifests", "testdata/render-linux/manifests.yaml",
		"--node", "node-a", "--cluster-cidr", "10.244.0.0/16,fd00:244::/56", "--localhost-nodeports"})
	if err := root.Execute(); err != nil {
		t.Fatalf("render: %v (%s)", err, errOut.String())
	}
	golden.Check(t, filepath.Join("testdata", "render-linux", "ruleset.nft"), out.String())
}

func TestRenderUnknownPlatform(t *testing.T) {
	root := newRootCommand()
	root.SetOut(&bytes.Buffer{})
	root.SetErr(&bytes.Buffer{})
	root.SetArgs([]string{"render", "--platform", "plan9", "--manifests", "testdata/render-linux/manifests.yaml", "--node", "node-a"})
	if err := root.Execute(); err == nil {
		t.Fatal("want an error for an unknown platform")
	}
}
