package nft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// netNS is a network namespace handle; fd < 0 means the current namespace.
// The backend and its sysctl and conntrack helpers share one handle, so
// closing it reaches them all: every use after close fails with errClosed
// instead of running in the current namespace, and close waits for the uses
// in flight (they hold mu for reading).
type netNS struct {
	mu     sync.RWMutex
	fd     int
	closed bool
}

func openNetNS(path string) (*netNS, error) {
	if path == "" {
		return &netNS{fd: -1}, nil
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open network namespace %s: %w", path, err)
	}
	return &netNS{fd: fd}, nil
}

// withFD runs fn with the namespace's file descriptor (-1: the current
// namespace), which stays open until fn returns.
func (n *netNS) withFD(fn func(fd int) error) error {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.closed {
		return errClosed
	}
	return fn(n.fd)
}

// do runs fn on an OS thread switched into the namespace; sockets and
// /proc/sys files opened there stay bound to it. The switch happens on a
// fresh goroutine locked to its thread, never on the caller's (the long-lived
// sync loop's): if switching back fails, that goroutine ends still locked and
// Go retires its thread, so no other code ever runs in the wrong namespace.
func (n *netNS) do(fn func() error) error {
	return n.withFD(func(fd int) error {
		if fd < 0 {
			return fn()
		}
		errc := make(chan error, 1)
		go func() {
			runtime.LockOSThread()
			orig, err := netns.Get()
			if err != nil {
				runtime.UnlockOSThread()
				errc <- fmt.Errorf("get current network namespace: %w", err)
				return
			}
			defer orig.Close()
			if err := netns.Set(netns.NsHandle(fd)); err != nil {
				runtime.UnlockOSThread()
				errc <- fmt.Errorf("enter network namespace: %w", err)
				return
			}
			ferr := fn()
			if err := netns.Set(orig); err != nil {
				errc <- errors.Join(ferr, fmt.Errorf("return to network namespace: %w", err))
				return // still locked: the thread is retired with this goroutine
			}
			runtime.UnlockOSThread()
			errc <- ferr
		}()
		return <-errc
	})
}

// close releases the namespace handle (not the namespace), once uses in
// flight are done.
func (n *netNS) close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	if n.fd < 0 {
		return nil
	}
	if err := unix.Close(n.fd); err != nil {
		return fmt.Errorf("close network namespace handle: %w", err)
	}
	return nil
}

// withConn runs fn with a google/nftables connection for reading in the
// namespace; the library opens a socket per request, so the handle stays
// open until fn returns.
func (n *netNS) withConn(fn func(c *nftables.Conn) error) error {
	return n.withFD(func(fd int) error {
		var c *nftables.Conn
		var err error
		if fd < 0 {
			c, err = nftables.New()
		} else {
			c, err = nftables.New(nftables.WithNetNSFd(fd))
		}
		if err != nil {
			return fmt.Errorf("open nftables connection: %w", err)
		}
		return fn(c)
	})
}

// batchConn is the netlink socket batches go out on. It stays open between
// syncs because closing a NETLINK_NETFILTER socket waits for an RCU grace
// period in the kernel (milliseconds), which dominated the wall time of a
// small partial sync. After any error it is closed and the next batch opens a
// fresh one, so a half-read reply never reaches the next batch. Sequence
// numbers grow across batches and replies outside the current batch are
// ignored.
type batchConn struct {
	mu  sync.Mutex
	fd  int    // -1: not open
	seq uint32 // last sequence number used
	// portids are the netlink port IDs of this socket and the ones it
	// replaced, newest last: the kernel stamps each change notification with
	// the port of the socket whose batch made it, which is how the drift
	// watcher tells crossproxy's own changes from everyone else's. Read
	// without mu, which a full sync holds for seconds.
	portids atomic.Pointer[[]uint32]
	// rbuf receives the kernel's answers, under mu. Kept: a megabyte
	// allocated for every batch made each endpoint change at 100k
	// Services pay for a collection of a half-gigabyte heap (most of its
	// CPU time, test/results/scale.md).
	rbuf []byte
}

func newBatchConn() *batchConn { return &batchConn{fd: -1} }

// recvBuf is the receive buffer, allocated on first use; c.mu is held.
func (c *batchConn) recvBuf() []byte {
	if c.rbuf == nil {
		c.rbuf = make([]byte, 1<<20)
	}
	return c.rbuf
}

