package client

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/internal/wire"
)

// WithBulk turns the bulk channel on or off (default on): WriteAt then goes
// over a plain TCP connection with binary framing beside gRPC (see the
// datapath package doc, Protocol), which costs a fraction of gRPC's CPU per
// byte. A server that does not speak it is detected at the first write, and
// writes then go over gRPC.
func WithBulk(on bool) Option { return func(o *options) { o.noBulk = !on } }

// errBulkTransport marks a failure of the bulk connection itself (not the
// server's answer): retried like gRPC's Unavailable.
var errBulkTransport = errors.New("bulk connection failed")

// errBulkUnsupported: the bulk channel is off, or the server did not answer
// the hello (it predates the bulk channel); the write goes over gRPC.
var errBulkUnsupported = errors.New("server does not speak the bulk protocol")

type bulkResult struct {
	code uint8
	msg  string
	gen  uint64 // the generation a session request opened
	err  error
}

// bulkConn is one bulk connection: senders take wmu to write a request whole;
// one reader goroutine hands responses to the waiting callers by id.
type bulkConn struct {
	c       net.Conn
	batch   *batchConn // under c when c is TLS: a request's records in few socket writes
	token   string     // the token its hello carried
	boot    string     // the server's boot id, from the hello's answer ("": none reported)
	wmu     sync.Mutex
	hdr     []byte      // a request's header (and, over TLS, its payload's first bytes)
	vec     [2][]byte   // header and payload for one writev (plaintext) ...
	bufs    net.Buffers // ... through bufs: fields, so no request allocates them
	mu      sync.Mutex
	pending map[uint64]chan bulkResult
	nextID  uint64
	err     error // set once the connection is dead
	retired bool  // the token changed: no new writes; closed once none is pending
}

func dialBulk(ctx context.Context, addr, token string, tlsCfg *tls.Config) (*bulkConn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errBulkTransport, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	var batch *batchConn
	if tlsCfg != nil {
		batch = &batchConn{Conn: c}
		tc := tls.Client(batch, tlsCfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = c.Close()
			// A certificate the CA does not vouch for is final; anything else
			// (a reset, a timeout) may pass on the next attempt.
			var verr *tls.CertificateVerificationError
			if errors.As(err, &verr) {
				return nil, fmt.Errorf("datapath %s: TLS: %w", addr, err)
			}
			return nil, fmt.Errorf("%w: TLS handshake: %v", errBulkTransport, err)
		}
		c = tc
	}
	br := bufio.NewReaderSize(c, 16<<10)
	if _, err := c.Write(wire.AppendBulkHello(nil, token)); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("%w: hello: %v", errBulkTransport, err)
	}
	res, err := readBulkResponse(br)
	if err != nil {
		// Connected, but no valid answer: a server from before the bulk
		// channel (gRPC closes the connection or answers with HTTP/2), or one
		// that died just now. Either way gRPC is the safe path for this write.
		_ = c.Close()
		return nil, fmt.Errorf("%w (%v)", errBulkUnsupported, err)
	}
	if err := datapath.BulkError(res.code, res.msg); err != nil {
		_ = c.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	b := &bulkConn{c: c, batch: batch, token: token, boot: res.msg, pending: map[uint64]chan bulkResult{}}
	go b.readLoop(br)
	return b, nil
}

func readBulkResponse(br *bufio.Reader) (bulkResult, error) {
	var h [wire.BulkResponseHeaderLen]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return bulkResult{}, err
	}
	r, err := wire.DecodeBulkResponse(h[:])
	if err != nil {
		return bulkResult{}, err
	}
	msg := make([]byte, r.MsgLen)
	if _, err := io.ReadFull(br, msg); err != nil {
		return bulkResult{}, err
	}
	return bulkResult{code: r.Code, msg: string(msg), gen: r.Gen}, nil
}

