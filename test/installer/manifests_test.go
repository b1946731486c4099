package installer

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/crossproxy/crossproxy/platform/config"
)

// bundle is one OS's manifests decoded strictly (unknown or duplicate fields fail).
type bundle struct {
	sa         *v1.ServiceAccount
	role       *rbacv1.ClusterRole
	binding    *rbacv1.ClusterRoleBinding
	nsRole     *rbacv1.Role
	nsBinding  *rbacv1.RoleBinding
	configMap  *v1.ConfigMap
	daemonSet  *appsv1.DaemonSet
	kindsNames []string
	// The secure endpoint's readers (issue 39): the ServiceAccount the
	// commands mint tokens of, its role and binding, and the operators'
	// role, which nothing binds.
	readerSA      *v1.ServiceAccount
	readerRole    *rbacv1.ClusterRole
	readerBinding *rbacv1.ClusterRoleBinding
	operatorRole  *rbacv1.ClusterRole
}

func loadBundle(t *testing.T, osName string) *bundle {
	t.Helper()
	docs, err := LoadDocuments(ManifestFiles()[osName])
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{}
	for _, d := range docs {
		var target any
		switch {
		case d.Kind == "ServiceAccount" && d.Name == "crossproxy-reader":
			b.readerSA = &v1.ServiceAccount{}
			target = b.readerSA
		case d.Kind == "ClusterRole" && d.Name == "crossproxy-reader":
			b.readerRole = &rbacv1.ClusterRole{}
			target = b.readerRole
		case d.Kind == "ClusterRoleBinding" && d.Name == "crossproxy-reader":
			b.readerBinding = &rbacv1.ClusterRoleBinding{}
			target = b.readerBinding
		case d.Kind == "ClusterRole" && d.Name == "crossproxy-operator":
			b.operatorRole = &rbacv1.ClusterRole{}
			target = b.operatorRole
		case d.Kind == "ServiceAccount":
			b.sa = &v1.ServiceAccount{}
			target = b.sa
		case d.Kind == "ClusterRole":
			b.role = &rbacv1.ClusterRole{}
			target = b.role
		case d.Kind == "ClusterRoleBinding":
			b.binding = &rbacv1.ClusterRoleBinding{}
			target = b.binding
		case d.Kind == "Role":
			b.nsRole = &rbacv1.Role{}
			target = b.nsRole
		case d.Kind == "RoleBinding":
			b.nsBinding = &rbacv1.RoleBinding{}
			target = b.nsBinding
		case d.Kind == "ConfigMap":
			b.configMap = &v1.ConfigMap{}
			target = b.configMap
		case d.Kind == "DaemonSet":
			b.daemonSet = &appsv1.DaemonSet{}
			target = b.daemonSet
		default:
			t.Fatalf("%s: unexpected kind %s %s", d.File, d.Kind, d.Name)
		}
		if err := yaml.UnmarshalStrict(d.Raw, target); err != nil {
			t.Fatalf("%s: %s %s: %v", d.File, d.Kind, d.Name, err)
		}
		b.kindsNames = append(b.kindsNames, d.Kind+"/"+d.Name)
	}
	if b.sa == nil || b.role == nil || b.binding == nil || b.nsRole == nil || b.nsBinding == nil || b.configMap == nil || b.daemonSet == nil ||
		b.readerSA == nil || b.readerRole == nil || b.readerBinding == nil || b.operatorRole == nil {
		t.Fatalf("%s manifests: want ServiceAccount, ClusterRole, ClusterRoleBinding, Role, RoleBinding, ConfigMap and DaemonSet, and crossproxy-reader's and crossproxy-operator's, got %v", osName, b.kindsNames)
	}
	return b
}

