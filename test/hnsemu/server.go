package hnsemu

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// The DLLs' wire (dll/emuclient.h): one call per TCP connection.
//
//	request:  u32 count, count × (u32 length, UTF-8 bytes; length 0xFFFFFFFF: NULL)
//	          field 0 the node, field 1 the function, then its arguments
//	response: u32 HRESULT, u64 handle, then the output and result fields as above
//
// Little-endian. A request that does not parse closes the connection: the
// DLL then returns RPC_S_SERVER_UNAVAILABLE to its caller.

const (
	wireNull      = 0xFFFFFFFF
	wireMaxFields = 16
	wireMaxField  = 64 << 20
)

// DefaultAddr is where the DLLs look when HNSEMU_ADDR is not set.
const DefaultAddr = "127.0.0.1:5895"

func readRequest(r io.Reader) (nodeName, fn string, args []*string, err error) {
	var count uint32
	if err := binary.Read(r, binary.LittleEndian, &count); err != nil {
		return "", "", nil, err
	}
	if count < 2 || count > wireMaxFields {
		return "", "", nil, fmt.Errorf("request with %d fields", count)
	}
	fields := make([]*string, count)
	for i := range fields {
		var n uint32
		if err := binary.Read(r, binary.LittleEndian, &n); err != nil {
			return "", "", nil, err
		}
		if n == wireNull {
			continue
		}
		if n > wireMaxField {
			return "", "", nil, fmt.Errorf("field of %d bytes", n)
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return "", "", nil, err
		}
		s := string(b)
		fields[i] = &s
	}
	if fields[0] != nil {
		nodeName = *fields[0]
	}
	if fields[1] == nil {
		return "", "", nil, errors.New("request without a function")
	}
	return nodeName, *fields[1], fields[2:], nil
}

func writeResponse(w io.Writer, hr uint32, handle uint64, out, result *string) error {
	bw := bufio.NewWriter(w)
	_ = binary.Write(bw, binary.LittleEndian, hr)
	_ = binary.Write(bw, binary.LittleEndian, handle)
	for _, s := range []*string{out, result} {
		if s == nil {
			_ = binary.Write(bw, binary.LittleEndian, uint32(wireNull))
			continue
		}
		_ = binary.Write(bw, binary.LittleEndian, uint32(len(*s)))
		_, _ = bw.WriteString(*s)
	}
	return bw.Flush()
}

// ServeDLL answers the DLLs' calls on l until it is closed.
func (e *Emulator) ServeDLL(l net.Listener) error {
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go func() {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			nodeName, fn, args, err := readRequest(bufio.NewReader(c))
			if err != nil {
				return
			}
			hr, h, out, result := e.Call(nodeName, fn, args)
			_ = writeResponse(c, hr, h, out, result)
		}()
	}
}

// Server is a running emulator: the DLLs' listener and the control API's.
type Server struct {
	*Emulator
	DLLAddr, ControlAddr string
	dll                  net.Listener
	http                 *http.Server
}

// Start listens on dllAddr and controlAddr (":0" ports pick free ones).
func Start(dllAddr, controlAddr string) (*Server, error) {
	e := New()
	dl, err := net.Listen("tcp", dllAddr)
	if err != nil {
		return nil, fmt.Errorf("hnsemu: DLL listener: %w", err)
	}
	cl, err := net.Listen("tcp", controlAddr)
	if err != nil {
		dl.Close()
		return nil, fmt.Errorf("hnsemu: control listener: %w", err)
	}
	s := &Server{Emulator: e, DLLAddr: dl.Addr().String(), ControlAddr: cl.Addr().String(), dll: dl,
		http: &http.Server{Handler: e.Handler(), ReadHeaderTimeout: 10 * time.Second}}
	go func() { _ = e.ServeDLL(dl) }()
	go func() { _ = s.http.Serve(cl) }()
	return s, nil
}

// Close stops both listeners.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return errors.Join(s.dll.Close(), s.http.Shutdown(ctx))
}
