package manifest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crossproxy/crossproxy/platform"
)

// Watcher follows a set of manifest files and feeds their changes to a Sink,
// standing in for the API server in standalone mode (labs, end-to-end tests).
// It polls: manifests are small and polling needs no extra dependency.
// A file that fails to parse is reported and the previous objects stay in
// force, so a half-written edit never removes working rules.
type Watcher struct {
	Paths    []string
	NodeName string
	Interval time.Duration
	Sink     platform.ObjectSink
	Log      logrus.FieldLogger
	// OnChange is called after changes were fed to the Sink (the runner's Trigger).
	OnChange func()

	digest   [32]byte
	services map[types.NamespacedName][]byte
	slices   map[types.NamespacedName][]byte
	node     []byte
}

// Load reads the files once and feeds the Sink. It returns an error when the
// files cannot be read or parsed, or when the node is not among them; the
// first load must succeed for standalone mode to start.
func (w *Watcher) Load() error {
	changed, err := w.poll()
	if err != nil {
		return err
	}
	if changed && w.OnChange != nil {
		w.OnChange()
	}
	return nil
}

// Run polls until ctx is done.
func (w *Watcher) Run(ctx context.Context) {
	interval := w.Interval
	if interval <= 0 {
		interval = 500 * time.Millisecond
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var lastErr string
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		changed, err := w.poll()
		if err != nil {
			if err.Error() != lastErr {
				w.Log.WithError(err).Error("manifests rejected; keeping the previous objects")
				lastErr = err.Error()
			}
			continue
		}
		lastErr = ""
		if changed && w.OnChange != nil {
			w.OnChange()
		}
	}
}

// poll reloads the files when their contents changed and feeds the differences.
func (w *Watcher) poll() (bool, error) {
	files, err := expand(w.Paths)
	if err != nil {
		return false, err
	}
	h := sha256.New()
	contents := make(map[string][]byte, len(files))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return false, fmt.Errorf("read manifest: %w", err)
		}
		contents[f] = data
		fmt.Fprintf(h, "%s\x00%d\x00", f, len(data))
		h.Write(data)
	}
	var digest [32]byte
	copy(digest[:], h.Sum(nil))
	if w.services != nil && digest == w.digest {
		return false, nil
	}
	set := &Set{}
	for _, f := range files {
		if err := set.add(f, contents[f]); err != nil {
			return false, err
		}
	}
	node, err := set.Node(w.NodeName)
	if err != nil {
		return false, err
	}
	w.digest = digest
	w.apply(set, node)
	return true, nil
}

func (w *Watcher) apply(set *Set, node *v1.Node) {
	if nb := mustJSON(node); !bytes.Equal(nb, w.node) {
		w.node = nb
		w.Sink.SetNode(node)
	}
	svcs := make(map[types.NamespacedName][]byte, len(set.Services))
	for _, s := range set.Services {
		key := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
		b := mustJSON(s)
		svcs[key] = b
		if !bytes.Equal(w.services[key], b) {
			w.Sink.UpsertService(s)
		}
	}
	for key := range w.services {
		if _, ok := svcs[key]; !ok {
			w.Sink.DeleteService(&v1.Service{ObjectMeta: objectMeta(key)})
		}
	}
	w.services = svcs
	slices := make(map[types.NamespacedName][]byte, len(set.Slices))
	for _, s := range set.Slices {
		key := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
		b := mustJSON(s)
		slices[key] = b
		if !bytes.Equal(w.slices[key], b) {
			w.Sink.UpsertSlice(s)
		}
	}
	for key, old := range w.slices {
		if _, ok := slices[key]; !ok {
			var prev discovery.EndpointSlice
			if json.Unmarshal(old, &prev) != nil {
				prev.ObjectMeta = objectMeta(key)
			}
			w.Sink.DeleteSlice(&prev)
		}
	}
	w.slices = slices
}

// mustJSON encodes an object for change detection. Objects decoded from
// JSON always encode again; should one not, it compares as changed every time,
// which costs a resync but never loses an update.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		return []byte(err.Error() + time.Now().String())
	}
	return b
}

func objectMeta(key types.NamespacedName) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}
}
