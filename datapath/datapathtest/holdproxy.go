package datapathtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath/internal/wire"
)

// HoldProxy forwards plaintext TCP connections to a server and can hold back
// what the client sends on one bulk connection (HoldNextBulk) or one gRPC
// connection (HoldNextGRPC), as a black-holed network path does: the bytes
// stay in the proxy, even after the client closed the connection, until
// Release delivers them in order, as TCP would once the path heals. What the
// server answers after the release is recorded (Answer; GRPCStatus decodes
// it for a gRPC connection), so a test can tell what became of the held
// request.
type HoldProxy struct {
	Addr string
	to   string
	lis  net.Listener

	mu     sync.Mutex
	armed  bool
	grpc   bool // armed for a gRPC connection, not a bulk one
	held   *proxyConn
	isHeld chan struct{} // closed once a connection is held
	conns  []net.Conn
}

// NewHoldProxy listens on 127.0.0.1 and forwards every connection to to;
// t.Cleanup closes it and its connections.
func NewHoldProxy(t testing.TB, to string) *HoldProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("hold proxy: %v", err)
	}
	p := &HoldProxy{Addr: lis.Addr().String(), to: to, lis: lis, isHeld: make(chan struct{})}
	t.Cleanup(p.close)
	go p.accept()
	return p
}

// HoldNextBulk makes the proxy hold the next request sent on a bulk
// connection whose hello the server has answered: that request and everything
// sent after it on that connection stay in the proxy until Release. Call it
// when no request is on its way, so the next bytes start a request.
func (p *HoldProxy) HoldNextBulk() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed, p.grpc = true, false
}

// HoldNextGRPC makes the proxy hold what the client sends next on a gRPC
// connection the server has answered, and everything after it on that
// connection, until Release. Unlike a bulk hold, Release does not pass on the
// client's close (Cut): the path heals with the server's side still open, so
// the server answers the late request and GRPCStatus can read the answer.
func (p *HoldProxy) HoldNextGRPC() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed, p.grpc = true, true
}

// HeldBytes waits until at least n bytes are held.
func (p *HoldProxy) HeldBytes(ctx context.Context, n int) error {
	return p.waitHeld(ctx, func(b []byte) bool { return len(b) >= n },
		func(got int) string { return fmt.Sprintf("%d of %d bytes held", got, n) })
}

