package core

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"
)

// SortedPorts returns the ports ordered by Service namespace, name, port name,
// protocol and family, so output built from a NodeState is deterministic.
func (s *NodeState) SortedPorts() []*ServicePort {
	out := make([]*ServicePort, 0, len(s.Ports))
	for _, p := range s.Ports {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *ServicePort) int { return comparePortKey(a.Key, b.Key) })
	return out
}

// nodeStateJSON is NodeState with Ports as a sorted list, because JSON object
// keys cannot be structs.
type nodeStateJSON struct {
	Node              NodeInfo
	Families          []v1.IPFamily
	LocalDetect       map[v1.IPFamily]FamilyLocalDetect
	NodePortAddresses map[v1.IPFamily][]netip.Addr
	Ports             []*ServicePort
	HealthChecks      []HealthCheck
	Problems          []Problem
	Ignored           []IgnoredObject
}

// MarshalJSON writes the state with Ports as a list sorted by key; addresses
// and prefixes are strings.
func (s *NodeState) MarshalJSON() ([]byte, error) {
	return json.Marshal(nodeStateJSON{
		Node:              s.Node,
		Families:          s.Families,
		LocalDetect:       s.LocalDetect,
		NodePortAddresses: s.NodePortAddresses,
		Ports:             s.SortedPorts(),
		HealthChecks:      s.HealthChecks,
		Problems:          s.Problems,
		Ignored:           s.Ignored,
	})
}

// UnmarshalJSON reads what MarshalJSON writes, so a saved state can be
// rendered or compared later.
func (s *NodeState) UnmarshalJSON(data []byte) error {
	var v nodeStateJSON
	if err := json.Unmarshal(data, &v); err != nil {
		return fmt.Errorf("decode node state: %w", err)
	}
	*s = NodeState{
		Node:              v.Node,
		Families:          v.Families,
		LocalDetect:       v.LocalDetect,
		NodePortAddresses: v.NodePortAddresses,
		HealthChecks:      v.HealthChecks,
		Problems:          v.Problems,
		Ignored:           v.Ignored,
		Ports:             make(map[PortKey]*ServicePort, len(v.Ports)),
	}
	for i, p := range v.Ports {
		if p == nil {
			return fmt.Errorf("decode node state: Ports[%d] is null", i)
		}
		s.Ports[p.Key] = p
	}
	return nil
}
