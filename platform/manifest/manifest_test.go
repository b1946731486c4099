package manifest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	logrustest "github.com/sirupsen/logrus/hooks/test"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

const objects = `# a comment-only document is skipped
---
apiVersion: v1
kind: Node
metadata: {name: node-a}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  clusterIP: 10.96.0.10
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-abc
  namespace: default
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
endpoints: [{addresses: [10.0.1.5]}]
ports: [{name: http, port: 8080}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: other}
`

// tempDir is t.TempDir without its failing cleanup under Wine 8, where
// os.RemoveAll does not work: these tests also run as Windows binaries there.
func tempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "manifest-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func write(t *testing.T, dir, name, data string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadDirectory(t *testing.T) {
	dir := tempDir(t)
	write(t, dir, "a.yaml", objects)
	write(t, dir, "b.json", `{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Node","metadata":{"name":"node-b"}}]}`)
	write(t, dir, "ignored.txt", "not a manifest")
	set, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Services) != 1 || len(set.Slices) != 1 || len(set.Nodes) != 2 {
		t.Fatalf("got %d services, %d slices, %d nodes", len(set.Services), len(set.Slices), len(set.Nodes))
	}
	if len(set.Ignored) != 1 || !strings.Contains(set.Ignored[0], "Deployment") {
		t.Fatalf("ignored: %v", set.Ignored)
	}
	if _, err := set.Node("node-b"); err != nil {
		t.Fatal(err)
	}
	if _, err := set.Node("nope"); err == nil || !strings.Contains(err.Error(), "node-a") {
		t.Fatalf("missing node error should list the nodes found: %v", err)
	}
}

func TestLoadErrorsNameFileDocumentAndField(t *testing.T) {
	for name, tc := range map[string]struct{ data, want string }{
		"unknown field": {
			data: "apiVersion: v1\nkind: Node\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {portz: []}\n",
			want: `document 2 (Service): unknown or duplicate field`,
		},
		"wrong type": {
			data: "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {ports: [{port: eighty}]}\n",
			want: "document 1 (Service)",
		},
		"no kind":  {data: "metadata: {name: s}\n", want: "document 1: field kind: missing"},
		"bad yaml": {data: "kind: [\n", want: "document 1"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(tc.data))
			if err == nil || !strings.Contains(err.Error(), "f.yaml") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to name f.yaml and contain %q", err, tc.want)
			}
		})
	}
	if _, err := Load("/nonexistent/x.yaml"); err == nil {
		t.Fatal("missing path must fail")
	}
}

// recorder is a Sink that remembers what it was told.
type recorder struct {
	mu     sync.Mutex
	nodes  int
	upSvc  []string
	delSvc []string
	upSl   []string
	delSl  []*discovery.EndpointSlice
}

func (r *recorder) SetNode(*v1.Node) { r.mu.Lock(); r.nodes++; r.mu.Unlock() }
func (r *recorder) UpsertService(s *v1.Service) {
	r.mu.Lock()
	r.upSvc = append(r.upSvc, s.Name)
	r.mu.Unlock()
}
func (r *recorder) DeleteService(s *v1.Service) {
	r.mu.Lock()
	r.delSvc = append(r.delSvc, s.Name)
	r.mu.Unlock()
}
func (r *recorder) UpsertSlice(s *discovery.EndpointSlice) {
	r.mu.Lock()
	r.upSl = append(r.upSl, s.Name)
	r.mu.Unlock()
}
func (r *recorder) DeleteSlice(s *discovery.EndpointSlice) {
	r.mu.Lock()
	r.delSl = append(r.delSl, s)
	r.mu.Unlock()
}

func TestWatcherFeedsDifferencesAndKeepsObjectsOnBadFile(t *testing.T) {
	dir := tempDir(t)
	p := write(t, dir, "objs.yaml", objects)
	rec := &recorder{}
	log, hook := logrustest.NewNullLogger()
	rejected := func() bool {
		for _, e := range hook.AllEntries() {
			if strings.Contains(e.Message, "manifests rejected") {
				return true
			}
		}
		return false
	}
	changes := make(chan struct{}, 10)
	w := &Watcher{Paths: []string{dir}, NodeName: "node-a", Interval: 10 * time.Millisecond, Sink: rec, Log: log,
		OnChange: func() { changes <- struct{}{} }}
	if err := w.Load(); err != nil {
		t.Fatal(err)
	}
	<-changes
	if rec.nodes != 1 || len(rec.upSvc) != 1 || len(rec.upSl) != 1 {
		t.Fatalf("first load: %+v", rec)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)

	// A broken edit is rejected: nothing is deleted. The check waits for the
	// watcher's rejection, so a slow machine cannot pass it before the
	// watcher has even read the file.
	if err := os.WriteFile(p, []byte("kind: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !rejected() {
		if time.Now().After(deadline) {
			t.Fatal("the broken file was never rejected")
		}
		time.Sleep(5 * time.Millisecond)
	}
	rec.mu.Lock()
	if len(rec.delSvc) != 0 || len(rec.delSl) != 0 {
		t.Fatalf("a file that fails to parse must not remove objects: %+v", rec)
	}
	rec.mu.Unlock()

	// Removing the slice and changing the Service feeds exactly that.
	edited := strings.Replace(objects[:strings.Index(objects, "apiVersion: discovery")], "port: 80,", "port: 81,", 1)
	if err := os.WriteFile(p, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changes:
	case <-time.After(3 * time.Second):
		t.Fatal("change not noticed")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.upSvc) != 2 || len(rec.delSl) != 1 || rec.nodes != 1 {
		t.Fatalf("after edit: services %v, deleted slices %d, node sets %d", rec.upSvc, len(rec.delSl), rec.nodes)
	}
	if rec.delSl[0].Labels[discovery.LabelServiceName] != "web" {
		t.Fatalf("a deleted slice must keep its service-name label so the tracker finds its Service")
	}
}
