package helm

import (
	"fmt"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	dynfake "k8s.io/client-go/dynamic/fake"
)

// fakeCluster answers the chart's lookup calls from in-memory ConfigMaps, as
// the API server answers `helm install` (Helm's engine with a client
// provider; `helm template` has no cluster and lookup returns nothing).
type fakeCluster struct{ client *dynfake.FakeDynamicClient }

var configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

func (f fakeCluster) GetClientFor(apiVersion, kind string) (dynamic.NamespaceableResourceInterface, bool, error) {
	if apiVersion != "v1" || kind != "ConfigMap" {
		return nil, false, fmt.Errorf("the chart looked up %s %s; only ConfigMaps are served here", apiVersion, kind)
	}
	return f.client.Resource(configMaps), true, nil
}

func configMap(ns, name string, data map[string]any) runtime.Object {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"namespace": ns, "name": name},
		"data":     data,
	}}
}

// kubeadmClusterInfo is kube-public/cluster-info as kubeadm writes it: a
// kubeconfig with one unnamed cluster and no users.
func kubeadmClusterInfo(server string) runtime.Object {
	return configMap("kube-public", "cluster-info", map[string]any{"kubeconfig": `apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==
    server: ` + server + `
  name: ""
contexts: null
current-context: ""
kind: Config
preferences: {}
users: null
`})
}

// kubeadmKubeProxy is kube-system/kube-proxy as kubeadm writes it: the
// config and a kubeconfig whose server is the control plane endpoint.
func kubeadmKubeProxy(server string) runtime.Object {
	return configMap("kube-system", "kube-proxy", map[string]any{
		"config.conf": "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: nftables\n",
		"kubeconfig.conf": `apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt
    server: ` + server + `
  name: default
contexts:
- context:
    cluster: default
    namespace: default
    user: default
  name: default
current-context: default
users:
- name: default
  user:
    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
`})
}

// renderAgainst renders the chart for `helm install` into kube-system with
// the given values, against a cluster holding objs; it returns the Linux
// ConfigMap's data and NOTES.
func renderAgainst(t *testing.T, values map[string]any, objs ...runtime.Object) (map[string]any, string) {
	t.Helper()
	ch, err := loader.Load(chart)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := chartutil.ToRenderValuesWithSchemaValidation(ch, values,
		common.ReleaseOptions{Name: "crossproxy", Namespace: "kube-system", IsInstall: true}, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	cl := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{configMaps: "ConfigMapList"}, objs...)
	out, err := engine.RenderWithClientProvider(ch, vals, fakeCluster{cl})
	if err != nil {
		t.Fatal(err)
	}
	cm := objects(t, out["crossproxy/templates/linux.yaml"])["ConfigMap/kube-system/crossproxy-linux"]
	return cm["data"].(map[string]any), out["crossproxy/templates/NOTES.txt"]
}

// TestAPIServerFound: with apiServer.host unset, the chart gives the pods the
// API server's real address from kubeadm's cluster-info, else kube-proxy's
// kubeconfig, else what the release's ConfigMap held before, and NOTES says
// which; values win over all of them; with nothing to find, no address and
// NOTES says so.
func TestAPIServerFound(t *testing.T) {
	cases := []struct {
		name             string
		values           map[string]any
		objs             []runtime.Object
		host, port, note string
	}{
		{"cluster-info, a DNS name", nil, []runtime.Object{kubeadmClusterInfo("https://cp.example.internal:6443"), kubeadmKubeProxy("https://192.0.2.10:6443")},
			"cp.example.internal", "6443", "kube-public/cluster-info ConfigMap (server https://cp.example.internal:6443)"},
		{"kube-proxy's kubeconfig, IPv6", nil, []runtime.Object{kubeadmKubeProxy("https://[fd00:201::1]:6443")},
			"fd00:201::1", "6443", "kube-proxy's kubeconfig (kube-system/kube-proxy ConfigMap)"},
		{"no port means 443", nil, []runtime.Object{kubeadmClusterInfo("https://api.example.com")},
			"api.example.com", "443", "cluster-info"},
		{"after a takeover: the release's own ConfigMap", nil,
			[]runtime.Object{configMap("kube-system", "crossproxy-linux", map[string]any{"apiserver-host": "10.201.0.1", "apiserver-port": "6443"})},
			"10.201.0.1", "6443", "this release's ConfigMap crossproxy-linux, as before"},
		{"values win", map[string]any{"apiServer": map[string]any{"host": "192.0.2.99", "port": 443}},
			[]runtime.Object{kubeadmClusterInfo("https://cp.example.internal:6443")},
			"192.0.2.99", "443", "the values apiServer.host and apiServer.port"},
		{"a server that is not https is not taken", nil, []runtime.Object{kubeadmClusterInfo("http://cp:8080")}, "", "", "API server: not found"},
		{"nothing to find", nil, nil, "", "", "API server: not found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data, notes := renderAgainst(t, c.values, c.objs...)
			if data["apiserver-host"] != nil && c.host == "" || c.host != "" && (data["apiserver-host"] != c.host || data["apiserver-port"] != c.port) {
				t.Errorf("apiserver-host %v apiserver-port %v, want %q %q", data["apiserver-host"], data["apiserver-port"], c.host, c.port)
			}
			if !strings.Contains(notes, c.note) {
				t.Errorf("NOTES does not say %q:\n%s", c.note, notes)
			}
			if c.host != "" && !strings.Contains(notes, c.host+":"+c.port) {
				t.Errorf("NOTES does not name %s:%s:\n%s", c.host, c.port, notes)
			}
		})
	}
}