func (b *bulkConn) readLoop(br *bufio.Reader) {
	var h [wire.BulkResponseHeaderLen]byte
	for {
		if _, err := io.ReadFull(br, h[:]); err != nil {
			b.fail(err)
			return
		}
		r, err := wire.DecodeBulkResponse(h[:])
		if err != nil {
			b.fail(err)
			return
		}
		msg := ""
		if r.MsgLen > 0 {
			m := make([]byte, r.MsgLen)
			if _, err := io.ReadFull(br, m); err != nil {
				b.fail(err)
				return
			}
			msg = string(m)
		}
		b.mu.Lock()
		ch := b.pending[r.ID]
		delete(b.pending, r.ID)
		done := b.retired && len(b.pending) == 0
		b.mu.Unlock()
		if ch != nil {
			ch <- bulkResult{code: r.Code, msg: msg, gen: r.Gen}
		} else if r.ID == 0 {
			// The server refused the connection as a whole (a malformed request).
			b.fail(datapath.BulkError(r.Code, msg))
			return
		}
		if done {
			b.fail(net.ErrClosed)
			return
		}
	}
}

// retire takes the connection out of use (its token was replaced): writes in
// flight get their answers, then it closes.
func (b *bulkConn) retire() {
	b.mu.Lock()
	b.retired = true
	idle := len(b.pending) == 0
	b.mu.Unlock()
	if idle {
		b.fail(net.ErrClosed)
	}
}

// fail marks the connection dead and fails every waiting caller.
func (b *bulkConn) fail(err error) {
	_ = b.c.Close()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil {
		b.err = fmt.Errorf("%w: %v", errBulkTransport, err)
	}
	for id, ch := range b.pending {
		ch <- bulkResult{err: b.err}
		delete(b.pending, id)
	}
}

func (b *bulkConn) dead() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err != nil
}

var resultChans = sync.Pool{New: func() any { return make(chan bulkResult, 1) }}

// do sends one request (r's ID is set here; p is a write's payload) and
// waits for its answer, returning the generation the answer carries. p is no
// longer referenced when do returns: the request is written to the socket
// synchronously. A request left unanswered when ctx ends closes the
// connection: its path may be black-holed, and the next requests go on a
// fresh one.
func (b *bulkConn) do(ctx context.Context, r wire.BulkRequest, volumeID, node string, p []byte) (uint64, error) {
	ch := resultChans.Get().(chan bulkResult)
	b.mu.Lock()
	if b.err != nil {
		err := b.err
		b.mu.Unlock()
		return 0, err
	}
	b.nextID++
	r.ID = b.nextID
	b.pending[r.ID] = ch
	b.mu.Unlock()

	b.wmu.Lock()
	dl, _ := ctx.Deadline()
	_ = b.c.SetWriteDeadline(dl)
	r.DataLen = len(p)
	b.hdr = wire.AppendBulkRequest(b.hdr[:0], r, volumeID, node)
	err := b.send(p)
	b.wmu.Unlock()
	if err != nil {
		// A request may be half sent: the connection is unusable.
		b.fail(err)
	}
	select {
	case res := <-ch:
		resultChans.Put(ch)
		if res.err != nil {
			return 0, res.err
		}
		return res.gen, datapath.BulkError(res.code, res.msg)
	case <-ctx.Done():
		b.mu.Lock()
		_, waiting := b.pending[r.ID]
		delete(b.pending, r.ID)
		b.mu.Unlock()
		if !waiting { // answered meanwhile: the channel is written
			res := <-ch
			if res.err != nil {
				return 0, res.err
			}
			return res.gen, datapath.BulkError(res.code, res.msg)
		}
		b.fail(fmt.Errorf("request %d unanswered: %w", r.ID, ctx.Err()))
		return 0, ctx.Err()
	}
}

// tlsRecordData is the most data one TLS record carries (2^14 bytes, RFC
// 8446 section 5.1).
const tlsRecordData = 16 << 10

