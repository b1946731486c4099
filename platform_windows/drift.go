package hns

import (
	"fmt"
	"sort"
	"strings"
)

// drifted compares HNS' load balancers with what crossproxy owns, by id and
// content, and names each owned one HNS no longer holds or holds changed.
func (b *Backend) drifted(lbs []LoadBalancer) []string {
	byID := make(map[string]LoadBalancer, len(lbs))
	for _, lb := range lbs {
		byID[strings.ToLower(lb.ID)] = lb
	}
	var out []string
	for id, o := range b.owned {
		got, ok := byID[strings.ToLower(id)]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s %s of %s missing", o.Owner.Kind, o.LB.frontend(), o.Owner.Key()))
		case !sameLB(got, o.LB):
			out = append(out, fmt.Sprintf("%s %s of %s changed", o.Owner.Kind, o.LB.frontend(), o.Owner.Key()))
		}
	}
	sort.Strings(out)
	return out
}
