package nft

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/crossproxy/crossproxy/platform"
)

// The kernel parameters that say how full the namespace's connection
// tracking table is: the entries it holds (per network namespace) and the
// most it may hold (one value for the whole host, writable only from the
// initial namespace).
const (
	sysctlConntrackCount = "net.netfilter.nf_conntrack_count"
	sysctlConntrackMax   = "net.netfilter.nf_conntrack_max"
)

// conntrackRoomPercent is how far the table must drain, in percent of the
// maximum, before a full table is reported as having room again: the
// kernel's own garbage collector starts evicting unassured entries above 95
// percent, and a full table's count hovers at the maximum as entries expire
// and new ones take their place, so without this margin one episode would be
// reported many times.
const conntrackRoomPercent = 95

// conntrackWatch tells when the connection tracking table of the backend's
// namespace is full, once per episode. While it is full the kernel drops the
// first packet of every new connection it cannot track ("nf_conntrack: table
// full, dropping packet" in the kernel log), so every Service of the node
// stops taking new connections while its rules are intact: an operator who
// looks only at the proxy would otherwise see nothing wrong. The check is two
// reads of /proc/sys in the namespace, made with a sync (and so at each
// periodic drift check, which always syncs) at most once a second, never in
// a loop of its own.
type conntrackWatch struct {
	// report is told of each change, for the metrics; nil when nothing
	// counts them.
	report platform.ConntrackReporter
	full   bool
	// unreadable is set once the table's size could not be read (conntrack
	// not loaded in this kernel), so that is logged once, not at each sync.
	unreadable bool
	// every spaces the checks (0: at every sync), checked is when the last
	// one ran: a burst of endpoint changes syncs many times a second, and
	// the two reads cost about as much as a partial sync's own work.
	every   time.Duration
	checked time.Time
}

// conntrackCheckEvery is how often the backend reads the table's size at
// most: a full table is reported within a second of the first sync after it
// filled.
const conntrackCheckEvery = time.Second

// due reports whether a check is due at now, and if so takes it.
func (w *conntrackWatch) due(now time.Time) bool {
	if w.every > 0 && !w.checked.IsZero() && now.Sub(w.checked) < w.every {
		return false
	}
	w.checked = now
	return true
}

// check reads the table's count and maximum and reports a change of state:
// full when the count has reached the maximum (the kernel refuses a new
// entry when count+1 > max), room again when it has drained below
// conntrackRoomPercent of it.
func (w *conntrackWatch) check(s sysctl, log logrus.FieldLogger) {
	count, cerr := readInt(s, sysctlConntrackCount)
	limit, merr := readInt(s, sysctlConntrackMax)
	if cerr != nil || merr != nil || limit <= 0 {
		if !w.unreadable {
			w.unreadable = true
			err := cerr
			if err == nil {
				err = merr
			}
			log.WithError(err).WithField("max", limit).Debug("cannot read the conntrack table's size; a full table will not be reported")
		}
		return
	}
	w.unreadable = false
	fields := logrus.Fields{"count": count, "max": limit}
	switch {
	case !w.full && count >= limit:
		w.full = true
		log.WithFields(fields).Warn("conntrack table full: the kernel drops the first packet of every new connection it cannot track, " +
			"so new connections through every Service on this node fail until entries expire; " +
			"raise net.netfilter.nf_conntrack_max on the host or find what fills the table (conntrack -L)")
	case w.full && count*100 < limit*conntrackRoomPercent:
		w.full = false
		log.WithFields(fields).Info("conntrack table has room again: new connections are tracked and reach Services")
	default:
		return
	}
	if w.report != nil {
		w.report.ConntrackFull(w.full)
	}
}

func readInt(s sysctl, name string) (int64, error) {
	v, err := s.Get(name)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse sysctl %s: %w", name, err)
	}
	return n, nil
}
