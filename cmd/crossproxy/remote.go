package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"

	"github.com/crossproxy/crossproxy/platform/debug"
	"github.com/crossproxy/crossproxy/platform/kube"
)

// remoteOptions are the flags of the commands that read the proxies of a
// cluster through the API server (status, explain of another node, bundle).
type remoteOptions struct {
	kubeconfig     string
	token          string
	tokenFile      string
	audience       string
	serviceAccount string
	parallel       int
	nodeTimeout    time.Duration
}

// bind adds the flags; explain already has --kubeconfig. nodeTimeout is the
// default of --node-timeout.
func (o *remoteOptions) bind(f *pflag.FlagSet, withKubeconfig bool, nodeTimeout time.Duration) {
	if withKubeconfig {
		f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default $KUBECONFIG, else the in-cluster config)")
	}
	f.StringVar(&o.token, "token", "", "bearer token the proxies' secure endpoints accept (audience --audience); default: one minted for --reader-service-account")
	f.StringVar(&o.tokenFile, "token-file", "", "read the bearer token from this file")
	f.StringVar(&o.audience, "audience", debug.DefaultAudience, "the audience of the minted token (the proxies' --secure-audience)")
	f.StringVar(&o.serviceAccount, "reader-service-account", debug.ReaderServiceAccount,
		"ServiceAccount, in the proxy pods' namespace, whose short-lived token is minted when no --token is given (needs create serviceaccounts/token on it)")
	f.IntVar(&o.parallel, "parallel", 16, "nodes asked at once")
	f.DurationVar(&o.nodeTimeout, "node-timeout", nodeTimeout, "a node's proxy that has not answered a request after this long is reported as not answering")
}

// connect lists the cluster's nodes and proxy pods and gets the token the
// endpoints accept: the one given, else one minted (TokenRequest, ten
// minutes) for the reader ServiceAccount of the proxy pods' namespace.
func (o *remoteOptions) connect(ctx context.Context) (*debug.Remote, []debug.Proxy, error) {
	if o.parallel < 1 {
		return nil, nil, fmt.Errorf("flag --parallel: %d is not a positive number", o.parallel)
	}
	cfg, err := kube.ClientConfig(o.kubeconfig, 0, 0)
	if err != nil {
		return nil, nil, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	r := &debug.Remote{Client: client}
	proxies, err := r.Proxies(ctx)
	if err != nil {
		return nil, nil, err
	}
	if r.Token, err = o.bearer(ctx, client, proxies); err != nil {
		return nil, nil, err
	}
	return r, proxies, nil
}

func (o *remoteOptions) bearer(ctx context.Context, client kubernetes.Interface, proxies []debug.Proxy) (string, error) {
	switch {
	case o.token != "" && o.tokenFile != "":
		return "", errors.New("flags --token and --token-file: give one")
	case o.token != "":
		return o.token, nil
	case o.tokenFile != "":
		b, err := os.ReadFile(o.tokenFile)
		if err != nil {
			return "", fmt.Errorf("flag --token-file: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	ns := ""
	for _, p := range proxies {
		if p.Pod != nil {
			ns = p.Pod.Namespace
			break
		}
	}
	if ns == "" {
		return "", fmt.Errorf("no crossproxy pod (label %s) in any namespace: nothing to ask", debug.PodSelector)
	}
	return debug.MintToken(ctx, client, ns, o.serviceAccount, o.audience)
}

// each calls f for every proxy, o.parallel at a time, and waits for all.
func (o *remoteOptions) each(proxies []debug.Proxy, f func(i int, px debug.Proxy)) {
	sem := make(chan struct{}, max(o.parallel, 1))
	var wg sync.WaitGroup
	for i, px := range proxies {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			f(i, px)
		})
	}
	wg.Wait()
}
