//go:build conformance

package e2enet

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/logs"
	"k8s.io/component-base/version"
	"k8s.io/klog/v2"
	utilnet "k8s.io/utils/net"

	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"
	e2enode "k8s.io/kubernetes/test/e2e/framework/node"

	// Client auth plugins and the logging flags, as upstream's e2e.test has.
	_ "k8s.io/client-go/plugin/pkg/client/auth"
	_ "k8s.io/component-base/logs/testinit"

	// Constants frozen before the specs are defined.
	_ "k8s.io/kubernetes/test/e2e/feature"

	// The only specs: SIG Network's.
	_ "k8s.io/kubernetes/test/e2e/network"

	// The framework reconfigured as upstream's e2e.test reconfigures it
	// (failure dumps, metrics grabbing, node checks, gomega formatting).
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
	_ "k8s.io/kubernetes/test/e2e/framework/metrics/init"
	_ "k8s.io/kubernetes/test/e2e/framework/node/init"
	_ "k8s.io/kubernetes/test/utils/ktesting/format"
)

// TestMain registers upstream's e2e flags (so conformance.sh passes the
// same command line as to e2e.test) and lets the framework act on them
// before any spec runs.
func TestMain(m *testing.M) {
	showVersion := flag.Bool("version", false, "print the Kubernetes version the suite was built from")
	config.CopyFlags(config.Flags, flag.CommandLine)
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	flag.Parse()
	if *showVersion {
		fmt.Println(version.Get())
		os.Exit(0)
	}
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "e2enet: unknown arguments %q\n", flag.Args())
		os.Exit(2)
	}
	framework.AfterReadingAllFlags(&framework.TestContext)
	os.Exit(m.Run())
}

// The suite setup of upstream's e2e.go that the network specs depend on:
// every node schedulable, the node count known (specs skip on fewer than
// two), and the cluster's IP family. Upstream also waits for kube-system's
// pods and DaemonSets; the proxy under test is deployed and checked by
// conformance.sh before the suite starts.
var _ = ginkgo.SynchronizedBeforeSuite(func(ctx context.Context) []byte {
	c, err := framework.LoadClientset()
	framework.ExpectNoError(err, "load the client")
	timeouts := framework.NewTimeoutContext()
	framework.ExpectNoError(e2enode.WaitForAllNodesSchedulable(ctx, c, timeouts.NodeSchedulable))
	if framework.TestContext.CloudConfig.NumNodes == framework.DefaultNumNodes {
		nodes, err := e2enode.GetReadySchedulableNodes(ctx, c)
		framework.ExpectNoError(err)
		framework.TestContext.CloudConfig.NumNodes = len(nodes.Items)
	}
	if v, err := c.Discovery().ServerVersion(); err == nil {
		framework.Logf("e2e suite %s, kube-apiserver %s", version.Get().GitVersion, v.GitVersion)
	}
	return nil
}, func(ctx context.Context, _ []byte) {
	c, err := framework.LoadClientset()
	framework.ExpectNoError(err, "load the client")
	svc, err := c.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
	framework.ExpectNoError(err, "get the kubernetes Service")
	framework.TestContext.IPFamily = "ipv4"
	if utilnet.IsIPv6String(svc.Spec.ClusterIP) {
		framework.TestContext.IPFamily = "ipv6"
	}
	framework.Logf("cluster IP family: %s", framework.TestContext.IPFamily)
})

// TestNetwork runs the selected network specs through Ginkgo, with the
// framework's configuration (randomized order, JUnit under --report-dir).
func TestNetwork(t *testing.T) {
	// InitLogs turns contextual logging off; upstream turns it back on.
	logs.InitLogs()
	defer logs.FlushLogs()
	klog.EnableContextualLogging(true)
	gomega.RegisterFailHandler(framework.Fail)
	suiteConfig, reporterConfig := framework.CreateGinkgoConfig()
	ginkgo.RunSpecs(t, "Kubernetes e2e network suite", suiteConfig, reporterConfig)
}
