package nft

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Drift: crossproxy's rules changed by someone else (`nft flush ruleset` on a
// firewall reload, another tool deleting its table) must come back within
// seconds, not at the next full sync. Two ways in: WatchDrift follows the
// kernel's change notifications and reports a foreign change as it is
// committed; CheckDrift, before every sync, compares the ruleset generation
// with the one after crossproxy's last batch and, only when someone else
// committed since, compares its tables' object counts with what it left.

// CheckDrift reports what others changed of crossproxy's tables since its
// last batch. It costs one netlink round trip when nobody else committed
// anything, and one dump of the table list (O(tables)) when someone did.
func (b *Backend) CheckDrift(ctx context.Context) ([]string, error) {
	if err := b.lockOpen(ctx); err != nil {
		return nil, err
	}
	defer b.mu.Unlock()
	if b.applied == nil {
		return nil, nil // the next sync is full anyway
	}
	if u := b.unverified; u != nil {
		b.unverified = nil
		return u, nil
	}
	missed := b.missedNotes.Swap(false)
	gen, err := b.k.generation()
	if err != nil {
		return nil, err
	}
	if gen == b.gen && b.census != nil && !missed {
		return nil, nil
	}
	if b.census == nil {
		return []string{"the tables could not be read back after the last sync"}, nil
	}

	now, err := b.k.census(b.cfg.table())
	if err != nil {
		return nil, err
	}
	drift := compareCensus(b.census, now)
	if len(drift) == 0 {
		// Someone committed to other tables: remember the generation so the
		// next check is one round trip again.
		b.gen = gen
	}
	return drift, nil
}

// rememberBaseline records the generation and the census of crossproxy's
// tables right after one of its batches, for CheckDrift. A foreign commit
// landing between the batch and these reads is in the baseline; the watcher
// still reports it.
func (b *Backend) rememberBaseline() {
	gen, err := b.k.generation()
	var census map[string]tableCount
	if err == nil {
		census, err = b.k.census(b.cfg.table())
	}
	if err != nil {
		b.census, b.ownGen = nil, 0
		b.log.WithError(err).Warn("read back the tables after a sync; the next sync checks them in full")
		return
	}
	b.gen, b.census = gen, census
}

// rememberAfter records the baseline after one of crossproxy's partial
// batches from the generation alone when the batch was the one commit since
// the last baseline: the census then follows from the batch (censusAfter),
// and the table dump, the larger part of a small sync's own cost, is not
// needed. Otherwise it reads both, as rememberBaseline.
func (b *Backend) rememberAfter(batch *batch) {
	gen, err := b.k.generation()
	if err == nil && b.census != nil && gen == b.gen+1 {
		if census, ok := censusAfter(b.census, batch); ok {
			b.gen, b.census = gen, census
			return
		}
	}
	b.rememberBaseline()
}

// nfnlGroupNFTables is NFNLGRP_NFTABLES, the multicast group of nf_tables
// change notifications.
const nfnlGroupNFTables = 7

