package datapath

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/vigil-storage/vigil/datapath/internal/wire"
)

// The bulk channel (see package wire, bulk.go, and the Protocol section of the
// package doc) carries writes beside gRPC on the same listener.

// helloTimeout bounds how long a new connection may take to send its first
// bytes (the gRPC preface or the bulk hello).
const helloTimeout = 10 * time.Second

// bulkInFlight is how many writes of one bulk connection the server runs at
// once; the reader stops reading further requests while all are busy.
const bulkInFlight = 4

// Bulk response codes: 0 is success, 1..len(wireErrors) name the sentinel at
// that index of wireErrors, bulkCodeInternal is any other error.
const (
	bulkCodeOK       uint8 = 0
	bulkCodeInternal uint8 = 255
)

var bulkBufs = sync.Pool{New: func() any { b := make([]byte, wire.BulkMaxData); return &b }}

func bulkCode(err error) uint8 {
	if err == nil {
		return bulkCodeOK
	}
	for i, w := range wireErrors {
		if errors.Is(err, w.err) {
			return uint8(i + 1)
		}
	}
	return bulkCodeInternal
}

// BulkError turns a bulk response code and message (from the server) into the
// same error a gRPC call would return: a *RemoteError that unwraps to the
// sentinel. It returns nil for code 0. For datapath/client.
func BulkError(code uint8, msg string) error {
	if code == bulkCodeOK {
		return nil
	}
	if i := int(code) - 1; i >= 0 && i < len(wireErrors) {
		re := &RemoteError{Code: wireErrors[i].code, Message: msg, Sentinel: wireErrors[i].err}
		if re.Sentinel == ErrNotHolder {
			re.HolderAddress, re.Message, _ = strings.Cut(msg, "\n")
		}
		return re
	}
	return &RemoteError{Code: codes.Internal, Message: msg}
}

// bulkServer tracks the bulk connections of a Server so Stop can end them.
type bulkServer struct {
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	stopping bool
	wg       sync.WaitGroup
}

// track registers c; false if the server is stopping (c must then be closed).
func (b *bulkServer) track(c net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopping {
		return false
	}
	if b.conns == nil {
		b.conns = map[net.Conn]struct{}{}
	}
	b.conns[c] = struct{}{}
	b.wg.Add(1)
	return true
}

func (b *bulkServer) untrack(c net.Conn) {
	b.mu.Lock()
	delete(b.conns, c)
	b.mu.Unlock()
	b.wg.Done()
}

// stop stops reading new requests on every bulk connection, waits up to grace
// for the writes in progress to be answered, then closes every connection and
// waits for its handler to return (a write in progress always completes or
// fails before that: it runs in this process).
func (b *bulkServer) stop(grace time.Duration) {
	b.mu.Lock()
	b.stopping = true
	for c := range b.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.CloseRead()
		} else {
			_ = c.SetReadDeadline(time.Now())
		}
	}
	b.mu.Unlock()
	done := make(chan struct{})
	go func() { b.wg.Wait(); close(done) }()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	b.mu.Lock()
	for c := range b.conns {
		_ = c.Close()
	}
	b.mu.Unlock()
	<-done
}

// spliceMin is the smallest payload worth a splice: below it a copy is cheaper
// than the extra system calls.
const spliceMin = 64 << 10

// bulkReauth is how often a bulk connection's token is taken to the
// authenticator again: an identity proved at the hello does not outlive its
// token (a TokenReview result is cached for a bounded time, so this is cheap).
// A variable for tests.
var bulkReauth = 10 * time.Second

// bulkSession is the server's state for one bulk connection.
type bulkSession struct {
	s        *Server
	id       Identity  // proved by the hello's token
	token    string    // to prove it again every bulkReauth
	proved   time.Time // when id was last proved
	c        net.Conn
	in       *drainReader
	raw      syscall.RawConn // nil: no splicing on this connection
	wmu      sync.Mutex
	out      []byte // a response, under wmu
	sem      chan struct{}
	inflight sync.WaitGroup
	stages   chan *stage
	made     []*stage
	// hdr and names receive each request's header and names: read by next
	// only, one request at a time, so no request allocates them.
	hdr   [wire.BulkRequestHeaderLen]byte
	names [2 * wire.BulkMaxName]byte
}

