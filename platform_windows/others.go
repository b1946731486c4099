package hns

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/crossproxy/crossproxy/platform"
)

var _ platform.OtherProxyDetector = (*Backend)(nil)

// otherHNSProxy names, in metrics and Events, whoever owns HNS load
// balancers crossproxy did not create: on a Windows node that is most often
// kube-proxy's winkernel mode left running, but HNS does not say who made a
// load balancer.
const otherHNSProxy = "hns-load-balancers"

// noteOthers records the frontends of the load balancers in lbs that
// crossproxy does not own, at each listing (full sync and drift check).
// HNS ids are GUIDs whose letter case varies between calls.
func (b *Backend) noteOthers(lbs []LoadBalancer) {
	owned := make(map[string]bool, len(b.owned))
	for id := range b.owned {
		owned[strings.ToLower(id)] = true
	}
	var others []string
	for _, lb := range lbs {
		if !owned[strings.ToLower(lb.ID)] {
			others = append(others, lb.frontend())
		}
	}
	sort.Strings(others)
	b.others = others
}

// OtherProxies reports the load balancers on the node that crossproxy did
// not create, as of the last listing: no HNS call of its own, since every
// SyncPeriod's drift check lists them anyway.
func (b *Backend) OtherProxies(context.Context) ([]platform.OtherProxy, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.others) == 0 {
		return nil, nil
	}
	shown := b.others[:min(3, len(b.others))]
	more := ""
	if len(b.others) > len(shown) {
		more = fmt.Sprintf(", and %d more", len(b.others)-len(shown))
	}
	return []platform.OtherProxy{{Name: otherHNSProxy, Evidence: []string{
		fmt.Sprintf("%d HNS load balancers crossproxy did not create: %s%s", len(b.others), strings.Join(shown, ", "), more)}}}, nil
}