// TestRBACIsLeastPrivilege pins the ClusterRole to exactly what a node proxy
// needs: any added verb or resource must be argued for here.
func TestRBACIsLeastPrivilege(t *testing.T) {
	b := loadBundle(t, "linux")
	got := map[string][]string{}
	for i, r := range b.role.Rules {
		if len(r.NonResourceURLs) > 0 || len(r.ResourceNames) > 0 {
			t.Errorf("rule %d: nonResourceURLs/resourceNames not expected: %+v", i, r)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				key := g + "/" + res
				got[key] = append(got[key], r.Verbs...)
			}
		}
	}
	for k := range got {
		sort.Strings(got[k])
	}
	want := map[string][]string{
		"/services":                       {"list", "watch"},
		"discovery.k8s.io/endpointslices": {"list", "watch"},
		"/nodes":                          {"list", "watch"},
		"/events":                         {"create", "patch"},
		"events.k8s.io/events":            {"create", "patch"},
		// The secure endpoint asks the API server about each caller.
		"authentication.k8s.io/tokenreviews":        {"create"},
		"authorization.k8s.io/subjectaccessreviews": {"create"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ClusterRole rules:\n got %v\nwant %v", got, want)
	}
	// The readers get the endpoint and nothing else; the operators' role
	// finds the proxies, reaches them through the API server and mints the
	// reader's token, and nothing else.
	wantReader := []rbacv1.PolicyRule{{APIGroups: []string{"crossproxy.io"}, Resources: []string{"proxies"}, Verbs: []string{"get"}}}
	if !reflect.DeepEqual(b.readerRole.Rules, wantReader) {
		t.Errorf("crossproxy-reader rules %+v, want %+v", b.readerRole.Rules, wantReader)
	}
	if r := b.readerBinding; r.RoleRef.Name != "crossproxy-reader" || len(r.Subjects) != 1 || r.Subjects[0].Name != b.readerSA.Name || r.Subjects[0].Namespace != b.sa.Namespace {
		t.Errorf("crossproxy-reader binding %+v", r)
	}
	wantOperator := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes", "pods"}, Verbs: []string{"list"}},
		{APIGroups: []string{""}, Resources: []string{"pods/proxy"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, ResourceNames: []string{"crossproxy-reader"}, Verbs: []string{"create"}},
	}
	if !reflect.DeepEqual(b.operatorRole.Rules, wantOperator) {
		t.Errorf("crossproxy-operator rules %+v, want %+v", b.operatorRole.Rules, wantOperator)
	}
	// In kube-system only: the cleanup-on-delete container reads its own
	// DaemonSet, by name, to tell an uninstall from a restart (issue 37).
	wantNS := []rbacv1.PolicyRule{{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"},
		ResourceNames: []string{"crossproxy-linux", "crossproxy-windows"}, Verbs: []string{"get", "list", "watch"}}}
	if !reflect.DeepEqual(b.nsRole.Rules, wantNS) || b.nsRole.Namespace != b.sa.Namespace {
		t.Errorf("Role %s/%s rules %+v, want %+v", b.nsRole.Namespace, b.nsRole.Name, b.nsRole.Rules, wantNS)
	}
	if b.nsBinding.RoleRef.Kind != "Role" || b.nsBinding.RoleRef.Name != b.nsRole.Name || len(b.nsBinding.Subjects) != 1 ||
		b.nsBinding.Subjects[0].Name != b.sa.Name || b.nsBinding.Subjects[0].Namespace != b.sa.Namespace {
		t.Errorf("RoleBinding %+v does not bind Role %s to ServiceAccount %s/%s alone", b.nsBinding, b.nsRole.Name, b.sa.Namespace, b.sa.Name)
	}
	if b.binding.RoleRef.Kind != "ClusterRole" || b.binding.RoleRef.Name != b.role.Name {
		t.Errorf("binding roleRef %+v does not name ClusterRole %s", b.binding.RoleRef, b.role.Name)
	}
	if len(b.binding.Subjects) != 1 || b.binding.Subjects[0].Kind != "ServiceAccount" ||
		b.binding.Subjects[0].Name != b.sa.Name || b.binding.Subjects[0].Namespace != b.sa.Namespace {
		t.Errorf("binding subjects %+v, want exactly ServiceAccount %s/%s", b.binding.Subjects, b.sa.Namespace, b.sa.Name)
	}
}

