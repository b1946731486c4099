package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/crossproxy/crossproxy/platform"
	"github.com/crossproxy/crossproxy/platform/config"
	hns "github.com/crossproxy/crossproxy/platform_windows"
)

// hnsOptionTable is run's options for the Windows backend (HNS): those
// kube-proxy's Windows mode has, under the same names so its command lines
// carry over, and the CNI ones (flags only: a config file has no field for
// them).
func hnsOptionTable() []option {
	return []option{
		field("network-name", "Windows: the HNS network the load balancers attach to (default: the CNI configuration's, else the only Overlay or L2Bridge network)", stringFlag,
			func(c *config.Config) *string { return &c.Backend.NetworkName }),
		field("source-vip", "Windows: source address for load-balanced traffic on overlay networks", stringFlag,
			func(c *config.Config) *string { return &c.Backend.SourceVIP }),
		field("enable-dsr", "Windows: use direct server return where HNS supports it", boolFlag,
			func(c *config.Config) *bool { return &c.Backend.EnableDSR }),
		field("forward-healthcheck-vip", "Windows: forward the health-check port of each LoadBalancer ingress IP to the host (kube-proxy's flag), for cloud load balancers that probe the VIP", boolFlag,
			func(c *config.Config) *bool { return &c.Backend.ForwardHealthCheckVIP }),
		field("root-hnsendpoint-name", "Windows: the host's HNS endpoint the forwarded health checks go to (default cbr0, as kube-proxy)", stringFlag,
			func(c *config.Config) *string { return &c.Backend.RootHNSEndpointName }),
		field("hns-concurrency", "Windows: HNS calls in flight at most (default 1: kube-proxy has only ever called HNS serially; more is for measuring)", intFlag,
			func(c *config.Config) *int { return &c.Backend.HNSConcurrency }),
		always(field("cni-conf-dir", `Windows: where the node's CNI configuration is, which names the HNS network and its IPAM (default: C:\etc\cni\net.d, C:\Program Files\containerd\cni\conf, C:\k\cni\config)`, stringFlag,
			func(c *config.Config) *string { return &c.Backend.CNIConfDir })),
		always(field("cni-bin-dir", `Windows, overlay without a source VIP: where the IPAM plugin host-local is (default: CNI_PATH, C:\opt\cni\bin, C:\Program Files\containerd\cni\bin, C:\k\cni)`, stringFlag,
			func(c *config.Config) *string { return &c.Backend.CNIBinDir })),
		always(field("cni-network", "Windows, overlay without a source VIP: the CNI network name the pods' host-local reservations are kept under (default: the CNI configuration's, else the HNS network's name)", stringFlag,
			func(c *config.Config) *string { return &c.Backend.CNINetwork })),
		always(field("cni-ipam-data-dir", "Windows, overlay without a source VIP: host-local's dataDir (default: the CNI configuration's, else host-local's own)", stringFlag,
			func(c *config.Config) *string { return &c.Backend.CNIDataDir })),
	}
}

// nodeSourceVIP takes this node's source VIP from its Node annotation
// (hns.SourceVIPAnnotation) when neither the flag nor the config file gave
// one: one Node read at start (a changed annotation takes a restart). A
// Node that cannot be read is not fatal: the backend then finds the address
// itself.
func nodeSourceVIP(ctx context.Context, client kubernetes.Interface, nodeName string, b *platform.BackendConfig, log logrus.FieldLogger) {
	if runtime.GOOS != "windows" || b.SourceVIP != "" || client == nil {
		return
	}
	v, err := annotatedSourceVIP(ctx, client, nodeName)
	if err != nil {
		log.WithError(err).Warn("read this Node for its source VIP annotation; going on without it")
		return
	}
	if v != "" {
		b.SourceVIP, b.SourceVIPOrigin = v, "Node annotation "+hns.SourceVIPAnnotation
	}
}

// annotatedSourceVIP reads the Node's source VIP annotation ("" if unset).
// It lists the Node by name, as the informer does: the RBAC grants no get.
func annotatedSourceVIP(ctx context.Context, client kubernetes.Interface, nodeName string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", nodeName).String()})
	if err != nil {
		return "", fmt.Errorf("list Node %s: %w", nodeName, err)
	}
	for _, n := range nodes.Items {
		if n.Name == nodeName {
			return n.Annotations[hns.SourceVIPAnnotation], nil
		}
	}
	return "", fmt.Errorf("list Node %s: not found", nodeName)
}

// hnsSettings derives the Windows settings no option sets by itself: the
// health-check VIP's port from the healthz address, and where an explicit
// source VIP came from (the log and explain say it).
func hnsSettings(changed func(string) bool, cfg *config.Config) {
	cfg.Backend.HealthzPort = 0
	if _, p, err := net.SplitHostPort(cfg.HealthzBindAddress); err == nil {
		if n, err := strconv.ParseUint(p, 10, 16); err == nil {
			cfg.Backend.HealthzPort = uint16(n)
		}
	}
	switch {
	case changed("source-vip"):
		cfg.Backend.SourceVIPOrigin = "flag --source-vip"
	case cfg.Backend.SourceVIP != "":
		cfg.Backend.SourceVIPOrigin = "config file"
	}
}

// nodeCNI reads the node's CNI configuration (--cni-conf-dir, else the
// usual directories) and makes the IPAM the source VIP is reserved through:
// the configuration's plugin, name and dataDir, each overridden by its flag,
// found in --cni-bin-dir, else CNI_PATH and the usual bin directories. No
// configuration is no error: the network is then found in HNS, and the IPAM
// takes the HNS network's name.
func nodeCNI(b platform.BackendConfig, cniPath string, log logrus.FieldLogger) (*hns.CNIConfig, hns.CNIIPAM) {
	dirs := hns.CNIConfDirs
	if b.CNIConfDir != "" {
		dirs = []string{b.CNIConfDir}
	}
	conf, err := hns.ReadCNIConfig(dirs)
	ipam := hns.CNIIPAM{}
	if err != nil {
		log.WithError(err).Info("no CNI configuration read: the HNS network is found in HNS, host-local takes its name")
	} else {
		log.WithField("cni", conf.String()).Info("CNI configuration read")
		ipam = conf.IPAM(nil)
	}
	switch {
	case b.CNIBinDir != "":
		ipam.BinDirs = []string{b.CNIBinDir}
	default:
		ipam.BinDirs = append(filepath.SplitList(cniPath), hns.CNIBinDirs...)
	}
	if b.CNINetwork != "" {
		ipam.Network = b.CNINetwork
	}
	if b.CNIDataDir != "" {
		ipam.DataDir = b.CNIDataDir
	}
	return conf, ipam
}

// hostProcessConfigHint explains a config file missing at its path in a
// Windows HostProcess container (mountPoint is CONTAINER_SANDBOX_MOUNT_POINT)
// when the file is under the container's mount point instead: containerd
// before 1.7 mounts HostProcess volumes only there, while the DaemonSet
// needs them bind-mounted where the manifest says. Any other error is
// returned as it is.
func hostProcessConfigHint(path, mountPoint string, err error) error {
	if mountPoint == "" || !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	under := filepath.Join(mountPoint, strings.TrimPrefix(path, filepath.VolumeName(path)))
	if _, statErr := os.Stat(under); statErr != nil {
		return err
	}
	return fmt.Errorf("%w: the file is at %s, under the container's mount point: this containerd mounts HostProcess volumes only there "+
		"(containerd before 1.7); the DaemonSet needs containerd 1.7 or later", err, under)
}
