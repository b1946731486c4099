package hns

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crossproxy/crossproxy/core"
)

// lbOwner is the Service port and frontend kind a load balancer was made for.
type lbOwner struct {
	Namespace string            `json:"namespace"`
	Name      string            `json:"name"`
	Port      string            `json:"port"`
	Protocol  v1.Protocol       `json:"protocol"`
	Family    v1.IPFamily       `json:"family"`
	Kind      core.FrontendKind `json:"kind"`
}

func ownerOf(k core.PortKey, kind core.FrontendKind) lbOwner {
	return lbOwner{k.Service.Namespace, k.Service.Name, k.PortName, k.Protocol, k.Family, kind}
}

// Key is the owner's core.PortKey.
func (o lbOwner) Key() core.PortKey {
	return core.PortKey{Service: o.Service(), PortName: o.Port, Protocol: o.Protocol, Family: o.Family}
}

// Service is the owning Service.
func (o lbOwner) Service() types.NamespacedName {
	return types.NamespacedName{Namespace: o.Namespace, Name: o.Name}
}

// ledgerData is crossproxy's record of the HNS load balancers it owns. HNS
// load balancers carry no name or tag, so ownership lives here: crossproxy
// only ever modifies or deletes load balancers listed in it.
type ledgerData struct {
	// LoadBalancers maps an HNS load balancer id to its owner.
	LoadBalancers map[string]lbOwner `json:"loadBalancers"`
	// Frontends maps an owned load balancer's id to its frontend, so a load
	// balancer HNS restored under a new id (after an HNS restart) is
	// recognised as crossproxy's.
	Frontends map[string]string `json:"frontends,omitempty"`
	// Pending maps the frontend of a load balancer being created to its
	// owner. It is written before the create call and kept when the create
	// fails, so a load balancer HNS made just before a crash or a failed
	// reply is recognised (adopted) by its frontend at the next full sync.
	Pending map[string]pendingLB `json:"pending,omitempty"`
	// Network is the HNS network of the last sync, so cleanup finds
	// crossproxy's remote endpoints without being told the network.
	Network string `json:"network,omitempty"`
	// SourceVIP is the overlay source VIP crossproxy reserved through the
	// network's IPAM plugin, so a restart reuses it and cleanup releases it.
	SourceVIP *reservation `json:"sourceVip,omitempty"`
}

// reservation is an address crossproxy holds in the IPAM plugin's store.
type reservation struct {
	Address netip.Addr   `json:"address"`
	Subnet  netip.Prefix `json:"subnet"`
	// Network and DataDir are where a CNIIPAM made it (host-local's network
	// name and store), so cleanup releases it without being told again.
	Network string `json:"network,omitempty"`
	DataDir string `json:"dataDir,omitempty"`
}

// pendingLB is a load balancer create in progress (or failed).
type pendingLB struct {
	lbOwner
	// Foreign are the ids of load balancers crossproxy does not own that held
	// the frontend when the entry was written: never adopted by it.
	Foreign []string `json:"foreign,omitempty"`
}

// Ledger stores ledgerData between runs.
type Ledger interface {
	Load() (ledgerData, error)
	Save(ledgerData) error
}

// FileLedger keeps the ledger in a JSON file, replaced atomically on save.
type FileLedger struct{ Path string }

// Load implements Ledger; a missing file is an empty ledger.
func (l FileLedger) Load() (ledgerData, error) {
	var d ledgerData
	b, err := os.ReadFile(l.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return d, nil
	}
	if err != nil {
		return d, fmt.Errorf("read ledger: %w", err)
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return d, fmt.Errorf("parse ledger %s: %w", l.Path, err)
	}
	return d, nil
}

// Save implements Ledger.
func (l FileLedger) Save(d ledgerData) error {
	b, err := json.MarshalIndent(d, "", " ")
	if err != nil {
		return fmt.Errorf("encode ledger: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(l.Path), 0o755); err != nil {
		return fmt.Errorf("save ledger: %w", err)
	}
	tmp := l.Path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("save ledger: %w", err)
	}
	if err := os.Rename(tmp, l.Path); err != nil {
		return fmt.Errorf("save ledger: %w", err)
	}
	return nil
}

// MemoryLedger keeps the ledger in memory (tests, render).
type MemoryLedger struct {
	mu   sync.Mutex
	data ledgerData
}

// Load implements Ledger.
func (l *MemoryLedger) Load() (ledgerData, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return copyLedger(l.data), nil
}

// Save implements Ledger.
func (l *MemoryLedger) Save(d ledgerData) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.data = copyLedger(d)
	return nil
}

func copyLedger(d ledgerData) ledgerData {
	out := ledgerData{LoadBalancers: maps.Clone(d.LoadBalancers), Frontends: maps.Clone(d.Frontends), Pending: map[string]pendingLB{}, Network: d.Network}
	if d.SourceVIP != nil {
		r := *d.SourceVIP
		out.SourceVIP = &r
	}
	if out.LoadBalancers == nil {
		out.LoadBalancers = map[string]lbOwner{}
	}
	if out.Frontends == nil {
		out.Frontends = map[string]string{}
	}
	for k, v := range d.Pending {
		v.Foreign = slices.Clone(v.Foreign)
		out.Pending[k] = v
	}
	return out
}

// equalLedgers reports whether two ledgers hold the same records.
func equalLedgers(a, b ledgerData) bool {
	sameVIP := (a.SourceVIP == nil) == (b.SourceVIP == nil) && (a.SourceVIP == nil || *a.SourceVIP == *b.SourceVIP)
	return sameVIP && a.Network == b.Network && maps.Equal(a.LoadBalancers, b.LoadBalancers) && maps.Equal(a.Frontends, b.Frontends) &&
		maps.EqualFunc(a.Pending, b.Pending, func(x, y pendingLB) bool { return x.lbOwner == y.lbOwner && slices.Equal(x.Foreign, y.Foreign) })
}
