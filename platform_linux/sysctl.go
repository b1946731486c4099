package nft

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// sysctl reads and writes kernel parameters by their dotted name
// (net.ipv4.ip_forward). It is an interface so tests can fake the kernel.
type sysctl interface {
	Get(name string) (string, error)
	Set(name, value string) error
}

// sysctlResult is what EnsureSysctls found and did for one parameter.
type sysctlResult struct {
	Name   string
	Want   string
	Was    string
	Set    bool
	Err    error
	Reason string
}

func (r sysctlResult) String() string {
	switch {
	case r.Err != nil:
		return fmt.Sprintf("%s is %q, needs %s (%s): %v", r.Name, r.Was, r.Want, r.Reason, r.Err)
	case r.Set:
		return fmt.Sprintf("%s set from %s to %s (%s)", r.Name, r.Was, r.Want, r.Reason)
	}
	return fmt.Sprintf("%s=%s (%s)", r.Name, r.Was, r.Reason)
}

// requiredSysctls lists the parameters the rules depend on, with why.
func requiredSysctls(families []v1.IPFamily, localhostNodePorts bool) []sysctlResult {
	var out []sysctlResult
	for _, f := range families {
		if f == v1.IPv6Protocol {
			out = append(out, sysctlResult{Name: "net.ipv6.conf.all.forwarding", Want: "1", Reason: "forward DNATed IPv6 connections to endpoints"})
		} else {
			out = append(out, sysctlResult{Name: "net.ipv4.ip_forward", Want: "1", Reason: "forward DNATed IPv4 connections to endpoints"})
		}
	}
	if localhostNodePorts {
		out = append(out, sysctlResult{Name: "net.ipv4.conf.all.route_localnet", Want: "1", Reason: "NodePorts on 127.0.0.1"})
	}
	return out
}

// ensureSysctls checks each required parameter and sets the ones that differ.
func ensureSysctls(s sysctl, families []v1.IPFamily, localhostNodePorts bool) []sysctlResult {
	res := requiredSysctls(families, localhostNodePorts)
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
