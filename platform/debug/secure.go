package debug

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	certutil "k8s.io/client-go/util/cert"

	"github.com/crossproxy/crossproxy/platform"
	"github.com/crossproxy/crossproxy/platform/explain"
)

// The paths the secure endpoint serves besides explainPath and StatePath.
const (
	// StatusPath serves the node's NodeStatus as JSON.
	StatusPath = "/status"
	// ReportsPath serves the explain report of every Service the proxy
	// follows (?mismatch=1: only those with a mismatch) as a JSON list.
	ReportsPath = "/debug/reports"
	// LogsPath serves the proxy's last log lines as text.
	LogsPath = "/debug/logs"
	// ConfigPath serves the configuration in force as JSON.
	ConfigPath = "/debug/config"
	// MetricsPath serves the proxy's Prometheus metrics, as on its metrics port.
	MetricsPath = "/metrics"
)

// DefaultSecurePort is the port of the secure endpoint in the shipped
// manifests: beside kube-proxy's 10249 (metrics) and 10256 (healthz), clear
// of the kubelet's 10248/10250/10255, the control plane's 10257-10259 and
// ingress-nginx's 10254, which host-network controllers also bind.
const DefaultSecurePort = 10264

// maxReports bounds ReportsPath: each report reads the data plane back, and
// the bundle that asks for them must finish on a node with many Services.
const maxReports = 2000

// Secure is everything the secure endpoint serves; each field but Handler
// and Summary may be nil, and its path then answers 404.
type Secure struct {
	Handler *Handler
	Summary *Summary
	Logs    func() []string
	Config  any
	Metrics http.Handler
}

// ServeHTTP routes the secure endpoint's paths.
func (s *Secure) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "only GET", http.StatusMethodNotAllowed)
		return
	}
	switch r.URL.Path {
	case StatusPath:
		writeJSON(w, s.Summary.Status(), s.Handler.Log)
	case ReportsPath:
		s.serveReports(w, r)
	case LogsPath:
		if s.Logs == nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, strings.Join(s.Logs(), "\n"))
	case ConfigPath:
		if s.Config == nil {
			http.NotFound(w, r)
			return
		}
		writeJSON(w, s.Config, s.Handler.Log)
	case MetricsPath:
		if s.Metrics == nil {
			http.NotFound(w, r)
			return
		}
		s.Metrics.ServeHTTP(w, r)
	default:
		s.Handler.ServeHTTP(w, r)
	}
}

func (s *Secure) serveReports(w http.ResponseWriter, r *http.Request) {
	if s.Handler.Objects == nil {
		http.NotFound(w, r)
		return
	}
	onlyMismatch := r.URL.Query().Get("mismatch") == "1"
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Minute)
	defer cancel()
	out := ReportList{}
	others := s.Handler.otherProxies(ctx) // once for all: the node is the same
	for i, svc := range s.Handler.Objects.Services() {
		if i == maxReports {
			out.Truncated = true
			break
		}
		if ctx.Err() != nil {
			out.Truncated = true
			break
		}
		rep := s.Handler.report(ctx, svc, others)
		if onlyMismatch && rep.OK() {
			continue
		}
		out.Reports = append(out.Reports, rep)
	}
	writeJSON(w, out, s.Handler.Log)
}

// ReportList is ReportsPath's answer.
type ReportList struct {
	Reports []*explain.Report `json:"reports"`
	// Truncated is set when not every Service was explained (maxReports,
	// or the time limit).
	Truncated bool `json:"truncated,omitempty"`
}

func writeJSON(w http.ResponseWriter, v any, log logrus.FieldLogger) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil && log != nil {
		log.WithError(err).Debug("secure endpoint: write")
	}
}

// ServerCert returns the endpoint's certificate: the files when both are
// given, else one generated for this run and signed by itself. The API
// server's pod proxy does not verify a pod's certificate (it dials pods with
// InsecureSkipVerify), so what the certificate buys is an encrypted token in
// transit; an operator who wants clients to verify it gives the files.
func ServerCert(certFile, keyFile, nodeName string) (tls.Certificate, error) {
	if certFile != "" || keyFile != "" {
		if certFile == "" || keyFile == "" {
			return tls.Certificate{}, fmt.Errorf("secure endpoint: give both the certificate and the key file, or neither")
		}
		c, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("secure endpoint: load certificate %s: %w", certFile, err)
		}
		return c, nil
	}
	host, _ := os.Hostname()
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey(nodeName, nil, []string{host})
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("secure endpoint: generate a certificate: %w", err)
	}
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("secure endpoint: generated certificate: %w", err)
	}
	return c, nil
}

// ServeSecure listens on addr (any address: the endpoint is meant to be
// reached from the API server) with TLS and serves h behind auth until ctx
// ends. ready, when not nil, learns the bound address.
func ServeSecure(ctx context.Context, addr string, cert tls.Certificate, auth *Auth, h http.Handler, log logrus.FieldLogger, ready func(net.Addr)) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("secure endpoint: listen %s: %w", addr, err)
	}
	if ready != nil {
		ready(lis.Addr())
	}
	tlsLis := tls.NewListener(lis, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	log.WithField("address", lis.Addr().String()).Info("secure endpoint listening (status, explain, bundle; authorized through the API server)")
	if err := platform.ServeHTTP(ctx, tlsLis, auth.Wrap(h)); err != nil {
		return fmt.Errorf("secure endpoint: serve: %w", err)
	}
	return nil
}
