package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crossproxy/crossproxy/internal/golden"
)

// TestRenderWindowsGolden renders manifests through the real core and the
// HNS planner for Windows nodes described by flags or a network file, as
// text and as JSON, and compares each with a golden file
// (go test -update rewrites them).
func TestRenderWindowsGolden(t *testing.T) {
	const overlay = "testdata/render-windows/overlay-manifests.yaml"
	cases := []struct {
		name, golden string
		args         []string
	}{{
		name:   "L2Bridge defaults",
		golden: "plan.txt",
		args: []string{"--manifests", "testdata/render-linux/manifests.yaml", "--node", "node-a",
			"--cluster-cidr", "10.244.0.0/16,fd00:244::/56"},
	}, {
		name:   "overlay from a YAML network file",
		golden: "overlay.txt",
		args:   []string{"--manifests", overlay, "--node", "win-1", "--hns-network-file", "testdata/render-windows/overlay-node.yaml"},
	}, {
		name:   "overlay from a JSON network file, as JSON",
		golden: "overlay.json",
		args:   []string{"--manifests", overlay, "--node", "win-1", "--hns-network-file", "testdata/render-windows/overlay-node.json", "-o", "json"},
	}, {
		name:   "overlay from flags, DSR flag, an old HNS, as JSON",
		golden: "overlay-flags.json",
		args: []string{"--manifests", overlay, "--node", "win-1", "--hns-network-type", "Overlay", "--network-name", "vxlan0",
			"--source-vip", "10.244.1.2", "--host-mac", "00-15-5d-00-00-11", "--hns-remote-subnet", "10.244.2.0/24=192.168.0.12",
			"--enable-dsr", "--hns-features", "RemoteSubnet,ModifyLoadBalancer", "-o", "json"},
	}, {
		name:   "L2Bridge from flags overriding the file, as JSON",
		golden: "l2bridge.json",
		args: []string{"--manifests", overlay, "--node", "win-1", "--hns-network-file", "testdata/render-windows/overlay-node.yaml",
			"--hns-network-type", "L2Bridge", "--enable-dsr", "-o", "json"},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, err := runRender(append([]string{"render", "--platform", "windows"}, c.args...))
			if err != nil {
				t.Fatalf("render: %v (%s)", err, errOut)
			}
			golden.Check(t, filepath.Join("testdata", "render-windows", c.golden), out)
		})
	}
}

// TestRenderWindowsRefuses: render refuses what run refuses, and bad node
// descriptions name the field.
func TestRenderWindowsRefuses(t *testing.T) {
	const overlay = "testdata/render-windows/overlay-manifests.yaml"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--platform", "windows", "--hns-network-type", "Overlay", "--hns-remote-subnet", "10.244.2.0/24=192.168.0.12"}, "source VIP"},
		{[]string{"--platform", "windows", "--hns-network-type", "Overlay", "--source-vip", "10.244.1.2", "--hns-features", "DSR"}, "remote subnet support"},
		{[]string{"--platform", "windows", "--hns-network-type", "Vxlan"}, `networkType "Vxlan"`},
		{[]string{"--platform", "windows", "--hns-remote-subnet", "10.244.2.0/24=nope"}, "remoteSubnets[0].providerAddress"},
		{[]string{"--platform", "windows", "--hns-features", "Turbo"}, `unknown HNS feature "Turbo"`},
		{[]string{"--platform", "linux", "-o", "json"}, `flag --output: "json" is not supported for --platform linux`},
	} {
		_, _, err := runRender(append([]string{"render", "--manifests", overlay, "--node", "win-1"}, c.args...))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want an error with %q", c.args, err, c.want)
		}
	}
}

func runRender(args []string) (string, string, error) {
	var out, errOut bytes.Buffer
	root := newRootCommand()
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), errOut.String(), err
}
