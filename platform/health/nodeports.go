package health

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crossproxy/crossproxy/core"
)

// NodePorts serves the health-check node ports of LoadBalancer Services with
// externalTrafficPolicy Local: 200 while this node has local endpoints (and
// the proxy itself is live), 503 otherwise, so the cloud load balancer sends
// traffic only to nodes that can serve it without a second hop. The response
// carries kube-proxy's JSON body and its X-Load-Balancing-Endpoint-Weight
// header (the local endpoint count).
type NodePorts struct {
	// Addresses to listen on; empty means every address of the host.
	Addresses []netip.Addr
	// ProxyHealthy reports the proxy's own liveness (Status.Live().Healthy);
	// nil counts as healthy.
	ProxyHealthy func() bool
	Log          logrus.FieldLogger

	mu      sync.Mutex
	servers map[uint16]*checkServer
}

// checkServer answers on one node port for one Service.
type checkServer struct {
	mu      sync.Mutex
	svc     types.NamespacedName
	count   int
	servers []*http.Server
}

// Sync makes the served ports match checks (core.NodeState.HealthChecks):
// new ports are opened, gone ones closed, counts updated. A port that cannot
// be opened is reported in the returned error and the others still serve.
func (n *NodePorts) Sync(checks []core.HealthCheck) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.servers == nil {
		n.servers = map[uint16]*checkServer{}
	}
	want := map[uint16]core.HealthCheck{}
	for _, hc := range checks {
		if hc.NodePort != 0 {
			want[hc.NodePort] = hc
		}
	}
	for port, s := range n.servers {
		if hc, ok := want[port]; !ok || hc.Service != s.svc {
			s.close()
			delete(n.servers, port)
		}
	}
	var errs []error
	for port, hc := range want {
		s, ok := n.servers[port]
		if !ok {
			var err error
			s, err = n.open(port, hc.Service)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			n.servers[port] = s
		}
		s.mu.Lock()
		s.count = hc.LocalEndpoints
		s.mu.Unlock()
	}
	return errors.Join(errs...)
}

// Ports lists the node ports being served, for tests and state dumps.
func (n *NodePorts) Ports() map[uint16]types.NamespacedName {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[uint16]types.NamespacedName, len(n.servers))
	for p, s := range n.servers {
		out[p] = s.svc
	}
	return out
}

// Close stops every health-check server.
func (n *NodePorts) Close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for port, s := range n.servers {
		s.close()
		delete(n.servers, port)
	}
}

func (n *NodePorts) open(port uint16, svc types.NamespacedName) (*checkServer, error) {
	s := &checkServer{svc: svc}
	addrs := []string{""}
	if len(n.Addresses) > 0 {
		addrs = addrs[:0]
		for _, a := range n.Addresses {
			addrs = append(addrs, a.String())
		}
	}
	for _, a := range addrs {
		addr := net.JoinHostPort(a, strconv.Itoa(int(port)))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			s.close()
			return nil, fmt.Errorf("open health-check node port %s for service %s: %w", addr, svc, err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(n.handler(s)), ReadHeaderTimeout: 5 * time.Second}
		s.servers = append(s.servers, srv)
		go func() {
			if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) && n.Log != nil {
				n.Log.WithError(err).WithField("service", svc.String()).Warn("health-check node port stopped")
			}
		}()
	}
	if n.Log != nil {
		n.Log.WithFields(logrus.Fields{"service": svc.String(), "port": port}).Info("serving health-check node port")
	}
	return s, nil
}

func (n *NodePorts) handler(s *checkServer) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		count, svc := s.count, s.svc
		s.mu.Unlock()
		proxyHealthy := n.ProxyHealthy == nil || n.ProxyHealthy()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("X-Load-Balancing-Endpoint-Weight", strconv.Itoa(count))
		if count > 0 && proxyHealthy {
			w.WriteHeader(http.StatusOK)
		} else {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintf(w, `{"service":{"namespace":%q,"name":%q},"localEndpoints":%d,"serviceProxyHealthy":%t}`+"\n",
			svc.Namespace, svc.Name, count, proxyHealthy)
	}
}

func (s *checkServer) close() {
	for _, srv := range s.servers {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = srv.Shutdown(ctx)
		cancel()
	}
	s.servers = nil
}
