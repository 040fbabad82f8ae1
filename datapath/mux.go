package datapath

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/vigil-storage/vigil/datapath/internal/wire"
)

// muxListener sits between the real listener and gRPC: it accepts every
// connection, completes the TLS handshake when the server has TLS, reads the
// first wire.BulkMagicLen bytes (in a goroutine per connection, so a silent
// client delays nobody; handshake and bytes within helloTimeout) and hands
// bulk connections to the bulk handler and all others, with those bytes put
// back, to gRPC. With TLS, gRPC gets the *tls.Conn and runs without
// credentials of its own: the connection is already secured.
type muxListener struct {
	inner   net.Listener
	srv     *Server
	conns   chan net.Conn
	done    chan struct{}
	once    sync.Once
	errMu   sync.Mutex
	err     error
	pending sync.WaitGroup
	sniffed map[net.Conn]struct{} // connections being sniffed; closed by shut
}

func newMuxListener(inner net.Listener, srv *Server) *muxListener {
	m := &muxListener{inner: inner, srv: srv, conns: make(chan net.Conn), done: make(chan struct{})}
	go m.acceptLoop()
	return m
}

func (m *muxListener) acceptLoop() {
	for {
		c, err := m.inner.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			m.errMu.Lock()
			m.err = err
			m.errMu.Unlock()
			m.shut()
			return
		}
		m.errMu.Lock()
		if m.sniffed == nil {
			m.sniffed = map[net.Conn]struct{}{}
		}
		m.sniffed[c] = struct{}{}
		m.errMu.Unlock()
		m.pending.Add(1)
		go m.sniff(c)
	}
}

func (m *muxListener) sniff(raw net.Conn) {
	defer m.pending.Done()
	_ = raw.SetDeadline(time.Now().Add(helloTimeout))
	c := raw
	var err error
	if m.srv.tls != nil {
		// TLS first, on every connection: the first bytes are told apart
		// inside it (ALPN says the same: h2 or wire.BulkALPN).
		tc := tls.Server(raw, m.srv.tls)
		err = tc.Handshake()
		c = tc
	}
	var head []byte
	br := bufio.NewReaderSize(c, 16) // reads at most 16 bytes ahead
	if err == nil {
		head, err = br.Peek(wire.BulkMagicLen)
	}
	m.errMu.Lock()
	delete(m.sniffed, raw)
	m.errMu.Unlock()
	if err != nil {
		_ = c.Close()
		return
	}
	_ = raw.SetWriteDeadline(time.Time{})
	if string(head) == wire.BulkMagicV1 {
		m.srv.refuseBulkV1(c, raw.RemoteAddr())
		return
	}
	if string(head) == wire.BulkMagic {
		_, _ = br.Discard(wire.BulkMagicLen)
		if !m.srv.bulk.track(c) {
			_ = c.Close()
			return
		}
		m.srv.serveBulk(c, br)
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	select {
	case m.conns <- &peekedConn{Conn: c, r: br}:
	case <-m.done:
		_ = c.Close()
	}
}

// Accept returns the next gRPC connection.
func (m *muxListener) Accept() (net.Conn, error) {
	select {
	case c := <-m.conns:
		return c, nil
	case <-m.done:
		m.errMu.Lock()
		defer m.errMu.Unlock()
		if m.err != nil && !errors.Is(m.err, net.ErrClosed) {
			return nil, m.err
		}
		return nil, net.ErrClosed
	}
}

func (m *muxListener) shut() {
	m.once.Do(func() {
		close(m.done)
		_ = m.inner.Close()
		m.errMu.Lock()
		for c := range m.sniffed {
			_ = c.Close()
		}
		m.errMu.Unlock()
	})
}

// Close stops accepting; connections already handed out are not affected.
func (m *muxListener) Close() error { m.shut(); return nil }

// Addr is the real listener's address.
func (m *muxListener) Addr() net.Addr { return m.inner.Addr() }

// peekedConn is a connection whose first bytes sit in r's buffer.
type peekedConn struct {
	net.Conn
	r io.Reader
}

func (p *peekedConn) Read(b []byte) (int, error) { return p.r.Read(b) }
