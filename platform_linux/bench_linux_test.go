package nft

import (
	"context"
	"testing"
	"time"

	"github.com/crossproxy/crossproxy/core"
)

func TestScaleProbe(t *testing.T) {
	if testing.Short() {
		t.Skip()
	}
	for _, n := range []int{1000, 10000} {
		ns := testNS(t)
		b := newTestBackend(t, ns)
		st := scaleStateN(n, 10)
		start := time.Now()
		if err := b.Sync(context.Background(), st, core.Changes{Full: true}); err != nil {
			t.Fatal(err)
		}
		t.Logf("n=%d full sync %v (%+v)", n, time.Since(start), b.LastSync())
		start = time.Now()
		if err := b.Sync(context.Background(), st, core.Changes{Full: true}); err != nil {
			t.Fatal(err)
		}
		t.Logf("n=%d second full sync %v (%+v)", n, time.Since(start), b.LastSync())
	}
}
