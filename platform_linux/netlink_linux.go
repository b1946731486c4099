package nft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"syscall"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// netNS is a network namespace handle; fd < 0 means the current namespace.
type netNS struct{ fd int }

func openNetNS(path string) (netNS, error) {
	if path == "" {
		return netNS{fd: -1}, nil
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return netNS{}, fmt.Errorf("open network namespace %s: %w", path, err)
	}
	return netNS{fd: fd}, nil
}

// do runs fn on an OS thread switched into the namespace; sockets and
// /proc/sys files opened there stay bound to it.
func (n netNS) do(fn func() error) error {
	if n.fd < 0 {
		return fn()
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("get current network namespace: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(netns.NsHandle(n.fd)); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter network namespace: %w", err)
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		// Leave the thread locked: Go discards it when the goroutine ends.
		return errors.Join(ferr, fmt.Errorf("return to network namespace: %w", err))
	}
	runtime.UnlockOSThread()
	return ferr
}

// conn opens a google/nftables connection for reading in the namespace.
func (n netNS) conn() (*nftables.Conn, error) {
	if n.fd < 0 {
		return nftables.New()
	}
	return nftables.New(nftables.WithNetNSFd(n.fd))
}

// captureMessages lets google/nftables encode a batch without sending it:
// its Flush asks for an ACK and an echo of every message and reads them one by
// one, which for 100,000 rules overflows the socket and takes seconds. The
// captured messages go out through batchConn.send instead.
func captureMessages(build func(*nftables.Conn) error) ([]netlink.Message, error) {
	var captured []netlink.Message
	c, err := nftables.New(nftables.WithTestDial(func(req []netlink.Message) ([]netlink.Message, error) {
		if req != nil {
			captured = append(captured, req...)
		}
		return nil, nil
	}))
	if err != nil {
		return nil, fmt.Errorf("encode batch: %w", err)
	}
	if err := build(c); err != nil {
		return nil, err
	}
	if err := c.Flush(); err != nil {
		return nil, fmt.Errorf("encode batch: %w", err)
	}
	return captured, nil
}

// BatchError is a batch the kernel refused; Errors name the failed commands.
type BatchError struct {
	Errors []error
}

func (e *BatchError) Error() string {
	return fmt.Sprintf("nftables batch rejected: %v", errors.Join(e.Errors...))
}

func (e *BatchError) Unwrap() []error { return e.Errors }

// batchConn is the netlink socket batches go out on. It stays open between
// syncs because closing a NETLINK_NETFILTER socket waits for an RCU grace
// period in the kernel (milliseconds), which dominated the wall time of a
// small partial sync. After any error it is closed and the next batch opens a
// fresh one, so a half-read reply never reaches the next batch. Sequence
// numbers grow across batches and replies outside the current batch are
// ignored.
type batchConn struct {
	mu  sync.Mutex
	fd  int // -1: not open
	seq uint32
}

func newBatchConn() *batchConn { return &batchConn{fd: -1} }

// open makes the socket in ns if it is not open.
func (c *batchConn) open(ns netNS) error {
	if c.fd >= 0 {
		return nil
	}
	var fd int
	err := ns.do(func() error {
		var err error
		fd, err = unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
		return err
	})
	if err != nil {
		return fmt.Errorf("open netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return fmt.Errorf("bind netlink socket: %w", err)
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_CAP_ACK, 1)
	_ = unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_EXT_ACK, 1)
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20); err != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 8<<20)
	}
	c.fd = fd
	return nil
}

func (c *batchConn) reset() {
	if c.fd >= 0 {
		unix.Close(c.fd)
		c.fd = -1
	}
}

// send sends captured messages (batch begin, commands, batch end) as one
// write and waits for the kernel's verdict. Only the last command asks for an
// ACK; the kernel reports every failed command on its own, so success costs
// one reply and failure names each failed command through describe(i).
func (c *batchConn) send(ns netNS, msgs []netlink.Message, describe func(i int) string) error {
	if len(msgs) < 3 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.open(ns); err != nil {
		return err
	}
	err := c.exchange(msgs, describe)
	if err != nil {
		c.reset()
	}
	return err
}

func (c *batchConn) exchange(msgs []netlink.Message, describe func(i int) string) error {
	size := 0
	for _, m := range msgs {
		size += nlAlign(16 + len(m.Data))
	}
	buf := make([]byte, 0, size)
	last := len(msgs) - 2 // the last command, before batch end
	seqBase := c.seq + 1
	c.seq += uint32(len(msgs))
	for i, m := range msgs {
		flags := uint16(m.Header.Flags) &^ (unix.NLM_F_ACK | unix.NLM_F_ECHO)
		if i == last {
			flags |= unix.NLM_F_ACK
		}
		l := 16 + len(m.Data)
		var h [16]byte
		binary.NativeEndian.PutUint32(h[0:4], uint32(l))
		binary.NativeEndian.PutUint16(h[4:6], uint16(m.Header.Type))
		binary.NativeEndian.PutUint16(h[6:8], flags)
		binary.NativeEndian.PutUint32(h[8:12], seqBase+uint32(i))
		buf = append(buf, h[:]...)
		buf = append(buf, m.Data...)
		for len(buf)%4 != 0 {
			buf = append(buf, 0)
		}
	}
	if err := unix.SetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, len(buf)+(1<<16)); err != nil {
		_ = unix.SetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_SNDBUF, len(buf)+(1<<16))
	}
	if err := unix.Sendto(c.fd, buf, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("send nftables batch (%d bytes): %w", len(buf), err)
	}

	var errs []error
	rbuf := make([]byte, 1<<20)
	for {
		n, _, err := unix.Recvfrom(c.fd, rbuf, 0)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return fmt.Errorf("read nftables batch result: %w", err)
		}
		replies, err := syscall.ParseNetlinkMessage(rbuf[:n])
		if err != nil {
			return fmt.Errorf("parse nftables batch result: %w", err)
		}
		done := false
		for _, r := range replies {
			if r.Header.Type != unix.NLMSG_ERROR || len(r.Data) < 4 || r.Header.Seq < seqBase || r.Header.Seq-seqBase >= uint32(len(msgs)) {
				continue
			}
			errno := -int32(binary.NativeEndian.Uint32(r.Data[0:4]))
			i := int(r.Header.Seq - seqBase)
			if errno != 0 {
				what := "batch"
				if i > 0 && i < len(msgs)-1 {
					what = describe(i - 1)
				}
				errs = append(errs, fmt.Errorf("%s: %w", what, os.NewSyscallError("netlink", syscall.Errno(errno))))
			}
			if i == last {
				done = true
			}
		}
		if done {
			break
		}
	}
	if len(errs) > 0 {
		return &BatchError{Errors: errs}
	}
	return nil
}

func nlAlign(n int) int { return (n + 3) &^ 3 }