// TestDaemonSets checks what both DaemonSets must have to replace kube-proxy
// safely: host network, every node of their OS, critical priority, probes on
// the health port, one node at a time, and the config mounted where --config
// points.
func TestDaemonSets(t *testing.T) {
	for _, osName := range []string{"linux", "windows"} {
		t.Run(osName, func(t *testing.T) {
			b := loadBundle(t, osName)
			ds := b.daemonSet
			spec := ds.Spec.Template.Spec
			errorf := func(format string, args ...any) {
				t.Errorf("DaemonSet %s: "+format, append([]any{ds.Name}, args...)...)
			}

			if ds.Namespace != b.sa.Namespace || spec.ServiceAccountName != b.sa.Name {
				errorf("runs as %s/%s, want the shipped ServiceAccount %s/%s", ds.Namespace, spec.ServiceAccountName, b.sa.Namespace, b.sa.Name)
			}
			if !spec.HostNetwork {
				errorf("hostNetwork is false")
			}
			if spec.PriorityClassName != "system-node-critical" {
				errorf("priorityClassName %q", spec.PriorityClassName)
			}
			if got := spec.NodeSelector["kubernetes.io/os"]; got != osName || len(spec.NodeSelector) != 1 {
				errorf("nodeSelector %v, want only kubernetes.io/os=%s", spec.NodeSelector, osName)
			}
			if len(spec.Tolerations) != 1 || spec.Tolerations[0].Operator != v1.TolerationOpExists || spec.Tolerations[0].Key != "" {
				errorf("tolerations %+v, want one that tolerates every taint", spec.Tolerations)
			}
			u := ds.Spec.UpdateStrategy
			if u.Type != appsv1.RollingUpdateDaemonSetStrategyType || u.RollingUpdate == nil ||
				u.RollingUpdate.MaxUnavailable == nil || u.RollingUpdate.MaxUnavailable.String() != "1" ||
				u.RollingUpdate.MaxSurge == nil || u.RollingUpdate.MaxSurge.String() != "0" {
				errorf("updateStrategy %+v, want RollingUpdate maxUnavailable 1 maxSurge 0", u)
			}
			sel := ds.Spec.Selector.MatchLabels
			for k, v := range sel {
				if ds.Spec.Template.Labels[k] != v {
					errorf("selector %s=%s not in the pod template's labels", k, v)
				}
			}
			// Reboot-safe (issue 37): a host-network pod with no dnsPolicy (or
			// ClusterFirst, the same) resolves with the node's resolver, as
			// kubeadm's kube-proxy; ClusterFirstWithHostNet would send the API
			// server's DNS name to the cluster DNS's ClusterIP, which has no
			// rules on a node that has just booted.
			if p := spec.DNSPolicy; p != "" && p != v1.DNSClusterFirst && p != v1.DNSDefault {
				errorf("dnsPolicy %s: the proxy must resolve the API server without cluster DNS", p)
			}
			if len(spec.Containers) != 2 || spec.Containers[0].Name != "crossproxy" || spec.Containers[1].Name != "cleanup-on-delete" {
				t.Fatalf("DaemonSet %s: containers %d, want crossproxy and cleanup-on-delete", ds.Name, len(spec.Containers))
			}
			c := spec.Containers[0]
			checkCleanupContainer(t, ds, c, spec.Containers[1])
			if c.Image != TestImage {
				errorf("image %q, want the rendered @IMAGE@ %q", c.Image, TestImage)
			}
			checkProbe(t, "readiness", c.ReadinessProbe, "/healthz")
			checkProbe(t, "liveness", c.LivenessProbe, "/livez")
			checkConfig(t, b, c)
			for _, vol := range spec.Volumes {
				if vol.HostPath != nil {
					errorf("hostPath volume %s (%s): not needed, no iptables lock or kernel modules", vol.Name, vol.HostPath.Path)
				}
			}
			if osName == "linux" {
				checkLinuxSecurity(t, ds)
			} else {
				checkWindowsHostProcess(t, ds)
			}
		})
	}
}

// checkCleanupContainer: the uninstall container runs the same binary from
// the same image, names its own DaemonSet, reads the proxy's config from the
// same mount and reaches the API server the same way; on Linux it has the
// proxy's security context (NET_ADMIN alone).
func checkCleanupContainer(t *testing.T, ds *appsv1.DaemonSet, proxy, c v1.Container) {
	t.Helper()
	var cfgArg string
	for _, a := range proxy.Args {
		if strings.HasPrefix(a, "--config=") {
			cfgArg = a
		}
	}
	want := []string{"cleanup-on-delete", "--daemonset=" + ds.Namespace + "/" + ds.Name, cfgArg}
	if !reflect.DeepEqual(c.Args, want) {
		t.Errorf("cleanup-on-delete args %v, want %v", c.Args, want)
	}
	if c.Image != proxy.Image || !reflect.DeepEqual(c.Command, proxy.Command) {
		t.Errorf("cleanup-on-delete runs %s %v, the proxy %s %v", c.Image, c.Command, proxy.Image, proxy.Command)
	}
	if !reflect.DeepEqual(c.VolumeMounts, proxy.VolumeMounts) {
		t.Errorf("cleanup-on-delete mounts %+v, the proxy %+v", c.VolumeMounts, proxy.VolumeMounts)
	}
	for _, e := range proxy.Env {
		if !strings.HasPrefix(e.Name, "KUBERNETES_SERVICE_") {
			continue
		}
		found := false
		for _, ce := range c.Env {
			found = found || reflect.DeepEqual(ce, e)
		}
		if !found {
			t.Errorf("cleanup-on-delete lacks the proxy's %s", e.Name)
		}
	}
	if !reflect.DeepEqual(c.SecurityContext, proxy.SecurityContext) {
		t.Errorf("cleanup-on-delete securityContext %+v, the proxy's %+v", c.SecurityContext, proxy.SecurityContext)
	}
}