// send writes the request header in b.hdr and the payload p (b.wmu is held):
// in plaintext with one writev; over TLS gathered under the records'
// batchConn, so header and payload leave in a few large socket writes.
//
// Over TLS the header and the payload's first bytes go in one record, so
// every record of a request but its last is full and a request takes the
// fewest records its size allows: a 4 KiB write is one record, not two (a
// record costs the server a read and an open of its own, and 22 bytes on the
// wire). Only those first bytes are copied.
func (b *bulkConn) send(p []byte) error {
	if b.batch == nil {
		b.vec = [2][]byte{b.hdr, p}
		b.bufs = b.vec[:]
		_, err := b.bufs.WriteTo(b.c)
		b.vec, b.bufs = [2][]byte{}, nil
		return err
	}
	n := min(len(p), max(tlsRecordData-len(b.hdr), 0))
	b.hdr = append(b.hdr, p[:n]...)
	b.batch.hold()
	_, err := b.c.Write(b.hdr)
	if err == nil && n < len(p) {
		_, err = b.c.Write(p[n:])
	}
	if ferr := b.batch.flush(); err == nil {
		err = ferr
	}
	return err
}

// openSession opens a new write session generation for (volumeID, node,
// epoch) and returns it.
func (b *bulkConn) openSession(ctx context.Context, volumeID, node string, epoch uint64) (uint64, error) {
	gen, err := b.do(ctx, wire.BulkRequest{Op: wire.BulkOpSession, Epoch: epoch}, volumeID, node, nil)
	if err == nil && gen == 0 {
		err = fmt.Errorf("%w: the server opened a write session without a generation", errBulkTransport)
	}
	return gen, err
}

// bulkConns is how many bulk connections a client keeps: writes in flight are
// spread over them, so sending (one request at a time per connection) and the
// server's reading run on several cores.
const bulkConns = 2

// bulkRetryAfter is how long a client writes over gRPC after a server did not
// answer the bulk hello, before it tries the bulk channel again.
const bulkRetryAfter = time.Minute

// bulkPool is the client's bulk connections to one server.
type bulkPool struct {
	conns [bulkConns]*bulkConn
	next  int
	// retryAt: the server did not answer the bulk hello; gRPC until then.
	retryAt time.Time
}

// poolLocked returns the bulk pool of the server at addr. The caller holds
// c.bulkMu.
func (c *Client) poolLocked(addr string) *bulkPool {
	if c.bulkPools == nil {
		c.bulkPools = map[string]*bulkPool{}
	}
	p := c.bulkPools[addr]
	if p == nil {
		p = &bulkPool{}
		c.bulkPools[addr] = p
	}
	return p
}

// bulkConn returns one of the client's live bulk connections to the server
// at addr (round robin), dialing it if needed. It gives errBulkUnsupported
// for a minute after that server did not answer the hello.
func (c *Client) bulkConn(ctx context.Context, addr string) (*bulkConn, error) {
	c.bulkMu.Lock()
	defer c.bulkMu.Unlock()
	p := c.poolLocked(addr)
	if c.bulkOff || time.Now().Before(p.retryAt) {
		return nil, errBulkUnsupported
	}
	p.next = (p.next + 1) % bulkConns
	token := c.token.get()
	if b := p.conns[p.next]; b != nil && !b.dead() {
		if b.token == token {
			return b, nil
		}
		b.retire()
	}
	b, err := dialBulk(ctx, addr, token, c.tlsFor(addr, true))
	if errors.Is(err, errBulkUnsupported) {
		p.retryAt = time.Now().Add(bulkRetryAfter)
	}
	if err != nil {
		return nil, err
	}
	p.conns[p.next] = b
	return b, nil
}

func (c *Client) closeBulk() {
	c.bulkMu.Lock()
	defer c.bulkMu.Unlock()
	c.bulkOff = true
	for _, p := range c.bulkPools {
		for _, b := range p.conns {
			if b != nil {
				b.fail(net.ErrClosed)
			}
		}
	}
}

