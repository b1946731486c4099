package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/crossproxy/crossproxy/platform"
	"github.com/crossproxy/crossproxy/platform/config"
	"github.com/crossproxy/crossproxy/platform/kube"
	"github.com/crossproxy/crossproxy/platform/logging"
)

// optOutAnnotation on the DaemonSet keeps the rules when it is deleted: for
// moving a release (plain manifests to Helm) without a gap in Service traffic.
const optOutAnnotation = "crossproxy.io/cleanup-on-delete"

// The cleanup-on-delete command is the uninstall half of the DaemonSets: a
// second container in each crossproxy pod that does nothing until the pod is
// stopped, and then removes this node's crossproxy rules only when the
// DaemonSet that owns the pod is being deleted. A rolling restart, an upgrade,
// a drain, an eviction or a node going away stop pods of a DaemonSet that
// stays, and leave the rules in force. Why a container of its own and not the
// proxy's SIGTERM handler, or a Helm hook: see installer/README.md,
// "Uninstall".
func newCleanupOnDeleteCommand() *cobra.Command {
	o := &cleanupOnDelete{}
	cmd := &cobra.Command{
		Use:   "cleanup-on-delete",
		Short: "In a crossproxy pod: on stop, remove this node's rules if (and only if) the owning DaemonSet is being deleted",
		Long: `cleanup-on-delete runs beside crossproxy in each DaemonSet pod. It watches the
DaemonSet named by --daemonset. When the pod is stopped (SIGTERM) it asks the API server
once more, and removes this node's crossproxy rules (as crossproxy cleanup does) only when
the DaemonSet it saw is gone or has a deletion timestamp; it first waits for the proxy
beside it to stop (its health port closed), so no sync puts the rules back. Any doubt
(the API unreachable and no deletion seen, the DaemonSet never seen, a DaemonSet of the
same name recreated, the annotation ` + optOutAnnotation + `: "false") keeps the rules.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return o.run(ctx, cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.daemonSet, "daemonset", "", "NAMESPACE/NAME of the DaemonSet that runs this pod")
	f.StringVar(&o.configFile, "config", "", "the proxy's config file: the nftables table or HNS network, the kubeconfig and the health address come from it")
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default $KUBECONFIG, else the in-cluster config)")
	f.DurationVar(&o.proxyStopWait, "proxy-stop-wait", 20*time.Second, "how long to wait for the proxy beside it to stop before cleaning; if it still answers then, nothing is removed")
	return cmd
}

type cleanupOnDelete struct {
	daemonSet     string
	configFile    string
	kubeconfig    string
	proxyStopWait time.Duration
}

// ownerObservation is what the watch has seen of the owning DaemonSet since
// the pod started.
type ownerObservation struct {
	// Seen: the DaemonSet existed while this pod ran (UID is its UID).
	Seen bool
	UID  types.UID
	// Deleting: it was seen with a deletion timestamp, or its deletion.
	Deleting bool
	// OptOut: the last seen object carried the opt-out annotation.
	OptOut bool
}

// ownerNow is the answer of the API server when the pod stops.
type ownerNow struct {
	// Err: the question could not be answered (unreachable, forbidden).
	Err error
	// NotFound: there is no DaemonSet of that name.
	NotFound bool
	// Else the object as it is.
	UID      types.UID
	Deleting bool
	OptOut   bool
}

// decideCleanup says whether a stopping pod removes this node's rules, and
// why. It removes them only when the DaemonSet this pod saw is being deleted
// or is gone; every stop of a pod whose DaemonSet stays (rolling restart,
// upgrade, drain, eviction, node shutdown) keeps them, and so does any
// doubt, because removing rules by mistake cuts a node's Service traffic
// while keeping them by mistake only leaves them frozen until a proxy runs.
func decideCleanup(seen ownerObservation, now ownerNow) (bool, string) {
	switch {
	case seen.OptOut || (now.Err == nil && !now.NotFound && now.OptOut):
		return false, "the DaemonSet carries " + optOutAnnotation + `: "false"`
	case !seen.Seen:
		return false, "the DaemonSet was never seen while this pod ran (wrong name, or no access): nothing proves it is being deleted"
	case now.Err != nil && seen.Deleting:
		return true, "the watch saw the DaemonSet being deleted (the API server cannot be asked again: " + now.Err.Error() + ")"
	case now.Err != nil:
		return false, "the API server cannot say whether the DaemonSet is being deleted: " + now.Err.Error()
	case now.NotFound:
		return true, "the DaemonSet is gone"
	case now.UID != seen.UID:
		return false, "a DaemonSet of the same name was created again: its pods take over the rules"
	case now.Deleting:
		return true, "the DaemonSet is being deleted"
	}
	return false, "the DaemonSet stays (a rolling restart, an upgrade, a drain, an eviction or a node stop)"
}

// optedOut reads the opt-out annotation.
func optedOut(ds *appsv1.DaemonSet) bool {
	return strings.EqualFold(ds.Annotations[optOutAnnotation], "false")
}

// watcher keeps the ownerObservation up to date from an informer on the one
// DaemonSet.
type watcher struct {
	mu  sync.Mutex
	obs ownerObservation
}

func (w *watcher) saw(ds *appsv1.DaemonSet, deleted bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.obs.Seen && ds.UID != w.obs.UID {
		// Recreated under the same name: only the first one owns this pod.
		return
	}
	w.obs.Seen, w.obs.UID = true, ds.UID
	w.obs.OptOut = optedOut(ds)
	if deleted || ds.DeletionTimestamp != nil {
		w.obs.Deleting = true
	}
}

func (w *watcher) observation() ownerObservation {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.obs
}

// run watches until ctx ends (the pod is stopped), then decides; background
// is the command's context, which outlives the signal, for the last steps.
func (o *cleanupOnDelete) run(ctx, background context.Context) error {
	log, err := logging.New(os.Stderr, "text", "info")
	if err != nil {
		return err
	}
	ns, name, ok := strings.Cut(o.daemonSet, "/")
	if !ok || ns == "" || name == "" {
		return fmt.Errorf("flag --daemonset: %q is not NAMESPACE/NAME", o.daemonSet)
	}
	entry := log.WithField("daemonset", o.daemonSet)
	backendCfg, healthAddr, kubeconfig, err := o.fromConfig()
	if err != nil {
		return err
	}
	restCfg, err := kube.ClientConfig(kubeconfig, 0, 0)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}

	w, stopWatch, err := startWatch(client, ns, name)
	if err != nil {
		return err
	}
	entry.Info("watching the DaemonSet: this node's rules are removed on stop only if it is being deleted")
	<-ctx.Done()
	stopWatch()
	clean, why := decideNow(background, client, ns, name, w)
	if !clean {
		entry.WithField("reason", why).Info("stopping; this node's rules stay")
		return nil
	}
	entry.WithField("reason", why).Info("stopping; removing this node's crossproxy rules once the proxy has stopped")
	if err := waitClosed(background, healthAddr, o.proxyStopWait); err != nil {
		entry.WithError(err).Warn("the proxy beside this container still runs; rules stay (it would put them back)")
		return nil
	}
	return cleanupNode(background, backendCfg, entry)
}

// startWatch starts an informer on the one DaemonSet ns/name that keeps w
// up to date; stop ends it.
func startWatch(client kubernetes.Interface, ns, name string) (w *watcher, stop func(), err error) {
	w = &watcher{}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}))
	inf := factory.Apps().V1().DaemonSets().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { saw(w, obj, false) },
		UpdateFunc: func(_, obj any) { saw(w, obj, false) },
		DeleteFunc: func(obj any) { saw(w, obj, true) },
	}); err != nil {
		return nil, nil, fmt.Errorf("watch DaemonSet %s/%s: %w", ns, name, err)
	}
	done := make(chan struct{})
	factory.Start(done)
	return w, func() { close(done); factory.Shutdown() }, nil
}

// decideNow asks the API server once more (5 s at most) and decides with
// what the watch saw.
func decideNow(ctx context.Context, client kubernetes.Interface, ns, name string, w *watcher) (bool, string) {
	askCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	now := ownerNow{}
	ds, err := client.AppsV1().DaemonSets(ns).Get(askCtx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		now.NotFound = true
	case err != nil:
		now.Err = err
	default:
		now.UID, now.Deleting, now.OptOut = ds.UID, ds.DeletionTimestamp != nil, optedOut(ds)
	}
	return decideCleanup(w.observation(), now)
}

func saw(w *watcher, obj any, deleted bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if ds, ok := obj.(*appsv1.DaemonSet); ok {
		w.saw(ds, deleted)
	}
}

// fromConfig reads the backend settings, the proxy's health address and the
// kubeconfig from the proxy's config file, as the proxy reads them.
func (o *cleanupOnDelete) fromConfig() (platform.BackendConfig, string, string, error) {
	cfg := config.Default(runtime.GOOS)
	if o.configFile != "" {
		var err error
		if cfg, err = config.Load(o.configFile, runtime.GOOS); err != nil {
			return platform.BackendConfig{}, "", "", err
		}
	}
	kubeconfig := o.kubeconfig
	if kubeconfig == "" {
		kubeconfig = cfg.Kubeconfig
	}
	return cfg.Backend, localAddress(cfg.HealthzBindAddress), kubeconfig, nil
}

// localAddress turns a bind address into one to dial on this host: an
// unspecified host (0.0.0.0, ::, "") becomes loopback of its family.
func localAddress(bind string) string {
	host, port, err := net.SplitHostPort(bind)
	if err != nil || bind == "" {
		return ""
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return net.JoinHostPort(host, port)
}

// errProxyRunning reports that the proxy still answers on its health port.
var errProxyRunning = errors.New("the proxy still answers on its health port")

// waitClosed waits until nothing accepts connections on addr (the proxy has
// exited), for at most wait. An empty addr (health server disabled) cannot be
// watched, so it waits the whole time, to let the proxy's own shutdown end.
func waitClosed(ctx context.Context, addr string, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	if addr == "" {
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		}
		return nil
	}
	for {
		c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
		if err != nil {
			return nil
		}
		_ = c.Close()
		if time.Now().After(deadline) {
			return fmt.Errorf("%s after %s: %w", addr, wait, errProxyRunning)
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("wait for the proxy to stop: %w", ctx.Err())
		}
	}
}

// cleanupNode removes everything crossproxy installed in this node's data
// plane, as `crossproxy cleanup`.
func cleanupNode(ctx context.Context, cfg platform.BackendConfig, log logrus.FieldLogger) error {
	cfg.Cleanup = true
	b, err := newBackend(cfg, log)
	if err != nil {
		return err
	}
	defer closeBackend(b, log)
	start := time.Now()
	if err := b.Cleanup(ctx); err != nil {
		return fmt.Errorf("cleanup %s: %w", b.Name(), err)
	}
	log.WithField("took", time.Since(start).Round(time.Millisecond).String()).Infof("removed crossproxy's %s state from this node", b.Name())
	return nil
}
