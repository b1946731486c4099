package installer

import (
	"strings"
	"testing"

	"github.com/crossproxy/crossproxy/platform/config"
)

// TestWindowsManifestsNeedNoPerNodeEdit: one Windows DaemonSet and ConfigMap
// serve every Windows node, L2Bridge or overlay. Nothing in them is per node:
// no source VIP in the config file or the arguments (each overlay node finds
// its own: annotation, existing endpoint, or a host-local reservation from
// its pod CIDR), and the only node-specific value, the node name, comes from
// the downward API.
func TestWindowsManifestsNeedNoPerNodeEdit(t *testing.T) {
	b := loadBundle(t, "windows")
	cfg, err := config.Parse([]byte(b.configMap.Data["config.yaml"]), "windows")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Backend.SourceVIP != "" {
		t.Errorf("ConfigMap %s sets winkernel.sourceVip %q: one address for every node; leave it empty", b.configMap.Name, cfg.Backend.SourceVIP)
	}
	for _, c := range b.daemonSet.Spec.Template.Spec.Containers {
		for _, a := range append(append([]string{}, c.Command...), c.Args...) {
			if strings.HasPrefix(a, "--source-vip") {
				t.Errorf("container %s passes %s: one address for every node", c.Name, a)
			}
			if strings.Contains(a, "$(") && !strings.Contains(a, "$(NODE_NAME)") {
				t.Errorf("container %s argument %s expands something other than the node name", c.Name, a)
			}
		}
		for _, e := range c.Env {
			if e.Value != "" {
				t.Errorf("container %s env %s=%q is a literal: a per-node value would need an edit per node", c.Name, e.Name, e.Value)
			}
			if e.Name == "NODE_NAME" && (e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "spec.nodeName") {
				t.Errorf("NODE_NAME must come from spec.nodeName")
			}
		}
	}
}
