package csi

import (
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
// returns a client to it that calls as the controller (and does a test's I/O
// as the node's engine); both stop when the test ends.
func startRealDatapath(t testing.TB, capacity int64) *datapathtest.Roles {
	t.Helper()
	srv := datapathtest.Start(t, datapath.Options{Capacity: capacity, Logger: discardLogger()})
	return srv.DialRoles(t)
}

// The datapath client is what the manager passes to NewServer.
var _ Volumes = (*client.Client)(nil)