// maxStaleResends is how many times one write is sent again at once under a
// newer generation after the server refused it as stale (a generation opened
// by another write of the same volume meanwhile, or a server restart).
const maxStaleResends = 8

// writeBulk is WriteAt over the bulk channel, with the same retry rules as a
// gRPC write: a failed connection is retried (same epoch: a write is never
// moved to a new epoch), a timeout or the server's answer is not, except a
// refusal as stale (nothing written), which is sent again at once under a new
// generation. It returns errBulkUnsupported (wrapped) if the server does not
// speak it: the write then goes over gRPC, under the same sessions.
func (c *Client) writeBulk(ctx context.Context, w ioWrite) error {
	volumeID, follow := w.vol, w.at == ""
	if !bulkName(volumeID) || !bulkName(w.node) {
		// The frame cannot carry it; gRPC gets the server's own refusal.
		return errBulkUnsupported
	}
	backoff := c.opts.minBackoff
	for attempt, stale, moves := 0, 0, 0; ; attempt++ {
		addr := c.addrOf(w)
		actx, cancel := context.WithTimeout(ctx, c.opts.timeout)
		err := c.writeBulkOnce(actx, addr, w)
		cancel()
		if errors.Is(err, datapath.ErrStaleSession) && stale < maxStaleResends && ctx.Err() == nil {
			stale++
			attempt--
			continue
		}
		if follow && moves < maxHolderMoves && ctx.Err() == nil && c.toHolder(volumeID, addr, err) {
			moves++ // nothing was written: the same write goes to the holder at once
			attempt--
			continue
		}
		if err == nil || errors.Is(err, errBulkUnsupported) {
			return err
		}
		if follow && ctx.Err() == nil {
			_ = c.askElsewhere(volumeID, addr, err) // the next attempt, if any, asks another server
		}
		if attempt >= c.opts.retries || ctx.Err() != nil || !errors.Is(err, errBulkTransport) {
			if err = c.bulkError(addr, attempt, err); follow {
				err = c.holderError(volumeID, addr, err)
			}
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: %w (last error: %v)", wire.MethodWrite, ctx.Err(), err)
		case <-t.C:
		}
		backoff = min(backoff*2, c.opts.maxBackoff)
	}
}

// writeBulkOnce is one attempt of writeBulk: the write goes out under the
// session's generation, opened first if none is. A write left without the
// server's answer abandons the generation, so the next write of the volume
// opens a new one and this write can never land after it.
func (c *Client) writeBulkOnce(ctx context.Context, addr string, w ioWrite) error {
	b, err := c.bulkConn(ctx, addr)
	if err != nil {
		return err
	}
	gen, err := c.sessions.gen(ctx, w.key(), w.epoch, b.openSession)
	if err != nil {
		return err
	}
	_, err = b.do(ctx, wire.BulkRequest{Op: wire.BulkOpWrite, Epoch: w.epoch, Offset: w.off, Gen: gen, MemberEpoch: w.member}, w.vol, w.node, w.p)
	var re *datapath.RemoteError
	switch {
	case err == nil:
		datapath.RecordBoot(ctx, b.boot)
	case errors.Is(err, datapath.ErrStaleSession) || !errors.As(err, &re):
		// Refused as stale, or no answer from the server: the write may
		// still arrive, and must not land after the writes that follow.
		c.sessions.end(w.key(), w.epoch, gen)
	}
	return err
}

func (c *Client) bulkError(addr string, attempt int, err error) error {
	var re *datapath.RemoteError
	if errors.As(err, &re) && re.Sentinel != nil {
		return err
	}
	return fmt.Errorf("datapath %s (bulk) at %s (%d attempts): %w", wire.MethodWrite, addr, attempt+1, err)
}

// bulkName reports whether a volume id or node name fits a bulk frame.
func bulkName(s string) bool { return s != "" && len(s) <= wire.BulkMaxName }
