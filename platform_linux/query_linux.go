package nft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// nftMsgType is the netlink message type of an nf_tables message.
func nftMsgType(msg int) uint16 { return uint16(unix.NFNL_SUBSYS_NFTABLES<<8 | msg) }

// queryTimeout bounds a read-only request; these answer in microseconds, so
// a second means the kernel's answer was lost.
const queryTimeout = time.Second

// query sends one read-only nf_tables request (family in the nfgenmsg
// header, attrs already encoded) on the batch socket and returns the
// payloads of its answers, after their nfgenmsg header. With dump set it
// reads a dump until NLMSG_DONE. The batch socket serves because it is open
// anyway: a socket per request would make every check wait for the RCU grace
// period its close costs.
func (c *batchConn) query(ns *netNS, msg int, family uint8, dump bool, attrs []byte) ([][]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.open(ns); err != nil {
		return nil, err
	}
	out, err := c.ask(msg, family, dump, attrs)
	if err != nil {
		c.reset()
	}
	return out, err
}

func (c *batchConn) ask(msg int, family uint8, dump bool, attrs []byte) ([][]byte, error) {
	c.seq++
	seq := c.seq
	flags := uint16(unix.NLM_F_REQUEST)
	if dump {
		flags |= unix.NLM_F_DUMP
	} else {
		flags |= unix.NLM_F_ACK
	}
	req := make([]byte, 20, 20+len(attrs))
	binary.NativeEndian.PutUint32(req[0:4], uint32(20+len(attrs)))
	binary.NativeEndian.PutUint16(req[4:6], nftMsgType(msg))
	binary.NativeEndian.PutUint16(req[6:8], flags)
	binary.NativeEndian.PutUint32(req[8:12], seq)
	req[16] = family
	req[17] = unix.NFNETLINK_V0
	req = append(req, attrs...)
	if err := unix.Sendto(c.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("send nf_tables request: %w", err)
	}
	tv := unix.NsecToTimeval(queryTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return nil, fmt.Errorf("set netlink receive timeout: %w", err)
	}
	var out [][]byte
	rbuf := c.recvBuf()
	for {
		n, _, err := unix.Recvfrom(c.fd, rbuf, 0)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return nil, fmt.Errorf("read nf_tables answer: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(rbuf[:n])
		if err != nil {
			return nil, fmt.Errorf("parse nf_tables answer: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != seq {
				continue // a late answer to an earlier request or batch
			}
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return out, nil
			case unix.NLMSG_ERROR:
				if len(m.Data) < 4 {
					return nil, errors.New("short netlink error message")
				}
				if errno := -int32(binary.NativeEndian.Uint32(m.Data[0:4])); errno != 0 {
					return nil, syscall.Errno(errno)
				}
				return out, nil // the ACK of a request that is not a dump
			default:
				if len(m.Data) >= 4 {
					// A copy: the next read reuses rbuf.
					out = append(out, slices.Clone(m.Data[4:]))
				}
			}
		}
	}
}

// generation reads the ruleset generation: the kernel adds one for every
// committed transaction in the namespace, whoever sent it.
func (c *batchConn) generation(ns *netNS) (uint32, error) {
	answers, err := c.query(ns, unix.NFT_MSG_GETGEN, unix.AF_UNSPEC, false, nil)
	if err != nil {
		return 0, fmt.Errorf("read nftables generation: %w", err)
	}
	for _, a := range answers {
		ad, err := netlink.NewAttributeDecoder(a)
		if err != nil {
			return 0, fmt.Errorf("decode nftables generation: %w", err)
		}
		ad.ByteOrder = binary.BigEndian
		for ad.Next() {
			if ad.Type() == unix.NFTA_GEN_ID {
				return ad.Uint32(), nil
			}
		}
	}
	return 0, errors.New("read nftables generation: no generation in the answer")
}

// census lists the inet tables crossproxy owns (main is the main table's
// name) with their object counts: one dump of the table list, O(tables),
// however many rules they hold.
func (c *batchConn) census(ns *netNS, main string) (map[string]tableCount, error) {
	answers, err := c.query(ns, unix.NFT_MSG_GETTABLE, unix.NFPROTO_INET, true, nil)
	if err != nil {
		return nil, fmt.Errorf("list inet tables: %w", err)
	}
	out := map[string]tableCount{}
	for _, a := range answers {
		ad, err := netlink.NewAttributeDecoder(a)
		if err != nil {
			return nil, fmt.Errorf("decode inet table: %w", err)
		}
		ad.ByteOrder = binary.BigEndian
		var name string
		var tc tableCount
		for ad.Next() {
			switch ad.Type() {
			case unix.NFTA_TABLE_NAME:
				name = ad.String()
			case unix.NFTA_TABLE_USE:
				tc.Objects = ad.Uint32()
			case unix.NFTA_TABLE_FLAGS:
				tc.Flags = ad.Uint32()
			}
		}
		if err := ad.Err(); err != nil {
			return nil, fmt.Errorf("decode inet table: %w", err)
		}
		if ownTable(main, name) {
			out[name] = tc
		}
	}
	return out, nil
}
