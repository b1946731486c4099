package health

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/platform"
)

// NodePorts serves the health-check node ports of LoadBalancer Services with
// externalTrafficPolicy Local: 200 while this node has local endpoints (and
// the proxy itself is live), 503 otherwise, so the cloud load balancer sends
// traffic only to nodes that can serve it without a second hop. The response
// carries kube-proxy's JSON body and its X-Load-Balancing-Endpoint-Weight
// header (the local endpoint count).
//
// As kube-proxy does, the ports listen only on the node's NodePort addresses
// (core.NodeState.NodePortAddresses), not on every address of the host, so
// nodePortAddresses limits what the node answers on for health checks too.
type NodePorts struct {
	// ProxyHealthy reports the proxy's own liveness (Status.Live().Healthy);
	// nil counts as healthy.
	ProxyHealthy func() bool
	Log          logrus.FieldLogger
	// Listen opens a port's listener; nil is net.Listen. A backend that
	// programs another network namespace (crossproxy run --netns) opens them
	// there, where the NodePort addresses are.
	Listen func(network, address string) (net.Listener, error)

	mu      sync.Mutex
	addrs   []netip.Addr // what the open ports listen on
	servers map[uint16]*checkServer
}

// checkServer answers on one node port for one Service, one listener per address.
type checkServer struct {
	mu    sync.Mutex
	svc   types.NamespacedName
	count int
	// stop ends the servers; done waits until they have stopped.
	stop context.CancelFunc
	done sync.WaitGroup
}

// SyncState is Sync with a NodeState's health checks and NodePort addresses.
func (n *NodePorts) SyncState(st *core.NodeState) error {
	var addrs []netip.Addr
	for _, f := range st.Families {
		addrs = append(addrs, st.NodePortAddresses[f]...)
	}
	return n.Sync(st.HealthChecks, addrs)
}

// Sync makes the served ports match checks (core.NodeState.HealthChecks),
// each listening on addrs (the NodePort addresses): new ports are opened,
// gone ones closed, counts updated; when addrs changed, every port is opened
// again on the new ones. A port that cannot be opened is reported in the
// returned error and the others still serve.
func (n *NodePorts) Sync(checks []core.HealthCheck, addrs []netip.Addr) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.servers == nil {
		n.servers = map[uint16]*checkServer{}
	}
	addrs = slices.Clone(addrs)
	slices.SortFunc(addrs, netip.Addr.Compare)
	addrs = slices.Compact(addrs)
	if !slices.Equal(addrs, n.addrs) {
		n.closeAll()
		n.addrs = addrs
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
	if len(want) > 0 && len(n.addrs) == 0 {
		return fmt.Errorf("health-check node ports: no NodePort address to listen on for %d ports", len(want))
	}
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

// Close stops every health-check server and waits until they have stopped.
func (n *NodePorts) Close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closeAll()
}

func (n *NodePorts) closeAll() {
	for port, s := range n.servers {
		s.close()
		delete(n.servers, port)
	}
}

func (n *NodePorts) open(port uint16, svc types.NamespacedName) (*checkServer, error) {
	ctx, stop := context.WithCancel(context.Background())
	s := &checkServer{svc: svc, stop: stop}
	h := http.HandlerFunc(n.handler(s))
	for _, a := range n.addrs {
		addr := netip.AddrPortFrom(a, port).String()
		listen := n.Listen
		if listen == nil {
			listen = net.Listen
		}
		l, err := listen("tcp", addr)
		if err != nil {
			s.close()
			return nil, fmt.Errorf("open health-check node port %s for service %s: %w", addr, svc, err)
		}
		s.done.Go(func() {
			if err := platform.ServeHTTP(ctx, l, h); err != nil && n.Log != nil {
				n.Log.WithError(err).WithField("service", svc.String()).Warn("health-check node port stopped")
			}
		})
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
	s.stop()
	s.done.Wait()
}
