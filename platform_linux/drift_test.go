package nft

import (
	"slices"
	"testing"
)

func TestCompareCensusNamesEveryDifference(t *testing.T) {
	was := map[string]tableCount{"crossproxy": {Objects: 12}, "crossproxy-0": {Objects: 40}, "crossproxy-1": {Objects: 7}}
	if d := compareCensus(was, map[string]tableCount{"crossproxy": {Objects: 12}, "crossproxy-0": {Objects: 40}, "crossproxy-1": {Objects: 7}}); d != nil {
		t.Errorf("identical census reported drift: %v", d)
	}
	now := map[string]tableCount{
		"crossproxy":   {Objects: 12, Flags: 1}, // made dormant
		"crossproxy-0": {Objects: 39},           // a chain deleted
		"crossproxy-2": {Objects: 1},            // someone else's table in our name
	}
	want := []string{
		"table inet crossproxy flags changed from 0x0 to 0x1",
		"table inet crossproxy-0 holds 39 chains and sets, 40 programmed",
		"table inet crossproxy-1 deleted",
		"table inet crossproxy-2 created",
	}
	if got := compareCensus(was, now); !slices.Equal(got, want) {
		t.Errorf("compareCensus:\n got %q\nwant %q", got, want)
	}
	if got := compareCensus(was, map[string]tableCount{}); len(got) != 3 {
		t.Errorf("a flushed ruleset should name the three tables deleted: %q", got)
	}
}

func TestCompareWritten(t *testing.T) {
	written := map[string]objectCount{"crossproxy": {Chains: 5, Sets: 8}, "crossproxy-0": {Chains: 30, Sets: 4}}
	if d := compareWritten(written, map[string]objectCount{"crossproxy": {Chains: 5, Sets: 8}, "crossproxy-0": {Chains: 30, Sets: 4}}); d != nil {
		t.Errorf("same objects: %q", d)
	}
	got := compareWritten(written, map[string]objectCount{"crossproxy": {Chains: 6, Sets: 8}})
	want := []string{"table inet crossproxy holds 6 chains and 8 sets, 5 and 8 written", "table inet crossproxy-0 deleted"}
	if !slices.Equal(got, want) {
		t.Errorf("compareWritten:\n got %q\nwant %q", got, want)
	}
	if n := namedSets([]string{"cluster-ips-v4", "__set0", "__set12", "hairpin-v4"}); n != 2 {
		t.Errorf("namedSets = %d, want 2", n)
	}
}