// waitHeld waits until a connection is held and its held bytes satisfy
// done; short says what was held instead, when ctx ends first.
func (p *HoldProxy) waitHeld(ctx context.Context, done func([]byte) bool, short func(got int) string) error {
	if err := p.Held(ctx); err != nil {
		return err
	}
	p.mu.Lock()
	pc := p.held
	p.mu.Unlock()
	for {
		pc.mu.Lock()
		ok, got := done(pc.buf), len(pc.buf)
		pc.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", short(got), ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Cut ends the client's side of the held connection, as a client does that
// gives up on a path: its calls in flight there fail, and it reconnects
// through the proxy. The server's side stays open with the held bytes on
// their way.
func (p *HoldProxy) Cut() {
	p.mu.Lock()
	pc := p.held
	p.mu.Unlock()
	if pc != nil {
		_ = pc.client.Close()
	}
}

// GRPCStatus waits for the first gRPC status (grpc-status and grpc-message of
// a response's trailers) the server sent on the held gRPC connection after
// Release.
func (p *HoldProxy) GRPCStatus(ctx context.Context) (code uint32, msg string, err error) {
	p.mu.Lock()
	pc := p.held
	p.mu.Unlock()
	if pc == nil {
		return 0, "", errors.New("no gRPC connection is held")
	}
	for {
		pc.mu.Lock()
		if pc.h2 == nil {
			pc.mu.Unlock()
			return 0, "", errors.New("the held connection is not a gRPC connection")
		}
		if len(pc.h2.statuses) > 0 {
			s := pc.h2.statuses[0]
			pc.mu.Unlock()
			return s.code, s.msg, nil
		}
		pc.mu.Unlock()
		select {
		case <-pc.more:
		case <-ctx.Done():
			return 0, "", ctx.Err()
		}
	}
}

// Held waits until a request is held.
func (p *HoldProxy) Held(ctx context.Context) error {
	select {
	case <-p.isHeld:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Release delivers the held bytes to the server (and the client's close, if
// it closed meanwhile); from then on the connection forwards as any other.
func (p *HoldProxy) Release() {
	p.mu.Lock()
	pc := p.held
	p.mu.Unlock()
	if pc != nil {
		pc.release()
	}
}

// Answer waits for the first n bytes the server sent on the held connection
// after Release, and returns them.
func (p *HoldProxy) Answer(ctx context.Context, n int) ([]byte, error) {
	p.mu.Lock()
	pc := p.held
	p.mu.Unlock()
	if pc == nil {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	for {
		pc.mu.Lock()
		if pc.after.Len() >= n {
			out := bytes.Clone(pc.after.Bytes()[:n])
			pc.mu.Unlock()
			return out, nil
		}
		pc.mu.Unlock()
		select {
		case <-pc.more:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (p *HoldProxy) close() {
	_ = p.lis.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
}

func (p *HoldProxy) accept() {
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.to)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		pc := &proxyConn{p: p, client: c, server: s, more: make(chan struct{}, 1)}
		go pc.fromClient()
		go pc.fromServer()
	}
}

// proxyConn is one forwarded connection.
type proxyConn struct {
	p              *HoldProxy
	client, server net.Conn

	wmu      sync.Mutex  // orders writes to the server; taken before mu
	answered atomic.Bool // the server sent something (the hello's answer)
	mu       sync.Mutex
	head     []byte // the first bytes the client sent (up to the magic's length)
	held     bool
	keepOpen bool // a gRPC hold: Release does not pass the client's close on
	released bool
	buf      []byte      // held bytes
	eof      bool        // the client closed while held
	h2       *h2Trailers // a gRPC connection's statuses, from the server's first byte
	after    bytes.Buffer
	more     chan struct{} // a signal per growth of after
}

// take decides what becomes of a chunk from the client: true if it is held.
// pc.mu is held.
func (pc *proxyConn) take(chunk []byte) bool {
	if len(pc.head) < wire.BulkMagicLen {
		pc.head = append(pc.head, chunk[:min(len(chunk), wire.BulkMagicLen-len(pc.head))]...)
	}
	if pc.held && !pc.released {
		pc.buf = append(pc.buf, chunk...)
		return true
	}
	p := pc.p
	p.mu.Lock()
	defer p.mu.Unlock()
	bulk := string(pc.head) == wire.BulkMagic
	if p.armed && pc.answered.Load() && len(pc.head) == wire.BulkMagicLen && bulk != p.grpc {
		p.armed, p.held, pc.held, pc.keepOpen = false, pc, true, p.grpc
		pc.buf = append(pc.buf, chunk...)
		close(p.isHeld)
		return true
	}
	return false
}

func (pc *proxyConn) fromClient() {
	b := make([]byte, 256<<10)
	for {
		n, err := pc.client.Read(b)
		if n > 0 {
			pc.mu.Lock()
			held := pc.take(b[:n])
			pc.mu.Unlock()
			if !held {
				pc.wmu.Lock()
				_, _ = pc.server.Write(b[:n])
				pc.wmu.Unlock()
			}
		}
		if err != nil {
			pc.mu.Lock()
			held := pc.held && !pc.released
			pc.eof = held
			pc.mu.Unlock()
			if !held {
				pc.wmu.Lock()
				closeWrite(pc.server)
				pc.wmu.Unlock()
			}
			return
		}
	}
}

func (pc *proxyConn) release() {
	pc.wmu.Lock()
	defer pc.wmu.Unlock()
	pc.mu.Lock()
	if pc.released {
		pc.mu.Unlock()
		return
	}
	pc.released = true
	buf, eof := pc.buf, pc.eof
	pc.buf = nil
	pc.mu.Unlock()
	_, _ = pc.server.Write(buf)
	if eof && !pc.keepOpen {
		closeWrite(pc.server)
	}
}

func (pc *proxyConn) fromServer() {
	defer pc.client.Close()
	b := make([]byte, 64<<10)
	for {
		n, err := pc.server.Read(b)
		if n > 0 {
			pc.answered.Store(true)
			pc.mu.Lock()
			if pc.h2 == nil && len(pc.head) == wire.BulkMagicLen && string(pc.head) != wire.BulkMagic {
				pc.h2 = newH2Trailers()
			}
			if pc.h2 != nil {
				pc.h2.feed(b[:n], pc.released)
			}
			if pc.released {
				pc.after.Write(b[:n])
				select {
				case pc.more <- struct{}{}:
				default:
				}
			}
			pc.mu.Unlock()
			// The client may be gone (it gave up on the held request):
			// keep reading, so the server's answer is still recorded.
			_, _ = pc.client.Write(b[:n])
		}
		if err != nil {
			if err != io.EOF {
				_ = pc.server.Close()
			}
			return
		}
	}
}

func closeWrite(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
		return
	}
	_ = c.Close()
}

// HeldGRPCRequest waits until the held bytes of a gRPC connection hold a
// whole request: an HTTP/2 DATA frame that ends its stream. Counting bytes is
// not enough: a request is its message plus gRPC's and HTTP/2's framing, and
// a request held in part would wait on the server for the rest, which the
// cut client never sends. It assumes the hold began at a frame boundary, as
// it does when no request was on its way.
func (p *HoldProxy) HeldGRPCRequest(ctx context.Context) error {
	return p.waitHeld(ctx, endsAStream,
		func(got int) string { return fmt.Sprintf("%d bytes held, no whole gRPC request among them", got) })
}

// endsAStream reports whether b, read from the start of an HTTP/2 frame,
// holds a whole DATA frame with the END_STREAM flag.
func endsAStream(b []byte) bool {
	for {
		typ, flags, _, rest, ok := h2Frame(b)
		if !ok {
			return false
		}
		if typ == h2FrameData && flags&h2FlagEndStream != 0 {
			return true
		}
		b = rest
	}
}