// serveBulk runs one bulk connection whose magic was already read: the hello,
// then requests until the connection ends or a request is malformed (a
// malformed request is answered with ErrInvalidArgument under its id, or id 0
// if the header was unreadable, and the connection is closed). Every request
// is fully received (into a buffer or a pipe) before the store is called, so a
// slow or dead client never holds a volume lock.
func (s *Server) serveBulk(c net.Conn, br *bufio.Reader) {
	defer s.bulk.untrack(c)
	defer c.Close()
	defer s.bound.forget(c.RemoteAddr().String())
	b := &bulkSession{s: s, c: c, in: &drainReader{br: br, c: c}, sem: make(chan struct{}, bulkInFlight), stages: make(chan *stage, bulkInFlight)}
	var err error
	if b.id, b.token, err = s.bulkHello(br, c.RemoteAddr().String()); err != nil {
		_ = b.reply(0, 0, err)
		return
	}
	b.proved = time.Now()
	_ = c.SetReadDeadline(time.Time{})
	// The accepted hello's message is the machine's boot id (WithBootID; a
	// client from before boot ids ignores it).
	out := wire.AppendBulkResponse(nil, 0, bulkCodeOK, 0, s.bootID)
	b.wmu.Lock()
	_, err = c.Write(out)
	b.wmu.Unlock()
	if err != nil {
		return
	}
	if sc, ok := c.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			b.raw = raw
		}
	}
	defer b.closeStages()
	defer b.inflight.Wait()
	for b.next() {
	}
}

// bulkMessage is the message of a bulk response refusing with err: its
// text, after the holder's address and a newline for NOT_HOLDER (the bulk
// frame has no other place for it; BulkError takes it apart).
func bulkMessage(err error) string {
	if err == nil {
		return ""
	}
	if nh := (*NotHolderError)(nil); errors.As(err, &nh) {
		return nh.HolderAddress + "\n" + err.Error()
	}
	return err.Error()
}

// reply answers request id; gen is the generation a session request opened.
func (b *bulkSession) reply(id, gen uint64, err error) error {
	msg := bulkMessage(err)
	b.wmu.Lock()
	defer b.wmu.Unlock()
	b.out = wire.AppendBulkResponse(b.out[:0], id, bulkCode(err), gen, msg)
	_, werr := b.c.Write(b.out)
	return werr
}

// next reads one request and starts its write; false ends the connection.
func (b *bulkSession) next() bool {
	if _, err := io.ReadFull(b.in, b.hdr[:]); err != nil {
		return false // end of connection (a truncated header is one too)
	}
	req, err := wire.DecodeBulkRequest(b.hdr[:])
	if err != nil {
		_ = b.reply(req.ID, 0, fmt.Errorf("%w: %v; closing the bulk connection", ErrInvalidArgument, err))
		return false
	}
	nm := b.names[:req.VolLen+req.NodeLen]
	if _, err := io.ReadFull(b.in, nm); err != nil {
		return false
	}
	volumeID, node := string(nm[:req.VolLen]), string(nm[req.VolLen:])
	if err := b.authorize(node); err != nil {
		// Nothing of the payload is read: the connection ends here.
		_ = b.reply(req.ID, 0, fmt.Errorf("%w; closing the bulk connection", err))
		return false
	}
	b.sem <- struct{}{}
	if req.Op == wire.BulkOpSession {
		b.start(req, func() (uint64, error) {
			return b.s.store.OpenWriteSession(volumeID, node, req.Epoch)
		})
		return true
	}
	if st := b.stage(req.DataLen); st != nil {
		got, err := st.fill(b.raw, req.DataLen)
		if err == nil {
			b.start(req, func() (uint64, error) {
				err := b.s.store.sessions.write(volumeID, node, req.Epoch, req.Gen, func() error {
					return b.s.store.write(volumeID, node, req.Epoch, req.MemberEpoch, req.Offset, int64(req.DataLen), func(f File) error {
						return st.drainTo(f, req.Offset, req.DataLen)
					})
				})
				st.discard() // leftovers of a refused or failed write
				b.stages <- st
				return 0, err
			})
			return true
		}
		if !errors.Is(err, errStageFull) {
			st.discard()
			b.stages <- st
			<-b.sem
			return false // truncated payload: nothing is written
		}
		return b.readRest(req, volumeID, node, st, got)
	}
	return b.readRest(req, volumeID, node, nil, 0)
}

// readRest receives the payload into a pooled buffer (the first got bytes
// already sit in st) and starts the write.
func (b *bulkSession) readRest(req wire.BulkRequest, volumeID, node string, st *stage, got int) bool {
	bp := bulkBufs.Get().(*[]byte)
	data := (*bp)[:req.DataLen]
	ok := true
	if st != nil {
		for n := 0; n < got && ok; {
			m, err := st.readOut(data[n:got])
			ok = err == nil && m > 0
			n += m
		}
		b.stages <- st
	}
	if ok {
		_, err := io.ReadFull(b.in, data[got:])
		ok = err == nil
	}
	if !ok {
		bulkBufs.Put(bp)
		<-b.sem
		return false // truncated payload: nothing is written
	}
	b.start(req, func() (uint64, error) {
		err := b.s.store.writeInSession(volumeID, node, req.Epoch, req.Gen, req.MemberEpoch, req.Offset, data)
		bulkBufs.Put(bp)
		return 0, err
	})
	return true
}

