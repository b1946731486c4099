package nft

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// Sysctl reads and writes kernel parameters by their dotted name
// (net.ipv4.ip_forward). It is an interface so tests can fake the kernel.
type Sysctl interface {
	Get(name string) (string, error)
	Set(name, value string) error
}

// SysctlResult is what EnsureSysctls found and did for one parameter.
type SysctlResult struct {
	Name   string
	Want   string
	Was    string
	Set    bool
	Err    error
	Reason string
}

func (r SysctlResult) String() string {
	switch {
	case r.Err != nil:
		return fmt.Sprintf("%s is %q, needs %s (%s): %v", r.Name, r.Was, r.Want, r.Reason, r.Err)
	case r.Set:
		return fmt.Sprintf("%s set from %s to %s (%s)", r.Name, r.Was, r.Want, r.Reason)
	}
	return fmt.Sprintf("%s=%s (%s)", r.Name, r.Was, r.Reason)
}

// RequiredSysctls lists the parameters the rules depend on, with why.
func RequiredSysctls(families []v1.IPFamily, localhostNodePorts bool) []SysctlResult {
	var out []SysctlResult
	for _, f := range families {
		if f == v1.IPv6Protocol {
			out = append(out, SysctlResult{Name: "net.ipv6.conf.all.forwarding", Want: "1", Reason: "forward DNATed IPv6 connections to endpoints"})
		} else {
			out = append(out, SysctlResult{Name: "net.ipv4.ip_forward", Want: "1", Reason: "forward DNATed IPv4 connections to endpoints"})
		}
	}
	if localhostNodePorts {
		out = append(out, SysctlResult{Name: "net.ipv4.conf.all.route_localnet", Want: "1", Reason: "NodePorts on 127.0.0.1"})
	}
	return out
}

// EnsureSysctls checks each required parameter and sets the ones that differ.
func EnsureSysctls(s Sysctl, families []v1.IPFamily, localhostNodePorts bool) []SysctlResult {
	res := RequiredSysctls(families, localhostNodePorts)
	for i := range res {
		r := &res[i]
		v, err := s.Get(r.Name)
		r.Was = strings.TrimSpace(v)
		if err != nil {
			r.Err = fmt.Errorf("read: %w", err)
			continue
		}
		if r.Was == r.Want {
			continue
		}
		if err := s.Set(r.Name, r.Want); err != nil {
			r.Err = fmt.Errorf("write: %w", err)
			continue
		}
		r.Set = true
	}
	return res
}
