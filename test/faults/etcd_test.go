//go:build faults && linux

package faults

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"
)

// etcdURL finds the client URL of the harness's etcd from its process's
// command line (the etcd whose --data-dir is in the harness's Dir): the
// suite writes there what an old or buggy API server let through, which the
// API server's validation refuses today but serves as stored.
func etcdURL(t testing.TB, n *node) string {
	t.Helper()
	dataDir := filepath.Join(n.api.Dir, "etcd-data")
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		raw, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(string(raw), "\x00")
		var dir, url string
		for i := 0; i+1 < len(args); i++ {
			switch args[i] {
			case "--data-dir":
				dir = args[i+1]
			case "--listen-client-url":
				url = args[i+1]
			}
		}
		if dir == dataDir && url != "" {
			return url
		}
	}
	t.Fatalf("no etcd process with --data-dir %s", dataDir)
	return ""
}

// etcdCall posts one request to etcd's JSON gateway.
func etcdCall(t testing.TB, base, path string, req any) map[string]any {
	t.Helper()
	body, _ := json.Marshal(req)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Post(base+path, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("etcd %s: %v", path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("etcd %s: %s: %s", path, resp.Status, out)
	}
	var m map[string]any
	_ = json.Unmarshal(out, &m)
	return m
}

// store writes obj (a Service or an EndpointSlice) straight into etcd,
// where the API server keeps it, bypassing its validation: the API server
// decodes what it finds and serves it to watches and lists as it is.
func store(t testing.TB, n *node, obj runtime.Object) {
	t.Helper()
	key, value := etcdEntry(t, obj)
	etcdCall(t, etcdURL(t, n), "/v3/kv/put", map[string]string{
		"key": base64.StdEncoding.EncodeToString([]byte(key)), "value": base64.StdEncoding.EncodeToString(value)})
}

// etcdEntry is the key and value the API server keeps obj under.
func etcdEntry(t testing.TB, obj runtime.Object) (string, []byte) {
	t.Helper()
	gvks, _, err := scheme.Scheme.ObjectKinds(obj)
	if err != nil {
		t.Fatal(err)
	}
	obj.GetObjectKind().SetGroupVersionKind(gvks[0])
	acc := obj.(interface {
		GetNamespace() string
		GetName() string
		SetUID(types.UID)
	})
	acc.SetUID(types.UID(fmt.Sprintf("xpf-%s-%d", acc.GetName(), time.Now().UnixNano())))
	resource := map[string]string{"Service": "services/specs", "EndpointSlice": "endpointslices"}[gvks[0].Kind]
	value, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("/registry/%s/%s/%s", resource, acc.GetNamespace(), acc.GetName()), value
}

// storeMany writes objs into etcd as store does, a hundred to a
// transaction (etcd allows 128).
func storeMany(t testing.TB, n *node, objs []runtime.Object) {
	t.Helper()
	base := etcdURL(t, n)
	for i := 0; i < len(objs); i += 100 {
		var ops []map[string]any
		for _, obj := range objs[i:min(i+100, len(objs))] {
			key, value := etcdEntry(t, obj)
			ops = append(ops, map[string]any{"requestPut": map[string]string{
				"key": base64.StdEncoding.EncodeToString([]byte(key)), "value": base64.StdEncoding.EncodeToString(value)}})
		}
		etcdCall(t, base, "/v3/kv/txn", map[string]any{"success": ops})
	}
}

// bulkIP is the ClusterIP of bulk Service i: 10.96.128.0/17 of the
// harness's 10.96.0.0/16, which its allocator has not handed out.
func bulkIP(i int) string { return fmt.Sprintf("10.96.%d.%d", 128+i/250, 1+i%250) }

// bulkServices are count ClusterIP Services named prefix-NNNNN (port 80 to
// 8080) with a slice each, Service i served by pod i%3.
func bulkServices(n *node, prefix string, count int) []runtime.Object {
	var objs []runtime.Object
	for i := range count {
		name := fmt.Sprintf("%s-%05d", prefix, i)
		objs = append(objs, &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", CreationTimestamp: metav1.Now()},
			Spec: v1.ServiceSpec{Type: v1.ServiceTypeClusterIP, ClusterIP: bulkIP(i), ClusterIPs: []string{bulkIP(i)},
				IPFamilies: []v1.IPFamily{v1.IPv4Protocol}, SessionAffinity: v1.ServiceAffinityNone,
				Ports: []v1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: v1.ProtocolTCP}}}})
		objs = append(objs, n.slice(name, name+"-1", podAddrs[i%3]))
	}
	return objs
}

// bulkAnswers connects to the first, a middle and the last of count bulk
// Services and returns how many answered from their pod, and what each did.
func bulkAnswers(n *node, count int) (int, string) {
	ok, got := 0, []string{}
	for _, i := range []int{0, count / 2, count - 1} {
		b, err := n.lab.backendOf(net.JoinHostPort(bulkIP(i), "80"), 500*time.Millisecond)
		if err == nil && b == podAddrs[i%3] {
			ok++
		}
		got = append(got, fmt.Sprintf("%s→%q", bulkIP(i), b))
	}
	return ok, strings.Join(got, " ")
}
