package client

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/vigil-storage/vigil/datapath"
)

// Each volume's data is on one server of the datapath's group, its holder,
// and only the holder serves the volume's I/O: reads, writes (both
// channels), flushes and write sessions, and the reads of one volume
// (GetVolume, Attachments, Connectivity of a volume, ClearFailure). Another
// server refuses them with datapath.ErrNotHolder, naming the holder's
// address, before anything is read or written. The client then sends that
// volume's calls to the holder from then on (cached per volume), at once and
// at most maxHolderMoves times per call; the retries of a call that does not
// get an answer stay with the server it went to, so a holder that is down
// gets an error naming it within the call's bounded retries, and the other
// volumes are not held up.
//
// Write sessions are unchanged across a move: the session of a (volume,
// node) is forgotten when its volume moves, so the next write opens a new
// generation at the holder, and a write is sent again only with the epoch
// its caller gave. A write refused as not held wrote nothing anywhere, so
// sending it to the holder cannot land it twice; a write that went
// unanswered still ends its generation (at whichever server it went to)
// before anything else of the volume is sent.

// maxHolderMoves bounds how often one call follows a NOT_HOLDER refusal.
const maxHolderMoves = 2

// holders is the client's map of volume -> the address of its holder, for
// volumes whose holder is not the Dial address.
type holders struct {
	mu sync.Mutex
	m  map[string]string
	// guessed marks the volumes whose entry in m is a server asked because
	// the one before did not answer (askElsewhere), not a holder a server
	// named.
	guessed map[string]bool
	// namedDial marks the volumes a server named the Dial address the
	// holder of.
	namedDial map[string]bool
}

// holderOf returns the address vol's calls go to: its holder when a server
// named one, else the Dial address.
func (c *Client) holderOf(vol string) string {
	c.holders.mu.Lock()
	defer c.holders.mu.Unlock()
	if a, ok := c.holders.m[vol]; ok {
		return a
	}
	return c.addr
}

// toHolder reports whether err, the answer of the server at addr to a call
// about vol, is a NOT_HOLDER refusal naming another server; it then records
// that server as vol's holder and forgets vol's write sessions (any
// generation was opened elsewhere), so the call may go there at once.
func (c *Client) toHolder(vol, addr string, err error) bool {
	if err == nil {
		return false
	}
	var re *datapath.RemoteError
	if !errors.As(err, &re) { // a gRPC status; the bulk channel's answers are RemoteErrors already
		_ = errors.As(datapath.FromStatus(err), &re)
	}
	if re == nil || !errors.Is(re, datapath.ErrNotHolder) || re.HolderAddress == "" || re.HolderAddress == addr {
		return false
	}
	c.holders.mu.Lock()
	if c.holders.m == nil {
		c.holders.m = map[string]string{}
	}
	if re.HolderAddress == c.addr {
		delete(c.holders.m, vol)
		if c.holders.namedDial == nil {
			c.holders.namedDial = map[string]bool{}
		}
		c.holders.namedDial[vol] = true
	} else {
		delete(c.holders.namedDial, vol)
		c.holders.m[vol] = re.HolderAddress
	}
	delete(c.holders.guessed, vol)
	c.holders.mu.Unlock()
	c.sessions.forget(vol)
	return true
}

// askElsewhere reports whether err, from the server at addr about vol,
// left the call unanswered (no server's word: a connection that failed or
// timed out) while the client does not know vol's holder (addr is the Dial
// address, or a server asked before); it then sends vol's calls to the next
// server of the group, which serves the volume or names its holder
// (toHolder). So the Dial address down does not make every volume it does
// not hold unreachable (the first server of every client's list is the node
// a power cut took). Only the holder ever applies a volume's write, so
// asking another server cannot land one twice; the volume's write sessions
// are forgotten, as on a move. Once every server was asked, it stops.
func (c *Client) askElsewhere(vol, addr string, err error) bool {
	servers := c.group.servers
	if vol == "" || len(servers) < 2 || !unanswered(err) {
		return false
	}
	c.holders.mu.Lock()
	known, ok := c.holders.m[vol]
	if ok && (!c.holders.guessed[vol] || known != addr) || !ok && addr != c.addr {
		c.holders.mu.Unlock()
		return false
	}
	next := servers[(slices.Index(servers, addr)+1)%len(servers)]
	if next == c.addr {
		c.holders.mu.Unlock()
		return false // every server was asked
	}
	// Each map on its own: toHolder makes m (and namedDial) without guessed,
	// so a client that followed one NOT_HOLDER before its Dial address went
	// down must not write to a nil guessed (the engines of two nodes died of
	// it at a datapath leader's power cut, and their nodes were fenced).
	if c.holders.m == nil {
		c.holders.m = map[string]string{}
	}
	if c.holders.guessed == nil {
		c.holders.guessed = map[string]bool{}
	}
	c.holders.m[vol], c.holders.guessed[vol] = next, true
	c.holders.mu.Unlock()
	c.sessions.forget(vol)
	return true
}

