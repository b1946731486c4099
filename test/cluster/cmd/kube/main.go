// Command kube is the test cluster's Kubernetes components from
// k8s.io/kubernetes v1.37.2 in one binary, chosen by the name it is run as
// (build.sh links kubelet, kube-controller-manager, kube-scheduler, kube-proxy and kubectl
// to it) or by its first argument. One binary links once instead of four
// times, which is most of a warm rebuild on a loaded machine; the packages
// are the same as in the separate upstream mains.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	_ "time/tzdata" // CronJob time zones, as upstream's controller manager does.

	"github.com/spf13/cobra"
	_ "k8s.io/client-go/plugin/pkg/client/auth"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	kcm "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	kubeproxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

var commands = map[string]func() *cobra.Command{
	"kubelet":                 func() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) },
	"kube-controller-manager": kcm.NewControllerManagerCommand,
	"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
	// kube-proxy is the reference the conformance run compares crossproxy
	// against, on the same cluster.
	"kube-proxy": kubeproxy.NewProxyCommand,
}

func main() {
	name := filepath.Base(os.Args[0])
	if _, ok := commands[name]; !ok && name != "kubectl" && len(os.Args) > 1 {
		// kube COMMAND ARGS...: as if run by that name.
		name = os.Args[1]
		os.Args = os.Args[1:]
	}
	if name == "kubectl" {
		// Verbosity before the command is built, as upstream does, so
		// plugin and kuberc handling log at the requested level.
		_, _ = logs.GlogSetter(kubectl.GetLogVerbosity(os.Args))
		if err := cli.RunNoErrOutput(kubectl.NewDefaultKubectlCommand()); err != nil {
			kubectlutil.CheckErr(err)
		}
		return
	}
	newCmd, ok := commands[name]
	if !ok {
		fmt.Fprintln(os.Stderr, "usage: kube kubelet|kube-controller-manager|kube-scheduler|kubectl ARGS...")
		os.Exit(2)
	}
	os.Exit(cli.Run(newCmd()))
}