func checkProbe(t *testing.T, what string, p *v1.Probe, path string) {
	t.Helper()
	if p == nil || p.HTTPGet == nil {
		t.Errorf("%s probe: want an httpGet probe on %s", what, path)
		return
	}
	if p.HTTPGet.Path != path || p.HTTPGet.Port.IntValue() != 10256 {
		t.Errorf("%s probe: %s on port %s, want %s on 10256", what, p.HTTPGet.Path, p.HTTPGet.Port.String(), path)
	}
}

// checkConfig follows --config to a volume mount, the mount to the ConfigMap,
// and checks the ConfigMap holds a KubeProxyConfiguration for the right mode;
// every configMapKeyRef must name that ConfigMap.
func checkConfig(t *testing.T, b *bundle, c v1.Container) {
	t.Helper()
	var configPath string
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--config="); ok {
			configPath = v
		}
	}
	if len(c.Args) == 0 || c.Args[0] != "run" || configPath == "" {
		t.Fatalf("args %v: want run --config=PATH", c.Args)
	}
	norm := func(p string) string { return strings.ToLower(strings.ReplaceAll(p, `\`, "/")) }
	spec := b.daemonSet.Spec.Template.Spec
	found := false
	for _, m := range c.VolumeMounts {
		if !strings.HasPrefix(norm(configPath), norm(m.MountPath)+"/") {
			continue
		}
		key := strings.TrimPrefix(norm(configPath), norm(m.MountPath)+"/")
		for _, vol := range spec.Volumes {
			if vol.Name != m.Name || vol.ConfigMap == nil {
				continue
			}
			if vol.ConfigMap.Name != b.configMap.Name {
				t.Errorf("volume %s names ConfigMap %s, shipped is %s", vol.Name, vol.ConfigMap.Name, b.configMap.Name)
			}
			for _, item := range vol.ConfigMap.Items {
				if item.Path == key {
					if _, ok := b.configMap.Data[item.Key]; ok {
						found = true
					}
				}
			}
		}
		if !m.ReadOnly {
			t.Errorf("volume mount %s is writable", m.Name)
		}
	}
	if !found {
		t.Errorf("--config=%s does not lead to a key of ConfigMap %s", configPath, b.configMap.Name)
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
			if e.ValueFrom.ConfigMapKeyRef.Name != b.configMap.Name {
				t.Errorf("env %s reads ConfigMap %s, shipped is %s", e.Name, e.ValueFrom.ConfigMapKeyRef.Name, b.configMap.Name)
			}
			if e.ValueFrom.ConfigMapKeyRef.Optional == nil || !*e.ValueFrom.ConfigMapKeyRef.Optional {
				t.Errorf("env %s: key %s is not shipped, so it must be optional", e.Name, e.ValueFrom.ConfigMapKeyRef.Key)
			}
		}
	}
	want := map[string]string{"linux": "nftables", "windows": "kernelspace"}[b.daemonSet.Spec.Template.Spec.NodeSelector["kubernetes.io/os"]]
	if err := checkKubeProxyConfig([]byte(b.configMap.Data["config.yaml"]), want); err != nil {
		t.Errorf("ConfigMap %s config.yaml: %v", b.configMap.Name, err)
	}
}

// checkKubeProxyConfig checks the file is a KubeProxyConfiguration in mode
// and leaves the conntrack sysctls alone where the proxy cannot write them.
func checkKubeProxyConfig(data []byte, mode string) error {
	var cfg struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Mode       string `json:"mode"`
		Healthz    string `json:"healthzBindAddress"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return err
	}
	if cfg.APIVersion != "kubeproxy.config.k8s.io/v1alpha1" || cfg.Kind != "KubeProxyConfiguration" {
		return fmt.Errorf("%s %s, want kubeproxy.config.k8s.io/v1alpha1 KubeProxyConfiguration", cfg.APIVersion, cfg.Kind)
	}
	if cfg.Mode != mode {
		return fmt.Errorf("mode %q, want %q", cfg.Mode, mode)
	}
	if !strings.HasSuffix(cfg.Healthz, ":10256") {
		return fmt.Errorf("healthzBindAddress %q, the probes use port 10256", cfg.Healthz)
	}
	return nil
}

func checkLinuxSecurity(t *testing.T, ds *appsv1.DaemonSet) {
	t.Helper()
	sc := ds.Spec.Template.Spec.Containers[0].SecurityContext
	if sc == nil || sc.Capabilities == nil {
		t.Fatal("linux container has no securityContext.capabilities")
	}
	if sc.Privileged == nil || *sc.Privileged {
		t.Error("privileged must be set to false")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation must be false")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("readOnlyRootFilesystem must be true")
	}
	if !reflect.DeepEqual(sc.Capabilities.Drop, []v1.Capability{"ALL"}) {
		t.Errorf("capabilities.drop %v, want [ALL]", sc.Capabilities.Drop)
	}
	// NET_ADMIN is nftables and conntrack over netlink; nothing else is used.
	if !reflect.DeepEqual(sc.Capabilities.Add, []v1.Capability{"NET_ADMIN"}) {
		t.Errorf("capabilities.add %v, want [NET_ADMIN]", sc.Capabilities.Add)
	}
	if sc.SeccompProfile == nil || sc.SeccompProfile.Type != v1.SeccompProfileTypeRuntimeDefault {
		t.Error("seccompProfile must be RuntimeDefault")
	}
	if ds.Spec.Template.Spec.SecurityContext != nil && ds.Spec.Template.Spec.SecurityContext.WindowsOptions != nil {
		t.Error("linux pod has windowsOptions")
	}
}

func checkWindowsHostProcess(t *testing.T, ds *appsv1.DaemonSet) {
	t.Helper()
	psc := ds.Spec.Template.Spec.SecurityContext
	if psc == nil || psc.WindowsOptions == nil || psc.WindowsOptions.HostProcess == nil || !*psc.WindowsOptions.HostProcess {
		t.Fatal("windows pod: securityContext.windowsOptions.hostProcess must be true")
	}
	if u := psc.WindowsOptions.RunAsUserName; u == nil || *u != `NT AUTHORITY\SYSTEM` {
		t.Errorf("windows pod: runAsUserName %v, want NT AUTHORITY\\SYSTEM", u)
	}
	c := ds.Spec.Template.Spec.Containers[0]
	if len(c.Command) != 1 || !strings.HasPrefix(c.Command[0], "%CONTAINER_SANDBOX_MOUNT_POINT%") {
		t.Errorf("windows command %v: want the binary under %%CONTAINER_SANDBOX_MOUNT_POINT%%", c.Command)
	}
	if c.SecurityContext != nil && c.SecurityContext.Capabilities != nil {
		t.Error("windows container has Linux capabilities")
	}
}

// TestShippedConfigsLoad loads every config file installer/ ships with
// crossproxy's own loader, for the OS it is meant for: each must be valid and
// use no field crossproxy would ignore (the start would warn about it).
func TestShippedConfigsLoad(t *testing.T) {
	files := map[string]string{
		filepath.Join("linux", "config.yaml"):   "linux",
		filepath.Join("windows", "config.yaml"): "windows",
	}
	data := map[string][]byte{}
	for f := range files {
		b, err := os.ReadFile(filepath.Join(RepoRoot(), "installer", f))
		if err != nil {
			t.Fatal(err)
		}
		data[f] = b
	}
	for _, osName := range []string{"linux", "windows"} {
		b := loadBundle(t, osName)
		key := "ConfigMap " + b.configMap.Name
		files[key] = osName
		data[key] = []byte(b.configMap.Data["config.yaml"])
	}
	for name, goos := range files {
		cfg, err := config.Parse(data[name], goos)
		if err == nil {
			err = cfg.Validate(goos)
		}
		if err != nil {
			t.Errorf("%s (%s): %v", name, goos, err)
			continue
		}
		if len(cfg.Ignored) > 0 {
			t.Errorf("%s (%s): fields crossproxy ignores: %v", name, goos, cfg.Ignored)
		}
		if cfg.HealthzBindAddress == "" || !strings.HasSuffix(cfg.HealthzBindAddress, ":10256") {
			t.Errorf("%s: healthz on %q, the probes and docs use port 10256", name, cfg.HealthzBindAddress)
		}
	}
}
