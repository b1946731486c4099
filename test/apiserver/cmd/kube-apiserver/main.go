// Command kube-apiserver is the upstream Kubernetes API server, built from
// k8s.io/kubernetes so that the integration tests run against the real thing.
package main

import (
	"os"
	_ "time/tzdata" // CronJob time zones, as upstream's main does.

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