// WatchDrift follows nf_tables change notifications in the backend's
// namespace until ctx ends and calls changed once per foreign transaction
// that touched crossproxy's tables, naming what it changed and who committed
// it. Each notification carries the netlink port of the socket whose batch
// caused it, so crossproxy's own batches are told apart without any timing
// guess and never start a sync. When the kernel drops notifications (the
// socket overflowed, as a large full sync of crossproxy's own can make it),
// changed("") asks for a sync whose CheckDrift then looks.
func (b *Backend) WatchDrift(ctx context.Context, changed func(what string)) error {
	fd, err := b.openWatch()
	if err != nil {
		return err
	}
	b.watchMu.Lock()
	b.watchFD, b.watching = fd, true
	b.watchMu.Unlock()
	defer func() {
		b.watchMu.Lock()
		b.watching = false
		unix.Close(fd)
		b.watchMu.Unlock()
	}()
	main := b.cfg.table()
	pending := map[foreignChange]int{}
	rbuf := make([]byte, 1<<20)
	for ctx.Err() == nil {
		n, _, err := unix.Recvfrom(fd, rbuf, 0)
		if err != nil {
			switch {
			case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EINTR):
				continue
			case errors.Is(err, unix.ENOBUFS):
				b.missedNotes.Store(true)
				clear(pending)
				changed("")
				continue
			}
			return fmt.Errorf("read nf_tables notifications: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(rbuf[:n])
		if err != nil {
			return fmt.Errorf("parse nf_tables notifications: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Type>>8 != unix.NFNL_SUBSYS_NFTABLES || len(m.Data) < 4 {
				continue
			}
			msg := int(m.Header.Type & 0xff)
			if msg == unix.NFT_MSG_NEWGEN {
				// The end of a transaction: report what it changed of ours.
				if len(pending) > 0 {
					changed(describeForeign(pending, m.Data[4:]))
					clear(pending)
				}
				continue
			}
			if b.batches.ours(m.Header.Pid) || m.Data[0] != unix.NFPROTO_INET {
				continue
			}
			if table := notifiedTable(m.Data[4:]); ownTable(main, table) {
				object, what := notificationKind(msg)
				pending[foreignChange{table: table, object: object, what: what}]++
			}
		}
	}
	return nil
}

// openWatch opens a netlink socket in the backend's namespace subscribed to
// nf_tables notifications, with a short receive timeout so WatchDrift sees
// its context end.
func (b *Backend) openWatch() (int, error) {
	var fd int
	err := b.ns.do(func() error {
		var err error
		fd, err = unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
		return err
	})
	if err != nil {
		return -1, fmt.Errorf("open netlink socket for nf_tables notifications: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1 << (nfnlGroupNFTables - 1)}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("subscribe to nf_tables notifications: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 4<<20); err != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
	}
	tv := unix.NsecToTimeval((200 * time.Millisecond).Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("set netlink receive timeout: %w", err)
	}
	return fd, nil
}

// notifiedTable is the table a notification is about: attribute 1 of every
// nf_tables object message (NFTA_TABLE_NAME, NFTA_CHAIN_TABLE,
// NFTA_RULE_TABLE, NFTA_SET_TABLE, NFTA_SET_ELEM_LIST_TABLE, ...).
func notifiedTable(attrs []byte) string {
	ad, err := netlink.NewAttributeDecoder(attrs)
	if err != nil {
		return ""
	}
	for ad.Next() {
		if ad.Type() == 1 {
			return ad.String()
		}
	}
	return ""
}

// notificationKinds name what each nf_tables notification says happened:
// the kind of object and what became of it.
var notificationKinds = map[int][2]string{
	unix.NFT_MSG_NEWTABLE:   {"table", "added or changed"},
	unix.NFT_MSG_DELTABLE:   {"table", "deleted"},
	unix.NFT_MSG_NEWCHAIN:   {"chain", "added or changed"},
	unix.NFT_MSG_DELCHAIN:   {"chain", "deleted"},
	unix.NFT_MSG_NEWRULE:    {"rule", "added"},
	unix.NFT_MSG_DELRULE:    {"rule", "deleted"},
	unix.NFT_MSG_NEWSET:     {"set", "added"},
	unix.NFT_MSG_DELSET:     {"set", "deleted"},
	unix.NFT_MSG_NEWSETELEM: {"set element", "added"},
	unix.NFT_MSG_DELSETELEM: {"set element", "deleted"},
}

// notificationKind is notificationKinds' entry for msg, or a generic one.
func notificationKind(msg int) (object, what string) {
	if k, ok := notificationKinds[msg]; ok {
		return k[0], k[1]
	}
	return fmt.Sprintf("object (message %d)", msg), "changed"
}

// foreignChange is one kind of change a foreign transaction made to one of
// crossproxy's tables, the key its notifications are counted under.
type foreignChange struct {
	table, object, what string
}

// describeForeign summarises one foreign transaction: what it did to each
// of crossproxy's tables, counted by kind ("table inet crossproxy deleted";
// "table inet crossproxy: 2 rules deleted"), and which process committed it
// (the NEWGEN notification that closes a transaction names it).
func describeForeign(pending map[foreignChange]int, gen []byte) string {
	byTable := map[string][]string{}
	deleted := map[string]bool{}
	for c, n := range pending {
		if c.object == "table" && c.what == "deleted" {
			deleted[c.table] = true
			continue
		}
		object := c.object
		if n > 1 {
			object += "s"
		}
		byTable[c.table] = append(byTable[c.table], fmt.Sprintf("%d %s %s", n, object, c.what))
	}
	tables := sortedNames(byTable, deleted)
	parts := make([]string, 0, len(tables))
	for _, t := range tables {
		if deleted[t] {
			// Deleting a table deletes everything in it: the count of its
			// chains and rules adds nothing.
			parts = append(parts, fmt.Sprintf("table inet %s deleted", t))
			continue
		}
		sort.Strings(byTable[t])
		parts = append(parts, fmt.Sprintf("table inet %s: %s", t, strings.Join(byTable[t], ", ")))
	}
	who := ""
	if ad, err := netlink.NewAttributeDecoder(gen); err == nil {
		ad.ByteOrder = binary.BigEndian
		var pid uint32
		var name string
		for ad.Next() {
			switch ad.Type() {
			case unix.NFTA_GEN_PROC_PID:
				pid = ad.Uint32()
			case unix.NFTA_GEN_PROC_NAME:
				name = ad.String()
			}
		}
		if name != "" {
			who = fmt.Sprintf(" by %s (pid %d)", name, pid)
		}
	}
	return strings.Join(parts, "; ") + who
}

// muteWatch stops the drift watcher's subscription until the returned
// function is called. A full sync runs muted: with nobody subscribed the
// kernel writes no notification for the batch's objects, which otherwise
// costs as much kernel time again as the batch (BenchmarkFullSyncWatched),
// and the watcher would only skip them as crossproxy's own. What others
// commit meanwhile is checked afterwards (verifyMuted).
func (b *Backend) muteWatch() (unmute func()) {
	b.watchMu.Lock()
	fd := b.watchFD
	if !b.watching || unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_DROP_MEMBERSHIP, nfnlGroupNFTables) != nil {
		b.watchMu.Unlock()
		return func() {}
	}
	return func() {
		defer b.watchMu.Unlock()
		if err := unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_ADD_MEMBERSHIP, nfnlGroupNFTables); err != nil {
			// The watcher hears nothing from now on: each sync's CheckDrift
			// compares the tables instead.
			b.missedNotes.Store(true)
			b.log.WithError(err).Warn("resubscribe to nf_tables notifications after a full sync")
		}
	}
}

// verifyMuted runs after a full sync during which others committed to the
// ruleset while the watcher was muted. A commit before crossproxy's was
// overwritten by the full sync, except for chains or sets added to its
// tables; one after it and before the watcher listened again is in the
// baseline. Listing the tables' chains and sets (O(objects), only in this
// rare case) against what the sync wrote finds the former; a change of a
// rule in the microseconds between the two commits goes unseen until the
// next full sync.
func (b *Backend) verifyMuted(written map[string]objectCount) {
	inv, err := b.inventory()
	if err != nil {
		b.unverified = []string{fmt.Sprintf("the tables could not be listed after a full sync (%v)", err)}
		return
	}
	found := map[string]objectCount{}
	for name, t := range inv {
		found[name] = objectCount{Chains: len(t.Chains), Sets: namedSets(t.Sets)}
	}
	b.unverified = compareWritten(written, found)
}
