package client

import (
	"net"
	"sync"
)

// batchFlushAt is how many bytes a held batch gathers before it goes to the
// socket without waiting for flush: four TLS records. Sending a large request
// in such pieces lets the server decrypt the first records while the client
// still encrypts the rest (a whole 1 MiB request in one write would make the
// two wait for each other), and each piece is one system call instead of four.
const batchFlushAt = 64 << 10

// batchConn sits under a bulk connection's *tls.Conn. crypto/tls writes every
// record (at most 16 KiB of payload) with its own call to the connection
// beneath, and each such call is a system call and, with TCP_NODELAY, a
// segment of its own: 65 of each for a 1 MiB request, the header record apart.
// Between hold and flush batchConn gathers those records and hands them to the
// socket batchFlushAt bytes at a time. Outside hold and flush (the handshake,
// the close alert) every write goes through at once.
//
// Records reach the socket in the order crypto/tls wrote them: it writes
// under its own lock, and batchConn appends under its own.
type batchConn struct {
	net.Conn
	mu      sync.Mutex
	holding bool
	buf     []byte
}

// hold starts gathering writes.
func (b *batchConn) hold() {
	b.mu.Lock()
	b.holding = true
	b.mu.Unlock()
}

// Write sends p, or appends it to the batch while held (sending the batch
// once it holds batchFlushAt bytes).
func (b *batchConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.holding {
		return b.Conn.Write(p)
	}
	b.buf = append(b.buf, p...)
	if len(b.buf) >= batchFlushAt {
		if err := b.sendLocked(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// flush sends what the batch holds and stops gathering.
func (b *batchConn) flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.holding = false
	return b.sendLocked()
}

func (b *batchConn) sendLocked() error {
	if len(b.buf) == 0 {
		return nil
	}
	_, err := b.Conn.Write(b.buf)
	b.buf = b.buf[:0]
	return err
}