// unanswered reports whether err is no server's word: the call's
// connection failed or its answer did not come.
func unanswered(err error) bool {
	if errors.Is(err, errBulkTransport) {
		return true
	}
	if status.Code(err) != codes.Unavailable && status.Code(err) != codes.DeadlineExceeded {
		return false
	}
	var re *datapath.RemoteError
	return !errors.As(datapath.FromStatus(err), &re) || re.Sentinel == nil
}

// connAt returns the gRPC connection to the server at addr: Dial's, or one
// of the group's, dialed at first use.
func (c *Client) connAt(addr string) (*grpc.ClientConn, error) {
	if addr == c.addr {
		return c.conn, nil
	}
	g := &c.group
	g.mu.Lock()
	defer g.mu.Unlock()
	if conn := g.conns[addr]; conn != nil {
		return conn, nil
	}
	conn, err := c.dialAt(addr)
	if err != nil {
		return nil, err
	}
	g.conns[addr] = conn
	return conn, nil
}

// dialAt prepares a gRPC connection to another server of the group, with
// Dial's options and, over TLS, that server's name to verify.
func (c *Client) dialAt(addr string) (*grpc.ClientConn, error) {
	if _, err := c.opts.transport(addr); err != nil {
		return nil, fmt.Errorf("dial datapath %s: %w", addr, err)
	}
	opts := c.dialOpts
	if cfg := c.tlsFor(addr, false); cfg != nil {
		opts = append(opts[:len(opts):len(opts)], grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	}
	conn, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("dial datapath %s: %w", addr, err)
	}
	return conn, nil
}

// tlsFor is the client's TLS configuration for the server at addr (its host
// verified), for the bulk channel or gRPC; nil in plaintext.
func (c *Client) tlsFor(addr string, bulk bool) *tls.Config {
	base := c.tlsCfg
	if bulk {
		base = c.bulkTLS
	}
	if base == nil || addr == c.addr {
		return base
	}
	cfg := base.Clone()
	if host, _, err := net.SplitHostPort(addr); err == nil {
		cfg.ServerName = host
	}
	return cfg
}

// holderError says, in err, a call's final error at addr about vol, that
// the volume is unavailable because the server holding its data does not
// answer, naming that server, when the call was left unanswered in a group:
// at a holder another server named, or at the Dial address once a server
// named it the holder or every server was asked. A refusal of the server's
// own is returned as it is, and so is any error of a client of one server.
func (c *Client) holderError(vol, addr string, err error) error {
	var re *datapath.RemoteError
	if vol == "" || len(c.group.servers) < 2 || (errors.As(err, &re) && re.Sentinel != nil) {
		return err
	}
	c.holders.mu.Lock()
	guessed := c.holders.guessed[vol]
	named := c.holders.namedDial[vol]
	c.holders.mu.Unlock()
	switch {
	case addr == c.addr && named:
		// A server named the Dial address the holder: it is.
	case guessed:
		return fmt.Errorf("volume %s is unavailable: no datapath server of the group answered for it (the last asked: %s): %w", vol, addr, err)
	case addr == c.addr && !named:
		return err
	}
	return fmt.Errorf("volume %s is unavailable: its data is on datapath server %s, which does not answer; its I/O and attach wait for that server, "+
		"and volumes other servers hold are not affected: %w", vol, addr, err)
}