// start runs a request (a write, or a session's open, which returns its
// generation) and answers: inline when it is the only request in flight and
// nothing more has arrived (saves a goroutine handoff per write), else in its
// own goroutine (holding a slot of sem).
func (b *bulkSession) start(req wire.BulkRequest, run func() (uint64, error)) {
	if len(b.sem) == 1 && b.in.br.Buffered() == 0 {
		gen, err := run()
		<-b.sem
		if b.reply(req.ID, gen, err) != nil {
			_ = b.c.Close()
		}
		return
	}
	b.inflight.Add(1)
	go func() {
		defer b.inflight.Done()
		gen, err := run()
		<-b.sem
		if b.reply(req.ID, gen, err) != nil {
			_ = b.c.Close()
		}
	}()
}

// stage returns a pipe for a payload of n bytes, or nil when the payload goes
// through a buffer: too small, too large for the pipe, bytes of it already
// buffered, or no splicing here.
func (b *bulkSession) stage(n int) *stage {
	if b.raw == nil || n < spliceMin || n > stagePipeSize || b.in.br.Buffered() > 0 {
		return nil
	}
	select {
	case st := <-b.stages:
		return st
	default:
	}
	if len(b.made) < bulkInFlight {
		st, err := newStage()
		if err != nil || st.size < n {
			if st != nil {
				st.close()
			}
			b.raw = nil // no (big enough) pipes: buffer from now on
			return nil
		}
		b.made = append(b.made, st)
		return st
	}
	return <-b.stages
}

func (b *bulkSession) closeStages() {
	for _, st := range b.made {
		st.close()
	}
}

// drainReader reads what the sniffing bufio.Reader already holds, then the
// connection directly (so the socket's data is left for splice).
type drainReader struct {
	br *bufio.Reader
	c  net.Conn
}

func (d *drainReader) Read(p []byte) (int, error) {
	if n := d.br.Buffered(); n > 0 {
		return d.br.Read(p[:min(len(p), n)])
	}
	return d.c.Read(p)
}

// authorize checks one write of the connection's identity as node, proving
// the identity again first when bulkReauth has passed since the last time.
func (b *bulkSession) authorize(node string) error {
	if time.Since(b.proved) >= bulkReauth {
		ctx, cancel := context.WithTimeout(context.Background(), helloTimeout)
		id, err := b.s.bound.authenticate(ctx, b.s.auth, b.c.RemoteAddr().String(), b.token)
		cancel()
		if err != nil {
			return err
		}
		b.id, b.proved = id, time.Now()
	}
	return Authorize(b.id, wire.MethodWrite, node)
}

// errBulkV1 is the answer to a client that opens a version 1 bulk connection.
var errBulkV1 = fmt.Errorf("%w: bulk protocol %s (unordered writes) is no longer served; this datapath speaks %s (write sessions). "+
	"Upgrade vigil-engine-node to the datapath's release: engines first, then the datapath, keeps writes flowing (a new engine writes over gRPC to an old datapath)",
	ErrInvalidArgument, wire.BulkMagicV1, wire.BulkMagic)

// refuseBulkV1 answers a version 1 hello with errBulkV1, in version 1's
// layout so that the old client shows it, logs it, and closes c.
func (s *Server) refuseBulkV1(c net.Conn, from net.Addr) {
	defer c.Close()
	s.store.log.Warn("datapath: refused a bulk connection of an older protocol version; upgrade the engine", "from", from.String(), "protocol", wire.BulkMagicV1, "want", wire.BulkMagic)
	_ = c.SetWriteDeadline(time.Now().Add(helloTimeout))
	_, _ = c.Write(wire.AppendBulkRefusalV1(nil, bulkCode(errBulkV1), errBulkV1.Error()))
}

// bulkHello reads the token that follows the magic and takes it to the
// authenticator, like the gRPC path does.
func (s *Server) bulkHello(br *bufio.Reader, conn string) (Identity, string, error) {
	var l [2]byte
	if _, err := io.ReadFull(br, l[:]); err != nil {
		return Identity{}, "", fmt.Errorf("%w: bulk hello: %v", ErrInvalidArgument, err)
	}
	n, err := wire.BulkHelloTokenLen(l)
	if err != nil {
		return Identity{}, "", fmt.Errorf("%w: %v", ErrUnauthenticated, err)
	}
	tok := make([]byte, n)
	if _, err := io.ReadFull(br, tok); err != nil {
		return Identity{}, "", fmt.Errorf("%w: bulk hello: %v", ErrInvalidArgument, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), helloTimeout)
	defer cancel()
	id, err := s.bound.authenticate(ctx, s.auth, conn, string(tok))
	if err != nil {
		return Identity{}, "", err
	}
	return id, string(tok), nil
}
