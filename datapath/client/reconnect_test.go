package client_test

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
)

// flakyProxy forwards a fixed address to the server and can go away (its
// listener and every connection closed) and come back on the same address,
// as a restarted datapath does.
type flakyProxy struct {
	addr, to string
	mu       sync.Mutex
	lis      net.Listener
	conns    []net.Conn
}

func (p *flakyProxy) up(t *testing.T) {
	t.Helper()
	lis, err := net.Listen("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.lis, p.addr = lis, lis.Addr().String()
	p.mu.Unlock()
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", p.to)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(s, c); s.Close() }()
			go func() { _, _ = io.Copy(c, s); c.Close() }()
		}
	}()
}

func (p *flakyProxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lis.Close()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// After the datapath was away for a while, a client reaches it again within
// about a second of its return (its reconnect backoff stops growing at 1 s),
// not after gRPC's default backoff (here about 4 s): an engine silent past the
// storage-isolation threshold (3 s) after a short datapath restart gets its
// node fenced.
func TestClient_ReconnectsSoonAfterTheServerReturns(t *testing.T) {
	srv := datapathtest.Start(t, datapath.Options{})
	p := &flakyProxy{addr: "127.0.0.1:0", to: srv.Addr}
	p.up(t)
	t.Cleanup(p.down)
	c, err := client.Dial(context.Background(), p.addr, srv.NodeToken("node-1"), client.WithRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	beat := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		return c.Heartbeat(ctx, "node-1")
	}
	if err := beat(); err != nil {
		t.Fatal(err)
	}
	p.down()
	away := time.Now()
	for time.Since(away) < 6*time.Second { // the client keeps trying, as the engine's heartbeats do
		_ = beat()
		time.Sleep(100 * time.Millisecond)
	}
	p.up(t)
	back := time.Now()
	for beat() != nil {
		if time.Since(back) > 10*time.Second {
			t.Fatal("no heartbeat got through 10 s after the server came back")
		}
		time.Sleep(20 * time.Millisecond)
	}
	took := time.Since(back)
	t.Logf("first heartbeat through %s after the server came back", took.Round(time.Millisecond))
	if took > 2500*time.Millisecond {
		t.Errorf("reconnected %s after the server came back; want about a second at most", took.Round(time.Millisecond))
	}
}
