package raftstate

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/devcerts"
)

// freeAddrs returns n loopback addresses with ports free right now.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	out := make([]string, n)
	for i := range out {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		out[i] = l.Addr().String()
		defer l.Close()
	}
	return out
}

// TestStart_EveryLeaderRecordsItself: three servers started at once with
// the same peers (as `serve --raft-peers` does on three nodes). Only the
// first leader records itself at its start; each follower still reports
// its own row (GroupStatus), and a server that becomes the leader later
// records itself (its node and datapath address), so that clients
// refused by a follower learn where the new leader serves.
func TestStart_EveryLeaderRecordsItself(t *testing.T) {
	groups, peers, dpAddrs := startThree(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, g := range groups {
		self := 0
		for _, row := range g.GroupStatus() {
			if row.Self {
				self++
				if row.ID != peers[i].ID || row.Address != dpAddrs[i] || row.Role == "" {
					t.Errorf("%s's own row: %+v", peers[i].ID, row)
				}
			}
		}
		if self != 1 {
			t.Errorf("%s reports %d rows of its own, want 1: %+v", peers[i].ID, self, g.GroupStatus())
		}
	}
	first := leaderOf(t, groups, -1)
	if err := groups[first].TransferLeadership(); err != nil {
		t.Fatal(err)
	}
	next := leaderOf(t, groups, first)
	deadline := time.Now().Add(5 * time.Second)
	for {
		members, err := groups[next].Servers(ctx)
		recorded := false
		for _, m := range members {
			recorded = recorded || (m.ID == peers[next].ID && m.DatapathAddress == dpAddrs[next] && m.Node == peers[next].ID)
		}
		if err == nil && recorded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new leader %s did not record itself within 5 s: %+v, %v", peers[next].ID, members, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startThree starts three servers at once with the same peers, as
// `serve --raft-peers` does on three nodes; with advertise, each listens on
// 127.0.0.1 and the peers name it localhost (Config.Advertise).
func startThree(t *testing.T, advertise bool) (groups []*Group, peers []Server, dpAddrs []string) {
	return startThreeWith(t, threeOpts{advertise: advertise})
}

// threeOpts: startThreeWith's options.
type threeOpts struct {
	advertise bool
	peer      *PeerTLS // each server's Raft over this TLS
	// full: the peer list gives each server's node and datapath address
	// too (`serve --raft-peers ID=RAFT@DATAPATH`).
	full    bool
	metrics []*Metrics // server i's, when set
}

// startThreeWith is startThree as o says.
func startThreeWith(t *testing.T, o threeOpts) (groups []*Group, peers []Server, dpAddrs []string) {
	t.Helper()
	advertise, peer, full := o.advertise, o.peer, o.full
	raftAddrs, dpAddrs := freeAddrs(t, 3), freeAddrs(t, 3)
	for i := range raftAddrs {
		addr := raftAddrs[i]
		if advertise {
			_, port, _ := net.SplitHostPort(addr)
			addr = net.JoinHostPort("localhost", port)
		}
		peers = append(peers, Server{ID: fmt.Sprintf("node-%d", i+1), RaftAddress: addr})
		if full {
			peers[i].Node, peers[i].DatapathAddress = peers[i].ID, dpAddrs[i]
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	groups = make([]*Group, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			self := Server{ID: peers[i].ID, RaftAddress: peers[i].RaftAddress, Node: peers[i].ID, DatapathAddress: dpAddrs[i]}
			cfg := Config{ID: self.ID, Dir: t.TempDir(), Address: raftAddrs[i], Timing: testTiming, LogOutput: io.Discard, ApplyTimeout: 2 * time.Second}
			if advertise {
				cfg.Advertise = peers[i].RaftAddress
			}
			cfg.PeerTLS = peer
			if o.metrics != nil {
				cfg.Metrics = o.metrics[i]
			}
			groups[i], errs[i] = Start(ctx, cfg, self, peers)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("start %s: %v", peers[i].ID, err)
		}
		t.Cleanup(func() { _ = groups[i].Close() })
	}
	return groups, peers, dpAddrs
}

// TestStart_Advertise: three servers that listen on 127.0.0.1 and are
// known to each other by the name localhost (as a StatefulSet's pods
// listen on 0.0.0.0 and are known by their DNS names) form a group and
// commit; each is recorded at its advertised name. A bad advertised
// address is refused before anything listens.
func TestStart_Advertise(t *testing.T) {
	groups, peers, _ := startThree(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l := leaderOf(t, groups, -1)
	if _, err := groups[l].CreateVolumeWithID(ctx, "vol-0123456789abcdef", "pvc-1", 1<<20, datapath.AccessRWO, peers[l].ID); err != nil {
		t.Fatalf("create through the leader of the advertised group: %v", err)
	}
	if got := groups[l].Address(); got != peers[l].RaftAddress {
		t.Errorf("the leader's transport says %s, want its advertised %s", got, peers[l].RaftAddress)
	}
	want := map[string]string{}
	for _, p := range peers {
		want[p.ID] = p.RaftAddress
	}
	members, err := groups[l].Servers(ctx)
	if err != nil || len(members) == 0 {
		t.Fatalf("members %+v: %v", members, err)
	}
	for _, m := range members {
		if m.RaftAddress != want[m.ID] {
			t.Errorf("member %s recorded at %s, want its advertised %s", m.ID, m.RaftAddress, want[m.ID])
		}
	}
	for _, bad := range []string{"localhost", "localhost:0", ":9601"} {
		_, err := Open(Config{ID: "x", Dir: t.TempDir(), Address: "127.0.0.1:0", Advertise: bad, LogOutput: io.Discard})
		if !errors.Is(err, datapath.ErrInvalidArgument) || !strings.Contains(err.Error(), "raft advertise address") {
			t.Errorf("advertise %q: %v, want ErrInvalidArgument naming the advertise address", bad, err)
		}
	}
}

// leaderOf waits up to 5 s for a leader among groups other than not.
func leaderOf(t *testing.T, groups []*Group, not int) int {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for i, g := range groups {
			if i != not && g.IsLeader() {
				return i
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no leader other than %d within 5 s", not)
	return -1
}

// TestStart_PeerTLS: three servers whose Raft connections are mutual TLS,
// each presenting the servers' shared certificate (for localhost) both
// ways, form a group and commit. A peer that presents no certificate, one
// of another CA, or one of the same CA not valid for the servers' name is
// refused before it is heard.
func TestStart_PeerTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := devcerts.NewCA("servers", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.Issue([]string{"localhost"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	files := devcerts.Files{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key")}
	for f, b := range map[string][]byte{files.CA: ca.CertPEM(), files.Cert: cert, files.Key: key} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	accept, dial, err := datapath.PeerTLS(files.Cert, files.Key, files.CA, "localhost")
	if err != nil {
		t.Fatal(err)
	}
	groups, peers, _ := startThreeWith(t, threeOpts{advertise: true, peer: &PeerTLS{Accept: accept, Dial: dial}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l := leaderOf(t, groups, -1)
	if _, err := groups[l].CreateVolumeWithID(ctx, "vol-0123456789abcdef", "pvc-1", 1<<20, datapath.AccessRWO, peers[l].ID); err != nil {
		t.Fatalf("create through the leader of a group over TLS: %v", err)
	}

	other, err := devcerts.NewCA("other", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	otherCert, otherKey, _ := other.Issue([]string{"localhost"}, time.Hour)
	// rogue connects with a certificate (nil: none) and starts an RPC; it
	// returns nil when the server waits for the rest (heard), the error
	// otherwise (the handshake or the connection refused).
	rogue := func(certPEM, keyPEM []byte) error {
		c := &tls.Config{RootCAs: dial.RootCAs, ServerName: "localhost", MinVersion: tls.VersionTLS12}
		if certPEM != nil {
			pair, err := tls.X509KeyPair(certPEM, keyPEM)
			if err != nil {
				t.Fatal(err)
			}
			c.Certificates = []tls.Certificate{pair}
		}
		conn, err := tls.Dial("tcp", peers[l].RaftAddress, c)
		if err != nil {
			return err
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := conn.Write([]byte{0}); err != nil {
			return err
		}
		_, err = conn.Read(make([]byte, 1))
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil
		}
		if err == nil {
			err = errors.New("answered")
		}
		return err
	}
	if err := rogue(nil, nil); err == nil {
		t.Error("a peer without a certificate was heard")
	}
	if err := rogue(otherCert, otherKey); err == nil {
		t.Error("a peer with another CA's certificate was heard")
	}
	elsewhere, elsewhereKey, _ := ca.Issue([]string{"manager.example"}, time.Hour)
	if err := rogue(elsewhere, elsewhereKey); err == nil {
		t.Error("a peer with a certificate of the same CA for another name was heard")
	}
	if err := rogue(cert, key); err != nil {
		t.Errorf("a peer with the servers' certificate was not heard: %v", err)
	}
}

// TestStart_PeerTLS_IPAddresses: the same over servers known by their IP
// addresses (the sandbox's nodes), the shared certificate naming the IP.
func TestStart_PeerTLS_IPAddresses(t *testing.T) {
	dir := t.TempDir()
	files, err := devcerts.WriteServerFiles(dir, []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	accept, dial, err := datapath.PeerTLS(files.Cert, files.Key, files.CA, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	groups, peers, _ := startThreeWith(t, threeOpts{peer: &PeerTLS{Accept: accept, Dial: dial}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l := leaderOf(t, groups, -1)
	if _, err := groups[l].CreateVolumeWithID(ctx, "vol-0123456789abcdef", "pvc-1", 1<<20, datapath.AccessRWO, peers[l].ID); err != nil {
		t.Fatalf("create through the leader of a group over TLS by IP: %v", err)
	}
	if err := groups[l].TransferLeadership(); err != nil {
		t.Fatalf("hand over to a follower over TLS by IP: %v", err)
	}
}
