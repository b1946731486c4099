package nft

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logrustest "github.com/sirupsen/logrus/hooks/test"
)

// fullReports records what a conntrackWatch reported, as the metrics see it.
type fullReports []bool

func (r *fullReports) ConntrackFull(full bool) { *r = append(*r, full) }

// TestConntrackWatchOncePerEpisode: a table that fills up is reported once
// (a warning naming count and max, and the reporter told), however many
// syncs find it full or hovering just under the maximum; it has room again
// once it drains below 95 percent (an info line, the reporter told), and the
// next time it fills is a second episode.
func TestConntrackWatchOncePerEpisode(t *testing.T) {
	log, hook := logrustest.NewNullLogger()
	log.SetLevel(logrus.DebugLevel)
	var got fullReports
	w := conntrackWatch{report: &got}
	s := &fakeSysctl{vals: map[string]string{sysctlConntrackMax: "262144"}}
	steps := []struct {
		count string
		full  bool
	}{
		{"0", false}, {"262143", false}, {"262144", true}, {"262144", true}, {"262100", true},
		{"250000", true}, // 95.4 %: still the same episode
		{"262144", true}, {"249000", false}, {"12", false}, {"262144", true},
	}
	for i, st := range steps {
		s.vals[sysctlConntrackCount] = st.count
		w.check(s, log)
		if w.full != st.full {
			t.Errorf("step %d (count %s): full %v, want %v", i, st.count, w.full, st.full)
		}
	}
	if want := []bool{true, false, true}; len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("reports %v, want %v", got, want)
	}
	var warns, infos int
	for _, e := range hook.AllEntries() {
		switch e.Level {
		case logrus.WarnLevel:
			warns++
			if e.Data["count"] != int64(262144) || e.Data["max"] != int64(262144) || !strings.Contains(e.Message, "every Service") {
				t.Errorf("warning %q %v does not name count, max and the consequence", e.Message, e.Data)
			}
		case logrus.InfoLevel:
			infos++
		}
	}
	if warns != 2 || infos != 1 {
		t.Errorf("%d warnings and %d infos for two episodes, want 2 and 1", warns, infos)
	}
}

// TestConntrackWatchUnreadable: a kernel without conntrack (no such sysctl)
// is logged once at debug level and never reported as full.
func TestConntrackWatchUnreadable(t *testing.T) {
	log, hook := logrustest.NewNullLogger()
	log.SetLevel(logrus.DebugLevel)
	var got fullReports
	w := conntrackWatch{report: &got}
	s := &fakeSysctl{vals: map[string]string{}}
	for range 3 {
		w.check(s, log)
	}
	if len(hook.AllEntries()) != 1 || hook.LastEntry().Level != logrus.DebugLevel || len(got) != 0 || w.full {
		t.Errorf("unreadable table: %d log entries, reports %v, full %v; want one debug line and nothing reported", len(hook.AllEntries()), got, w.full)
	}
	// A nil reporter (no metrics) is fine.
	w = conntrackWatch{}
	s.vals = map[string]string{sysctlConntrackCount: "10", sysctlConntrackMax: "10"}
	w.check(s, log)
	if !w.full {
		t.Error("count == max not reported full")
	}
}

// TestConntrackCheckAtMostOncePerInterval: syncs in a burst read the
// table's size once per interval, the first sync at once.
func TestConntrackCheckAtMostOncePerInterval(t *testing.T) {
	w := conntrackWatch{every: time.Second}
	t0 := time.Date(2026, 12, 7, 16, 0, 0, 0, time.UTC)
	var got []bool
	for _, d := range []time.Duration{0, 10 * time.Millisecond, 999 * time.Millisecond, time.Second, 1500 * time.Millisecond, 2 * time.Second} {
		got = append(got, w.due(t0.Add(d)))
	}
	if want := []bool{true, false, false, true, false, true}; !slices.Equal(got, want) {
		t.Errorf("checks due %v, want %v", got, want)
	}
	every := conntrackWatch{}
	first := every.due(t0)
	second := every.due(t0) // the same instant again
	if !first || !second {
		t.Error("with no interval every sync must check")
	}
}
