package main

// Temporary: pins the dependencies every package will use until their real
// importers land. Removed once they do.
import (
	_ "github.com/Microsoft/hcsshim/hcn"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/sirupsen/logrus"
	_ "github.com/spf13/cobra"
	_ "k8s.io/client-go/informers"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/kubernetes/scheme"
	_ "k8s.io/client-go/tools/clientcmd"
	_ "k8s.io/client-go/tools/record"
	_ "sigs.k8s.io/yaml"
)
