// Command clusterdns is the test cluster's DNS: the Service names of
// Kubernetes' DNS specification that the e2e Service specs resolve
// (<service>.<namespace>.svc.<domain>: a ClusterIP, a headless Service's
// ready endpoints, an ExternalName's CNAME), from the API server's Services
// and EndpointSlices. conformance.sh runs it in xpc-cp on 10.201.0.1:53,
// the address the kubelets name as clusterDNS, so a pod's name lookups do
// not depend on the proxy under test. It is not CoreDNS: no upstream, no
// pod records, no SRV; names outside the domain are refused.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of a client that may list Services and EndpointSlices")
	listen := flag.String("listen", "10.201.0.1:53", "UDP and TCP address to answer on")
	domain := flag.String("domain", "cluster.local", "the cluster's DNS domain")
	hosts := hostFlag{}
	flag.Var(hosts, "host", "NAME=IPv4: also answer this name outside the domain (repeatable), as a node's own resolver would")
	flag.Parse()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, logger, *kubeconfig, *listen, *domain, hosts); err != nil {
		logger.Error("clusterdns", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, logger *slog.Logger, kubeconfig, listen, domain string, hosts hostFlag) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	factory := informers.NewSharedInformerFactory(client, 10*time.Minute)
	services := factory.Core().V1().Services()
	slices := factory.Discovery().V1().EndpointSlices()
	r := &resolver{domain: domain, services: services.Lister(), slices: slices.Lister(), hosts: hosts}
	// The informers are created before Start, which only starts those.
	svcInformer, sliceInformer := services.Informer(), slices.Informer()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), svcInformer.HasSynced, sliceInformer.HasSynced) {
		return fmt.Errorf("informer caches did not sync")
	}
	udp, err := net.ListenPacket("udp", listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	tcp, err := net.Listen("tcp", listen)
	if err != nil {
		udp.Close()
		return fmt.Errorf("listen: %w", err)
	}
	go func() {
		<-ctx.Done()
		udp.Close()
		tcp.Close()
	}()
	logger.Info("serving", "listen", listen, "domain", domain)
	go serveTCP(tcp, r, logger)
	serveUDP(udp, r, logger)
	return nil
}

// hostFlag collects --host NAME=IPv4 records, keyed as lookup compares
// names: lower case with the final dot.
type hostFlag map[string]netip.Addr

func (h hostFlag) String() string { return fmt.Sprint(map[string]netip.Addr(h)) }

func (h hostFlag) Set(v string) error {
	name, ip, ok := strings.Cut(v, "=")
	a, err := netip.ParseAddr(ip)
	if !ok || name == "" || err != nil || !a.Is4() {
		return fmt.Errorf("--host %q: want NAME=IPv4", v)
	}
	h[strings.ToLower(strings.TrimSuffix(name, "."))+"."] = a
	return nil
}
