package csi

import (
	"context"
	"testing"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
)

// sanityBackends lists the datapaths TestSanity runs against: the in-memory
// double, and the real datapath server (in-process, on 127.0.0.1:0 with a
// temporary data directory) reached through the real client.
func sanityBackends() []sanityBackend {
	return []sanityBackend{
		{name: "fake datapath", start: func(*testing.T) Volumes { return newFakeVolumes() }},
		{name: "real datapath", start: func(t *testing.T) Volumes { return startRealDatapath(t, 1<<40) }},
	}
}

// startRealDatapath starts a datapath server with the given capacity and
// returns a client to it; both stop when the test ends.
func startRealDatapath(t testing.TB, capacity int64) *client.Client {
	t.Helper()
	srv := datapathtest.Start(t, datapath.Options{Capacity: capacity, Logger: discardLogger()})
	c, err := client.Dial(context.Background(), srv.Addr, srv.Token)
	if err != nil {
		t.Fatalf("dial datapath %s: %v", srv.Addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// The datapath client is what the manager passes to NewServer.
var _ Volumes = (*client.Client)(nil)