// open makes the socket in ns if it is not open.
func (c *batchConn) open(ns *netNS) error {
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
	sa, err := unix.Getsockname(fd)
	nl, ok := sa.(*unix.SockaddrNetlink)
	if err != nil || !ok {
		unix.Close(fd)
		return fmt.Errorf("read netlink socket's port: %w", err)
	}
	c.remember(nl.Pid)
	_ = unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_CAP_ACK, 1)
	_ = unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_EXT_ACK, 1)
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20); err != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 8<<20)
	}
	c.fd = fd
	return nil
}

// remembersPorts is how many of the batch socket's past ports count as
// crossproxy's: notifications of a batch sent on a socket since replaced may
// still be queued for the watcher when the new one opens.
const remembersPorts = 4

// remember records port as the socket's current netlink port.
func (c *batchConn) remember(port uint32) {
	var ports []uint32
	if old := c.portids.Load(); old != nil {
		ports = append(ports, (*old)[max(0, len(*old)-remembersPorts+1):]...)
	}
	ports = append(ports, port)
	c.portids.Store(&ports)
}

// ours reports whether a notification stamped with port came from one of
// this socket's batches.
func (c *batchConn) ours(port uint32) bool {
	p := c.portids.Load()
	return p != nil && slices.Contains(*p, port)
}

func (c *batchConn) reset() {
	if c.fd >= 0 {
		unix.Close(c.fd)
		c.fd = -1
	}
}

// close closes the socket; a later batch would open a new one.
func (c *batchConn) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reset()
}

// batchChunk is the size at which a batchBuf starts a new chunk. Chunks keep
// each allocation bounded (and the garbage collector's work with it) while a
// full sync of 100,000 Services encodes hundreds of megabytes.
const batchChunk = 1 << 20

// batchBuf is an encoded batch: netlink messages (batch begin, commands, batch
// end) written straight into chunks as they are encoded, with no per-message
// copy. All chunks go to the kernel in one sendmsg: the kernel applies a batch
// only when its begin and end arrive in the same write (nfnetlink processes a
// batch within one socket buffer and aborts it if the end is missing), so a
// chunk cannot be sent before the batch is complete; what chunking saves is
// the second copy of the whole batch. Only the last command asks for an ACK;
// the kernel reports every failed command on its own, so success costs one
// reply and failure names each failed command by its sequence number.
type batchBuf struct {
	chunks [][]byte
	buf    []byte // the chunk being written
	hdr    int    // offset in buf of the message being written
	seq    uint32 // sequence number of the first message, set by number
	n      int    // messages written
	ack    int    // index of the message that asks for an ACK: the last command
	// lastChunk and lastHdr locate the last finished message (its chunk's
	// index, len(chunks) for buf, and its offset), which ackLast marks.
	lastChunk, lastHdr int
	// limit is the size at which buf is closed and a new chunk begun;
	// written is the size of the closed chunks.
	limit, written int
}

// chunkLimit is the size of the next chunk once written bytes are in closed
// chunks: chunks grow with the batch (a 64th of what is written), so even a
// batch of gigabytes stays far below the kernel's 1,024 buffers per sendmsg
// (UIO_MAXIOV).
func chunkLimit(written int) int { return max(batchChunk, written/64) }

// newBatchBuf starts a batch whose size the caller expects from its number
// of commands (a full sync streams its commands and passes an estimate).
func newBatchBuf(commands int) *batchBuf {
	return &batchBuf{ack: -1, limit: batchChunk, buf: make([]byte, 0, min(batchChunk, 256*(commands+2)))}
}

// start begins a message; its payload is appended to b.buf, then end.
func (b *batchBuf) start(typ, flags uint16) {
	if len(b.buf) >= b.limit {
		b.chunks = append(b.chunks, b.buf)
		b.written += len(b.buf)
		b.limit = chunkLimit(b.written)
		b.buf = make([]byte, 0, b.limit+b.limit/8)
	}
	flags &^= unix.NLM_F_ACK | unix.NLM_F_ECHO
	b.hdr = len(b.buf)
	var h [16]byte
	binary.NativeEndian.PutUint16(h[4:6], typ)
	binary.NativeEndian.PutUint16(h[6:8], flags)
	b.buf = append(b.buf, h[:]...)
}

