package datapathtest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath/client"
)

// Roles is one client that makes every call as the identity that makes it in
// production: reads, writes, flushes, heartbeats and Leave as the engine of
// the node the call names (with that node's token), everything else as the
// controller. For tests written against one client that play the manager
// and several engines at once; the server still authorizes each call.
type Roles struct {
	*client.Client // the controller
	srv            *Server
	opts           []client.Option
	mu             sync.Mutex
	nodes          map[string]*client.Client
	t              testing.TB
}

// DialRoles dials the controller now and each node's engine at its first
// call; t.Cleanup closes them all.
func (s *Server) DialRoles(t testing.TB, opts ...client.Option) *Roles {
	t.Helper()
	c, err := client.Dial(context.Background(), s.Addr, s.Token, opts...)
	if err != nil {
		t.Fatalf("dial datapath %s: %v", s.Addr, err)
	}
	r := &Roles{Client: c, srv: s, opts: opts, nodes: map[string]*client.Client{}, t: t}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// Node is the client of node's engine.
func (r *Roles) Node(node string) *client.Client {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.nodes[node]; c != nil {
		return c
	}
	c, err := client.Dial(context.Background(), r.srv.Addr, r.srv.NodeToken(node), r.opts...)
	if err != nil {
		r.t.Errorf("dial datapath %s as %s: %v", r.srv.Addr, node, err)
		return r.Client // the call is then refused as the controller's
	}
	r.nodes[node] = c
	return c
}

// Close closes every connection.
func (r *Roles) Close() error {
	r.mu.Lock()
	for _, c := range r.nodes {
		_ = c.Close()
	}
	r.nodes = map[string]*client.Client{}
	r.mu.Unlock()
	return r.Client.Close()
}

// ReadAt reads as node's engine.
func (r *Roles) ReadAt(ctx context.Context, volumeID, node string, epoch uint64, off int64, n int) ([]byte, error) {
	return r.Node(node).ReadAt(ctx, volumeID, node, epoch, off, n)
}

// WriteAt writes as node's engine.
func (r *Roles) WriteAt(ctx context.Context, volumeID, node string, epoch uint64, off int64, p []byte) error {
	return r.Node(node).WriteAt(ctx, volumeID, node, epoch, off, p)
}

// Flush flushes as node's engine.
func (r *Roles) Flush(ctx context.Context, volumeID, node string, epoch uint64) error {
	return r.Node(node).Flush(ctx, volumeID, node, epoch)
}

// Heartbeat heartbeats as node's engine.
func (r *Roles) Heartbeat(ctx context.Context, node string) error {
	return r.Node(node).Heartbeat(ctx, node)
}

// Leave announces node's graceful stop as its engine.
func (r *Roles) Leave(ctx context.Context, node string, d time.Duration) (time.Time, error) {
	return r.Node(node).Leave(ctx, node, d)
}
