package main

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestDecideCleanup: the rules go only when the DaemonSet this pod saw is
// being deleted or gone. Each case is a way a crossproxy pod is stopped in a
// real cluster and what the watch and the last question to the API server
// then report.
func TestDecideCleanup(t *testing.T) {
	const uid = types.UID("ds-1")
	seen := ownerObservation{Seen: true, UID: uid}
	forbidden := errors.New(`daemonsets.apps "crossproxy-linux" is forbidden`)
	cases := []struct {
		name  string
		seen  ownerObservation
		now   ownerNow
		clean bool
	}{
		// Stops that must keep the rules.
		{"rolling restart (kubectl rollout restart): the DaemonSet stays", seen, ownerNow{UID: uid}, false},
		{"helm upgrade / kubectl apply of a new image: the DaemonSet stays", seen, ownerNow{UID: uid}, false},
		{"kubectl drain --ignore-daemonsets, or an eviction: the DaemonSet stays", seen, ownerNow{UID: uid}, false},
		{"node shutdown: the API server unreachable, no deletion seen", seen, ownerNow{Err: errors.New("dial tcp 10.201.0.1:6443: connect: connection refused")}, false},
		{"the ServiceAccount's RBAC removed first, no deletion seen", seen, ownerNow{Err: forbidden}, false},
		{"wrong --daemonset: never seen, and not found", ownerObservation{}, ownerNow{NotFound: true}, false},
		{"never seen (no access), deleting now", ownerObservation{}, ownerNow{UID: uid, Deleting: true}, false},
		{"kubectl replace --force: recreated under the same name", ownerObservation{Seen: true, UID: uid, Deleting: true}, ownerNow{UID: "ds-2"}, false},
		{"opt-out annotation seen, then deleted", ownerObservation{Seen: true, UID: uid, Deleting: true, OptOut: true}, ownerNow{NotFound: true}, false},
		{"opt-out annotation on the object being deleted", seen, ownerNow{UID: uid, Deleting: true, OptOut: true}, false},
		// Stops that must remove them.
		{"helm uninstall / kubectl delete ds (background): gone", seen, ownerNow{NotFound: true}, true},
		{"kubectl delete ds --cascade=foreground: deletion timestamp", seen, ownerNow{UID: uid, Deleting: true}, true},
		{"kubectl delete -f (RBAC first): deletion seen, then forbidden", ownerObservation{Seen: true, UID: uid, Deleting: true}, ownerNow{Err: forbidden}, true},
	}
	for _, c := range cases {
		clean, why := decideCleanup(c.seen, c.now)
		if clean != c.clean {
			t.Errorf("%s: clean=%v (%s), want %v", c.name, clean, why, c.clean)
		}
		if why == "" {
			t.Errorf("%s: no reason given", c.name)
		}
	}
}

func ds(uid types.UID, deleting bool, annotations map[string]string) *appsv1.DaemonSet {
	d := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "crossproxy-linux", Namespace: "kube-system", UID: uid, Annotations: annotations}}
	if deleting {
		now := metav1.Now()
		d.DeletionTimestamp = &now
	}
	return d
}

// TestWatcherObservation: the informer's events become the observation the
// decision reads: a deletion timestamp or a delete event mark it deleting, the
// opt-out follows the last object, and a DaemonSet recreated under the same
// name does not replace the one that owns this pod.
func TestWatcherObservation(t *testing.T) {
	w := &watcher{}
	if w.observation().Seen {
		t.Fatal("seen before any event")
	}
	w.saw(ds("a", false, nil), false)
	if o := w.observation(); !o.Seen || o.UID != "a" || o.Deleting {
		t.Fatalf("after add: %+v", o)
	}
	w.saw(ds("a", false, map[string]string{optOutAnnotation: "false"}), false)
	if !w.observation().OptOut {
		t.Fatal("opt-out annotation not seen")
	}
	w.saw(ds("a", false, nil), false)
	if w.observation().OptOut {
		t.Fatal("opt-out annotation removed but still seen")
	}
	w.saw(ds("b", false, nil), false)
	if o := w.observation(); o.UID != "a" {
		t.Fatalf("a recreated DaemonSet replaced the owner: %+v", o)
	}
	w.saw(ds("a", false, nil), true)
	if !w.observation().Deleting {
		t.Fatal("delete event not seen as deleting")
	}
	w2 := &watcher{}
	saw(w2, ds("c", true, nil), false)
	if o := w2.observation(); !o.Deleting {
		t.Fatalf("deletion timestamp not seen: %+v", o)
	}
}

// TestLocalAddress: the health bind address of the shipped configs becomes a
// loopback address to dial.
func TestLocalAddress(t *testing.T) {
	for in, want := range map[string]string{"0.0.0.0:10256": "127.0.0.1:10256", "[::]:10356": "[::1]:10356",
		"10.0.0.5:10256": "10.0.0.5:10256", ":10256": "127.0.0.1:10256", "": ""} {
		if got := localAddress(in); got != want {
			t.Errorf("localAddress(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestWaitClosed: the cleanup waits while the proxy still answers on its
// health port and goes ahead once the port is closed; a proxy that never
// stops gets no cleanup.
func TestWaitClosed(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	addr := l.Addr().String()
	if err := waitClosed(context.Background(), addr, 300*time.Millisecond); !errors.Is(err, errProxyRunning) {
		t.Fatalf("proxy listening: %v, want errProxyRunning", err)
	}
	time.AfterFunc(300*time.Millisecond, func() { _ = l.Close() })
	start := time.Now()
	if err := waitClosed(context.Background(), addr, 5*time.Second); err != nil {
		t.Fatalf("proxy stopped: %v", err)
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Errorf("returned after %v, before the port closed", d)
	}
	if err := waitClosed(context.Background(), addr, time.Second); err != nil {
		t.Errorf("nothing listening: %v", err)
	}
}

// TestCleanupOnDeleteFlags: a malformed --daemonset stops the command
// before it connects anywhere.
func TestCleanupOnDeleteFlags(t *testing.T) {
	err := runMain([]string{"cleanup-on-delete", "--daemonset", "crossproxy-linux"})
	if err == nil || !strings.Contains(err.Error(), "NAMESPACE/NAME") {
		t.Fatalf("got %v", err)
	}
}