// end finishes the message begun by start: its length, then padding.
func (b *batchBuf) end() {
	binary.NativeEndian.PutUint32(b.buf[b.hdr:b.hdr+4], uint32(len(b.buf)-b.hdr))
	for len(b.buf)%4 != 0 {
		b.buf = append(b.buf, 0)
	}
	b.lastChunk, b.lastHdr = len(b.chunks), b.hdr
	b.n++
}

// ackLast makes the last finished message the one that asks for an ACK. A
// streamed batch learns which command is its last only once it is written.
func (b *batchBuf) ackLast() {
	c := b.buf
	if b.lastChunk < len(b.chunks) {
		c = b.chunks[b.lastChunk]
	}
	flags := binary.NativeEndian.Uint16(c[b.lastHdr+6:])
	binary.NativeEndian.PutUint16(c[b.lastHdr+6:], flags|unix.NLM_F_ACK)
	b.ack = b.n - 1
}

// number gives the messages the sequence numbers first, first+1, and so on,
// in place: each message lies whole in one chunk.
func (b *batchBuf) number(first uint32) {
	b.seq = first
	seq := first
	for _, c := range append(b.chunks[:len(b.chunks):len(b.chunks)], b.buf) {
		for off := 0; off+16 <= len(c); {
			binary.NativeEndian.PutUint32(c[off+8:], seq)
			seq++
			off += nlAlign(int(binary.NativeEndian.Uint32(c[off:])))
		}
	}
}

// messages is the number of messages, batch begin and end included.
func (b *batchBuf) messages() int { return b.n }

// all returns the chunks, the last one included.
func (b *batchBuf) all() ([][]byte, int) {
	out := append(b.chunks[:len(b.chunks):len(b.chunks)], b.buf)
	size := 0
	for _, c := range out {
		size += len(c)
	}
	return out, size
}

// send sends an encoded batch in one write and waits for the kernel's
// verdict; describe(i) names the i-th command for errors.
func (c *batchConn) send(ns *netNS, batch *batchBuf, describe func(i int) string) error {
	if batch.messages() < 3 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.open(ns); err != nil {
		return err
	}
	// Sequence numbers grow across batches, so a late reply to an earlier
	// batch is never taken for this one's.
	batch.number(c.seq + 1)
	c.seq += uint32(batch.messages())
	err := c.exchange(batch, describe)
	if err != nil {
		c.reset()
	}
	return err
}

// recvTimeout bounds each wait for the kernel's answer: a batch of 100,000
// Services takes a few seconds of kernel time, so a minute means the answer
// is lost, and the sync fails (and is retried) instead of hanging.
const recvTimeout = time.Minute

func (c *batchConn) exchange(batch *batchBuf, describe func(i int) string) error {
	chunks, size := batch.all()
	if err := unix.SetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, size+(1<<16)); err != nil {
		_ = unix.SetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_SNDBUF, size+(1<<16))
	}
	if _, err := unix.SendmsgBuffers(c.fd, chunks, nil, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}, 0); err != nil {
		return fmt.Errorf("send nftables batch (%d bytes): %w", size, err)
	}
	tv := unix.NsecToTimeval(recvTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fmt.Errorf("set netlink receive timeout: %w", err)
	}
	seqBase, count, last := batch.seq, uint32(batch.messages()), batch.ack
	var errs []error
	rbuf := c.recvBuf()
	for {
		n, _, err := unix.Recvfrom(c.fd, rbuf, 0)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if errors.Is(err, unix.EAGAIN) {
				return fmt.Errorf("read nftables batch result: no answer within %v", recvTimeout)
			}
			return fmt.Errorf("read nftables batch result: %w", err)
		}
		replies, err := syscall.ParseNetlinkMessage(rbuf[:n])
		if err != nil {
			return fmt.Errorf("parse nftables batch result: %w", err)
		}
		done := false
		for _, r := range replies {
			if r.Header.Type != unix.NLMSG_ERROR || len(r.Data) < 4 || r.Header.Seq < seqBase || r.Header.Seq-seqBase >= count {
				continue
			}
			errno := -int32(binary.NativeEndian.Uint32(r.Data[0:4]))
			i := int(r.Header.Seq - seqBase)
			if errno != 0 {
				what := "batch"
				if i > 0 && i < int(count)-1 {
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
		return &batchError{Errors: errs}
	}
	return nil
}

func nlAlign(n int) int { return (n + 3) &^ 3 }
